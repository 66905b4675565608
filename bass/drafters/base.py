"""The drafter interface: what the round loop asks of any source of draft tokens, and the proposal it gets.

A drafter that `follows()` can make its next proposal from what is on the device alone (the verify's
emitted tokens and accepted counts, handed over by `verified`), so the round loop may launch a drafting
round before it reads the round before (`bass.decode.pipeline`, look-ahead): the feature draft, once its
first round is committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from bass.config import SamplingParams
from bass.runtime.cache import KVCache


@dataclass
class Proposal:
    tokens: torch.Tensor  # [B, L] long; entries past lengths[b] are padding
    lengths: torch.Tensor  # [B] long, 0 .. L
    probs: torch.Tensor | None  # [B, L, V] processed draft distributions; None = one-hot (deterministic)
    prob_ids: torch.Tensor | None = None  # [B, L, K]: probs is [B, L, K], q's masses at these ids (a sparse q)

    @classmethod
    def empty(cls, batch: int, device: torch.device | str) -> Proposal:
        return cls(torch.zeros(batch, 0, dtype=torch.long, device=device),
                   torch.zeros(batch, dtype=torch.long, device=device), None)


class Drafter:
    """Interface. `histories[b]` is prompt + generated tokens of live sequence b, the last one emitted
    but not yet in the target cache."""

    name = "base"
    proposes = True
    reads_verify = False  # `verified` needs the verify's emitted tokens and accepted counts on the device
    temperature_scale = 1.0  # a sampling drafter draws at this multiple of the request's temperature

    def proposal_params(self, params: SamplingParams) -> SamplingParams:
        """The processing a drafter that samples draws its proposals under: the request's, at
        `temperature_scale` times its temperature. Speculative sampling is exact for any draft distribution
        q as long as the verify uses the q each token was drawn from (`bass.decode.sampling.draft_proposal`), so the
        scale changes acceptance only: a draft trained with forward KL is flatter than its target where it
        agrees with it, and a scale below 1 moves q's mass to where the target's is."""
        if self.temperature_scale == 1.0 or params.greedy:
            return params
        return replace(params, temperature=params.temperature * self.temperature_scale)

    def prefill(self, prompts: Sequence[Sequence[int]], samples: int, capacity: int,
                features: torch.Tensor | None = None) -> None:
        """Start a request of len(prompts) prompts x `samples` sequences (after the target's prefill, whose
        final normed hidden states of the prompts are `features` [G, T, H])."""

    def admit(self, prompts: Sequence[Sequence[int]], samples: int, capacity: int, features: torch.Tensor | None,
              slots: list[int], histories: Sequence[Sequence[int]]) -> None:
        """Like `prefill`, for a request joining the running batch between rounds, with nothing in flight: its
        len(prompts) x `samples` rows come after the running ones, its prompts at prefix slots `slots` (those
        of the target cache); `histories` are the new rows' (prompt + first token)."""
        self.prefill(prompts, samples, capacity, features)

    def propose(self, histories: Sequence[Sequence[int]] | None, lengths: Sequence[int], params: SamplingParams,
                u: torch.Tensor, target_cache: KVCache) -> Proposal:
        """Up to lengths[b] draft tokens per sequence. u [B, max(lengths)] uniforms for sampling.
        histories is None when the round before is not read yet (only asked of a drafter that `follows`)."""
        raise NotImplementedError

    def follows(self) -> bool:
        """Whether the next proposal can be made before the verify launched last is read (histories=None)."""
        return False

    def verified(self, emitted: torch.Tensor | None, accepted: torch.Tensor | None) -> None:
        """A verify pass was just launched (its results are not read yet): sequence b emits
        emitted[b, :accepted[b] + 1] ([B, Lp + 1] and [B], device; None unless `reads_verify`). They are
        views of the verify graph's buffers, valid until that graph slot's next replay: the next proposal
        must read them before the verify after it. The loop commits rounds in the order it launches them,
        and may launch the next one before it commits this one."""

    def withdraw(self) -> None:
        """The verify launched last is withdrawn (a redo launches it again, with `verified` again)."""

    def commit(self, histories: Sequence[Sequence[int]]) -> None:
        """The oldest uncommitted verify pass is read; histories[b] is sequence b's prompt + generated
        tokens now."""

    def select(self, rows: Sequence[int]) -> None:
        """Only the sequences at `rows` stay in the batch (in that order)."""


class NoDrafter(Drafter):
    name = "none"
    proposes = False
    has_probabilities = False

    def propose(self, histories, lengths, params, u, target_cache):
        return Proposal.empty(len(histories), target_cache.suffix_len.device)
