"""The per-sequence random streams (`bass.decode.streams`) against SplitMix64 written plainly, and their
independence from the batch and from how draws are chunked."""

import torch
from scipy.stats import chisquare

from bass.decode.streams import SequenceRNG, stream_key, stream_uniforms


def test_sequence_rng_streams_do_not_depend_on_the_batch():
    keys = [(0, 0), (0, 1), (1, 0)]
    a = SequenceRNG(7, keys)
    b = SequenceRNG(7, keys)
    both = a.uniforms(keys, 5, "cpu")
    alone = b.uniforms([(0, 1)], 5, "cpu")
    assert torch.equal(both[1], alone[0])
    assert not torch.equal(both[0], both[1])


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


def test_sequence_rng_draws_in_any_chunks_are_one_stream():
    keys = [(0, 0), (0, 1), (2, 5)]
    whole = SequenceRNG(11, keys).uniforms(keys, 300, "cpu")
    rng = SequenceRNG(11, keys, block=64)  # chunks cross block edges; the batch shrinks midway
    parts = [rng.uniforms(keys, n, "cpu") for n in (1, 9, 70, 20)]
    assert torch.equal(torch.cat(parts, 1), whole[:, :100])
    assert torch.equal(rng.uniforms(keys[1:], 50, "cpu"), whole[1:, 100:150])
    rng.uniforms(keys[2:], 5, "cpu")  # now the rows stand at different draws
    assert torch.equal(rng.uniforms(keys, 3, "cpu"), torch.stack([whole[0, 100:103], whole[1, 150:153],
                                                                  whole[2, 155:158]]))


def test_sequence_rng_is_uniform_and_reproducible():
    keys = [(g, s) for g in range(4) for s in range(8)]
    u = SequenceRNG(3, keys).uniforms(keys, 4000, "cpu")
    assert torch.equal(u, SequenceRNG(3, keys).uniforms(keys, 4000, "cpu"))
    assert not torch.equal(u, SequenceRNG(4, keys).uniforms(keys, 4000, "cpu"))
    assert u.min() >= 0 and u.max() < 1
    counts = torch.bincount((u.flatten() * 20).long(), minlength=20)
    assert chisquare(counts.numpy()).pvalue > 1e-3
    pairs = torch.bincount((u[:, :-1] * 8).long().flatten() * 8 + (u[:, 1:] * 8).long().flatten(), minlength=64)
    assert chisquare(pairs.numpy()).pvalue > 1e-3  # consecutive draws independent
    across = torch.bincount((u[:-1] * 8).long().flatten() * 8 + (u[1:] * 8).long().flatten(), minlength=64)
    assert chisquare(across.numpy()).pvalue > 1e-3  # neighbouring sequences independent
