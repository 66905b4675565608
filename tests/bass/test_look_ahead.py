"""Look-ahead (`bass.decode.pipeline`): rounds launched before the round before them is read.

On the CPU nothing runs ahead of the host, but the bookkeeping is the same: the step covers sequences the
round before finishes, is rolled back and relaunched after a full-sort redo, and runs in the other graph
slot (`GraphedModel` with capture=False keeps the graphs' buffer semantics). None of it may change a token.
"""

import pytest
import torch

import bass.decode.pipeline
import bass.decode.round
import bass.engine.batch
from bass.config import DraftLengthConfig, SamplingParams
from bass.decode import sampling
from bass.decode.draft_length import DraftLengthPolicy

PROMPTS = ["def fib(n):\n", "for i in range(10):\n    print(i)\n" * 2]
PATTERN = (0, 0, 0, 2, 0, 0, 1, 3, 2, 0, 0, 0)  # runs of plain steps, of drafting rounds between them


class ScriptedPolicy(DraftLengthPolicy):
    """Decided ahead, like a fixed length, but the i-th length it hands out is PATTERN[i], plain steps among
    them: with and without look-ahead the same rounds get the same lengths, so the same tokens must come out."""

    decides_ahead = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.handed = 0

    def lengths(self, live):
        self.handed += 1
        return [0 if s.finished else PATTERN[(self.handed - 1) % len(PATTERN)] for s in live]


def _engine(tiny_engine, drafter: str, look_ahead: bool, graphs: bool = False):
    kw = {"feature_seed": 4} if drafter == "feature" else {"draft_seed": 1}
    device = "cuda" if graphs else "cpu"
    engine = tiny_engine("llama", head_scale=6.0, look_ahead=look_ahead, device=device, **kw)
    engine.use_static_shapes(capture=graphs)  # capture=False: graph slots and static output buffers, eagerly
    return engine


GRAPHS = [False, pytest.param(True, marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                             reason="CUDA graphs; the CPU twin is graphs=False"))]


@pytest.mark.parametrize("graphs", GRAPHS, ids=["cpu-twin", "cuda-graphs"])
@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
@pytest.mark.parametrize("drafter", ["regular", "ngram", "model", "feature"])
def test_look_ahead_changes_no_token(tiny_engine, monkeypatch, drafter, greedy, graphs):
    monkeypatch.setattr(bass.engine.batch, "DraftLengthPolicy", ScriptedPolicy)
    monkeypatch.setattr(sampling, "TOP_P_CANDIDATES", 8)  # many full-sort redos: steps launched ahead relaunched
    slots, redos = [], []  # (slot, L, riders) of each verify; L of the round ahead (None: none) at each redo
    verify, redo = bass.decode.round.verify, bass.decode.pipeline.RoundLoop._redo
    monkeypatch.setattr(bass.decode.round, "verify", lambda *a: slots.append(
        (a[1].slot, a[1].draft_length, a[1].alive is not None and not bool(a[1].alive.all()))) or verify(*a))
    monkeypatch.setattr(bass.decode.pipeline.RoundLoop, "_redo",
                        lambda *a: redos.append(a[3] and a[3].draft_length) or redo(*a))
    params = SamplingParams(max_new_tokens=24, seed=2, stop=(" ran", "\t"),  # some stop early (seen in their text)
                            **({"temperature": 0.0} if greedy else {"temperature": 1.0, "top_p": 0.9}))
    kw = dict(k=3, params=params, method="regular" if drafter == "regular" else "bass",
              drafter=None if drafter in ("regular", "feature") else drafter, draft_length=DraftLengthConfig())
    if drafter == "feature":
        kw["drafter"] = "model"

    want = _engine(tiny_engine, drafter, False, graphs).generate(PROMPTS, **kw)
    assert {s for s, _, _ in slots} == {0}
    assert not any(rides for _, _, rides in slots)  # without look-ahead finished rows leave at once
    slots.clear()
    got = _engine(tiny_engine, drafter, True, graphs).generate(PROMPTS, **kw)
    assert got.token_ids == want.token_ids
    assert [c.finish_reason for c in got.candidates] == [c.finish_reason for c in want.candidates]
    # rounds were launched ahead by regular decoding (plain steps) and by the drafter that follows its rounds on
    # the device; a drafter that needs the read (n-gram lookup, a draft model's own cache) waits for it
    assert any(s == 1 for s, _, _ in slots) == (drafter in ("regular", "feature"))
    assert any(s == 1 and L > 0 for s, L, _ in slots) == (drafter == "feature")
    if not greedy and not graphs:  # 6 rows in a bucket of 8: the first to finish rode along (width 0) until
        assert any(rides for _, _, rides in slots)  # 4 were left (greedy: a prompt's samples finish together)
    if not graphs:  # (the CUDA kernels' rounding changes the tiny model's text and where it stops)
        assert len({len(c.token_ids) for c in want.candidates}) > 1  # sequences left at different rounds
    # the host waits for the device only on CUDA, where its stalls are measured (`BatchStats.host_stalls`)
    assert any(got.stats.round_waits_s) == graphs and (got.stats.host_stalls() is not None) == graphs
    if drafter != "regular":
        assert got.stats.proposed > 0  # the same drafts (wrong features would change the feature draft's):
        assert (got.stats.proposed, got.stats.accepted) == (want.stats.proposed, want.stats.accepted)
    if not greedy and drafter in ("regular", "feature"):  # a redo met a round launched ahead: it was withdrawn
        # and launched again
        assert any(L is not None for L in redos)
        if drafter == "feature":
            assert any(L for L in redos)  # ... a drafting one, proposed again


def test_a_drafting_second_round_changes_no_token(tiny_engine, monkeypatch):
    """Round 1 drafts while round 0 (plain) is unread, before any commit gave the feature drafter the
    histories its backlog's tokens come from: it must wait for the read (found on the H100)."""
    monkeypatch.setattr(bass.engine.batch, "DraftLengthPolicy", ScriptedPolicy)
    monkeypatch.setitem(globals(), "PATTERN", (0, 2, 2, 0, 1))
    params = SamplingParams(max_new_tokens=16, seed=5, temperature=1.0)
    kw = dict(k=2, params=params, method="bass", drafter="model", draft_length=DraftLengthConfig())
    want = _engine(tiny_engine, "feature", False).generate(PROMPTS, **kw)
    got = _engine(tiny_engine, "feature", True).generate(PROMPTS, **kw)
    assert got.token_ids == want.token_ids
    assert got.stats.proposed > 0


def test_after_a_first_round_that_drafted_the_second_is_launched_ahead(tiny_engine, monkeypatch):
    """A first round that drafts feeds the prompt's last entry: the feature drafter has no backlog and needs no
    commit's histories, so the second round is launched before the first is read (with a plain first round it
    waits, as above)."""
    monkeypatch.setattr(bass.engine.batch, "DraftLengthPolicy", ScriptedPolicy)
    monkeypatch.setitem(globals(), "PATTERN", (2,))
    slots = []
    verify = bass.decode.round.verify
    monkeypatch.setattr(bass.decode.round, "verify", lambda *a: slots.append(a[1].slot) or verify(*a))
    params = SamplingParams(max_new_tokens=16, seed=5, temperature=1.0)
    kw = dict(k=2, params=params, method="bass", drafter="model", draft_length=DraftLengthConfig())
    want = _engine(tiny_engine, "feature", False).generate(PROMPTS, **kw)
    slots.clear()
    got = _engine(tiny_engine, "feature", True).generate(PROMPTS, **kw)
    assert got.token_ids == want.token_ids
    assert slots[:2] == [0, 1]


def test_single_sequence_with_look_ahead_changes_no_token(tiny_engine):
    params = SamplingParams(max_new_tokens=16, seed=1, temperature=0.8)
    kw = dict(k=2, params=params, method="single", drafter="ngram",
              draft_length=DraftLengthConfig(policy="fixed", l0=2))
    want = _engine(tiny_engine, "ngram", False).generate(PROMPTS, **kw)
    got = _engine(tiny_engine, "ngram", True).generate(PROMPTS, **kw)
    assert got.token_ids == want.token_ids


def test_feature_draft_reads_its_own_rounds_features(tiny_engine, monkeypatch):
    """Each commit must take the features of the verify it commits, not those of the step launched ahead
    (same shapes, the other graph slot): every draft logit of a live sequence equals the draft's from-scratch
    logit."""
    from test_feature_draft import RecordingDrafter, _from_scratch

    from bass.runtime.attention import get_backend

    monkeypatch.setattr(bass.engine.batch, "DraftLengthPolicy", ScriptedPolicy)
    engine = _engine(tiny_engine, "feature", True)
    drafter = RecordingDrafter(engine.draft.model, engine.target_forward, get_backend("torch", engine.device),
                               forward=engine._draft_fwd, arena=engine._draft_arena)
    slots = []
    verify = bass.decode.round.verify
    monkeypatch.setattr(bass.decode.round, "verify", lambda *a: slots.append(a[1].slot) or verify(*a))
    params = SamplingParams(max_new_tokens=32, seed=1, temperature=0.0)
    result = engine.generate(PROMPTS, k=2, params=params, method="bass", drafter=drafter,
                             draft_length=DraftLengthConfig())
    # a finished row riding along (`bass.decode.pipeline`) is fed its width-0 verify's leftovers, never read: leave
    # out every proposal from a sequence's final history
    ids = engine.encode(PROMPTS)
    final = {tuple(ids[c.prompt_index]) + c.token_ids for c in result.candidates}
    live = [(h, got) for h, got in drafter.seen if tuple(h) not in final]
    assert 1 in slots and len(live) >= 4 and len(live) < len(drafter.seen)
    for history, got in live:
        torch.testing.assert_close(got, _from_scratch(engine, history), rtol=1e-4, atol=1e-4)


def test_a_request_may_override_the_engines_look_ahead(tiny_engine, monkeypatch):
    slots = []
    verify = bass.decode.round.verify
    monkeypatch.setattr(bass.decode.round, "verify", lambda *a: slots.append(a[1].slot) or verify(*a))
    engine = _engine(tiny_engine, "regular", False)
    params = SamplingParams(max_new_tokens=6, seed=1)
    engine.generate(PROMPTS, k=2, params=params, method="regular", look_ahead=True)
    assert 1 in slots and engine.look_ahead is False  # launched ahead for this request only
    slots.clear()
    engine.generate(PROMPTS, k=2, params=params, method="regular")
    assert slots and 1 not in slots


def test_no_round_is_launched_ahead_past_the_token_limit(tiny_engine, monkeypatch):
    """When the round just launched ends every sequence at its token limit, nothing is launched after it: a
    round ahead would be thrown away unread. Every verify launched is then a round reported."""
    launched = []
    verify = bass.decode.round.verify
    monkeypatch.setattr(bass.decode.round, "verify", lambda *a: launched.append(a[1].index) or verify(*a))
    engine = _engine(tiny_engine, "regular", True)
    params = SamplingParams(max_new_tokens=6, seed=1, temperature=0.0, stop=())
    result = engine.generate(PROMPTS[:1], k=2, params=params, method="regular")
    assert all(len(c.token_ids) == 6 for c in result.candidates)  # both ran to the limit
    assert len(launched) == len(result.stats.draft_lengths) == 5  # the prefill emits the first token


def test_a_round_near_the_token_limit_is_launched_ahead_with_shorter_drafts(tiny_engine, monkeypatch):
    """A sequence that round r might take to its limit drafts less in the round launched ahead of r's read,
    instead of holding that round back (the pipeline stopped for a round as each sequence neared its limit);
    the rounds launched after a read cut their drafts alike, so look-ahead still changes no token."""
    monkeypatch.setattr(bass.engine.batch, "DraftLengthPolicy", ScriptedPolicy)
    monkeypatch.setitem(globals(), "PATTERN", (3,))
    rounds = []  # (slot, lengths) of each verify
    verify = bass.decode.round.verify
    monkeypatch.setattr(bass.decode.round, "verify", lambda *a: rounds.append((a[1].slot, list(a[1].lengths)))
                        or verify(*a))
    params = SamplingParams(max_new_tokens=11, seed=3, temperature=1.0, stop=())
    kw = dict(k=2, params=params, method="bass", drafter="model", draft_length=DraftLengthConfig())
    want = _engine(tiny_engine, "feature", False).generate(PROMPTS, **kw)
    without = list(rounds)
    rounds.clear()
    got = _engine(tiny_engine, "feature", True).generate(PROMPTS, **kw)
    assert got.token_ids == want.token_ids
    lengths = [len(c.token_ids) for c in got.candidates]
    assert max(lengths) == 11 and all(n <= 11 for n in lengths)  # to the limit, never past it
    assert [max(ls) for _, ls in rounds] == [max(ls) for _, ls in without]  # the same draft widths
    cut = [ls for slot, ls in rounds if slot == 1 and max(ls) > 0 and min(ls) < 3]
    assert cut  # a drafting round launched ahead with a draft cut short by the limit


def test_with_look_ahead_finished_rows_leave_only_a_batch_of_more_than_eight(tiny_engine, monkeypatch):
    """16 rows: finished ones leave once the live fit 8 rows (a smaller bucket, dear enough to pay for the
    stopped pipeline); from then on they ride along to the end (`RIDE_ALONG_ROWS`). Without look-ahead they
    leave at once."""
    rows = []  # (rows, live rows) of each verify
    verify = bass.decode.round.verify

    def spy(*a):
        alive = a[1].alive
        rows.append((len(a[1].lengths), len(a[1].lengths) if alive is None else int(alive.sum())))
        return verify(*a)

    monkeypatch.setattr(bass.decode.round, "verify", spy)
    params = SamplingParams(max_new_tokens=24, seed=2, temperature=1.0, stop=(" ran", "\t", "e"))
    kw = dict(k=8, params=params, method="regular")
    want = _engine(tiny_engine, "regular", False).generate(PROMPTS, **kw)
    assert len({n for n, _ in rows}) > 3  # without look-ahead the batch shrank row by row
    rows.clear()
    got = _engine(tiny_engine, "regular", True).generate(PROMPTS, **kw)
    assert got.token_ids == want.token_ids
    sizes = list(dict.fromkeys(n for n, _ in rows))
    assert sizes[0] == 16 and len(sizes) == 2 and sizes[1] <= 8  # compacted once, 16 -> at most 8 rows
    assert min(live for _, live in rows) <= 4  # ... and not again, though the live rows came to fit 4
