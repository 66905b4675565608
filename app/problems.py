"""The 164 HumanEval problems for the picker: labels, prompt, editable tests. Data comes from `sandbox`."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

_CHECK_CALL = re.compile(r"^check\(\s*([A-Za-z_]\w*)\s*\)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Problem:
    task_id: str
    prompt: str
    tests: str  # HumanEval's `check(candidate)` file
    entry_point: str

    @property
    def label(self) -> str:
        return f"{self.task_id} · {self.entry_point}"

    def editable_tests(self) -> str:
        """The tests as a user sees and edits them: self-contained, ending with the call of `check`."""
        return self.tests.rstrip() + f"\n\n\ncheck({self.entry_point})\n"


@functools.cache
def load_problems() -> tuple[Problem, ...]:
    """All HumanEval problems in task order (loaded once per process)."""
    from sandbox import load_humaneval

    return tuple(Problem(p.task_id, p.prompt, p.test, p.entry_point) for p in load_humaneval())


def find_problem(label: str | None, problems: tuple[Problem, ...]) -> Problem | None:
    """The problem a dropdown label names; also accepts a bare task id ("HumanEval/0")."""
    if not label:
        return None
    for p in problems:
        if label in (p.label, p.task_id):
            return p
    return None


def entry_point_of(tests: str) -> str | None:
    """The function a test file checks: the argument of its last top-level `check(name)` call."""
    calls = _CHECK_CALL.findall(tests or "")
    return calls[-1] if calls else None
