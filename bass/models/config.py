"""The architecture of a decoder, as one frozen dataclass, read from and written to HF's config.json.

`ModelConfig.from_hf` accepts the config.json of every family we implement (both the transformers 4
style with top-level `rope_theta` / `rope_scaling` and the transformers 5 style with `rope_parameters`);
`to_hf` writes a dict transformers builds the same model from, so random weights can be loaded into
both implementations for side-by-side benchmarks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

# HF `model_type` -> our family name. Mistral, CodeLlama and DeepSeek-Coder are Llama-architecture.
FAMILIES = {
    "llama": "llama",
    "mistral": "mistral",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "gemma3_text": "gemma3",
    "gemma3": "gemma3",
}
LAYER_TYPES = ("full_attention", "sliding_attention")
ROPE_TYPES = ("default", "linear", "llama3")
ACTIVATIONS = ("silu", "gelu_pytorch_tanh")


@dataclass(frozen=True)
class ModelConfig:
    """Shapes and options of one decoder-only transformer.

    `layer_types[i]` says whether block i attends to everything before it ("full_attention") or only to
    the last `sliding_window` positions ("sliding_attention": keys at positions > p - sliding_window).
    Sliding layers rotate with `local_rope_theta` when it is set (Gemma 3), else with `rope_theta`.
    `rope_scaling` holds the (key, value) pairs of HF's rope scaling dict, `()` for plain RoPE.
    """

    family: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: bool = False
    max_position_embeddings: int = 4096
    sliding_window: int = 0
    layer_types: tuple[str, ...] = ()
    local_rope_theta: float | None = None
    rope_scaling: tuple[tuple[str, Any], ...] = ()
    query_pre_attn_scalar: float | None = None
    hidden_act: str = "silu"
    final_logit_softcapping: float | None = None
    eos_token_ids: tuple[int, ...] = ()
    bos_token_id: int | None = None
    pad_token_id: int | None = None

    def __post_init__(self) -> None:
        if self.family not in set(FAMILIES.values()):
            raise ValueError(f"family must be one of {sorted(set(FAMILIES.values()))}, got {self.family!r}")
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim", "max_position_embeddings"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                             f"({self.num_kv_heads}) for grouped-query attention")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        if not self.layer_types:
            object.__setattr__(self, "layer_types", ("full_attention",) * self.num_layers)
        if len(self.layer_types) != self.num_layers or not set(self.layer_types) <= set(LAYER_TYPES):
            raise ValueError(f"layer_types must hold num_layers ({self.num_layers}) entries from {LAYER_TYPES}, "
                             f"got {self.layer_types!r}")
        if "sliding_attention" in self.layer_types and self.sliding_window < 1:
            raise ValueError("sliding_window must be >= 1 when some layer is a sliding_attention layer, "
                             f"got {self.sliding_window}")
        if self.rope_theta <= 0 or (self.local_rope_theta is not None and self.local_rope_theta <= 0):
            raise ValueError(f"rope bases must be > 0, got {self.rope_theta} / {self.local_rope_theta}")
        if self.rope_type not in ROPE_TYPES:
            raise ValueError(f"rope scaling type {self.rope_type!r} is not supported (supported: {ROPE_TYPES})")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act must be one of {ACTIVATIONS}, got {self.hidden_act!r}")
        if self.family == "gemma3" and not self.query_pre_attn_scalar:
            raise ValueError("gemma3 needs query_pre_attn_scalar (the attention scale is its -1/2 power)")

    @property
    def rope_type(self) -> str:
        return dict(self.rope_scaling).get("rope_type", dict(self.rope_scaling).get("type", "default"))

    @property
    def attn_scale(self) -> float:
        """Softmax scale: 1/sqrt(query_pre_attn_scalar) for Gemma 3, 1/sqrt(head_dim) otherwise."""
        return (self.query_pre_attn_scalar or self.head_dim) ** -0.5

    def window(self, layer: int) -> int:
        """Sliding window of block `layer` (0 = full causal attention)."""
        return self.sliding_window if self.layer_types[layer] == "sliding_attention" else 0

    def with_(self, **changes: Any) -> ModelConfig:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    @classmethod
    def from_hf(cls, hf: Mapping[str, Any]) -> ModelConfig:
        """Read an HF config.json dict (a multimodal Gemma 3 config contributes its `text_config`)."""
        if "text_config" in hf and hf.get("model_type") == "gemma3":
            hf = {**hf["text_config"], "model_type": "gemma3_text"}
        model_type = hf.get("model_type")
        if model_type not in FAMILIES:
            raise ValueError(f"config.json model_type {model_type!r} is not supported; supported: {sorted(FAMILIES)} "
                             "(Llama, Mistral, CodeLlama, DeepSeek-Coder, Qwen2/2.5, Qwen3, Gemma 3)")
        family = FAMILIES[model_type]
        heads = hf["num_attention_heads"]
        kv_heads = hf.get("num_key_value_heads") or heads
        head_dim = hf.get("head_dim") or hf["hidden_size"] // heads
        rope, local_rope = _rope_parameters(hf, family)
        theta = float(rope.pop("rope_theta", 10000.0))
        rope.pop("partial_rotary_factor", None)
        scaling = () if rope.get("rope_type", rope.get("type", "default")) == "default" else tuple(sorted(rope.items()))

        window = hf.get("sliding_window") or 0
        layer_types = hf.get("layer_types")
        if family == "mistral":
            layer_types = ["sliding_attention" if window else "full_attention"] * hf["num_hidden_layers"]
        elif family in ("qwen2", "qwen3") and not hf.get("use_sliding_window", False):
            layer_types, window = None, 0
        elif family == "gemma3" and layer_types is None:
            pattern = hf.get("sliding_window_pattern", 6)
            layer_types = ["sliding_attention" if (i + 1) % pattern else "full_attention"
                           for i in range(hf["num_hidden_layers"])]
        if layer_types is not None and "sliding_attention" not in layer_types:
            window = 0

        eos = hf.get("eos_token_id")
        eos_ids = () if eos is None else (tuple(eos) if isinstance(eos, list | tuple) else (eos,))
        bias = bool(hf.get("attention_bias", False))
        if family == "gemma3" and hf.get("attn_logit_softcapping"):
            raise ValueError("attn_logit_softcapping is not supported (Gemma 2 style); Gemma 3 does not use it")
        return cls(
            family=family,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            rope_theta=theta,
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", family == "gemma3")),
            qkv_bias=family == "qwen2" or bias,
            o_bias=bias and family != "qwen2",
            qk_norm=family in ("qwen3", "gemma3"),
            max_position_embeddings=hf.get("max_position_embeddings", 4096),
            sliding_window=window,
            layer_types=tuple(layer_types or ()),
            local_rope_theta=local_rope,
            rope_scaling=scaling,
            query_pre_attn_scalar=hf.get("query_pre_attn_scalar") if family == "gemma3" else None,
            hidden_act=hf.get("hidden_activation") or hf.get("hidden_act") or "silu",
            final_logit_softcapping=hf.get("final_logit_softcapping") if family == "gemma3" else None,
            eos_token_ids=eos_ids,
            bos_token_id=hf.get("bos_token_id"),
            pad_token_id=hf.get("pad_token_id"),
        )

    def to_hf(self) -> dict[str, Any]:
        """A config.json dict transformers builds the same architecture from (`AutoConfig.for_model`)."""
        model_type = "gemma3_text" if self.family == "gemma3" else self.family
        sliding = "sliding_attention" in self.layer_types
        hf: dict[str, Any] = {
            "model_type": model_type,
            "architectures": [{"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
                               "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                               "gemma3": "Gemma3ForCausalLM"}[self.family]],
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "eos_token_id": list(self.eos_token_ids) if len(self.eos_token_ids) != 1 else self.eos_token_ids[0],
            "bos_token_id": self.bos_token_id,
            "pad_token_id": self.pad_token_id,
        }
        rope = {"rope_type": "default", **dict(self.rope_scaling), "rope_theta": self.rope_theta}
        if self.family == "gemma3":
            local = {"rope_type": "default", "rope_theta": self.local_rope_theta or self.rope_theta}
            hf.update(rope_parameters={"full_attention": rope, "sliding_attention": local},
                      query_pre_attn_scalar=self.query_pre_attn_scalar, hidden_activation=self.hidden_act,
                      sliding_window=self.sliding_window or None, layer_types=list(self.layer_types),
                      final_logit_softcapping=self.final_logit_softcapping, attn_logit_softcapping=None)
        else:
            hf.update(rope_parameters=rope, hidden_act=self.hidden_act)
        if self.family in ("llama", "qwen3"):
            hf["attention_bias"] = self.qkv_bias
        if self.family == "mistral":
            hf["sliding_window"] = self.sliding_window or None
        if self.family in ("qwen2", "qwen3"):
            hf.update(use_sliding_window=sliding, sliding_window=self.sliding_window or None,
                      layer_types=list(self.layer_types),
                      max_window_layers=self.layer_types.index("sliding_attention") if sliding else self.num_layers)
        return hf


def _rope_parameters(hf: Mapping[str, Any], family: str) -> tuple[dict[str, Any], float | None]:
    """(global rope dict with 'rope_theta', local rope base or None) from either config.json style."""
    params = hf.get("rope_parameters")
    if family == "gemma3":
        if params and "full_attention" in params:
            local = params.get("sliding_attention", {}).get("rope_theta", 10000.0)
            return dict(params["full_attention"]), float(local)
        glob = dict(hf.get("rope_scaling") or {})
        glob.setdefault("rope_theta", hf.get("rope_theta", 1_000_000.0))
        return glob, float(hf.get("rope_local_base_freq", 10000.0))
    if params:
        return dict(params), None
    rope = dict(hf.get("rope_scaling") or {})
    rope["rope_theta"] = hf.get("rope_theta", 10000.0)
    return rope, None
