"""The confidence stop (`bass.drafters.draft_chain`, `EngineConfig.draft_confidence`): a draft proposes d_i only
while the product of its top probabilities through step i stays at or above τ."""

import pytest
import torch

from bass.config import DraftLengthConfig, EngineConfig, SamplingParams
from bass.drafters import draft_chain
from bass.rules import DraftRule, TokenSubset, processing

PROMPTS = ["def fib(n):\n", "for i in range(10):\n    print(", "class Stack:\n    def", "x = [1, 2, 3]\n"]
GREEDY = SamplingParams(max_new_tokens=24)


@pytest.mark.parametrize("params", [SamplingParams(), SamplingParams(temperature=0.7),
                                    SamplingParams(temperature=0.7, top_p=0.9)], ids=["greedy", "dense", "top-p"])
@pytest.mark.parametrize("subset", [False, True])
def test_the_rule_gives_the_drafts_top_probability_last(params, subset):
    """With a stop the rule's outputs are its usual ones and then c = max softmax(logits) at temperature 1, over the
    draft's own columns; without one, the usual outputs alone."""
    torch.manual_seed(0)
    V = 50
    logits = torch.randn(3, 2, 20 if subset else V) * 3  # [B, T, V']: the last column is drawn from
    ids = TokenSubset(torch.arange(0, 40, 2)) if subset else None
    u = torch.rand(3)
    plain = DraftRule(processing(params), V, ids)(logits, u)
    stopped = DraftRule(processing(params), V, ids, stop_below=0.3)(logits, u)
    assert len(stopped) == len(plain) + 1
    for a, b in zip(plain, stopped, strict=False):
        assert torch.equal(a, b)
    assert torch.allclose(stopped[-1], torch.softmax(logits[:, -1].float(), -1).amax(-1))


def _scripted_step(confidences: torch.Tensor, fed: list[torch.Tensor]):
    """A draft step that draws token 10 + i at step i with confidences[:, i] ([B, L]), recording each step's q_len."""
    calls = {"i": 0}

    def step(tok, q_len, last_only, u_i, out):
        i = calls["i"]
        calls["i"] += 1
        fed.append(q_len.clone())
        return torch.full((tok.shape[0],), 10 + i), confidences[:, i]
    return step


def test_the_chain_stops_where_the_running_product_falls_below_the_stop():
    """Row by row: s_i = c_1 .. c_i; the proposal is the d_i with s_i >= τ, cut at the row's own length, and a
    row that stopped feeds nothing in later steps (q_len 0) while the others go on."""
    c = torch.tensor([[0.9, 0.9, 0.9, 0.9],    # s = .9 .81 .73 .66: all four
                      [0.9, 0.5, 1.0, 1.0],    # s = .9 .45: one (a later certain step does not bring it back)
                      [0.4, 1.0, 1.0, 1.0],    # s = .4: none
                      [1.0, 1.0, 1.0, 1.0]])   # certain, but its own length is 2
    fed: list[torch.Tensor] = []
    lens = torch.tensor([4, 4, 4, 2])
    first, counts = torch.zeros(4, 2, dtype=torch.long), torch.tensor([2, 1, 2, 1])
    p = draft_chain(_scripted_step(c, fed), first, counts, lens, torch.rand(4, 4), stop_below=0.6)
    assert p.lengths.tolist() == [4, 1, 0, 2]
    assert p.tokens[0].tolist() == [10, 11, 12, 13]
    assert [q.tolist() for q in fed] == [[2, 1, 2, 1], [1, 1, 0, 1], [1, 0, 0, 0], [1, 0, 0, 0]]
    fed.clear()
    p = draft_chain(_scripted_step(c, fed), first, counts, lens, torch.rand(4, 4))  # no stop: the lengths asked
    assert p.lengths.tolist() == [4, 4, 4, 2] and [q.tolist() for q in fed[1:]] == [[1, 1, 1, 1], [1, 1, 1, 0],
                                                                                    [1, 1, 1, 0]]


@pytest.mark.parametrize("drafter, engine_kw, stop", [("model", {"draft_seed": 1}, 0.5),
                                                      ("model", {"feature_seed": 7}, 0.05),
                                                      ("layer-skip", {"draft_seed": 1}, 0.5)],
                         ids=["draft-model", "feature", "layer-skip"])
def test_greedy_bass_with_the_stop_equals_regular(tiny_engine, drafter, engine_kw, stop):
    """Greedy BASS under a confidence stop emits regular decoding's tokens, proposing fewer drafts than without it,
    but some."""
    engine = tiny_engine("llama", **engine_kw, draft_confidence=stop)
    free = tiny_engine("llama", **engine_kw, draft_confidence=0.0)
    fixed = DraftLengthConfig(policy="fixed", l0=4)
    regular = engine.generate(PROMPTS, k=2, params=GREEDY, method="regular")
    got = engine.generate(PROMPTS, k=2, params=GREEDY, method="bass", drafter=drafter, draft_length=fixed)
    assert [c.token_ids for c in got.candidates] == [c.token_ids for c in regular.candidates]
    without = free.generate(PROMPTS, k=2, params=GREEDY, method="bass", drafter=drafter, draft_length=fixed)
    assert 0 < got.stats.proposed < without.stats.proposed


def test_the_engine_passes_its_setting_to_every_drafter_with_probabilities(tiny_engine):
    """Off by default; a setting applies to every drafter that has probabilities (n-gram lookup has none); a value
    outside [0, 1) is refused with what to write."""
    engine = tiny_engine("llama", draft_seed=1)
    assert {engine.new_drafter(d).stop_below for d in ("model", "layer-skip", "ngram")} == {0.0}
    set_ = tiny_engine("llama", draft_seed=1, draft_confidence=0.25)
    assert set_.new_drafter("model").stop_below == 0.25 and set_.new_drafter("layer-skip").stop_below == 0.25
    assert set_.new_drafter("ngram").stop_below == 0.0
    for bad in (1, 1.5, -0.1, "high", None):
        with pytest.raises(ValueError, match=r"draft_confidence must be a probability in \[0, 1\)"):
            EngineConfig(draft_confidence=bad)


def test_the_cli_passes_the_confidence_stop_to_the_engine(tmp_path, capsys):
    from bass.cli import engine_config, main, parser

    prompt = tmp_path / "prompt.txt"
    prompt.write_text("def f():\n")
    flags = ["generate", "--prompt-file", str(prompt)]
    assert engine_config(parser().parse_args([*flags, "--draft-confidence", "0.3"])).draft_confidence == 0.3
    assert engine_config(parser().parse_args(flags)).draft_confidence == 0.0
    assert main([*flags, "--draft-confidence", "2"]) == 2
    assert "draft_confidence must be a probability in [0, 1)" in capsys.readouterr().err
