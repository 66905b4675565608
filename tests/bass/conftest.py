import gc
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import bass.runtime.graphs
from bass.config import EngineConfig, SamplingParams
from bass.engine import Engine
from bass.engine.batch import Batch
from bass.models.loader import load_model
from bench.synthetic import random_feature_draft


@pytest.fixture(scope="session")
def tiny_engine(tiny_dir):
    """engine(family, draft_seed=None, ...) -> Engine over a tiny model, cached per arguments."""
    made = {}

    def get(family: str = "llama", draft_seed: int | None = None, head_scale: float = 30.0,
            feature_seed: int | None = None, feature_vocab: int | None = None, **cfg) -> Engine:
        """`draft_seed`: another tiny model as draft; `feature_seed`: a random feature draft, proposing from
        `feature_vocab` random tokens if given."""
        key = (family, draft_seed, head_scale, feature_seed, feature_vocab, tuple(sorted(cfg.items())))
        if key not in made:
            target = str(tiny_dir(family, 0, head_scale))
            draft = str(tiny_dir(family, draft_seed, head_scale)) if draft_seed is not None else None
            if feature_seed is None:
                made[key] = Engine(EngineConfig(target=target, draft=draft, **cfg))
            else:  # built on the CPU unless cfg names a device: the engine must run where its models are
                loaded = load_model(target, device=cfg.get("device", "cpu"))
                made[key] = Engine(EngineConfig(target=target, draft=None, **{"device": "cpu", **cfg}), target=loaded,
                                   draft=random_feature_draft(loaded, feature_seed, feature_vocab))
        return made[key]

    return get


# ---- the real models: one alive at a time ----
class OneAtATime:
    """The real models a test session holds, one at a time: asking for one frees the one held before. The embedded
    1.5B engine holds about 7 GB on the CPU (float32); beside a second engine or transformers' reference model the
    session would need twice that. What was derived from a model (`memo`) goes with it."""

    def __init__(self) -> None:
        self.key: str | None = None
        self.model: object = None
        self.memos: dict[str, object] = {}

    def get(self, key: str, make: Callable[[], object]) -> object:
        if self.key != key:
            self.free()
            self.model, self.key = make(), key
        return self.model

    def memo(self, key: str, make: Callable[[], object]) -> object:
        """`make()` once while the model held now stays held."""
        if key not in self.memos:
            self.memos[key] = make()
        return self.memos[key]

    def free(self) -> None:
        self.key = self.model = None
        self.memos.clear()
        gc.collect()


_HELD = OneAtATime()


@pytest.fixture(scope="session")
def real_models() -> OneAtATime:
    """The session's one real model at a time: `real_models.get(key, make)`, `real_models.free()`."""
    return _HELD


def pytest_runtest_teardown(item, nextitem):
    """The tests outside tests/bass load no real model: what these held goes before the first of them runs."""
    if nextitem is None or Path(__file__).parent not in Path(nextitem.path).parents:
        _HELD.free()


# the embedded target (Qwen2.5-Coder-1.5B-Instruct): about 15 s and 7 GB a load on this project's CPU
EMBEDDED_PROMPTS = [
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "from typing import List\n\n\ndef mean(xs: List[float]) -> float:\n",
    "def is_palindrome(s: str) -> bool:\n",
]


@pytest.fixture
def embedded_engine(real_models) -> Engine:
    """The engine over the embedded target, loaded once while no other real model is asked for."""
    return real_models.get("embedded", lambda: Engine(EngineConfig(target="embedded")))


@pytest.fixture
def embedded_greedy(real_models, embedded_engine):
    """(prompts, params, regular decoding's result): the greedy tokens each drafter's BASS must reproduce, decoded
    once for all of them. A step of the three prompts costs about 2 s on a 2-core CPU; 12 tokens take a few drafting
    rounds."""
    params = SamplingParams(max_new_tokens=12)
    regular = real_models.memo("greedy", lambda: embedded_engine.generate(EMBEDDED_PROMPTS, k=1, params=params,
                                                                          method="regular"))
    return EMBEDDED_PROMPTS, params, regular


# ---- CUDA graphs faked on the CPU ----
def _tensors(x) -> list:
    if isinstance(x, tuple):
        return [t for y in x for t in _tensors(y)]
    return [x] if isinstance(x, torch.Tensor) else []


class _Replayed:
    """A CUDA graph faked on the CPU: replays into the first call's outputs, as a graph into its static buffers."""

    def __init__(self, fn):
        self.fn, self.out = fn, fn()

    def replay(self):
        for static, new in zip(_tensors(self.out), _tensors(self.fn()), strict=True):
            static.copy_(new)


@pytest.fixture
def fake_graphs(monkeypatch):
    """`bass.runtime.graphs.capture` faked with `_Replayed`; the process's capture counters restored after the test."""
    for counter in ("_captures", "_deferred"):
        monkeypatch.setattr(bass.runtime.graphs, counter, getattr(bass.runtime.graphs, counter))
    monkeypatch.setattr(bass.runtime.graphs, "_shapes", list(bass.runtime.graphs._shapes))

    def capture(fn, pool=None, device=None, deferred=False):
        bass.runtime.graphs._captures += 1
        bass.runtime.graphs._deferred += deferred
        graph = _Replayed(fn)
        return graph, graph.out

    monkeypatch.setattr(bass.runtime.graphs, "capture", capture)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", object)


@pytest.fixture
def joins(monkeypatch):
    """Rows running in the batch at each join (0: the request started a batch)."""
    seen: list[int] = []

    join = Batch.join

    def spy(self, request, *args):
        seen.append(sum(not s.finished for s in self.state.live))
        return join(self, request, *args)

    monkeypatch.setattr(Batch, "join", spy)
    return seen
