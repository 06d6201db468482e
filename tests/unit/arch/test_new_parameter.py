"""A new NPU parameter is one declaration: a copy of the package with one `param(...)` field
added (and nothing else changed) loads old presets, sets, checks, hashes, explores, advises,
keys the search cache and documents the parameter. Run in a subprocess on the copy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tessel.arch import load_preset

SRC = Path(__file__).resolve().parents[3] / "src" / "tessel"
DOCS = Path(__file__).resolve().parents[3] / "docs"

# added to MatrixEngine: a parameter with a default, introduced by schema 4
DEFAULTED = ('zero_skip: int = param(1, since=4, doc="zero-weight MACs skipped per cycle", '
             'checks=(IntIn(1, 64),), affects=COSTS, explore=Explore("zs"), '
             'knob=AdviseKnob(Limit.MAC_ARRAY), summary=True)')
# added to VectorEngine: a parameter without a default, introduced by schema 4
REQUIRED = ('issue_width: int = param(doc="vector instructions issued per cycle", since=4, '
            'checks=(IntIn(1, 4),), affects=COSTS)')


def _copy_with(tmp_path: Path, cls: str, line: str) -> Path:
    """A copy of the tessel package whose class `cls` (in arch/types.py) ends with `line`."""
    root = tmp_path / "src"
    shutil.copytree(SRC, root / "tessel", ignore=shutil.ignore_patterns("__pycache__"))
    types = root / "tessel" / "arch" / "types.py"
    text = types.read_text()
    start = text.index(f"class {cls}:")
    end = text.index("\n\n\n", start)
    types.write_text(text[:end] + f"\n    {line}" + text[end:])
    return root


def _run(root: Path, script: str, expect: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=str(root), TESSEL_EXPECT=json.dumps(expect))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


DEFAULTED_SCRIPT = r'''
import json, os
from pathlib import Path
from tessel.analysis.advise import Knob, relaxations
from tessel.analysis.docgen import update as update_analysis
from tessel.analysis.explore_space import arch_name, parse_space
from tessel.arch import arch_from_dict, arch_from_text, docgen, load_preset
from tessel.arch.params import SCHEMA, param_names
from tessel.errors import TesselConfigError
from tessel.schedule import search

expect = json.loads(os.environ["TESSEL_EXPECT"])
docs = Path(expect["docs"])
a = load_preset("tnpu-s")  # a schema-3 file, without the new key
b = a.with_param("matrix.zero_skip", 4)
try:
    a.with_param("matrix.zero_skip", 100)
    rejected = ""
except TesselConfigError as exc:
    rejected = str(exc)
space = parse_space({"matrix": {"zero_skip": [1, 2]}})
text = docs.joinpath("architecture.md").read_text()
print(json.dumps({
    "schema": SCHEMA, "value": a.matrix.zero_skip, "hash": a.arch_hash,
    "toml": a.to_toml_dict(), "b_hash": b.arch_hash, "b_toml": b.to_toml_dict(),
    "b_roundtrip": arch_from_dict(b.to_toml_dict()) == b,
    "b_text": arch_from_text("schema = 4\n" + docs.parent.joinpath(
        "src/tessel/arch/presets/tnpu-s.toml").read_text().replace("schema = 3", "").replace(
        "[matrix]\n", "[matrix]\nzero_skip = 4\n")) == b,
    "rejected": rejected, "named": "matrix.zero_skip" in param_names(a),
    "space": [list(v) for k, v in space.params], "point": arch_name(a, {"matrix.zero_skip": 2}),
    "knob": Knob.MATRIX_ZERO_SKIP.value,
    "relaxed": [r.label(a) for r in relaxations(a)],
    "program_key_same": search.program_key(a) == search.program_key(b),
    "timing_key_same": search.timing_key(a) == search.timing_key(b),
    "summary": b.summary()["matrix.zero_skip"],
    "doc_row": [r for r in docgen.param_table().splitlines() if "zero_skip" in r],
    "arch_doc_stale": docgen.update(text) != text,
    "analysis_doc_stale": update_analysis(docs.joinpath("analysis.md").read_text())
        != docs.joinpath("analysis.md").read_text(),
}))
'''


def test_a_parameter_with_a_default_is_one_declaration(tmp_path):
    a = load_preset("tnpu-s")
    got = _run(_copy_with(tmp_path, "MatrixEngine", DEFAULTED), DEFAULTED_SCRIPT,
               {"docs": str(DOCS)})
    assert got["schema"] == 4 and got["value"] == 1
    # a schema-3 preset keeps its hash and its .tsl metadata: the new key is at its default
    assert got["hash"] == a.arch_hash and got["toml"] == json.loads(json.dumps(a.to_toml_dict()))
    assert got["b_hash"] != a.arch_hash
    assert got["b_toml"]["schema"] == 4 and got["b_toml"]["matrix"]["zero_skip"] == 4
    assert got["b_roundtrip"] and got["b_text"]
    assert "matrix.zero_skip must be an integer in [1, 64], got 100" in got["rejected"]
    assert got["named"] and [1, 2] in got["space"] and got["point"] == "tnpu-s-zs2"
    assert got["knob"] == "matrix.zero_skip" and "matrix.zero_skip x2" in got["relaxed"]
    assert got["program_key_same"] and not got["timing_key_same"]  # declared COSTS
    assert got["summary"] == 4
    assert got["doc_row"] == ["| `matrix.zero_skip` | int |  | `1` | 1 .. 64 | costs | "
                              "zero-weight MACs skipped per cycle (schema 4) |"]
    assert got["arch_doc_stale"] and got["analysis_doc_stale"]  # the generators list it


REQUIRED_SCRIPT = r'''
import json
from tessel.arch import arch_from_text, load_preset
from tessel.arch.params import SCHEMA
from tessel.errors import TesselConfigError
from importlib import resources

text = (resources.files("tessel.arch") / "presets" / "tnpu-s.toml").read_text()
try:
    load_preset("tnpu-s")
    error = ""
except TesselConfigError as exc:
    error = str(exc)
fixed = arch_from_text(text.replace("[vector]\n", "[vector]\nissue_width = 2\n"))
print(json.dumps({"schema": SCHEMA, "error": error, "fixed": fixed.vector.issue_width}))
'''


def test_an_older_preset_names_a_new_required_key_and_why(tmp_path):
    got = _run(_copy_with(tmp_path, "VectorEngine", REQUIRED), REQUIRED_SCRIPT, {})
    assert got["schema"] == 4 and got["fixed"] == 2
    assert got["error"] == ("presets/tnpu-s.toml: vector.issue_width is missing (vector "
                            "instructions issued per cycle): schema 4 added it without a default "
                            "and this file is schema 3; add it")


@pytest.mark.parametrize("cls,line", [("MatrixEngine", DEFAULTED), ("VectorEngine", REQUIRED)])
def test_the_copy_differs_from_the_package_by_one_line(tmp_path, cls, line):
    root = _copy_with(tmp_path, cls, line)
    new = (root / "tessel" / "arch" / "types.py").read_text().splitlines()
    old = (SRC / "arch" / "types.py").read_text().splitlines()
    assert len(new) == len(old) + 1 and [x for x in new if x not in old] == [f"    {line}"]
