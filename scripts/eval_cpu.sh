#!/usr/bin/env bash
# The issue-6 HumanEval-within-a-budget run on the embedded default, CPU: three methods, one budget.
# Usage: scripts/eval_cpu.sh [LIMIT] [BUDGET_S]   (writes bench/results/eval_cpu_<method>.json and a table)
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${1:-20}; budget=${2:-30}
out=bench/results
for method in bass regular single; do
  .venv/bin/python -m bass eval humaneval --k 4 --budget-s "$budget" --method "$method" --limit "$limit" \
    --temperature 0.8 --top-p 0.95 --max-new-tokens 200 --json > "$out/eval_cpu_$method.json"
done
.venv/bin/python - "$out" <<'PY'
import json, sys, platform, os
out = sys.argv[1]
rows = [json.load(open(f"{out}/eval_cpu_{m}.json")) for m in ("bass", "regular", "single")]
c = rows[0]["config"]
lines = [f"# HumanEval within a time budget, {c['target']} ({c['device']}, {os.cpu_count()} cores, {platform.processor() or platform.machine()}),",
         f"# k={c['k']}, budget {c['budget_s']} s/problem, temperature {c['temperature']}, top-p {c['top_p']}, drafter {c['drafter']}",
         f"{'method':<8} {'problems':>8} {'Pass@First':>10} {'Pass@All':>9} {'pass@1':>7} {'pass@4':>7} {'finished/4':>10} {'ms/token':>9}"]
for r in rows:
    s = r["summary"]
    lines.append(f"{r['config']['method']:<8} {s['problems']:>8} {s['pass_at_first']:>10.3f} {s['pass_at_all']:>9.3f} "
                 f"{s['pass_at_1']:>7.3f} {s['pass_at_4']:>7.3f} {s['finished']:>10.2f} {s['mean_ms_per_token']:>9.0f}")
open(f"{out}/eval_cpu.txt", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
