"""The Llama family: Llama 2/3, CodeLlama, DeepSeek-Coder, Mistral, Qwen2/Qwen2.5, Qwen3.

    h_0     = embed(tokens)
    h'_l    = h_l + Attn_l(RMSNorm(h_l))          (Qwen2: bias on q/k/v; Qwen3: RMSNorm on q and k)
    h_{l+1} = h'_l + MLP_l(RMSNorm(h'_l))        MLP(x) = down(silu(x W_gate) * x W_up)
    logits  = RMSNorm(h_L) W_head                 (W_head = embedding when tied)

Mistral and windowed Qwen layers restrict attention to the last `sliding_window` positions.
"""

from __future__ import annotations

import torch
from torch import nn

from bass.models.config import ModelConfig
from bass.models.layers import Attention, AttentionFn, Decoder, GatedMLP, RMSNorm, embed, forward_indices, rope_table
from bass.runtime.cache import KVCache
from kernels.split_sum import SplitSum, materialize


class Block(nn.Module):
    """Pre-norm residual block: attention then gated MLP.

    The block leaves its last residual add to whoever reads the stream next: it returns (mlp_out, x') where
    the stream is x' + mlp_out, and takes the block before's pair the same way, so that add happens inside
    this block's first RMSNorm (one fused launch on CUDA, `rms_norm(..., residual=)`) instead of as a
    launch of its own. bf16 addition is commutative, so every value is the one of `x + mlp_out`. Both
    projections whose output only a norm reads (o and down) may hand it their split-K slices unsummed
    (`kernels.split_sum`): the norm's launch sums them, and their own second launch is saved.
    """

    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = GatedMLP(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache,
                q_len: torch.Tensor, kv_len: torch.Tensor, rows: torch.Tensor, attn: AttentionFn,
                pending: torch.Tensor | SplitSum | None = None) -> tuple[torch.Tensor | SplitSum, torch.Tensor]:
        """(mlp_out, x') with x' + mlp_out the stream after this block; the stream before it is x + pending
        (pending: the block before's mlp_out, None for the first block)."""
        if pending is None:
            normed = self.input_layernorm(x)
        else:
            normed, x = self.input_layernorm.add_and_norm(pending, residual=x)  # x <- x + pending
        h = self.self_attn(normed, cos, sin, cache, q_len, kv_len, rows, attn, defer_sum=True)
        normed, x = self.post_attention_layernorm.add_and_norm(h, residual=x)  # x <- x + h
        return self.mlp(normed, defer_sum=True), x


class Transformer(Decoder):
    """A Llama-family decoder over the ragged KV cache (see `forward`)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if config.family == "gemma3":
            raise ValueError("a gemma3 config needs bass.models.gemma3.Gemma3, not the Llama Transformer")
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(
            config.hidden_size, config.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor, cache: KVCache, q_len: torch.Tensor, attn: AttentionFn, *,
                num_layers: int | None = None, last_only: bool = False) -> torch.Tensor:
        """Logits [B, T, V] (float32) of `tokens` [B, T] continuing each sequence in `cache`.

        Row i of sequence b is a real token when i < q_len[b], padding otherwise (computed, ignored,
        never stored in the cache). Writes the new K/V and advances the cache by q_len.
        `num_layers=N` runs only blocks 0..N-1 before the final norm and head (layer-skip draft);
        `last_only` returns only the logits at row q_len[b]-1, as [B, 1, V] (prefill).
        """
        x = embed(self.embed_tokens.weight, tokens)  # [B, T, H]
        f = run_blocks(self.layers[:num_layers], x, cache, q_len, attn, self.config, norm=self.norm)
        return self.logits(f, q_len, last_only, normed=True)  # [B, T, V]


def run_blocks(blocks: nn.ModuleList, x: torch.Tensor, cache: KVCache, q_len: torch.Tensor, attn: AttentionFn,
               config: ModelConfig, norm: RMSNorm | None = None) -> torch.Tensor:
    """x [B, T, d] through Llama-style `blocks` over the cache: RoPE at each token's absolute position, the
    new K/V stored at the rows `forward_indices` gives (once for every layer), then the cache advanced by
    q_len. What every decoder with one RoPE base shares (the target and the feature draft). With `norm`,
    returns norm(stream) instead, the last block's residual add fused into it (`Block`)."""
    table = rope_table(config, config.rope_theta, x.device, x.dtype)
    kv_len, rows, cos, sin = forward_indices(cache, x.shape[1], q_len, table)  # [B], [B, T], [B, T, 1, D] x 2
    pending = None  # the last block's output, added into the next norm (`Block`)
    for block in blocks:
        pending, x = block(x, cos, sin, cache, q_len, kv_len, rows, attn, pending)
    cache.advance(q_len)
    if norm is not None:
        return norm(x) if pending is None else norm.add_and_norm(pending, residual=x)[0]
    return x if pending is None else x + materialize(pending)
