"""Widget values → run settings; every user mistake is a readable UserError."""

from __future__ import annotations

import math

import pytest

from app.settings import METHOD_LABELS, UserError, method_from_label, parse_settings
from bass.config import HUMANEVAL_STOPS, SamplingParams

BASE = dict(prompt="def f(x):\n    '''double'''\n", tests="", style="auto", k=4, temperature=0.8, top_p=0.95,
            max_new_tokens=64, time_budget_s=30, method=METHOD_LABELS["bass"], drafter="ngram", backend="torch",
            pair_label=None, seed=7)


def parse(**changes):
    return parse_settings(**{**BASE, **changes})


def test_valid_completion_settings():
    s = parse()
    assert (s.k, s.method, s.style, s.chat) == (4, "bass", "completion", False)
    assert s.params.stop == HUMANEVAL_STOPS and s.params.seed == 7 and s.params.time_budget_s == 30
    assert s.describe()["temperature"] == 0.8


def test_chat_prompt_has_no_stop_strings():
    s = parse(prompt="Write a function that reverses a string")
    assert s.chat and s.params.stop == ()


def test_zero_budget_means_none():
    assert parse(time_budget_s=0).params.time_budget_s is None
    assert parse(time_budget_s=None).params.time_budget_s is None


@pytest.mark.parametrize("prompt", ["", "   \n\t", None])
def test_empty_prompt(prompt):
    with pytest.raises(UserError) as err:
        parse(prompt=prompt)
    assert "prompt is empty" in err.value.message.lower()
    assert "HumanEval" in err.value.hint


@pytest.mark.parametrize("field, value, words", [
    ("k", 0, "k · candidates must be a whole number from 1 to 16, got 0"), ("k", 99, "k · candidates .* got 99"),
    ("k", 2.5, "k · candidates must be a whole number"), ("k", True, "k · candidates"),
    ("temperature", math.nan, "Temperature must be a number from 0 to 2"), ("temperature", 5, "Temperature .* got 5"),
    ("temperature", -1, "Temperature"), ("top_p", 0, "Top-p must be a number from 0.01 to 1"),
    ("max_new_tokens", "lots", "Max new tokens must be a whole number"), ("max_new_tokens", 0, "Max new tokens"),
    ("max_new_tokens", 5000, "Max new tokens must be a whole number from 1 to 1024, got 5000"),
    ("time_budget_s", -5, "Time budget \\(s\\) must be a number from 0 to 3600, got -5"),
    ("seed", -5, "Seed must be a whole number from 0 to 2147483647, got -5"), ("seed", 1.5, "Seed"),
])
def test_out_of_range_values_are_refused_naming_the_field(field, value, words):
    """Never clamped in silence: the message names the field as its label does, its range and the value."""
    with pytest.raises(UserError, match=words) as err:
        parse(**{field: value})
    assert err.value.hint.startswith("type ")


def test_tests_that_do_not_parse_are_refused_before_generating():
    with pytest.raises(UserError, match="The unit tests do not parse \\(line 2: .*nothing was generated") as err:
        parse(tests="def check(candidate):\n    assert candidate([1.0, 2.0], 0.5 == False\n")
    assert "fix that line" in err.value.hint
    assert parse(tests="assert f(2) == 4\n").tests  # tests that parse go through


def test_a_seed_reproduces_with_a_fixed_draft_length_and_a_blank_one_is_fresh():
    seeded = parse(seed=7)
    assert seeded.seed_given and seeded.params.seed == 7
    assert seeded.draft_length.policy == "fixed"  # a length that does not change from run to run
    fresh = [parse(seed=None), parse(seed=""), parse(seed="  ")]
    assert all(not s.seed_given for s in fresh)
    assert len({s.params.seed for s in fresh}) == 3  # three draws of 2**31 seeds
    # a blank seed leaves the draft length to the engine (it follows the batch); the drawn seed, typed into the
    # box, runs with that seed and the fixed length: the text it shows is the text the seed reproduces from now on
    assert all(s.draft_length is None for s in fresh)
    again = parse(seed=str(fresh[0].params.seed))
    assert again.seed_given and again.params.seed == fresh[0].params.seed
    assert again.draft_length == seeded.draft_length


@pytest.mark.parametrize("tests", [
    "x = 1\n", "candidate(3.5)\n", "assert True\n", "def check(candidate):\n    candidate(3.5)\n",
    "def check(candidate):\n    assert 1 == 1\n",
])
def test_tests_with_no_assert_that_can_fail_are_refused_before_generating(tests):
    """They would pass any candidate: the sandbox refuses them, so the page does before the model runs."""
    with pytest.raises(UserError, match=r"The unit tests were refused \(no tests: the test file has no assert that can "
                                        r"fail .*\); nothing was generated") as err:
        parse(tests=tests)
    assert err.value.field == "bass-tests" and "clear the box" in err.value.hint
    assert parse(tests="def check(candidate):\n    assert candidate(2) == 4\n").tests


@pytest.mark.parametrize("changes, field", [
    (dict(prompt=""), "bass-prompt"), (dict(tests="assert (\n"), "bass-tests"), (dict(k=0), "bass-k"),
    (dict(temperature=9), "bass-temperature"), (dict(top_p=0), "bass-top-p"), (dict(max_new_tokens=0), "bass-max-new"),
    (dict(time_budget_s=-5), "bass-budget"), (dict(seed="x"), "bass-seed"), (dict(seed=-1), "bass-seed"),
])
def test_each_error_names_the_widget_it_is_about(changes, field):
    with pytest.raises(UserError) as err:
        parse(**changes)
    assert err.value.field == field


@pytest.mark.parametrize("prompt, asks", [
    ("Write a function that reverses a string, with tests", True),
    ("Implement a stack class and add unit tests", True),
    ("Write is_prime(n) and some asserts for it", True),
    ("Write a pytest suite for a fizzbuzz function", True),
    ("Write a function to test whether a number is prime", False),
    ("Write a function that reverses a string", False),
])
def test_a_chat_prompt_that_asks_for_tests_is_noticed(prompt, asks):
    assert parse(prompt=prompt).tests_requested is asks


def test_a_completion_prompt_never_counts_as_asking_for_tests():
    assert not parse(prompt='def f(x):\n    """Return x, with tests of it."""\n').tests_requested


@pytest.mark.parametrize("field, value", [("top_p", "0.9"), ("time_budget_s", "1"), ("seed", "x"), ("top_p", True),
                                          ("temperature", "0.5"), ("max_new_tokens", 2.0), ("seed", True)])
def test_sampling_params_refuse_a_wrong_type_naming_the_field(field, value):
    """The engine's own check, for callers other than the page (which converts the boxes' values first)."""
    with pytest.raises(ValueError, match=f"^{field} must be"):
        SamplingParams(**{field: value})


def test_a_chat_prompt_asks_for_code_alone():
    s = parse(prompt="Write a function that reverses a string")
    assert s.engine_prompt.startswith(s.prompt) and "without" not in s.prompt
    assert "no explanation, tests or example usage" in s.engine_prompt
    assert parse().engine_prompt == parse().prompt  # a completion prompt is the model's as it is


def test_method_labels_and_ids():
    assert method_from_label("Regular batched decoding") == "regular"
    assert method_from_label("single") == "single"
    with pytest.raises(UserError, match="unknown method"):
        method_from_label("beam search")
