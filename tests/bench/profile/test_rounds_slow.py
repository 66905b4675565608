"""`bench.profile.rounds` over a feature draft's rounds on tiny CPU models: the slow part of test_rounds.py."""

import pytest
from tiny import make_model

from bass.config import DraftLengthConfig, EngineConfig, SamplingParams
from bass.engine import Engine
from bass.models.loader import load_model
from bench.profile.rounds import round_breakdown
from bench.synthetic import random_feature_draft

pytestmark = pytest.mark.slow  # a feature draft's rounds end to end


def test_round_breakdown_of_a_feature_draft(tmp_path):
    """The feature draft takes each verify's features when the verify is launched (`Drafter.verified`);
    a wrapper that drops that hook leaves it nothing to commit."""
    target = make_model(tmp_path / "target", seed=0)
    loaded = load_model(str(target))
    engine = Engine(EngineConfig(target=str(target), draft=None, device="cpu", look_ahead=True), target=loaded,
                    draft=random_feature_draft(loaded, 3))
    got = round_breakdown(engine, "def f(x):\n", 2, SamplingParams(max_new_tokens=8), "bass", "model", tmp_path,
                          "feature", draft_length=DraftLengthConfig(policy="fixed", l0=2))
    assert got["draft_ms_per_round"] > 0 and got["wall_ms_per_round"] >= got["draft_ms_per_round"]
    assert (tmp_path / "profile_feature.txt").stat().st_size > 0
    assert engine.look_ahead is True  # the split asks its own requests for no look-ahead; the engine keeps its own
