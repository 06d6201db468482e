"""One table model for every table Tessel shows, rendered three ways: plain text fitted to a
width, markdown and HTML (notebooks, reports).

    t = Table(("layer", "cycles"), [("conv1", fmt_int(1234))], numeric=(False, True))
    print(t.text(100))     # at most 100 columns; t.text(None): every column at full width
    t.print()              # fitted to stdout: COLUMNS, else the terminal, else full width
    t.markdown(); t.html()

Fitting never cuts a cell: a table wider than the width wraps its text columns (widest
first, at spaces or after ``+ . , _ = / :``), numbers never; when even that does not fit,
each row is folded into ``header: value`` lines. Number formatting is defined here once, so
the CLI, notebooks and reports agree: integers with thousands separators, signed changes as
``+4.57 %`` (a negative change is a reduction: faster, less energy).
"""

from __future__ import annotations

import html
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

TERMINAL_WIDTH = 100  # the notebook / plain-text default width of ``Profile.table``
MIN_WIDTH = 20  # COLUMNS below this is ignored (not a terminal width)
_GAP = "   "  # between two columns
_MIN_TEXT = 8  # a text column is not wrapped narrower than this (or its natural width)
_BREAKS = frozenset(" +.,_=/:")  # a wrapped cell's line may end after one of these


def fmt_int(n: int | float) -> str:
    """Integer with thousands separators: 1234567 -> '1,234,567'."""
    return f"{int(round(n)):,}"


def fmt_change(pct: float, digits: int = 2) -> str:
    """A signed relative change in percent: -4.57 -> '-4.57 %' (negative = reduction)."""
    return f"{round(pct, digits) or 0.0:+.{digits}f} %"  # no '-0.00 %' for a tiny decrease


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """'1 layer', '3 layers' (``nouns``: an irregular plural)."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"


def output_width(stream: TextIO | None = None) -> int | None:
    """The width tables are fitted to on ``stream`` (stdout): ``COLUMNS`` when set, else the
    terminal's width on a terminal; None (every column at its natural width) off a terminal,
    so that a file or a pipe gets every character of every cell on one line."""
    value = os.environ.get("COLUMNS", "")
    if value.strip().isdigit() and int(value) >= MIN_WIDTH:
        return int(value)
    out = stream or sys.stdout
    if _isatty(out):
        try:
            return os.get_terminal_size(out.fileno()).columns
        except (OSError, ValueError, AttributeError):
            return TERMINAL_WIDTH
    return None


def wrap_cell(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters: broken at a space when one is in
    the line's second half, else after the line's last ``+ . , _ = / :`` or space (or a
    hyphen between two words of 4 letters or more: ``weight-`` ``stationary``, never
    ``tnpu-`` ``s``), else inside a word; every character but the spaces at a break is
    kept."""
    if width < 1 or len(text) <= width:
        return [text]
    lines, rest = [], text
    while len(rest) > width:
        spaces = [i for i in range(1, width + 1) if rest[i] == " "]
        other = [i + 1 for i in range(width) if rest[i] in _BREAKS or _hyphen(rest, i)]
        cut = spaces[-1] if spaces and spaces[-1] > width // 2 else \
            max(spaces[-1:] + other[-1:], default=width)
        lines.append(rest[:cut].rstrip(" "))
        rest = rest[cut:].lstrip(" ")
    return lines + [rest] if rest else lines


def fit_text(text: str, width: int | None) -> str:
    """Plain lines (a summary) wrapped at spaces to ``width`` (None: unchanged); a wrapped
    line's continuation is indented by two spaces."""
    if width is None:
        return text
    import textwrap

    return "\n".join(
        "\n".join(textwrap.wrap(line, width, subsequent_indent="  ", break_long_words=True,
                                break_on_hyphens=False)) if len(line) > width else line
        for line in text.split("\n"))


@dataclass(frozen=True)
class Table:
    """Header, preformatted string cells, which columns are numeric (right-aligned) and
    optional per-cell tooltips (HTML only; same shape as ``rows``, '' for none)."""

    header: Sequence[str]
    rows: Sequence[Sequence[str]]
    numeric: Sequence[bool] = ()
    title: str = ""
    tooltips: Sequence[Sequence[str]] = field(default=())
    html_id: str = ""
    # columns left out of the text form when it would otherwise wrap (each named in a note
    # under the table); markdown and HTML always have them
    secondary: Sequence[int] = ()

    def __post_init__(self) -> None:
        n = len(self.header)
        for r in self.rows:
            if len(r) != n:
                raise ValueError(f"table row has {len(r)} cells for {n} columns: {list(r)}")

    def _is_num(self, k: int) -> bool:
        return bool(self.numeric) and self.numeric[k]

    def widths(self, width: int | None) -> list[int] | None:
        """Column widths for ``width`` terminal columns (None: no limit): every column at its
        natural width when that fits; else the text columns are wrapped, the widest first,
        down to a minimum (numbers never are); None when even that does not fit (``text``
        then folds each row into ``header: value`` lines)."""
        n = len(self.header)
        nat = [max([len(self.header[k])] + [len(r[k]) for r in self.rows]) for k in range(n)]
        if width is None:
            return nat
        room = width - len(_GAP) * (n - 1)
        pieces = [max([_longest_piece(self.header[k])] + [len(r[k]) for r in self.rows])
                  for k in range(n)]
        text = [k for k in range(n) if not self._is_num(k) and k > 0]
        first = [0] if n and not self._is_num(0) else []
        comfortable = [min(nat[k], 2 * _MIN_TEXT) for k in range(n)]
        least = [min(nat[k], _MIN_TEXT) for k in range(n)]
        out = list(nat)
        # text columns wrap first (to a comfortable width; the first column, the name, last),
        # then numeric headers, then text columns to their minimum (the name last)
        for cols, floor in ((text, comfortable), (first, comfortable),
                            ([k for k in range(n) if self._is_num(k)], pieces),
                            (text, least), (first, least)):
            while sum(out) > room:
                k = max((k for k in cols if out[k] > floor[k]), key=lambda k: out[k],
                        default=None)
                if k is None:
                    break
                out[k] -= 1
        return out if sum(out) <= room else None

    def lines(self, width: int | None = None) -> list[str]:
        """The table as plain lines, at most ``width`` characters each (None: no limit)."""
        if self.secondary and width is not None and self.widths(width) != self.widths(None):
            keep = [k for k in range(len(self.header)) if k not in self.secondary]
            left = ", ".join(self.header[k] for k in self.secondary)
            return self._columns(keep).lines(width) + [
                f"({left}: left out to fit {width} columns; --wide shows every column)"]
        widths = self.widths(width)
        if widths is None:
            return self._folded(width or 0)
        out = [self.title] if self.title else []
        head = [wrap_cell(h, w) for h, w in zip(self.header, widths, strict=True)]
        out += self._row_lines(head, widths, header=True)
        out.append("\u2500" * (sum(widths) + len(_GAP) * (len(widths) - 1)))
        for r in self.rows:
            out += self._row_lines([wrap_cell(c, w) for c, w in zip(r, widths, strict=True)],
                                   widths)
        return out

    def _columns(self, keep: list[int]) -> Table:
        return Table([self.header[k] for k in keep], [[r[k] for k in keep] for r in self.rows],
                     [self._is_num(k) for k in keep], self.title)

    def _row_lines(self, cells: list[list[str]], widths: list[int],
                   header: bool = False) -> list[str]:
        height = max(len(c) for c in cells)
        out = []
        for i in range(height):
            parts = []
            for k, (c, w) in enumerate(zip(cells, widths, strict=True)):
                # a header's lines sit at the bottom, above its column
                j = i - (height - len(c)) if header else i
                text = c[j] if 0 <= j < len(c) else ""
                parts.append(text.rjust(w) if self._is_num(k) else text.ljust(w))
            out.append(_GAP.join(parts).rstrip())
        return out

    def _folded(self, width: int) -> list[str]:
        """Each row as ``header: value`` pairs packed into lines of ``width`` (a value too
        long for one line wraps); rows separated by a rule."""
        out = [self.title] if self.title else []
        for r in self.rows:
            out.append("\u2500" * width)
            line = ""
            for h, c in zip(self.header, r, strict=True):
                pair = f"{h}: {c}"
                if line and len(line) + 2 + len(pair) <= width:
                    line += "  " + pair
                    continue
                if line:
                    out.append(line)
                wrapped = wrap_cell(pair, width)
                out += wrapped[:-1]
                line = wrapped[-1]
            out.append(line)
        return out

    def text(self, width: int | None = TERMINAL_WIDTH) -> str:
        """Plain text, at most ``width`` columns (None: every column at its natural width);
        long cells wrap, never cut."""
        return "\n".join(self.lines(width))

    def print(self, file: TextIO | None = None, width: int | None = None,
              wide: bool = False) -> None:
        """To a stream, fitted to ``width`` (default ``output_width(file)``: COLUMNS, the
        terminal, or no limit off a terminal); ``wide``: no limit. The header is bold on a
        terminal."""
        out = file or sys.stdout
        lines = self.lines(None if wide else width if width is not None else output_width(out))
        if _isatty(out):
            first = 1 if self.title else 0
            rule = next((i for i in range(first, len(lines)) if lines[i].startswith("\u2500")),
                        first)
            lines[first:rule] = [f"\x1b[1m{x}\x1b[0m" for x in lines[first:rule]]
        out.write("\n".join(lines) + "\n")

    def markdown(self) -> str:
        def esc(s: str) -> str:
            return s.replace("|", "\\|")
        lines = ["| " + " | ".join(esc(h) for h in self.header) + " |",
                 "|" + "".join("---:|" if self._is_num(k) else "---|"
                               for k in range(len(self.header)))]
        lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in self.rows]
        return ("**" + esc(self.title) + "**\n\n" if self.title else "") + "\n".join(lines)

    def html(self) -> str:
        e = _esc
        ident = f' id="{e(self.html_id)}"' if self.html_id else ""
        cap = f"<caption>{e(self.title)}</caption>" if self.title else ""
        head = "".join(f'<th class="num">{e(h)}</th>' if self._is_num(k) else f"<th>{e(h)}</th>"
                       for k, h in enumerate(self.header))
        body = []
        for i, r in enumerate(self.rows):
            cells = []
            for k, c in enumerate(r):
                tip = self.tooltips[i][k] if self.tooltips else ""
                attrs = (' class="num"' if self._is_num(k) else "") + (
                    f' title="{e(tip)}"' if tip else "")
                cells.append(f"<td{attrs}>{e(c)}</td>")
            body.append("<tr>" + "".join(cells) + "</tr>")
        return (f"<table{ident}>{cap}<thead><tr>{head}</tr></thead>"
                f"<tbody>{''.join(body)}</tbody></table>")


def _hyphen(text: str, i: int) -> bool:
    """Whether ``text`` may break after the hyphen at ``i`` (4+ letters on each side)."""
    return text[i] == "-" and re.fullmatch(r"\w{4}", text[max(0, i - 4):i]) is not None \
        and re.match(r"\w{4}", text[i + 1:i + 5]) is not None


def _longest_piece(text: str) -> int:
    """The longest run of ``text`` between two places ``wrap_cell`` may break at."""
    return max((len(p) for p in _PIECE.findall(text)), default=0)


_PIECE = re.compile(r"[^ +.,_=/:]*[+.,_=/:]*")


def _isatty(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def summary_html(title: str, lines: Iterable[str], tables: Iterable[Table] = ()) -> str:
    """A notebook cell: a bold title, the summary lines, then tables (``_repr_html_``)."""
    body = "".join(f"<li>{_esc(x)}</li>" for x in lines)
    return (f"<div class=\"tessel\"><strong>{_esc(title)}</strong><ul>{body}</ul>"
            + "".join(t.html() for t in tables) + "</div>")


def short_repr(kind: str, fields: Iterable[tuple[str, object]]) -> str:
    """``Kind(key=value, ...)``: one short line for ``__repr__`` (never the full data)."""
    return f"{kind}(" + ", ".join(f"{k}={v}" for k, v in fields) + ")"
