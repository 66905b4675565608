"""Every attention backend against a float64 evaluation of the reference, on fresh random inputs."""

from __future__ import annotations

import inspect
import os

import pytest
import torch
from kernel_cases import Case, as_float64, make_inputs, rel_error

from kernels import BACKENDS, available_backends, get_backend
from kernels.reference import ragged_attention_ref

CASES = [
    Case(Hq=2, Hkv=2, D=64),  # MHA
    Case(Hq=8, Hkv=2, D=128, T=9, G=3),  # GQA 4, verify-sized
    Case(Hq=8, Hkv=1, D=64, T=1, B=6),  # GQA 8, decode
    Case(Hq=4, Hkv=1, D=256, T=4, window=7),  # Gemma 3 local layer shape
    Case(Hq=4, Hkv=2, D=64, T=3, window=1),  # window 1: each query sees only itself
    Case(Hq=4, Hkv=1, D=64, B=3, T=40, G=1, P=0, S=40, prefill=True),  # prompt pass, no prefix
]
SEEDS = iter(range(10_000))  # each test draws fresh inputs


def naive_attention(inputs: dict) -> torch.Tensor:
    """Loop-by-loop float64 attention, independent of the reference's masking arithmetic."""
    q = inputs["q"].double()
    B, T, Hq, D = q.shape
    Hkv = inputs["prefix_k"].shape[2]
    out = torch.zeros(B, T, Hq, D, dtype=torch.float64)
    for b in range(B):
        g = int(inputs["seq_group"][b])
        p, s, n = int(inputs["prefix_len"][g]), int(inputs["kv_len"][b]), int(inputs["q_len"][b])
        k = torch.cat([inputs["prefix_k"][g, :p], inputs["suffix_k"][b, :s]]).double()  # [L, Hkv, D]
        v = torch.cat([inputs["prefix_v"][g, :p], inputs["suffix_v"][b, :s]]).double()
        for i in range(n):
            pos = p + s - n + i
            lo = max(0, pos - inputs["window"] + 1) if inputs["window"] > 0 else 0
            for h in range(Hq):
                kh, vh = k[lo: pos + 1, h // (Hq // Hkv)], v[lo: pos + 1, h // (Hq // Hkv)]
                w = torch.softmax(kh @ q[b, i, h] * inputs["scale"], dim=0)
                out[b, i, h] = w @ vh
    return out


@pytest.mark.parametrize("case", CASES[:4], ids=str)
def test_reference_matches_naive_loops(case: Case) -> None:
    inputs = as_float64(make_inputs(case, torch.Generator().manual_seed(next(SEEDS))))
    assert rel_error(ragged_attention_ref(**inputs), naive_attention(inputs)) < 1e-12


def test_registry_names_and_signatures() -> None:
    assert set(BACKENDS) == {"torch", "pad", "split", "ragged"}
    reference = inspect.signature(ragged_attention_ref)
    from kernels.ragged_attention import ragged_attention

    for fn in (BACKENDS["pad"], BACKENDS["split"], ragged_attention):
        assert inspect.signature(fn) == reference, fn.__name__
    assert available_backends("cpu")[:3] == ["torch", "pad", "split"]
    assert ("ragged" in available_backends("cpu")) == (os.environ.get("TRITON_INTERPRET") == "1")
    with pytest.raises(ValueError, match="choose one of"):
        get_backend("flash")


@pytest.mark.parametrize("name", ["torch", "pad", "split"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_torch_backends_fp32(name: str, case: Case) -> None:
    inputs = make_inputs(case, torch.Generator().manual_seed(next(SEEDS)))
    out = get_backend(name)(**inputs)
    assert out.dtype == torch.float32 and out.shape == inputs["q"].shape
    assert rel_error(out, ragged_attention_ref(**as_float64(inputs))) < 1e-5


@pytest.mark.parametrize("name", ["torch", "pad", "split"])
def test_a_strided_length_vector_is_refused(name: str) -> None:
    """The kernels read sequence b's lengths at offset b: a column of a [B, L] tensor (stride L) would read
    other sequences' values, so every backend refuses it with what to do (found in the drafting loop's q_len)."""
    inputs = make_inputs(CASES[2], torch.Generator().manual_seed(next(SEEDS)))
    steps = torch.stack([inputs["q_len"]] * 3, 1)  # [B, 3]
    with pytest.raises(ValueError, match=r"q_len must be contiguous .*\.contiguous\(\)"):
        get_backend(name)(**{**inputs, "q_len": steps[:, 1]})
    get_backend(name)(**{**inputs, "q_len": steps[:, 1].contiguous()})


@pytest.mark.parametrize("case", [CASES[1], CASES[3]], ids=str)
def test_a_bf16_reference_row_is_what_a_one_row_query_computes(case: Case) -> None:
    """Below float32 the reference computes each query row alone (`kernels.reference`), so a verify's row is the bits
    of the plain step that would have decoded it: the same query as a one-row query at its own position."""
    inputs = make_inputs(case, torch.Generator().manual_seed(next(SEEDS)), dtype=torch.bfloat16)
    got = ragged_attention_ref(**inputs)  # [B, T, Hq, D]
    assert rel_error(got, naive_attention(as_float64(inputs))) < 1e-2
    q_len, kv_len = inputs["q_len"].long(), inputs["kv_len"].long()
    checked = 0
    for i in range(case.T):
        live = q_len > i  # sequences whose row i is a query
        if not live.any():
            continue
        one = dict(inputs, q=inputs["q"][:, i:i + 1], q_len=live.to(torch.int32),
                   kv_len=torch.where(live, kv_len - q_len + i + 1, kv_len).to(torch.int32))
        alone = ragged_attention_ref(**one)[:, 0]  # [B, Hq, D]
        assert torch.equal(got[live, i], alone[live]), i
        checked += int(live.sum())
    assert checked == int(q_len.sum())
