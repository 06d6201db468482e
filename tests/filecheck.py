"""A tiny FileCheck in the spirit of LLVM's: CHECK, CHECK-NEXT and CHECK-NOT directives.

Directives are read from `// CHECK: pattern` lines of a test file. A pattern is a literal
substring, except that `{{regex}}` parts are regular expressions. Horizontal whitespace runs
in a pattern match any horizontal whitespace run of the output.

- CHECK: the pattern occurs after the previous match.
- CHECK-NEXT: the pattern occurs on the line right after the previous match's line.
- CHECK-NOT: the pattern does not occur between the previous match and the next one (or the
  end of the output).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DIRECTIVE = re.compile(r"//\s*(CHECK|CHECK-NEXT|CHECK-NOT):(.*)$")


class FileCheckError(AssertionError):
    """A directive failed; the message names the directive's line and shows the output."""


@dataclass(frozen=True)
class Directive:
    kind: str
    pattern: str
    line: int  # 1-based line in the test file

    @property
    def regex(self) -> re.Pattern[str]:
        return compile_pattern(self.pattern)


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """Literal text with `{{regex}}` holes; whitespace runs match any horizontal whitespace."""
    parts = re.split(r"\{\{(.*?)\}\}", pattern)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"(?:{part})")
        else:
            out.append(r"[ \t]+".join(re.escape(w) for w in re.split(r"[ \t]+", part)))
    return re.compile("".join(out))


def parse_directives(text: str) -> list[Directive]:
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        m = _DIRECTIVE.search(line)
        if m:
            pattern = m.group(2).strip()
            if not pattern:
                raise FileCheckError(f"line {number}: empty {m.group(1)} pattern")
            out.append(Directive(m.group(1), pattern, number))
    return out


def filecheck(output: str, directives: list[Directive] | str, source: str = "<test>") -> None:
    """Check `output` against directives (or the text holding them); raise FileCheckError."""
    if isinstance(directives, str):
        directives = parse_directives(directives)
    if not directives:
        raise FileCheckError(f"{source}: no CHECK directives")
    pos, prev_end = 0, None
    pending_not: list[Directive] = []
    for d in directives:
        if d.kind == "CHECK-NOT":
            pending_not.append(d)
            continue
        m = d.regex.search(output, pos)
        if m is None:
            _fail(source, d, output, pos, "pattern not found")
        if d.kind == "CHECK-NEXT":
            if prev_end is None:
                _fail(source, d, output, pos, "CHECK-NEXT without a previous match")
            if output.count("\n", prev_end, m.start()) != 1:
                _fail(source, d, output, pos, "match is not on the line after the previous match")
        _check_nots(source, pending_not, output, pos, m.start())
        pending_not = []
        pos = prev_end = m.end()
    _check_nots(source, pending_not, output, pos, len(output))


def _check_nots(source: str, nots: list[Directive], output: str, start: int, end: int) -> None:
    for d in nots:
        m = d.regex.search(output, start, end)
        if m is not None:
            _fail(source, d, output, m.start(), "pattern found where it must not be")


def _fail(source: str, d: Directive, output: str, pos: int, why: str) -> None:
    line = output.count("\n", 0, pos) + 1
    raise FileCheckError(f"{source}:{d.line}: {d.kind}: {d.pattern!r}: {why} "
                         f"(searching from output line {line})\n--- output ---\n{output}")
