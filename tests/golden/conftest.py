"""Make tests/filecheck.py and the pass-test helpers importable from the golden tests."""

import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parent.parent
for _path in (_TESTS, _TESTS / "unit" / "passes"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
