"""Session-wide settings, applied before any test module imports triton."""

import os

import torch

# Triton decides between compiling and interpreting when a kernel is decorated: on a machine with
# no GPU the kernels must run in the interpreter, so this has to happen before the first import.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# An "auto" engine on the CPU runs bf16 where this machine's projections are faster in it (`linear.cpu_dtype`): the
# suite pins float32, so that it tests the same thing on every machine, and the bf16 tests ask for bf16 by name.
os.environ.setdefault("BASS_CPU_DTYPE", "float32")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent / "bass"))  # the `tiny` model factory
from tiny import make_model  # noqa: E402

# The 1.5B model (seconds to load, GBs held) and a headless browser: a test with either marker is slow too. Every other
# slow test sits in a module marked `pytestmark = pytest.mark.slow`, most of them named `*_slow.py` beside the fast
# module of the same subject.
SLOW_MARKERS = ("embedded", "browser")


def pytest_collection_modifyitems(config, items):
    """Every embedded and browser test is slow too, so that `-m "not slow"` (make test-fast) leaves them out."""
    for item in items:
        if any(item.get_closest_marker(name) for name in SLOW_MARKERS):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A folder factory: tiny_dir(family, seed, head_scale) -> a saved random model with tokenizer, made once a
    session per arguments; no test writes to its folder."""
    made = {}

    def get(family: str = "llama", seed: int = 0, head_scale: float = 30.0) -> Path:
        key = (family, seed, head_scale)
        if key not in made:
            made[key] = make_model(tmp_path_factory.mktemp(f"{family}{seed}"), family, seed, head_scale)
        return made[key]

    return get
