"""The feature loss's vocabulary-sized terms, fused by `torch.compile` on CUDA.

Per position, the teacher gives the target's logits z over the whole vocabulary V and each unrolled draft step s
its logits over the proposal vocabulary S (V' = |S| ids). What the loss needs of them:

    teacher    log p_S = log_softmax(z_S)                       the KL's target: p restricted to S, renormalised
               (p̃, pos) = nucleus(z)                            the acceptance objective's p (`acceptance_loss`)
    step s     ℓ_s = KL(p_S ‖ q_s) − λ_α α(p̃, q_s at τ·T)       q_s = softmax(s), α = Σ min(p̃, q)

Written as torch ops, each line is a chain of passes over [rows, V'] float32 tensors (a cast, a softmax, a
product, a sum, and their backward), and for the nucleus over the teacher's [rows, V] logits: per window of 512
tokens 67 MB a pass over V' = 32,769, 311 MB over V = 151,936. On the H200 the acceptance
objective alone took 35 of a 154 ms step, eagerly. `torch.compile` fuses each into a few
kernels, forward and backward, reading the bf16 logits once; on the CPU (the tests, a laptop run) the same
functions run eagerly.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F

from bass.config import SamplingParams
from draft_training.acceptance_loss import acceptance, nucleus


def teacher_targets(t_logits: torch.Tensor, vocab: torch.Tensor | None, params: SamplingParams | None
                    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(log p_S [..., V'], p̃ [..., k], pos [..., k]) from the target's logits [..., V] over its whole vocabulary;
    `vocab`: S's target ids (None: every token); `params` None: no nucleus (p̃, pos None)."""
    t_logp = F.log_softmax((t_logits if vocab is None else t_logits[..., vocab]).float(), -1)
    if params is None:
        return t_logp, None, None
    p, pos = nucleus(t_logits, params, vocab)
    return t_logp, p, pos


def kl(t_logp: torch.Tensor, s_logp: torch.Tensor) -> torch.Tensor:
    """Mean over positions of KL(p ‖ q) = Σ_v p(v) (log p(v) − log q(v)), from log p and log q [..., V]."""
    return (t_logp.exp() * (t_logp - s_logp)).sum(-1).mean()


def step_loss(s_logits: torch.Tensor, t_logp: torch.Tensor, p: torch.Tensor | None, pos: torch.Tensor | None,
              temperature: float, acceptance_weight: float) -> torch.Tensor:
    """ℓ_s averaged over positions, for one draft step's logits [..., V'] (any float dtype, computed in float32):

        KL(p_S ‖ q) − λ_α α(p̃, q_τ) = Σ_v p_S(v) (log p_S(v) − log q(v)) − λ_α Σ_j min(p̃_j, q_τ(pos_j))

    with q = softmax(s), q_τ = softmax(s / `temperature`), λ_α = `acceptance_weight` (0: the KL alone)."""
    s = s_logits.float()
    value = kl(t_logp, F.log_softmax(s, -1))
    if acceptance_weight:
        value = value - acceptance_weight * acceptance(p, pos, s, temperature).mean()
    return value


@functools.cache
def _compiled(fn: Callable) -> Callable:
    return torch.compile(fn, dynamic=False)


def fused(fn: Callable, x: torch.Tensor, enabled: bool = True) -> Callable:
    """`fn` compiled (once per process, a graph per shape) where x is on CUDA and `enabled`; else `fn` itself."""
    return _compiled(fn) if enabled and x.is_cuda else fn


__all__ = ["fused", "kl", "step_loss", "teacher_targets"]
