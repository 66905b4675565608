"""Gemma 3 (text): the small fast model of the demos and tests.

    h_0     = sqrt(H) * embed(tokens)
    h'_l    = h_l + N_post_attn(Attn_l(N_in(h_l)))      q, k per-head RMSNorm'd; scale = query_pre_attn_scalar^-1/2
    h_{l+1} = h'_l + N_post_ffn(MLP_l(N_pre_ffn(h'_l)))  MLP(x) = down(gelu_tanh(x W_gate) * x W_up)
    logits  = N_final(h_L) E^T                            (optionally soft-capped: c * tanh(logits / c))

Every norm is RMSNorm with weight (1 + w). Five of every six layers are local: they attend to the last
`sliding_window` positions (keys at positions > p - window) and rotate with the local RoPE base; the
others are global, with the global base (and its scaling, if any).
"""

from __future__ import annotations

import torch
from torch import nn

from bass.models.config import ModelConfig
from bass.models.layers import Attention, AttentionFn, Decoder, GatedMLP, RMSNorm, embed, forward_indices, rope_table
from bass.runtime.cache import KVCache


class Block(nn.Module):
    """Sandwich-norm block: every sub-layer's input and output are normalised."""

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        dim, eps = config.hidden_size, config.rms_norm_eps
        self.local = config.layer_types[layer] == "sliding_attention"
        self.input_layernorm = RMSNorm(dim, eps, offset=1.0)
        self.self_attn = Attention(config, layer, norm_offset=1.0)
        self.post_attention_layernorm = RMSNorm(dim, eps, offset=1.0)
        self.pre_feedforward_layernorm = RMSNorm(dim, eps, offset=1.0)
        self.mlp = GatedMLP(config)
        self.post_feedforward_layernorm = RMSNorm(dim, eps, offset=1.0)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache,
                q_len: torch.Tensor, kv_len: torch.Tensor, rows: torch.Tensor, attn: AttentionFn) -> torch.Tensor:
        h = self.self_attn(self.input_layernorm(x), cos, sin, cache, q_len, kv_len, rows, attn)
        normed, x = self.pre_feedforward_layernorm.add_and_norm(self.post_attention_layernorm(h), residual=x)
        return x + self.post_feedforward_layernorm(self.mlp(normed))


class Gemma3(Decoder):
    """A Gemma 3 text decoder over the ragged KV cache (same interface as `llama.Transformer`)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.family != "gemma3":
            raise ValueError(f"Gemma3 needs a gemma3 config, got family {config.family!r}")
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, offset=1.0)
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(
            config.hidden_size, config.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor, cache: KVCache, q_len: torch.Tensor, attn: AttentionFn, *,
                num_layers: int | None = None, last_only: bool = False) -> torch.Tensor:
        """Logits [B, T, V] (float32); arguments and cache effects as in `llama.Transformer.forward`."""
        B, T = tokens.shape
        cfg = self.config
        weight = self.embed_tokens.weight
        # The scale is rounded to the weights' dtype first, as in the reference (bf16: sqrt(640) -> 25.25);
        # a CPU-side Python float, so no device sync.
        embed_scale = torch.tensor(cfg.hidden_size ** 0.5, dtype=weight.dtype).item()
        x = embed(weight, tokens) * embed_scale  # [B, T, H]
        table = rope_table(cfg, cfg.rope_theta, tokens.device, x.dtype)
        kv_len, rows, *global_rope = forward_indices(cache, T, q_len, table)  # [B], [B, T], cos and sin
        local = rope_table(cfg, cfg.local_rope_theta or cfg.rope_theta, tokens.device, x.dtype, scaled=False)
        local_rope = forward_indices(cache, T, q_len, local)[2:]
        for block in self.layers[:num_layers]:
            cos, sin = local_rope if block.local else global_rope  # each [B, T, 1, D]
            x = block(x, cos, sin, cache, q_len, kv_len, rows, attn)
        cache.advance(q_len)
        logits = self.logits(x, q_len, last_only)  # [B, T, V]
        if cfg.final_logit_softcapping:
            cap = cfg.final_logit_softcapping
            logits = torch.tanh(logits / cap) * cap
        return logits
