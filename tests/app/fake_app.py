"""The real app around a scripted engine, for fast browser tests:
`python tests/app/fake_app.py PORT [batching | slow-load]`.

With `batching`, the engine serves visitors together (`batching_fake.BatchingFakeEngine`, SEATS sequences at
once; the most requests of one round go to the file BASS_FAKE_RECORD names): HumanEval/0 gets GOOD/BAD bodies,
the add prompt (`flow_cases.ADD_PROMPT`) its own, each long enough to take seconds at the default round of 0.1 s
(BASS_FAKE_ROUND_S sets another).

With `slow-load`, the model takes LOAD_S to load, through the stages a first start goes through: assembling
(a fraction), dequantizing (no fraction: the bar is animated), loading weights (a fraction, in small steps).

Sequence 0 writes a correct HumanEval/0 body in ~1 s (round ROUNDS_TO_FIRST_FINISH); the round after it
is held for HELD_ROUND_S, as a slow CPU round would be, or until Stop. Sequence 0's PASS badge must appear
during that held round, while the other cards still decode.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bass"))  # `scripted`, the fakes' bookkeeping
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import os  # noqa: E402
import time  # noqa: E402

from app_fakes import BAD, GOOD, FakeEngine, fake_session  # noqa: E402
from batching_fake import BatchingFakeEngine  # noqa: E402
from flow_cases import ADD_BAD, ADD_GOOD  # noqa: E402

from app.main import launch_kwargs, serve  # noqa: E402
from app.session import EngineSession  # noqa: E402
from app.ui import build_demo  # noqa: E402

CHUNK = 8
ROUNDS_TO_FIRST_FINISH = -(-len(GOOD) // CHUNK)
HELD_ROUND_S = 45.0


SEATS = 16


def texts_by_prompt(prompt: str, k: int) -> list[str]:
    if "has_close_elements" in prompt:
        return [GOOD * 6 if i % 2 == 0 else BAD * 12 for i in range(k)]
    return [ADD_GOOD + "    # done\n" * 12 if i % 2 == 0 else ADD_BAD * 20 for i in range(k)]


LOAD_S = 12.0
LOAD_STAGES = (("assembling", 0.25), ("dequantizing", 0.25), ("loading weights", 0.5))  # share of LOAD_S each


def slow_load(config, progress) -> FakeEngine:
    """A load of LOAD_S seconds that reports its stages as the real one does (`bass.models.embedded`, the loader)."""
    for stage, share in LOAD_STAGES:
        steps = 20
        for step in range(steps):
            progress(stage, None if stage == "dequantizing" else step / steps)
            time.sleep(LOAD_S * share / steps)
    progress("loading weights", 1.0)
    return FakeEngine(config, texts=[GOOD, BAD], chunk=CHUNK, round_s=0.06)


def main(port: int, mode: str = "") -> None:
    if mode == "slow-load":
        session = EngineSession(env={}, factory=slow_load)
        session.ensure()
    elif mode == "batching":
        session = fake_session(BatchingFakeEngine, texts=texts_by_prompt, chunk=4, seats=SEATS,
                               round_s=float(os.environ.get("BASS_FAKE_ROUND_S", "0.1")),
                               record=os.environ.get("BASS_FAKE_RECORD"))
    else:
        session = fake_session(texts=[GOOD, GOOD * 8, BAD * 30, GOOD * 8], chunk=CHUNK, round_s=0.06,
                               pause_after_first_finish_s=HELD_ROUND_S)
    demo = build_demo(session)
    demo.queue(default_concurrency_limit=1)
    serve(demo, **{**launch_kwargs({"PORT": str(port)}), "server_name": "127.0.0.1"})


if __name__ == "__main__":
    main(int(sys.argv[1]), *sys.argv[2:3])
