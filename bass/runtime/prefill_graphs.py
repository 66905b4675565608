"""A request's prefills (the target's, and a draft model's over the same prompts) replayed from CUDA graphs, one
per prompt-width bucket.

The prefill is one forward over the prompt, but run eagerly it is the host's: on the H100 the embedded target's
shapes' forward over a 160-token prompt kept the GPU busy 2.35 ms of the 17.0 from its first kernel to its last
(268 launches, each paying Python, the Triton launcher and the driver; at 320 tokens 3.25 of 16.1, under
torch.profiler). Replayed from a graph, a request's prefill took 4.1-6.0 ms against 16-25 eagerly
(`python -m bench.real_bench` reports each row's prefill in ms).

Shapes must be static, so the prompts are padded to a width bucket (`PREFILL_WIDTHS`): a padded column is computed
and ignored, as in any ragged batch (q_len marks the real tokens; its K/V goes to the cache's scratch row), and
costs arithmetic only.

Each (prompts, width bucket) gets static buffers, token ids [G, Tb] and lengths [G], made at its first request,
which runs eagerly on them, the same shapes and kernels a replay runs; its graph is captured between requests
(`capture_queued`, as `bass.runtime.graphs` does for decode shapes), so no request waits for a capture. The KV cache,
of the widest bucket's rows, is one per number of prompts G: the prefills never overlap. The outputs (the last
row's logits [G, 1, V], the cache, the final hidden states [G, Tb, H] that a feature draft starts from) are
static buffers, valid until the next prefill: the engine forks the cache into its arena and hands the states
to the drafter before anything else prefills. A prompt wider than the widest bucket runs eagerly at its own
width, as without graphs.

A draft model prefills the same way, through its own `PrefillGraphs`: a separate draft over the prompts, a
feature draft over their tokens after the first and the target's hidden states (`features`, a static input too).
`prefill` is what the engine and the drafters call: through the graphs where a width has a bucket, else eagerly.

With `use_graphs=False` the same padding and buffers run eagerly: the CPU twin that tests this logic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from bass.runtime import graphs
from bass.runtime.cache import KVCache
from bass.runtime.transfer import ints_to_device, padded_ids
from kernels import capturable

# prompt widths a graph is captured for (a wider prompt prefills eagerly): HumanEval's prompts are 38-391 tokens
# of the embedded target's tokenizer
PREFILL_WIDTHS = (32, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512)


@dataclass
class _Prefill:
    tokens: torch.Tensor  # [G, Tb] static input
    q_len: torch.Tensor  # [G] static input
    features: torch.Tensor | None  # [G, Tb, F] static input of a feature draft
    cache: KVCache  # G sequences of PREFILL_WIDTHS[-1] rows, shared by every width of G prompts
    graph: torch.cuda.CUDAGraph | None = None
    logits: torch.Tensor | None = None  # [G, 1, V] static output
    hidden: torch.Tensor | None = None  # [G, Tb, H] static output


class PrefillGraphs:
    """`__call__(ids, attn, features)`: the prefill of prompts `ids` through graphs (module docstring), or None
    where the width has no bucket and the caller prefills eagerly."""

    def __init__(self, model: torch.nn.Module, use_graphs: bool = True, features: int | None = None):
        """`features`: the width F of a feature draft's second input (None: a model of tokens only)."""
        self.model, self.use_graphs, self.feature_width = model, use_graphs, features
        self._prefills: dict[tuple, _Prefill] = {}
        self._caches: dict[int, KVCache] = {}  # per number of prompts: one cache, whatever the width
        self._queue: list[tuple] = []  # keys whose graph is captured between requests
        self._pool = None

    def __call__(self, ids: Sequence[Sequence[int]], attn: Callable, features: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, KVCache, torch.Tensor] | None:
        """(logits [G, 1, V] of each prompt's last token, the prefilled cache, the model's `hidden` [G, T, H]), T
        the longest prompt, all static buffers valid until the next call; None when T is past the widest bucket
        or `attn` cannot be captured (`kernels.capturable`).
        `features` [G, T, F]: a feature draft's second input."""
        G, T = len(ids), max(map(len, ids))
        Tb = graphs.bucket(T, PREFILL_WIDTHS)
        if Tb is None or not capturable(attn):  # (a backend that reads lengths on the host runs eagerly)
            return None
        p = self._buffers(G, Tb, attn)
        p.tokens.copy_(padded_ids(ids, Tb, p.tokens.device))
        p.q_len.copy_(ints_to_device([len(x) for x in ids], p.q_len.device))  # (pinned, no stall)
        if features is not None:
            p.features[:, :T] = features  # the columns past T keep stale values: padding, never read back
        if p.graph is not None:
            p.graph.replay()
        else:
            p.logits, p.hidden = self._run(p, attn)
        return p.logits, p.cache, p.hidden[:, :T]

    def _run(self, p: _Prefill, attn: Callable) -> tuple[torch.Tensor, torch.Tensor]:
        """The forward over p's static inputs into its cache, emptied first (a replay runs this too)."""
        p.cache.suffix_len.zero_()
        extra = {} if p.features is None else {"features": p.features}
        logits = self.model(p.tokens, p.cache, p.q_len, attn, last_only=True, **extra)  # [G, 1, V]
        return logits, self.model.hidden

    def _buffers(self, G: int, Tb: int, attn: Callable) -> _Prefill:
        """The static buffers of G prompts at width bucket Tb, made (and their graph queued) on first use."""
        key = (G, Tb, attn)
        p = self._prefills.get(key)
        if p is None:
            weight = next(self.model.parameters())
            if G not in self._caches:  # (the prefills never overlap: one cache serves every width)
                self._caches[G] = self.model.new_cache(G, PREFILL_WIDTHS[-1])
            F = self.feature_width
            p = self._prefills[key] = _Prefill(
                torch.zeros(G, Tb, dtype=torch.long, device=weight.device),
                torch.zeros(G, dtype=torch.int32, device=weight.device),
                None if F is None else torch.zeros(G, Tb, F, dtype=weight.dtype, device=weight.device),
                self._caches[G])
            if self.use_graphs:
                self._queue.append(key)
        return p

    def warm(self, G: int, attn: Callable) -> int:
        """Capture now the graph of every width bucket for G prompts (a caller about to time requests, so that
        none of them prefills eagerly at a width first met). Returns how many it captured."""
        with torch.inference_mode():
            for Tb in PREFILL_WIDTHS:
                self._buffers(G, Tb, attn)
        return self.capture_queued()

    def capture_queued(self, stop: Callable[[], bool] | None = None) -> int:
        """Capture the graphs of the widths met since the last call; call it while no request runs. `stop`: asked
        before each capture; once it says True the rest stay queued. Returns how many it captured."""
        queued, self._queue = self._queue, []
        with torch.inference_mode():  # as requests run: the static cache was made in inference mode
            for i, key in enumerate(queued):
                if stop is not None and stop():
                    self._queue = queued[i:] + self._queue
                    return i
                p, attn = self._prefills[key], key[2]
                if self._pool is None:
                    self._pool = torch.cuda.graph_pool_handle()
                # the prefills share a pool: each one's outputs are consumed before the next prefill runs
                p.graph, (p.logits, p.hidden) = graphs.capture(lambda p=p, attn=attn: self._run(p, attn),
                                                               pool=self._pool, device=p.tokens.device,
                                                               deferred=True)
        return len(queued)


def prefill(model: torch.nn.Module, prefills: PrefillGraphs | None, ids: Sequence[Sequence[int]], attn: Callable,
            features: torch.Tensor | None = None) -> tuple[torch.Tensor, KVCache, torch.Tensor]:
    """(logits [G, 1, V] of each row's last token, the prefilled cache, the model's `hidden`) of `model` over the
    token rows `ids` (q_len their lengths; `features` [G, T, F] a feature draft's second input): through
    `prefills` where the width has a bucket (static buffers, valid until its next prefill), else eagerly at the
    rows' own width."""
    out = prefills(ids, attn, features) if prefills is not None else None
    if out is not None:
        return out
    device = next(model.parameters()).device
    lens = [len(r) for r in ids]
    cache = model.new_cache(len(ids), max(lens))
    extra = {} if features is None else {"features": features}
    logits = model(padded_ids(ids, device=device), cache, torch.tensor(lens, device=device), attn, last_only=True,
                   **extra)
    return logits, cache, model.hidden
