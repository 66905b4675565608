"""The per-sequence random streams (`bass.decode.streams`) against SplitMix64 written plainly, and their
independence from the batch, from where each row stands in its stream and from how draws are chunked."""

import torch
from scipy.stats import chisquare

from bass.decode.streams import draw, row_keys, stream_key, stream_uniforms


def test_a_rows_draws_do_not_depend_on_the_batch():
    keys = [(0, 0), (0, 1), (1, 0)]
    streams = row_keys(7, keys)
    both = draw(streams, [0, 0, 0], 5, "cpu")
    alone = draw(streams[1:2], [0], 5, "cpu")
    assert torch.equal(both[1], alone[0])
    assert not torch.equal(both[0], both[1])
    assert row_keys(7, keys[1:2]) == streams[1:2]  # a key is the seed's and the sequence's, nothing else


def _splitmix64(state: int):
    """SplitMix64 as published (Vigna), in plain Python integers."""
    mask = (1 << 64) - 1
    while True:
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        yield z ^ (z >> 31)


def test_stream_uniforms_are_splitmix64():
    gen = _splitmix64(1234567)
    want = [next(gen) for _ in range(40)]
    assert want[:3] == [6457827717110365317, 3203168211198807973, 9817491932198370423]  # published vector
    got = stream_uniforms(torch.tensor([1234567 - 2**64 * (1234567 >= 2**63)]), 0, 40)
    assert torch.equal(got[0], torch.tensor([(z >> 40) / 2**24 for z in want]))
    assert torch.equal(stream_uniforms(torch.tensor([1234567]), 7, 5)[0], got[0, 7:12])  # any draw, directly
    key = stream_key(5, 2, 3)  # a key with the top bit set or not: the signed int64 view wraps the same way
    gen = _splitmix64(key)
    want = torch.tensor([(next(gen) >> 40) / 2**24 for _ in range(6)])
    assert torch.equal(stream_uniforms(torch.tensor([key - 2**64 * (key >= 2**63)]), 0, 6)[0], want)


def test_draws_in_any_chunks_and_from_any_positions_are_one_stream():
    streams = row_keys(11, [(0, 0), (0, 1), (2, 5)])
    whole = draw(streams, [0, 0, 0], 300, "cpu")
    drawn, parts = [0, 0, 0], []
    for n in (1, 9, 70, 20):
        parts.append(draw(streams, drawn, n, "cpu"))
        drawn = [d + n for d in drawn]
    assert torch.equal(torch.cat(parts, 1), whole[:, :100])
    # rows at different points of their streams, in one call (each from its own position)
    assert torch.equal(draw(streams, [100, 150, 155], 3, "cpu"), torch.stack([whole[0, 100:103], whole[1, 150:153],
                                                                           whole[2, 155:158]]))
    keys = torch.tensor(streams)  # the batch's keys already on the device: the same draws
    assert torch.equal(draw(streams, [4, 0, 9], 6, "cpu", keys), draw(streams, [4, 0, 9], 6, "cpu"))


def test_streams_are_uniform_and_reproducible():
    keys = [(g, s) for g in range(4) for s in range(8)]
    u = draw(row_keys(3, keys), [0] * len(keys), 4000, "cpu")
    assert torch.equal(u, draw(row_keys(3, keys), [0] * len(keys), 4000, "cpu"))
    assert not torch.equal(u, draw(row_keys(4, keys), [0] * len(keys), 4000, "cpu"))
    assert u.min() >= 0 and u.max() < 1
    counts = torch.bincount((u.flatten() * 20).long(), minlength=20)
    assert chisquare(counts.numpy()).pvalue > 1e-3
    pairs = torch.bincount((u[:, :-1] * 8).long().flatten() * 8 + (u[:, 1:] * 8).long().flatten(), minlength=64)
    assert chisquare(pairs.numpy()).pvalue > 1e-3  # consecutive draws independent
    across = torch.bincount((u[:-1] * 8).long().flatten() * 8 + (u[1:] * 8).long().flatten(), minlength=64)
    assert chisquare(across.numpy()).pvalue > 1e-3  # neighbouring sequences independent
