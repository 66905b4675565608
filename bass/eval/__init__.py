"""Evaluation on top of the engine: HumanEval within time budgets (`humaneval`, `budgets`), the fair comparison of
methods (`compare`), and testing candidates as they finish (`verdicts`)."""
