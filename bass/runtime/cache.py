"""KV cache: a shared prompt prefix per group plus a ragged per-sequence suffix.

The tensors follow `kernels/layout.py` with a leading layer axis. Lifecycle of one request:

    cache = KVCache.allocate(... batch=G prompts ...)   # prompts are prefilled into the suffix
    model(prompt_tokens, cache, q_len=prompt_lens)      # writes K/V, advances suffix_len
    cache = cache.fork(k, capacity)                      # prompt K/V becomes the shared prefix,
                                                         # G*k empty suffixes follow
    model(new_tokens, cache, q_len)                      # decode / draft / verify steps
    cache.truncate(accepted_len)                         # per-sequence rollback after verify
    cache = cache.compact(live)                          # finished sequences leave the batch

Lengths live on the model's device so a step needs no host synchronisation. `compact` moves the live
sequences to the front of the same storage, so a CUDA graph captured for a batch size keeps reading
the right memory; `CacheArena` keeps that storage across requests.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bass.runtime.transfer import ints_to_device


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

    def write(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor, rows: torch.Tensor) -> None:
        """Store the K/V of the next tokens ([B, T, Hkv, D]) at `rows` [B, T] (`bass.models.layers.forward_indices`)."""
        B, T = k_new.shape[:2]
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

    def view(self, n: int) -> KVCache:
        """The first n sequences, sharing storage (contiguous per layer, same base pointers)."""
        return KVCache(self.prefix_k, self.prefix_v, self.prefix_len, self.seq_group[:n],
                       self.suffix_k[:, :n], self.suffix_v[:, :n], self.suffix_len[:n])

    def compact(self, rows: list[int]) -> KVCache:
        """Move the sequences `rows` (ascending) to the front in place; return the view of them.

        Rows past them get length 0, so a padded batch (CUDA graphs) never reads stale K/V.
        """
        n = len(rows)
        if rows == list(range(n)):
            self.suffix_len[n:] = 0
            return self.view(n)
        moved = [(dst, src) for dst, src in enumerate(rows) if dst != src]
        device = self.suffix_k.device
        dst, src = ints_to_device([d for d, _ in moved], device), ints_to_device([s for _, s in moved], device)
        for t in (self.suffix_k, self.suffix_v):
            t.index_copy_(1, dst, t.index_select(1, src))  # only the rows that move, via a temporary
        idx = ints_to_device(rows, device)
        self.seq_group[:n] = self.seq_group[idx]
        self.suffix_len[:n] = self.suffix_len[idx]
        self.suffix_len[n:] = 0
        return self.view(n)

    def fork(self, samples: int, capacity: int, width: int | None = None) -> KVCache:
        """Turn a prefilled cache of G prompts into the shared prefix of G * `samples` sequences.

        The prompts' K/V is stored once; sequence g * samples + s belongs to group g. `width` is the longest
        prompt's length (its suffix_len), where the caller knows it: read from the device instead, it waits for
        the whole prefill (a host synchronisation).
        """
        L, G, _, H, D = self.suffix_k.shape
        P = _width(self, width)
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


def _width(prefilled: KVCache, width: int | None) -> int:
    """The longest prefilled row: `width` where the caller knows it, else read from the device (a sync)."""
    return int(prefilled.suffix_len.max().item()) if width is None else width


class CacheArena:
    """KV storage reused across requests, so CUDA graphs captured on it stay valid.

    Without `persistent` (the CPU) every request gets fresh tensors from `KVCache.fork`. With it,
    one large cache is kept and each request's cache is a view of its first rows; the prefix keeps
    its full width (rows past prefix_len are never read). `version` changes whenever the storage is
    reallocated, which tells graph runners to drop what they captured.
    """

    def __init__(self, persistent: bool):
        self.persistent = persistent
        self.base: KVCache | None = None
        self.version = 0

    def fork(self, prefilled: KVCache, samples: int, capacity: int, width: int | None = None) -> KVCache:
        """Like `prefilled.fork(samples, capacity, width)`, in the arena's storage when it is persistent."""
        if not self.persistent:
            return prefilled.fork(samples, capacity, width)
        L, G, _, H, D = prefilled.suffix_k.shape
        B, P = G * samples, _width(prefilled, width)
        if not self._fits(G, P, B, capacity, prefilled):
            self._allocate(L, G, P, B, capacity, H, D, prefilled.suffix_k.dtype, prefilled.suffix_k.device)
        base = self.base
        base.prefix_k[:, :G, :P] = prefilled.suffix_k[:, :, :P]
        base.prefix_v[:, :G, :P] = prefilled.suffix_v[:, :, :P]
        base.prefix_len.zero_()
        base.prefix_len[:G] = prefilled.suffix_len
        base.seq_group.zero_()
        base.seq_group[:B] = torch.arange(G, device=base.seq_group.device, dtype=torch.int32).repeat_interleave(samples)
        base.suffix_len.zero_()
        return KVCache(base.prefix_k, base.prefix_v, base.prefix_len, base.seq_group[:B], base.suffix_k[:, :B],
                       base.suffix_v[:, :B], base.suffix_len[:B])

    def admit(self, running: KVCache | None, prefilled: KVCache, samples: int, capacity: int, width: int,
              slots: list[int]) -> KVCache:
        """`running`'s rows, then the G * `samples` sequences of a newly prefilled request (its G prompts at
        prefix slots `slots`, sequence j of prompt g after the running rows): a request joining a batch
        between rounds.

        The running rows keep their K/V and lengths. Persistent storage is reused when it fits (the new rows
        go in place after the running ones, so captured graphs stay valid); otherwise, and always without
        `persistent`, storage of the needed size is made and the running rows are copied into it.
        """
        L, G, _, H, D = prefilled.suffix_k.shape
        B0 = running.batch if running is not None else 0
        B, g_need = B0 + G * samples, max(slots) + 1
        if running is not None:
            g_need, width_all = max(g_need, running.prefix_k.shape[1]), max(width, running.prefix_k.shape[2])
            capacity = max(capacity, running.capacity)
        else:
            width_all = width
        if not (self.persistent and self._fits(g_need, width_all, B, capacity, prefilled)):
            if self.persistent:
                self._allocate(L, g_need, width_all, B, capacity, H, D, prefilled.suffix_k.dtype,
                               prefilled.suffix_k.device, keep=running)
            else:
                self.base = _storage(L, g_need, width_all, B, capacity, H, D, prefilled.suffix_k.dtype,
                                     prefilled.suffix_k.device)
                if running is not None:
                    _copy_rows(self.base, running)
        base = self.base
        if running is None:  # nothing of an earlier batch may be read as this one's
            base.suffix_len.zero_()
        dev = base.suffix_len.device
        idx = ints_to_device(slots, dev).long()
        base.prefix_k[:, idx, :width] = prefilled.suffix_k[:, :, :width]
        base.prefix_v[:, idx, :width] = prefilled.suffix_v[:, :, :width]
        base.prefix_len[idx] = prefilled.suffix_len
        base.seq_group[B0:B] = idx.to(torch.int32).repeat_interleave(samples)
        base.suffix_len[B0:B] = 0
        view = base.view(B)
        if not self.persistent:
            self.base = None  # the batch's cache owns the storage
        return view

    def reserve(self, like: KVCache, groups: int, width: int, batch: int, capacity: int) -> None:
        """Make the persistent storage hold at least `groups` prompts of `width` tokens and `batch` sequences of
        `capacity` tokens, in `like`'s layers, heads and dtype (at load: a storage that never moves keeps every
        graph captured on it). Nothing without `persistent`."""
        if self.persistent and not self._fits(groups, width, batch, capacity, like):
            L, _, _, H, D = like.suffix_k.shape
            self._allocate(L, groups, width, batch, capacity, H, D, like.suffix_k.dtype, like.suffix_k.device)

    def _fits(self, G, P, B, capacity, like: KVCache) -> bool:
        b = self.base
        return (b is not None and b.prefix_k.shape[1] >= G and b.prefix_k.shape[2] >= P and b.batch >= B
                and capacity <= b.capacity and b.suffix_k.dtype == like.suffix_k.dtype
                and b.suffix_k.shape[0] == like.suffix_k.shape[0])

    def _allocate(self, L, G, P, B, capacity, H, D, dtype, device, keep: KVCache | None = None) -> None:
        """New storage at least this large (and as large as the old one); `keep`'s rows are copied into it."""
        def up(n: int, step: int) -> int:
            return max(step, -(-n // step) * step)

        old = self.base
        G = max(G, old.prefix_k.shape[1] if old else 1)
        B = 1 << (max(B, old.batch if old else 1) - 1).bit_length()  # a power of two: the graphs' batch buckets
        P = up(max(P, old.prefix_k.shape[2] if old else 0), 256)
        capacity = up(max(capacity, old.capacity if old else 0), 256)
        self.base = None  # free the old storage before taking the new (unless rows of it are kept)
        self.base = _storage(L, G, P, B, capacity, H, D, dtype, device)
        if keep is not None:
            _copy_rows(self.base, keep)
        self.version += 1


def _storage(L: int, G: int, P: int, B: int, capacity: int, H: int, D: int, dtype: torch.dtype,
             device: torch.device | str) -> KVCache:
    """Zeroed storage for G prompts of width P and B sequences of `capacity` tokens."""
    z = dict(dtype=dtype, device=device)
    i32 = dict(dtype=torch.int32, device=device)
    return KVCache(torch.zeros(L, G, P, H, D, **z), torch.zeros(L, G, P, H, D, **z), torch.zeros(G, **i32),
                   torch.zeros(B, **i32), torch.zeros(L, B, capacity + 1, H, D, **z),
                   torch.zeros(L, B, capacity + 1, H, D, **z), torch.zeros(B, **i32))


def _copy_rows(dst: KVCache, src: KVCache) -> None:
    """Copy every prefix group and sequence of `src` to the same places in the larger `dst`."""
    G, P = src.prefix_k.shape[1:3]
    B, S = src.batch, src.capacity
    dst.prefix_k[:, :G, :P] = src.prefix_k
    dst.prefix_v[:, :G, :P] = src.prefix_v
    dst.prefix_len[:G] = src.prefix_len
    dst.seq_group[:B] = src.seq_group
    dst.suffix_k[:, :B, :S] = src.suffix_k[:, :, :S]
    dst.suffix_v[:, :B, :S] = src.suffix_v[:, :, :S]
    dst.suffix_len[:B] = src.suffix_len
