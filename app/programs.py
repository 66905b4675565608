"""From prompt + generated text to the program the sandbox runs, and how a prompt is treated.

Two prompt styles:
- *completion*: the prompt is code (a HumanEval signature + docstring); the model continues it with
  `chat=False` and the HumanEval stop strings; the program is prompt + completion.
- *chat*: free text for the instruct model (`chat=True`); the answer is prose with a fenced code block,
  and the program is the code inside the fence.
"""

from __future__ import annotations

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


def build_program(prompt: str, generated: str, style: str) -> str:
    """The source the sandbox runs for one candidate (`style` already resolved)."""
    if style == "completion":
        return prompt + generated
    if style == "chat":
        return extract_code(generated)
    raise ValueError(f"style must be 'completion' or 'chat' here, got {style!r}")

