"""bf16 on the CPU: greedy BASS keeps regular greedy decoding's tokens.

oneDNN picks a bf16 kernel by the number of rows and kernels round differently, so a verify's rows and a plain step's
would part by whole bf16 steps; fixed-size projection calls (`bass.models.linear`, where this CPU's kernels need them)
and one query row at a time in the reference attention (`kernels.reference`) make each row's result its own. The row
tests of both parts are in tests/bass/models/test_cpu_linear.py and tests/kernels/test_attention_backends.py; these
check the whole engine.
"""

import pytest
import torch

from bass import Engine, EngineConfig, SamplingParams
from bass.config import DraftLengthConfig
from sandbox.humaneval import load_humaneval

pytestmark = pytest.mark.slow  # the embedded 1.5B model in bfloat16

PROMPTS = ["def fib(n):\n", "for i in range(10):\n    print(", "class Stack:\n    def", "x = [1, 2, 3]\n"]



@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3"])
def test_greedy_bass_equals_regular_on_tiny_models(tiny_engine, family):
    """Verifies of every width keep regular decoding's tokens. (The tiny models' narrow shapes may round alike either
    way: the row tests, and the embedded target's test below, fail without the two parts.)"""
    engine = tiny_engine(family, draft_seed=1, dtype="bfloat16", device="cpu")
    assert engine.dtype == torch.bfloat16
    params = SamplingParams(max_new_tokens=32)
    regular = engine.generate(PROMPTS, k=2, params=params, method="regular")
    for drafter in ("model", "ngram"):
        paper = engine.generate(PROMPTS, k=2, params=params, method="bass", drafter=drafter,
                                draft_length=DraftLengthConfig(policy="heuristic"))
        assert paper.token_ids == regular.token_ids, drafter
        assert max(paper.stats.draft_lengths) > 1  # verifies several rows wide did run
    single = engine.generate(PROMPTS[:2], k=1, params=params, method="single", drafter="model")
    assert single.token_ids == [regular.token_ids[0], regular.token_ids[2]]


@pytest.mark.embedded
def test_greedy_bass_equals_regular_on_the_embedded_model():
    """HumanEval/25 at k = 1: with each bf16 projection a plain F.linear of however many rows, BASS parted from
    regular greedy decoding at its 40th token on an AMX Xeon (the fifty-ninth pass); with fixed-size calls it keeps
    every token. Asked for bf16 by name, so it runs on any CPU: on one whose kernels round each row alone whatever
    the call (measured, `linear.rows_independent`: an AVX2 EPYC without bf16 instructions) without the fixed calls,
    which there made this test take 409 s (its file, four tests, now 84 s)."""
    engine = Engine(EngineConfig(target="embedded", dtype="bfloat16", device="cpu"))
    prompt = load_humaneval()[25].prompt
    params = SamplingParams(max_new_tokens=48)
    regular = engine.generate(prompt, k=1, params=params, method="regular")
    assert len(regular.candidates[0].token_ids) > 40
    bass = engine.generate(prompt, k=1, params=params, method="bass")  # the shipped draft
    assert bass.candidates[0].token_ids == regular.candidates[0].token_ids
    assert max(bass.stats.draft_lengths) > 1
