"""Many requests, one engine: every drafter joined mid-run gives what it gives alone, and memory admission,
end to end (seconds each): the slow part of test_scheduler.py. Joins are made deterministic as `scheduling`
says."""

import pytest
from scheduling import FIXED, GREEDY, PROMPTS, held_after, run_joined

from bass.config import SamplingParams

pytestmark = pytest.mark.slow  # every drafter joined mid-run, and memory admission, end to end


@pytest.mark.parametrize("drafter", ["model", "ngram", "feature", "regular"])
@pytest.mark.parametrize("static", [False, True], ids=["eager", "static-shapes"])
def test_greedy_output_is_the_same_alone_and_joined_mid_run(tiny_engine, monkeypatch, joins, drafter, static):
    """On the eager caches, and on the static-shape ones of the CUDA path (run eagerly here, with look-ahead and
    riders): the target's and the draft's caches grow in place."""
    seed = dict(feature_seed=3) if drafter == "feature" else dict(draft_seed=1)
    # (max_batch_rows only tells the cached static engine apart from the eager one)
    engine = tiny_engine("llama", **seed, look_ahead=static, max_batch_rows=63 if static else 64)
    if static and not hasattr(engine.target_forward, "use_graphs"):
        engine.use_static_shapes(capture=False)
    method = "regular" if drafter == "regular" else "bass"
    name = None if drafter == "regular" else "model" if drafter == "feature" else drafter
    kw = [dict(prompts=p, k=k, params=SamplingParams(max_new_tokens=n, **GREEDY), method=method, drafter=name,
               draft_length=FIXED) for p, k, n in zip(PROMPTS, (3, 2, 4), (30, 12, 20), strict=True)]
    alone = [engine.generate(**x) for x in kw]
    joins.clear()
    held_after(monkeypatch, 2, waiting=2)
    together = run_joined(engine, kw[0], kw[1:])
    assert joins[0] == 0 and any(j > 0 for j in joins[1:])  # the later requests joined a running batch
    for a, b in zip(alone, together, strict=True):
        assert a.token_ids == b.token_ids


def test_memory_admission_refuses_what_can_never_fit_and_queues_what_fits_later(tiny_engine, monkeypatch, joins):
    engine = tiny_engine("llama", draft_seed=1)
    params = SamplingParams(max_new_tokens=24, **GREEDY)
    budget = engine.scheduler.budget
    from bass.engine.validate import request_bytes

    one = request_bytes(engine.serving, [engine.encode(PROMPTS[0])[0]], 2, params, FIXED)
    monkeypatch.setattr(engine.scheduler, "budget", int(1.5 * one))  # room for one such request at a time
    try:
        with pytest.raises(ValueError, match="lower k or max_new_tokens"):
            engine.generate(PROMPTS[0], k=8, params=params, draft_length=FIXED)
        alone = [engine.generate(p, k=2, params=params, draft_length=FIXED) for p in PROMPTS[:2]]
        joins.clear()
        held_after(monkeypatch, 1)
        together = run_joined(engine, dict(prompts=PROMPTS[0], k=2, params=params, draft_length=FIXED),
                               [dict(prompts=PROMPTS[1], k=2, params=params, draft_length=FIXED)])
    finally:
        monkeypatch.setattr(engine.scheduler, "budget", budget)
    assert joins == [0, 0]  # the second waited for memory instead of joining
    assert [r.token_ids for r in together] == [r.token_ids for r in alone]
