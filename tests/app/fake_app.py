"""The real app around a scripted engine, for fast browser tests: `python tests/app/fake_app.py PORT`.

Sequence 0 writes a correct HumanEval/0 body in ~1 s (round ROUNDS_TO_FIRST_FINISH); the round after it
is held for HELD_ROUND_S, as a slow CPU round would be, or until Stop. Sequence 0's PASS badge must appear
during that held round, while the other cards still decode.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app_fakes import BAD, GOOD, fake_session  # noqa: E402

from app.main import launch_kwargs, serve  # noqa: E402
from app.ui import build_demo  # noqa: E402

CHUNK = 8
ROUNDS_TO_FIRST_FINISH = -(-len(GOOD) // CHUNK)
HELD_ROUND_S = 45.0


def main(port: int) -> None:
    session = fake_session(texts=[GOOD, GOOD * 8, BAD * 30, GOOD * 8], chunk=CHUNK, round_s=0.06,
                           pause_after_first_finish_s=HELD_ROUND_S)
    demo = build_demo(session)
    demo.queue(default_concurrency_limit=1)
    serve(demo, **{**launch_kwargs({"PORT": str(port)}), "server_name": "127.0.0.1"})


if __name__ == "__main__":
    main(int(sys.argv[1]))
