"""The engine end to end on tiny random models: greedy exactness, raggedness, bad input."""

import os

import pytest
import torch
import transformers

from bass.config import DraftLengthConfig, SamplingParams
from bass.drafters.base import Drafter, Proposal
from bass.engine.tuning import Tuning

pytestmark = pytest.mark.slow  # every family, drafter and policy end to end

PROMPTS = ["def fib(n):\n", "for i in range(10):\n    print(", "class Stack:\n    def", "x = [1, 2, 3]\n"]
GREEDY = SamplingParams(max_new_tokens=24)



@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "gemma3"])
@pytest.mark.parametrize("drafter", ["ngram", "layer-skip", "model"])
def test_greedy_bass_equals_regular(tiny_engine, family, drafter):
    engine = tiny_engine(family, draft_seed=1)
    regular = engine.generate(PROMPTS, k=2, params=GREEDY, method="regular")
    bass = engine.generate(PROMPTS, k=2, params=GREEDY, method="bass", drafter=drafter)  # fixed L = 3
    assert bass.token_ids == regular.token_ids
    paper = engine.generate(PROMPTS, k=2, params=GREEDY, method="bass", drafter=drafter,
                            draft_length=DraftLengthConfig(policy="heuristic"))
    assert paper.token_ids == regular.token_ids
    assert paper.stats.rounds < regular.stats.rounds or drafter == "model"  # drafting saved verify passes
    single = engine.generate(PROMPTS[:2], k=1, params=GREEDY, method="single", drafter=drafter)
    assert single.token_ids == [regular.token_ids[0], regular.token_ids[2]]


def test_every_cpu_backend_gives_the_same_tokens(tiny_engine):
    engine = tiny_engine("llama", draft_seed=1)
    backends = engine.available_backends()
    assert {"torch", "pad", "split"} <= set(backends)
    if os.environ.get("TRITON_INTERPRET") == "1":
        assert "ragged" in backends
    for backend in backends:
        # the Triton interpreter is slow on CPU: a smaller (still ragged, multi-prompt) batch for it
        prompts, params = (PROMPTS[:2], SamplingParams(max_new_tokens=8)) if backend == "ragged" else (PROMPTS, GREEDY)
        reference = engine.generate(prompts, k=2, params=params, method="regular", backend="torch").token_ids
        for drafter in ("ngram", "model"):
            got = engine.generate(prompts, k=2, params=params, method="bass", drafter=drafter, backend=backend)
            assert got.token_ids == reference, (backend, drafter)


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_matches_transformers_generate(tiny_engine, tiny_dir, family):
    engine = tiny_engine(family)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir(family), dtype=torch.float32).eval()
    tok = engine.tokenizer
    prompt = PROMPTS[0] * 3  # long enough for gemma3's 8-token sliding window to matter
    ids = tok(prompt, return_tensors="pt").input_ids
    ref = hf.generate(ids, max_new_tokens=20, do_sample=False, eos_token_id=None, pad_token_id=0)[0, ids.shape[1]:]
    got = engine.generate(prompt, k=1, params=SamplingParams(max_new_tokens=20), method="bass")
    eos = set(engine.eos_ids)
    expected = []
    for t in ref.tolist():  # transformers was told not to stop; our engine stops at EOS
        expected.append(t)
        if t in eos:
            break
    assert list(got.candidates[0].token_ids) == expected


class ScriptedDrafter(Drafter):
    """Proposes from fixed per-sequence scripts: the true continuation, or tokens certain to be wrong."""

    name = "scripted"

    def __init__(self, scripts):
        self.scripts = scripts  # seq row -> full expected generated ids (or None = always wrong)
        self.rows = list(range(len(scripts)))
        self.prompt_lens = None

    def prefill(self, prompts, samples, capacity, features=None):
        self.prompt_lens = [len(p) for p in prompts for _ in range(samples)]

    def propose(self, histories, lengths, params, u, target_cache):
        L = max(lengths)
        tokens = torch.zeros(len(histories), L, dtype=torch.long)
        for b, (h, n) in enumerate(zip(histories, lengths)):
            row = self.rows[b]
            script = self.scripts[row]
            done = len(h) - self.prompt_lens[row]
            if script is None:
                tokens[b, :n] = (torch.tensor(h[-1]) + 1 + torch.arange(n)) % 300  # rarely the greedy token
            else:
                cont = script[done:done + n]
                tokens[b, :len(cont)] = torch.tensor(cont, dtype=torch.long)
        return Proposal(tokens, torch.tensor(lengths), None)

    def select(self, rows):
        self.rows = [self.rows[r] for r in rows]


def test_ragged_batch_matches_each_sequence_alone(tiny_engine):
    engine = tiny_engine("llama")
    params = SamplingParams(max_new_tokens=30)
    alone = [engine.generate(p, k=1, params=params, method="regular").candidates[0] for p in PROMPTS[:3]]
    # sequence 2 finishes early: stop at the text its regular decoding shows after a few tokens
    early = alone[2].text[4:7]
    assert early and early not in alone[0].text and early not in alone[1].text and early not in alone[2].text[:6]
    params = SamplingParams(max_new_tokens=30, stop=(early,))
    scripts = [list(alone[0].token_ids), None, list(alone[2].token_ids)]
    # the wrong-draft sequence proposes tokens that cannot all be right
    result = engine.generate(PROMPTS[:3], k=1, params=params, method="bass", drafter=ScriptedDrafter(scripts),
                             draft_length=DraftLengthConfig(policy="fixed", l0=4))
    c = result.candidates
    assert c[0].token_ids == alone[0].token_ids and c[0].stats.acceptance_rate == 1.0
    assert c[1].token_ids == alone[1].token_ids and c[1].stats.accepted < c[1].stats.proposed / 2
    assert c[2].finish_reason == "stop" and len(c[2].token_ids) < len(alone[2].token_ids)
    assert c[2].token_ids == alone[2].token_ids[:len(c[2].token_ids)]
    assert c[2].stats.rounds < c[1].stats.rounds  # it left the batch early


def test_events_stream_per_round(tiny_engine):
    engine = tiny_engine("llama")
    events = list(engine.stream(PROMPTS[:2], k=3, params=GREEDY, method="bass"))
    assert events[0].kind == "prefill" and events[-1].kind == "done"
    rounds = [e for e in events if e.kind == "round"]
    result = events[-1].result
    for seq in range(6):
        toks = [t for e in rounds for u in e.updates if u.seq == seq for t in u.new_token_ids]
        assert tuple(toks) == result.candidates[seq].token_ids
        assert "".join(u.new_text for e in rounds for u in e.updates if u.seq == seq) == result.candidates[seq].text
    assert rounds[-1].texts == tuple(c.text for c in result.candidates)
    # the decode timeline: one read time per round, in order, within the decode time; the CPU never waits
    ends = result.stats.round_ends_s
    assert len(ends) == len(result.stats.draft_lengths) > 2 and list(ends) == sorted(ends)
    assert ends[0] > 0 and ends[-1] <= result.stats.decode_s
    assert result.stats.round_waits_s == (0.0,) * len(ends)
    assert result.stats.host_stalls() is None


def test_time_budget_and_cancel(tiny_engine):
    import threading

    engine = tiny_engine("llama")
    cancel = threading.Event()
    events = []
    for e in engine.stream(PROMPTS, k=2, params=SamplingParams(max_new_tokens=200), cancel=cancel):
        events.append(e)
        if e.kind == "round" and e.round == 2:
            cancel.set()
    reasons = {c.finish_reason for c in events[-1].result.candidates}
    assert reasons == {"cancelled"}
    r = engine.generate(PROMPTS, k=2, params=SamplingParams(max_new_tokens=400, time_budget_s=1e-4))
    assert {c.finish_reason for c in r.candidates} == {"budget"}


@pytest.mark.parametrize("kwargs,match", [
    (dict(prompts=""), "prompt 0 is empty"),
    (dict(prompts=["ok", "  "]), "prompt 1 is empty"),
    (dict(k=0), "k must be"),
    (dict(k=65), "k must be"),
    (dict(prompts="x " * 900, params=SamplingParams(max_new_tokens=400)), "context"),
    (dict(method="beam"), "method"),
    (dict(backend="flash"), "backend"),
    (dict(drafter="model"), "drafter"),
])
def test_bad_requests_raise_clear_errors(tiny_engine, kwargs, match):
    engine = tiny_engine("llama")
    args = dict(prompts="def f():", k=2, params=GREEDY)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        engine.generate(args.pop("prompts"), **args)


def test_a_prompt_past_the_devices_limit_is_refused_before_anything_runs(tiny_dir):
    from bass.config import MAX_PROMPT_TOKENS, EngineConfig
    from bass.engine import Engine

    assert MAX_PROMPT_TOKENS["cpu"] < MAX_PROMPT_TOKENS["cuda"]
    engine = Engine(EngineConfig(target=str(tiny_dir("llama")), draft=None, max_prompt_tokens=50))
    with pytest.raises(ValueError, match="at most 50: shorten it"):
        engine.generate("x " * 60, params=GREEDY)
    assert not engine.scheduler._queue  # nothing was queued
    with pytest.raises(ValueError, match="max_prompt_tokens"):
        EngineConfig(max_prompt_tokens=0)


def test_bad_configuration_raises_clear_errors(tiny_dir, tmp_path):
    from tiny import make_model

    from bass.config import EngineConfig
    from bass.engine import Engine

    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1)
    with pytest.raises(ValueError, match="draft"):
        EngineConfig(drafter="model", draft=None)
    for bad in (0, -0.5, 2.5, "low"):
        with pytest.raises(ValueError, match=r"draft_temperature must be a multiple .* in \(0, 2\]"):
            EngineConfig(draft_temperature=bad)
    with pytest.raises(ValueError, match="no draft ships"):  # "auto" finds none for a tiny target
        Engine(EngineConfig(target=str(tiny_dir("llama", 0)), drafter="model"))
    with pytest.raises(ValueError, match="target"):
        Engine(EngineConfig(target="/no/such/model/folder"))
    with pytest.raises(ValueError, match="draft gone.safetensors: no such draft file"):  # before the target loads
        Engine(EngineConfig(target="/no/such/model/folder", draft="gone.safetensors"))
    other = str(make_model(tmp_path / "other", "gemma3", vocab=320))  # another tokenizer
    with pytest.raises(ValueError, match=r"draft vocabulary \(\d+, other\) differs from target vocabulary"):
        Engine(EngineConfig(target=str(tiny_dir("llama")), draft=other, drafter="model"))


@pytest.mark.parametrize("drafter", ["model", "layer-skip"])
def test_static_shape_path_gives_the_same_tokens(tiny_dir, drafter):
    """CPU twin of the CUDA-graph path: persistent arena, in-place compaction, bucketed padding."""
    from bass.config import EngineConfig
    from bass.engine import Engine

    cfg = EngineConfig(target=str(tiny_dir("llama")), draft=str(tiny_dir("llama", 1)))
    eager, static = Engine(cfg), Engine(cfg)
    static.use_static_shapes(capture=False)
    params = SamplingParams(max_new_tokens=16, stop=("\n\n",))  # some sequences stop early: compaction
    for method in ("bass", "single"):
        for prompts in (PROMPTS, PROMPTS[:3]):  # a second, smaller request reuses the arena
            want = eager.generate(prompts, k=3, params=params, method=method, drafter=drafter)
            got = static.generate(prompts, k=3, params=params, method=method, drafter=drafter)
            assert got.token_ids == want.token_ids, (method, len(prompts))
    assert static._arena.base is not None and static._arena.base.batch == 16  # 12 sequences -> bucket 16


def _graphed(tiny_dir, monkeypatch):
    """(eager engine, CPU-twin static engine, request settings, shapes built by each `capture_queued` call).
    Proposals run step by step (`Tuning.proposal_graphs=False`): these tests follow each forward's shapes; the chains
    of whole proposals have theirs (`test_proposal_graphs.py`)."""
    from bass.config import EngineConfig
    from bass.engine import Engine
    from bass.runtime.graphs import GraphedModel

    built: list[int] = []
    capture_queued = GraphedModel.capture_queued
    monkeypatch.setattr(GraphedModel, "capture_queued",
                        lambda self, stop=None: built.append(capture_queued(self, stop)) or built[-1])
    cfg = EngineConfig(target=str(tiny_dir("llama")), draft=str(tiny_dir("llama", 1)))
    eager, static = Engine(cfg, tuning=Tuning(proposal_graphs=False)), Engine(cfg, tuning=Tuning(proposal_graphs=False))
    static.use_static_shapes(capture=False)
    kw = dict(params=GREEDY, method="bass", drafter="model", draft_length=DraftLengthConfig("fixed", l0=2))
    return eager, static, kw, built


def _keys(engine, batch: int) -> set:
    return {(role, key) for role, fwd in (("target", engine._target_fwd), ("draft", engine._draft_fwd))
            for key in fwd._graphs if key.batch == batch}


def test_a_shrunk_batch_runs_in_a_wider_graph_and_captures_after_the_request(tiny_dir, monkeypatch):
    """CPU twin of `bass.runtime.graphs`' deferred captures: after a request at k = 8, one at k = 2 runs in the batch-8
    graphs for its whole length, with the eager engine's tokens; its own shapes are built after "done"."""
    eager, static, kw, built = _graphed(tiny_dir, monkeypatch)
    assert static.generate(PROMPTS[0], k=8, **kw).token_ids == eager.generate(PROMPTS[0], k=8, **kw).token_ids
    wide = _keys(static, 8)
    assert wide and sum(built) == 0  # the first request had nothing to borrow: built at once, nothing queued
    static.scheduler.settle()
    result = static.generate(PROMPTS[0], k=2, **kw)
    assert result.token_ids == eager.generate(PROMPTS[0], k=2, **kw).token_ids
    assert static.scheduler.settle()  # the device thread captures once its batch is over and nothing waits
    own = _keys(static, 2)
    assert {(role, key._replace(batch=8)) for role, key in own} == wide  # each shape it borrowed, now its own
    assert sum(built) == len(own)
    assert static.generate(PROMPTS[0], k=2, **kw).token_ids == result.token_ids  # in its own graphs now
    assert _keys(static, 2) == own and sum(built) == len(own)


def test_a_shape_with_nothing_wider_is_built_at_once(tiny_dir, monkeypatch):
    """A verify width that no batch-8 graph has (L = 3 after a request at L = 2) cannot borrow: it is built in
    the request, while the widths the batch-8 graphs have wait for the request's end."""
    _, static, kw, built = _graphed(tiny_dir, monkeypatch)
    static.generate(PROMPTS[0], k=8, **kw)
    wide = _keys(static, 8)
    kw["draft_length"] = DraftLengthConfig("fixed", l0=3)
    static.scheduler.settle()
    at_once = []
    for event in static.stream(PROMPTS[0], k=2, **kw):
        if event.kind == "round" and not at_once:  # (the batch runs: nothing is captured for it in between)
            at_once = None
    static.scheduler.settle()
    keys = _keys(static, 2)
    at_once = {(role, key) for role, key in keys if (role, key._replace(batch=8)) not in wide}
    assert at_once and {key.width for _, key in at_once} == {4}  # the verify of L = 3, built in the request
    assert {(role, key._replace(batch=8)) for role, key in keys - at_once} == wide
    assert sum(built) == len(wide)


def test_the_queue_is_dropped_when_the_arena_moves(tiny_dir, monkeypatch):
    """Shapes queued on one arena storage are not captured on another (their cache views would be stale)."""
    eager, static, kw, built = _graphed(tiny_dir, monkeypatch)
    static.generate(PROMPTS[0], k=8, **kw)
    assert static.scheduler.settle()
    monkeypatch.setattr(static.runner, "capture_queued", lambda stop=None: None)  # the queue waits (requests come)
    static.generate(PROMPTS[0], k=2, **kw)
    assert static.scheduler.settle()
    target, draft = static._target_fwd, static._draft_fwd
    queued = len(draft._queue)
    assert target._queue and queued and sum(built) == 0
    arena, base = static._arena, static._arena.base
    L, B, C, H, D = base.suffix_k.shape
    arena._allocate(L, base.prefix_k.shape[1], base.prefix_k.shape[2], 2 * B, C - 1, H, D, base.suffix_k.dtype,
                    base.suffix_k.device)  # what a larger request's prefill does to the target's arena
    assert target.capture_queued() == 0 and not target._queue
    assert not any(key.batch == 2 for key in target._graphs)
    assert draft.capture_queued() == queued  # the draft's own arena did not move
    assert static.generate(PROMPTS[0], k=2, **kw).token_ids == eager.generate(PROMPTS[0], k=2, **kw).token_ids


def test_graphs_captured_after_done_are_counted_apart(tiny_dir, monkeypatch, fake_graphs):
    """`bass.runtime.graphs.captures` counts every graph, `deferred_captures` those captured between requests: with
    CUDA graphs faked on the CPU (a replay runs the function again, `fake_graphs`), the k = 2 request after one
    at k = 8 captures nothing inside its decoding, and what the engine captures once it is idle counts in both."""
    import bass.runtime.graphs

    eager, static, kw, _ = _graphed(tiny_dir, monkeypatch)
    static.use_static_shapes(capture=True)
    start, waited = bass.runtime.graphs.deferred_captures(), bass.runtime.graphs.decoding_captures()
    assert static.generate(PROMPTS[0], k=8, **kw).token_ids == eager.generate(PROMPTS[0], k=8, **kw).token_ids
    before = bass.runtime.graphs.captures()
    # after "done": the prompt's width, at which the target's and the draft's prefills ran eagerly
    # (`bass.runtime.prefill_graphs`)
    assert before >= len(_keys(static, 8)) + 2 > 2 and bass.runtime.graphs.deferred_captures() == start + 2
    start += 2
    # what the request waited for, by shape: each batch-8 graph of each model once (nothing to borrow)
    shapes = bass.runtime.graphs.decoding_capture_shapes()[waited:]
    assert sorted(shapes) == sorted(f"{type(fwd.model).__name__} B8 T{key.width} slot {key.slot}"
                                    + " rule" * (key.then is not None)
                                    for fwd in (static._target_fwd, static._draft_fwd) for key in fwd._graphs)
    result = static.generate(PROMPTS[0], k=2, **kw)  # (its stream ends after the captures it queued)
    assert result.token_ids == eager.generate(PROMPTS[0], k=2, **kw).token_ids  # its prefill replayed the graph
    own = len(_keys(static, 2))
    assert own > 0 and bass.runtime.graphs.captures() - before == bass.runtime.graphs.deferred_captures() - start == own
    assert bass.runtime.graphs.decoding_capture_shapes()[waited:] == shapes  # deferred ones are no shape waited for


@pytest.mark.parametrize("drafter", ["ngram", "model"])
def test_static_shape_path_samples_the_same_tokens(tiny_dir, drafter):
    """CPU twin of the sampling rules captured in the graphs (`bass.decode.rules`): with padded batches and widths
    (5 sequences in a bucket of 8; n-gram drafts shorter than L), the same tokens seed for seed. The draft
    is the target itself, so that drafts are accepted and every branch of the rule runs."""
    from bass.config import EngineConfig
    from bass.engine import Engine

    cfg = EngineConfig(target=str(tiny_dir("llama")), draft=str(tiny_dir("llama")))
    eager, static = Engine(cfg), Engine(cfg)
    static.use_static_shapes(capture=False)
    prompt = "for i in range(10):\n    print(i)\n" * 2
    params = SamplingParams(temperature=0.8, top_p=0.9, max_new_tokens=16, seed=5)
    kw = dict(k=5, params=params, method="bass", drafter=drafter,
              draft_length=DraftLengthConfig(policy="fixed", l0=3))
    want = eager.generate(prompt, **kw)
    got = static.generate(prompt, **kw)
    assert got.token_ids == want.token_ids
    assert want.stats.accepted > 0 and len(set(want.token_ids)) > 1


@pytest.mark.parametrize("drafter", ["ngram", "model", "layer-skip"])
def test_sampling_is_reproducible_per_seed(tiny_engine, drafter):
    engine = tiny_engine("llama", draft_seed=1, head_scale=6.0)
    # a repetitive prompt so the n-gram drafter proposes several tokens of varying length
    prompt = "for i in range(10):\n    print(i)\n" * 3
    runs = [engine.generate(prompt, k=4, method="bass", drafter=drafter,
                            draft_length=DraftLengthConfig(policy="heuristic"),
                            params=SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=24, seed=s))
            for s in (0, 0, 1)]
    assert runs[0].token_ids == runs[1].token_ids
    assert runs[0].token_ids != runs[2].token_ids
    assert len(set(runs[0].token_ids)) > 1  # the k samples of one prompt differ
    assert runs[0].stats.proposed > 0


def test_top_p_from_few_candidates_samples_what_the_full_sort_samples(tiny_engine, monkeypatch):
    """With 8 candidates of 384 tokens many rows need the full-sort fallback (in the round loop: a redo after
    the round's synchronisation); every sampled token must still be the full sort's, seed for seed.
    (n-gram drafts: a model draft's own q never needs the redo, `sampling.draft_proposal`, and its
    exactness is test_lossless.py's few-candidates case.)"""
    drafter = "ngram"
    from bass.decode import sampling, verify
    engine = tiny_engine("llama", draft_seed=1, head_scale=6.0)
    prompt = "for i in range(10):\n    print(i)\n" * 2
    params = SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=16, seed=3)
    kw = dict(k=4, method="bass", drafter=drafter, draft_length=DraftLengthConfig(policy="heuristic"), params=params)
    full = engine.generate(prompt, **kw)  # 1024 candidates >= half of 384 tokens: the full sort
    monkeypatch.setattr(sampling, "TOP_P_CANDIDATES", 8)
    redone = []

    verify_top_p = verify.verify_top_p

    def counted(*args, full_sort=False):
        redone.append(full_sort)
        return verify_top_p(*args, full_sort=full_sort)

    monkeypatch.setattr(verify, "verify_top_p", counted)
    assert engine.generate(prompt, **kw).token_ids == full.token_ids
    assert any(redone) and not all(redone)  # some rounds were decided by the candidates, some redone


def test_warm_lengths_give_every_verify_width_bucket_up_to_16():
    """`WARM_LENGTHS` drafts 1..8 and then a length into each width bucket up to 16 (a verify of L drafts is
    L + 1 wide), so no width up to 16 meets its first graph inside a request."""
    from bass.engine import WARM_LENGTHS
    from bass.runtime.graphs import WIDTH_BUCKETS, bucket

    assert set(range(1, 9)) <= set(WARM_LENGTHS)
    assert {bucket(L + 1, WIDTH_BUCKETS) for L in WARM_LENGTHS} == {w for w in WIDTH_BUCKETS if 2 <= w <= 16}


def test_warming_the_draft_lengths_leaves_no_width_to_build_inside_a_request(tiny_dir, monkeypatch):
    """CPU twin of `Engine.warm_draft_lengths`: it drafts each length once at fixed L (32 tokens at most, no
    budget); after it, at k = 8, a k = 2 request drafting L = 3 builds no
    draft width's shape before "done": each of those calls runs in a batch-8 shape of its width. An engine
    without static shapes warms nothing."""
    from dataclasses import replace

    eager, static, kw, built = _graphed(tiny_dir, monkeypatch)
    calls, generate = [], static.generate
    monkeypatch.setattr(static, "generate", lambda prompts, **k: calls.append(k) or generate(prompts, **k))
    monkeypatch.setattr(eager, "generate", lambda prompts, **k: calls.append(k) or generate(prompts, **k))
    eager.warm_draft_lengths(PROMPTS[0], GREEDY, k=8, method="bass", drafter="model")
    assert calls == []  # no static shapes, no graph to build: nothing to warm
    static.warm_draft_lengths(PROMPTS[0], replace(GREEDY, max_new_tokens=100, time_budget_s=9.0),
                              lengths=range(1, 4), k=8, method="bass", drafter="model")
    assert [(c["draft_length"].policy, c["draft_length"].l0) for c in calls] == [("fixed", 1), ("fixed", 2),
                                                                                ("fixed", 3)]
    assert all(c["params"].max_new_tokens == 32 and c["params"].time_budget_s is None for c in calls)
    assert {key.width for _, key in _keys(static, 8)} >= {2, 3, 4}
    kw["draft_length"] = DraftLengthConfig("fixed", l0=3)
    assert static.scheduler.settle()
    monkeypatch.setattr(static.runner, "capture_queued", lambda stop=None: None)  # what is built now, a request built
    lengths = static.generate(PROMPTS[0], k=2, **kw).stats.draft_lengths
    assert static.scheduler.settle()
    at_once = {key.width for _, key in _keys(static, 2)}
    assert set(lengths) == {3, 2, 1, 0}  # L = 3, capped to 2, 1, 0 by the token limit
    assert at_once == {1}  # only the plain step's (no length drafts it): every draft width ran in a batch-8 shape


def test_the_default_backend_is_the_devices_own():
    """EngineConfig's backend "auto" is our Triton kernel on CUDA (where the reference's dense masks cost more) and
    the torch reference elsewhere, also where the Triton interpreter could run the kernel on a CPU; a named one is
    kept. The engine, the CLI and the app's menu start from it."""
    import kernels
    from bass.config import EngineConfig
    from bass.runtime.attention import resolve_backend

    assert EngineConfig().backend == "auto"
    assert resolve_backend("auto", "cpu") == "torch"
    assert resolve_backend("pad", "cpu") == "pad"
    cuda = "ragged" if "ragged" in kernels.available_backends(torch.device("cuda")) else "torch"
    assert resolve_backend("auto", "cuda") == cuda
    with pytest.raises(ValueError, match="backend must be 'auto' or one of"):
        EngineConfig(backend="dense")
