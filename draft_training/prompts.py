"""Code prompts for the target's own completions, cut from the training split of the corpus.

Two styles, as the app sees them:
  - HumanEval style (completion): the file's imports, a module-level function's signature and docstring;
    the target writes the body;
  - chat style: "Write a Python function `<signature>` that ..." from the same docstring; the target
    answers as the instruct model it is (chat template applied by the engine).
Prompts come only from train-split files of `draft_training.corpus`, so HumanEval never enters.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path


def function_prompts(rel: str, text: str, max_per_file: int = 3) -> list[dict]:
    """Up to `max_per_file` prompts of both styles from the documented module-level functions of one file."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return []
    lines = text.splitlines()
    imports = [ast.get_source_segment(text, n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    header = "\n".join(s for s in imports[:6] if s and "\n" not in s)
    out = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_") or len(node.body) < 2:
            continue
        doc = ast.get_docstring(node)
        first = node.body[0]
        if not doc or not 40 <= len(doc) <= 800 or not isinstance(first, ast.Expr):
            continue
        start = (node.decorator_list[0].lineno if node.decorator_list else node.lineno) - 1
        signature = "\n".join(lines[node.lineno - 1:node.body[0].lineno - 1]).strip()
        head = "\n".join(lines[start:first.end_lineno]) + "\n"
        summary = doc.split("\n\n")[0].replace("\n", " ").strip()
        out.append({"style": "completion", "source": rel, "prompt": (header + "\n\n\n" if header else "") + head})
        out.append({"style": "chat", "source": rel,
                    "prompt": f"Write a Python function `{signature.rstrip(':')}`. {summary}"})
        if len(out) >= 2 * max_per_file:
            break
    return out


def select_prompts(pool: Iterable[dict], n: int, seed: int = 0) -> list[dict]:
    """n prompts (half of each style) from `pool`, in a seeded hash order: reproducible, no RNG state."""
    pool = list(pool)

    def key(p: dict) -> str:
        return hashlib.sha1(f"{seed}:{p['source']}:{p['prompt']}".encode()).hexdigest()

    chosen = []
    for style in ("completion", "chat"):
        chosen += sorted((p for p in pool if p["style"] == style), key=key)[:n // 2]
    return chosen


def write_prompts(prompts: list[dict], path: Path) -> None:
    """One JSON object per line."""
    path.write_text("".join(json.dumps(p) + "\n" for p in prompts))


def read_prompts(path: Path) -> list[dict]:
    """The prompts `write_prompts` wrote."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
