"""Fixtures of the app tests. `app_fakes` (beside this file) is put on the path for the test modules:
pytest's importlib mode does not import test helpers by name otherwise."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from app_fakes import fake_session  # noqa: E402

from app.session import EngineSession  # noqa: E402


@pytest.fixture
def session() -> EngineSession:
    return fake_session()
