"""`tessel --help` and `tessel targets` must not import torch, scipy or numpy (start-up time).

Asserted on ``sys.modules`` in a fresh interpreter, never on wall time (the machine is shared).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "scipy", "numpy", "matplotlib", "sklearn", "torchao", "optuna")
PROBE = """
import contextlib, io, json, sys
import tessel.cli
with contextlib.redirect_stdout(io.StringIO()):
    try:
        code = tessel.cli.main({argv!r})
    except SystemExit as exc:  # --help exits
        code = exc.code
print(json.dumps({{"code": code, "heavy": [m for m in {heavy!r} if m in sys.modules]}}))
"""


@pytest.mark.parametrize("argv", [["--help"], ["targets"], ["compile", "--help"]])
def test_cli_start_does_not_import_heavy_modules(argv):
    out = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv, heavy=HEAVY)],
                         capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["code"] in (0, None)
    assert result["heavy"] == []
