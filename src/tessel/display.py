"""One table model for every table Tessel shows, rendered three ways: the terminal (rich,
fitted to a width, long cells ellipsised), markdown and HTML (notebooks, reports).

    t = Table(("layer", "cycles"), [("conv1", fmt_int(1234))], numeric=(False, True))
    print(t.text())        # fixed width, no colour; t.print() colours a terminal
    t.markdown(); t.html()

Number formatting is defined here once, so the CLI, notebooks and reports agree: integers
with thousands separators, signed changes as ``+4.57 %`` (a negative change is a reduction:
faster, less energy). Rich is imported only when a table is rendered for the terminal, so
importing this module stays cheap (``tessel --help``).
"""

from __future__ import annotations

import html
import io
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

TERMINAL_WIDTH = 100  # default text width of tables rendered to a string
_GAP = 3  # columns between two table columns (padding + rule)
_MIN_TEXT = 8  # a capped text column never shrinks below this


def fmt_int(n: int | float) -> str:
    """Integer with thousands separators: 1234567 -> '1,234,567'."""
    return f"{int(round(n)):,}"


def fmt_change(pct: float, digits: int = 2) -> str:
    """A signed relative change in percent: -4.57 -> '-4.57 %' (negative = reduction)."""
    return f"{round(pct, digits) or 0.0:+.{digits}f} %"  # no '-0.00 %' for a tiny decrease


@dataclass(frozen=True)
class Table:
    """Header, preformatted string cells, which columns are numeric (right-aligned) and
    optional per-cell tooltips (HTML only; same shape as ``rows``, '' for none)."""

    header: Sequence[str]
    rows: Sequence[Sequence[str]]
    numeric: Sequence[bool] = ()
    title: str = ""
    max_widths: Sequence[int | None] = ()  # terminal width cap per column (None: free)
    tooltips: Sequence[Sequence[str]] = field(default=())
    html_id: str = ""

    def __post_init__(self) -> None:
        n = len(self.header)
        for r in self.rows:
            if len(r) != n:
                raise ValueError(f"table row has {len(r)} cells for {n} columns: {list(r)}")

    def _is_num(self, k: int) -> bool:
        return bool(self.numeric) and self.numeric[k]

    def widths(self, width: int) -> list[int]:
        """Column widths for a ``width``-column terminal: numbers and uncapped columns keep
        their natural width; capped text columns shrink, rightmost first (the first column,
        the name, keeps the most), down to a minimum until the table fits,
        and on a very narrow terminal the capped columns after the first are hidden (0),
        rightmost first, so that numbers are never cut."""
        n = len(self.header)
        nat = [max([len(self.header[k])] + [len(r[k]) for r in self.rows]) for k in range(n)]
        caps = list(self.max_widths) if self.max_widths else [None] * n
        out = [w if caps[k] is None else min(w, max(caps[k] or 0, len(self.header[k])))
               for k, w in enumerate(nat)]
        room = width - _GAP * (n - 1)
        shrink = [k for k in range(n) if caps[k] is not None]
        for k in reversed(shrink):
            cut = min(max(0, sum(out) - room), max(0, out[k] - _MIN_TEXT))
            out[k] -= cut
        hide = [k for k in shrink if k > 0]
        while sum(out) + _GAP * (sum(w > 0 for w in out) - 1) > width and hide:
            out[hide.pop()] = 0
        return out

    def _rich(self, width: int) -> Any:
        from rich import box
        from rich.table import Table as RichTable

        t = RichTable(title=self.title or None, box=box.SIMPLE_HEAD, pad_edge=False,
                      show_edge=False, title_justify="left", header_style="bold")
        widths = self.widths(width)
        shown = [k for k, w in enumerate(widths) if w > 0]
        for k in shown:
            t.add_column(self.header[k], justify="right" if self._is_num(k) else "left",
                         no_wrap=True, overflow="ellipsis", width=widths[k])
        for r in self.rows:
            t.add_row(*(_clip_left(r[k], widths[k]) if k == 0 else r[k] for k in shown))
        return t

    def text(self, width: int = TERMINAL_WIDTH) -> str:
        """Plain text, at most ``width`` columns (long cells end in an ellipsis)."""
        from rich.console import Console

        buf = io.StringIO()
        console = Console(file=buf, width=width, color_system=None, force_terminal=False,
                          legacy_windows=False, emoji=False, highlight=False)
        console.print(self._rich(width))
        return "\n".join(line.rstrip() for line in buf.getvalue().rstrip("\n").split("\n"))

    def print(self, file: TextIO | None = None) -> None:
        """To a stream: coloured and fitted to the window on a terminal, else plain text."""
        out = file or sys.stdout
        if not out.isatty():
            out.write(self.text() + "\n")
            return
        from rich.console import Console
        console = Console(file=out, highlight=False)
        console.print(self._rich(console.width))

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


def _clip_left(text: str, width: int) -> str:
    """Names keep their end (``…3.conv.1.0``): module paths differ in their last parts."""
    return text if len(text) <= width else "…" + text[len(text) - width + 1:]


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
