"""KV cache: a shared prompt prefix per group plus a ragged per-sequence suffix.

The tensors follow `kernels/layout.py` with a leading layer axis. Lifecycle of one request:

    cache = KVCache.allocate(... batch=G prompts ...)   # prompts are prefilled into the suffix
    model(prompt_tokens, cache, q_len=prompt_lens)      # writes K/V, advances suffix_len
    cache = cache.fork(k, capacity)                      # prompt K/V becomes the shared prefix,
                                                         # G*k empty suffixes follow
    model(new_tokens, cache, q_len)                      # decode / draft / verify steps
    cache.truncate(accepted_len)                         # per-sequence rollback after verify
    cache = cache.select(live)                           # finished sequences leave the batch

Lengths live on the model's device so a step needs no host synchronisation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class KVCache:
    prefix_k: torch.Tensor  # [layers, G, P, Hkv, D]
    prefix_v: torch.Tensor  # [layers, G, P, Hkv, D]
    prefix_len: torch.Tensor  # [G] int32
    seq_group: torch.Tensor  # [B] int32
    suffix_k: torch.Tensor  # [layers, B, S + 1, Hkv, D]  (row S: scratch for padding writes)
    suffix_v: torch.Tensor  # [layers, B, S + 1, Hkv, D]
    suffix_len: torch.Tensor  # [B] int32

    @classmethod
    def allocate(cls, n_layers: int, batch: int, capacity: int, n_kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str) -> KVCache:
        """An empty cache of `batch` sequences with no prefix and room for `capacity` tokens each."""
        z = dict(dtype=dtype, device=device)
        i32 = dict(dtype=torch.int32, device=device)
        return cls(
            prefix_k=torch.zeros(n_layers, 1, 0, n_kv_heads, head_dim, **z),
            prefix_v=torch.zeros(n_layers, 1, 0, n_kv_heads, head_dim, **z),
            prefix_len=torch.zeros(1, **i32),
            seq_group=torch.zeros(batch, **i32),
            suffix_k=torch.zeros(n_layers, batch, capacity + 1, n_kv_heads, head_dim, **z),
            suffix_v=torch.zeros(n_layers, batch, capacity + 1, n_kv_heads, head_dim, **z),
            suffix_len=torch.zeros(batch, **i32),
        )

    @property
    def batch(self) -> int:
        return self.suffix_k.shape[1]

    @property
    def capacity(self) -> int:
        """Usable suffix rows per sequence (one more row is allocated as a scratch row)."""
        return self.suffix_k.shape[2] - 1

    def positions(self, t: int) -> torch.Tensor:  # [B, t]
        """Absolute positions of the next `t` tokens of every sequence."""
        start = self.prefix_len[self.seq_group.long()] + self.suffix_len
        return start.long()[:, None] + torch.arange(t, device=start.device)

    def write(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor, q_len: torch.Tensor) -> None:
        """Store the K/V of the next tokens ([B, T, Hkv, D]) at rows suffix_len .. suffix_len+q_len-1.

        Padding tokens (i >= q_len[b]) go to the scratch row past `capacity`, which no length ever
        reaches: a dense scatter with no data-dependent shape, and no valid row is overwritten.
        """
        B, T = k_new.shape[:2]
        i = torch.arange(T, device=k_new.device)
        rows = self.suffix_len.long()[:, None] + i  # [B, T]
        rows = torch.where((i < q_len.long()[:, None]) & (rows < self.capacity), rows, self.capacity)
        b = torch.arange(B, device=k_new.device)[:, None].expand(B, T)
        self.suffix_k[layer].index_put_((b, rows), k_new)
        self.suffix_v[layer].index_put_((b, rows), v_new)

    def layer(self, layer: int) -> tuple[torch.Tensor, ...]:
        """(prefix_k, prefix_v, prefix_len, seq_group, suffix_k, suffix_v) of one layer."""
        return (self.prefix_k[layer], self.prefix_v[layer], self.prefix_len, self.seq_group,
                self.suffix_k[layer], self.suffix_v[layer])

    def advance(self, q_len: torch.Tensor) -> None:
        """Count the tokens a forward pass has just written."""
        self.suffix_len += q_len.to(self.suffix_len.dtype)

    def truncate(self, new_len: torch.Tensor) -> None:
        """Roll every sequence back to `new_len` suffix tokens (the rows past it become free)."""
        self.suffix_len.copy_(torch.minimum(self.suffix_len, new_len.to(self.suffix_len.dtype)))

    def select(self, rows: torch.Tensor) -> KVCache:
        """Keep only the sequences `rows` (in that order): finished sequences leave the batch."""
        rows = rows.to(self.suffix_k.device).long()
        return KVCache(self.prefix_k, self.prefix_v, self.prefix_len, self.seq_group[rows],
                       self.suffix_k[:, rows], self.suffix_v[:, rows], self.suffix_len[rows])

    def fork(self, samples: int, capacity: int) -> KVCache:
        """Turn a prefilled cache of G prompts into the shared prefix of G * `samples` sequences.

        The prompts' K/V is stored once; sequence g * samples + s belongs to group g.
        """
        L, G, _, H, D = self.suffix_k.shape
        P = int(self.suffix_len.max().item())
        dev = self.suffix_k.device
        return KVCache(
            prefix_k=self.suffix_k[:, :, :P].clone(),
            prefix_v=self.suffix_v[:, :, :P].clone(),
            prefix_len=self.suffix_len.clone(),
            seq_group=torch.arange(G, device=dev, dtype=torch.int32).repeat_interleave(samples),
            suffix_k=torch.zeros(L, G * samples, capacity + 1, H, D, dtype=self.suffix_k.dtype, device=dev),
            suffix_v=torch.zeros(L, G * samples, capacity + 1, H, D, dtype=self.suffix_v.dtype, device=dev),
            suffix_len=torch.zeros(G * samples, dtype=torch.int32, device=dev),
        )
