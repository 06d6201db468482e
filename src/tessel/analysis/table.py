"""The per-layer table (one row per layer, like Vela's per-layer CSV), shared by the CSV and
the HTML report so that both show the same columns with the same definitions.

Columns (docs/analysis.md): ``layer`` is the layer's one name, its PyTorch module path (its
IR name when the frontend recorded no module), ``ir_name`` its IR name; ``cycles`` is the span
of the layer in the simulated schedule (first instruction start to last instruction end, all
engines), so layers that overlap in a pipelined schedule are each charged their whole span and
``cycles_share_pct`` may sum to more or less than 100; ``estimate_error_pct`` = (analytical
estimate - simulated) / simulated.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from tessel.runtime.profile import LayerStats, Profile


@dataclass(frozen=True)
class Column:
    key: str  # CSV header
    label: str  # HTML header
    numeric: bool


def columns(profile: Profile, with_sram: bool) -> list[Column]:
    mems = list(profile.bytes_read)
    cols = [Column("layer", "layer", False), Column("ir_name", "IR name", False),
            Column("op", "op", False),
            Column("loc", "source", False), Column("mapping", "mapping", False),
            Column("bound", "bound (estimate)", False), Column("cycles", "cycles", True),
            Column("estimated_cycles", "estimated cycles", True),
            Column("estimate_error_pct", "estimate error %", True),
            Column("macs", "MACs", True), Column("mac_utilisation_pct", "MAC util. %", True)]
    for m in mems:
        cols += [Column(f"{m}_read_bytes", f"{m} read B", True),
                 Column(f"{m}_written_bytes", f"{m} written B", True)]
    if with_sram:
        cols.append(Column("sram_working_set_bytes", "SRAM working set B", True))
    cols += [Column("energy_pj", "energy pJ", True),
             Column("cycles_share_pct", "share of cycles %", True)]
    return cols


def layer_rows(profile: Profile, sram: Sequence[int] | None = None, *,
               pretty: bool = False) -> list[list[str]]:
    """Cells of every layer, in the order of ``columns(profile, sram is not None)``: plain
    numbers (CSV), or with ``pretty`` thousands separators and short source paths (HTML)."""
    if sram is not None and len(sram) != len(profile.layers):
        raise ValueError(f"{len(sram)} SRAM working sets for {len(profile.layers)} layers")
    return [_row(profile, lay, None if sram is None else sram[k], pretty)
            for k, lay in enumerate(profile.layers)]


def _row(profile: Profile, lay: LayerStats, sram: int | None, pretty: bool) -> list[str]:
    err = 100 * (lay.estimated_cycles - lay.cycles) / lay.cycles if lay.cycles else 0.0
    share = 100 * lay.cycles / profile.cycles if profile.cycles else 0.0
    n = (lambda v: f"{v:,}") if pretty else str
    cells = [lay.label, lay.name, lay.op,
             short_source(lay.loc) if pretty else lay.loc, lay.mapping, lay.bound, n(lay.cycles),
             n(lay.estimated_cycles), f"{err:.2f}", n(lay.macs),
             f"{100 * lay.mac_utilisation:.2f}"]
    for m in profile.bytes_read:
        cells += [n(lay.bytes_read.get(m, 0)), n(lay.bytes_written.get(m, 0))]
    if sram is not None:
        cells.append(n(sram))
    cells += [f"{lay.energy_pj:,.0f}" if pretty else f"{lay.energy_pj:.1f}", f"{share:.2f}"]
    return cells


def short_source(loc: str, cwd: str | None = None) -> str:
    """``file:line`` of a source location without the module part; an absolute path becomes
    relative to ``cwd`` when inside it, else starts at the package folder (``tessel/...``)."""
    where = re.sub(r"\s*\(module [^)]*\)\s*$", "", loc)
    if not os.path.isabs(where.split(":")[0]):
        return where
    path, _, line = where.rpartition(":") if re.search(r":\d+$", where) else (where, "", "")
    base = cwd or os.getcwd()
    try:
        rel = os.path.relpath(path, base)
    except ValueError:
        rel = path
    if rel.startswith(".."):
        parts = path.split(os.sep)
        keep = next((i for i in range(len(parts) - 1, -1, -1)
                     if parts[i] in ("site-packages", "src")), None)
        rel = os.sep.join(parts[keep + 1:]) if keep is not None else os.sep.join(parts[-2:])
    return f"{rel}:{line}" if line else rel
