"""Shortcuts in the shared blocks that must not change a value: the width-1 `last_rows` and the final norm
that takes the last block's residual add (`run_blocks(norm=)`)."""

from __future__ import annotations

import torch

from bass.models.layers import last_rows
from bass.models.llama import run_blocks
from bass.models.loader import build_random
from bass.runtime.attention import get_backend
from bench.synthetic import TINY


def test_last_rows_gathers_each_sequences_last_row_and_passes_width_one_through():
    x = torch.randn(3, 4, 8)
    q_len = torch.tensor([4, 1, 0])  # a full row, a one-token row, a padding row (clamps to row 0)
    torch.testing.assert_close(last_rows(x, q_len), x[[0, 1, 2], [3, 0, 0]][:, None], rtol=0, atol=0)
    narrow = x[:, :1]
    for q in (torch.tensor([1, 1, 1]), torch.tensor([1, 0, 1])):
        assert last_rows(narrow, q) is narrow  # no gather: row 0 is each sequence's last row


def test_run_blocks_norm_equals_the_norm_of_its_stream():
    model = build_random(TINY, seed=3)
    attn = get_backend("torch", torch.device("cpu"))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, TINY.hidden_size, generator=g)
    q_len = torch.tensor([5, 2])
    outs = []
    for norm in (None, model.norm):
        cache = model.new_cache(2, 8)
        out = run_blocks(model.layers, x, cache, q_len, attn, TINY, norm=norm)
        outs.append(out if norm is not None else model.norm(out))
        assert cache.suffix_len.tolist() == [5, 2]
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)
    assert outs[0].abs().sum() > 0
