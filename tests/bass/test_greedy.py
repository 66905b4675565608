"""The README's guarantee, in the fast tier: greedy BASS emits regular greedy decoding's tokens, token for token
(docs/design.md §1), on a tiny random Llama on the CPU, two prompts with two candidates each. Two drafters take the
rule's two branches: the target drafting for itself (every draft kept, a bonus token each round) and n-gram lookup
(drafts kept in part, a different number per row: a ragged batch). The slow tier checks every family, drafter and
policy (tests/bass/test_engine.py) and the embedded model (tests/bass/test_embedded_engine.py)."""

import pytest

from bass.config import SamplingParams

PROMPTS = ["def fib(n):\n", "for i in range(10):\n    print("]
GREEDY = SamplingParams(max_new_tokens=16)


@pytest.fixture(scope="module")
def engine(tiny_engine):
    return tiny_engine("llama", draft_seed=0)  # seed 0 is the target's own weights


@pytest.fixture(scope="module")
def regular(engine):
    return engine.generate(PROMPTS, k=2, params=GREEDY, method="regular")


def test_greedy_bass_with_a_draft_that_is_always_right_keeps_every_draft(engine, regular):
    bass = engine.generate(PROMPTS, k=2, params=GREEDY, method="bass", drafter="model")
    assert bass.token_ids == regular.token_ids
    assert bass.stats.accepted == bass.stats.proposed > 0
    assert bass.stats.rounds < regular.stats.rounds


def test_greedy_bass_with_ngram_drafts_kept_in_part_emits_regular_decodings_tokens(engine, regular):
    bass = engine.generate(PROMPTS, k=2, params=GREEDY, method="bass", drafter="ngram")
    assert bass.token_ids == regular.token_ids
    assert 0 < bass.stats.accepted < bass.stats.proposed
    assert len({c.stats.accepted for c in bass.candidates}) > 1  # rows kept different numbers: ragged
