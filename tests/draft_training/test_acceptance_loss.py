"""The acceptance objective (`draft_training.acceptance_loss`): its nucleus is the engine's processed p, its α is
the expected acceptance the pipeline measures, its gradient raises α, and the feature loss subtracts it."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_pair import TINY_DRAFT

from bass.config import SamplingParams
from bass.decode.sampling import process_logits
from bass.models.loader import load_model
from draft_training.acceptance_loss import acceptance, nucleus
from draft_training.config import TrainConfig
from draft_training.train import SAMPLED, expected_acceptance, feature_loss, new_student, teacher_from

PARAMS = SamplingParams(temperature=0.8, top_p=0.95)


def _logits(rows: int, vocab: int, seed: int, scale: float = 3.0) -> torch.Tensor:
    return torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * scale


def test_the_nucleus_is_the_engines_processed_distribution():
    """With k covering the vocabulary, p scattered back to the ids is `process_logits`'s p (top-p exact)."""
    t = _logits(16, 50, 0)
    p, pos = nucleus(t, PARAMS, k=50)
    dense = torch.zeros_like(t).scatter(-1, pos, p)
    torch.testing.assert_close(dense, process_logits(t, PARAMS), rtol=1e-5, atol=1e-6)
    p8, _ = nucleus(t, PARAMS, k=8)  # fewer candidates: the same head, as long as the nucleus fits in it
    fits = (p[:, 8:] == 0).all(-1)
    assert bool(fits.any())
    torch.testing.assert_close(p8[fits], p[fits, :8])


def test_alpha_is_the_pipelines_expected_acceptance_over_a_proposal_vocabulary():
    """α over a reduced vocabulary holding every token of the nucleus is Σ min(p, q) with the engine's processed p
    and the draft's q at its temperature scale (softmax over the vocabulary, not truncated: the objective's q; 0
    outside the vocabulary), for each scale. The pipeline's measure, which truncates q by top-p too, reads 1 for
    a draft equal to the target."""
    t, s_full = _logits(12, 60, 1), _logits(12, 60, 2)
    t[:, 40:] -= 30.0  # ids 40 .. 59 lie far outside every nucleus
    vocab = torch.arange(0, 48, dtype=torch.long)
    p_dense = process_logits(t, PARAMS)
    assert bool((p_dense[:, 48:] == 0).all())
    p, pos = nucleus(t, PARAMS, vocab, k=48)
    s = s_full[:, vocab]  # the draft's logits over its vocabulary [12, 48]
    for scale in (1.0, 0.7):
        got = acceptance(p, pos, s, PARAMS.temperature * scale)
        q = torch.softmax(s / (PARAMS.temperature * scale), -1)  # untruncated q: the objective's
        want = torch.minimum(p_dense[:, vocab], q).sum(-1)
        torch.testing.assert_close(got, want)
    # the measure the pipeline reports truncates q by top-p as well: with q = p they agree at 1
    same = t[:, vocab]
    torch.testing.assert_close(expected_acceptance(p_dense, same, PARAMS, 1.0, vocab), torch.ones(12))


def test_a_gradient_step_on_the_objective_raises_alpha():
    t = _logits(32, 40, 3, scale=1.0)
    s = _logits(32, 40, 4, scale=1.0).requires_grad_(True)
    p, pos = nucleus(t, PARAMS)
    before = acceptance(p, pos, s, 0.56)
    (-before.sum()).backward()
    with torch.no_grad():
        after = acceptance(p, pos, s - 1.0 * s.grad, 0.56)
    assert float(after.mean()) > float(before.detach().mean()) + 0.005
    assert bool((s.grad.abs().sum(-1) > 0).all())


def test_the_feature_loss_subtracts_the_weighted_acceptance_of_every_step(target_dir):
    """value(λ_α) = value(0) − λ_α Σ_s λ_2^(s−1) mean α_s, the same student and window."""
    target = load_model(str(target_dir))
    teacher = teacher_from(target.model)
    student = new_student(teacher, TINY_DRAFT, seed=0, feature=True)
    window = torch.randint(0, target.config.vocab_size, (2, 17), generator=torch.Generator().manual_seed(5))
    base = TrainConfig(loss="feature", unroll_steps=2)
    weighted = TrainConfig(loss="feature", unroll_steps=2, acceptance_weight=0.5, acceptance_scale=0.7)
    with torch.no_grad():
        v0, _ = feature_loss(student, teacher, window, base, metrics=False)
        v1, _ = feature_loss(student, teacher, window, weighted, metrics=False)
        from draft_training.train import feature_logits

        _, _, t_logits, steps = feature_logits(student, teacher, window, base)
        p, pos = nucleus(t_logits, SAMPLED)
        alphas = [float(acceptance(p, pos, s, SAMPLED.temperature * 0.7).mean()) for s in steps]
    assert 0.0 < alphas[0] < 1.0
    assert float(v1) == pytest.approx(float(v0) - 0.5 * (alphas[0] + 0.5 * alphas[1]), abs=1e-5)


def test_the_objective_is_refused_outside_its_setting():
    with pytest.raises(ValueError, match="feature loss"):
        TrainConfig(loss="distill", acceptance_weight=1.0)
    with pytest.raises(ValueError, match="acceptance_scale"):
        TrainConfig(loss="feature", acceptance_scale=0.0)
    with pytest.raises(ValueError, match="temperature"):
        nucleus(_logits(2, 10, 0), SamplingParams(temperature=0.0))


def test_the_command_line_trains_with_the_objective_and_records_it(target_dir, tmp_path):
    """`--acceptance-weight` reaches the run and its weight stands in the exported recipe."""
    from draft_training.cli import main
    from draft_training.config import CorpusConfig
    from draft_training.corpus import build_corpus

    site = tmp_path / "site-packages" / "pkg"
    site.mkdir(parents=True)
    for i in range(30):
        (site / f"m{i}.py").write_text(f"def f{i}(x):\n    return x * {i} + {i % 7}\n" * 12)
    from transformers import AutoTokenizer

    work = tmp_path / "work"
    build_corpus(CorpusConfig(max_train_tokens=50_000, heldout_fraction=0.1, min_bytes=50, prompts=4), work,
                 AutoTokenizer.from_pretrained(target_dir), roots=[site.parent])
    out = tmp_path / "draft.safetensors"
    args = ["train", "--target", str(target_dir), "--work", str(work), "--out", str(out), "--loss", "feature",
            "--max-steps", "3", "--eval-every", "3", "--batch-size", "2", "--seq-len", "32", "--draft-vocab", "0",
            "--hidden", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--intermediate", "64",
            "--acceptance-weight", "1.5", "--acceptance-scale", "0.85"]
    assert main(args) == 0
    recipe = json.loads(out.with_suffix(".json").read_text())["train"]
    assert recipe["acceptance_weight"] == 1.5 and recipe["acceptance_scale"] == 0.85
