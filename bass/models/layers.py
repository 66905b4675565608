"""Building blocks shared by every family: RMSNorm, rotary embeddings, attention, the gated MLP.

The families differ only in flags of these blocks (q/k/v bias, q/k norm, the norm's weight offset,
the attention scale, the activation), so each `bass/models/<family>.py` only wires them together.

Weights are fused for speed (one GEMM for q/k/v, one for gate/up); `fuse_hf_state_dict` turns an HF
checkpoint's separate projections into that layout.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from bass.models.config import ModelConfig
from bass.models.linear import Linear, linear, needs_autograd
from bass.runtime.cache import KVCache
from kernels.split_sum import SplitSum, materialize

# attn(q, prefix_k, prefix_v, prefix_len, seq_group, suffix_k, suffix_v, *, kv_len, q_len, scale, window)
AttentionFn = Callable[..., torch.Tensor]


# The fused Triton kernels (kernels/rmsnorm.py, rope.py, activation.py) replace chains of small torch ops
# on CUDA, where each op is a 2-7 us launch; on the CPU the model keeps the torch ops, which the
# exactness tests against transformers pin down. Tests may switch the kernels off to compare.
FUSED_KERNELS = True


def _fused(x: torch.Tensor, *rest: torch.Tensor | None) -> bool:
    """The fused kernels for an op on x and `rest`: switched on, on CUDA, and no gradient asked through the op.

    The kernels have no backward, so where autograd needs the op (the draft's student in training) it takes the
    torch form, while the engine and the frozen teacher, which ask for none, keep the kernels.
    """
    return FUSED_KERNELS and x.is_cuda and not needs_autograd(x, *rest)


def rms_norm(x: torch.Tensor | SplitSum, weight: torch.Tensor, eps: float, offset: float = 0.0,
             residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(y, r): r = residual + x (None without residual), y = RMSNorm(r) with the cast points of `RMSNorm`. x may
    be a split-K projection's slices (`kernels.split_sum`): summed inside the norm's launch on CUDA."""
    if _fused(x.ws if isinstance(x, SplitSum) else x, weight, residual) and weight.dtype == x.dtype:
        from kernels.rmsnorm import rms_norm_fused

        return rms_norm_fused(x, weight, eps, offset, residual)
    x = materialize(x)  # (the torch path below reads a tensor)
    r = x if residual is None else residual + x
    r32 = r.float()
    normed = r32 * torch.rsqrt(r32.pow(2).mean(-1, keepdim=True) + eps)
    if offset:
        return (normed * (offset + weight.float())).to(r.dtype), (None if residual is None else r)
    return weight * normed.to(r.dtype), (None if residual is None else r)


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * (offset + w), normalised in float32.

    Llama-style (offset 0) rounds the normalised x to the input dtype before the weight multiply;
    Gemma-style (offset 1, weights stored around 0) multiplies in float32 and rounds last, as their
    reference implementations do, so that bf16 results match them too.
    """

    def __init__(self, dim: int, eps: float, offset: float = 0.0) -> None:
        super().__init__()
        self.eps = eps
        self.offset = offset
        self.weight = nn.Parameter(torch.zeros(dim) if offset else torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps, self.offset)[0]

    def add_and_norm(self, x: torch.Tensor | SplitSum, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(RMSNorm(residual + x), residual + x): the residual add fused into the norm on CUDA (and the sum of
        x's slices, where x is a split-K projection's, `kernels.split_sum`)."""
        return rms_norm(x, self.weight, self.eps, self.offset, residual)


def embed(weight: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """weight[tokens]: rows [.., H] of an embedding table [V, H] for token ids [..].

    Not `F.embedding`: on CUDA it takes index_select's small-index kernel for up to 16 ids, 5.6 / 8.5 µs
    for 8 / 16 rows of Qwen2.5's [151,936, 1,536] bf16 table on the H100, against 4.4 / 3.4 for the gather
    of advanced indexing (each timed alone in a CUDA graph): a decode step of batch 8, a
    verify of width 2 and every draft step look up that few."""
    return weight[tokens]


def embed_concat(features: torch.Tensor, weight: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """[features ; weight[tokens]] along the last axis, features cast to the table's dtype: a feature draft's
    input rows [B, T, Hf + H] (`kernels.embed_concat`: one launch on CUDA, where torch takes two)."""
    if _fused(weight, features):
        from kernels.embed_concat import embed_concat_fused

        return embed_concat_fused(features, weight, tokens)
    return torch.cat([features.to(weight.dtype), embed(weight, tokens)], -1)


def rope_inv_freq(config: ModelConfig, base: float, device: torch.device, scaled: bool = True) -> torch.Tensor:
    """Rotary frequencies theta_i = base^(-2i/D), i < D/2, with HF's "linear" / "llama3" rescaling.

    Computed on every forward (D/2 numbers) instead of kept in a buffer, so that casting the model to
    bf16 never rounds them.
    """
    dim = config.head_dim
    inv_freq = 1.0 / base ** (torch.arange(0, dim, 2, device=device, dtype=torch.int64).float() / dim)  # [D/2]
    scaling = dict(config.rope_scaling) if scaled else {}
    kind = config.rope_type if scaled else "default"
    if kind == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif kind == "llama3":
        # Llama 3.1: keep high frequencies, divide low ones by `factor`, interpolate in between.
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_ctx = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled_freq = torch.where(wavelen > old_ctx / low, inv_freq / factor, inv_freq)
        smooth = (old_ctx / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled_freq / factor + smooth * scaled_freq
        medium = (wavelen >= old_ctx / high) & (wavelen <= old_ctx / low)
        inv_freq = torch.where(medium, smoothed, scaled_freq)
    return inv_freq


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [B, T, 1, D] of angle p * theta_i, with the half-split layout (i and i + D/2 share theta_i)."""
    angles = positions.float()[:, :, None] * inv_freq[None, None, :]  # [B, T, D/2]
    emb = torch.cat([angles, angles], dim=-1)[:, :, None, :]  # [B, T, 1, D]
    return emb.cos().to(dtype), emb.sin().to(dtype)


@functools.lru_cache(maxsize=16)
def rope_table(config: ModelConfig, base: float, device: torch.device, dtype: torch.dtype, scaled: bool = True
               ) -> torch.Tensor:
    """[P, 2, D]: `rope_cos_sin` of every position p < P = the model's context, cos then sin.

    A forward gathers its tokens' rows (`forward_indices`) instead of computing the angles again: the same
    elementwise ops over 0 .. P-1, so the values are bit-identical, for one gather in place of about ten
    launches per forward. Built once per model kind, device and dtype (16.8 MB for the 1.5B target in bf16);
    a forward's first call is eager (capture warms up first), so the table lives outside any graph's pool.
    """
    positions = torch.arange(config.max_position_embeddings, device=device)[None]  # [1, P]
    cos, sin = rope_cos_sin(positions, rope_inv_freq(config, base, device, scaled), dtype)  # [1, P, 1, D]
    return torch.cat([cos, sin], dim=2)[0].contiguous()  # [P, 2, D]


def forward_indices(cache: KVCache, width: int, q_len: torch.Tensor, table: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """What a forward over `cache` computes once for all its layers (`kernels.forward_indices`): kv_len [B]
    (suffix incl. the new tokens), the cache rows [B, T] its K/V go to (padding tokens: the scratch row), and cos, sin
    [B, T, 1, D] of its tokens' positions from `table` (`rope_table`). One launch on CUDA."""
    from kernels.forward_indices import forward_indices_fused, forward_indices_ref

    kernel = forward_indices_fused if _fused(q_len) else forward_indices_ref
    kv_len, rows, rope = kernel(cache.suffix_len, cache.prefix_len, cache.seq_group, q_len, width, cache.capacity,
                                table)
    return kv_len, rows, rope[:, :, :1], rope[:, :, 1:]  # cos, sin: views [B, T, 1, D]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x_i, x_{i+D/2}) by its angle: x * cos + rotate_half(x) * sin. x: [B, T, H, D]."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
         ) -> tuple[torch.Tensor, torch.Tensor]:
    """`apply_rope` of q [B, T, Hq, D] and k [B, T, Hkv, D]; one launch on CUDA (bit-identical in bf16)."""
    if _fused(q, k) and q.dtype == cos.dtype:
        from kernels.rope import apply_rope_fused

        return apply_rope_fused(q, k, cos, sin)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin)


def rope_and_store(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   cache: KVCache, layer: int, rows: torch.Tensor) -> torch.Tensor:
    """RoPE of q and k [B, T, H, D]; k' and v stored in `layer` of the cache at rows [B, T]; returns q'.

    One launch on CUDA (`kernels.rope.apply_rope_and_store`), bit-identical to `rope` + `KVCache.write`.
    """
    if _fused(q, k, v) and q.dtype == cos.dtype == cache.suffix_k.dtype:
        from kernels.rope import apply_rope_and_store

        return apply_rope_and_store(q, k, v, cos, sin, cache.suffix_k[layer], cache.suffix_v[layer], rows)
    q, k = rope(q, k, cos, sin)
    cache.write(layer, k, v, rows)
    return q


def gated_act(gate_up: torch.Tensor, gelu: bool) -> torch.Tensor:
    """act(gate) * up of [gate | up] [..., 2I] (act: gelu-tanh or silu); one launch on CUDA."""
    if _fused(gate_up):
        from kernels.activation import gated_act_fused

        return gated_act_fused(gate_up, gelu)
    gate, up = gate_up.chunk(2, dim=-1)
    act = F.gelu(gate, approximate="tanh") if gelu else F.silu(gate)
    return act * up


class Attention(nn.Module):
    """Grouped-query attention over the ragged KV cache.

    q, k, v = x Wq, x Wk, x Wv (optional bias); optional per-head RMSNorm of q and k (Qwen3, Gemma 3);
    RoPE at the tokens' absolute positions; the new K/V go into the cache at `rows` [B, T]
    (`forward_indices`), then o = attn(q, cache) Wo with softmax scale `config.attn_scale` and this
    layer's sliding window.
    """

    def __init__(self, config: ModelConfig, layer: int, norm_offset: float = 0.0) -> None:
        super().__init__()
        self.layer = layer
        self.n_heads, self.n_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        self.scale = config.attn_scale
        self.window = config.window(layer)
        q_size, kv_size = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        self.split = (q_size, kv_size, kv_size)
        self.qkv_proj = Linear(config.hidden_size, q_size + 2 * kv_size, bias=config.qkv_bias)
        self.o_proj = Linear(q_size, config.hidden_size, bias=config.o_bias)
        self.q_norm = self.k_norm = None
        if config.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps, norm_offset)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps, norm_offset)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache,
                q_len: torch.Tensor, kv_len: torch.Tensor, rows: torch.Tensor, attn: AttentionFn,
                defer_sum: bool = False) -> torch.Tensor | SplitSum:
        """o [B, T, H] (x [B, T, H]); `defer_sum`: o may come as its projection's unsummed slices, for a reader
        that sums them (`kernels.split_sum`)."""
        B, T, _ = x.shape
        q, k, v = self.qkv_proj(x).split(self.split, dim=-1)
        q = q.view(B, T, self.n_heads, self.head_dim)  # [B, T, Hq, D]
        k = k.view(B, T, self.n_kv_heads, self.head_dim)  # [B, T, Hkv, D]
        v = v.view(B, T, self.n_kv_heads, self.head_dim)  # [B, T, Hkv, D]
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = rope_and_store(q, k, v, cos, sin, cache, self.layer, rows)
        o = attn(q, *cache.layer(self.layer), kv_len=kv_len, q_len=q_len, scale=self.scale,
                 window=self.window)  # [B, T, Hq, D]
        return self.o_proj(o.reshape(B, T, self.n_heads * self.head_dim), defer_sum=defer_sum)


class GatedMLP(nn.Module):
    """down(act(x W_gate) * (x W_up)): SwiGLU (silu) for the Llama family, GeGLU (gelu-tanh) for Gemma."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.gate_up_proj = Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.gelu = config.hidden_act == "gelu_pytorch_tanh"

    def forward(self, x: torch.Tensor, defer_sum: bool = False) -> torch.Tensor | SplitSum:
        """down(act(gate) * up) of x [.., H]; `defer_sum` as in `Attention.forward`."""
        return self.down_proj(gated_act(self.gate_up_proj(x), self.gelu), defer_sum=defer_sum)


def last_rows(x: torch.Tensor, q_len: torch.Tensor) -> torch.Tensor:
    """x[b, q_len[b] - 1] for every b, as [B, 1, H] (a gather: no host sync, fixed shape).

    A width-1 x is returned as it is: its row 0 is that row whatever q_len holds (1, or 0 for a padding
    row, whose index clamps to 0), so a draft proposal's first step that feeds one column skips the
    gather's small launches."""
    if x.shape[1] == 1:
        return x
    idx = (q_len.long() - 1).clamp(min=0)[:, None, None].expand(x.shape[0], 1, x.shape[2])
    return x.gather(1, idx)


def fuse_hf_state_dict(hf: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Map an HF decoder checkpoint onto our module names: drop the `model.` prefix, fuse q/k/v and gate/up.

    A tied checkpoint's `lm_head.weight` (if present at all) is dropped: the embedding serves as head. `hf` is
    consumed (emptied as its tensors move): only one layer's parts sit beside their fused tensor at a time.
    """
    out: dict[str, torch.Tensor] = {}
    while hf:
        name, tensor = hf.popitem()
        for prefix in ("model.language_model.", "language_model.model.", "model."):
            if name.startswith(prefix):
                name = name[len(prefix):]
                break
        out[name] = tensor
    if config.tie_word_embeddings:
        out.pop("lm_head.weight", None)
    for i in range(config.num_layers):
        a, m = f"layers.{i}.self_attn.", f"layers.{i}.mlp."
        for kind in ("weight", "bias"):
            parts = [out.pop(f"{a}{p}_proj.{kind}", None) for p in "qkv"]
            if all(p is not None for p in parts):
                out[f"{a}qkv_proj.{kind}"] = torch.cat(parts, dim=0)
        gate, up = out.pop(f"{m}gate_proj.weight", None), out.pop(f"{m}up_proj.weight", None)
        if gate is not None and up is not None:
            out[f"{m}gate_up_proj.weight"] = torch.cat([gate, up], dim=0)
    return out


class Decoder(nn.Module):
    """What every family shares around its blocks: the cache it needs and the final norm + LM head.

    Subclasses set `config`, `embed_tokens`, `layers`, `norm` and `lm_head` (None when tied).
    """

    config: ModelConfig
    hidden: torch.Tensor | None = None  # [B, T, H] final normed states of the last forward (see `logits`)

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        """An empty KV cache for `batch` sequences of up to `capacity` tokens (weights' device/dtype)."""
        weight = self.embed_tokens.weight
        return KVCache.allocate(self.config.num_layers, batch, capacity, self.config.num_kv_heads,
                                self.config.head_dim, dtype=weight.dtype, device=weight.device)

    def logits(self, x: torch.Tensor, q_len: torch.Tensor, last_only: bool, normed: bool = False) -> torch.Tensor:
        """float32 logits of the final hidden states x [B, T, H] (only row q_len[b]-1 with `last_only`); `normed`:
        x is the final norm's output already (a decoder that fused its last residual add into that norm).

        The normed states of every row stay in `self.hidden` [B, T, H] until the next forward: a feature
        draft (`bass.models.feature_draft`) reads them. RMSNorm is row-wise, so norming all rows before
        picking the last ones changes no logit; it costs one norm over the prompt at prefill.
        """
        f = x if normed else self.norm(x)
        self.hidden = f
        if last_only:
            f = last_rows(f, q_len)  # [B, 1, H]
        return linear(f, self.head, out_dtype=torch.float32)  # [B, T, V]

    @property
    def head(self) -> torch.Tensor:
        """The LM head's table [V, H]: the embedding when tied."""
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
