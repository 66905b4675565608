"""Trainable decoders for the pipeline: the target as teacher and the draft as student, both cache-free.

The engine's decoders (`bass.models.llama`) run over the ragged KV cache and are inference-only; training
wants a plain causal forward over packed [B, T] windows. `CausalLM` is that forward with the *same
parameter names* as `bass.models.llama.Transformer` (built from `bass.models.layers`' blocks), so the
teacher loads the target's weights as they are and the student exports straight into the shipped file.

The student's token tables are derived from the teacher's (`bass.models.draft`):

    x_0    = E_target[tokens] in_projᵀ                                   [B, T, d]
    logits = (RMSNorm(h_L) out_proj) W_targetᵀ                            [B, T, V]

E_target and W_target stay frozen (they are the teacher's own tensors); in_proj and out_proj are trained.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from bass.models import layers
from bass.models.config import ModelConfig
from bass.models.layers import GatedMLP, RMSNorm, rope_cos_sin, rope_inv_freq

# a feature student pads its head's rows to a multiple of this: its logits' rows 16-byte aligned (`FeatureStudent`)
HEAD_ALIGN = 64


class CausalAttention(nn.Module):
    """Grouped-query causal self-attention with RoPE; parameter names as `bass.models.layers.Attention`."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        q_size, kv_size = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        self.split = (q_size, kv_size, kv_size)
        self.qkv_proj = nn.Linear(config.hidden_size, q_size + 2 * kv_size, bias=config.qkv_bias)
        self.o_proj = nn.Linear(q_size, config.hidden_size, bias=config.o_bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                streams: list[tuple[torch.Tensor, torch.Tensor]] | None = None) -> torch.Tensor:
        """Causal attention over x [B, T, d]. With `streams` (the keys and values, [B, Hkv, T, D] each, that
        this layer computed for the earlier streams of an unrolled draft, `unroll_mask`), x is the next stream:
        it attends to them under that mask, and its own keys and values are appended to the list."""
        B, T, _ = x.shape
        q, k, v = self.qkv_proj(x).split(self.split, dim=-1)
        q, k = layers.rope(q.view(B, T, self.n_heads, self.head_dim), k.view(B, T, self.n_kv_heads, self.head_dim),
                           cos, sin)
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # [B, Hq, T, D], [B, Hkv, T, D]
        v = v.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # [B, Hkv, T, D]
        if not streams:  # the first stream (or no unrolling): plain causal attention
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # [B, Hq, T, D]
        else:
            keys = torch.cat([sk for sk, _ in streams] + [k], 2)  # [B, Hkv, S·T, D]
            values = torch.cat([sv for _, sv in streams] + [v], 2)
            mask = unroll_mask(T, len(streams), x.device)  # [T, S·T]
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
        if streams is not None:
            streams.append((k, v))
        return self.o_proj(o.transpose(1, 2).reshape(B, T, -1))


@functools.lru_cache(maxsize=16)
def unroll_mask(T: int, s: int, device: torch.device) -> torch.Tensor:
    """Which keys stream s (0-based) of an unrolled draft attends to: [T, (s+1)·T] booleans over the keys of
    streams 0 .. s laid end to end.

    Stream s is draft step s + 1. Its entry at position t is the last of a chain drafted from the true entry
    at t − s: while drafting, the cache then holds the target's true entries up to t − s and the draft's own
    entries t − s + 1 .. t, one from each later step. So query t attends to stream 0's keys j ≤ t − s and to
    stream r's key at j = t − s + r for r = 1 .. s (EAGLE-3's training-time test). For s = 0 this is the
    causal mask. Cached: every layer of every micro-batch asks for the same few.
    """
    t = torch.arange(T, device=device)[:, None]
    j = torch.arange(T, device=device)[None, :]
    blocks = [j <= t - s] + [j == t - s + r for r in range(1, s + 1)]
    return torch.cat(blocks, 1)


class CausalBlock(nn.Module):
    """Pre-norm residual block, parameter names as `bass.models.llama.Block`."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = CausalAttention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = GatedMLP(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                streams: list[tuple[torch.Tensor, torch.Tensor]] | None = None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, streams)
        return x + self.mlp(self.post_attention_layernorm(x))


class CausalLM(nn.Module):
    """A Llama-family decoder without a cache. `hidden(tokens)` returns the final normed states [B, T, H]."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList(CausalBlock(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def body(self, x: torch.Tensor, streams: list[list] | None = None, tap: int = 0) -> torch.Tensor:
        """Blocks and final norm over input states x [B, T, H] at positions 0 .. T-1; `streams`: one list per
        layer of the earlier streams' keys and values (`CausalAttention`), extended with x's. With `tap` > 0
        the residual stream after that many blocks is left in `self.tapped` [B, T, H] (else None)."""
        T = x.shape[1]
        inv_freq = rope_inv_freq(self.config, self.config.rope_theta, x.device)
        positions = torch.arange(T, device=x.device)[None].expand(x.shape[0], T)  # [B, T]: the fused rope's shape
        cos, sin = rope_cos_sin(positions, inv_freq, x.dtype)  # [B, T, 1, D]
        self.tapped = None
        for i, block in enumerate(self.layers):
            x = block(x, cos, sin, None if streams is None else streams[i])
            if i + 1 == tap:
                self.tapped = x
        return self.norm(x)


class Teacher(CausalLM):
    """The target, loaded from its engine state dict (`embed_tokens`, `layers.*`, `norm`, `lm_head`)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(config.hidden_size, config.vocab_size,
                                                                          bias=False)

    @property
    def head(self) -> torch.Tensor:
        """W_target [V, H]: the output table (the embedding when tied)."""
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def hidden(self, tokens: torch.Tensor, tap: int = 0) -> torch.Tensor:
        """Final normed hidden states [B, T, H] of tokens [B, T]; with `tap` > 0 the residual stream after that
        many blocks is left in `self.tapped` [B, T, H] (a fused feature draft's second input).

        Under `no_grad` on CUDA it runs on the engine's fused norm, rope and activation kernels, which the
        student's forward, asking for a gradient, leaves for their torch forms (`layers._fused`)."""
        return self.body(self.embed_tokens(tokens), tap=tap)


class Student(CausalLM):
    """The draft: its own blocks at width d over token tables projected from the teacher's (module docstring)."""

    def __init__(self, config: ModelConfig, embedding: torch.Tensor, head: torch.Tensor) -> None:
        super().__init__(config)
        H = embedding.shape[1]
        self.derive = nn.Module()
        self.derive.in_proj = nn.Parameter(torch.empty(config.hidden_size, H))  # [d, H]
        self.derive.out_proj = nn.Parameter(torch.empty(config.hidden_size, H))  # [d, H]
        # frozen and not part of the student's state dict: the teacher's own tables
        self._tables = (embedding, head)

    @torch.no_grad()
    def init_projections(self) -> None:
        """Both projections start as the top-d principal directions of the teacher's tables (scaled to unit rms
        inputs), so the draft starts from the most informative rank-d view of the target's token space."""
        for proj, table in zip((self.derive.in_proj, self.derive.out_proj), self._tables):
            t = table.float()
            cov = t.T @ t / t.shape[0]  # [H, H]
            _, vecs = torch.linalg.eigh(cov)  # ascending eigenvalues
            top = vecs[:, -proj.shape[0]:].T.flip(0)  # [d, H]
            scale = (t @ top.T).pow(2).mean().rsqrt()
            proj.copy_((top * scale).to(proj.dtype))

    def hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        """Final normed hidden states [B, T, d] of tokens [B, T]."""
        x = F.embedding(tokens, self._tables[0]).to(self.derive.in_proj.dtype) @ self.derive.in_proj.T
        return self.body(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits [..., V] of final states [..., d]: up to the teacher's width, then its output table."""
        up = hidden @ self.derive.out_proj  # [..., H]
        return up @ self._tables[1].T.to(up.dtype)


class FeatureStudent(CausalLM):
    """The feature draft (`bass.models.feature_draft`, parameter names as `FeatureDraft`), cache-free:

    f̂_{t+1} = W_out Body(W_fc [f_t ; E x_{t+1}])_t      logits = W_head[S] f̂_{t+1}

    f_t are the teacher's final normed hidden states; E and W_head its own frozen tables; S its proposal
    vocabulary (`vocab`, target ids ascending; None: every token), the rows of the head the shipped draft reads.

    With `fused_layer` = l > 0 it also reads the target's residual stream after l blocks, m_t (EAGLE-3's
    fused features: the middle of the target still holds what its last layers have narrowed to the next
    token), scaled to unit rms because a residual stream's scale grows with depth and a few channels can dominate it:

    z_t = W_fc [f_t ; E x_{t+1} ; m_t / rms(m_t)]

    The draft has no m of its own guesses, so an entry it drafted feeds zeros there, in training as while
    drafting (`unroll`). This is a training experiment: the engine feeds the final features alone, and its
    loader refuses such a file (`bass.models.draft`).
    """

    def __init__(self, config: ModelConfig, embedding: torch.Tensor, head: torch.Tensor,
                 vocab: torch.Tensor | None = None, fused_layer: int = 0, align: int = HEAD_ALIGN) -> None:
        super().__init__(config)
        H = embedding.shape[1]
        self.target_hidden, self.fused_layer = H, fused_layer
        self.fc = nn.Linear((3 if fused_layer else 2) * H, config.hidden_size, bias=False)
        self.out_proj = nn.Linear(config.hidden_size, H, bias=False)
        self.vocab = None if vocab is None else vocab.to(head.device, torch.long)  # [V'] not a weight
        rows = head if vocab is None else head[self.vocab]  # [V', H]
        # zero rows up to a multiple of `align`, never read back (`logits` slices them off): the shipped vocabulary
        # has 32,769 ids, and a [rows, 32,769] bf16 product's rows are not 16-byte aligned, which cuBLAS's fast
        # kernels need
        self.n_logits = rows.shape[0]
        if pad := -self.n_logits % align:
            rows = torch.cat([rows, rows.new_zeros(pad, H)])
        self._tables = (embedding, rows)  # frozen and not part of the state dict

    def features(self, f: torch.Tensor, next_tokens: torch.Tensor, streams: list[list] | None = None,
                 tapped: torch.Tensor | None = None) -> torch.Tensor:
        """Predicted features f̂ [B, T, H] of entries (f [B, T, H] at positions 0 .. T-1, next_tokens [B, T]);
        `streams` as in `CausalLM.body`; `tapped` [B, T, H]: a fused draft's m (zeros at its own guesses)."""
        dtype = self.fc.weight.dtype
        parts = [f.to(dtype), F.embedding(next_tokens, self._tables[0]).to(dtype)]
        if self.fused_layer:
            if tapped is None:
                raise ValueError(f"this draft reads the target's residual stream after {self.fused_layer} blocks: "
                                 "pass it as `tapped`")
            parts.append(unit_rms(tapped, self.config.rms_norm_eps).to(dtype))
        return self.out_proj(self.body(self.fc(torch.cat(parts, -1)), streams))

    def unroll(self, f: torch.Tensor, next_tokens: torch.Tensor, steps: int, true_context: bool = True,
               tapped: torch.Tensor | None = None) -> list[torch.Tensor]:
        """The predicted features of draft steps 1 .. `steps` at every position, [B, T, H] each.

        Step 1 reads the target's features f (and a fused draft's m, `tapped`); step s + 1 reads step s's
        predictions, shifted one position (its entry t holds f̂ˢ_t, predicted at t − 1), as drafting feeds them,
        with zeros for m. With `true_context` each step
        attends to what a draft's cache holds at that step, the target's entries before the chain and its
        own entries along it (`unroll_mask`); without it, to its own stream alone (every earlier entry a
        prediction too, how the first three training cycles unrolled). Predictions fed forward are detached:
        each step's loss trains the draft to read its own guesses, not to bend them.
        """
        streams: list[list] | None = [[] for _ in self.layers] if true_context else None
        guessed = None if tapped is None else torch.cat([tapped[:, :1], torch.zeros_like(tapped[:, 1:])], 1)
        out, fed, fed_m = [], f, tapped
        for _ in range(steps):
            out.append(self.features(fed, next_tokens, streams, fed_m))
            fed, fed_m = torch.cat([f[:, :1], out[-1][:, :-1].detach()], 1), guessed
        return out

    def logits(self, f_hat: torch.Tensor) -> torch.Tensor:
        """Logits [..., V'] of predicted features [..., H] through the teacher's head rows of `vocab` (a view of
        the padded product's first V' columns)."""
        return (f_hat @ self._tables[1].T.to(f_hat.dtype))[..., :self.n_logits]


def unit_rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x²) + eps) over the last dimension, in float32 (zero rows stay zero): torch's RMSNorm
    without a weight."""
    return F.rms_norm(x.float(), (x.shape[-1],), eps=eps)


def student_state_dict(student: Student | FeatureStudent) -> dict[str, torch.Tensor]:
    """What the shipped file holds: the student's own parameters (blocks, final norm, the two projections)."""
    return {name: t.detach() for name, t in student.state_dict().items()}
