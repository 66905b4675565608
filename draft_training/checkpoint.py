"""A training run longer than one command: the run's state where a segment stops, and the run continued from it.

A command on the device runs at most 10 minutes. A chain of cycles, each started from the file before with its
own warm-up and cosine (`--init`), loses at every restart: the warm-up's peak undoes some of what the cycle before
had settled (agreement at the first draft step fell from 0.7705 to 0.7631 in one cycle's first 100 steps). So one
run lays its schedule over all of `minutes`, trains for `segment_minutes` in a call, and keeps beside its
output what continuing needs:

    the student's float32 weights    AdamW's moments and step counts    the step reached, the schedule's length
    the windows' random generator    the evaluations so far             the training time spent

`--resume` (the same command again) restores all of it, so a run stopped and continued takes the same steps on
the same windows at the same learning rates as one run straight through (a test holds their weights equal).
The settings that change what is learned must be the stopped run's; those that only say how a call runs may
differ (`FREE`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

# TrainConfig fields a resumed call may change: where it stops, how a step is split and compiled, what it
# measures at the end (none of them changes a weight)
FREE = ("segment_minutes", "segment_steps", "micro_batch", "compile", "draft_temperature_scales")


@dataclass
class RunState:
    """Where a stopped run stands (besides its weights and optimizer)."""

    step: int  # optimizer steps taken
    total: int  # the schedule's length in steps, laid out by the first segment's timing
    seconds: float  # training time spent by the segments so far
    rng: dict  # the training windows' generator (`numpy.random.Generator.bit_generator.state`)
    history: list[dict] = field(default_factory=list)  # TrainReport.history
    acceptance: dict[str, list[dict]] = field(default_factory=dict)  # TrainReport.acceptance ("init")


def state_path(work: Path, loss: str) -> Path:
    """Where the command line keeps a stopped run of `loss` in its work folder."""
    return work / f"draft-{loss}.state.pt"


def check_state(path: Path, resume: bool) -> None:
    """Refuse, with what to do, a resume with no run stopped at `path` and a new run that would overwrite one:
    checked before anything is built or loaded (the command line asks before it loads the target)."""
    if resume and not path.exists():
        raise ValueError(f"no stopped run at {path}: start the run without --resume (give --segment-minutes to "
                         "stop it within a call), or leave --resume out")
    if not resume and path.exists():  # never overwrite a run that can go on
        raise ValueError(f"a stopped run is kept at {path}: continue it with --resume, or delete that file "
                         "to start a new run")


def save_state(path: Path, student: torch.nn.Module, opt: torch.optim.Optimizer, state: RunState,
               settings: dict) -> None:
    """Write a stopped run to `path`: `settings` are its TrainConfig and shape as dicts, checked at resume.
    Written beside and then moved over, so a call killed while writing leaves the state before intact."""
    part = path.with_name(path.name + ".part")
    torch.save({"student": student.state_dict(), "optimizer": opt.state_dict(), "state": asdict(state),
                "settings": settings}, part)
    part.replace(path)


def load_state(path: Path, student: torch.nn.Module, opt: torch.optim.Optimizer, settings: dict) -> RunState:
    """Restore the run stopped at `path` into `student` and `opt` (built as that run built them) and return where
    it stands (that a run is kept there is `check_state`'s, asked by `train` before it builds anything). Refused,
    with what to do, where this call's `settings` would train differently from the stopped run's."""
    saved = torch.load(path, map_location=next(student.parameters()).device, weights_only=True)
    differ = sorted(k for k in saved["settings"].keys() | settings.keys()
                    if k not in FREE and saved["settings"].get(k) != settings.get(k))
    if differ:
        was = ", ".join(f"{k}={saved['settings'].get(k)!r} (now {settings.get(k)!r})" for k in differ[:4])
        raise ValueError(f"the run stopped at {path} was trained with {was}: resume it with its own settings "
                         f"(only {', '.join(FREE)} may change), or start a new run without --resume")
    student.load_state_dict(saved["student"])
    opt.load_state_dict(saved["optimizer"])
    return RunState(**saved["state"])


__all__ = ["FREE", "RunState", "check_state", "load_state", "save_state", "state_path"]
