"""The prefill through static buffers and CUDA graphs (`bass.runtime.prefill_graphs`), on the CPU: padded to a width
bucket it computes what the eager prefill computes; a width's graph is captured between requests (faked here: a
replay runs the function again into the first call's outputs) and replayed after."""

import pytest
import torch

import bass.runtime.graphs
from bass.models.loader import load_model
from bass.runtime.attention import get_backend
from bass.runtime.prefill_graphs import PREFILL_WIDTHS, PrefillGraphs
from bass.runtime.transfer import padded_ids


def _eager(model, ids, attn):
    """The engine's prefill without static shapes: (logits [G, 1, V], cache, hidden [G, T, H])."""
    lens = [len(p) for p in ids]
    cache = model.new_cache(len(ids), max(lens))
    logits = model(padded_ids(ids), cache, torch.tensor(lens), attn, last_only=True)
    return logits, cache, model.hidden


def _assert_same_prefill(got, want, ids):
    (logits, cache, hidden), (ref_logits, ref_cache, ref_hidden) = got, want
    T = max(map(len, ids))
    assert hidden.shape == ref_hidden.shape == (len(ids), T, ref_hidden.shape[-1])
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(hidden, ref_hidden, rtol=1e-5, atol=1e-5)
    assert cache.suffix_len.tolist() == ref_cache.suffix_len.tolist() == [len(p) for p in ids]
    for g, p in enumerate(ids):  # what the arena's fork copies: each prompt's rows
        for have, ref in ((cache.suffix_k, ref_cache.suffix_k), (cache.suffix_v, ref_cache.suffix_v)):
            torch.testing.assert_close(have[:, g, :len(p)], ref[:, g, :len(p)], rtol=1e-5, atol=1e-5)


@pytest.fixture
def tiny(tiny_dir):
    with torch.inference_mode():
        yield load_model(str(tiny_dir("llama"))).model, get_backend("torch", "cpu")


@pytest.mark.parametrize("lens", [[5], [33], [7, 30], [64]])
def test_a_prefill_padded_to_its_width_bucket_computes_the_eager_prefill(tiny, lens):
    model, attn = tiny
    g = torch.Generator().manual_seed(sum(lens))
    ids = [torch.randint(0, model.config.vocab_size, (n,), generator=g).tolist() for n in lens]
    with torch.inference_mode():
        want = _eager(model, ids, attn)
        graphs = PrefillGraphs(model, use_graphs=False)
        _assert_same_prefill(graphs(ids, attn), want, ids)
        assert graphs._queue == []  # the CPU twin captures nothing
        # the padding columns hold the earlier prompt's ids: a shorter prompt of the same bucket ignores them
        shorter = [p[: max(1, len(p) - 3)] for p in ids]
        _assert_same_prefill(graphs(shorter, attn), _eager(model, shorter, attn), shorter)


def test_a_prompt_past_the_widest_bucket_prefills_eagerly(tiny):
    model, attn = tiny
    with torch.inference_mode():
        graphs = PrefillGraphs(model, use_graphs=False)
        assert graphs([[1] * (PREFILL_WIDTHS[-1] + 1)], attn) is None
        assert graphs([[1] * PREFILL_WIDTHS[-1]], attn) is not None


def test_a_width_is_captured_between_requests_then_replayed(tiny, fake_graphs):
    model, attn = tiny
    first, second, wider = [[3, 1, 4, 1, 5, 9, 2, 6]], [[2, 7, 1, 8, 2, 8]], [[1, 6, 1, 8] * 10]
    with torch.inference_mode():
        graphs = PrefillGraphs(model)
        before, deferred = bass.runtime.graphs.captures(), bass.runtime.graphs.deferred_captures()
        _assert_same_prefill(graphs(first, attn), _eager(model, first, attn), first)
        assert bass.runtime.graphs.captures() == before  # a width first met runs eagerly: its request waits for nothing
        assert graphs.capture_queued() == 1 and bass.runtime.graphs.deferred_captures() == deferred + 1
        assert bass.runtime.graphs.captures() == before + 1 and graphs.capture_queued() == 0
        _assert_same_prefill(graphs(second, attn), _eager(model, second, attn), second)  # the same bucket: replayed
        assert bass.runtime.graphs.captures() == before + 1
        _assert_same_prefill(graphs(wider, attn), _eager(model, wider, attn), wider)  # another bucket: eagerly
        keys = sorted(graphs._prefills)
        assert [k[1] for k in keys] == [32, 64]
        assert graphs._prefills[keys[0]].cache is graphs._prefills[keys[1]].cache  # one cache for every width
        assert graphs._prefills[keys[0]].graph is not None and graphs._prefills[keys[1]].graph is None


def test_warming_captures_every_width_once(tiny, fake_graphs):
    model, attn = tiny
    with torch.inference_mode():
        graphs = PrefillGraphs(model)
        start = bass.runtime.graphs.deferred_captures()
        assert graphs.warm(1, attn) == len(PREFILL_WIDTHS)
        assert bass.runtime.graphs.deferred_captures() - start == len(PREFILL_WIDTHS)  # outside any request's decoding
        assert graphs.warm(1, attn) == 0
        ids = [list(range(1, 100))]
        _assert_same_prefill(graphs(ids, attn), _eager(model, ids, attn), ids)


def test_a_feature_drafts_prefill_through_its_graphs_computes_the_eager_one(tiny_dir, fake_graphs):
    """A feature draft's prefill (`bass.runtime.prefill_graphs.prefill` with `features`): its second input is a static
    buffer too, and its width's graph, captured between requests, replays what the eager forward computes."""
    from bass.runtime.prefill_graphs import prefill
    from bench.synthetic import random_feature_draft

    with torch.inference_mode():
        target = load_model(str(tiny_dir("llama")))
        draft, attn = random_feature_draft(target, seed=0).model, get_backend("torch", "cpu")
        H = target.config.hidden_size
        graphs = PrefillGraphs(draft, features=H)
        g = torch.Generator().manual_seed(0)
        for lens in ([9], [9], [4, 12]):  # first eagerly on the buffers, then replayed; two prompts: another key
            ids = [torch.randint(0, target.config.vocab_size, (n,), generator=g).tolist() for n in lens]
            features = torch.randn(len(lens), max(lens), H, generator=g)
            logits, cache, _ = prefill(draft, graphs, ids, attn, features)
            want_logits, want_cache, _ = prefill(draft, None, ids, attn, features)
            torch.testing.assert_close(logits, want_logits, rtol=1e-5, atol=1e-5)
            assert cache.suffix_len.tolist() == lens
            for b, n in enumerate(lens):
                torch.testing.assert_close(cache.suffix_k[:, b, :n], want_cache.suffix_k[:, b, :n], rtol=1e-5,
                                           atol=1e-5)
            graphs.capture_queued()
        assert all(p.graph is not None and p.features.shape[-1] == H for p in graphs._prefills.values())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs; the CPU twins are the tests above")
def test_a_captured_prefill_replays_the_eager_prefill_on_cuda(tiny_dir):
    """A real capture: its replay computes bit for bit what the same padded shapes compute eagerly, and within
    float32 rounding what the prefill at the prompt's own width computes."""
    from bass.runtime.prefill_graphs import prefill

    with torch.inference_mode():
        model = load_model(str(tiny_dir("llama")), device="cuda", dtype=torch.float32).model
        attn = get_backend("ragged", "cuda")
        graphs, twin = PrefillGraphs(model), PrefillGraphs(model, use_graphs=False)
        graphs([[5, 6, 7]], attn)  # queues width 32
        assert graphs.capture_queued() == 1
        ids = [[11, 3, 8, 200, 17, 9, 40, 2, 1, 77]]
        logits, cache, hidden = (x.clone() if isinstance(x, torch.Tensor) else x for x in graphs(ids, attn))
        twin_logits, _, twin_hidden = twin(ids, attn)
        assert torch.equal(logits, twin_logits) and torch.equal(hidden, twin_hidden)
        want_logits, want_cache, want_hidden = prefill(model, None, ids, attn)
        torch.testing.assert_close(logits, want_logits, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(cache.suffix_k[:, 0, :10], want_cache.suffix_k[:, 0, :10], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", ["pad", "split"])
def test_a_backend_that_reads_lengths_on_the_host_runs_eagerly_under_graphs(tiny_dir, fake_graphs, backend):
    """"pad" and "split" read the batch's lengths on the host, which a CUDA graph cannot capture: an engine with
    graphs runs their forwards (prefills, verifies, draft steps) eagerly, captures nothing for them, and gives
    the eager engine's tokens. The "torch" backend, capturable, is captured (so the count can move)."""
    from bass.config import EngineConfig, SamplingParams
    from bass.engine import Engine

    cfg = EngineConfig(target=str(tiny_dir("llama")), draft=str(tiny_dir("llama", 1)))
    eager, graphed = Engine(cfg), Engine(cfg)
    graphed.use_static_shapes(capture=True)
    kw = dict(k=2, params=SamplingParams(max_new_tokens=12), method="bass", drafter="model")
    before = bass.runtime.graphs.captures()
    for _ in range(2):  # the second request would replay what the first queued
        got = graphed.generate(["def f(x):\n", "x = [1, 2"], backend=backend, **kw)
        assert bass.runtime.graphs.captures() == before
    want = eager.generate(["def f(x):\n", "x = [1, 2"], backend=backend, **kw)
    assert got.token_ids == want.token_ids
    graphed.generate(["def f(x):\n"], backend="torch", **kw)
    assert bass.runtime.graphs.captures() > before


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs; the CPU twin is the test above")
@pytest.mark.parametrize("backend", ["pad", "split"])
def test_a_backend_that_reads_lengths_on_the_host_runs_on_a_graphed_cuda_engine(tiny_dir, backend):
    """On CUDA, where capturing such a backend fails ("operation not permitted when stream is capturing"), the
    default engine (graphs on) decodes with it, and gives what the engine without graphs gives."""
    from dataclasses import replace

    from bass.config import EngineConfig, SamplingParams
    from bass.engine import Engine

    cfg = EngineConfig(target=str(tiny_dir("llama")), draft=str(tiny_dir("llama", 1)), dtype="float32",
                       backend=backend)
    graphed, eager = Engine(cfg), Engine(replace(cfg, cuda_graphs=False))
    kw = dict(k=2, params=SamplingParams(max_new_tokens=12), method="bass", drafter="model")
    for _ in range(2):
        got = graphed.generate(["def f(x):\n", "x = [1, 2"], **kw)
    want = eager.generate(["def f(x):\n", "x = [1, 2"], **kw)
    assert got.token_ids == want.token_ids
