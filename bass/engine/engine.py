"""The engine: loads the models once and serves any number of callers, each a request in one line.

    engine = Engine(EngineConfig(target="embedded"))
    for event in engine.stream("def fib(n):", k=8, params=SamplingParams(max_new_tokens=64)):
        ...
    result = engine.generate(["def f(x):", "def g(y):"], k=4, params=..., method="regular")

All sequences of all prompts decode in one ragged batch; the k samples of a prompt share its prefill
and its K/V. Requests from other threads join that batch between rounds (`bass.engine.scheduler`).
Methods: "bass" (batched speculative), "regular" (batched decoding, no draft), "single" (speculative
decoding one sequence at a time) — the baselines run through the same round loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from bass.config import MAX_PROMPT_TOKENS, DraftLengthConfig, EngineConfig, SamplingParams, check_draft_file
from bass.drafters import DrafterSettings, DraftModel, build_drafter
from bass.drafters.base import Drafter, NoDrafter
from bass.engine import validate, warmup
from bass.engine.runner import Runner
from bass.engine.scheduler import Scheduler
from bass.engine.tuning import Tuning
from bass.events import GenerationEvent, GenerationResult
from bass.models import linear
from bass.models.draft import DRAFT_FILE, DRAFT_SHA256, shipped_draft
from bass.models.feature_draft import FeatureDraft
from bass.models.loader import LoadedModel, check_same_vocab, load_model
from bass.runtime.attention import available_backends, get_backend, resolve_backend
from bass.runtime.cache import CacheArena
from bass.runtime.device import device_line, resolve_device, resolve_dtype
from bass.runtime.graphs import BATCH_BUCKETS, WIDTH_BUCKETS, GraphedModel
from bass.runtime.prefill_graphs import PrefillGraphs

# what `Engine.warm_draft_lengths` drafts: 1..8, then one length per verify width bucket up to 16 (L = w - 1), so
# that no draft length up to 15, fixed or the heuristic's, meets a verify width without a graph inside a request
WARM_LENGTHS = tuple(sorted(set(range(1, 9)) | {w - 1 for w in WIDTH_BUCKETS if 10 < w <= 16}))


_CUDA_LOCK = threading.RLock()
# the K/V storage reserved at load where graphs are captured: the largest batch (rows of k = 1 prompts each) of
# HumanEval-sized prompts and answers; a request beyond it moves the storage, and its graphs are captured anew
RESERVE_PROMPT_TOKENS, RESERVE_NEW_TOKENS = 1024, 512


def _load(role: str, spec: str, kwargs: dict) -> LoadedModel:
    try:
        return load_model(spec, **kwargs)
    except ValueError as err:
        raise ValueError(f"{role} model {spec!r}: {err}") from None


class Engine:
    """One target (and optionally one draft model), loaded once, serving any number of requests."""

    def __init__(self, config: EngineConfig | None = None, *, progress: Callable[[str, float], None] | None = None,
                 target: LoadedModel | None = None, draft: LoadedModel | None = None, tuning: Tuning | None = None):
        self.config = config or EngineConfig()
        self.tuning = tuning or Tuning()
        self.device = resolve_device(self.config.device)
        self.dtype = resolve_dtype(self.config.dtype, self.device)
        # held by whoever runs the models (the device thread, a warm-up, a load): on CUDA one for the process, since
        # a graph capture fails if another thread launches work meanwhile, another engine's included
        self.device_lock = _CUDA_LOCK if self.device.type == "cuda" else threading.RLock()
        with self.device_lock:
            self._setup(target, draft, progress)
        self.look_ahead = self.device.type == "cuda" if self.config.look_ahead is None else self.config.look_ahead
        self.runner = Runner(self.target, self._target_fwd, self._prefill_graphs, self._arena, frozenset(self.eos_ids),
                             self.attention, self.new_drafter, self.config.max_batch_rows, self.device_lock,
                             self.capture_queued)
        self.scheduler = Scheduler(self.runner, validate.memory_budget(self.config.memory_budget_gb, self.device))
        models = tuple(m.config for m in (self.target, self.draft) if m is not None)
        drafter = self.default_drafter if self.config.drafter == "auto" else self.config.drafter
        prompt_limit = self.config.max_prompt_tokens or MAX_PROMPT_TOKENS.get(self.device.type,
                                                                              MAX_PROMPT_TOKENS["cpu"])
        self.serving = validate.Serving(tuple(self.available_drafters()), drafter, self.backend, self.attention,
                                        self.target.config.max_position_embeddings, prompt_limit, models,
                                        self.dtype, self.look_ahead, self.config.draft_length)
        if self.captures_graphs and self.tuning.warm_up:
            if progress:
                progress("capturing and timing the graphs", 0.9)
            self.warm_up()

    def _setup(self, target: LoadedModel | None, draft: LoadedModel | None,
               progress: Callable[[str, float], None] | None) -> None:
        load = dict(device=self.device, dtype=self.dtype, progress=progress)
        if draft is None:
            check_draft_file(self.config.draft)
        self.target = target or _load("target", self.config.target, load)
        self.draft = draft or self.load_draft(self.config.draft, load)
        if self.draft is not None:
            check_same_vocab(self.target, self.draft)
        if self.config.drafter == "model" and self.draft is None:
            raise ValueError(f"drafter='model' but no draft ships for target {self.target.name!r}: pass "
                             "draft=<a model of its family or a trained draft file>, or choose drafter='ngram'")
        self.tokenizer = self.target.tokenizer
        self.backend = resolve_backend(self.config.backend, self.device)  # a request's default backend
        get_backend(self.backend, self.device)  # fail at start, not at the first request
        self._arena, self._draft_arena = CacheArena(persistent=False), CacheArena(persistent=False)
        self._target_fwd, self._draft_fwd = self.target.model, None
        # the target's and the draft's prefills, with static shapes (`use_static_shapes`)
        self._prefill_graphs = self._draft_prefill_graphs = None
        self.projection_report: list[dict] = []  # what `bass.models.linear.tune` measured at load
        if self.device.type == "cuda" and self.tuning.tune_projections:
            self.tune_projections()
        if self.device.type == "cuda" and self.config.cuda_graphs:
            self.use_static_shapes(capture=True)

    def load_draft(self, spec: str | None, load: dict) -> LoadedModel | None:
        """The draft of `spec`: None, "auto" (what ships for the target), a trained draft file, or a model."""
        if spec is None:
            return None
        if spec == "auto" or spec.endswith(".safetensors"):
            check_draft_file(spec)
            path = DRAFT_FILE if spec == "auto" else Path(spec).expanduser()
            if load["progress"]:
                load["progress"]("deriving the draft", 0.0)
            model = shipped_draft(self.target.model, path, DRAFT_SHA256 if spec == "auto" else None)
            if model is None:
                if spec != "auto":
                    raise ValueError(f"draft file {spec!r} was trained for another target than "
                                     f"{self.target.name!r}")
                return None
            return LoadedModel(model, self.target.tokenizer, model.config, f"{self.target.name}-draft")
        return _load("draft", spec, load)

    @property
    def target_forward(self) -> Callable:
        """What the round loop calls for the target: the model, or its `GraphedModel` (CUDA graphs)."""
        return self._target_fwd

    @property
    def default_drafter(self) -> str:
        """What drafter="auto" means here: the trained draft when one is loaded, else n-gram lookup."""
        return "model" if self.draft is not None else "ngram"

    def tune_projections(self) -> list[dict]:
        """Time cuBLAS and the skinny GEMM for every projection shape of the models on this device and use
        the faster from now on (`bass.models.linear`; graphs captured before keep theirs)."""
        models = [self.target.model] + ([self.draft.model] if self.draft is not None else [])
        self.projection_report = [row for m in models for row in linear.tune(m)]
        return self.projection_report

    def use_static_shapes(self, capture: bool) -> None:
        """Run decode-time forwards through `GraphedModel`: persistent caches, bucketed padded shapes,
        and (capture=True, CUDA) replayed CUDA graphs. capture=False runs the same path eagerly."""
        self._arena, self._draft_arena = CacheArena(persistent=True), CacheArena(persistent=True)
        self._target_fwd = GraphedModel(self.target.model, self._arena, use_graphs=capture)
        if self.tuning.prefill_graphs:
            self._prefill_graphs = PrefillGraphs(self.target.model, use_graphs=capture)
            if self.draft is not None:
                features = self.target.config.hidden_size if isinstance(self.draft.model, FeatureDraft) else None
                self._draft_prefill_graphs = PrefillGraphs(self.draft.model, use_graphs=capture, features=features)
        if self.draft is not None:
            self._draft_fwd = GraphedModel(self.draft.model, self._draft_arena, use_graphs=capture)
        if hasattr(self, "runner"):  # (a change after load: the device thread runs the new forwards)
            r = self.runner
            r.target_forward, r.arena, r.prefill_graphs = self._target_fwd, self._arena, self._prefill_graphs

    # ---- what the UI may offer -------------------------------------------------------------------
    def available_backends(self) -> list[str]:
        return available_backends(self.device)

    def available_drafters(self) -> list[str]:
        return ["ngram", "layer-skip"] + (["model"] if self.draft is not None else [])

    @property
    def eos_ids(self) -> set[int]:
        ids = set(self.target.config.eos_token_ids)
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        return ids

    # ---- requests --------------------------------------------------------------------------------
    def encode(self, prompts: str | Sequence[str] | Sequence[Sequence[int]], chat: bool = False) -> list[list[int]]:
        """Token ids of each prompt (text, or already token ids), after the validation every request gets."""
        if isinstance(prompts, (bytes, bytearray)) or (isinstance(prompts, (list, tuple)) and prompts
                                                       and isinstance(prompts[0], (bytes, bytearray))):
            raise ValueError("a prompt must be text (str) or a list of token ids, not bytes: decode it first, "
                             "e.g. prompt.decode('utf-8')")
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        if not prompts:
            raise ValueError("prompts must be a non-empty string or list of strings")
        out = []
        for i, p in enumerate(prompts):
            if not isinstance(p, str):
                ids = list(p)
                if not ids or not all(isinstance(t, int) and 0 <= t < self.target.config.vocab_size for t in ids):
                    raise ValueError(f"prompt {i} must be text or a non-empty list of token ids in "
                                     f"0 .. {self.target.config.vocab_size - 1}")
                out.append(ids)
            elif not p.strip():
                raise ValueError(f"prompt {i} is empty: type a coding prompt or pick a HumanEval problem")
            elif chat and getattr(self.tokenizer, "chat_template", None):
                p = self.tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                                       add_generation_prompt=True)
                out.append(self.tokenizer.encode(p, add_special_tokens=False))
            else:
                out.append(self.tokenizer.encode(p))
        return out

    def stream(self, prompts: str | Sequence[str] | Sequence[Sequence[int]], *, k: int = 1,
               params: SamplingParams | None = None,
               method: str = "bass", drafter: str | Drafter | None = None, backend: str | None = None,
               draft_length: DraftLengthConfig | None = None, chat: bool = False,
               cancel: threading.Event | None = None, look_ahead: bool | None = None,
               exclusive: bool = False) -> Iterator[GenerationEvent]:
        """Generate k samples per prompt; yield "queued" events while the request waits for room, a "prefill"
        event, one "round" event per round it takes part in, then "done". Safe from any number of threads.

        `drafter` names a drafter ("ngram", "model", "layer-skip") or is a `Drafter` instance (method "bass",
        run alone). `look_ahead` overrides `EngineConfig.look_ahead`. `exclusive` runs the request alone (a
        measurement). Setting `cancel` ends the request: at once while it waits, before its next round once it
        runs; a caller that stops reading the stream cancels it too.
        """
        options = validate.Options(k, params, method, drafter, backend, draft_length, cancel, look_ahead, exclusive)
        request = validate.request(self.serving, self.scheduler.budget, self.encode(prompts, chat), options)
        self.scheduler.submit(request)
        yield from self.scheduler.events(request)

    def generate(self, prompts: str | Sequence[str], **kwargs) -> GenerationResult:
        """Like `stream`, but return only the final result."""
        result = None
        for event in self.stream(prompts, **kwargs):
            if event.kind == "done":
                result = event.result
        if result is None:
            raise RuntimeError("generation ended without a result")  # stream always ends with "done"
        return result

    def close(self) -> None:
        """Serve what is in line, then end the device thread (it also ends by itself when idle)."""
        self.scheduler.close()

    # ---- what a batch uses (`bass.engine.batch`) ----------------------------------------------------------
    def attention(self, backend: str | None = None) -> Callable:
        """The attention function of `backend` (default: the engine's)."""
        return get_backend(backend or self.backend, self.device)

    @property
    def arena(self) -> CacheArena:
        return self._arena

    @property
    def prefill_graphs(self) -> PrefillGraphs | None:
        return self._prefill_graphs

    def new_drafter(self, name: str, backend: str | None = None) -> Drafter:
        """A fresh drafter `name` over this engine's models, to pass as `stream(..., drafter=...)` (one batch)."""
        if name == "none":
            return NoDrafter()
        if name not in self.available_drafters():
            raise ValueError(f"drafter {name!r} is not available here; choose one of {self.available_drafters()}")
        return self._drafter(name, self.attention(backend))

    def _drafter(self, name: str, attn: Callable) -> Drafter:
        c = self.config
        scale = c.draft_temperature
        if scale is None:  # the draft's own (its file's), else the target's processing
            scale = getattr(self.draft.model, "temperature_scale", 1.0) if name == "model" and self.draft else 1.0
        draft = None if self.draft is None else DraftModel(self.draft.model, self._draft_fwd, self._draft_arena,
                                                           self._draft_prefill_graphs)
        return build_drafter(name, self._target_fwd, draft, attn,
                             DrafterSettings(c.ngram_max, c.ngram_min, c.layer_skip_layers, scale,
                                             self.tuning.proposal_graphs))

    def capture_queued(self, stop: Callable[[], bool] | None = None) -> None:
        """Capture the CUDA graphs of the shapes that ran in wider graphs (`bass.runtime.graphs`): between batches,
        where they cost no request's latency; `stop` (a request is waiting) leaves the rest for later."""
        for fwd in (self._target_fwd, self._draft_fwd, self._prefill_graphs, self._draft_prefill_graphs):
            capture = getattr(fwd, "capture_queued", None)  # by attribute: a wrapper of a GraphedModel passes it on
            if capture is not None:
                capture() if stop is None else capture(stop)

    @property
    def captures_graphs(self) -> bool:
        """Whether decode-time forwards replay CUDA graphs (`use_static_shapes(capture=True)`)."""
        return bool(getattr(self._target_fwd, "use_graphs", False))

    def warm_up(self) -> None:
        """At load, with CUDA graphs: reserve the K/V storage of the largest batch, capture the one-prompt prefills
        and every batch bucket's rounds at each draft length the cost table prices, and time them into the table
        the "auto" draft length reads (`bass.engine.warmup`)."""
        rows = self.config.max_batch_rows
        for arena, model in ((self._arena, self.target.model), (self._draft_arena, self.draft and self.draft.model)):
            if model is not None:
                arena.reserve(model.new_cache(1, 1), rows, RESERVE_PROMPT_TOKENS, rows, RESERVE_NEW_TOKENS + 2)
        with self.device_lock:
            for prefills in (self._prefill_graphs, self._draft_prefill_graphs):
                if prefills is not None:
                    prefills.warm(1, self.attention())
        buckets = [b for b in BATCH_BUCKETS if b < rows] + [rows]
        self.runner.cost_table = warmup.cost_table(self.generate, self.scheduler.settle, buckets,
                                                   device_line(self.device))

    def warm_draft_lengths(self, prompt: str | Sequence[int], params: SamplingParams,
                           lengths: Iterable[int] = WARM_LENGTHS, **kw) -> None:
        """One short generation (32 tokens at most) of `prompt` at each fixed draft length of `lengths`, with
        the request settings `kw` (k, method, drafter, backend ...); and capture the target's and the draft's
        one-prompt prefills at every width (`bass.runtime.prefill_graphs`).

        With CUDA graphs, a shape without a graph runs in the graph of a wider batch of its width
        (`bass.runtime.graphs`), but a width no batch has a graph of is captured at once, inside the request that
        drafts it first: a round of tens of ms against a few. The heuristic's lengths follow the acceptance, so such
        a width can come at any time; the benchmarks and the eval draft every length once, at their batch, before
        anything is timed.
        An engine without static shapes (the CPU's default) has no graph to build: there it does nothing.
        """
        if not isinstance(self._target_fwd, GraphedModel):
            return
        short = replace(params, max_new_tokens=min(params.max_new_tokens, 32), time_budget_s=None)
        for n in lengths:
            self.generate([prompt], params=short, draft_length=DraftLengthConfig("fixed", l0=n), **kw)
        # (a width first met would prefill eagerly)
        attn = get_backend(kw.get("backend") or self.backend, self.device)
        with self.device_lock:
            for prefills in (self._prefill_graphs, self._draft_prefill_graphs):
                if prefills is not None:
                    prefills.warm(1, attn)
