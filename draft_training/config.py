"""The pipeline's settings: frozen dataclasses with validated fields; `python -m draft_training` fills them in.

`DraftShape` is a draft's architecture. The standalone default (width 384, 6 blocks, 6 query / 2 key-value
heads of 64, SwiGLU 896) keeps the file under 20 MB in bf16: 8.56 M block parameters + 2 x 384 x 1536
projections = 9.74 M parameters, 19.5 MB; its token tables are derived from the target (bass.models.draft).
`FEATURE_SHAPE`, the feature draft's (loss "feature"; width 512, 2 blocks, 8 / 4 heads of 64, SwiGLU 1536):
6.3 M block parameters + W_fc 512 x 3072 + W_out 1536 x 512 = 8.7 M parameters, 17.3 MB.
"""

from __future__ import annotations

from dataclasses import dataclass

from bass.models.config import ModelConfig

LOSSES = ("next-token", "distill", "feature")


@dataclass(frozen=True)
class CorpusConfig:
    """Which sources enter the corpus and how much of it."""

    max_train_tokens: int = 40_000_000
    heldout_fraction: float = 0.02
    min_bytes: int = 200
    max_file_bytes: int = 400_000
    max_line_chars: int = 400
    prompts: int = 4096  # code prompts for the target's completions (half completion, half chat style)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_train_tokens < 1:
            raise ValueError(f"max_train_tokens must be >= 1, got {self.max_train_tokens}")
        if not 0.0 < self.heldout_fraction < 0.5:
            raise ValueError(f"heldout_fraction must be in (0, 0.5), got {self.heldout_fraction}")


@dataclass(frozen=True)
class DraftShape:
    """The draft's architecture (a Qwen2 decoder; its vocabulary is the target's)."""

    hidden_size: int = 384
    num_layers: int = 6
    num_heads: int = 6
    num_kv_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 896
    # a feature draft only: the target layer whose residual stream (after that many blocks) it reads beside the
    # final features, EAGLE-3's fused features (`draft_training.model.FeatureStudent`); 0: none, as shipped
    fused_layer: int = 0

    def __post_init__(self) -> None:
        if self.num_heads * self.head_dim != self.hidden_size:
            raise ValueError(f"num_heads * head_dim must equal hidden_size, got {self.num_heads} x {self.head_dim} "
                             f"!= {self.hidden_size}")
        if self.fused_layer < 0:
            raise ValueError(f"fused_layer must be >= 0 (0: none), got {self.fused_layer}")

    def model_config(self, target: ModelConfig) -> ModelConfig:
        """The draft's ModelConfig: these shapes, the target's vocabulary, rotary base, ids and context."""
        return ModelConfig(family="qwen2", vocab_size=target.vocab_size, hidden_size=self.hidden_size,
                           intermediate_size=self.intermediate_size, num_layers=self.num_layers,
                           num_heads=self.num_heads, num_kv_heads=self.num_kv_heads, head_dim=self.head_dim,
                           rope_theta=target.rope_theta, rms_norm_eps=target.rms_norm_eps,
                           tie_word_embeddings=False, qkv_bias=True,
                           max_position_embeddings=target.max_position_embeddings,
                           eos_token_ids=target.eos_token_ids, bos_token_id=target.bos_token_id,
                           pad_token_id=target.pad_token_id)


FEATURE_SHAPE = DraftShape(hidden_size=512, num_layers=2, num_heads=8, num_kv_heads=4, head_dim=64,
                           intermediate_size=1536)


def default_shape(loss: str) -> DraftShape:
    """The draft architecture a loss trains by default: the feature draft for "feature", else the standalone."""
    return FEATURE_SHAPE if loss == "feature" else DraftShape()


@dataclass(frozen=True)
class TrainConfig:
    """One training run. The step count follows from the wall-clock budget: the first steps are timed, then
    the cosine schedule is laid out over the steps that fit (measured, not guessed per GPU)."""

    loss: str = "distill"
    minutes: float = 3.0
    batch_size: int = 16
    # windows per forward/backward: bounds the [rows, T, 151936] logits in memory (at 16 a step's peak is 12 GB
    # with the compiled loss, 25 eager; at 4 small launches bound the step; timed on the H200)
    micro_batch: int = 16
    seq_len: int = 512
    lr: float = 1.5e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.01
    completion_share: float = 0.5  # of each batch, windows from the target's own completions (when present)
    seed: int = 0
    max_steps: int | None = None  # a hard cap (tests, quick runs)
    # a run longer than one command: this call stops after so many minutes (or steps: tests) of training and
    # keeps the run's state to continue from (`draft_training.checkpoint`); the schedule spans all of `minutes`
    segment_minutes: float | None = None
    segment_steps: int | None = None
    eval_every: int = 100
    feature_weight: float = 0.5  # loss "feature": weight of the smooth-L1 feature regression beside the KL
    second_step_weight: float = 0.5  # loss "feature": the KL of draft step s (fed its own f̂) weighs this^(s-1)
    unroll_steps: int = 3  # loss "feature": the draft steps each window is trained at (1: the first alone)
    # loss "feature": later steps attend to the target's entries before their chain, as a draft's cache holds
    # them (False: to their own stream of predictions alone, as the first three training cycles did)
    true_context: bool = True
    # loss "feature": weight λ_α of the acceptance objective (`draft_training.acceptance_loss`: the expected
    # acceptance Σ min(p, q) at T 0.8 / top-p 0.95 subtracted beside the KL; 0: the KL alone), with q at
    # acceptance_scale times the target's temperature (the draft temperature the engine draws at)
    acceptance_weight: float = 0.0
    acceptance_scale: float = 0.7
    # loss "feature": after training, the held-out sampled acceptance with the draft at each of these multiples
    # of the target's temperature (train.sampled_acceptance); () skips it
    draft_temperature_scales: tuple[float, ...] = (1.0, 0.85, 0.7, 0.55, 0.4)
    init: str | None = None  # a draft file of the same kind and shape to start from (a further cycle), else random
    # loss "feature": its vocabulary-sized terms through torch.compile on CUDA (`draft_training.vocab_loss`)
    compile: bool = True

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {self.loss!r}")
        if self.minutes <= 0 or self.batch_size < 1 or self.micro_batch < 1 or self.seq_len < 8:
            raise ValueError("minutes must be > 0, batch_size and micro_batch >= 1 and seq_len >= 8")
        if any(not 0.0 < tau <= 2.0 for tau in self.draft_temperature_scales):
            raise ValueError(f"draft_temperature_scales must lie in (0, 2], got {self.draft_temperature_scales}")
        if self.acceptance_weight < 0 or not 0.0 < self.acceptance_scale <= 2.0:
            raise ValueError(f"acceptance_weight must be >= 0 and acceptance_scale in (0, 2], got "
                             f"{self.acceptance_weight}, {self.acceptance_scale}")
        if self.acceptance_weight and self.loss != "feature":
            raise ValueError("the acceptance objective is the feature loss's: give --loss feature or leave "
                             "--acceptance-weight at 0")
        if not 1 <= self.unroll_steps <= 8:
            raise ValueError(f"unroll_steps must be in 1 .. 8, got {self.unroll_steps}")
        if (self.segment_minutes is not None and self.segment_minutes <= 0) or (
                self.segment_steps is not None and self.segment_steps < 1):
            raise ValueError(f"segment_minutes must be > 0 and segment_steps >= 1 where given, got "
                             f"{self.segment_minutes}, {self.segment_steps}")
        if not 0.0 <= self.completion_share <= 1.0:
            raise ValueError(f"completion_share must be in [0, 1], got {self.completion_share}")
