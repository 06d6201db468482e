"""What a Ray actor imports at its start (tessel.analysis.explore_run: the compile path a
design point runs) leaves the simulator's functional model and timing out: the estimate needs
tessel.runtime.profile's figures, not the simulator, and every actor is a new interpreter.

Asserted on ``sys.modules`` in a fresh interpreter, never on time (the machine is shared).
"""

from __future__ import annotations

import json
import subprocess
import sys

SIMULATOR = ("tessel.sim.timing", "tessel.sim.functional", "tessel.sim.stats",
             "tessel.runtime.regions")
PROBE = """
import json, sys
import tessel.analysis.explore_run
print(json.dumps([m for m in {mods!r} if m in sys.modules]))
"""


def test_explore_run_import_leaves_the_simulator_out():
    out = subprocess.run([sys.executable, "-c", PROBE.format(mods=SIMULATOR)],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
