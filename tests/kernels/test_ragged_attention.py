"""The Triton ragged kernel (interpreted on the CPU) against the float64 reference: what it never reads, never
syncs and how it tiles; every case and split count is in test_ragged_attention_slow.py."""

from __future__ import annotations

import pytest
import torch
from kernel_cases import CASES, DEVICE, SPLITS, Case, as_float64, make_inputs, rel_error

from kernels import available_backends
from kernels.reference import ragged_attention_ref

pytestmark = pytest.mark.skipif("ragged" not in available_backends(DEVICE), reason="needs CUDA or TRITON_INTERPRET=1")
SEEDS = iter(range(20_000, 30_000))


def test_ragged_never_reads_past_lengths(poisoned) -> None:
    """NaN in every row past prefix_len / kv_len must not reach the output (GEMM backends cannot promise this)."""
    case = Case(Hq=4, Hkv=2, D=64, T=5, G=2)
    inputs = make_inputs(case, torch.Generator().manual_seed(next(SEEDS)), device=DEVICE, garbage=float("nan"))
    clean = {k: torch.nan_to_num(v, nan=0.0) if torch.is_tensor(v) and v.is_floating_point() else v
             for k, v in inputs.items()}
    ref = ragged_attention_ref(**as_float64({k: v.cpu() if torch.is_tensor(v) else v for k, v in clean.items()}))
    for split in SPLITS:
        out = poisoned.ragged_attention_tuned(**inputs, **split)
        assert torch.isfinite(out).all()
        assert rel_error(out.cpu(), ref) < 1e-5


def test_ragged_launcher_never_syncs(poisoned, monkeypatch: pytest.MonkeyPatch) -> None:
    """No .item()/.tolist()/bool() on a tensor: the launcher must stay CUDA-graph capturable."""
    case = Case(Hq=4, Hkv=1, D=64, T=3)
    inputs = make_inputs(case, torch.Generator().manual_seed(next(SEEDS)), device=DEVICE)
    ref = ragged_attention_ref(**as_float64({k: v.cpu() if torch.is_tensor(v) else v for k, v in inputs.items()}))
    import kernels.ragged_attention as mod

    calls: list[str] = []
    real_config = mod.choose_config
    monkeypatch.setattr(mod, "choose_config", lambda *a: calls.append("cfg") or real_config(*a))
    for name in ("item", "tolist", "__bool__", "__int__", "__index__"):
        def forbidden(self, *a, _name=name, **k):
            raise AssertionError(f"launcher called Tensor.{_name}")
        monkeypatch.setattr(torch.Tensor, name, forbidden)
    out = mod.ragged_attention(**inputs)
    monkeypatch.undo()
    assert calls == ["cfg"]
    assert rel_error(out.cpu(), ref) < 1e-5


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="bf16 on the GPU; the fp32 cases above are its CPU twin")
@pytest.mark.parametrize(("case", "cfg"), CASES[:5], ids=lambda c: str(c) if isinstance(c, Case) else "")
def test_ragged_bf16_gpu(case: Case, cfg: dict) -> None:
    inputs = make_inputs(case, torch.Generator().manual_seed(next(SEEDS)), dtype=torch.bfloat16, device="cuda")
    ref = ragged_attention_ref(**as_float64({k: v.cpu() if torch.is_tensor(v) else v for k, v in inputs.items()}))
    from kernels.ragged_attention import ragged_attention

    assert rel_error(ragged_attention(**inputs).cpu(), ref) < 1e-2


def test_heads_narrower_than_16_get_a_16_wide_tile() -> None:
    """`tl.dot` takes K >= 16 when compiled (the interpreter does not check it, so the D = 8 case above passes on a
    CPU either way): an 8-wide head, the tiny test models', is tiled 16 wide and masked; wider heads keep the next
    power of two."""
    import kernels.ragged_attention as mod

    for D, want in ((8, 16), (16, 16), (64, 64), (80, 128)):
        cfg = dict(mod._config(8, 1, 4, 2, D, 512, 2, True, 132))
        assert cfg["BLOCK_D"] == want, D


def test_decode_config_tiles_rows_by_16_and_splits_short_contexts() -> None:
    """The launch rule at the embedded target's verify shapes on an H100 (132 SMs), as `_config` sees them:
    Qwen2.5-1.5B's 12 / 2 heads, batch 8, ~460 keys of capacity (the shape the decode tile was chosen at)."""
    from kernels.ragged_attention import DECODE_SPLIT_KEYS, _config

    for T in (1, 3, 4, 5):  # 6 .. 30 packed rows: 16-row tiles, never one 32-row tile
        cfg = dict(_config(8, T, 12, 2, 128, 460, 2, True, 132))
        assert cfg["BLOCK_M"] == 16
        assert cfg["NUM_SPLITS"] == 460 // DECODE_SPLIT_KEYS == 3 and cfg["BLOCK_N"] == 32  # short splits, short tiles
    prefill = dict(_config(8, 64, 12, 2, 128, 460, 2, True, 132))
    assert prefill["BLOCK_M"] == 64 and prefill["NUM_SPLITS"] == 1  # a prompt pass keeps long splits: none at 460 keys
    assert dict(_config(8, 1, 12, 2, 128, 460, 2, False, 1))["NUM_SPLITS"] == 1  # the CPU never splits
    long = dict(_config(1, 1, 32, 32, 128, 4096, 2, True, 132))  # few programs, long keys: long splits
    assert long["NUM_SPLITS"] == 2 * 132 // 32 and long["BLOCK_N"] == 64
    seven_b = dict(_config(8, 1, 32, 32, 128, 700, 2, True, 132))  # 256 programs fill the GPU already
    assert seven_b["NUM_SPLITS"] == 1 and seven_b["BLOCK_N"] == 64
