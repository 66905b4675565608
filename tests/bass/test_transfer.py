"""Copies between host and device (`bass.runtime.transfer`): the pinned staging ring never hands out a slice a
queued copy still reads, the helpers build the tensors they promise, and a host read returns what it was made of."""

import pytest
import torch

from bass.runtime.transfer import HostRead, PinnedRing, ints_to_device, padded_ids


def _batches(n: int) -> list[list[int]]:
    """n lists of 1 .. 4 distinct ints (sizes that cross the ring's halves at odd places)."""
    return [list(range(100 * i, 100 * i + 1 + i % 4)) for i in range(n)]


def test_ring_slices_alternate_halves_on_the_cpu_twin():
    ring = PinnedRing(torch.device("cpu"), size=8, pinned=False)
    halves = []
    for values in _batches(12):
        assert ring.copy(values).tolist() == values
        start = ring.head - len(values)
        halves.append(start // 4)
        assert (start + len(values) - 1) // 4 == start // 4  # a copy never straddles the halves
    assert sum(a != b for a, b in zip(halves, halves[1:])) >= 3  # the writes went round the ring


def test_ring_refuses_what_does_not_fit_half_of_it():
    ring = PinnedRing(torch.device("cpu"), size=8, pinned=False)
    with pytest.raises(ValueError, match="do not fit half"):
        ring.copy(list(range(5)))
    with pytest.raises(ValueError, match="at least 2"):
        PinnedRing(torch.device("cpu"), size=1, pinned=False)


def test_helpers_build_the_promised_tensors():
    assert ints_to_device([3, 1, 2], "cpu").tolist() == [3, 1, 2]
    ids = padded_ids([[1, 2, 3], [4], []], device="cpu")
    assert ids.dtype == torch.long and ids.tolist() == [[1, 2, 3], [4, 0, 0], [0, 0, 0]]
    assert padded_ids([[5]], width=3).tolist() == [[5, 0, 0]]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory and streams; CPU twin above")
def test_ring_never_overwrites_a_copy_still_queued():
    """With the stream held up by a long kernel, the copies queue behind it; writing half 0 again after
    filling half 1 must wait for them, or the first copies would deliver the later values."""
    device = torch.device("cuda", torch.cuda.current_device())
    ring = PinnedRing(device, size=16)
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)  # ~0.1 s of device time ahead of every copy
    batches = _batches(40)
    outs = [ring.copy(values) for values in batches]
    torch.cuda.synchronize()
    assert [o.tolist() for o in outs] == batches
    assert ints_to_device([7, 8], device).tolist() == [7, 8]
    assert padded_ids([[1, 2], [3]], device=device).tolist() == [[1, 2], [3, 0]]


def test_a_host_read_holds_the_values_it_was_made_of():
    values = torch.tensor([5, 6, 7])
    read = HostRead(values)
    values.add_(10)  # work after the read changes nothing it returns
    assert read.tolist() == [5, 6, 7]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory and streams; CPU twin above")
def test_a_host_read_waits_for_its_copy_not_for_the_work_queued_after_it():
    device = torch.device("cuda", torch.cuda.current_device())
    values = torch.tensor([5, 6, 7], device=device)
    read = HostRead(values)
    torch.cuda._sleep(200_000_000)  # ~0.1 s of device time queued after the copy
    values.add_(10)
    after = torch.cuda.Event()
    after.record()
    assert read.tolist() == [5, 6, 7]
    assert not after.query()  # the read came back while the work after it was still running
    torch.cuda.synchronize()
    assert values.tolist() == [15, 16, 17]
