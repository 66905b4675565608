"""Host-side cost of a round, without model math: the round loop driven by a fake target that only
returns logits from a bank (vocabulary 151,936 like the embedded Qwen target) and advances the cache.

    python bench/round_overhead.py [--k 8,32] [--tokens 32] [--reps 2] [--baseline REV]

What remains per round is what the GPU would wait for between two forwards on a fast device: sampling
over the vocabulary, the accept / resample rule, random numbers, cache bookkeeping, detokenization and
stop strings, Python. With --baseline REV the same benchmark also runs on `bass/` as of git revision REV
(extracted to a temporary folder) and the two are printed side by side with their ratio.
Configurations: regular decoding (no draft) and a BASS round with a fixed draft of L=4 one-hot tokens,
both at T 0.8 / top-p 0.95 with the HumanEval stop strings, and greedy regular decoding.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

QWEN = Path(os.environ.get("BASS_CACHE", Path.home() / ".cache/bass")) / "qwen2.5-coder-1.5b-instruct-q4_k_m"
VOCAB = 151_936
PROMPT = "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"


def logit_bank(rows: int, vocab: int, seed: int = 0) -> torch.Tensor:
    """Peaked logits like a code model's: Zipf(1.3) masses over a random permutation of the vocabulary."""
    g = torch.Generator().manual_seed(seed)
    zipf = -1.3 * torch.log(torch.arange(1, vocab + 1, dtype=torch.float32))
    return torch.stack([zipf[torch.randperm(vocab, generator=g)] * 1.5 for _ in range(rows)])


class FakeTarget:
    """model(tokens, cache, q_len, attn) -> logits [B, T, V] from the bank; advances the cache."""

    def __init__(self, bank: torch.Tensor):
        self.bank, self.i = bank, 0

    def __call__(self, tokens, cache, q_len, attn, num_layers=None, last_only=False):
        B, T = tokens.shape
        cache.advance(q_len)
        n = B * T
        idx = (torch.arange(n) + self.i) % len(self.bank)
        self.i += n
        return self.bank[idx].view(B, T, -1)


def run(k: int, tokens: int, reps: int, config: str) -> dict:
    from transformers import AutoTokenizer

    from bass.cache import KVCache
    from bass.config import HUMANEVAL_STOPS, DraftLengthConfig, SamplingParams
    from bass.draft_length import DraftLengthPolicy
    from bass.drafters import Drafter, NoDrafter, Proposal
    from bass.sequences import Sequence, StopRule
    from bass.speculative import DecodeState, speculative_decode
    from bass.streams import SequenceRNG

    class FixedDrafter(Drafter):  # L one-hot tokens: the prompt's first tokens, never an EOS
        name = "fixed"

        def propose(self, histories, lengths, params, u, target_cache):
            L = max(lengths)
            toks = torch.tensor([h[:L] for h in histories], dtype=torch.long)
            return Proposal(toks, torch.tensor(lengths, dtype=torch.long), None)

    tok = AutoTokenizer.from_pretrained(QWEN)
    ids = tok.encode(PROMPT)
    greedy = config == "regular greedy"
    params = SamplingParams(temperature=0.0 if greedy else 0.8, top_p=1.0 if greedy else 0.95,
                            max_new_tokens=tokens, stop=HUMANEVAL_STOPS)
    bank = logit_bank(32, VOCAB)
    times, rounds = [], 0
    for rep in range(reps + 1):  # the first is a warm-up
        params = SamplingParams(**{**params.__dict__, "seed": rep})
        seqs = [Sequence(seq=s, prompt_index=0, sample_index=s, prompt_len=len(ids), history=ids + [ids[-1]])
                for s in range(k)]
        cache = KVCache.allocate(1, k, tokens + 2, 1, 1, torch.float32, "cpu")
        cache.suffix_len.fill_(len(ids))
        drafter = FixedDrafter() if config == "bass L=4" else NoDrafter()
        policy = DraftLengthPolicy(DraftLengthConfig(policy="fixed", l0=4), list(range(k)))
        rng = SequenceRNG(params.seed, [s.key for s in seqs])
        stop = StopRule(tok, {151643, 151645}, params)
        c0 = time.process_time()  # CPU time of this process: the machine is shared
        n = sum(1 for _ in speculative_decode(FakeTarget(bank), None, drafter, policy, DecodeState(seqs, cache),
                                              stop, rng, t0=time.perf_counter()))
        if rep:
            times.append((time.process_time() - c0) / n * 1e3)
            rounds = n
    return dict(ms_per_round=statistics.median(times), rounds=rounds)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k", default="8,32")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--baseline", help="git revision whose bass/ runs side by side")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    configs = ["regular T0.8 p0.95", "bass L=4", "regular greedy"]
    ks = [int(x) for x in a.k.split(",")]
    here = {f"{c} k={k}": run(k, a.tokens, a.reps, c) for c in configs for k in ks}
    if a.json:
        print(json.dumps(here))
        return
    base = None
    if a.baseline:
        root = Path(__file__).resolve().parent.parent
        with tempfile.TemporaryDirectory() as tmp:
            archive = subprocess.run(["git", "-C", str(root), "archive", a.baseline, "bass", "kernels"], check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            out = subprocess.run([sys.executable, __file__, "--k", a.k, "--tokens", str(a.tokens), "--reps",
                                  str(a.reps), "--threads", str(a.threads), "--json"], check=True,
                                 capture_output=True, text=True, env={**os.environ, "PYTHONPATH": tmp}).stdout
            base = json.loads(out.strip().splitlines()[-1])
    print(f"host CPU time per round, fake target (V={VOCAB}), {a.tokens} tokens, median of {a.reps}, "
          f"{a.threads} thread(s)")
    print(f"{'config':28s} {'rounds':>6s} {'now ms':>8s}" + (f" {'base ms':>8s} {'base/now':>8s}" if base else ""))
    for name, r in here.items():
        line = f"{name:28s} {r['rounds']:6d} {r['ms_per_round']:8.3f}"
        if base:
            b = base[name]["ms_per_round"]
            line += f" {b:8.3f} {b / r['ms_per_round']:8.2f}x"
        print(line)


if __name__ == "__main__":
    main()
