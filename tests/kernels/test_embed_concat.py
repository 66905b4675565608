"""`kernels.embed_concat`: a feature draft's input rows [f ; E[x]] in one launch, against its torch twin."""

from __future__ import annotations

import pytest
import torch
from fused_cases import DEVICE, fresh_gen, needs_cuda, poison

import kernels.embed_concat as mod
from kernels.embed_concat import embed_concat_fused, embed_concat_ref


def _inputs(gen: torch.Generator, dtype: torch.dtype, B: int = 3, L: int = 4, Hf: int = 24, He: int = 40,
            V: int = 50) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Features [B, L, Hf] float32, a table [V, He] of `dtype`, tokens [B, L] (all on DEVICE)."""
    features = torch.randn(B, L, Hf, generator=gen).to(DEVICE)
    table = torch.randn(V, He, generator=gen).to(device=DEVICE, dtype=dtype)
    return features, table, torch.randint(0, V, (B, L), generator=gen).to(DEVICE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_kernel_is_its_twin_bit_for_bit(monkeypatch, dtype) -> None:
    """Widths that are not powers of two, features cast to the table's dtype, every element written."""
    poison(monkeypatch, mod)
    features, table, tokens = _inputs(fresh_gen(), dtype)
    out = embed_concat_fused(features, table, tokens)
    assert out.shape == (3, 4, 64) and out.dtype == dtype
    assert torch.equal(out, embed_concat_ref(features, table, tokens))


def test_strided_tokens_and_feature_rows_are_read_in_place(monkeypatch) -> None:
    """A chained draft step feeds tokens[:, i:i + 1] of the proposal's [B, L] buffer and the last step's
    features, a [B, 1, H] slice of a wider [B, T, H]: the same rows as from contiguous copies."""
    poison(monkeypatch, mod)
    features, table, tokens = _inputs(fresh_gen(), torch.float32)
    for i in range(4):
        f, x = features[:, i:i + 1], tokens[:, i:i + 1]
        assert x.stride() == (4, 1) and f.stride()[:2] == (4 * 24, 24)
        got = embed_concat_fused(f, table, x)
        assert torch.equal(got, embed_concat_ref(f.contiguous(), table, x.contiguous()))
        assert torch.equal(got[:, 0, 24:], table[tokens[:, i]])  # the column's own tokens


def test_bad_shapes_are_refused() -> None:
    features, table, tokens = _inputs(fresh_gen(), torch.float32)
    with pytest.raises(ValueError, match="tokens must be"):
        embed_concat_fused(features, table, tokens[:, :2])
    with pytest.raises(ValueError, match="table contiguous"):
        embed_concat_fused(features, table.t().contiguous().t(), tokens)


def test_the_layer_takes_the_twin_off_cuda() -> None:
    """`bass.models.layers.embed_concat` on the CPU is the twin (the kernel runs where the table is on CUDA)."""
    from bass.models.layers import embed_concat

    features, table, tokens = _inputs(fresh_gen(), torch.bfloat16)
    if table.is_cuda:
        table, features, tokens = table.cpu(), features.cpu(), tokens.cpu()
    assert torch.equal(embed_concat(features, table, tokens), embed_concat_ref(features, table, tokens))


@needs_cuda
@pytest.mark.gpu
def test_kernel_is_its_twin_on_cuda_at_the_drafts_shapes() -> None:
    """Qwen2.5-Coder-1.5B's table [151,936, 1,536] bf16, batch 8, a chain's strided token column."""
    gen = fresh_gen()
    table = torch.randn(151_936, 1536, generator=gen).to(device="cuda", dtype=torch.bfloat16)
    features = torch.randn(8, 1, 1536, generator=gen).to(device="cuda", dtype=torch.bfloat16)
    tokens = torch.randint(0, 151_936, (8, 5), generator=gen).cuda()[:, 2:3]
    assert torch.equal(embed_concat_fused(features, table, tokens), embed_concat_ref(features, table, tokens))
