"""One definition per op (tessel.ops): every IR op is declared once, its definition is complete
for what its traits promise, and knowledge of an op stays with its definition: an op is named
(`Op.NAME`) in few source files: its definition, the frontends that produce it, and the few
passes that rewrite it by name."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from tessel.ir import Op
from tessel.ops import DEFINITIONS, Trait, definition

SRC = Path(__file__).resolve().parents[3] / "src" / "tessel"
IR_OP_IMPORT = re.compile(r"from tessel\.ir(?:\.ops)? import (?:\([^)]*\bOp\b[^)]*\)|[^\n]*\bOp\b)")
OP_USE = re.compile(r"\bOp\.([A-Z][A-Z_0-9]*)\b")
# MAX_FILES: the definition, the frontends that produce the op (ONNX, TFLite, torch and TOSA,
# whose exporter names the ops it writes and whose importer those it builds) and the few passes
MEDIAN_FILES, MAX_FILES = 5, 9


def files_naming_each_op() -> dict[Op, list[str]]:
    """For each IR op, the source files that name it as `Op.NAME` (files that import the IR's
    `Op`; other enums named Op, like the simulator's prepared instructions, do not count)."""
    names: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        if path != SRC / "ir" / "ops.py" and not IR_OP_IMPORT.search(text):
            continue
        for name in set(OP_USE.findall(text)):
            names.setdefault(name, []).append(str(path.relative_to(SRC)))
    return {op: names.get(op.name, []) for op in Op}


def test_every_op_has_one_definition():
    assert set(DEFINITIONS) == set(Op)
    assert all(d.op is op for op, d in DEFINITIONS.items())


def test_definitions_keep_their_promises():
    for op, d in DEFINITIONS.items():
        if d.has(Trait.INTEGER):
            assert d.golden is not None, f"{op.value}: an integer op needs its golden kernel"
            assert d.kernel is None, f"{op.value}: an integer op has no float kernel"
        if d.npu is not None and d.npu.emitter is not None:
            for fn in ("candidates", "constants", "step"):
                assert callable(getattr(d.npu.emitter, fn, None)), f"{op.value}: emitter {fn}"
        if d.has(Trait.VIEW):
            assert d.npu is not None and d.npu.emitter is None, op.value
        if d.lut is not None:
            assert d.lower, f"{op.value}: a LUT function without a lowering rule to use it"
        if not d.has(Trait.INTEGER) and op is not Op.HOST and not d.has(Trait.BOUNDARY):
            assert d.kernel is not None, f"{op.value}: a float op needs its float kernel"


def test_integer_ops_are_what_the_lowering_emits():
    """Every integer op is produced by some float op's lowering (named in its definition's
    module) and runs on the NPU, except the imported arithmetic declared host-run
    (Trait.HOST_INTEGER), which has no NPU form."""
    for op, d in DEFINITIONS.items():
        if d.has(Trait.HOST_INTEGER):
            assert d.has(Trait.INTEGER) and d.npu is None, op.value
        elif d.has(Trait.INTEGER):
            assert d.npu is not None and d.npu.emitter is not None, op.value
    assert any(d.has(Trait.HOST_INTEGER) for d in DEFINITIONS.values())
    assert definition(Op.QCONV2D).npu.refusal is not None


def test_an_op_is_named_in_few_files():
    counts = {op: len(files) for op, files in files_naming_each_op().items()}
    worst = max(counts, key=counts.get)
    assert statistics.median(counts.values()) <= MEDIAN_FILES, sorted(
        counts.items(), key=lambda kv: -kv[1])[:10]
    assert counts[worst] <= MAX_FILES, (worst, files_naming_each_op()[worst])


def test_the_count_sees_every_kind_of_import():
    """The measure above finds ops named through each import form (it could not fail if it
    found none)."""
    files = files_naming_each_op()
    assert "ops/conv.py" in files[Op.QCONV2D] and "ops/registry.py" not in files[Op.QCONV2D]
    assert any(f.startswith("frontend/") for f in files[Op.CONV2D])
