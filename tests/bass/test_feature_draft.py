"""The feature draft (EAGLE-style): its cache bookkeeping across rounds, and exactness of BASS with it."""

import itertools

import pytest
import torch

import bass.drafters.feature
from bass.config import DraftLengthConfig, SamplingParams
from bass.decode.draft_length import DraftLengthPolicy
from bass.drafters.feature import FeatureDrafter
from bass.runtime.attention import get_backend
from bass.runtime.transfer import ints_to_device

pytestmark = pytest.mark.slow  # engine runs with a feature draft

PROMPTS = ["def fib(n):\n", "for i in range(10):\n    print("]
# (policy, greedy, scripted lengths or None): full drafts; runs of plain rounds (L = 0) long enough for the
# drafter to catch up in between (CATCH_UP); growing drafts; both sampling modes
CASES = [(DraftLengthConfig(), True, None), (DraftLengthConfig(), False, (0,) * 9 + (3,) * 3),
         (DraftLengthConfig(policy="fixed", l0=3), False, None), (DraftLengthConfig(policy="heuristic"), False, None)]


class RecordingDrafter(FeatureDrafter):
    """Keeps, for every proposal, each sequence's history and the draft's logits of its first draft token.
    A proposal launched ahead (histories None) is based on the histories its round's commit brings."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: list[tuple[list[int], torch.Tensor]] = []
        self.ahead: list[torch.Tensor] = []  # [B, V] first-step logits of proposals launched ahead

    def withdraw(self):
        self.ahead.clear()  # that proposal is made again
        super().withdraw()

    def commit(self, histories):
        for logits in self.ahead:
            self.seen.extend((list(h), row) for h, row in zip(histories, logits, strict=True))
        self.ahead.clear()
        super().commit(histories)

    def propose(self, histories, lengths, params, u, target_cache):
        inner, seen, ahead = self.forward, self.seen, self.ahead

        class Record:  # the draft's forward, noting the step that feeds the pending entries and drafts d_1
            hidden = None

            def __call__(self, tok, cache, q_len, attn, **kw):
                logits = inner(tok, cache, q_len, attn, **kw)
                self.hidden = inner.hidden
                if kw.get("last_only") and histories is None:
                    ahead.append(logits[:, -1].clone())
                elif kw.get("last_only"):
                    seen.extend((list(h), logits[b, -1].clone()) for b, h in enumerate(histories))
                return logits

        self.forward = Record()
        try:
            return super().propose(histories, lengths, params, u, target_cache)
        finally:
            self.forward = inner


def _from_scratch(engine, history: list[int]) -> torch.Tensor:
    """The draft's logits of the token after `history`, with every entry fed the target's true features
    computed afresh: what the incremental cache must reproduce."""
    attn = get_backend("torch", engine.device)
    target, draft = engine.target.model, engine.draft.model
    ids = torch.tensor([history[:-1]])
    target(ids, target.new_cache(1, ids.shape[1]), torch.tensor([ids.shape[1]]), attn)
    features = target.hidden  # [1, n-1, H]: f_0 .. f_{n-2}
    tokens = torch.tensor([history[1:]])  # x_1 .. x_{n-1}
    logits = draft(tokens, draft.new_cache(1, tokens.shape[1]), torch.tensor([tokens.shape[1]]), attn,
                   features=features, last_only=True)
    return logits[0, -1]


@pytest.mark.parametrize(("policy", "greedy", "script"), CASES,
                         ids=["fixed-greedy", "runs-of-L0-sampled", "fixed3-sampled", "heuristic-sampled"])
def test_draft_cache_holds_the_targets_true_features(tiny_engine, monkeypatch, policy, greedy, script):
    monkeypatch.setattr(bass.drafters.feature, "CATCH_UP", 4)  # catch up within a short run of rounds without drafts
    if script is not None:
        lengths = itertools.cycle(script)
        monkeypatch.setattr(DraftLengthPolicy, "lengths", lambda self, seqs: [next(lengths)] * len(seqs))
    engine = tiny_engine("llama", feature_seed=3, backend="torch")
    drafter = RecordingDrafter(engine.draft.model, engine.target.model, get_backend("torch", engine.device))
    params = SamplingParams(max_new_tokens=32, seed=1, **({"temperature": 0.0} if greedy else {}))
    result = engine.generate(PROMPTS, k=3, params=params, method="bass", drafter=drafter, draft_length=policy)
    # at least one proposal for each of the 6 sequences
    assert result.stats.proposed > 0 and len(drafter.seen) >= 6
    for history, got in drafter.seen:
        torch.testing.assert_close(got, _from_scratch(engine, history), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("look_ahead", [False, True], ids=["in-order", "look-ahead"])
def test_runs_without_drafts_keep_the_first_draft_step_narrow(tiny_engine, monkeypatch, look_ahead):
    """Rounds without drafts leave entries to feed; the drafter feeds them once they reach CATCH_UP, so no
    draft forward is wider than a backlog below CATCH_UP plus one verify's columns."""
    monkeypatch.setattr(bass.drafters.feature, "CATCH_UP", 4)
    engine = tiny_engine("llama", feature_seed=3, backend="torch", look_ahead=look_ahead)
    drafter = FeatureDrafter(engine.draft.model, engine.target.model, get_backend("torch", engine.device))
    widths, model = [], engine.draft.model

    class Recording:  # the draft model, noting each forward's width
        def __call__(self, tok, *args, **kwargs):
            widths.append(tok.shape[1])
            return model(tok, *args, **kwargs)

        hidden = property(lambda self: model.hidden)

    drafter.forward = Recording()
    # 11 plain rounds, then L = 2
    policy = DraftLengthConfig()  # (fixed: decided ahead)
    params = SamplingParams(max_new_tokens=40, seed=3)
    script = iter([0] * 11 + [2] * 1000)  # the policy's lengths, scripted
    monkeypatch.setattr(DraftLengthPolicy, "lengths", lambda self, seqs: [next(script)] * len(seqs))
    engine.generate(PROMPTS, k=2, params=params, method="bass", drafter=drafter, draft_length=policy)
    assert widths[:2] == [4, 4]  # the first forwards fed backlogs as they reached CATCH_UP, in rounds 4 and 8 ...
    assert max(widths) <= 4 + 3  # ... so no feed is wider than that plus L + 1 columns (not 11 + 1)


@pytest.mark.parametrize("static", [False, True], ids=["eager", "static-shapes"])
def test_greedy_bass_with_a_feature_draft_equals_regular(tiny_engine, static):
    engine = tiny_engine("llama", feature_seed=6 if static else 5)  # its own engine: static shapes stick
    if static:
        engine.use_static_shapes(capture=False)  # the CUDA-graph path's padding and buckets, run eagerly
    params = SamplingParams(temperature=0.0, max_new_tokens=24)
    bass = engine.generate(PROMPTS, k=3, params=params, method="bass", drafter="model")
    regular = engine.generate(PROMPTS, k=3, params=params, method="regular")
    single = engine.generate(PROMPTS, k=3, params=params, method="single", drafter="model")
    want = regular.token_ids
    assert bass.token_ids == want
    assert single.token_ids == want
    assert bass.stats.drafter == "model" and bass.stats.proposed > 0


def test_host_ints_reach_the_device_in_order():
    for values in ([3, 1, 2], list(range(100)), [7]):
        got = ints_to_device(values, torch.device("cpu"))
        assert got.dtype == torch.long and got.tolist() == values


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the pinned path needs CUDA; the CPU twin is above")
def test_host_ints_pinned_copies_are_not_overwritten_before_they_run():
    dev = torch.device("cuda")
    torch.cuda._sleep(50_000_000)  # the stream runs behind the host, as it does with look-ahead
    first = ints_to_device([1, 2, 3], dev)
    second = ints_to_device([4, 5, 6], dev)  # no synchronisation between the two
    assert first.tolist() == [1, 2, 3] and second.tolist() == [4, 5, 6]


def test_a_reduced_vocabulary_is_one_rule_key_across_requests(tiny_engine):
    """Each request builds its drafter, but the draft's subset (a key of its captured graphs' rule) is the
    draft model's: a new one per request would capture the draft's graphs again in every request."""
    engine = tiny_engine("llama", feature_seed=3, feature_vocab=64)
    first, second = engine.new_drafter("model"), engine.new_drafter("model")
    assert first.subset is not None and first.subset is second.subset
    assert torch.equal(first.subset.ids, engine.draft.model.vocab)


@pytest.mark.parametrize("vocab", [None, 64])
def test_a_folded_head_gives_the_two_gemm_logits_and_the_same_features(tiny_dir, vocab):
    """`fold_head` reads n through W_head W_out [V', d] instead of f̂ through W_head [V', H]: in float32 the
    logits agree to rounding, f̂ (what the next step feeds) is the same, and the table is d / H the size."""
    from bass.models.loader import load_model
    from bench.synthetic import random_feature_draft

    loaded = load_model(str(tiny_dir("llama", 0)), device="cpu")
    folded = random_feature_draft(loaded, seed=5, vocab=vocab).model
    plain = random_feature_draft(loaded, seed=5, vocab=vocab).model
    plain._tables, plain.folded = (plain._tables[0], loaded.model.head if vocab is None
                                   else loaded.model.head[plain.vocab]), False  # undo the fold
    assert folded.folded and folded.head.shape == (plain.head.shape[0], folded.config.hidden_size)
    assert folded.config.hidden_size < plain.head.shape[1]
    attn = get_backend("torch", torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, loaded.config.vocab_size, (2, 5), generator=g)
    features = torch.randn(2, 5, loaded.config.hidden_size, generator=g)
    q_len = torch.tensor([5, 3])
    for last_only in (False, True):
        outs = []
        for draft in (folded, plain):
            logits = draft(tokens, draft.new_cache(2, 5), q_len, attn, features=features, last_only=last_only)
            outs.append((logits, draft.hidden))
        (a, fa), (b, fb) = outs
        assert a.shape == b.shape and fa.shape == fb.shape == (2, 1 if last_only else 5, loaded.config.hidden_size)
        torch.testing.assert_close(fa, fb, rtol=0, atol=0)
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
        assert not torch.equal(a, torch.zeros_like(a))


def test_draft_cache_holds_the_true_features_with_look_ahead_and_changing_lengths(tiny_engine, monkeypatch):
    """As above, with the round loop's look-ahead (CUDA's default: a proposal launched before the verify it
    follows is read) and a length that changes every round, plain rounds among them. A finished row riding
    along to the end of the batch (`RIDE_ALONG_ROWS`) is still proposed for; its proposals are never used,
    so only the rows still decoding are checked."""
    engine = tiny_engine("llama", feature_seed=3, backend="torch", look_ahead=True)
    drafter = RecordingDrafter(engine.draft.model, engine.target.model, get_backend("torch", engine.device))
    script = iter([3, 5, 0, 2, 7, 1, 0, 3, 6, 4] * 100)
    monkeypatch.setattr(DraftLengthPolicy, "lengths", lambda self, seqs: [next(script)] * len(seqs))
    params = SamplingParams(max_new_tokens=40, seed=1)  # sampled, as the app and the benchmarks decode
    result = engine.generate(PROMPTS, k=3, params=params, method="bass", drafter=drafter,
                             draft_length=DraftLengthConfig())  # (fixed: decided ahead)
    done = {tuple(history) for history, _ in drafter.seen for c in result.candidates
            if len(history) >= len(c.token_ids) and tuple(history[-len(c.token_ids):]) == c.token_ids}
    live = [(history, got) for history, got in drafter.seen if tuple(history) not in done]
    assert result.stats.proposed > 0 and len(live) >= 30
    for history, got in live:
        torch.testing.assert_close(got, _from_scratch(engine, history), rtol=1e-4, atol=1e-4)
