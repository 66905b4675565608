"""bench/profile/rounds.py on tiny CPU models: its drafter wrapper must pass every hook through."""

from tiny import make_model

from bass.config import EngineConfig, SamplingParams
from bass.engine import Engine
from bass.models.loader import load_model
from bench.profile.rounds import launches_counted


def test_launches_counted_tells_rounds_launched_ahead(tmp_path):
    target = make_model(tmp_path / "target", seed=0)
    loaded = load_model(str(target))
    counts = {}
    for look_ahead in (False, True):
        engine = Engine(EngineConfig(target=str(target), draft=None, device="cpu", look_ahead=look_ahead),
                        target=loaded)
        with launches_counted() as launched:
            result = engine.generate("def f(x):\n", k=2, params=SamplingParams(max_new_tokens=8), method="regular")
        counts[look_ahead] = dict(launched)
        rounds = len(result.stats.draft_lengths)  # one launch per round read (greedy: no redo), and with
        assert rounds <= sum(launched.values()) <= rounds + look_ahead  # look-ahead maybe one after the last
    assert counts[False]["ahead"] == 0 and counts[True]["ahead"] > 0
