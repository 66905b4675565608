"""One prepared copy of each embedded model per test session, in the real `$BASS_CACHE`.

Preparing from the PyPI packages takes about a minute; after `make demo` (or an earlier session) the
cached folder is reused, so the embedded tests only pay for loading.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from bass.models.embedded import prepare

sys.path.insert(0, str(Path(__file__).parent))  # the `families` helpers beside this file

from families import CASES, save_tiny  # noqa: E402

from bass.models.loader import load_model  # noqa: E402


@pytest.fixture(scope="session")
def embedded_dir() -> Path:
    return prepare("embedded")


@pytest.fixture(scope="session")
def gemma_dir() -> Path:
    return prepare("gemma3-270m")


@pytest.fixture(scope="module", params=list(CASES))
def pair(request, tmp_path_factory):
    """(family, transformers' model, ours loaded from its saved folder, the folder) for each family of `CASES`."""
    folder = tmp_path_factory.mktemp(request.param)
    seed = int(torch.randint(0, 2**31 - 1, ()))
    hf = save_tiny(folder, CASES[request.param](), seed)
    ours = load_model(str(folder))
    return request.param, hf, ours, folder
