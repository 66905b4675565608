"""The cost-aware draft-length policy inside the engine, end to end on the tiny models: greedy output
unchanged, a useless drafter settles at plain decoding, a good free one drafts long, the policy's account
in the result, and the costs an engine remembers across requests."""

import json
import time

import pytest
import torch

from bass.config import DraftLengthConfig, SamplingParams
from bass.draft_length import START_ROUNDS
from bass.drafters import Drafter, Proposal

PROMPTS = ["def fib(n):\n", "for i in range(10):\n    print(", "class Stack:\n    def", "x = [1, 2, 3]\n"]


class ScriptDrafter(Drafter):
    """Proposes the true continuation (good) or certainly-wrong tokens (useless), costing `delay_s` a step."""

    name = "script"

    def __init__(self, scripts, good, delay_s=0.0):
        self.scripts, self.good, self.delay_s = scripts, good, delay_s
        self.rows = list(range(len(scripts)))

    def prefill(self, prompts, samples, capacity, features=None):
        self.prompt_lens = [len(p) for p in prompts for _ in range(samples)]

    def propose(self, histories, lengths, params, u, target_cache):
        time.sleep(self.delay_s * max(lengths))
        device = target_cache.suffix_len.device  # the engine's (CUDA when the tests run on a GPU)
        tokens = torch.zeros(len(histories), max(lengths), dtype=torch.long)
        for b, (h, n) in enumerate(zip(histories, lengths)):
            row = self.rows[b]
            if self.good:
                done = len(h) - self.prompt_lens[row]
                cont = self.scripts[row][done:done + n]
                tokens[b, :len(cont)] = torch.tensor(cont, dtype=torch.long)
            else:
                want = self.scripts[row][len(h) - self.prompt_lens[row]:][:n]
                tokens[b, :len(want)] = (torch.tensor(want, dtype=torch.long) + 1) % 300  # never the target's
        return Proposal(tokens.to(device), torch.tensor(lengths, device=device), None)

    def select(self, rows):
        self.rows = [self.rows[r] for r in rows]


def test_cost_policy_greedy_equals_regular_and_regular_is_untouched(tiny_engine):
    engine = tiny_engine("llama", draft_seed=1)
    params = SamplingParams(max_new_tokens=24)
    regular = engine.generate(PROMPTS, k=2, params=params, method="regular")
    assert regular.stats.policy["rounds"] == 0 and regular.stats.policy["round_ms"] == {}
    assert set(regular.stats.draft_lengths) == {0}
    for drafter in ("ngram", "layer-skip", "model"):
        bass = engine.generate(PROMPTS, k=2, params=params, method="bass", drafter=drafter,
                               draft_length=DraftLengthConfig(policy="cost"))
        assert [c.token_ids for c in bass.candidates] == [c.token_ids for c in regular.candidates], drafter
        assert bass.stats.policy["rounds"] == len(bass.stats.draft_lengths)


def _engine(tiny_engine, static: bool):
    """The tiny engine (on CUDA, with its graphs); with `static`, one over the same models on the CUDA-graph path's
    persistent arena and padded shapes, run eagerly (`use_static_shapes(capture=False)`): the CPU twin of how
    `bass.graphs` builds a request's shapes, which decides which rounds the policy may time. On CUDA too, so that
    the two cases never run the same engine twice."""
    from bass.engine import Engine

    engine = tiny_engine("llama")
    if not static:
        return engine
    twin = Engine(engine.config, target=engine.target, draft=engine.draft)
    twin.use_static_shapes(capture=False)
    return twin


@pytest.mark.parametrize("static", [False, True], ids=["plain", "static-shapes"])
def test_useless_costly_drafter_settles_at_plain_decoding(tiny_engine, static):
    engine = _engine(tiny_engine, static)
    params = SamplingParams(max_new_tokens=120)
    regular = engine.generate(PROMPTS[:2], k=2, params=params, method="regular")
    scripts = [list(c.token_ids) + [0] * 40 for c in regular.candidates]
    bass = engine.generate(PROMPTS[:2], k=2, params=params, method="bass",
                           drafter=ScriptDrafter(scripts, good=False, delay_s=0.02))
    assert [c.token_ids for c in bass.candidates] == [c.token_ids for c in regular.candidates]
    lengths = bass.stats.draft_lengths
    drafting = sum(n > 0 for n in lengths)
    # the probes at L=2, then only rare explorations (a little slack: this CPU is shared, timings are noisy)
    assert drafting <= 2 + 2 * (len(lengths) // 64 + 1)
    assert bass.stats.rounds <= regular.stats.rounds + 4 * drafting  # ~ regular decoding's steps
    assert bass.stats.policy["L"] == 0


class _Ticks:
    """A clock for `bass.round_costs` alone that advances 1 ms per reading: every round, drafting or not,
    costs the policy the same, as a free drafter's rounds would on an idle device. (The wall clock of a
    loaded shared CPU once timed both of the L = 2 probes at 4x a plain step, and drafting looked hopeless.)"""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1e-3
        return self.now


@pytest.mark.parametrize("static", [False, True], ids=["plain", "static-shapes"])
def test_good_free_drafter_drafts_long(tiny_engine, monkeypatch, static):
    monkeypatch.setattr("bass.round_costs.time", _Ticks())
    engine = _engine(tiny_engine, static)
    params = SamplingParams(max_new_tokens=120)
    regular = engine.generate(PROMPTS[:2], k=2, params=params, method="regular")
    scripts = [list(c.token_ids) for c in regular.candidates]
    bass = engine.generate(PROMPTS[:2], k=2, params=params, method="bass", drafter=ScriptDrafter(scripts, True))
    assert [c.token_ids for c in bass.candidates] == [c.token_ids for c in regular.candidates]
    # a third of regular decoding's rounds, and the request's plain warm-up rounds (`bass.draft_length`, Timing)
    assert bass.stats.rounds < regular.stats.rounds / 3 + START_ROUNDS
    assert bass.stats.policy["alpha_pooled"] > 0.8


def test_the_result_says_what_the_policy_measured(tiny_engine):
    """BatchStats.policy: the policy's own account of the request (JSON-ready); none for single-sequence runs."""
    engine = tiny_engine("llama", draft_seed=1)
    params = SamplingParams(max_new_tokens=12)
    bass = engine.generate(PROMPTS[:1], k=2, params=params, method="bass", drafter="ngram")
    assert bass.stats.policy["policy"] == "cost" and bass.stats.policy["rounds"] == len(bass.stats.draft_lengths)
    assert json.loads(json.dumps(bass.stats.to_dict()))["policy"]["rounds"] == bass.stats.policy["rounds"]
    fixed = engine.generate(PROMPTS[:1], k=2, params=params, method="bass", drafter="ngram",
                            draft_length=DraftLengthConfig(policy="fixed", l0=3))
    assert fixed.stats.policy == {"policy": "fixed", "L": 3}
    single = engine.generate(PROMPTS[:1], k=2, params=params, method="single", drafter="ngram")
    assert single.stats.policy is None


@pytest.mark.parametrize("look_ahead", [False, True], ids=["in-order", "look-ahead"])  # CUDA's default: look-ahead
def test_an_engine_remembers_costs_per_kind_of_request(tiny_engine, monkeypatch, look_ahead):
    # a clock of ticks, not the wall: on a loaded CI machine a wall-clock probe may look hopeless and not be
    # repeated, and then the memory holds one drafting sample, not the two `known` asks for. 24 tokens: with
    # look-ahead (CUDA's default) a probe of L = 2 runs a warm-up round before its two timed ones, which 12
    # tokens left no room for after plain decoding's probe (the look-ahead case failed so, on the CPU too)
    monkeypatch.setattr("bass.round_costs.time", _Ticks())
    engine = tiny_engine("llama", draft_seed=1, look_ahead=look_ahead)
    params = SamplingParams(max_new_tokens=24)
    engine._policy_memory.clear()
    for _ in range(2):
        engine.generate(PROMPTS[:1], k=2, params=params, method="bass", drafter="ngram")
    assert len(engine._policy_memory) == 1  # the second request used the first one's memory
    (memory,) = engine._policy_memory.values()
    assert memory.costs.known(2) and memory.alpha != DraftLengthConfig().alpha_prior
    engine.generate(PROMPTS[:1], k=2, params=SamplingParams(max_new_tokens=24, temperature=0.8), method="bass",
                    drafter="ngram")  # sampled: another kind (other rules, other costs)
    engine.generate(PROMPTS[:1], k=2, params=params, method="bass", drafter="ngram",
                    draft_length=DraftLengthConfig(remember=False))
    engine.generate(PROMPTS[:1], k=2, params=params, method="regular")
    assert len(engine._policy_memory) == 2
    engine.forget_measurements()  # weights changed in place (the synthetic benchmark): start measuring anew
    engine.generate(PROMPTS[:1], k=2, params=params, method="bass", drafter="ngram")
    (fresh,) = engine._policy_memory.values()
    # measured anew: plain decoding and the L = 2 probe timed twice each, as on the first request
    assert fresh is not memory and fresh.costs.known(2)
