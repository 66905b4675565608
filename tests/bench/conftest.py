import sys
from pathlib import Path

# --import-mode=importlib puts neither the repository root nor bench/ (not a package) on sys.path.
ROOT = Path(__file__).resolve().parents[2]
for _path in (ROOT, ROOT / "bench"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))


def pytest_configure(config):
    # registered here too until the suite's own list has it: a test over a few seconds carries it
    config.addinivalue_line("markers", "slow: takes more than a few seconds (left out of the fast tier)")
