"""What the verify rule's vocabulary-wide steps cost on this device, and alternatives, side by side.

    PYTHONPATH=. python bench/vocab_ops_bench.py [--rows 8,16,24,64] [--out DIR]

`bass.verify.verify_top_p` works over each position's sorted top-p candidates; what it still does over
the whole vocabulary is the tempered softmax and the top-K (K = `TOP_P_CANDIDATES`). On an H100 those
were about 125 µs of its 239 µs at k = 8 (`bench/results/step_costs_2026-11-24_h100_profile_step_eager.txt`),
so this times them alone, each in a CUDA graph (the way the rule runs), on peaked Zipf logits
[rows, 151,936] (rows = batch x verify width), against alternatives that compute the same thing:

  softmax    torch.softmax
             | exp(z − logsumexp(z))
  top-K      torch.topk over the row | in two stages: the top K of each of S equal chunks, then the top K
             of those S·K (the same values: a row's top K lie in their chunks' top K)
  candidates the rule's whole candidate step (`bass.sampling.sorted_top_p`: tempered probabilities to
             sorted top-p candidates, kept masses and `covered`), by torch (softmax, top-K, sort) | by
             `kernels.top_p` (one program per row, what the rule runs on CUDA); checked to decide the
             same rows and keep the same masses
  draft rule a draft step's whole sample (`bass.rules.DraftRule`: top-p within its candidates, the draw,
             q as (mass, target id) pairs) from a reduced vocabulary of --draft-vocab ids
             (the shipped draft's size), by torch | by `kernels.draft_sample` (each chunk's heads, two
             launches) | by the kernels before them (`kernels.top_p`'s exact candidates, then the draw);
             the share of rows where each kernel path drew torch's token
  verify rule  the whole `bass.rules.VerifyRule` at --batch and each of --verify-widths, a model draft's
             sparse q (DRAFT_CANDIDATES pairs): by torch | the candidates by `kernels.top_p`, the rest by
             torch | both by kernels (`kernels.verify_sample`); checked to give the torch tail's outputs on the
             same candidates

Prints a table (µs per call) and writes vocab_ops.json to --out. On the CPU it runs the same code untimed
by graphs (the figures then only check the plumbing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_round import graphed  # noqa: E402
from round_overhead import logit_bank  # noqa: E402
from step_costs import timed_ms  # noqa: E402

from bass import sampling  # noqa: E402
from bass import verify as verify_module  # noqa: E402
from bass.config import SamplingParams  # noqa: E402
from bass.device import device_line  # noqa: E402
from bass.rules import TokenSubset, draft_rule, verify_rule  # noqa: E402
from bass.sampling import TOP_P_CANDIDATES  # noqa: E402
from kernels.draft_sample import sample_candidates  # noqa: E402
from kernels.top_p import top_p_candidates_fused  # noqa: E402


def softmax_by_logsumexp(z: torch.Tensor) -> torch.Tensor:
    """softmax(z) over the last axis as exp(z − logsumexp(z)). [..., V] -> [..., V]"""
    return (z - torch.logsumexp(z, dim=-1, keepdim=True)).exp_()


def topk_two_stage(p: torch.Tensor, k: int, chunks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.topk(p, k) by chunks: (values, ids) [N, k] of p [N, V], V divisible by `chunks`, V / chunks >= k.

    Every element of a row's top k is in its chunk's top k (fewer than k elements of the chunk beat it), so
    the top k of the chunks' top k are the row's top k values (ties at the k-th value may pick other ids)."""
    N, V = p.shape
    C = V // chunks
    v1, i1 = torch.topk(p.view(N, chunks, C), k, dim=-1)  # [N, S, k]
    i1 = i1 + torch.arange(chunks, device=p.device)[:, None] * C
    v2, j = torch.topk(v1.view(N, chunks * k), k, dim=-1)  # [N, k]
    return v2, i1.view(N, chunks * k).gather(-1, j)


@contextlib.contextmanager
def top_p_kernels(on: bool, verify: bool = False):
    """For the block, `bass.sampling`'s top-p candidates by the kernels (the interpreter off CUDA) or by torch,
    and with `verify` the rest of the verify rule by its kernel too (`bass.verify.FUSED_VERIFY`)."""
    with mock.patch.object(sampling, "FUSED_TOP_P", "always" if on else False), \
            mock.patch.object(verify_module, "FUSED_VERIFY", verify):
        yield


# the verify rule's variants: (top-p candidates by the kernels, the rest by the kernel too)
VERIFY_VARIANTS = {"torch": (False, False), "kernel_candidates": (True, False), "kernels": (True, True)}


def verify_rule_costs(batch: int, width: int, vocab: int, reps: int, device: torch.device) -> dict:
    """µs of `VerifyRule` on [batch, width, vocab] logits with a model draft's sparse q (L = width − 1), in each
    of VERIFY_VARIANTS, and whether the kernels' verdicts equal the torch tail's on the same candidates."""
    L, params = width - 1, SamplingParams(temperature=0.8, top_p=0.95)
    g = torch.Generator().manual_seed(1000 + width)
    logits = logit_bank(batch * width, vocab, seed=width).view(batch, width, vocab).to(device)
    q = torch.softmax(logits[:, :L] / 0.8 + torch.randn(batch, L, vocab, generator=g).to(device), -1)
    q, q_ids = torch.topk(q, min(sampling.DRAFT_CANDIDATES, vocab), dim=-1)  # the draft step's pairs
    q = q / q.sum(-1, keepdim=True)
    drafts = q_ids.gather(-1, torch.multinomial(q.reshape(-1, q.shape[-1]), 1).view(batch, L, 1))[..., 0] if L \
        else torch.zeros(batch, 0, dtype=torch.long, device=device)
    u = torch.rand(batch, 2 * L + 1, generator=g).to(device)
    args = (drafts, torch.full((batch,), L, device=device), u[:, L:2 * L], u[:, 2 * L],
            *((q, q_ids) if L else (None, None)))
    rule = verify_rule(params)

    def run(variant: str):
        cands, tail = VERIFY_VARIANTS[variant]
        with top_p_kernels(cands, verify=tail):
            return rule(logits, *args)

    out = {f"verify_w{width}_{v}_us": 1e3 * timed_ms(graphed(lambda v=v: run(v)), reps) for v in VERIFY_VARIANTS}
    same = [torch.equal(a, b) for a, b in zip(run("kernels"), run("kernel_candidates"), strict=True)]
    out[f"verify_w{width}_same_outputs"] = all(same)
    return out


def candidates(logits: torch.Tensor, params: SamplingParams, kernel: bool) -> tuple[torch.Tensor, ...]:
    """The rule's candidate step (kept [N, K], ids [N, K], covered [N]) by torch or by the kernel."""
    with top_p_kernels(kernel):
        return sampling.sorted_top_p(logits, params, full_sort=False)


def draft_rule_costs(n: int, vocab: int, draft_vocab: int, reps: int, kernels_run: bool,
                     device: torch.device) -> dict:
    """µs of a draft step's `DraftRule` on [n, draft_vocab] logits by torch and by the kernels, and the
    share of rows where both drew the same token (the same u)."""
    g = torch.Generator().manual_seed(n)
    ids = torch.sort(torch.randperm(vocab, generator=g)[:draft_vocab]).values.to(device)
    logits = logit_bank(n, draft_vocab, seed=n + 1).to(device)[:, None]  # [n, 1, V']
    u = torch.rand(n, generator=g).to(device)
    rule = draft_rule(SamplingParams(temperature=0.8, top_p=0.95), vocab, TokenSubset(ids))

    def run(kernel: bool):
        with top_p_kernels(kernel):
            return rule(logits, u)

    def exact_candidates():  # the kernels before the chunk heads: `kernels.top_p`'s candidates, then the draw
        vals, cols = top_p_candidates_fused(logits[:, -1], rule.params.temperature, sampling.DRAFT_CANDIDATES)
        return sample_candidates(vals, cols, rule.params.top_p, u, ids)

    out = {}
    for name, kernel in (("torch", False), ("kernel", True))[:2 if kernels_run else 1]:
        out[f"draft_rule_{name}_us"] = 1e3 * timed_ms(graphed(lambda k=kernel: run(k)), reps)
    if kernels_run:
        out["draft_rule_candidates_us"] = 1e3 * timed_ms(graphed(exact_candidates), reps)
        out["draft_rule_same_token"] = float((run(False)[0] == run(True)[0]).float().mean())
        out["draft_rule_candidates_same_token"] = float((run(False)[0] == exact_candidates()[0]).float().mean())
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default="8,16,24,64", help="rows of logits: batch x verify width")
    p.add_argument("--vocab", type=int, default=151_936)
    p.add_argument("--chunks", default="4,8,16,32")
    p.add_argument("--draft-vocab", type=int, default=32_769, help="a draft's reduced vocabulary (0: skip)")
    p.add_argument("--verify-widths", default="1,2,3", help="widths of the verify rule at --batch ('': skip)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--out", default="bench/results/")
    a = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    K = min(TOP_P_CANDIDATES, a.vocab // max(int(c) for c in a.chunks.split(",")))
    print(device_line(device), flush=True)
    kernels_run = device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"  # else no candidates_kernel
    rows = []
    for n in [int(x) for x in a.rows.split(",")]:
        z = (logit_bank(n, a.vocab, seed=n) / 0.8).to(device)  # tempered logits
        probs = torch.softmax(z, -1)
        want = torch.topk(probs, K, dim=-1).values
        got = softmax_by_logsumexp(z)
        row = dict(rows=n, vocab=a.vocab, k=K, softmax_max_abs_diff=float((got - probs).abs().max()),
                   softmax_us=1e3 * timed_ms(graphed(lambda z=z: torch.softmax(z, -1)), a.reps),
                   softmax_by_logsumexp_us=1e3 * timed_ms(graphed(lambda z=z: softmax_by_logsumexp(z)), a.reps),
                   topk_us=1e3 * timed_ms(graphed(lambda p=probs: torch.topk(p, K, dim=-1)), a.reps))
        for s in [int(c) for c in a.chunks.split(",")]:
            values = topk_two_stage(probs, K, s)[0]
            if not torch.equal(values, want):  # the same values, in the same (descending) order
                raise AssertionError(f"two-stage top-k with {s} chunks differs from torch.topk")
            row[f"topk_two_stage_{s}_us"] = 1e3 * timed_ms(graphed(lambda p=probs, s=s: topk_two_stage(p, K, s)),
                                                          a.reps)
        logits = logit_bank(n, a.vocab, seed=n).to(device)
        params = SamplingParams(temperature=0.8, top_p=0.95)
        by_torch = candidates(logits, params, False)
        by_kernel = candidates(logits, params, kernels_run)
        if not torch.equal(by_torch[2], by_kernel[2]):
            raise AssertionError("the kernel's candidates decide other rows than torch's")
        diff = (by_torch[0].sum(-1) - by_kernel[0].sum(-1))[by_kernel[2]].abs()  # on the decided rows
        row["candidates_kept_mass_max_diff"] = float(diff.max()) if diff.numel() else 0.0
        for name, kernel in (("torch", False), ("kernel", True))[:2 if kernels_run else 1]:
            row[f"candidates_{name}_us"] = 1e3 * timed_ms(
                graphed(lambda x=logits, k=kernel, sp=params: candidates(x, sp, k)), a.reps)
        if a.draft_vocab:
            row.update(draft_rule_costs(n, a.vocab, min(a.draft_vocab, a.vocab), a.reps, kernels_run, device))
        rows.append(row)
    verify = {}
    if kernels_run and a.verify_widths:
        for w in [int(x) for x in a.verify_widths.split(",")]:
            verify.update(verify_rule_costs(a.batch, w, a.vocab, a.reps, device))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "vocab_ops.json").write_text(json.dumps(dict(device=device_line(device), rows=rows, verify=verify),
                                                   indent=1))
    keys = [k for k in rows[0] if k.endswith("_us")]
    if "draft_rule_same_token" in rows[0]:
        print("draft rule, the same token from torch and the kernels (chunk heads / exact candidates): "
              + ", ".join(f"{r['rows']} rows {r['draft_rule_same_token']:.2f} / "
                          f"{r['draft_rule_candidates_same_token']:.2f}" for r in rows))
    print(f"µs per call, each in a CUDA graph; [rows, {a.vocab}] float32, top-{K}")
    print("rows " + " ".join(f"{k[:-3]:>22s}" for k in keys))
    for r in rows:
        print(f"{r['rows']:4d} " + " ".join(f"{r[k]:22.1f}" for k in keys))
    if verify:
        print(f"verify rule (a model draft's q), batch {a.batch}: µs per call in a CUDA graph; top-p candidates "
              "and the rest by torch, by the kernels and torch, by the kernels")
        print("width " + " ".join(f"{v:>18s}" for v in VERIFY_VARIANTS) + "  kernels == torch tail")
        for w in [int(x) for x in a.verify_widths.split(",")]:
            print(f"{w:5d} " + " ".join(f"{verify[f'verify_w{w}_{v}_us']:18.1f}" for v in VERIFY_VARIANTS)
                  + f"  {verify[f'verify_w{w}_same_outputs']}")
    return rows


if __name__ == "__main__":
    main()
