"""The feature draft's drafter: a `FeatureDraft` fed the target's own hidden states, round after round.

Its bookkeeping is the draft cache's: which entries (f_t, x_{t+1}) it holds with the target's true f_t,
which are its own guesses, and what the next proposal must feed first. That next proposal needs nothing
the host has not read (the last verify's emitted tokens and features are on the device), which is what
lets the round loop launch drafting rounds ahead (`bass.decode.pipeline`, look-ahead).
"""

from __future__ import annotations

import functools
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bass.decode.rules import DraftRule, TokenSubset, draft_rule, run_then
from bass.drafters.base import Drafter, Proposal
from bass.drafters.chain import chained_proposal, draft_chain
from bass.runtime.cache import CacheArena, KVCache
from bass.runtime.prefill_graphs import PrefillGraphs, prefill
from bass.runtime.transfer import ints_to_device, padded_ids, to_device
from kernels import capturable

CATCH_UP = 16  # backlog entries that make a round without drafts feed them (FeatureDrafter._catch_up)
_SUBSETS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # draft model -> its TokenSubset


def _subset(draft: torch.nn.Module) -> TokenSubset | None:
    """The draft's reduced vocabulary as a rule's key: one object per draft model, whatever the drafter. A
    drafter serves one request, and a new key per request would capture the draft's graphs anew each time."""
    if draft.vocab is None:
        return None
    if draft not in _SUBSETS:
        _SUBSETS[draft] = TokenSubset(draft.vocab)
    return _SUBSETS[draft]


def _proposal(draft: torch.nn.Module, rule: DraftRule, attn: Callable, cache: KVCache, tokens: torch.Tensor,
              counts: torch.Tensor, features: torch.Tensor, lens: torch.Tensor, u: torch.Tensor) -> Proposal:
    """A whole proposal of the feature draft (`draft_chain`: the pending entries, then L steps on its own
    predictions) on the model itself, each step followed by its rule: what `FeatureDrafter._chained` captures.
    tokens [B, T], counts [B], features [B, T, H], lens [B], u [B, L]."""
    fed = {"features": features}

    def step(tok, q_len, last_only, u_i, out):
        drawn = rule(draft(tok, cache, q_len, attn, features=fed["features"], last_only=last_only), u_i, out)
        fed["features"] = draft.hidden  # [B, 1, H]: the next step's input
        return drawn

    return draft_chain(step, tokens, counts, lens, u)


@dataclass
class _Verify:
    """A verify pass as the feature draft sees it (device tensors; `hidden` may be a graph's buffer, valid
    until the next verify in the same graph slot, by which time the next proposal has read it)."""

    hidden: torch.Tensor  # [B, W, H] the target's features of its W = Lp + 1 columns
    emitted: torch.Tensor  # [B, W] tokens emitted after each column (through accepted[b])
    accepted: torch.Tensor  # [B]
    drafted: bool  # this drafter proposed its drafts
    followed: bool = False  # the next proposal fed its entries from `emitted` and `hidden`
    known_before: list[int] | None = None  # `known` before its commit (None: not committed)

    def joined(self, n: int) -> _Verify:
        """This verify with n rows after its own for rows that joined since: no token accepted, nothing emitted."""
        B, W, H = self.hidden.shape
        return _Verify(torch.cat([self.hidden, self.hidden.new_zeros(n, W, H)]),
                       torch.cat([self.emitted, self.emitted.new_zeros(n, W)]),
                       torch.cat([self.accepted, self.accepted.new_full((n,), -1)]), self.drafted, self.followed,
                       None if self.known_before is None else self.known_before + [1] * n)


def _stack_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[Ba + Bb, C, H]: a's rows then b's, the narrower padded with zeros to the wider's C."""
    C = max(a.shape[1], b.shape[1])
    return torch.cat([torch.nn.functional.pad(t, (0, 0, 0, C - t.shape[1])) for t in (a, b)])


class FeatureDrafter(Drafter):
    """Drafts with a `FeatureDraft`, fed the target's hidden states f_t (module docstring of
    `bass.models.feature_draft`).

    Per sequence, entries 0 .. fed-1 of the draft cache hold (f_t, x_{t+1}) with the target's true f_t.
    The target's features live in `feats` [B, C, H]: feats[b, j] = f_{first_b + j}, first_b being the
    prompt's last position; the first `known_b` are real. `commit` writes each verify pass's features in
    place; those are the target's `hidden` when the verify was launched (`verified`): a round launched
    ahead (in another graph slot) must not be read in their place.

    A proposal first feeds the entries not fed yet, then drafts on its own predictions f̂, which the next
    proposal drops (truncating the cache to `fed`). The entries to feed are a backlog the host knows (those
    before the last verify pass, left by rounds without drafts) followed by that verify's columns 0 .. a_b:
    (f of column i, the token emitted after it), which are on the device. So a proposal needs nothing the
    host has not read (`follows`), and the loop may launch it before it reads that verify; `fed` then grows
    by a_b + 1 when the verify is committed.

    A round without drafts (L = 0: every row at its token limit) costs one scatter here, and when the backlog reaches
    CATCH_UP entries, one draft forward that feeds it (`_catch_up`), so that a proposal's first step stays
    narrow (a captured graph's width) and its cost is not a long run's backlog. Both happen where the
    host's knowledge is the same with and without look-ahead (the backlog stops before the last verify),
    so look-ahead changes no computation. The verify's columns i = 0 .. T-1 go to feats[b, known_b + i]
    whatever was accepted, because column i holds f of position first_b + known_b + i exactly when it was
    accepted, and the columns after the accepted ones lie past the new known_b, where the next verify
    writes before anything reads them.
    """

    name = "model"
    reads_verify = True  # the next proposal feeds the last verify's emitted tokens from the device

    def __init__(self, draft: torch.nn.Module, target: torch.nn.Module, attn: Callable, *,
                 forward: Callable | None = None, arena: CacheArena | None = None,
                 prefills: PrefillGraphs | None = None, chained: bool = True):
        """`chained`: make a proposal as one graph where `forward` can (`_chained`); `prefills`: the prefill's
        CUDA graphs (`bass.runtime.prefill_graphs`)."""
        self.draft, self.target, self.attn = draft, target, attn  # target: what the loop calls (reads .hidden)
        self.forward = forward or draft  # a GraphedModel on CUDA
        self.prefills = prefills
        self.chained = chained
        self._pool = 0  # the chain pool the last proposal asked for (`_chained`)
        self.subset = _subset(draft)  # a reduced proposal vocabulary, or None
        self.arena = arena or CacheArena(persistent=False)
        self.cache: KVCache | None = None
        self.fed: list[int] = []
        self.prompt_entries: list[int] = []  # entries of each sequence in the shared prompt prefix
        self.feats: torch.Tensor | None = None  # [B, C, H]; column C-1 is scratch for writes past the end
        self.known: list[int] = []
        self._histories: list[Sequence[int]] = []  # as of the last commit: the backlog's tokens
        self._launched: deque[_Verify] = deque()  # launched, uncommitted verify passes, oldest first
        self._last: _Verify | None = None  # the verify launched last, committed or not
        self._proposed = False  # a proposal was made since the last verify
        self._joined = False  # rows joined since the last commit (`admit`)

    @torch.inference_mode()
    def prefill(self, prompts, samples, capacity, features=None):
        self.cache, self.feats = None, None
        self.fed, self.known, self.prompt_entries = [], [], []
        self._launched.clear()
        self._last, self._proposed, self._histories = None, False, []
        self.admit(prompts, samples, capacity, features, list(range(len(prompts))), ())

    @torch.inference_mode()
    def admit(self, prompts, samples, capacity, features, slots, histories):
        """Rows joining after rounds ran feed their backlog alone at the next proposal (their entry of the last
        verify counts no accepted token), and that proposal is not launched ahead (`follows`)."""
        if features is None:
            raise ValueError("the feature draft needs the target's hidden states of the prompts")
        device = features.device
        lens = [len(p) for p in prompts]
        T = max(lens) - 1  # the prompt's last feature waits for the first sampled token
        if T > 0:  # entries (f_t, x_{t+1}) of the prompt
            _, cache, _ = prefill(self.draft, self.prefills, [p[1:] for p in prompts], self.attn, features[:, :T])
        else:
            cache = self.draft.new_cache(len(prompts), 1)
        # (the host knows every length here: nothing waits for the device, whose prefills run on)
        self.cache = self.arena.admit(self.cache, cache, samples, capacity, max(T, 0), slots)
        n = len(lens) * samples
        entries = [m - 1 for m in lens for _ in range(samples)]
        self.prompt_entries, self.fed = self.prompt_entries + entries, self.fed + entries
        self.known = self.known + [1] * n
        last = features[torch.arange(len(lens), device=device), ints_to_device(lens, device) - 1]  # [G, H]
        # a generated position's suffix row is at most `capacity`, so f of it is at j <= capacity + 1
        feats = torch.zeros(n, capacity + 3, features.shape[-1], dtype=features.dtype, device=device)
        feats[:, 0] = last.repeat_interleave(samples, 0)
        self.feats = feats if self.feats is None else _stack_rows(self.feats, feats)
        if self._histories:
            self._histories += [list(h) for h in histories]
        if self._last is not None:
            self._last = self._last.joined(n)
            self._joined = True

    def follows(self) -> bool:
        if self._last is None or self._joined:
            return False
        if self._histories:  # a backlog's tokens come from a commit
            return True
        # before the first commit: only if there is no backlog, as after a first round that drafted (it fed the
        # prompt's last entry), so that the second round too is launched before the first is read
        known = self.known if self._last.known_before is None else self._last.known_before
        return self.fed == self._entries(known)

    def _entries(self, known: list[int]) -> list[int]:
        """The cache entries of each sequence once `known` features are fed (prompt entries included)."""
        return [k + p for k, p in zip(known, self.prompt_entries, strict=True)]

    def _backlog(self, histories, known: list[int], width: int | None = None):
        """The entries fed .. known-1 of each sequence (the host's): tokens [B, width], counts n [B] (host
        list) and true features [B, width, H]; width defaults to the longest backlog."""
        start = [f - p for f, p in zip(self.fed, self.prompt_entries, strict=True)]  # first unfed column
        n = [k - s for k, s in zip(known, start, strict=True)]
        width = max(n) if width is None else width
        device = self.feats.device
        tokens = padded_ids([list(h[f + 1:f + 1 + c]) for h, f, c in zip(histories, self.fed, n, strict=True)],
                            width, device)
        cols = (ints_to_device(start, device)[:, None] + torch.arange(width, device=device)).clamp(
            max=self.feats.shape[1] - 1)  # [B, width]
        return tokens, n, self.feats.gather(1, cols[:, :, None].expand(-1, -1, self.feats.shape[2]))

    def _drop_guesses(self) -> None:
        """Truncate the cache to its `fed` true entries (a proposal's f̂ entries go)."""
        self.cache.truncate(ints_to_device([f - p for f, p in zip(self.fed, self.prompt_entries, strict=True)],
                                           self.cache.suffix_len.device))

    def _pending(self, histories) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What a proposal feeds first: tokens [B, T], counts [B], features [B, T, H] (class docstring)."""
        prev = self._last
        if prev is None:  # the first round: the prompt's last feature and the first sampled token
            tokens, n, features = self._backlog(histories, self.known)
            return tokens, ints_to_device(n, tokens.device), features
        known = self.known if prev.known_before is None else prev.known_before
        n_host = [k + p - f for k, p, f in zip(known, self.prompt_entries, self.fed, strict=True)]
        if max(n_host) == 0:  # no backlog (as after a round that drafted): only the verify's columns
            return prev.emitted, prev.accepted + 1, prev.hidden
        B, W = prev.emitted.shape
        T = max(n_host) + W
        tokens, _, features = self._backlog(histories or self._histories, known, T)
        device = tokens.device
        n = ints_to_device(n_host, device)[:, None]  # [B, 1]
        cols = torch.arange(T, device=device)
        host = cols < n  # [B, T]: the backlog, then the verify's columns from column n_b on
        idx = (cols - n).clamp(0, W - 1)
        tokens = torch.where(host, tokens, prev.emitted.gather(1, idx))
        hidden = prev.hidden.gather(1, idx[:, :, None].expand(-1, -1, prev.hidden.shape[2]))
        return tokens, n[:, 0] + prev.accepted + 1, torch.where(host[:, :, None], features, hidden.to(features.dtype))

    @torch.inference_mode()
    def propose(self, histories, lengths, params, u, target_cache):
        prev = self._last
        self._drop_guesses()
        tokens, counts, features = self._pending(histories)
        if prev is None or prev.known_before is not None:  # all it feeds is known now
            self.fed = self._entries(self.known)
        if prev is not None:  # its entries are fed now; if it is unread, its commit counts them
            prev.followed = True
        rule = draft_rule(self.proposal_params(params), self.target.config.vocab_size, self.subset)
        self._proposed = True
        lens = ints_to_device(lengths, tokens.device)  # [B]: one host copy, for the chain or the steps
        chained = self._chained(rule, tokens, counts, features, lens, u)
        if chained is not None:
            return chained
        fed = {"features": features}

        def step(tok, q_len, last_only, u_i, out):  # a step's graph keeps its own outputs: draft_chain copies
            drawn = run_then(self.forward, rule, (u_i,), tok, self.cache, q_len, self.attn, features=fed["features"],
                             last_only=last_only)
            # f̂ of each sequence's last entry [B, 1, H]: every step after the first feeds its own width-1
            # output, and the first is last_only, so no gather runs between steps
            fed["features"] = self.forward.hidden
            return drawn

        return draft_chain(step, tokens, counts, lens, u)

    def _chained(self, rule: DraftRule, tokens: torch.Tensor, counts: torch.Tensor, features: torch.Tensor,
                 lens: torch.Tensor, u: torch.Tensor) -> Proposal | None:
        """The proposal as one CUDA graph (`chained_proposal`), or None where the draft's forward has none for it
        or a wider batch yet (it runs step by step, and the graph is captured after the request). The loop may
        read a round's proposal after it launched the next one (`bass.decode.pipeline._redo`), so consecutive
        proposals alternate two pools, never overwriting the one before."""
        if not self.chained or not capturable(self.attn):  # (a backend reading lengths on the host)
            return None
        L, H = u.shape[1], features.shape[-1]
        self._pool = 1 - self._pool  # on every call, chained or not: a request queues the chains of both pools
        return chained_proposal(self.forward, functools.partial(_proposal, self.draft, rule, self.attn),
                                lambda Tb: ((rule, self.attn, Tb, L), ((Tb,), (), (Tb, H), (), (L,))), self.cache,
                                (tokens, counts, features, lens, u), pool=self._pool)

    @torch.inference_mode()  # a catch-up runs the draft, as `propose` and `commit` may
    def verified(self, emitted, accepted):
        if not self._proposed and self._last is not None:  # a round without drafts
            prev = self._last
            known = self.known if prev.known_before is None else prev.known_before
            if max(k + p - f for k, p, f in zip(known, self.prompt_entries, self.fed, strict=True)) >= CATCH_UP:
                self._catch_up(known)
        self._last = _Verify(self.target.hidden, emitted, accepted, self._proposed)
        self._launched.append(self._last)
        self._proposed = False

    def withdraw(self):
        self._launched.pop()
        self._last = self._launched[-1] if self._launched else None

    @torch.inference_mode()
    def commit(self, histories):
        rec = self._launched.popleft()
        rec.known_before, self._histories = self.known, list(histories)
        self._joined = False
        B, T, H = rec.hidden.shape
        C = self.feats.shape[1]
        rows = np.minimum(np.asarray(self.known)[:, None] + np.arange(T), C - 1) + np.arange(B)[:, None] * C  # [B, T]
        self.feats.view(B * C, H).index_copy_(0, to_device(torch.from_numpy(rows.ravel()), rec.hidden.device),
                                              rec.hidden.reshape(B * T, H).to(self.feats.dtype))
        # every token but the last emitted one has its true feature now
        self.known = [len(h) - 1 - p for h, p in zip(histories, self.prompt_entries, strict=True)]
        if rec.followed:  # the next proposal fed this verify's entries (and its own guesses follow them)
            self.fed = self._entries(self.known)
        elif rec.drafted:
            self._drop_guesses()

    def _catch_up(self, known: list[int]) -> None:
        """Feed the backlog (entries fed .. known-1) now: a run of rounds without drafts made it CATCH_UP
        long (class docstring). Any guesses in the cache go first: the round that made them may be unread."""
        self._drop_guesses()
        tokens, n, features = self._backlog(self._histories, known)
        self.forward(tokens, self.cache, ints_to_device(n, tokens.device), self.attn, features=features,
                     last_only=True)
        self.fed = self._entries(known)

    def select(self, rows):
        rows = list(rows)
        index = ints_to_device(rows, self.feats.device)
        self.cache = self.cache.compact(rows)
        self.feats = self.feats[index]
        self.fed, self.known, self.prompt_entries = ([v[r] for r in rows] for v in (self.fed, self.known,
                                                                                     self.prompt_entries))
        self._histories = [self._histories[r] for r in rows] if self._histories else []  # none before a commit
        if self._last is not None:  # the next proposal feeds from it
            last = self._last
            before = None if last.known_before is None else [last.known_before[r] for r in rows]
            self._last = _Verify(last.hidden[index], last.emitted[index], last.accepted[index], last.drafted,
                                 last.followed, before)
