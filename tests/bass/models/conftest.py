"""One prepared copy of each embedded model per test session, in the real `$BASS_CACHE`.

Preparing from the PyPI packages takes about a minute; after `make demo` (or an earlier session) the
cached folder is reused, so the embedded tests only pay for loading.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bass.models.embedded import prepare


@pytest.fixture(scope="session")
def embedded_dir() -> Path:
    return prepare("embedded")


@pytest.fixture(scope="session")
def gemma_dir() -> Path:
    return prepare("gemma3-270m")
