"""The real app around a scripted engine, for fast browser tests: `python tests/app/fake_app.py PORT`.

Sequence 0 writes a correct HumanEval/0 body in ~1 s; the others need ~8 s more, so a PASS badge has
time to appear on sequence 0's card while they still decode.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app_fakes import BAD, GOOD, fake_session  # noqa: E402

from app.main import launch_kwargs  # noqa: E402
from app.ui import build_demo  # noqa: E402


def main(port: int) -> None:
    session = fake_session(texts=[GOOD, GOOD * 8, BAD * 30, GOOD * 8], chunk=8, round_s=0.06)
    demo = build_demo(session)
    demo.queue(default_concurrency_limit=1)
    demo.launch(**{**launch_kwargs({"PORT": str(port)}), "server_name": "127.0.0.1"})


if __name__ == "__main__":
    main(int(sys.argv[1]))
