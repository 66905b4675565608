"""Widget values → run settings; every user mistake is a readable UserError."""

from __future__ import annotations

import math

import pytest

from app.settings import METHOD_LABELS, UserError, method_from_label, parse_settings
from bass.config import HUMANEVAL_STOPS

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
    ("k", 0, "between 1 and 16"), ("k", 17, "between 1 and 16"), ("k", 2.5, "whole number"),
    ("temperature", math.nan, "temperature"), ("temperature", -1, "temperature"), ("top_p", 0, "top-p"),
    ("max_new_tokens", "lots", "must be a number"), ("seed", -3, "seed"),
])
def test_out_of_range_values(field, value, words):
    with pytest.raises(UserError, match=words):
        parse(**{field: value})


def test_method_labels_and_ids():
    assert method_from_label("Regular batched decoding") == "regular"
    assert method_from_label("single") == "single"
    with pytest.raises(UserError, match="unknown method"):
        method_from_label("beam search")
