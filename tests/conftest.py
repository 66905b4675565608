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
# `make test` runs on two workers (pytest-xdist, `--dist loadgroup`). The tests that hold a real model (the embedded
# 1.5B, Gemma 3 270M, or the app serving one: the `embedded` marker, the `real_models` or `app_url` fixture) form one
# group, so one worker runs them one after another and the two workers never hold two real models at once; every
# other test is grouped by its module, so that a module's fixtures (a served app, a model made once) are built once.
REAL_MODEL_FIXTURES = {"real_models", "app_url"}
REAL_MODEL_GROUP = "real-model"

# Two workers on two cores: each gets its share of the cores, not torch's default of all of them.
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _workers > 1:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // _workers))


def xdist_group(item) -> str:
    """The worker group of a test: `REAL_MODEL_GROUP` where it holds a real model, else its module."""
    real = item.get_closest_marker("embedded") or REAL_MODEL_FIXTURES & set(item.fixturenames)
    return REAL_MODEL_GROUP if real else item.nodeid.split("::")[0]


def pytest_collection_modifyitems(config, items):
    """Every embedded and browser test is slow too, so that `-m "not slow"` (make test-fast) leaves them out; every
    test gets its worker group (`xdist_group`)."""
    for item in items:
        if any(item.get_closest_marker(name) for name in SLOW_MARKERS):
            item.add_marker(pytest.mark.slow)
        item.add_marker(pytest.mark.xdist_group(xdist_group(item)))


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
