"""Where draft tokens come from. The round loop sees only the `Drafter` interface.

- `NgramDrafter`: prompt lookup. The continuation of the most recent earlier occurrence of the last n
  tokens (n from ngram_max down to ngram_min) in prompt + generated text; nothing if none matches.
  Deterministic, so its draft distribution is one-hot.
- `ModelDrafter`: a separate small model with its own KV cache (the paper's setting).
- `FeatureDrafter`: a feature draft (`bass.models.feature_draft`, EAGLE-style) that reads the target's own
  hidden states of the verified positions, and its own predicted ones while it drafts.
- `LayerSkipDrafter`: the target's first N layers + final norm + LM head (self-speculative). It reads
  and writes the target's own cache for those layers, so no KV is recomputed or stored twice.
- `NoDrafter`: proposes nothing, which turns the round loop into regular decoding.

Cache bookkeeping for model drafts: after a round the draft cache holds the accepted tokens but never
the last emitted one (correction or bonus), and when all L drafts were accepted it also lacks d_L. The
next round therefore starts by feeding the 1 or 2 pending tokens of each sequence (a ragged step).

A drafter that `follows()` can make its next proposal from what is on the device alone (the verify's
emitted tokens and accepted counts, handed over by `verified`), so the round loop may launch a drafting
round before it reads the round before (`bass.speculative`, look-ahead): the feature draft after a round it
drafted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bass.cache import CacheArena, KVCache
from bass.config import SamplingParams
from bass.models.feature_draft import FeatureDraft
from bass.models.layers import last_rows
from bass.rules import draft_rule, run_then
from bass.sequences import ints_to_device, padded_ids


@dataclass
class Proposal:
    tokens: torch.Tensor  # [B, L] long; entries past lengths[b] are padding
    lengths: torch.Tensor  # [B] long, 0 .. L
    probs: torch.Tensor | None  # [B, L, V] processed draft distributions; None = one-hot (deterministic)

    @classmethod
    def empty(cls, batch: int, device: torch.device | str) -> Proposal:
        return cls(torch.zeros(batch, 0, dtype=torch.long, device=device),
                   torch.zeros(batch, dtype=torch.long, device=device), None)


class Drafter:
    """Interface. `histories[b]` is prompt + generated tokens of live sequence b, the last one emitted
    but not yet in the target cache."""

    name = "base"
    proposes = True

    def prefill(self, prompts: Sequence[Sequence[int]], samples: int, capacity: int,
                features: torch.Tensor | None = None) -> None:
        """Start a request of len(prompts) prompts x `samples` sequences (after the target's prefill, whose
        final normed hidden states of the prompts are `features` [G, T, H])."""

    def propose(self, histories: Sequence[Sequence[int]] | None, lengths: Sequence[int], params: SamplingParams,
                u: torch.Tensor, target_cache: KVCache) -> Proposal:
        """Up to lengths[b] draft tokens per sequence. u [B, max(lengths)] uniforms for sampling.
        histories is None when the round before is not read yet (only asked of a drafter that `follows`)."""
        raise NotImplementedError

    def follows(self) -> bool:
        """Whether the next proposal can be made before the verify launched last is read (histories=None)."""
        return False

    def verified(self, emitted: torch.Tensor, accepted: torch.Tensor) -> None:
        """A verify pass was just launched (its results are not read yet): sequence b emits
        emitted[b, :accepted[b] + 1] ([B, Lp + 1] and [B], device). The loop commits rounds in the order it
        launches them, and may launch the next one before it commits this one."""

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

    def propose(self, histories, lengths, params, u, target_cache):
        return Proposal.empty(len(histories), target_cache.suffix_len.device)


class NgramDrafter(Drafter):
    name = "ngram"

    def __init__(self, ngram_max: int = 3, ngram_min: int = 1):
        self.ngram_max, self.ngram_min = ngram_max, ngram_min

    def lookup(self, history: Sequence[int], max_len: int) -> list[int]:
        """The continuation of the latest earlier match of the longest matching suffix n-gram."""
        h = np.asarray(history, dtype=np.int64)
        for n in range(min(self.ngram_max, len(h) - 1), self.ngram_min - 1, -1):
            windows = np.lib.stride_tricks.sliding_window_view(h[:-1], n)  # earlier n-grams only
            hits = np.flatnonzero((windows == h[-n:]).all(axis=1))
            if hits.size:
                start = int(hits[-1]) + n
                return h[start:start + max_len].tolist()
        return []

    def propose(self, histories, lengths, params, u, target_cache):
        device = target_cache.suffix_len.device
        drafts = [self.lookup(h, n) if n > 0 else [] for h, n in zip(histories, lengths, strict=True)]
        return Proposal(padded_ids(drafts, device=device), ints_to_device([len(d) for d in drafts], device), None)


def draft_autoregressively(step: Callable[..., tuple[torch.Tensor, ...]], pending: tuple[torch.Tensor, torch.Tensor],
                           lengths: Sequence[int], u: torch.Tensor) -> Proposal:
    """Feed each sequence's pending tokens (tokens [B, T], counts [B], device), then sample up to lengths[b]
    tokens one step at a time.

    `step(tokens [B, T], q_len [B], last_only, u_i [B])` runs the draft model on its cache and samples
    from its last column by a `bass.rules.DraftRule`: (d_i [B],) greedy, else (d_i, q_i [B, V]).
    Sequences whose draft is complete get q_len 0 in later steps. The proposal carries each q_i for the
    verify; a step's outputs may be a graph's buffers, which the next step overwrites, so they are copied.
    """
    first, counts = pending
    (B, _), L, device = first.shape, max(lengths, default=0), first.device
    lens = ints_to_device(lengths, device)
    tokens = torch.empty(B, L, dtype=torch.long, device=device)
    probs = None
    u0 = u[:, 0] if L else torch.zeros(B, device=device)  # L = 0: the pending tokens are fed all the same
    out = step(first, counts, True, u0)
    for i in range(L):
        tokens[:, i] = out[0]
        if len(out) > 1:
            if probs is None:
                probs = out[1].new_empty(B, L, out[1].shape[-1])  # [B, L, V]
            probs[:, i] = out[1]
        if i + 1 < L:
            out = step(tokens[:, i:i + 1], (i + 1 < lens).to(torch.int32), False, u[:, i + 1])
    return Proposal(tokens, lens, probs)


class ModelDrafter(Drafter):
    name = "model"

    def __init__(self, model: torch.nn.Module, attn: Callable, target_vocab: int, *,
                 forward: Callable | None = None, arena: CacheArena | None = None):
        self.model, self.attn, self.target_vocab = model, attn, target_vocab
        self.forward = forward or model  # a GraphedModel on CUDA
        self.arena = arena or CacheArena(persistent=False)
        self.cache: KVCache | None = None
        self.in_cache: list[int] = []  # tokens of each sequence whose K/V the draft cache holds
        self.prompt_lens: list[int] = []

    @torch.inference_mode()
    def prefill(self, prompts, samples, capacity, features=None):
        device = next(self.model.parameters()).device
        lens = [len(p) for p in prompts]
        cache = self.model.new_cache(len(prompts), max(lens))
        self.model(padded_ids(prompts, device=device), cache, torch.tensor(lens, device=device), self.attn,
                   last_only=True)
        self.cache = self.arena.fork(cache, samples, capacity)
        self.prompt_lens = [n for n in lens for _ in range(samples)]
        self.in_cache = list(self.prompt_lens)

    @torch.inference_mode()
    def propose(self, histories, lengths, params, u, target_cache):
        device = self.cache.suffix_len.device
        pending = [h[n:] for h, n in zip(histories, self.in_cache, strict=True)]

        rule = draft_rule(params, self.target_vocab)  # q over the target's vocabulary, whatever the draft's

        def step(tokens, q_len, last_only, u_i):
            return run_then(self.forward, rule, (u_i,), tokens, self.cache, q_len, self.attn, last_only=last_only)

        ids = padded_ids(pending, device=device), ints_to_device([len(p) for p in pending], device)
        proposal = draft_autoregressively(step, ids, lengths, u)
        # the cache now holds the pending tokens and d_1 .. d_{l-1}
        self.in_cache = [len(h) + max(0, n - 1) for h, n in zip(histories, lengths, strict=True)]
        return proposal

    def commit(self, histories):
        self.in_cache = [min(c, len(h) - 1) for c, h in zip(self.in_cache, histories, strict=True)]
        suffix = [c - p for c, p in zip(self.in_cache, self.prompt_lens, strict=True)]
        self.cache.truncate(ints_to_device(suffix, self.cache.suffix_len.device))

    def select(self, rows):
        self.cache = self.cache.compact(list(rows))
        self.in_cache = [self.in_cache[r] for r in rows]
        self.prompt_lens = [self.prompt_lens[r] for r in rows]


CATCH_UP = 16  # pending entries that make a round without drafts feed them (FeatureDrafter._catch_up)


@dataclass
class _Verify:
    """A verify pass as the feature draft sees it (device tensors; `hidden` may be a graph's buffer, valid
    until the next verify in the same graph slot, by which time the next proposal has read it)."""

    hidden: torch.Tensor  # [B, W, H] the target's features of its W = Lp + 1 columns
    emitted: torch.Tensor  # [B, W] tokens emitted after each column (through accepted[b])
    accepted: torch.Tensor  # [B]
    drafted: bool  # its proposal came from this drafter, which had fed every entry before it
    followed: bool = False  # the next proposal fed its entries from `emitted` and `hidden`
    committed: bool = False


class FeatureDrafter(Drafter):
    """Drafts with a `FeatureDraft`, fed the target's hidden states f_t (module docstring of
    `bass.models.feature_draft`).

    Per sequence, entries 0 .. fed-1 of the draft cache hold (f_t, x_{t+1}) with the target's true f_t.
    The target's features live in `feats` [B, C, H]: feats[b, j] = f_{first_b + j}, first_b being the
    prompt's last position; the first `known_b` are real. `commit` writes each verify pass's features in
    place; those are the target's `hidden` when the verify was launched (`verified`): a step launched ahead
    (in another graph slot) must not be read in their place.

    A proposal first feeds the entries not fed yet, then drafts on its own predictions f̂, which the next
    proposal drops (truncating the cache to `fed`). After a round this drafter drafted, the entries to feed
    are exactly that verify's columns 0 .. a_b: (f of column i, the token emitted after it), all on the
    device, so the proposal needs nothing from the host (`follows`), and the loop may launch it before it
    reads that verify. Its `fed` then grows by a_b + 1 when the verify is committed. After a round without
    drafts, the entries come from the host's histories and `feats` instead.

    A round that drafted nothing (the cost policy's L = 0) costs one scatter here, plus every CATCH_UP such
    rounds one draft forward that feeds the backlog (`_catch_up`): the verify's columns
    i = 0 .. T-1 go to feats[b, known_b + i] whatever was accepted, because column i holds f of position
    first_b + known_b + i exactly when it was accepted, and the columns after the accepted ones lie past
    the new known_b, where the next verify writes before anything reads them.
    """

    name = "model"

    def __init__(self, draft: torch.nn.Module, target: torch.nn.Module, attn: Callable, *,
                 forward: Callable | None = None, arena: CacheArena | None = None):
        self.draft, self.target, self.attn = draft, target, attn  # target: what the loop calls (reads .hidden)
        self.forward = forward or draft  # a GraphedModel on CUDA
        self.arena = arena or CacheArena(persistent=False)
        self.cache: KVCache | None = None
        self.fed: list[int] = []
        self.prompt_entries: list[int] = []  # entries of each sequence in the shared prompt prefix
        self.feats: torch.Tensor | None = None  # [B, C, H]; column C-1 is scratch for writes past the end
        self.known: list[int] = []
        self._launched: deque[_Verify] = deque()  # launched, uncommitted verify passes, oldest first
        self._last: _Verify | None = None  # the verify launched last, committed or not
        self._proposed = False  # a proposal was made since the last verify

    @torch.inference_mode()
    def prefill(self, prompts, samples, capacity, features=None):
        if features is None:
            raise ValueError("the feature draft needs the target's hidden states of the prompts")
        device = features.device
        lens = [len(p) for p in prompts]
        T = max(lens) - 1  # the prompt's last feature waits for the first sampled token
        cache = self.draft.new_cache(len(prompts), max(T, 1))
        if T > 0:
            self.draft(padded_ids([p[1:] for p in prompts], T, device), cache, torch.tensor(lens, device=device) - 1,
                       self.attn, features=features[:, :T], last_only=True)
        self.cache = self.arena.fork(cache, samples, capacity)
        self.prompt_entries = [n - 1 for n in lens for _ in range(samples)]
        self.fed = list(self.prompt_entries)
        last = features[torch.arange(len(lens), device=device), torch.tensor(lens, device=device) - 1]  # [G, H]
        # a generated position's suffix row is at most `capacity`, so f of it is at j <= capacity + 1
        self.feats = torch.zeros(len(lens) * samples, capacity + 3, features.shape[-1], dtype=features.dtype,
                                 device=device)
        self.feats[:, 0] = last.repeat_interleave(samples, 0)
        self.known = [1] * self.feats.shape[0]
        self._launched.clear()
        self._last, self._proposed = None, False

    def follows(self) -> bool:
        return self._last is not None and self._last.drafted

    def _pending(self, histories) -> tuple[list[list[int]], torch.Tensor]:
        """Each sequence's entries not fed yet, from the host: tokens x_{t+1} (lists) and true features f_t
        [B, max n, H]."""
        start = [f - p for f, p in zip(self.fed, self.prompt_entries, strict=True)]  # first unfed column
        n = [k - s for k, s in zip(self.known, start, strict=True)]
        tokens = [list(h[f + 1:f + 1 + c]) for h, f, c in zip(histories, self.fed, n, strict=True)]
        device = self.feats.device
        cols = ints_to_device(start, device)[:, None] + torch.arange(max(n), device=device)  # [B, max n]
        cols = cols.clamp(max=self.feats.shape[1] - 1)
        return tokens, self.feats.gather(1, cols[:, :, None].expand(-1, -1, self.feats.shape[2]))

    def _known_entries(self) -> list[int]:
        """The cache entries each sequence has once every known feature is fed (prompt entries included)."""
        return [k + p for k, p in zip(self.known, self.prompt_entries, strict=True)]

    def _drop_guesses(self) -> None:
        """Truncate the cache to its `fed` true entries (a proposal's f̂ entries go)."""
        suffix = [f - p for f, p in zip(self.fed, self.prompt_entries, strict=True)]
        self.cache.truncate(ints_to_device(suffix, self.cache.suffix_len.device))

    @torch.inference_mode()
    def propose(self, histories, lengths, params, u, target_cache):
        prev = self._last
        if self.follows():  # feed the last verify's accepted columns, from the device (class docstring)
            self._drop_guesses()
            pending, features = (prev.emitted, prev.accepted + 1), prev.hidden
            if prev.committed:  # its entries count now; otherwise `commit` counts them
                self.fed = self._known_entries()
            prev.followed = True
        else:
            tokens, features = self._pending(histories)
            device = features.device
            pending = padded_ids(tokens, device=device), ints_to_device([len(t) for t in tokens], device)
            self.fed = self._known_entries()
        fed = {"features": features}
        rule = draft_rule(params, self.target.config.vocab_size)

        def step(tok, q_len, last_only, u_i):
            out = run_then(self.forward, rule, (u_i,), tok, self.cache, q_len, self.attn, features=fed["features"],
                           last_only=last_only)
            fed["features"] = last_rows(self.forward.hidden, q_len)  # f̂ of the last entry: the next step's input
            return out

        self._proposed = True
        return draft_autoregressively(step, pending, lengths, u)

    def verified(self, emitted, accepted):
        self._last = _Verify(self.target.hidden, emitted, accepted, self._proposed)
        self._launched.append(self._last)
        self._proposed = False

    def withdraw(self):
        self._launched.pop()
        self._last = self._launched[-1] if self._launched else None

    @torch.inference_mode()
    def commit(self, histories):
        rec = self._launched.popleft()
        rec.committed = True
        B, T, H = rec.hidden.shape
        C = self.feats.shape[1]
        cols = ints_to_device(self.known, rec.hidden.device)[:, None] + torch.arange(T, device=rec.hidden.device)
        rows = torch.arange(B, device=rec.hidden.device)[:, None] * C + cols.clamp(max=C - 1)  # [B, T]
        self.feats.view(B * C, H).index_copy_(0, rows.flatten(), rec.hidden.reshape(B * T, H).to(self.feats.dtype))
        # every token but the last emitted one has its true feature now
        self.known = [len(h) - 1 - p for h, p in zip(histories, self.prompt_entries, strict=True)]
        if rec.followed:  # the next proposal fed this verify's entries (and its own guesses follow them)
            self.fed = self._known_entries()
        elif rec.drafted:
            self._drop_guesses()
        elif max(k + p - f for k, p, f in zip(self.known, self.prompt_entries, self.fed, strict=True)) >= CATCH_UP:
            self._catch_up(histories)

    def _catch_up(self, histories) -> None:
        """Feed the pending entries now but each sequence's last (the next proposal drafts from it): after a
        run of rounds without drafts, so that the proposal's first step stays narrow (a captured graph's
        width) and its cost is not the run's backlog."""
        tokens, features = self._pending(histories)
        tokens = [t[:-1] for t in tokens]
        width = max(map(len, tokens))
        device = self.feats.device
        q_len = ints_to_device([len(t) for t in tokens], device)
        self.forward(padded_ids(tokens, width, device), self.cache, q_len, self.attn, features=features[:, :width],
                     last_only=True)
        self.fed = [f + len(t) for f, t in zip(self.fed, tokens, strict=True)]

    def select(self, rows):
        rows = list(rows)
        index = torch.tensor(rows, device=self.feats.device)
        self.cache = self.cache.compact(rows)
        self.feats = self.feats[index]
        self.fed, self.known, self.prompt_entries = ([v[r] for r in rows] for v in (self.fed, self.known,
                                                                                     self.prompt_entries))
        if self._last is not None:  # the next proposal may feed from it
            last = self._last
            self._last = _Verify(last.hidden[index], last.emitted[index], last.accepted[index], last.drafted,
                                 last.followed, last.committed)


class LayerSkipDrafter(Drafter):
    name = "layer-skip"

    def __init__(self, target: torch.nn.Module, attn: Callable, num_layers: int):
        if not 1 <= num_layers < target.config.num_layers:
            raise ValueError(f"layer_skip_layers must be in 1 .. {target.config.num_layers - 1} for this target, "
                             f"got {num_layers}")
        self.target, self.attn, self.num_layers = target, attn, num_layers

    @torch.inference_mode()
    def propose(self, histories, lengths, params, u, target_cache):
        # The target cache holds every token but the last emitted one, so each sequence has one pending.
        saved = target_cache.suffix_len.clone()
        device = saved.device
        pending = padded_ids([h[-1:] for h in histories], device=device), ints_to_device([1] * len(histories), device)

        rule = draft_rule(params, self.target.config.vocab_size)

        def step(tokens, q_len, last_only, u_i):
            return run_then(self.target, rule, (u_i,), tokens, target_cache, q_len, self.attn,
                            num_layers=self.num_layers, last_only=last_only)

        proposal = draft_autoregressively(step, pending, lengths, u)
        # The verify pass rewrites these rows in every layer; only the lengths need restoring.
        target_cache.truncate(saved)
        return proposal


def build_drafter(name: str, target: torch.nn.Module, draft: torch.nn.Module | None, attn: Callable, *,
                  ngram_max: int = 3, ngram_min: int = 1, layer_skip_layers: int | None = None,
                  draft_forward: Callable | None = None, draft_arena: CacheArena | None = None) -> Drafter:
    """The drafter called `name` ("none", "ngram", "model", "layer-skip").

    `target` is what the loop calls for the target (the model, or its `GraphedModel`);
    `draft_forward` / `draft_arena` do the same for the draft model.
    """
    if name == "none":
        return NoDrafter()
    if name == "ngram":
        return NgramDrafter(ngram_max, ngram_min)
    if name == "model":
        if draft is None:
            raise ValueError("drafter='model' needs a draft model: set EngineConfig.draft (e.g. a small model "
                             "of the target's family)")
        if isinstance(draft, FeatureDraft):
            return FeatureDrafter(draft, target, attn, forward=draft_forward, arena=draft_arena)
        return ModelDrafter(draft, attn, target.config.vocab_size, forward=draft_forward, arena=draft_arena)
    if name == "layer-skip":
        n = layer_skip_layers or max(1, target.config.num_layers // 2)
        return LayerSkipDrafter(target, attn, n)
    raise ValueError(f"unknown drafter {name!r}: choose 'ngram', 'model' or 'layer-skip'")
