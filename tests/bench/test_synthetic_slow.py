"""The acceptance-controlled random pair (bench/synthetic.py) in an engine: acceptance rises as the scale falls.
The slow part of test_synthetic.py."""

import pytest

from bass.config import EngineConfig, SamplingParams
from bass.engine import Engine
from bench.synthetic import (
    TINY,
    measure_alpha,
    random_prompt,
)

pytestmark = pytest.mark.slow  # an engine run per scale


@pytest.fixture(scope="module")
def engine(pair):
    return Engine(EngineConfig(target="synthetic", draft="synthetic-draft", drafter="model", device="cpu",
                               dtype="float32"), target=pair.target, draft=pair.draft)


def test_engine_acceptance_rises_as_scale_falls(pair, engine):
    prompt = random_prompt(TINY.vocab_size, 16, seed=1)
    params = SamplingParams(temperature=1.0, seed=2)
    alpha = {}
    for s in (1e-3, 3.0):
        pair.knob.set(s)
        alpha[s] = measure_alpha(engine, prompt, 4, 32, params)
    pair.knob.set(1e-3)
    assert alpha[1e-3] > 0.9 and alpha[3.0] < alpha[1e-3] - 0.2
