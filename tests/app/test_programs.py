"""Prompt style and the program each candidate becomes."""

from __future__ import annotations

import pytest

from app.programs import build_program, extract_code, resolve_style

HUMANEVAL_0 = ('from typing import List\n\n\n'
               'def has_close_elements(numbers: List[float], threshold: float) -> bool:\n    """ doc """\n')


@pytest.mark.parametrize("prompt, style", [
    (HUMANEVAL_0, "completion"),
    ('def add(a, b):\n    """Add two numbers."""\n', "completion"),
    ("@cache\ndef fib(n):\n", "completion"),
    ("Write a function that reverses a string.", "chat"),
    ("import this is not code, just a sentence mentioning def", "chat"),
    ("   ", "chat"),
])
def test_auto_style(prompt, style):
    assert resolve_style("auto", prompt) == style


def test_explicit_style_wins_and_bad_style_is_refused():
    assert resolve_style("chat", HUMANEVAL_0) == "chat"
    assert resolve_style("completion", "reverse a string") == "completion"
    with pytest.raises(ValueError, match="prompt style"):
        resolve_style("poem", "x")


def test_extract_longest_python_block():
    answer = ("Here you go:\n```python\ndef a():\n    return 1\n```\nand a longer one:\n"
              "```py\ndef b(x):\n    return x * 2\n```\n```bash\nrm -rf /tmp/something/very/long/indeed\n```")
    assert extract_code(answer) == "def b(x):\n    return x * 2"


def test_extract_untagged_and_unterminated_fences():
    assert extract_code("```\nprint(1)\n```") == "print(1)"
    assert extract_code("Sure!\n```python\ndef f():\n    return 3\n") == "def f():\n    return 3"


def test_extract_without_fence_returns_answer():
    assert extract_code("def f():\n    return 1\n") == "def f():\n    return 1"


def test_build_program():
    assert build_program("def f():\n", "    return 1\n", "completion") == "def f():\n    return 1\n"
    assert build_program("task", "Text\n```python\nx = 1\n```", "chat") == "x = 1"
    with pytest.raises(ValueError):
        build_program("p", "g", "auto")
