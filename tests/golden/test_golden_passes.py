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

GOLDEN = Path(__file__).parent
CASES = sorted(p for p in GOLDEN.glob("*/*.tir") if p.parent.name != "invalid")
_RUN = re.compile(r"^//\s*RUN:(.*)$", re.MULTILINE)


def _case_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def run_line(text: str, source: str) -> list[str]:
    found = _RUN.findall(text)
    assert len(found) == 1, f"{source}: expected exactly one // RUN: line, found {len(found)}"
    names = found[0].replace(",", " ").split()
    assert names and all(n in PASSES for n in names), f"{source}: bad RUN line {found[0]!r}"
    return names


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
    assert_same_function(before, after)


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
