"""Losslessness with the shipped draft on the embedded target: chi-square of the first speculative token.

As `test_lossless.py`, but on the real 1.5B target with its shipped feature draft, so CUDA only (the 64 x 50
generations take minutes there and most of an hour on a 2-core CPU). Its CPU twin is test_lossless.py's
"feature" case: the same rule and the same drafter code on a tiny target with a random feature draft.

The exact marginal of the second token is computed with the engine's own target forward,

    P(y2 = v) = sum_{y1} p(y1 | prompt) p(v | prompt, y1),

because the claim under test is that speculative sampling reproduces the target the engine runs (its bf16
forward), not that the engine's forward equals another implementation's (test_embedded_engine.py checks that).
BASS_TARGET may name the target's .gguf where the embedded packages are not installed (the GPU machine).
"""

import os

import pytest
import torch

from bass import Engine, EngineConfig, SamplingParams
from bass.config import DraftLengthConfig
from bass.decode.sampling import process_logits
from bass.runtime.attention import get_backend

pytestmark = [pytest.mark.gpu, pytest.mark.embedded,
              pytest.mark.skipif(not torch.cuda.is_available(),
                                 reason="CUDA only; its CPU twin is test_lossless.py's feature case")]

PROMPT = "# utilities\ndef "
PARAMS = SamplingParams(temperature=1.0, top_p=0.95)  # a broad first and second token


def _expected_second_token(engine: Engine) -> torch.Tensor:
    model, attn = engine.target.model, get_backend("torch", engine.device)
    ids = engine.encode(PROMPT)[0]

    def last_probs(batch: torch.Tensor) -> torch.Tensor:
        cache = model.new_cache(batch.shape[0], batch.shape[1])
        q_len = torch.full((batch.shape[0],), batch.shape[1], device=engine.device)
        return process_logits(model(batch, cache, q_len, attn, last_only=True)[:, 0], PARAMS).double()

    with torch.inference_mode():
        p1 = last_probs(torch.tensor([ids], device=engine.device))[0]
        y1 = torch.nonzero(p1 > 0).squeeze(1)
        batch = torch.cat([torch.tensor([ids], device=engine.device).expand(len(y1), -1), y1[:, None]], 1)
        p2 = last_probs(batch)
    return (p1[y1] @ p2).cpu()


def _chi_square_pvalue(observed: torch.Tensor, expected: torch.Tensor) -> float:
    """Pearson's chi-square p-value: bins expected below 5 pooled into one; P(chi2_df >= x) = Q(df/2, x/2)."""
    big = expected >= 5
    obs = torch.cat([observed[big], observed[~big].sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    stat = ((obs - exp) ** 2 / exp).sum()
    return float(torch.special.gammaincc(torch.tensor((len(obs) - 1) / 2), stat / 2))


def test_second_token_follows_the_target_with_the_shipped_draft():
    engine = Engine(EngineConfig(target=os.environ.get("BASS_TARGET", "embedded"), backend="ragged"))
    assert engine.default_drafter == "model"
    expected = _expected_second_token(engine)
    samples, proposed, accepted = [], 0, 0
    for seed in range(50):
        p = SamplingParams(temperature=PARAMS.temperature, top_p=PARAMS.top_p, max_new_tokens=3, seed=seed)
        r = engine.generate(PROMPT, k=64, params=p, method="bass", drafter="model",
                            draft_length=DraftLengthConfig())  # the round drafts one token
        samples += [c.token_ids[1] for c in r.candidates if len(c.token_ids) > 1]
        proposed, accepted = proposed + r.stats.proposed, accepted + r.stats.accepted
    assert proposed > 0 and accepted > 0  # the draft was used (on this prompt it is often right)
    counts = torch.bincount(torch.tensor(samples), minlength=len(expected)).double()
    # the target's bf16 numerics may move a token across the top-p cut between batch shapes: allow a trace
    assert counts[expected == 0].sum() <= 0.005 * len(samples)
    keep = expected > 0
    assert _chi_square_pvalue(counts[keep], expected[keep] / expected.sum() * counts[keep].sum()) > 1e-3
