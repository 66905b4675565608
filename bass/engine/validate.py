"""A request's arguments, checked at the engine's door, and the memory it needs, checked before it waits.

Every argument a caller passes is checked here, before anything is queued or allocated, with a message that
names the argument and what to do. The memory check is an estimate of what a request holds while it runs:

    bytes = Σ_models n_layers · 2 · n_kv_heads · head_dim · e · (Σ_g prompt_g + rows · (max_new_tokens + 2))
            + rows · (l_limit + 1) · vocab · 4 · 3

the K/V of its prompts (once, shared by its k candidates) and of every candidate's generated tokens in the
target's and the draft's caches (e bytes per element), plus the verify's logits and their processed
copies in float32. A request larger than the engine's budget is refused with what to lower; a smaller one
that does not fit beside the running batch waits for room.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from bass.config import METHODS, DraftLengthConfig, SamplingParams, check_k
from bass.decode.rules import processing
from bass.drafters.base import Drafter
from bass.engine.scheduler import BatchKind, Request

if TYPE_CHECKING:
    from bass.engine.engine import Engine

GB = 1e9


def memory_budget(engine: Engine) -> int:
    """Bytes the running requests may take: `EngineConfig.memory_budget_gb`, else 80 % of the GPU memory free
    after load, or half of the memory the CPU has available."""
    if engine.config.memory_budget_gb is not None:
        return int(engine.config.memory_budget_gb * GB)
    if engine.device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(engine.device)
        return int(0.8 * free)
    return int(0.5 * _available_cpu_bytes())


def _available_cpu_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 1024**3  # no /proc: assume a small machine


def request_bytes(engine: Engine, ids: list[list[int]], k: int, params: SamplingParams,
                  draft_length: DraftLengthConfig) -> int:
    """The module docstring's estimate for `ids` x `k` candidates of `params.max_new_tokens` tokens."""
    rows, capacity = len(ids) * k, params.max_new_tokens + 2
    tokens = sum(len(p) for p in ids) + rows * capacity
    elem = torch.finfo(engine.dtype).bits // 8
    total = 0
    for model in (engine.target, engine.draft):
        if model is None:
            continue
        c = model.config
        kv_heads = getattr(c, "num_kv_heads", None) or getattr(c, "num_key_value_heads", None) or 1
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_heads
        total += c.num_layers * 2 * kv_heads * head_dim * elem * tokens
    vocab = engine.target.config.vocab_size
    return total + rows * (draft_length.l_limit + 1) * vocab * 4 * 3


def _gb(n: int) -> str:
    return f"{n / GB:.1f} GB"


def check_params(params: object) -> SamplingParams:
    if params is None:
        return SamplingParams()
    if not isinstance(params, SamplingParams):
        raise ValueError(f"params must be a bass.SamplingParams, got {type(params).__name__}: build one with "
                         "SamplingParams(temperature=..., max_new_tokens=...)")
    return params


def request(engine: Engine, prompts: str | Sequence[str] | Sequence[Sequence[int]], *, k: int,
            params: SamplingParams | None, method: str, drafter: str | Drafter | None, backend: str | None,
            draft_length: DraftLengthConfig | None, chat: bool, cancel: threading.Event | None,
            look_ahead: bool | None, exclusive: bool) -> Request:
    """A `Request` of these arguments, or a ValueError that says which one to change and how."""
    params = check_params(params)
    check_k(k)
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if draft_length is not None and not isinstance(draft_length, DraftLengthConfig):
        raise ValueError("draft_length must be a bass.DraftLengthConfig (e.g. DraftLengthConfig('fixed', l0=4)) "
                         f"or None, got {type(draft_length).__name__}")
    if cancel is not None and not isinstance(cancel, threading.Event):
        raise ValueError(f"cancel must be a threading.Event or None, got {type(cancel).__name__}")
    drafter = drafter or engine.config.drafter
    if drafter == "auto":
        drafter = engine.default_drafter
    if isinstance(drafter, Drafter):
        if method != "bass":
            raise ValueError("a Drafter instance serves one batch: use it with method='bass', or pass a name")
        exclusive = True  # its state belongs to one batch
    elif method == "regular":
        drafter = None
    elif drafter not in engine.available_drafters():
        raise ValueError(f"drafter {drafter!r} is not available here; choose one of {engine.available_drafters()}"
                         + (" (drafter='model' needs EngineConfig.draft)" if drafter == "model" else ""))
    backend = backend or engine.backend
    engine.attention(backend)  # an unknown backend fails here, with its message
    ids = engine.encode(prompts, chat)
    limit = engine.target.config.max_position_embeddings
    for i, p in enumerate(ids):
        if len(p) + params.max_new_tokens > limit:
            raise ValueError(f"prompt {i} has {len(p)} tokens; with max_new_tokens={params.max_new_tokens} it "
                             f"exceeds the model's context of {limit}: shorten the prompt or lower max_new_tokens")
    dl = draft_length or engine.config.draft_length
    need = request_bytes(engine, ids, k, params, dl)
    budget = engine.scheduler.budget
    if need > budget:
        raise ValueError(f"this request needs about {_gb(need)} of device memory ({len(ids) * k} candidates of "
                         f"{params.max_new_tokens} tokens) but the engine has {_gb(budget)}: lower k or "
                         "max_new_tokens (or raise EngineConfig.memory_budget_gb)")
    look = engine.look_ahead if look_ahead is None else bool(look_ahead)
    kind = BatchKind(method, drafter, backend, look, dl, processing(params))
    return Request(ids, k, params, kind, need, exclusive=bool(exclusive), cancel=cancel)
