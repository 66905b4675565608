"""A draft's proposal replayed as one graph (`GraphedModel.chain`, `bass.drafters.chain.chained_proposal`): the CPU
twin runs the same static buffers, padding and queue eagerly, so these check its logic; the CUDA tests of the
engine (greedy BASS equals regular, the chi-square test with the shipped draft) check its graphs."""


import pytest
import torch

import bass.runtime.graphs
from bass.config import DraftLengthConfig, SamplingParams
from bass.drafters.chain import chain_widths
from bass.drafters.feature import FeatureDrafter
from bass.engine import Engine
from bass.engine.tuning import Tuning
from bass.runtime.graphs import ChainKey

pytestmark = pytest.mark.slow  # engine runs through faked graphs, every draft length

PROMPTS = ["def fib(n):\n", "for i in range(10):\n    print("]



def _twins(tiny_engine, seed: int, graphs: bool = False, feature: bool = True, **cfg) -> tuple[Engine, Engine]:
    """Two engines over the same models on the CUDA-graph path, proposals chained and step by step: CPU twins
    (the same buffers and padding, run eagerly), or with `graphs` on CUDA, captured graphs. The draft is a
    feature draft, or with feature=False a separate tiny model (`ModelDrafter`); `cfg` more of the config."""
    device = {"device": "cuda"} if graphs else {}
    engine = tiny_engine("llama", **({"feature_seed": seed} if feature else {"draft_seed": seed}), **device, **cfg)
    chained = Engine(engine.config, target=engine.target, draft=engine.draft)
    stepwise = Engine(engine.config, target=engine.target, draft=engine.draft,
                      tuning=Tuning(proposal_graphs=False))
    for e in (chained, stepwise):
        e.use_static_shapes(capture=graphs)
    return chained, stepwise


GRAPHS = [False, pytest.param(True, marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                             reason="CUDA graphs; the CPU twin is graphs=False"))]


@pytest.fixture
def chained_calls(monkeypatch) -> list[bool]:
    """Per proposal, whether it ran as one chain."""
    calls: list[bool] = []
    inner = FeatureDrafter._chained

    def spy(self, *args):
        out = inner(self, *args)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(FeatureDrafter, "_chained", spy)
    return calls


@pytest.fixture
def chain_replays(monkeypatch) -> list[bool]:
    """Per `GraphedModel.chain` call, whether a chain (its own or a wider batch's) ran the proposal."""
    ran: list[bool] = []
    chain = bass.runtime.graphs.GraphedModel.chain
    monkeypatch.setattr(bass.runtime.graphs.GraphedModel, "chain",
                        lambda self, *a, **kw: (out := chain(self, *a, **kw), ran.append(out is not None))[0])
    return ran


@pytest.mark.parametrize("params", [SamplingParams(temperature=0.0, max_new_tokens=20),
                                    SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=20, seed=3),
                                    SamplingParams(temperature=0.8, max_new_tokens=20, seed=4)],
                         ids=["greedy", "top-p", "dense-q"])
@pytest.mark.parametrize("graphs", GRAPHS, ids=["twin", "cuda"])
def test_a_chained_proposal_gives_the_tokens_of_one_made_step_by_step(tiny_engine, chained_calls, params, graphs):
    """6 sequences in a batch bucket of 8 (padding rows), drafts of 3 under a fixed length and of varying length
    under the paper's heuristic: once a request has queued its chains and they were built between requests,
    the same request again runs every proposal as a chain, token for token what step by step gives."""
    chained, stepwise = _twins(tiny_engine, seed=7, graphs=graphs)
    for policy in (DraftLengthConfig(policy="fixed", l0=3), DraftLengthConfig(policy="heuristic")):
        kw = dict(k=3, params=params, method="bass", drafter="model", draft_length=policy)
        chained.generate(PROMPTS, **kw)  # queues its chains; the next request's start builds them
        chained_calls.clear()
        got = chained.generate(PROMPTS, **kw)
        assert chained_calls and all(chained_calls)
        want = stepwise.generate(PROMPTS, **kw)
        assert got.token_ids == want.token_ids
        assert got.stats.proposed > 0


@pytest.mark.parametrize("params", [SamplingParams(temperature=0.0, max_new_tokens=20),
                                    SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=20, seed=3)],
                         ids=["greedy", "top-p"])
@pytest.mark.parametrize("graphs", GRAPHS, ids=["twin", "cuda"])
def test_a_draft_models_chained_proposal_gives_the_tokens_of_one_made_step_by_step(tiny_engine, chain_replays,
                                                                                   params, graphs):
    """The same for a separate draft model (`ModelDrafter`, the paper's setting, whose steps each replayed a
    graph of their own before): once its chains are built, every proposal of the same request runs as one,
    token for token what step by step gives."""
    chained, stepwise = _twins(tiny_engine, seed=1, graphs=graphs, feature=False)
    ran = chain_replays
    for policy in (DraftLengthConfig(policy="fixed", l0=3), DraftLengthConfig(policy="heuristic")):
        kw = dict(k=3, params=params, method="bass", drafter="model", draft_length=policy)
        chained.generate(PROMPTS, **kw)
        ran.clear()
        got = chained.generate(PROMPTS, **kw)
        assert ran and all(ran)
        assert got.token_ids == stepwise.generate(PROMPTS, **kw).token_ids
        assert got.stats.proposed > 0
    ran.clear()
    stepwise.generate(PROMPTS, **kw)
    assert not ran  # proposal_graphs=False: never asked for a chain


def test_chains_are_queued_then_built_between_requests(tiny_engine, chained_calls):
    """A request's chains run step by step and are queued; the engine builds them once the request is done
    (`capture_queued`), for both pools, and the same request then runs chained; the arena's storage moving
    drops them with the other graphs."""
    chained, _ = _twins(tiny_engine, seed=8)
    kw = dict(k=2, params=SamplingParams(temperature=0.0, max_new_tokens=12), method="bass", drafter="model",
              draft_length=DraftLengthConfig(policy="fixed", l0=2))
    fwd = chained._draft_fwd
    chained.generate(PROMPTS, **kw)
    assert chained_calls and not any(chained_calls)
    built = [key for key in fwd._graphs if isinstance(key, ChainKey)]
    assert not fwd._queue and {key.pool for key in built} == {("proposal", 0), ("proposal", 1)}
    assert all(key.batch == 4 for key in built)  # 2 prompts x 2 samples
    chained_calls.clear()
    chained.generate(PROMPTS, **kw)
    assert chained_calls and all(chained_calls)
    fwd.arena.version += 1  # as when the arena's storage is reallocated: every captured pointer is stale
    chained_calls.clear()
    chained.generate(PROMPTS, **kw)
    assert not any(chained_calls)


@pytest.mark.parametrize("graphs", GRAPHS, ids=["twin", "cuda"])
def test_consecutive_chained_proposals_alternate_pools(tiny_engine, chained_calls, monkeypatch, graphs):
    """The loop may read a round's proposal after launching the next (`bass.decode.pipeline._redo`): two chained
    proposals in a row never share a pool, so the second cannot overwrite the first's outputs."""
    chained, _ = _twins(tiny_engine, seed=9, graphs=graphs)
    pools: list[object] = []
    chain = bass.runtime.graphs.GraphedModel.chain

    def spy(self, *args, pool="chain", **kw):
        out = chain(self, *args, pool=pool, **kw)
        if out is not None:
            pools.append(pool)
        return out

    monkeypatch.setattr(bass.runtime.graphs.GraphedModel, "chain", spy)
    kw = dict(k=2, params=SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=16, seed=1), method="bass",
              drafter="model", draft_length=DraftLengthConfig(policy="fixed", l0=2))
    for _ in range(2):
        chained.generate(PROMPTS, **kw)
    assert len(pools) > 2
    assert all(a != b for a, b in zip(pools, pools[1:]))


def test_chain_zeroes_padding_rows_and_fills_shorter_inputs_in_front(tiny_engine):
    """The static inputs of a chain: a batch of 3 in a bucket of 4 (row 3 zeroed on every call, whatever an
    earlier call left there), inputs narrower than their buffer filled from the front."""
    chained, _ = _twins(tiny_engine, seed=10)
    chained.generate(PROMPTS, k=2, params=SamplingParams(temperature=0.0, max_new_tokens=4), method="bass",
                     drafter="model")  # the draft's arena: 4 rows
    fwd, cache = chained._draft_fwd, chained._draft_arena.base
    seen = []

    def run(padded, a, b):
        seen.append((a.clone(), b.clone()))
        return a

    args = ("probe", cache, (torch.full((4, 2), 5), torch.ones(4)), ((3,), ()))
    with torch.inference_mode():  # as the drafter calls it (the arena was made in inference mode)
        assert fwd.chain(run, *args) is None  # queued
        fwd.capture_queued()
        fwd.chain(run, *args)  # every row live
        fwd.chain(run, "probe", cache, (torch.full((3, 2), 7), torch.ones(3)), ((3,), ()))
    a, b = seen[-1]
    assert a[:3, :2].eq(7).all() and a[:3, 2].eq(0).all() and a[3].eq(0).all()
    assert b.tolist() == [1, 1, 1, 0]


def _chain_keys(engine) -> set[ChainKey]:
    return {key for key in engine._draft_fwd._graphs if isinstance(key, ChainKey)}


@pytest.mark.parametrize("feature", [True, False], ids=["feature-draft", "draft-model"])
def test_a_shrunk_batch_drafts_in_a_wider_batchs_chain(tiny_engine, chain_replays, feature):
    """After requests at k = 4 (batch 8) built their chains, a request at k = 1 (batch 2) runs every proposal in
    the batch-8 chains (its padding rows zeroed), token for token what step by step gives, and its own chains
    are built after it: the tail of a shrinking batch no longer drafts step by step."""
    chained, stepwise = _twins(tiny_engine, seed=11, feature=feature)
    ran = chain_replays
    params = SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=16, seed=5)
    kw = dict(params=params, method="bass", drafter="model", draft_length=DraftLengthConfig(policy="fixed", l0=3))
    for _ in range(2):  # the first queues batch 8's chains, the second's start builds them
        chained.generate(PROMPTS, k=4, **kw)
    wide = _chain_keys(chained)
    assert wide and {key.batch for key in wide} == {8}
    ran.clear()
    got = chained.generate(PROMPTS, k=1, **kw)
    assert ran and all(ran)  # never step by step, though no batch-2 chain existed
    assert got.token_ids == stepwise.generate(PROMPTS, k=1, **kw).token_ids
    own = {key for key in _chain_keys(chained) if key.batch == 2}
    assert own and {key._replace(batch=8) for key in own} <= wide  # built after the request, as borrowed


def test_two_chains_per_draft_length_whatever_the_first_step_feeds(tiny_engine, chained_calls):
    """A proposal's first step feeds the last verify's emitted tokens (L' + 1 of them) or, in a request's first
    round, the prompt's last entries: padded to one of `chain_widths`, every proposal of one length shares two
    chains per batch and pool (L + 1 columns and 10), so a policy that changes L meets no chain it did not
    meet at that L before."""
    chained, _ = _twins(tiny_engine, seed=12)
    params = SamplingParams(temperature=0.0, max_new_tokens=16)
    for L in (1, 5, 2):
        chained.generate(PROMPTS, k=2, params=params, method="bass", drafter="model",
                         draft_length=DraftLengthConfig(policy="fixed", l0=L))
    chained.generate(PROMPTS, k=2, params=params, method="bass", drafter="model",
                     draft_length=DraftLengthConfig(policy="heuristic", l0=2, l_limit=5))
    keys = _chain_keys(chained) | set(chained._draft_fwd._queue)
    by_length: dict[tuple, set] = {}
    for key in keys:
        by_length.setdefault((key.batch, key.name[-1], key.pool), set()).add(key.inputs[0][0][0])
    assert {length for _, length, _ in by_length} >= {1, 2, 5}
    assert all(widths == {length + 1, 10} for (_, length, _), widths in by_length.items()), by_length


@pytest.mark.parametrize("T, L, widths", [(4, 3, (4, 10)), (1, 3, (4, 10)), (7, 3, (10, 4)), (6, 5, (6, 10)),
                                          (12, 3, (12, 4)), (5, 9, (10, None)), (3, 15, (16, None)),
                                          (40, 3, (None, 4))])
def test_a_first_step_runs_at_its_lengths_steady_width_unless_the_round_before_was_longer(T, L, widths):
    """T pending tokens, then L drafts: L + 1 columns wide (a bucket's) whenever T fits, as every round of a
    fixed L, and 10 (or T's bucket) only after a longer round; the other width comes second, None where
    L + 1 already reaches 10 (the first is None past the widest bucket: step by step)."""
    assert chain_widths(T, L) == widths


def test_a_fixed_lengths_proposals_run_in_its_steady_chain(tiny_engine, monkeypatch):
    """Every chained proposal of L = 3 in a fixed L = 3 request, its first too, runs in the chain whose first
    step is L + 1 = 4 columns wide, never the padded 10 (with every first step padded so, fixed L = 3 read
    1–4 % slower on an H200); the 10-wide sibling is built beside it all the same. (Near max_new_tokens a sequence's
    length shrinks, and such a round follows a longer one.)"""
    chained, _ = _twins(tiny_engine, seed=13)
    names: list[tuple] = []
    chain = bass.runtime.graphs.GraphedModel.chain
    monkeypatch.setattr(bass.runtime.graphs.GraphedModel, "chain",
                        lambda self, run, name, *a, **kw: (names.append(name), chain(self, run, name, *a, **kw))[1])
    kw = dict(params=SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=16, seed=6), method="bass",
              drafter="model", draft_length=DraftLengthConfig(policy="fixed", l0=3))
    for _ in range(2):
        chained.generate(PROMPTS, k=2, **kw)
    assert sum(name[-1] == 3 for name in names) > len(names) / 2
    assert {name[-2] for name in names if name[-1] == 3} == {4}
    assert {key.inputs[0][0][0] for key in _chain_keys(chained) if key.name[-1] == 3} == {4, 10}
