"""`write_csv`: the per-layer table of a profile as CSV (one row per layer, like Vela's
per-layer CSV); the columns are defined in ``tessel.analysis.table`` and docs/analysis.md."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

from tessel.analysis.table import columns, layer_rows
from tessel.fileio import write_atomic as write_text
from tessel.runtime.profile import Profile


def csv_text(profile: Profile, sram: Sequence[int] | None = None) -> str:
    """The CSV as a string (header + one row per layer; ``\\n`` line ends)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([c.key for c in columns(profile, sram is not None)])
    writer.writerows(layer_rows(profile, sram))
    return buf.getvalue()


def write_csv(profile: Profile, path: str | Path, sram: Sequence[int] | None = None) -> Path:
    """Write the per-layer CSV; ``sram``: per-layer SRAM peaks in bytes (adds a column)."""
    return write_text(path, csv_text(profile, sram))
