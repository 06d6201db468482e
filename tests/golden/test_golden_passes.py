"""Golden IR-text tests of the passes: each tests/golden/<dir>/*.tir names its passes in a
`// RUN:` line and the expected output in CHECK lines; the pass output must also compute the
same function as the input (run_graph on random inputs) and print -> parse -> print must be
the identity on input and output."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pass_graphs import assert_same_function

from filecheck import FileCheckError, filecheck, parse_directives
from tessel.ir import Graph, parse_graph, print_graph
from tessel.passes import PASSES, run_pipeline
from tessel.quant.lower import LowerQDQ

GOLDEN = Path(__file__).parent
# passes outside the float pipeline's registry that golden files may name
EXTRA_PASSES = {LowerQDQ.name: LowerQDQ}
CASES = sorted(p for p in GOLDEN.glob("*/*.tir")
               if p.parent.name not in ("invalid", "schedule"))  # schedule: its own test
_RUN = re.compile(r"^//\s*RUN:(.*)$", re.MULTILINE)


def _case_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def run_line(text: str, source: str) -> list[str]:
    found = _RUN.findall(text)
    assert len(found) == 1, f"{source}: expected exactly one // RUN: line, found {len(found)}"
    names = found[0].replace(",", " ").split()
    known = PASSES | EXTRA_PASSES
    assert names and all(n in known for n in names), f"{source}: bad RUN line {found[0]!r}"
    return [EXTRA_PASSES[n]() if n in EXTRA_PASSES else n for n in names]


def load(path: Path) -> tuple[str, Graph, Graph]:
    text = path.read_text()
    before = parse_graph(text, source=str(path))
    after = run_pipeline(before, run_line(text, str(path)), verify_each=True,
                         dump=lambda _: None)
    return text, before, after


@pytest.mark.parametrize("path", CASES, ids=_case_id)
def test_check_lines(path: Path) -> None:
    text, _, after = load(path)
    assert parse_directives(text), f"{path}: no CHECK lines"
    filecheck(print_graph(after, elide_constants=True), text, source=str(path))


@pytest.mark.parametrize("path", CASES, ids=_case_id)
def test_same_function(path: Path) -> None:
    _, before, after = load(path)
    if path.parent.name == LowerQDQ.name:  # integer graph: golden model vs QDQ reference
        assert_golden_close(before, after)
        return
    assert_same_function(before, after)


def assert_golden_close(before: Graph, after: Graph) -> None:
    """The golden model of a lowered graph equals the float QDQ reference within one step of
    each output's quantisation (they differ only in where they round)."""
    from pass_graphs import random_inputs

    from tessel.ir import Op, run_graph
    from tessel.quant.golden import run_golden
    for seed in range(3):
        inputs = random_inputs(before, seed)
        for name, r, g in zip(after.outputs, run_graph(before, inputs), run_golden(after, inputs),
                              strict=True):
            node = after.producer(name)
            assert node is not None and node.op is Op.DEQUANTIZE, f"%{name} is not dequantized"
            err = float(abs(r - g).max())
            assert err <= node.attr("scale") * 1.0001, f"%{name}: golden off by {err:.3g}"


@pytest.mark.parametrize("path", CASES, ids=_case_id)
def test_print_parse_print_identity(path: Path) -> None:
    _, before, after = load(path)
    for graph in (before, after):
        once = print_graph(graph)
        assert print_graph(parse_graph(once)) == once


def test_every_pass_has_three_cases_and_a_directory() -> None:
    for name in PASSES:
        cases = list((GOLDEN / name).glob("*.tir"))
        assert len(cases) >= 3, f"pass {name} has {len(cases)} golden cases, want >= 3"


def test_a_failing_check_is_reported() -> None:
    path = GOLDEN / "dce" / "unused_chain.tir"
    _, _, after = load(path)
    with pytest.raises(FileCheckError, match="pattern not found"):
        filecheck(print_graph(after), "// CHECK: %dead1 = add", source=str(path))
