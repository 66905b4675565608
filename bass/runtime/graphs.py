"""CUDA graphs for the decode-time forward passes (verify, regular decode, draft steps).

A round launches hundreds of small kernels; replaying them from a captured graph removes the
per-launch Python and driver overhead. Shapes must be static, so each (batch, width) is rounded up
to a bucket and padded: padded sequences (rows past the live batch) and padded query columns get
q_len = 0 / are ignored, write their K/V to the cache's scratch row, and cost only arithmetic —
decode is bound by reading the weights, which a wider step reads once all the same.

The captured kernels read the cache through fixed pointers: the cache must be a view of one
`CacheArena` storage (same base pointers for every batch size), which `KVCache.compact` preserves.

A shape without a graph borrows a wider one and is captured between requests. A call whose (batch bucket,
width, kind) has no graph runs in the graph of the nearest larger batch bucket of the same width and kind that
has one (more padded rows, the same weight reads), however often it is asked, and its shape is queued:
`GraphedModel.capture_queued` captures the queue when no request is decoding (the engine calls it after a
request's "done" event and before the next request's clock starts). Only a shape with nothing wider to borrow
is captured at once. A capture runs the forward three times and costs tens of rounds (on the H100 the synthetic
7B's captures took 80–230 ms against 5–12 ms rounds), and a policy whose draft lengths vary meets a new
(batch, width) shape at each step of a shrinking batch's tail: captured inside a request, they took half of such a
policy's decode time there. `python -m bench.real_bench` counts the graphs captured inside each timed pass
(`captures_passes`) and between generations (`deferred_captures_passes`).

An attention backend that reads the batch's lengths on the host ("pad", "split": `kernels.capturable`) cannot be
captured: its calls run eagerly on the same cache, and its proposals step by step.

A chain (`GraphedModel.chain`) is several forwards and the glue between them in one graph: a draft's whole
proposal (`bass.drafters.chain.chained_proposal`), L draft steps and their sampling rules, which step by step paid a
replay and a handful of small copies per step. A chain without a graph runs in the chain of the nearest larger
batch bucket that has one (its padding rows zeroed, which do nothing), or with nothing wider step by step (the
caller's own path), and is queued the same way, with a sibling its caller will want soon where it names one
(`also`: a proposal's other first-step width, `bass.drafters.chain.chain_widths`). So a varying-length policy's
timed passes at k = 8 on an H200 built no shape in 22 of 24 passes; a pass that builds shapes reads slower (0.3 %
behind fixed L = 3's median with one, 3.5 % with 2 to 5, 6.0 % with 6 or more, `python -m bench.real_bench`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from bass.runtime.cache import CacheArena, KVCache
from kernels import capturable

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
WIDTH_BUCKETS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 33)


def bucket(n: int, buckets: tuple[int, ...]) -> int | None:
    """The smallest bucket >= n, or None when n is larger than all of them."""
    return next((b for b in buckets if b >= n), None)


_captures = 0  # graphs captured by this process (`captures`)
_deferred = 0  # of those, the ones captured between requests (`deferred_captures`)
_shapes: list[str] = []  # of those, what each captured inside a request's decoding was (`decoding_capture_shapes`)
_deferred_shapes: list[str] = []  # what each capture between requests was (`deferred_capture_shapes`)


def captures() -> int:
    """How many CUDA graphs this process has captured so far: a round during which the count moved paid
    for a capture (tens of ms)."""
    return _captures


def deferred_captures() -> int:
    """How many of `captures()` were captured between requests (`GraphedModel.capture_queued`, the prefill's
    `bass.runtime.prefill_graphs`), outside any request's decoding."""
    return _deferred


def decoding_captures() -> int:
    """How many of `captures()` were captured inside a request's decoding: the ones a request waited for."""
    return _captures - _deferred


def decoding_capture_shapes() -> list[str]:
    """What each of `decoding_captures()` captured, in order: "FeatureDraft B8 T10 slot 1 rule" is the model,
    the batch and width buckets, the output slot and a sampling rule in the graph. These are the shapes a
    request met that nothing warmed and nothing wider could run: the benchmarks say which shape a timed pass
    waited for."""
    return list(_shapes)


def deferred_capture_shapes() -> list[str]:
    """What each shape `GraphedModel.capture_queued` built between requests was, in order, named as in
    `decoding_capture_shapes`; a chain as "FeatureDraft chain B8 10/6 pool 1": the batch bucket, the integers
    of its name (a proposal's: its first step's width bucket / L) and its pool. These are the shapes a request
    ran in a wider batch's graph or, with nothing wider to borrow, a chain's steps one by one. (The prefills'
    captures between requests, `bass.runtime.prefill_graphs`, count in `deferred_captures` but are not named here.)"""
    return list(_deferred_shapes)


def capture(fn: Callable[[], object], pool: object | None = None, device: torch.device | None = None,
            deferred: bool = False) -> tuple[torch.cuda.CUDAGraph, object]:
    """(graph, outputs): fn() captured in a CUDA graph, after two calls on a side stream of `device` that
    compile its kernels and settle the allocator; outputs are the captured call's, refreshed by each
    `graph.replay()`. `pool`: a memory pool shared with other graphs (`torch.cuda.graph_pool_handle`).
    `deferred`: captured outside any request's decoding (counted in `deferred_captures`)."""
    global _captures, _deferred
    _captures += 1
    _deferred += deferred
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        fn(), fn()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    # thread_local: the device thread captures while callers' threads may touch CUDA (a load, a memory reading)
    with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
        out = fn()
    return graph, out


class GraphKey(NamedTuple):
    """What one captured graph is specific to (`GraphedModel` keeps one graph per key)."""

    batch: int  # the batch bucket
    width: int  # the width bucket
    groups: int  # prompt groups of the cache's shared prefix
    num_layers: int | None
    last_only: bool
    attn: Callable
    features: bool  # a feature draft's second input
    then: Callable | None  # the rule captured after the forward
    arg_kinds: tuple  # (dim, dtype) of each of the rule's args
    slot: int


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph | None
    tokens: torch.Tensor  # [Bb, Tb] static input
    q_len: torch.Tensor  # [Bb] static input
    features: torch.Tensor | None  # [Bb, Tb, H] static input of a feature draft
    out: torch.Tensor | tuple  # [Bb, Tb or 1, V] static output, or the static outputs of a `then` rule
    hidden: torch.Tensor | None  # [Bb, Tb, H] static output: the model's `hidden` after the forward
    args: tuple = ()  # static inputs of the `then` rule: [Bb] or [Bb, Tb-1, ...] (None stays None)


class ChainKey(NamedTuple):
    """What one captured chain (`GraphedModel.chain`) is specific to."""

    batch: int  # the batch bucket
    groups: int  # prompt groups of the cache's shared prefix
    name: object  # the caller's: what the chain computes (its rule, its lengths ...)
    inputs: tuple  # (shape past the batch, dtype) of each static input
    pool: object  # the memory pool its graph shares with chains of the same pool only


@dataclass
class _Chain:
    graph: torch.cuda.CUDAGraph | None
    inputs: tuple[torch.Tensor, ...]  # static [Bb, ...] inputs
    cache: KVCache  # the arena's first Bb rows
    out: object = None  # the captured call's outputs


class GraphedModel:
    """Drop-in for `model(tokens, cache, q_len, attn, num_layers=, last_only=, features=)` that replays CUDA
    graphs. `features` is a feature draft's second input; `hidden` is the model's `hidden` of the last call.

    With `use_graphs=False` it runs the same padding and bucketing eagerly: the CPU twin that tests the
    logic of the GPU path.
    """

    def __init__(self, model: torch.nn.Module, arena: CacheArena, use_graphs: bool = True):
        self.model, self.arena, self.use_graphs = model, arena, use_graphs
        self.config = model.config
        self._graphs: dict[GraphKey | ChainKey, _Graph | _Chain] = {}
        # shapes that ran in a wider graph (or, for a chain, eagerly) -> what captures them, from the call that
        # queued them
        self._queue: dict[GraphKey | ChainKey, Callable[[], _Graph | _Chain]] = {}
        self._version = arena.version
        self._pools: dict[object, object] = {}  # slot, or a chain's pool -> the memory pool its graphs share
        self.hidden: torch.Tensor | None = None

    captures_then = True  # `bass.decode.rules.run_then`: a rule after the forward joins its graph
    slots = 2  # `slot=`: two sets of output buffers per shape (`bass.decode.pipeline`'s look-ahead)

    def __call__(self, tokens: torch.Tensor, cache: KVCache, q_len: torch.Tensor, attn: Callable, *,
                 num_layers: int | None = None, last_only: bool = False, features: torch.Tensor | None = None,
                 then: Callable | None = None, args: tuple = (), slot: int = 0):
        """The logits [B, T or 1, V]; with `then`, then(logits, *args) instead (a `bass.decode.rules` rule, whose
        args are [B] or [B, T-1, ...] tensors or None), captured in the same graph.

        Outputs are static buffers of the graphs of `slot`, which share one memory pool: valid until the
        next call in the same slot (of any shape: one graph's intermediates may reuse another's output
        memory), untouched by calls in the other slot (so one step's results can be read while the next
        step, launched ahead in the other slot, runs)."""
        B, T = tokens.shape
        base = self.arena.base
        Bb, Tb = bucket(B, BATCH_BUCKETS), bucket(T, WIDTH_BUCKETS)
        extra = {} if features is None else {"features": features}
        if base is None or Bb is None or Tb is None or Bb > base.batch or cache.suffix_k.data_ptr() != \
                base.suffix_k.data_ptr() or not capturable(attn):  # (a backend reading lengths on the host)
            out = self.model(tokens, cache, q_len, attn, num_layers=num_layers, last_only=last_only, **extra)
            self.hidden = self.model.hidden
            return out if then is None else then(out, *args)
        self._check_storage()
        G = cache.prefix_k.shape[1]
        arg_kinds = tuple(None if a is None else (a.dim(), a.dtype) for a in args)
        key = GraphKey(Bb, Tb, G, num_layers, last_only, attn, features is not None, then, arg_kinds, slot)
        g = self._graphs.get(key)
        wider = None if g is not None else self._wider(key, base.batch)
        if wider is not None:  # run in it (every round of this request); this shape's own comes between requests
            if key not in self._queue:
                self._queue[key] = functools.partial(self._capture, _padded(cache, base, Bb), Bb, Tb, attn, num_layers,
                                                     last_only, features, then, args, slot)
            g, Bb = self._graphs[wider], wider.batch
        padded = _padded(cache, base, Bb)
        if g is None:  # nothing to run in: the request waits for this capture (the only capture inside decoding)
            g = self._graphs[key] = self._capture(padded, Bb, Tb, attn, num_layers, last_only, features, then, args,
                                                  slot)
            if self.use_graphs:
                _shapes.append(self._label(key))
        # padding needs no zeros but q_len's: a padded row (q_len 0) and a live row's columns past its q_len
        # are ignored, whatever stale token ids they hold (a round makes several launches: each one saved counts)
        g.tokens[:B, :T] = tokens
        g.q_len[:B] = q_len
        if Bb > B:  # padding rows
            g.q_len[B:] = 0
        if features is not None:
            g.features[:B, :T] = features  # padding rows keep stale values: they are never read back
        for static, a in zip(g.args, args, strict=True):  # padding entries likewise: stale, never read back
            if a is not None and a.dim() == 1:
                static[:B] = a
            elif a is not None:
                static[:B, :a.shape[1]] = a
        if g.graph is not None:
            g.graph.replay()
        else:  # the same buffer semantics as a replay: results land in the static outputs
            out, hidden = self._run(g, padded, attn, num_layers, last_only, then)
            if g.hidden is None:
                g.out, g.hidden = out, hidden
            else:
                for static, new in zip(g.out if then is not None else (g.out,),
                                       out if then is not None else (out,), strict=True):
                    static.copy_(new)
                g.hidden.copy_(hidden)
        self.hidden = None if g.hidden is None else g.hidden[:B, :T]
        if then is not None:
            return tuple(o[:B] for o in g.out)
        return g.out[:B] if last_only else g.out[:B, :T]

    def _check_storage(self) -> None:
        """Drop every graph and queued shape if the arena's storage moved: their captured pointers are stale."""
        if self._version != self.arena.version:
            self._graphs.clear()
            self._queue.clear()
            self._pools = {}  # graphs of a new storage must not capture into the released pools
            self._version = self.arena.version

    def chain(self, run: Callable[..., object], name: object, cache: KVCache, inputs: Sequence[torch.Tensor],
              shapes: Sequence[tuple[int, ...]], pool: object = "chain",
              also: tuple[object, Sequence[tuple[int, ...]]] | None = None) -> object | None:
        """run(cache, *inputs): several forwards of the model and the glue between them, replayed as one CUDA
        graph (a draft's whole proposal: `bass.drafters.chain.chained_proposal`): its own, or while it has none the
        graph of a wider batch's same chain, or None where neither exists yet. Then the caller runs its steps one
        by one. A call without its own graph is queued: `capture_queued` captures it between requests, as it
        does a shape that ran in a wider graph.

        `run` must read nothing from the host, and must take an input row of zeros for a row that does
        nothing (q_len 0): inputs [B, ...] go into static [Bb, *shapes[i]] buffers (a shorter dimension
        fills their leading part, the rest keeps stale values), and padding rows past B are zeroed.
        `name` is what the computation depends on besides the batch and the inputs' shapes, and must not
        hold a request's state (a queued chain is captured after its request). The outputs are the graph's
        static buffers, valid until the next replay of a chain of the same `pool`, which no other graph
        shares: a caller that keeps one chain's outputs while it runs another alternates two pools. `also`, the
        (name, shapes) of a sibling the caller will want soon (a proposal's other first-step width), is queued
        with this chain whenever this one is: a round whose chain has its graph builds no second key."""
        key = self._chain_key(name, cache, inputs, shapes, pool)
        if key is None:
            return None
        B, Bb, base = inputs[0].shape[0], key.batch, self.arena.base
        g = self._graphs.get(key)
        if g is None:
            # (a sibling has this chain's batch and cache: it has a key wherever this one does)
            for queued in [key] if also is None else [key, self._chain_key(also[0], cache, inputs, also[1], pool)]:
                if queued not in self._graphs and queued not in self._queue:
                    self._queue[queued] = functools.partial(self._capture_chain, run, queued,
                                                            _padded(cache, base, queued.batch), inputs)
            wider = self._wider(key, base.batch)
            if wider is None:
                return None
            g, Bb = self._graphs[wider], wider.batch  # (module docstring: run in a wider batch's chain)
        for static, x in zip(g.inputs, inputs, strict=True):
            static[(slice(0, B), *(slice(0, n) for n in x.shape[1:]))] = x
            if Bb > B:
                static[B:] = 0
        if g.graph is None:  # the CPU twin: the same static inputs, run eagerly
            return run(g.cache, *g.inputs)
        g.graph.replay()
        return g.out

    def _chain_key(self, name: object, cache: KVCache, inputs: Sequence[torch.Tensor],
                   shapes: Sequence[tuple[int, ...]], pool: object) -> ChainKey | None:
        """`chain`'s key for these arguments, or None where it can have no graph (a batch past the arena's, a
        cache outside it)."""
        base = self.arena.base
        Bb = bucket(inputs[0].shape[0], BATCH_BUCKETS)
        if base is None or Bb is None or Bb > base.batch or cache.suffix_k.data_ptr() != base.suffix_k.data_ptr():
            return None
        self._check_storage()
        return ChainKey(Bb, cache.prefix_k.shape[1], name, tuple((tuple(s), x.dtype) for s, x in
                                                                 zip(shapes, inputs, strict=True)), pool)

    def _capture_chain(self, run: Callable[..., object], key: ChainKey, cache: KVCache,
                       inputs: Sequence[torch.Tensor]) -> _Chain:
        static = tuple(x.new_zeros(key.batch, *shape) for x, (shape, _) in zip(inputs, key.inputs, strict=True))
        g = _Chain(None, static, cache)
        if self.use_graphs:
            g.graph, g.out = capture(lambda: run(cache, *static), device=cache.suffix_k.device,
                                     pool=self._pools.setdefault(key.pool, torch.cuda.graph_pool_handle()))
        return g

    def _wider(self, key: GraphKey | ChainKey, capacity: int) -> GraphKey | ChainKey | None:
        """The key of the nearest larger batch bucket (up to `capacity`) of the same width and kind (for a chain:
        the same computation, input shapes and pool) that has a graph, for a shape without one to run in (module
        docstring); None when there is none."""
        for b in BATCH_BUCKETS:
            wider = key._replace(batch=b)
            if key.batch < b <= capacity and wider in self._graphs:
                return wider
        return None

    def capture_queued(self, stop: Callable[[], bool] | None = None) -> int:
        """Capture the graph of every shape that ran in a wider one's since the last call (module docstring),
        unless it got its own meanwhile; drop them all if the arena's storage moved (their cache views would
        hold stale pointers). Call it while no request decodes: each capture costs tens of rounds. `stop`:
        asked before each capture; once it says True the rest stay queued (a request is waiting). Returns
        how many shapes it built (CUDA graphs; with `use_graphs=False`, their static buffers)."""
        global _deferred
        queued, self._queue = self._queue, {}
        if self._version != self.arena.version:
            return 0
        built = 0
        with torch.inference_mode():  # as a request's captures run: the arena was made in inference mode
            for i, (key, build) in enumerate(queued.items()):
                if stop is not None and stop():
                    self._queue.update(dict(list(queued.items())[i:]))
                    break
                if key not in self._graphs:
                    self._graphs[key] = build()
                    built += 1
                    _deferred += self.use_graphs
                    if self.use_graphs:
                        _deferred_shapes.append(self._label(key))
        return built

    def _label(self, key: GraphKey | ChainKey) -> str:
        """A shape's name in `decoding_capture_shapes` and `deferred_capture_shapes`."""
        model = type(self.model).__name__
        if isinstance(key, ChainKey):
            ints = "/".join(str(n) for n in key.name if isinstance(n, int))
            pool = key.pool[-1] if isinstance(key.pool, tuple) else key.pool
            return f"{model} chain B{key.batch} {ints} pool {pool}"
        return f"{model} B{key.batch} T{key.width} slot {key.slot}" + " rule" * (key.then is not None)

    def _run(self, g: _Graph, cache: KVCache, attn: Callable, num_layers, last_only, then):
        """(output, hidden) of the model (and `then`) on g's static inputs."""
        extra = {} if g.features is None else {"features": g.features}
        out = self.model(g.tokens, cache, g.q_len, attn, num_layers=num_layers, last_only=last_only, **extra)
        if then is not None:
            out = then(out, *g.args)
        return out, self.model.hidden

    def _capture(self, cache: KVCache, Bb: int, Tb: int, attn: Callable, num_layers, last_only,
                 features: torch.Tensor | None, then: Callable | None, args: tuple, slot: int) -> _Graph:
        device = cache.suffix_k.device
        tokens = torch.zeros(Bb, Tb, dtype=torch.long, device=device)
        q_len = torch.zeros(Bb, dtype=torch.int32, device=device)  # q_len 0: warm-up writes only scratch rows
        static = None if features is None else features.new_zeros(Bb, Tb, features.shape[-1])
        static_args = tuple(None if a is None else a.new_zeros((Bb,) if a.dim() == 1 else (Bb, Tb - 1, *a.shape[2:]))
                            for a in args)
        g = _Graph(None, tokens, q_len, static, torch.empty(0), None, static_args)
        if not self.use_graphs:
            return g
        # graphs of one slot share a pool: one graph's intermediates may lie where another's outputs are
        g.graph, (g.out, g.hidden) = capture(lambda: self._run(g, cache, attn, num_layers, last_only, then),
                                             pool=self._pools.setdefault(slot, torch.cuda.graph_pool_handle()),
                                             device=device)
        return g


def _padded(cache: KVCache, base: KVCache, Bb: int) -> KVCache:
    """`cache` as the arena's first Bb rows: what a graph of batch bucket Bb reads and writes."""
    return KVCache(cache.prefix_k, cache.prefix_v, cache.prefix_len, base.seq_group[:Bb], base.suffix_k[:, :Bb],
                   base.suffix_v[:, :Bb], base.suffix_len[:Bb])
