"""The FileCheck helper itself: each directive kind both passing and failing."""

from __future__ import annotations

import pytest

from filecheck import FileCheckError, filecheck, parse_directives

OUT = "a = relu(x)\nb = add(a, a)\nc = mul(b, 2.0)\nreturn c\n"


def test_check_and_next_pass() -> None:
    filecheck(OUT, "// CHECK: relu(x)\n// CHECK-NEXT: add(a, a)\n// CHECK: return c")


def test_check_order_matters() -> None:
    with pytest.raises(FileCheckError, match="pattern not found"):
        filecheck(OUT, "// CHECK: mul(\n// CHECK: relu(")


def test_check_next_must_be_the_next_line() -> None:
    with pytest.raises(FileCheckError, match="not on the line after"):
        filecheck(OUT, "// CHECK: relu(x)\n// CHECK-NEXT: mul(b")


def test_check_not_is_scoped_between_matches() -> None:
    filecheck(OUT, "// CHECK: add(\n// CHECK-NOT: relu\n// CHECK: return")
    with pytest.raises(FileCheckError, match="found where it must not be"):
        filecheck(OUT, "// CHECK: relu\n// CHECK-NOT: add\n// CHECK: return")
    with pytest.raises(FileCheckError, match="found where it must not be"):
        filecheck(OUT, "// CHECK: add\n// CHECK-NOT: return")


def test_regex_holes_and_whitespace() -> None:
    filecheck(OUT, "// CHECK: c = mul(b, {{[0-9.]+}})\n// CHECK:   return    c")
    with pytest.raises(FileCheckError):
        filecheck(OUT, "// CHECK: c = mul(b, {{[a-z]+}})")


def test_directive_lines_are_numbered_and_empty_ones_rejected() -> None:
    ds = parse_directives("graph\n// CHECK: x\n  // CHECK-NOT: y\n")
    assert [(d.kind, d.pattern, d.line) for d in ds] == [("CHECK", "x", 2), ("CHECK-NOT", "y", 3)]
    with pytest.raises(FileCheckError, match="empty CHECK"):
        parse_directives("// CHECK:   \n")
    with pytest.raises(FileCheckError, match="no CHECK"):
        filecheck(OUT, "")
