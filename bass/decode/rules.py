"""What a round computes from logits on the device, as rules a CUDA graph captures with the forward pass.

A verify pass is the target's forward followed by top-p processing and the accept / resample rule
(`bass.decode.sampling`: under top-p over each position's sorted candidates, `verify_top_p`); a draft step is
the draft's forward followed by sampling its proposal. Launched one by one from Python, those ~40 small
sampling kernels cost the host more than the GPU: on an H100, 1.4 ms
of launches per verify of a batch of 8 (2.6 ms at width 2) for 0.25 ms of kernels, and in a BASS round
the host is the critical path. So `GraphedModel(..., then=rule, args=...)` captures
`rule(forward(...), *args)` in one graph, and `run_then` does the same eagerly for a plain model.

A rule is a frozen dataclass: its fields are part of the key of the captured graph, so it holds only
what the computation depends on (`processing`: temperature, top-k, top-p), never a request's seed or
token limit. Its arguments are [B] or [B, T - 1, ...] tensors (T: the forward's width), its outputs
[B, ...]; it makes no host synchronisation and has no data-dependent shape.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from bass.config import SamplingParams
from bass.decode.sampling import draft_sample, process_logits_deferred, sample_from
from bass.decode.verify import VerifyResult, verify_logits, verify_top_p_fused


def processing(params: SamplingParams) -> SamplingParams:
    """params with everything but temperature / top-k / top-p at its default (a rule's key)."""
    return SamplingParams(temperature=params.temperature, top_k=params.top_k, top_p=params.top_p)


@dataclass(frozen=True)
class VerifyRule:
    """logits [B, T, V], drafts [B, T-1], draft_len [B], u_accept [B, T-1], u_sample [B], and for a
    sampled (not one-hot) draft its distributions: [B, T-1, V], or [B, T-1, K] masses at draft_ids [B, T-1, K]
    (a sparse q, as draft steps under top-p make) -> (accepted [B], next_token [B], decided [B],
    logits [B, T, V], packed [B, 3 + T], emitted [B, T], rejected [B]):
      - logits are passed through for `exact`;
      - packed = [accepted, next_token, draft_len, decided, drafts...] (int64), all the host reads of a
        round, in one copy;
      - emitted[b] = d_1 .. d_a, then next_token at column a (what the feature draft feeds next);
      - rejected = draft_len − accepted (int32), the rows the target's cache rolls back.
    The last three are the round's glue, computed here because in the graph they cost no launch.

    Under top-p the rule works over each position's most likely candidates (`bass.decode.verify.verify_logits`:
    `verify_top_p`; without top-p, over the vocabulary: `verify_sampled`). A row's result is exact when
    the candidates decided the top-p set at every position it used: positions 0 .. a_b (the accept tests
    before a_b passed and the test at a_b failed with exact p, so the exact rule accepts a_b too, and
    the token at a_b is sampled from exact p). Positions after a_b are never read. `decided` is False
    where that does not hold: the caller redoes those rows with `exact` after its synchronisation.
    """

    params: SamplingParams

    def __call__(self, logits: torch.Tensor, drafts: torch.Tensor, draft_len: torch.Tensor,
                 u_accept: torch.Tensor, u_sample: torch.Tensor, draft_probs: torch.Tensor | None = None,
                 draft_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        fused = verify_top_p_fused(logits, self.params, drafts, draft_len, draft_probs, u_accept, u_sample, draft_ids)
        if fused is not None:  # on CUDA under top-p: the same outputs from a few kernels
            accepted, next_token, decided, packed, out, rejected = fused
            return accepted, next_token, decided, logits, packed, out, rejected
        v, covered = verify_logits(logits, self.params, drafts, draft_len, draft_probs, u_accept, u_sample, draft_ids)
        if covered is None:
            decided = torch.ones_like(v.accepted, dtype=torch.bool)
        else:
            pos = torch.arange(covered.shape[1], device=covered.device)
            decided = (covered | (pos > v.accepted[:, None])).all(-1)  # [B]
        packed = torch.cat([v.accepted[:, None], v.next_token[:, None], draft_len[:, None].long(),
                            decided[:, None].long(), drafts.long()], 1)  # [B, 3 + T]
        rejected = (draft_len - v.accepted).to(torch.int32)
        return v.accepted, v.next_token, decided, logits, packed, emitted(drafts, v.accepted, v.next_token), rejected

    def exact(self, logits: torch.Tensor, drafts: torch.Tensor, draft_len: torch.Tensor, u_accept: torch.Tensor,
              u_sample: torch.Tensor, draft_probs: torch.Tensor | None = None, draft_ids: torch.Tensor | None = None
              ) -> VerifyResult:
        """The same verdict with top-p by a full sort of the vocabulary, for every row (the caller uses it
        where `__call__` left rows undecided; on decided rows the two agree)."""
        return verify_logits(logits, self.params, drafts, draft_len, draft_probs, u_accept, u_sample, draft_ids,
                             full_sort=True)[0]


def emitted(drafts: torch.Tensor, accepted: torch.Tensor, next_token: torch.Tensor) -> torch.Tensor:
    """[B, L+1]: row b emits its columns 0 .. accepted[b], the accepted drafts and then the next token."""
    out = torch.cat([drafts, next_token[:, None]], 1)
    return out.scatter_(1, accepted[:, None].long(), next_token[:, None])


@dataclass(frozen=True, eq=False)
class TokenSubset:
    """A draft's reduced vocabulary: the target ids its logits' columns stand for ([V'] long, ascending, on
    the draft's device). Compared by identity, so a rule keyed on it hashes in O(1); a draft owns one."""

    ids: torch.Tensor


@dataclass(frozen=True)
class DraftRule:
    """One draft step's sample: logits [B, T, V'] (the last column is used), u [B] -> (token [B], q [B, V]),
    q the distribution the token was drawn from; greedy: (argmax [B],) alone. Under top-p, q is sparse:
    (token, q [B, K], q_ids [B, K]), `draft_proposal`'s q over the draft's K most likely tokens as (mass,
    target id) pairs (`draft_sample`: on CUDA a few launches of `kernels`); without top-p, the tempered
    softmax over the vocabulary.

    V' may differ from the target's vocabulary V (a family's models pad their embeddings differently):
    extra columns are dropped, missing ones get probability 0, so q is over the target's vocabulary.

    With a `subset`, column j of the logits is target token subset.ids[j] (a draft that proposes from the
    V' tokens code uses most: its head and its sampling cost V'/V of the full ones). The token is drawn from
    q' over those V' columns, and q is q' in the target's ids (its pairs' ids mapped, or q' scattered into V
    zeros): the target's rule sees exactly the distribution the token came from, so sampling stays lossless;
    a token outside the subset has q = 0 and is reached only by the verify's residual max(0, p − q).
    """

    params: SamplingParams
    vocab: int
    subset: TokenSubset | None = None

    def __call__(self, logits: torch.Tensor, u: torch.Tensor, out: tuple[torch.Tensor, ...] | None = None
                 ) -> tuple[torch.Tensor, ...]:
        """The step's outputs, written into `out` (a proposal's columns, `bass.drafters.chain.draft_chain`) where the
        kernel that makes them can; the caller copies any output that is not its `out` tensor."""
        logits = logits[:, -1]
        ids = None if self.subset is None else self.subset.ids  # column -> target id
        if ids is None and self.vocab < logits.shape[-1]:
            logits = logits[:, :self.vocab]  # columns past the target's vocabulary are dropped
        return self._draw(logits, ids, u, out)

    def _draw(self, logits: torch.Tensor, ids: torch.Tensor | None, u: torch.Tensor,
              out: tuple[torch.Tensor, ...] | None) -> tuple[torch.Tensor, ...]:
        """The token and the q it was drawn from (greedy: the token alone) from logits [B, V']."""
        if self.params.greedy:  # the argmax: what sampling its one-hot would give, without the vocabulary scan
            token = logits.argmax(-1)
            return (token if ids is None else ids[token],)
        if self.params.top_p < 1.0:  # pairs of target ids: missing columns need no padding
            return draft_sample(logits, self.params, u, ids, out)
        q = process_logits_deferred(logits, self.params)[0]  # [B, V'] the tempered softmax (no top-p)
        token = sample_from(q, u)
        if ids is None:  # a dense q over the target's vocabulary: missing columns get 0
            return token, q if q.shape[-1] == self.vocab else torch.nn.functional.pad(q, (0, self.vocab - q.shape[-1]))
        return ids[token], q.new_zeros(q.shape[0], self.vocab).index_copy_(1, ids, q)


@functools.lru_cache(maxsize=64)
def verify_rule(params: SamplingParams) -> VerifyRule:
    """The verify rule of a request sampled with `params` (one object per sampling setting)."""
    return VerifyRule(processing(params))


@functools.lru_cache(maxsize=64)
def draft_rule(params: SamplingParams, vocab: int, subset: TokenSubset | None = None) -> DraftRule:
    """The draft-step rule of a request sampled with `params`, over the target's `vocab` tokens, from a
    draft whose logits cover `subset` (None: the whole vocabulary). Cached: every proposal asks for it."""
    return DraftRule(processing(params), vocab, subset)


def run_then(forward: Callable, then: Callable, args: tuple, *fargs, **fkwargs) -> tuple[torch.Tensor, ...]:
    """then(forward(*fargs, **fkwargs), *args): in the forward's CUDA graph when `forward` captures graphs
    (`GraphedModel`), eagerly otherwise. Outputs may be the graph's static buffers: valid until the next
    call of the same forward with the same shapes, so a caller that keeps them copies them."""
    if getattr(forward, "captures_then", False):
        return forward(*fargs, then=then, args=args, **fkwargs)
    return then(forward(*fargs, **fkwargs), *args)

