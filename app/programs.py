"""From prompt + generated text to the program the sandbox runs, and how a prompt is treated.

Two prompt styles:
- *completion*: the prompt is code (a HumanEval signature + docstring); the model continues it with
  `chat=False` and the HumanEval stop strings; the program is prompt + completion.
- *chat*: free text for the instruct model (`chat=True`); the answer is prose with a fenced code block,
  and the program is the code inside the fence, without the example usage an answer often ends with
  (`strip_example_usage`): its prints would run with the tests and be copied with the solution.
"""

from __future__ import annotations

import ast
import re

STYLES = ("auto", "completion", "chat")

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PYTHON_TAGS = {"", "python", "py", "python3", "py3"}
_CODE_START = re.compile(r"^\s*(def |async def |class |from \S+ import |import |@)", re.MULTILINE)


def resolve_style(style: str, prompt: str) -> str:
    """'completion' or 'chat' for a prompt; 'auto' picks completion when the prompt already is Python code
    that ends inside a definition (a signature, a docstring), chat otherwise."""
    if style not in STYLES:
        raise ValueError(f"prompt style must be one of {STYLES}, got {style!r}")
    if style != "auto":
        return style
    text = prompt.strip()
    if not text:
        return "chat"
    starts_like_code = _CODE_START.match(text) is not None
    has_definition = re.search(r"^(async )?def \w+\(|^class \w+", text, re.MULTILINE) is not None
    return "completion" if starts_like_code and has_definition else "chat"


def extract_code(answer: str) -> str:
    """The Python code in a chat answer: the longest fenced block tagged python (or untagged).

    An unterminated fence (the answer was cut by the token limit) still counts up to the end. With no
    fence at all the whole answer is returned, so code answered without markdown still runs.
    """
    blocks = [body for tag, body in _FENCE.findall(answer) if tag.lower() in _PYTHON_TAGS]
    if not blocks:
        return answer.strip("\n")
    return max(blocks, key=len).strip("\n")


def _is_main_guard(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)


def _is_example(node: ast.stmt, after_last_definition: bool) -> bool:
    """Top-level statements that only show the solution off: calls and prints, asserts, a `__main__` block;
    after the last definition, anything but an import (the demo's inputs)."""
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False
    if after_last_definition or _is_main_guard(node) or isinstance(node, ast.Assert):
        return True
    is_docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    return isinstance(node, ast.Expr) and not is_docstring


def strip_example_usage(code: str) -> str:
    """`code` without its example usage (`_is_example`) and the comments just above it ("# Example usage:").

    Code that does not parse (an answer cut by the token limit) is returned as it is."""
    try:
        body = ast.parse(code).body
    except SyntaxError:
        return code
    definitions = [i for i, n in enumerate(body) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                   ast.ClassDef))]
    if not definitions:
        return code  # a script, not a solution with a demo: keep it whole
    lines = code.splitlines()
    drop: set[int] = set()  # 0-based line numbers
    for i, node in enumerate(body):
        if _is_example(node, i > definitions[-1]):
            first = node.lineno - 1
            while first > 0 and (lines[first - 1].lstrip().startswith("#") or not lines[first - 1].strip()):
                first -= 1
            drop.update(range(first, node.end_lineno))
    kept = [line for n, line in enumerate(lines) if n not in drop]
    return "\n".join(kept).strip("\n")


def build_program(prompt: str, generated: str, style: str) -> str:
    """The source the sandbox runs for one candidate (`style` already resolved)."""
    if style == "completion":
        return prompt + generated
    if style == "chat":
        return strip_example_usage(extract_code(generated))
    raise ValueError(f"style must be 'completion' or 'chat' here, got {style!r}")

