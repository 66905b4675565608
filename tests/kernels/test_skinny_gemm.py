"""The skinny decode GEMM (kernels/skinny_gemm.py) against float64, for every tiling path it has."""

from __future__ import annotations

import pytest
import torch
from fused_cases import fresh_gen, needs_cuda, poison, randn, rel_error

import kernels.skinny_gemm as mod
from kernels.skinny_gemm import CANDIDATES, MAX_ROWS, SkinnyConfig, skinny_gemm, skinny_gemm_ref

# rows (1 row, a ragged count, one past a tile), columns not a multiple of the tile, bias or not, split-K 1/2/3/4/8
CASES = [
    (1, 40, 128, True, SkinnyConfig(16, 64, 1, 2)),
    (5, 100, 256, False, SkinnyConfig(32, 64, 2, 2)),
    (17, 72, 512, True, SkinnyConfig(16, 128, 4, 3)),
    (33, 48, 256, False, SkinnyConfig(64, 128, 1, 2)),
    (40, 72, 384, True, SkinnyConfig(32, 32, 3, 2)),  # a verify's 40 rows (the 48-row tile), a 3-way split
    (9, 24, 512, False, SkinnyConfig(16, 32, 8, 2)),  # 8-way
]


@pytest.mark.parametrize("M,N,K,bias,config", CASES, ids=lambda c: str(c))
def test_skinny_gemm_matches_float64(monkeypatch, M, N, K, bias, config) -> None:
    poison(monkeypatch, mod)
    gen = fresh_gen()
    x, w = randn(M, K, gen=gen), randn(N, K, gen=gen, scale=K ** -0.5)
    b = randn(N, gen=gen) if bias else None
    y = skinny_gemm(x, w, b, config)
    assert y.shape == (M, N) and y.dtype == x.dtype
    assert torch.isfinite(y).all(), "an output element was never written"
    ref = skinny_gemm_ref(x.double(), w.double(), None if b is None else b.double())
    assert rel_error(y, ref) < 1e-5


def test_skinny_gemm_keeps_leading_dims_and_rounds_bf16_once(monkeypatch) -> None:
    """[B, T, K] in, [B, T, N] out; in bf16 each output is the float32 sum rounded once: within one ulp of
    the exact product (the interpreter's cast may truncate where the GPU rounds to nearest)."""
    poison(monkeypatch, mod)
    gen = fresh_gen()
    x = randn(2, 3, 256, gen=gen, dtype=torch.bfloat16)
    w = randn(96, 256, gen=gen, scale=1 / 16, dtype=torch.bfloat16)
    b = randn(96, gen=gen, dtype=torch.bfloat16)
    y = skinny_gemm(x, w, b, SkinnyConfig(32, 128, 2, 2))
    assert y.shape == (2, 3, 96) and y.dtype == torch.bfloat16
    exact = skinny_gemm_ref(x.double(), w.double(), b.double())
    torch.testing.assert_close(y.double().cpu(), exact.cpu(), rtol=2 ** -7, atol=1e-6)


@pytest.mark.parametrize("split", [1, 2])
def test_float32_out_is_the_bf16_result_widened(monkeypatch, split) -> None:
    """An LM head's float32 logits straight from the kernel carry the bits of its bf16 output's `.float()`,
    through both store paths (the GEMM's own and the split-K sum's)."""
    poison(monkeypatch, mod)
    gen = fresh_gen()
    x = randn(5, 256, gen=gen, dtype=torch.bfloat16)
    w = randn(72, 256, gen=gen, scale=1 / 16, dtype=torch.bfloat16)
    config = SkinnyConfig(32, 128, split, 2)
    wide = skinny_gemm(x, w, None, config, out_dtype=torch.float32)
    assert wide.dtype == torch.float32 and wide.shape == (5, 72)
    assert torch.equal(wide, skinny_gemm(x, w, None, config).float())
    assert not torch.equal(wide, skinny_gemm_ref(x.float(), w.float()))  # rounded to bf16, not the raw sum


def test_a_rows_result_does_not_depend_on_the_other_rows() -> None:
    """The same row in a 3-row and a 16-row call (one tile) gives bit-identical outputs: a verify of width 2
    and a plain step agree on the rows they share."""
    gen = fresh_gen()
    x, w = randn(16, 256, gen=gen), randn(64, 256, gen=gen)
    config = SkinnyConfig(32, 128, 2, 2)
    assert torch.equal(skinny_gemm(x[:3], w, None, config), skinny_gemm(x, w, None, config)[:3])


def test_bad_shapes_and_configs_say_what_to_do() -> None:
    x, w = torch.zeros(4, 200), torch.zeros(8, 200)
    with pytest.raises(ValueError, match="multiple of block_k"):
        skinny_gemm(x, w, None, SkinnyConfig(16, 128, 1))
    with pytest.raises(ValueError, match="functional.linear"):
        skinny_gemm(torch.zeros(MAX_ROWS + 1, 128), torch.zeros(8, 128), None, SkinnyConfig(16, 128))
    with pytest.raises(ValueError, match="must be"):
        skinny_gemm(torch.zeros(4, 128), torch.zeros(8, 64), None, SkinnyConfig(16, 64))
    with pytest.raises(ValueError, match="power of two"):
        SkinnyConfig(block_n=24)
    for K in (256, 1536, 4096, 8960, 11008):  # every K the models use has unsplit candidates, and the long
        fitting = [c.split_k for c in CANDIDATES if c.fits(0, K)]  # ones splits of it
        assert fitting.count(1) == 4 and (K < 8000 or max(fitting) > 1)
    assert {c.split_k for c in CANDIDATES if c.fits(0, 8960)} == {1, 2, 5, 7}  # 8960 = 70 x 128: no 4


@needs_cuda
@pytest.mark.gpu
@pytest.mark.parametrize("config", CANDIDATES, ids=str)
def test_skinny_gemm_bf16_matches_cublas_cuda(config) -> None:
    gen = fresh_gen()
    # the 1.5B's qkv (K 1536), its draft's input projection (3072: 8-way splits), its down projection (8960: 5, 7)
    K = next(k for k in (1536, 3072, 8960) if config.fits(2048, k))
    x = randn(8, K, gen=gen, dtype=torch.bfloat16)
    w = randn(2048, K, gen=gen, scale=K ** -0.5, dtype=torch.bfloat16)
    b = randn(2048, gen=gen, dtype=torch.bfloat16)
    y, ref = skinny_gemm(x, w, b, config), torch.nn.functional.linear(x, w, b)
    exact = skinny_gemm_ref(x.double(), w.double(), b.double())
    assert rel_error(y, exact) <= 1.5 * rel_error(ref, exact) + 1e-6


def test_the_row_count_compiles_no_variant_of_its_own() -> None:
    """Triton compiles again for an integer argument that turns 1, a multiple of 16 or neither, unless told
    not to: a verify of 24 rows compiled mid-decode on the H100 (2.6 s of one round). M must not be
    specialised on by either kernel, so `tune`'s compilations at load serve every row count."""
    from kernels.skinny_gemm import _skinny_gemm_fwd, _split_k_sum

    for kernel in (_skinny_gemm_fwd, _split_k_sum):
        if hasattr(kernel, "params"):  # compiled
            unspecialised = {p.name for p in kernel.params if p.do_not_specialize}
        else:  # the interpreter keeps the decorator's arguments
            unspecialised = set(kernel.kwargs["do_not_specialize"])
        assert unspecialised == {"M"}
