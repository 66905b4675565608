"""A training run in segments (`draft_training.checkpoint`): stopped and resumed, it is the run straight through;
a resume with other settings, or with nothing to resume, is refused with what to do (CPU, a tiny target)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from tiny_pair import TINY_DRAFT

from bass.models.draft import read_draft_file
from bass.models.loader import load_model
from draft_training.config import TrainConfig
from draft_training.train import teacher_from, train

pytestmark = pytest.mark.slow  # training runs

CFG = TrainConfig(loss="feature", batch_size=4, micro_batch=2, seq_len=32, lr=3e-3, warmup_steps=2, max_steps=8,
                  eval_every=3, unroll_steps=2, acceptance_weight=1.0, draft_temperature_scales=(1.0, 0.7))


def _run(teacher, corpus: Path, cfg: TrainConfig, completions: Path | None = None, **kw):
    return train(teacher, corpus / "train.bin", completions, corpus / "heldout.bin", TINY_DRAFT, cfg,
                 log=lambda _: 0, vocab=torch.arange(0, teacher.config.vocab_size, 3), **kw)


def _without_time(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "seconds"} for row in history]


def test_a_run_stopped_twice_and_resumed_is_the_run_straight_through(corpus, target_dir, tmp_path):
    """Weights, the evaluations and the held-out acceptance equal the uninterrupted run's exactly: the same
    windows, learning rates and AdamW moments; the kept state is gone once the run ends."""
    teacher = teacher_from(load_model(str(target_dir)).model)
    straight, whole = _run(teacher, corpus, CFG)

    state = tmp_path / "run.state.pt"
    _, first = _run(teacher, corpus, replace(CFG, segment_steps=3), state_file=state)
    assert first.stopped and first.steps == 3 and state.exists() and not first.acceptance.get("final")
    _, second = _run(teacher, corpus, replace(CFG, segment_steps=3), state_file=state, resume=True)
    assert second.stopped and second.steps == 6
    resumed, last = _run(teacher, corpus, CFG, state_file=state, resume=True)
    assert not last.stopped and last.steps == whole.steps == 8 and not state.exists()

    for name, value in straight.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[name], value, rtol=0, atol=0)
    assert _without_time(last.history) == _without_time(whole.history)
    assert [r["step"] for r in last.history] == [3, 6, 8]
    assert last.acceptance == whole.acceptance


def test_a_resume_is_refused_where_it_would_train_another_run(corpus, target_dir, tmp_path):
    """Other learning settings than the stopped run's, no stopped run, or a new run over a stopped one: a clear
    error that says what to do. A setting that changes no weight (where the call stops) may differ."""
    teacher = teacher_from(load_model(str(target_dir)).model)
    state = tmp_path / "run.state.pt"
    with pytest.raises(ValueError, match="no stopped run at .*start the run without --resume"):
        _run(teacher, corpus, CFG, state_file=state, resume=True)
    _run(teacher, corpus, replace(CFG, segment_steps=2), state_file=state)
    with pytest.raises(ValueError, match="a stopped run is kept at .*continue it with --resume, or delete"):
        _run(teacher, corpus, CFG, state_file=state)  # a new run would lose the stopped one
    with pytest.raises(ValueError, match=r"trained with lr=0\.003 \(now 0\.001\): resume it with its own settings"):
        _run(teacher, corpus, replace(CFG, lr=1e-3), state_file=state, resume=True)
    with pytest.raises(ValueError, match="give state_file"):
        _run(teacher, corpus, replace(CFG, segment_steps=2))
    kept = tmp_path / "kept.bin"  # other data than the stopped run's: a kept completions file forgotten or added
    kept.write_bytes((corpus / "train.bin").read_bytes()[:16_000])  # 4,000 uint32 ids
    with pytest.raises(ValueError, match=r"trained with completion_tokens=0 \(now 4000\)"):
        _run(teacher, corpus, CFG, kept, state_file=state, resume=True)
    _, more = _run(teacher, corpus, replace(CFG, segment_steps=4), state_file=state, resume=True)
    assert more.stopped and more.steps == 6


def test_the_command_line_keeps_a_stopped_run_and_exports_it_when_resumed(corpus, target_dir, tmp_path, capsys):
    """`all --segment-steps N` exports nothing and says how to go on; the same command with --resume finishes
    the run and writes the draft; a further --resume finds nothing to continue."""
    from draft_training.cli import main

    work = tmp_path / "work"
    shutil.copytree(corpus, work)
    out = tmp_path / "draft.safetensors"
    args = ["all", "--target", str(target_dir), "--work", str(work), "--out", str(out), "--losses", "feature",
            "--samples", "0", "--max-steps", "6", "--eval-every", "3", "--batch-size", "4", "--seq-len", "32",
            "--draft-vocab", "64", "--hidden", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1",
            "--intermediate", "64", "--unroll", "2"]
    assert main(args + ["--segment-steps", "4"]) == 0
    assert "stopped at the segment's end, nothing exported" in capsys.readouterr().out
    assert not out.exists() and (work / "draft-feature.state.pt").exists()
    assert main(args + ["--resume"]) == 0
    assert "resumed at step 4/6" in capsys.readouterr().out
    assert out.exists() and not (work / "draft-feature.state.pt").exists()
    read_draft_file(out, sha256=None)  # a whole draft file
    assert json.loads(out.with_suffix(".json").read_text())["steps"] == 6
    assert main(args + ["--resume"]) == 2
    assert "error: no stopped run" in capsys.readouterr().out
    # refused before the target loads: a target that could not load is never reached
    missing = [str(tmp_path / "no-such-target") if a == str(target_dir) else a for a in args]
    assert main(missing + ["--resume"]) == 2
    assert "error: no stopped run" in capsys.readouterr().out
    (work / "draft-feature.state.pt").write_bytes(b"")  # a kept run, which a new one would overwrite
    assert main(missing + ["--segment-steps", "4"]) == 2
    assert "error: a stopped run is kept at" in capsys.readouterr().out


def test_a_timed_run_stops_a_segment_only_once_its_schedule_is_laid_out(corpus, target_dir, tmp_path):
    """A run by minutes lays its length out at its 25th step: a segment asked to stop earlier stops after that
    step, so that the resumed run has a schedule to end on (before, it stopped at step 3 and its resume ran on
    toward 10**9 steps)."""
    teacher = teacher_from(load_model(str(target_dir)).model)
    timed = replace(CFG, max_steps=None, minutes=0.1, eval_every=10)  # 6 s: well over 26 steps of the tiny draft
    state = tmp_path / "run.state.pt"
    _, first = _run(teacher, corpus, replace(timed, segment_steps=3), state_file=state)
    assert first.stopped and first.steps == 26
    _, last = _run(teacher, corpus, timed, state_file=state, resume=True)
    assert not last.stopped and last.steps > 26 and last.history[-1]["step"] == last.steps and not state.exists()
