"""Requests and page readers shared by the Generate-flow tests (test_generate_flow*.py, test_generate_queue*.py)."""

from __future__ import annotations

import re
import threading

from app_fakes import BAD, GOOD

from app.generate import generate_views
from app.problems import load_problems
from app.settings import METHOD_LABELS, parse_settings

ADD_PROMPT = 'def add(a: int, b: int) -> int:\n    """Return a + b."""\n'
ADD_TESTS = "assert add(2, 3) == 5\nassert add(-1, 1) == 0\n"
ADD_GOOD, ADD_BAD = "    return a + b\n", "    return a - b\n"


def settings(prompt=None, tests=None, k=4, method="bass", budget=0, style="auto", temperature=0.8):
    problem = load_problems()[0]
    return parse_settings(problem.prompt if prompt is None else prompt,
                          problem.editable_tests() if tests is None else tests, style, k, temperature, 0.95, 64, budget,
                          METHOD_LABELS[method], "ngram", "torch", None, 0)


def badges(html):
    return re.findall(r'bass-badge-\w+">([^<]+)<', html)


def by_prompt(long: int = 1):
    """HumanEval/0 gets GOOD/BAD bodies, the add prompt its own, so each visitor's result is recognisable."""
    def texts(prompt, k):
        if "has_close_elements" in prompt:
            return [GOOD * long if i % 2 == 0 else BAD for i in range(k)]
        return [ADD_GOOD if i % 2 == 0 else ADD_BAD * long for i in range(k)]
    return texts


def he0(k=2, seed=1):
    p = load_problems()[0]
    return parse_settings(p.prompt, p.editable_tests(), "auto", k, 0.8, 0.95, 64, 0, METHOD_LABELS["bass"], None,
                          None, None, seed)


def add(k=2, seed=1):
    return parse_settings(ADD_PROMPT, ADD_TESTS, "auto", k, 0.8, 0.95, 64, 0,
                          METHOD_LABELS["bass"], None, None, None, seed)


def title(html: str) -> str:
    return re.search(r'bass-status-title">([^<]*)<', html).group(1)


def run_in_thread(session, settings, cancel) -> tuple[threading.Thread, list]:
    views: list = []
    thread = threading.Thread(target=lambda: views.extend(generate_views(session, settings, cancel)), daemon=True)
    thread.start()
    return thread, views
