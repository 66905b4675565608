"""bench/profile/steps.py: its whole plumbing on tiny CPU models (the figures only mean something on a GPU)."""

from __future__ import annotations


def test_interval_union():
    from bench.profile.rounds import interval_union

    assert interval_union([]) == 0
    assert interval_union([(0, 2), (5, 6)]) == 3  # disjoint: the sum
    assert interval_union([(5, 9), (0, 4), (3, 6)]) == 9  # overlapping, any order: [0, 9] once
    assert interval_union([(0, 10), (2, 3), (4, 5)]) == 10  # nested ones add nothing
    assert interval_union([(0, 1), (1, 2), (3, 3), (4, 2)]) == 2  # touching ones join; empty / reversed are 0


def test_device_busy_counts_kernels_in_the_decode_window_once():
    """The GPU path, on stand-in events: overlapping kernels count once, work outside the decode window is
    clipped off, the device-side span of a record_function (it covers gaps) and host ops are not device work."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    from bench.profile.rounds import DECODE_MARK, device_busy

    def ev(name, start, end, device=DeviceType.CUDA, kind="kernel", annotation=False):
        return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end), device_type=device,
                               activity_type=kind, is_user_annotation=annotation, self_cpu_time_total=end - start)

    events = [ev(DECODE_MARK, 100, 200, DeviceType.CPU, "user_annotation", True),
              ev(DECODE_MARK, 90, 210, kind="gpu_user_annotation", annotation=True),
              ev("prefill_gemm", 50, 110),  # 10 of it in the window
              ev("gemm", 120, 150), ev("softmax", 140, 160),  # overlapping: [120, 160] = 40
              ev("Memcpy DtoH", 170, 175, kind="gpu_memcpy"), ev("cuda_sync", 180, 199, kind="cuda_sync"),
              ev("aten::mm", 120, 130, DeviceType.CPU, "cpu_op")]
    busy, report = device_busy(events, rounds=2)
    assert busy == 10 + 40 + 5
    assert "gemm" in report and "aten::mm" in report and "cuda_sync" not in report
    for e in events:  # a torch without activity_type: every device event but the annotations
        del e.activity_type
    assert device_busy(events, rounds=2)[0] == 10 + 40 + 5 + 19
    assert device_busy([e for e in events if e.device_type == DeviceType.CPU], rounds=2)[0] is None  # no GPU
    assert device_busy(events[2:], rounds=2)[0] is None  # no decode window: nothing measured
