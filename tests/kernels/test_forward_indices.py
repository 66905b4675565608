"""A forward's index arithmetic (kernels/forward_indices.py): the Triton kernel against its torch twin, and the
RoPE table against computing the angles per token."""

from __future__ import annotations

import pytest
import torch
from fused_cases import DEVICE, needs_cuda, poison

import kernels.forward_indices as mod
from bass.models.layers import forward_indices, rope_cos_sin, rope_inv_freq, rope_table
from bass.runtime.cache import KVCache
from bench.synthetic import QWEN25_1P5B, TINY
from kernels.forward_indices import forward_indices_fused, forward_indices_ref


def _case(width: int, P: int = 64, D: int = 8):
    """Three sequences of two prompt groups in a cache of capacity 6 (batch view of a 4-row arena): one
    near the end of its rows, one whose positions pass the table's last row, one with no new tokens."""
    suffix_len = torch.tensor([5, 2, 0], dtype=torch.int32, device=DEVICE)
    prefix_len = torch.tensor([3, P - 2], dtype=torch.int32, device=DEVICE)
    seq_group = torch.tensor([0, 1, 1], dtype=torch.int32, device=DEVICE)
    q_len = torch.tensor([width, width - 1, 0], dtype=torch.int32, device=DEVICE)
    table = torch.randn(P, 2, D, generator=torch.Generator().manual_seed(3)).to(DEVICE)
    return suffix_len, prefix_len, seq_group, q_len, width, 6, table


@pytest.mark.parametrize("width", [1, 3])
def test_kernel_matches_torch_twin(monkeypatch, width: int) -> None:
    poison(monkeypatch, mod)
    args = _case(width)
    got, want = forward_indices_fused(*args), forward_indices_ref(*args)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and torch.equal(g, w)
    kv_len, rows, rope = got
    assert kv_len.tolist() == [5 + width, 2 + width - 1, 0]
    if width == 3:  # row 5 + 1 reaches the capacity: the scratch row; sequence 2's padding tokens too
        assert rows.tolist() == [[5, 6, 6], [2, 3, 6], [6, 6, 6]]
        table = args[-1]
        assert torch.equal(rope[0, 2], table[3 + 5 + 2])
        assert torch.equal(rope[1, 0], table[63])  # position 62 + 2 = 64 is past the table: its last row
        assert not torch.equal(rope[0, 1], rope[0, 2])


def test_kernel_reads_strided_lengths(monkeypatch) -> None:
    """q_len as a column of a [B, L] tensor (every other element): read element by element, not as memory."""
    poison(monkeypatch, mod)
    suffix_len, prefix_len, seq_group, q_len, width, capacity, table = _case(2)
    strided = torch.stack([q_len, torch.full_like(q_len, 7)], 1)[:, 0]  # [B], stride 2
    assert not strided.is_contiguous()
    got = forward_indices_fused(suffix_len, prefix_len, seq_group, strided, width, capacity, table)
    want = forward_indices_ref(suffix_len, prefix_len, seq_group, q_len, width, capacity, table)
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)


def test_rope_table_rows_equal_the_angles_computed_per_token() -> None:
    """Bit for bit, in float32 and bf16: the table is the same ops over 0 .. P-1."""
    inv_freq = rope_inv_freq(QWEN25_1P5B, QWEN25_1P5B.rope_theta, torch.device(DEVICE))
    positions = torch.tensor([[0, 1, 2], [4095, 17, 32767]], device=DEVICE)
    for dtype in (torch.float32, torch.bfloat16):
        table = rope_table(QWEN25_1P5B, QWEN25_1P5B.rope_theta, torch.device(DEVICE), dtype)
        assert table.shape == (QWEN25_1P5B.max_position_embeddings, 2, QWEN25_1P5B.head_dim)
        cos, sin = rope_cos_sin(positions, inv_freq, dtype)
        assert torch.equal(table[positions][:, :, :1], cos) and torch.equal(table[positions][:, :, 1:], sin)


def test_forward_indices_of_a_cache_gives_positions_and_rows() -> None:
    """Through `bass.models.layers`: positions are prefix + suffix + t, as the attention mask counts them."""
    cache = KVCache.allocate(1, 2, 8, 1, TINY.head_dim, dtype=torch.float32, device=DEVICE)
    cache.suffix_len.copy_(torch.tensor([1, 4], dtype=torch.int32))
    table = rope_table(TINY, TINY.rope_theta, torch.device(DEVICE), torch.float32)
    kv_len, rows, cos, sin = forward_indices(cache, 2, torch.tensor([2, 1], dtype=torch.int32, device=DEVICE), table)
    assert kv_len.tolist() == [3, 5] and rows.tolist() == [[1, 2], [4, 8]]
    assert cos.shape == sin.shape == (2, 2, 1, TINY.head_dim)
    assert torch.equal(cos[1, 0, 0], table[4, 0]) and torch.equal(sin[0, 1, 0], table[2, 1])


@needs_cuda
@pytest.mark.gpu
def test_kernel_matches_torch_twin_bf16_cuda() -> None:
    args = list(_case(5, P=4096, D=128))
    args[-1] = args[-1].bfloat16()
    for g, w in zip(forward_indices_fused(*args), forward_indices_ref(*args), strict=True):
        assert torch.equal(g, w)
