"""The real app around a scripted engine that honours the time budget, for fast Compare browser tests:
`python tests/app/fake_compare_app.py PORT`. A normal run of a method (stop strings end each candidate) takes about
METHOD_S seconds with no budget; an equal-work run of N tokens a candidate, at most N rounds of ROUND_S."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bass"))  # `scripted`, the fakes' bookkeeping
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app_fakes import BAD, GOOD  # noqa: E402
from compare_fakes import CompareFakeEngine  # noqa: E402

from app.main import launch_kwargs, serve  # noqa: E402
from app.session import EngineSession  # noqa: E402
from app.ui import build_demo  # noqa: E402

CHUNK, ROUND_S = 8, 0.08
TEXTS = [GOOD, GOOD * 2, BAD * 20, GOOD * 2]
METHOD_S = ROUND_S * max(-(-len(t) // CHUNK) for t in TEXTS)


def main(port: int) -> None:
    session = EngineSession(env={}, factory=lambda config, progress: CompareFakeEngine(
        config, progress, texts=TEXTS, chunk=CHUNK, round_s=ROUND_S))
    session.ensure()
    demo = build_demo(session)
    demo.queue(default_concurrency_limit=1)
    serve(demo, **{**launch_kwargs({"PORT": str(port)}), "server_name": "127.0.0.1"})


if __name__ == "__main__":
    main(int(sys.argv[1]))
