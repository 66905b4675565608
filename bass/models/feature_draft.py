"""A feature draft (EAGLE-style, Li et al. 2024): a small decoder that reads the target's own hidden states.

A standalone draft must rebuild, from tokens alone, what the target already computed. This one reuses it.
Entry t of its cache pairs the target's final (normed) hidden state f_t at position t with the token
x_{t+1} that followed, and predicts the next hidden state:

    z_t      = W_fc [f_t ; E x_{t+1}]                     [d]     (E: the target's token embedding)
    z'       = Blocks(z)_t                                        (causal, over the draft's own KV cache)
    f̂_{t+1} = W_out RMSNorm(z'_t)                          [H]
    logits   = W_head f̂_{t+1}                              [V]     (the target's LM head: q(x_{t+2}))

A draft may propose from a reduced vocabulary (`vocab`, EAGLE-3's habit): the V' target ids code uses most
(the shipped draft: the training corpus's 32,768 most frequent tokens, 99.6 % of its tokens). Its head is
then those V' rows of the target's, and its logits [.., V'] cover only them. The full head is what a
draft step reads most (V x H = 151,936 x 1,536 bf16 is 467 MB, against 17 MB of blocks), and sampling
scans every logit of a row, so both shrink by V'/V. The draft rule maps the columns back to target ids and
gives every other token q = 0 (`bass.decode.rules.DraftRule`), so sampling stays lossless.

The head's bytes shrink again when a loaded draft folds its output projection into it (`fold_head`):
logits = (W_head W_out) n with n = RMSNorm(z'_t), a [V', d] table in place of [V', H], H / d = 3x fewer
bytes for the shipped draft (33.6 MB against 100.7). The product is computed once in float32, so the
logits differ from the two-GEMM form by the rounding of a table entry instead of the rounding of f̂; the
verify is handed whatever q the draft drew from, so drafting stays lossless. f̂ itself is still W_out n
(one small GEMM): the next draft step feeds it.

While drafting, the target's f for the newest positions is not known yet, so step i feeds the draft's own
prediction f̂ back in place of f. After each verify, the target's true features of the accepted positions
replace those guesses (`bass.drafters.feature.FeatureDrafter`). The head and embedding are the target's
tensors (a reduced vocabulary's head rows, or their fold, are computed at load), so the draft's own file
holds only W_fc, the blocks, W_out and the reduced vocabulary's ids: with d = 512, 2 blocks, about 8 M
parameters (17 MB in bf16).

Like every decoder here, `forward` leaves its output features in `self.hidden` ([B, T, H]; each sequence's
last one, [B, 1, H], with `last_only`): the next draft step's input, and what `GraphedModel` hands back
after a graph replay.
"""

from __future__ import annotations

import torch
from torch import nn

from bass.models.config import ModelConfig
from bass.models.layers import AttentionFn, RMSNorm, embed_concat, last_rows
from bass.models.linear import Linear, linear
from bass.models.llama import Block, run_blocks
from bass.runtime.cache import KVCache


class FeatureDraft(nn.Module):
    """The draft of the module docstring; `embedding` and `head` are the target's [V, H] tables (not copied);
    `vocab` ([V'] target ids, ascending), when given, the reduced vocabulary it proposes from (its head is a
    copy of those rows of `head`)."""

    def __init__(self, config: ModelConfig, embedding: torch.Tensor, head: torch.Tensor,
                 vocab: torch.Tensor | None = None) -> None:
        super().__init__()
        H, d = embedding.shape[1], config.hidden_size
        self.config, self.target_hidden = config, H
        if vocab is not None:
            vocab = vocab.to(device=head.device, dtype=torch.long)
            ascending = vocab.ndim == 1 and bool((vocab[1:] > vocab[:-1]).all())
            if not ascending or int(vocab[0]) < 0 or int(vocab[-1]) >= head.shape[0]:
                raise ValueError(f"a draft's vocabulary must be ascending target ids in 0 .. {head.shape[0] - 1}")
            head = head[vocab]  # [V', H]
        self.vocab = vocab
        self.fc = Linear(2 * H, d, bias=False)
        self.layers = nn.ModuleList(Block(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(d, config.rms_norm_eps)
        self.out_proj = Linear(d, H, bias=False)
        self._tables = (embedding, head)  # the target's own tensors: neither parameters nor in the state dict
        self.folded = False  # the head reads n = RMSNorm(z') through W_head W_out (`fold_head`)
        self.hidden: torch.Tensor | None = None

    @torch.no_grad()
    def fold_head(self) -> None:
        """Replace the head [V or V', H] by W_head W_out [V or V', d] (module docstring), computed in float32
        and stored in the head's dtype; once the weights are loaded, and only where d < H makes it smaller."""
        emb, head = self._tables
        if self.folded or self.config.hidden_size >= self.target_hidden:
            return
        w_out = self.out_proj.weight  # [H, d]
        self._tables = (emb, (head.float() @ w_out.float()).to(head.dtype))  # [V', d]
        self.folded = True

    def new_cache(self, batch: int, capacity: int) -> KVCache:
        """An empty KV cache for `batch` sequences of up to `capacity` entries."""
        w = self.fc.weight
        return KVCache.allocate(self.config.num_layers, batch, capacity, self.config.num_kv_heads,
                                self.config.head_dim, dtype=w.dtype, device=w.device)

    def forward(self, tokens: torch.Tensor, cache: KVCache, q_len: torch.Tensor, attn: AttentionFn, *,
                features: torch.Tensor, num_layers: int | None = None, last_only: bool = False) -> torch.Tensor:
        """Logits [B, T or 1, V or V'] (float32) of x_{t+2} for entries (features [B, T, H], tokens [B, T]) =
        (f_t, x_{t+1}), continuing each sequence in `cache`; rows past q_len[b] are padding (as the target's
        forward). Leaves the predicted features f̂ [B, T or 1, H] in `self.hidden`: with `last_only`, each
        sequence's last one, which is what the next draft step feeds (no gather between steps)."""
        emb, head = self._tables
        x = self.fc(embed_concat(features, emb, tokens))  # [B, T, d]
        n = run_blocks(self.layers[:num_layers], x, cache, q_len, attn, self.config, norm=self.norm)  # [B, T, d]
        if last_only:
            n = last_rows(n, q_len)  # [B, 1, d]: the projections are row-wise
        self.hidden = self.out_proj(n)  # f̂ [B, T or 1, H]
        return linear(n if self.folded else self.hidden, head, out_dtype=torch.float32)

    @property
    def head(self) -> torch.Tensor:
        """The table its logits come from: the target's LM head or its rows of the vocabulary [V or V', H], or
        once folded, those rows times W_out [V or V', d]."""
        return self._tables[1]
