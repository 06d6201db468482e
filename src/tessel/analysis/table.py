"""The per-layer table (one row per layer, like Vela's per-layer CSV), shared by the CSV and
the HTML report so that both show the same columns with the same definitions.

Columns (docs/analysis.md): ``cycles`` is the span of the layer in the simulated schedule
(first instruction start to last instruction end, all engines), so layers that overlap in a
pipelined schedule are each charged their whole span and ``cycles_share_pct`` may sum to more
or less than 100; ``estimate_error_pct`` = (analytical estimate - simulated) / simulated.
"""

from __future__ import annotations

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
    cols = [Column("name", "layer", False), Column("op", "op", False),
            Column("loc", "source", False), Column("mapping", "mapping", False),
            Column("bound", "bound (estimate)", False), Column("cycles", "cycles", True),
            Column("estimated_cycles", "estimated cycles", True),
            Column("estimate_error_pct", "estimate error %", True),
            Column("macs", "MACs", True), Column("mac_utilisation_pct", "MAC util. %", True)]
    for m in mems:
        cols += [Column(f"{m}_read_bytes", f"{m} read B", True),
                 Column(f"{m}_written_bytes", f"{m} written B", True)]
    if with_sram:
        cols.append(Column("sram_peak_bytes", "SRAM peak B", True))
    cols += [Column("energy_pj", "energy pJ", True),
             Column("cycles_share_pct", "share of cycles %", True)]
    return cols


def layer_rows(profile: Profile, sram: Sequence[int] | None = None) -> list[list[str]]:
    """Formatted cells of every layer, in the order of ``columns(profile, sram is not None)``."""
    if sram is not None and len(sram) != len(profile.layers):
        raise ValueError(f"{len(sram)} SRAM peaks for {len(profile.layers)} layers")
    return [_row(profile, lay, None if sram is None else sram[k])
            for k, lay in enumerate(profile.layers)]


def _row(profile: Profile, lay: LayerStats, sram: int | None) -> list[str]:
    err = 100 * (lay.estimated_cycles - lay.cycles) / lay.cycles if lay.cycles else 0.0
    share = 100 * lay.cycles / profile.cycles if profile.cycles else 0.0
    cells = [lay.name, lay.op, lay.loc, lay.mapping, lay.bound, str(lay.cycles),
             str(lay.estimated_cycles), f"{err:.2f}", str(lay.macs),
             f"{100 * lay.mac_utilisation:.2f}"]
    for m in profile.bytes_read:
        cells += [str(lay.bytes_read.get(m, 0)), str(lay.bytes_written.get(m, 0))]
    if sram is not None:
        cells.append(str(sram))
    cells += [f"{lay.energy_pj:.1f}", f"{share:.2f}"]
    return cells
