"""`needs_autograd`, the rule by which a training step picks the torch forms over the fused kernels (no backward);
the step itself is checked in test_kernel_choice_slow.py."""

from __future__ import annotations

import torch

from bass.models.linear import needs_autograd


def test_needs_autograd_asks_grad_mode_and_every_tensor():
    frozen, trained = torch.ones(2), torch.ones(2, requires_grad=True)
    assert not needs_autograd(frozen, None)
    assert needs_autograd(frozen, None, trained)
    with torch.no_grad():
        assert not needs_autograd(trained)
    with torch.inference_mode():
        assert not needs_autograd(trained)
