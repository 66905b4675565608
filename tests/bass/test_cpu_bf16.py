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

pytestmark = pytest.mark.slow  # real-width bf16 decoding on the CPU, hundreds of tokens

PROMPTS = ["def fib(n):\n", "for i in range(10):\n    print(", "class Stack:\n    def", "x = [1, 2, 3]\n"]



@pytest.mark.parametrize("family", ["llama", "qwen2", "gemma3"])
def test_greedy_bass_equals_regular_on_tiny_models(tiny_engine, family):
    """Verifies of every width keep regular decoding's tokens. (The tiny models' narrow shapes may round alike either
    way: the row tests fail without the two parts, and the real model's test below runs at real widths.)"""
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


def test_greedy_bass_equals_regular_on_a_real_model(real_models):
    """HumanEval/25 at k = 1 on Gemma 3 270M in bf16, the layer-skip drafter verifying 4 positions a round: with each
    bf16 projection a plain F.linear of however many rows, a CPU whose kernels round by row count (an AMX Xeon) parts
    BASS from regular greedy decoding within tens of tokens; with fixed-size calls it keeps every token. Asked for
    bf16 by name, so it runs on any CPU, also on one whose kernels round each row alone whatever the call
    (measured, `linear.rows_independent`: an AVX2 EPYC without bf16 instructions). The small model: the rounding
    is the kernels', at any real model's widths."""
    engine = real_models.get("gemma3-270m bf16",
                             lambda: Engine(EngineConfig(target="gemma3-270m", dtype="bfloat16", device="cpu")))
    prompt = load_humaneval()[25].prompt
    params = SamplingParams(max_new_tokens=48)
    regular = engine.generate(prompt, k=1, params=params, method="regular")
    assert len(regular.candidates[0].token_ids) > 40
    bass = engine.generate(prompt, k=1, params=params, method="bass", drafter="layer-skip")
    assert bass.candidates[0].token_ids == regular.candidates[0].token_ids
    assert max(bass.stats.draft_lengths) > 1
