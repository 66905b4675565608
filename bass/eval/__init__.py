"""Evaluation on top of the engine: HumanEval within time budgets (`humaneval`, `budgets`), the fair comparison of
methods (`compare`: the procedure; `compare_results`: what it measured; `compare_report`: the sentence, table and
note; `first_stop`: candidates cut at their first stop), and testing candidates as they finish (`verdicts`)."""
