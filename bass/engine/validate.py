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
from collections.abc import Callable
from dataclasses import dataclass

import torch

from bass.config import METHODS, DraftLengthConfig, SamplingParams, check_k
from bass.decode.rules import processing
from bass.drafters.base import Drafter
from bass.engine.request import BatchKind, Request

GB = 1e9


@dataclass(frozen=True)
class Serving:
    """What an engine serves, as each request is checked against it (`bass.engine.engine.Engine` builds it)."""

    drafters: tuple[str, ...]  # the drafters available
    default_drafter: str  # what drafter="auto" means
    backend: str  # the default attention backend
    attention: Callable[[str], object]  # raises ValueError for a backend it cannot run
    context: int  # the target's positions: prompt + new tokens
    max_prompt_tokens: int  # the longest prompt this engine takes
    models: tuple  # the model configs whose K/V a request holds (target, draft)
    dtype: torch.dtype
    look_ahead: bool
    draft_length: DraftLengthConfig  # the default policy


@dataclass(frozen=True)
class Options:
    """The arguments of `Engine.stream` besides the prompts (its docstring says what each means)."""

    k: int = 1
    params: SamplingParams | None = None
    method: str = "bass"
    drafter: str | Drafter | None = None
    backend: str | None = None
    draft_length: DraftLengthConfig | None = None
    cancel: threading.Event | None = None
    look_ahead: bool | None = None
    exclusive: bool = False


def memory_budget(budget_gb: float | None, device: torch.device) -> int:
    """Bytes the running requests may take: `budget_gb` when set, else 80 % of the GPU memory free after load,
    or half of the memory the CPU has available."""
    if budget_gb is not None:
        return int(budget_gb * GB)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
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


def request_bytes(serving: Serving, ids: list[list[int]], k: int, params: SamplingParams,
                  draft_length: DraftLengthConfig) -> int:
    """The module docstring's estimate for `ids` x `k` candidates of `params.max_new_tokens` tokens."""
    rows, capacity = len(ids) * k, params.max_new_tokens + 2
    tokens = sum(len(p) for p in ids) + rows * capacity
    elem = torch.finfo(serving.dtype).bits // 8
    total = 0
    for c in serving.models:
        kv_heads = getattr(c, "num_kv_heads", None) or getattr(c, "num_key_value_heads", None) or 1
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_heads
        total += c.num_layers * 2 * kv_heads * head_dim * elem * tokens
    vocab = serving.models[0].vocab_size
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


def request(serving: Serving, budget: int, ids: list[list[int]], o: Options) -> Request:
    """A `Request` of the prompts' token ids `ids` and options `o`, or a ValueError that says which argument to
    change and how."""
    params = check_params(o.params)
    check_k(o.k)
    if o.method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {o.method!r}")
    if o.draft_length is not None and not isinstance(o.draft_length, DraftLengthConfig):
        raise ValueError("draft_length must be a bass.DraftLengthConfig (e.g. DraftLengthConfig('fixed', l0=4)) "
                         f"or None, got {type(o.draft_length).__name__}")
    if o.cancel is not None and not isinstance(o.cancel, threading.Event):
        raise ValueError(f"cancel must be a threading.Event or None, got {type(o.cancel).__name__}")
    drafter, exclusive = _drafter(serving, o)
    backend = o.backend or serving.backend
    serving.attention(backend)  # an unknown backend fails here, with its message
    for i, p in enumerate(ids):
        if len(p) > serving.max_prompt_tokens:
            raise ValueError(f"prompt {i} has {len(p)} tokens; this engine takes prompts of at most "
                             f"{serving.max_prompt_tokens}: shorten it (or raise EngineConfig.max_prompt_tokens)")
        if len(p) + params.max_new_tokens > serving.context:
            raise ValueError(f"prompt {i} has {len(p)} tokens; with max_new_tokens={params.max_new_tokens} it "
                             f"exceeds the model's context of {serving.context}: shorten the prompt or lower "
                             "max_new_tokens")
    dl = o.draft_length or serving.draft_length
    need = request_bytes(serving, ids, o.k, params, dl)
    if need > budget:
        raise ValueError(f"this request needs about {_gb(need)} of device memory ({len(ids) * o.k} candidates of "
                         f"{params.max_new_tokens} tokens) but the engine has {_gb(budget)}: lower k or "
                         "max_new_tokens (or raise EngineConfig.memory_budget_gb)")
    look = serving.look_ahead if o.look_ahead is None else bool(o.look_ahead)
    kind = BatchKind(o.method, drafter, backend, look, dl, processing(params))
    return Request(ids, o.k, params, kind, need, exclusive=exclusive, cancel=o.cancel)


def _drafter(serving: Serving, o: Options) -> tuple[str | Drafter | None, bool]:
    """The request's drafter (None for regular decoding) and whether it must run alone."""
    drafter = o.drafter or "auto"
    if drafter == "auto":
        drafter = serving.default_drafter
    if isinstance(drafter, Drafter):
        if o.method != "bass":
            raise ValueError("a Drafter instance serves one batch: use it with method='bass', or pass a name")
        return drafter, True  # its state belongs to one batch
    if o.method == "regular":
        return None, bool(o.exclusive)
    if drafter not in serving.drafters:
        raise ValueError(f"drafter {drafter!r} is not available here; choose one of {list(serving.drafters)}"
                         + (" (drafter='model' needs EngineConfig.draft)" if drafter == "model" else ""))
    return drafter, bool(o.exclusive) or o.method == "single"
