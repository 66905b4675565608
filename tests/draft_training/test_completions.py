"""The completions stage on the tiny target (CPU): every prompt gets `samples` completions, each written as
prompt ids + completion ids + end-of-text, whatever the batch's width; and the completions of earlier cycles,
kept, join a run's fresh ones."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tiny_pair import TINY_DRAFT as SHAPE

from bass import Engine, EngineConfig
from bass.models.loader import load_model
from draft_training.cli import main
from draft_training.completions import generate_completions
from draft_training.config import TrainConfig
from draft_training.prompts import read_prompts
from draft_training.train import teacher_from, train
from draft_training.windows import load_completions


@pytest.fixture(scope="module")
def engine(target_dir) -> Engine:
    return Engine(EngineConfig(target=str(target_dir), draft=None, drafter="ngram"), target=load_model(str(target_dir)))


def _records(path, eot: int) -> list[list[int]]:
    ids = np.fromfile(path, dtype=np.uint32).tolist()
    assert ids and ids[-1] == eot
    records, start = [], 0
    for i, t in enumerate(ids):
        if t == eot:
            records.append(ids[start:i])
            start = i + 1
    return records


@pytest.mark.parametrize("batch_rows", [3, 64])  # one prompt a batch (3 // 3), and all of them in one batch
def test_every_prompt_gets_its_samples_whatever_the_batch(engine, corpus, tmp_path, batch_rows):
    eot = json.loads((corpus / "manifest.json").read_text())["end_of_text_id"]
    prompts = read_prompts(corpus / "prompts.jsonl")
    out = tmp_path / "completions.bin"
    stats = generate_completions(engine, corpus / "prompts.jsonl", out, samples=3, max_new_tokens=5,
                                 batch_rows=batch_rows, end_of_text=eot, limit=4)
    records = _records(out, eot)
    chosen = ([p for p in prompts if p["style"] == "completion"][:2] + [p for p in prompts if p["style"] == "chat"][:2])
    assert stats["prompts"] == 4 and len(records) == 4 * 3

    generated = 0
    for j, p in enumerate(chosen):  # written in prompt order, each prompt's samples together
        (ids,) = engine.encode([p["prompt"]], chat=p["style"] == "chat")
        for rec in records[3 * j:3 * j + 3]:
            assert rec[:len(ids)] == ids and 1 <= len(rec) - len(ids) <= 5
            generated += len(rec) - len(ids)
    assert stats["generated_tokens"] == generated and stats["tokens"] == generated + sum(
        3 * (len(engine.encode([p["prompt"]], chat=p["style"] == "chat")[0]) + 1) for p in chosen)


def test_a_stage_without_samples_is_refused(engine, corpus, tmp_path):
    with pytest.raises(ValueError, match="samples and batch_rows must be >= 1"):
        generate_completions(engine, corpus / "prompts.jsonl", tmp_path / "c.bin", samples=0)


def test_kept_completions_join_the_fresh_ones_as_one_file_would(corpus, target_dir, tmp_path):
    """Training on [fresh, kept] is training on the two files joined: the same windows, the same weights."""
    tokens = np.fromfile(corpus / "train.bin", dtype=np.uint32)
    fresh, kept, joined = tmp_path / "fresh.bin", tmp_path / "kept.bin", tmp_path / "joined.bin"
    tokens[:3000].tofile(fresh)
    tokens[3000:5000].tofile(kept)
    tokens[:5000].tofile(joined)
    assert np.array_equal(load_completions([fresh, kept]), np.fromfile(joined, dtype=np.uint32))

    teacher = teacher_from(load_model(str(target_dir)).model)
    cfg = TrainConfig(loss="distill", batch_size=4, micro_batch=2, seq_len=32, lr=3e-3, warmup_steps=2, max_steps=4,
                      eval_every=2, completion_share=0.5)
    runs = [train(teacher, corpus / "train.bin", comp, corpus / "heldout.bin", SHAPE, cfg, log=lambda _: 0)
            for comp in ([fresh, kept], joined, fresh)]
    (two, _), (one, _), (alone, _) = runs
    assert all(torch.equal(a, b) for a, b in zip(two.state_dict().values(), one.state_dict().values(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(two.state_dict().values(), alone.state_dict().values(),
                                                     strict=True))


def test_a_kept_completions_file_that_is_not_there_is_refused_before_the_target_loads(tmp_path, capsys):
    rc = main(["train", "--target", str(tmp_path / "no-model"), "--work", str(tmp_path / "work"),
               "--kept-completions", str(tmp_path / "cycle17.bin")])
    assert rc == 2 and "--kept-completions: no file" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no completions file"):
        load_completions([tmp_path / "cycle17.bin"])
