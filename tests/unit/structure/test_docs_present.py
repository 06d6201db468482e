"""The docs and the code's docstrings and comments describe the present: no reference to a past
stretch of work by its ordinal, to an issue number, a branch or a commit as "where it was", no
date in prose, no pointer to a file the repository does not hold. git keeps the history; a
comment says why, not when. docs/benchmarks.md is written by `make bench` and stays short.

Scanned: README.md and docs/*.md whole; every docstring (any string statement) and comment of
src/, tests/ and benchmarks/. The patterns are narrow on purpose: "issue" as a verb ("issues
a transfer"), a simulator `NpuSession` or a dated line of the generated benchmarks page are
not history.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BENCHMARKS_PAGE = ROOT / "docs" / "benchmarks.md"
MAX_BENCHMARKS_LINES = 500

ORDINALS = ("first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
            "thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|"
            "twentieth|\\d+(?:st|nd|rd|th)")
MARKERS: dict[str, re.Pattern[str]] = {
    "a stretch of work by its ordinal": re.compile(rf"\b(?:{ORDINALS})[ -]session\b", re.I),
    "a stretch of work as a time": re.compile(
        r"\b(?:this|that|last|previous|next|same) session\b|\bthe session before\b"
        r"|\bsession \d+\b", re.I),
    "an issue number": re.compile(r"\bissues? #?\d+|\bpoints? \d+ of (?:the )?issue", re.I),
    "an issue reference": re.compile(r"(?<![\w&/#])#\d+\b"),
    "a branch": re.compile(r"\bbranch `[\w./-]+`|\bon branch \w+", re.I),
    "HEAD as a time": re.compile(r"\b(?:at|previous|the previous) HEAD\b"),
    "a commit as a time": re.compile(r"\b(?:at|against|since|before|after) `?[0-9a-f]{7,40}\b"),
    "a date": re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"),
}
# a dated line the page writer emits on purpose (benchmarks/report.py: "- Run: <date> UTC")
ALLOWED_LINES: dict[Path, re.Pattern[str]] = {BENCHMARKS_PAGE: re.compile(r"^- Run: 20\d\d-")}

# file names a docstring or a doc points to: they must exist
REPO_PATH = re.compile(r"\b(?:src|tests|benchmarks|docs)/[\w./-]*\w\.(?:py|md|json|toml|tir)\b")
DOC_NAME = re.compile(r"(?<![\w/.-])[\w-]+\.md\b")


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _sources() -> list[Path]:
    files = [p for d in ("src", "tests", "benchmarks") for p in sorted((ROOT / d).rglob("*.py"))]
    return [p for p in files if "__pycache__" not in p.parts]


def _prose_of_source(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and every string statement (docstrings) of a module."""
    text = path.read_text(encoding="utf-8")
    out = [(tok.start[0], tok.string)
           for tok in tokenize.generate_tokens(io.StringIO(text).readline)
           if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            out += [(node.lineno + i, line)
                    for i, line in enumerate(node.value.value.splitlines())]
    return out


def _prose(path: Path) -> list[tuple[int, str]]:
    if path.suffix == ".py":
        return _prose_of_source(path)
    allowed = ALLOWED_LINES.get(path)
    return [(i, line) for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if allowed is None or not allowed.search(line)]


def _findings(paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        for line, text in _prose(path):
            for what, pattern in MARKERS.items():
                m = pattern.search(text)
                if m:
                    found.append(f"{path.relative_to(ROOT)}:{line}: {what}: {m.group(0)!r}")
    return found


def _missing_files(paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        for line, text in _prose(path):
            for name in REPO_PATH.findall(text):
                if not (ROOT / name).exists():
                    found.append(f"{path.relative_to(ROOT)}:{line}: no file {name}")
            for name in DOC_NAME.findall(text):
                if not any((base / name).exists() for base in (ROOT, ROOT / "docs", path.parent)):
                    found.append(f"{path.relative_to(ROOT)}:{line}: no file {name}")
    return found


def test_docs_hold_no_history():
    found = _findings(_docs())
    assert not found, "\n".join(found)


def test_docstrings_and_comments_hold_no_history():
    found = _findings(_sources())
    assert not found, "\n".join(found)


def test_docs_and_docstrings_point_to_files_that_exist():
    found = _missing_files(_docs() + _sources())
    assert not found, "\n".join(found)


def test_benchmarks_page_is_short():
    lines = len(BENCHMARKS_PAGE.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_BENCHMARKS_LINES, f"docs/benchmarks.md has {lines} lines"


@pytest.mark.parametrize(("text", "what"), [
    ("in the nineteenth session the sweep", "a stretch of work by its ordinal"),
    ("measured in the 3rd session", "a stretch of work by its ordinal"),
    ("(issue 10 point 2)", "an issue number"),
    ("the goal of issue #13", "an issue number"),
    ("| #10 backend compile <= 1 s |", "an issue reference"),
    ("measured on branch `res`", "a branch"),
    ("`make bench` at HEAD gives", "HEAD as a time"),
    ("binaries identical against 2efc449", "a commit as a time"),
    ("on 2026-12-01, on the shared machine", "a date"),
])
def test_markers_are_found(text, what):
    assert MARKERS[what].search(text)


@pytest.mark.parametrize("text", [
    "the DMA engine issues a transfer per cycle",
    "issue order, issue time",
    "`NpuSession(reuse=True)`: a released session's memories",
    "a batch's buffers live for one session, at most 512 MiB",
    "section 6.4.1 of docs/binary-format.md",
    "the header (`# Benchmarks`)",
    "offset 0x7f700",
])
def test_ordinary_words_are_not_markers(text):
    assert not [what for what, p in MARKERS.items() if p.search(text)]
