"""The time-budget experiment's reports, read from `python -m bass eval humaneval --budgets ... --out F.json`:
`python -m bench.budget {plot,margin,finishers} F.json ...`."""

from bench.subcommands import dispatch

SUBCOMMANDS = {
    "plot": ("bench.budget.plot", "Pass@First and Pass@All against the budget, beside the paper's figures"),
    "margin": ("bench.budget.margin", "a method's margin over another, pooled over runs, SE clustered by problem"),
    "finishers": ("bench.budget.finishers", "which candidate Pass@First saw, and pass rates by length rank"),
}

if __name__ == "__main__":
    dispatch("budget", SUBCOMMANDS)
