"""Tokens per round and acceptance of each drafter on the first N HumanEval prompts (greedy).

    python scripts/drafter_acceptance.py [--target embedded] [--n 10] [--max-new-tokens 96]

All prompts decode in one ragged batch (k = 1 each); greedy, so the output equals regular decoding and
only the speed of getting there differs between drafters.
"""

from __future__ import annotations

import argparse

from bass import HUMANEVAL_STOPS, Engine, EngineConfig, SamplingParams
from sandbox import load_humaneval


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="embedded")
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--drafters", default="ngram,layer-skip")
    args = ap.parse_args()
    engine = Engine(EngineConfig(target=args.target))
    prompts = [p.prompt for p in load_humaneval()[:args.n]]
    params = SamplingParams(max_new_tokens=args.max_new_tokens, stop=HUMANEVAL_STOPS)
    rows = []
    for drafter in args.drafters.split(","):
        r = engine.generate(prompts, k=1, params=params, method="bass", drafter=drafter)
        s = r.stats
        rows.append(f"{drafter:<11} {s.tokens:>6} {s.rounds:>6} {s.tokens_per_round:>10.2f} {s.acceptance_rate:>10.3f} "
                    f"{s.decode_s:>8.1f}")
    print(f"# {args.target}, first {args.n} HumanEval prompts in one batch, greedy, max {args.max_new_tokens} tokens")
    print(f"{'drafter':<11} {'tokens':>6} {'rounds':>6} {'tok/round':>10} {'acceptance':>10} {'decode s':>8}")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
