import sys
from pathlib import Path

# `pytest` run directly (not `python -m pytest`) does not put the repository root on sys.path; the
# second entry makes `sandbox_cases` importable from the test modules.
ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT, Path(__file__).parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
