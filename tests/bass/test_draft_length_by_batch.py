"""The draft length that follows the batch (`bass.decode.draft_length`, "auto" with a cost table): switching L
between rounds, to 0 and back, changes no greedy token and keeps sampling exact; the warm-up reserves, captures
and times what the table holds (`bass.engine.warmup`, its CPU twin on static shapes run eagerly). On the CPU, in
float32, where greedy equality is exact (in bf16 on a GPU a row can round differently at another width)."""

import threading

import pytest
import torch
import transformers
from scheduling import PROMPTS, held_after
from test_lossless import PROMPT, _chi_square_pvalue

import bass.engine.batch
from bass.config import DraftLengthConfig, SamplingParams
from bass.decode.draft_length import L_MAX, CostTable, DraftLengthPolicy
from bass.decode.sampling import process_logits

pytestmark = pytest.mark.slow

# up to 4 rows drafting costs nothing, so the longest draft pays; from 8 rows each draft token costs ten plain
# steps, so the plain step does: L falls to 0 while requests that joined run, and comes back once they left
FORCING = CostTable({**{(b, L): 1e-3 for b in (1, 2, 4) for L in range(L_MAX + 1)},
                     **{(8, L): 1e-3 * (1 + 10 * L) for L in range(L_MAX + 1)}})


def _engine(tiny_engine, drafter: str):
    seed = dict(feature_seed=3) if drafter == "feature" else dict(draft_seed=1)
    engine = tiny_engine("llama", device="cpu", **seed)
    engine.runner.cost_table = FORCING
    return engine


@pytest.mark.parametrize("drafter", ["model", "feature", "ngram", "layer-skip"])
def test_greedy_tokens_are_regular_decodings_while_l_follows_the_batch(tiny_engine, monkeypatch, joins, drafter):
    engine = _engine(tiny_engine, drafter)
    name = "model" if drafter == "feature" else drafter
    try:
        kw = [dict(prompts=p, k=k, params=SamplingParams(max_new_tokens=n), drafter=name)
              for p, k, n in zip(PROMPTS, (3, 2, 4), (40, 8, 10), strict=True)]
        regular = [engine.generate(**(x | {"method": "regular", "drafter": None})) for x in kw]
        joins.clear()
        held_after(monkeypatch, 2, waiting=2)  # the first request runs alone until the others are in line
        together = _joined_after_a_round(engine, kw[0], kw[1:])
    finally:
        engine.runner.cost_table = None
    assert joins[0] == 0 and joins[1] == 3  # the later requests joined the first one's 3 running rows
    for a, b in zip(regular, together, strict=True):
        assert b.token_ids == a.token_ids
    lengths = together[0].stats.draft_lengths
    assert 0 in lengths and lengths[0] > 0 and lengths[-1] > 0  # L fell to 0 while they ran, and came back
    assert together[0].stats.policy["policy"] == "table"


def _joined_after_a_round(engine, first: dict, others: list[dict]) -> list:
    """Results of `first` and of `others`, these submitted from their own threads once `first` has run a round."""
    ran, results = threading.Event(), {}

    def run_first():
        for event in engine.stream(**first):
            ran.set() if event.kind == "round" and event.round >= 1 else None
            results[0] = event.result or results.get(0)

    threads = [threading.Thread(target=run_first)]
    threads[0].start()
    assert ran.wait(60)
    for i, kw in enumerate(others):
        threads.append(threading.Thread(target=lambda i=i, kw=kw: results.__setitem__(i + 1, engine.generate(**kw))))
        threads[-1].start()
    for thread in threads:
        thread.join(120)
    return [results[i] for i in range(len(others) + 1)]


def _expected_third_token(folder, tokenizer, params) -> torch.Tensor:
    """P(y3 = v) = Σ_{y1, y2} p(y1) p(y2 | y1) p(v | y1, y2) under the processed target, from transformers' forward
    in float64 (top-p keeps each support small)."""
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64).eval()
    ids = torch.tensor([tokenizer.encode(PROMPT)])
    with torch.no_grad():
        p1 = process_logits(hf(ids).logits[0, -1], params).double()
        y1 = torch.nonzero(p1 > 0).squeeze(1)
        one = torch.cat([ids.expand(len(y1), -1), y1[:, None]], 1)
        p2 = process_logits(hf(one).logits[:, -1], params).double()  # [Y1, V]
        i, y2 = torch.nonzero(p2 > 0, as_tuple=True)
        two = torch.cat([one[i], y2[:, None]], 1)
        p3 = process_logits(hf(two).logits[:, -1], params).double()  # [pairs, V]
    return (p1[y1][i] * p2[i, y2]) @ p3


class PlainThenDraft(DraftLengthPolicy):
    """A plain step first (L = 0), then drafts of 2: the third token is the first the rule decides, right after a
    round without drafts."""

    decides_ahead = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.asked = 0

    def lengths(self, live):
        self.asked += 1
        return [0 if s.finished or self.asked == 1 else 2 for s in live]


@pytest.mark.parametrize("drafter", ["model", "feature"])
def test_the_first_token_drafted_after_a_plain_step_follows_the_target(tiny_engine, tiny_dir, monkeypatch, drafter):
    monkeypatch.setattr(bass.engine.batch, "DraftLengthPolicy", PlainThenDraft)
    seed = dict(feature_seed=7) if drafter == "feature" else dict(draft_seed=7)
    engine = tiny_engine("llama", head_scale=6.0, device="cpu", **seed)
    params = SamplingParams(temperature=0.7, top_p=0.9)
    expected = _expected_third_token(tiny_dir("llama", 0, 6.0), engine.tokenizer, params)
    samples, proposed, accepted = [], 0, 0
    for seed in range(50):
        p = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=5, seed=seed)
        r = engine.generate(PROMPT, k=64, params=p, drafter="model")
        assert r.stats.draft_lengths[:2] == (0, 2)
        samples += [c.token_ids[2] for c in r.candidates if len(c.token_ids) > 2]
        proposed, accepted = proposed + r.stats.proposed, accepted + r.stats.accepted
    assert proposed > 0 and accepted < proposed  # the rule was exercised: some drafts rejected
    assert _chi_square_pvalue(torch.tensor(samples), expected) > 1e-3


def test_a_seed_reproduces_a_lone_request_under_the_table(tiny_engine):
    engine = _engine(tiny_engine, "feature")
    try:
        p = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=24, seed=11)
        a, b = (engine.generate(PROMPTS[0], k=3, params=p) for _ in range(2))
        other = engine.generate(PROMPTS[0], k=3, params=SamplingParams(temperature=0.8, top_p=0.95,
                                                                       max_new_tokens=24, seed=12))
    finally:
        engine.runner.cost_table = None
    assert a.token_ids == b.token_ids and a.token_ids != other.token_ids
    assert a.stats.draft_lengths == b.stats.draft_lengths and set(a.stats.draft_lengths) - {0, 1, 2, 3} == {4}


def test_the_warm_up_reserves_the_storage_and_times_every_bucket_and_length(tiny_dir, fake_graphs):
    """The CPU twin: static shapes with faked graph captures; after it, a request of any bucket up to the
    engine's rows meets no shape that was not captured, and its draft length is the table's."""
    import bass.runtime.graphs as graphs
    from bass.config import EngineConfig
    from bass.engine import Engine

    engine = Engine(EngineConfig(target=str(tiny_dir("llama")), draft=str(tiny_dir("llama", 1)), max_batch_rows=4,
                                 device="cpu"))
    engine.use_static_shapes(capture=True)  # (faked captures: `fake_graphs`)
    engine.warm_up()
    table = engine.runner.cost_table
    assert set(table.round_s) == {(b, L) for b in (1, 2, 4) for L in range(L_MAX + 1)}
    base = engine.arena.base
    assert base.batch >= 4 and base.prefix_k.shape[1] >= 4 and base.prefix_k.shape[2] >= 1024 \
        and base.capacity >= 514
    before = graphs.decoding_captures()
    for k in (1, 2, 3, 4):
        r = engine.generate(PROMPTS[1], k=k, params=SamplingParams(max_new_tokens=20, temperature=0.8, top_p=0.95))
        assert r.stats.policy["policy"] == "table"
        assert set(r.stats.draft_lengths) <= set(range(L_MAX + 1))
    assert graphs.decoding_captures() == before  # every shape these met was captured at load
    regular = engine.generate(PROMPTS[1], k=3, params=SamplingParams(max_new_tokens=20))
    greedy = engine.generate(PROMPTS[1], k=3, params=SamplingParams(max_new_tokens=20), drafter="model")
    assert greedy.token_ids == regular.token_ids
    assert DraftLengthConfig().policy == "auto"
