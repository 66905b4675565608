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
# Modules of end-to-end engine runs, interpreted Triton kernels, chi-square sampling and whole sandbox batches (seconds
# a test on a 2-core CPU, `--durations`), and single tests of several seconds elsewhere: kept out of `make test-fast`
# by node id prefix, so that the modules need not change
SLOW_TESTS = (
    "tests/bass/test_engine.py",
    "tests/bass/test_lossless.py",
    "tests/bass/test_feature_draft.py",
    "tests/bass/test_proposal_graphs.py",
    "tests/kernels/test_verify_sample.py",
    "tests/kernels/test_top_p.py",
    "tests/draft_training/test_pipeline.py",
    "tests/draft_training/test_segments.py",
    "tests/bass/test_cpu_bf16.py",
    "tests/kernels/test_split_sum.py",
    "tests/kernels/test_pdl.py",
    "tests/kernels/test_draft_sample.py",
    "tests/sandbox/test_humaneval.py",
    "tests/sandbox/test_limits.py",
    "tests/sandbox/test_adversarial.py",
    "tests/app/test_generate_flow.py::test_a_pass_badge_appears_while_a_sibling_is_still_decoding",
    "tests/app/test_generate_queue.py::test_a_visitor_in_line_sees_their_place_and_stop_takes_them_out_of_it",
    "tests/bass/test_sampling.py::test_verify_top_p_emits_what_the_dense_rule_emits",
    "tests/bass/test_sampling.py::test_verify_top_p_from_the_kernels_candidates_gives_the_torch_paths_verdict",
    "tests/bass/test_scheduler.py::test_greedy_output_is_the_same_alone_and_joined_mid_run",
    "tests/bass/test_scheduler.py::test_memory_admission_refuses_what_can_never_fit_and_queues_what_fits_later",
    "tests/draft_training/test_kernel_choice.py::test_student_trains_on_torch_forms_while_the_teacher_runs_the_kernels_interpreted",
    "tests/kernels/test_fused_layers.py::test_model_through_interpreted_kernels_matches_torch_ops",
    "tests/kernels/test_ragged_attention.py::test_ragged_matches_reference_fp32",
    "tests/sandbox/test_runner.py::test_cli_run_and_humaneval_json",
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
