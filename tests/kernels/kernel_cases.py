"""Random ragged attention problems for the kernel tests (fresh draws; never zeros)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Case:
    B: int = 5
    T: int = 5
    Hq: int = 4
    Hkv: int = 1
    D: int = 64
    G: int = 2
    P: int = 24
    S: int = 40
    window: int = 0
    prefill: bool = False  # empty prefix, q_len == kv_len (the prompt pass)

    def __str__(self) -> str:
        return (f"B{self.B}-T{self.T}-H{self.Hq}/{self.Hkv}-D{self.D}-G{self.G}-P{self.P}-S{self.S}"
                f"-w{self.window}{'-prefill' if self.prefill else ''}")


def make_inputs(case: Case, gen: torch.Generator, dtype: torch.dtype = torch.float32, device: str = "cpu",
                garbage: float = 1e3) -> dict:
    """Inputs of `kernels.reference.ragged_attention_ref` as keyword arguments.

    Ragged q_len covers 0, 1 and T; kv_len >= q_len with some sequences at 0; prefix_len covers 0
    and the full P. Rows past every length hold large values (`garbage`, may be NaN) that a
    correct backend never lets into its output.
    """
    B, T, G, P, S = case.B, case.T, case.G, case.P, case.S

    def randint(lo: int, hi: int, n: int) -> torch.Tensor:  # inclusive bounds
        return torch.randint(lo, hi + 1, (n,), generator=gen)

    if case.prefill:
        q_len = randint(1, T, B)
        q_len[0] = T
        kv_len = q_len.clone()
        prefix_len = torch.zeros(G, dtype=torch.long)
    else:
        q_len = randint(1, T, B)
        q_len[0], q_len[-1] = 0, 1
        if B > 2:
            q_len[1] = T
        kv_len = q_len + randint(0, S - T, B)
        kv_len[0] = 0  # a finished sequence with nothing in its suffix
        prefix_len = randint(1, P, G)
        prefix_len[0] = 0
        if G > 1:
            prefix_len[-1] = P
    seq_group = randint(0, G - 1, B)

    def kv(n: int, rows: int, length: torch.Tensor) -> torch.Tensor:
        x = torch.randn(n, rows, case.Hkv, case.D, generator=gen)
        invalid = torch.arange(rows)[None, :] >= length[:, None]
        return x.masked_fill(invalid[:, :, None, None], garbage)

    ints = dict(dtype=torch.int32, device=device)
    return dict(
        q=torch.randn(B, T, case.Hq, case.D, generator=gen).to(device, dtype),
        prefix_k=kv(G, P, prefix_len).to(device, dtype), prefix_v=kv(G, P, prefix_len).to(device, dtype),
        prefix_len=prefix_len.to(**ints), seq_group=seq_group.to(**ints),
        suffix_k=kv(B, S, kv_len).to(device, dtype), suffix_v=kv(B, S, kv_len).to(device, dtype),
        kv_len=kv_len.to(**ints), q_len=q_len.to(**ints),
        scale=case.D ** -0.5, window=case.window,
    )


def as_float64(inputs: dict) -> dict:
    return {k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v for k, v in inputs.items()}


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# The ragged kernel's cases (test_ragged_attention*.py): each head layout, decode, verify, prefill and windows
CASES = [
    (Case(Hq=2, Hkv=2, D=64), {}),  # GQA 1
    (Case(Hq=8, Hkv=2, D=128, T=9, G=3), {}),  # GQA 4, verify
    (Case(Hq=8, Hkv=1, D=64, T=1, B=6), {}),  # GQA 8, decode
    (Case(Hq=8, Hkv=1, D=64, T=5), {"BLOCK_M": 16}),  # packed rows split over several row tiles
    (Case(Hq=4, Hkv=1, D=256, T=4, window=7), {}),  # Gemma 3 local layer
    (Case(Hq=4, Hkv=2, D=64, T=3, window=1), {}),
    (Case(Hq=4, Hkv=1, D=64, B=3, T=24, G=1, P=0, S=24, prefill=True), {}),  # prompt pass, no prefix
    (Case(Hq=4, Hkv=1, D=80, T=3), {}),  # head_dim not a power of two: masked tail
    (Case(Hq=4, Hkv=2, D=8, T=3), {}),  # narrower than tl.dot's K >= 16 (the tiny test models): a masked 16-wide tile
]
SPLITS = [{"NUM_SPLITS": 1}, {"NUM_SPLITS": 3, "BLOCK_N": 16}]
