"""Fixtures shared by the benchmark tests."""

import pytest
import torch

from bench.synthetic import TINY, build_pair


@pytest.fixture(scope="module")
def pair():
    """The acceptance-controlled random pair (`bench.synthetic`) at tiny shapes, almost agreeing (scale 1e-3)."""
    return build_pair(TINY, 1, dtype=torch.float32, seed=3, block_scale=1e-3)
