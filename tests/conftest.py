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

SLOW_MARKERS = ("embedded", "browser")  # the 1.5B model (seconds to load, GBs held) and a headless browser
# Tests of several seconds each on a 2-core CPU (`--durations`), kept out of `make test-fast` by node id prefix so that
# the modules they live in need not change
SLOW_TESTS = (
    "tests/bass/models/test_cpu_linear.py::test_the_measurement_finds_a_kernel_that_rounds_by_row_count",
    "tests/bass/models/test_cpu_linear.py::test_a_reduced_precision_row_is_the_same_bits_whatever_shares_its_call",
    "tests/bass/models/test_cpu_linear.py::test_bass_cpu_fixed_rows_is_read_from_the_environment_at_import",
    "tests/bass/models/test_cpu_linear.py::test_bass_onednn_0_in_the_environment_switches_it_off",
    "tests/app/test_main.py::test_sigterm_closes_the_server_and_the_exit_removes_the_exports",
    "tests/bass/models/test_families.py::test_incremental_decoding_matches_full_forward",
)


def pytest_collection_modifyitems(config, items):
    """Every embedded and browser test is slow too, and so is each of SLOW_TESTS, so that `-m "not slow"`
    (make test-fast) leaves them out without each carrying the marker."""
    for item in items:
        if any(item.get_closest_marker(name) for name in SLOW_MARKERS) or item.nodeid.startswith(SLOW_TESTS):
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
