"""Long prompts prefilled a chunk at a time between the batch's rounds (`bass.engine.prefill`): the same cache,
logits and features as one forward, the same tokens, other visitors served meanwhile, a Stop seen before the next
chunk. On the CPU (float32, the CPU's chunk size patched), wherever the tests run."""

import threading

import pytest
import torch

import bass.engine.prefill as prefill_module
from bass.config import SamplingParams
from bass.engine.prefill import MIN_CHUNK_TOKENS, ChunkedPrefill, ChunkPacer
from bass.runtime.attention import get_backend

LONG = "for i in range(10):\n    print(i * i)\n" * 12 + "def total(xs):\n"
SHORT = "def fib(n):\n"


def test_chunks_give_the_one_forward_prefill(tiny_engine):
    engine = tiny_engine("llama", device="cpu")
    model, attn = engine.target.model, get_backend("torch", torch.device("cpu"))
    ids = [engine.tokenizer.encode(LONG), engine.tokenizer.encode(SHORT + "    return n")]
    lens = [len(p) for p in ids]
    whole = model.new_cache(2, max(lens))
    padded = torch.tensor([p + [0] * (max(lens) - len(p)) for p in ids])
    want = model(padded, whole, torch.tensor(lens), attn, last_only=True)
    want_hidden = model.hidden
    chunks = ChunkedPrefill(model, ids, attn)
    steps = 0
    while not chunks.finished:
        chunks.step(7)
        steps += 1
    assert steps == -(-max(lens) // 7) and chunks.done == lens
    got = chunks.result()
    torch.testing.assert_close(got.logits, want, atol=1e-4, rtol=1e-4)
    assert torch.equal(got.cache.suffix_len, whole.suffix_len)
    for g, n in enumerate(lens):  # each prompt's K/V and features at its own positions
        torch.testing.assert_close(got.cache.suffix_k[:, g, :n], whole.suffix_k[:, g, :n], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(got.features[g, :n], want_hidden[g, :n], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("drafter", ["model", "feature"])
def test_a_chunked_prompt_decodes_the_same_tokens(tiny_engine, monkeypatch, drafter):
    seed = dict(feature_seed=3) if drafter == "feature" else dict(draft_seed=1)
    engine = tiny_engine("llama", device="cpu", **seed)
    params = SamplingParams(max_new_tokens=16)
    whole = engine.generate(LONG, k=2, params=params, drafter="model")
    monkeypatch.setitem(prefill_module.CHUNK_TOKENS, "cpu", 16)
    events = list(engine.stream(LONG, k=2, params=params, drafter="model"))
    progress = [e.prefilled for e in events if e.kind == "prefilling"]
    total = len(engine.tokenizer.encode(LONG))
    assert len(progress) == -(-total // 16) and progress[-1] == (total, total)
    assert [e.kind for e in events].index("prefill") > [e.kind for e in events].index("prefilling")
    assert [c.token_ids for c in events[-1].result.candidates] == [c.token_ids for c in whole.candidates]


@pytest.fixture
def slow_chunks(monkeypatch):
    """Chunks of 4 tokens that take 20 ms each, as a long prompt's would on a slow device: the test's visitor B
    arrives while most of them are still to come."""
    import time

    monkeypatch.setitem(prefill_module.CHUNK_TOKENS, "cpu", 4)
    step = ChunkedPrefill.step
    monkeypatch.setattr(ChunkedPrefill, "step", lambda self, tokens: time.sleep(0.02) or step(self, tokens))


def _race(engine, stop_first_after: int | None = None) -> list[tuple[str, str]]:
    """A long prompt (A) and, once A's prefill is under way, a short one (B): every event of both, in order."""
    seen, lock, a_started = [], threading.Lock(), threading.Event()
    cancel = threading.Event()

    def run(name, prompt, **kw):
        for e in engine.stream(prompt, k=2, params=SamplingParams(max_new_tokens=8), **kw):
            with lock:
                seen.append((name, e.kind))
            if e.kind == "prefilling":
                a_started.set()
                if stop_first_after is not None and e.prefilled[0] >= stop_first_after:
                    cancel.set()

    a = threading.Thread(target=run, args=("A", LONG), kwargs={"cancel": cancel})
    a.start()
    assert a_started.wait(30)
    run("B", SHORT)
    a.join(60)
    return seen


def test_a_long_prompt_holds_no_other_visitor(tiny_engine, slow_chunks):
    engine = tiny_engine("llama", draft_seed=1, device="cpu")
    seen = _race(engine)
    order = [f"{n} {k}" for n, k in seen]
    assert order.index("B done") < order.index("A prefill")  # B was served while A's prompt was still prefilling
    assert "B queued" not in order
    first_b = next(i for i, o in enumerate(order) if o.startswith("B "))
    assert order[first_b:order.index("B prefill")].count("A prefilling") == 0  # B's few chunks first


def test_a_stop_ends_a_prefill_before_its_next_chunk(tiny_engine, slow_chunks):
    engine = tiny_engine("llama", draft_seed=1, device="cpu")
    seen = _race(engine, stop_first_after=8)
    a = [k for n, k in seen if n == "A"]
    assert a[-1] == "done" and "prefill" not in a and a.count("prefilling") <= 4  # cancelled within a chunk or two
    assert ("B", "done") in seen


def test_the_pacer_gives_the_chunks_at_most_half_the_rounds_time():
    pacer = ChunkPacer(cap=32)  # times in binary fractions, so that the sums are exact
    assert prefill_module.PREFILL_SHARE == 0.5 and pacer.tokens(decoding=True) == 32  # nothing measured yet
    pacer.admitted(10.0)
    pacer.chunk_done(32, 1.0)  # 1/32 s a token
    pacer.admitted(11.5)  # a round of 0.5 s beside the 1 s chunk: the chunks are 0.75 s ahead of their half
    assert pacer.round_s == 0.5 and pacer.tokens(decoding=True) == 0
    for now in (12.0, 12.5):
        pacer.admitted(now)
    assert pacer.tokens(decoding=True) == 0  # 0.25 s still to give back
    pacer.admitted(13.0)
    assert pacer.tokens(decoding=True) == 8  # even again: half a round's worth, 0.25 s at 1/32 s a token
    pacer.chunk_done(8, 4.0)  # the cache grew: half a second a token
    assert pacer.tokens(decoding=False) == 32  # no one decoding: nobody to hold, the cap at once
    pacer.admitted(17.5)  # (the chunks ran alone, owing nothing) a round of 0.5 s
    assert pacer.tokens(decoding=True) == MIN_CHUNK_TOKENS  # when its turn comes, a prompt always moves on


def test_chunks_shrink_while_another_visitor_decodes(tiny_engine, monkeypatch):
    """Chunks that cost far more than a round (a long prompt's on a slow device) run at most every other round
    while B decodes, and at the cap, every round, once B is done."""
    import time

    monkeypatch.setitem(prefill_module.CHUNK_TOKENS, "cpu", 16)
    step, sizes = ChunkedPrefill.step, []
    monkeypatch.setattr(ChunkedPrefill, "step",
                        lambda self, tokens: sizes.append(tokens) or time.sleep(0.005 * tokens) or step(self, tokens))
    engine = tiny_engine("llama", draft_seed=1, device="cpu")
    seen = _race(engine)
    order = [f"{n} {k}" for n, k in seen]
    assert order.index("B done") < order.index("A prefill")
    during_b = order[order.index("B prefill"):order.index("B done")]
    assert during_b.count("A prefilling") < during_b.count("B round") / 2  # 80 ms chunks beside ms rounds
    after_b = order[order.index("B done"):order.index("A prefill")]
    assert after_b.count("A prefilling") >= 2 and sizes[-1] == 16  # alone again: a chunk of the cap each time
