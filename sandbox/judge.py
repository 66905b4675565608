"""Turn what one candidate's run reported into its Outcome: status, counts, first failure, isolation level."""

from __future__ import annotations

import signal

from sandbox.collect import Run
from sandbox.outcome import Outcome, Status, TestFailure
from sandbox.splitter import TestPlan


def _text(data: bytearray, dropped: int) -> str:
    text = data.decode("utf-8", errors="replace")
    return text + f"\n[... {dropped} more bytes dropped]" if dropped else text


def isolation(layers: list[str] | None) -> str:
    if layers is None:
        return "unknown(the harness did not start)"
    # `layers` are those in effect in both processes, then "verdict": the tests ran in their own process.
    network = "netns" in layers or "seccomp" in layers
    filesystem = "mountns-ro" in layers or "landlock-ro" in layers
    if network and filesystem and {"fsview", "uid", "pidns", "seccomp"} <= set(layers):
        level = "strict"
    else:
        level = "partial" if network or filesystem else "minimal"
    return f"{level}({'+'.join(layers)})"


def judge(index: int, run: Run, plan: TestPlan, wall_s: float, extra_layers: tuple[str, ...] = ()) -> Outcome:
    """The outcome of one run: the harness's events (only those with the run's nonce reached `run`)
    read against the plan. `extra_layers` are the runner's own (memwatch), reported after the child's."""
    events: dict[str, list[dict]] = {}
    for message in run.messages:
        events.setdefault(message.get("k", ""), []).append(message)
    layers = events["start"][0].get("layers") if "start" in events else None
    layers = None if layers is None else [*layers[:-1], *extra_layers, *layers[-1:]]  # "verdict" stays last
    load = events.get("load", [{}])[0]
    units = {m["i"]: m for m in events.get("unit", []) if m.get("i") in range(len(plan.units))}
    passed = sum(1 for i, m in units.items() if m.get("ok") is True and plan.units[i].is_test)
    failures = [units[i] for i in sorted(units) if units[i].get("ok") is not True]
    bad = load if load.get("ok") is False else failures[0] if failures else None
    first_failure = None if bad is None else TestFailure(str(bad.get("file", "")), bad.get("line"),
                                                         str(bad.get("source", "")), str(bad.get("message", "")))
    any_memory = any(m.get("memory") for m in [load, *failures])
    suite = next((m for m in failures if m.get("suite") is True), None)
    detail = ""
    if suite is not None:
        status, detail = Status.ERROR, (f"the test at tests.py:{suite.get('line')} needs objects shared with the "
                                        "candidate; the sandbox passes plain data only and cannot judge this suite")
    elif run.memory is not None and not (run.done and not failures and len(units) == len(plan.units)):
        status, detail = Status.MEMORY, f"a memory cap ended it: {run.memory}"
    elif load.get("ok") is False:
        status = Status.MEMORY if load.get("memory") else Status.ERROR
    elif run.done and len(units) == len(plan.units):
        status = (Status.PASSED if plan.total else Status.RAN) if not failures else \
            Status.MEMORY if any_memory else Status.FAILED
    elif run.timed_out or -signal.SIGXCPU in (run.exit_code, run.candidate_code):
        status, detail = Status.TIMEOUT, "wall-clock limit reached" if run.timed_out else "CPU-time limit reached"
    elif any_memory:
        status = Status.MEMORY
    elif run.gone is not None:
        status, detail = Status.CRASHED, f"the candidate's process {run.gone} before the tests finished"
    else:
        code = run.exit_code or 0
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        status, detail = Status.CRASHED, f"the program {how} before the harness saw the tests finish"
    return Outcome(index, status, passed, plan.total, first_failure, _text(run.stdout, run.dropped["stdout"]),
                   _text(run.stderr, run.dropped["stderr"]), wall_s, isolation(layers), detail)
