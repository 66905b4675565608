"""Entry point: `python -m app` (or `python app.py` on Hugging Face Spaces).

Environment: BASS_TARGET / BASS_DRAFT (model specs or hub ids; default the embedded model), BASS_DRAFTER,
BASS_BACKEND, PORT (default 7860), GRADIO_SERVER_NAME (default 127.0.0.1, 0.0.0.0 on a Space),
BASS_QUEUE_SIZE (visitors that may wait in line, default 32), BASS_CONCURRENCY (Generate requests served at
once, batched by the engine, default 8; Compare runs one at a time), BASS_LAZY=1 to load the model only on
the first request instead of at start.
"""

from __future__ import annotations

import logging
import os
import signal

import gradio as gr

from app.session import EngineSession
from app.styles import app_css
from app.ui import DEFAULT_CONCURRENCY, build_demo


def launch_kwargs(env: os._Environ | dict) -> dict:
    """Server settings from the environment; a Space (SPACE_ID set) listens on all interfaces."""
    on_space = bool(env.get("SPACE_ID"))
    port = int(env.get("PORT") or env.get("GRADIO_SERVER_PORT") or 7860)
    host = env.get("GRADIO_SERVER_NAME") or ("0.0.0.0" if on_space else "127.0.0.1")
    return {"server_name": host, "server_port": port, "css": app_css(), "theme": gr.themes.Soft(),
            "show_error": False}


def serve(demo: gr.Blocks, **kwargs) -> None:
    """Launch `demo` until the process is stopped. A Space, `docker stop` and a supervisor stop it with SIGTERM,
    which Python would end without its exit handlers: taken as Ctrl-C, it closes Gradio's server and the process
    exits normally, stopping the sandbox's helper and removing the temporary exports (`app.export`)."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        demo.launch(**kwargs)  # blocks; Gradio's wait loop closes the server on Ctrl-C
    except KeyboardInterrupt:  # a stop that came while launch was still starting, before that loop
        demo.close()


def concurrency_from_env(env: os._Environ | dict) -> int:
    """BASS_CONCURRENCY: how many Generate requests reach the engine at once (a whole number >= 1)."""
    raw = (env.get("BASS_CONCURRENCY") or "").strip()
    if not raw:
        return DEFAULT_CONCURRENCY
    if not raw.isdigit() or int(raw) < 1:
        raise SystemExit(f"BASS_CONCURRENCY must be a whole number >= 1 (Generate requests served at once), "
                         f"got {raw!r}")
    return int(raw)


def create_app(env: os._Environ | dict | None = None) -> tuple[gr.Blocks, EngineSession]:
    """The app with its queue: up to BASS_CONCURRENCY generations at once into the one engine, which batches
    them; others wait in line."""
    env = os.environ if env is None else env
    concurrency = concurrency_from_env(env)
    session = EngineSession(env)
    if env.get("BASS_LAZY", "") in ("", "0"):
        session.ensure()  # prepare the model now, in the background; the page shows its progress
    demo = build_demo(session, concurrency)
    demo.queue(default_concurrency_limit=1, max_size=int(env.get("BASS_QUEUE_SIZE") or 32))
    return demo, session


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    for noisy in ("httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    demo, session = create_app()
    from sandbox import shared_service

    shared_service()  # the sandbox's own process starts while the model loads
    print(f"BASS app: model {session.default_pair.label}; open the local URL below.", flush=True)
    serve(demo, **launch_kwargs(os.environ))


if __name__ == "__main__":
    main()
