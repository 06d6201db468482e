"""Per-inference and per-layer figures of a compiled program, from the simulator's timing
model (data-independent, so no inputs are needed) and the per-instruction energy events.

Definitions (docs/analysis.md): cycles from the first instruction issued to the last
output byte written; MAC utilisation = MACs / (cycles x peak MACs per cycle); host ops are
listed separately, never folded into the NPU cycle count.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tessel.arch import NpuArch
from tessel.display import TERMINAL_WIDTH, Table, fmt_int, plural, short_repr, summary_html
from tessel.isa import Engine, Opcode
from tessel.isa.costs import energy_breakdown_pj, gemm_dims, instruction_cost, static_energy_pj
from tessel.lower.fallback import summary_text

if TYPE_CHECKING:
    from tessel.binary import TslProgram

_CONTROL = (Opcode.WAIT, Opcode.SIGNAL, Opcode.END)
TOP_LAYERS = 10  # layers shown by the notebook view (_repr_html_)


@dataclass(frozen=True)
class LayerStats:
    name: str
    op: str
    loc: str
    mapping: str
    bound: str
    cycles: int
    estimated_cycles: int
    macs: int  # of the model's layer (docs/analysis.md); fused stripes may execute more
    mac_utilisation: float
    bytes_read: dict[str, int]
    bytes_written: dict[str, int]
    energy_pj: float
    # engine name -> cycles it runs the layer's instructions (WAIT / SIGNAL / END excluded)
    busy_cycles: dict[str, int] = field(default_factory=dict)
    matrix_tiles: int = 0  # matrix-engine instructions (CONV, MATMUL, DWCONV) of the layer
    tile_gemm: tuple[int, int, int] = (0, 0, 0)  # (M, N, K) of its largest matrix instruction
    first_instr: dict[str, int] = field(default_factory=dict)  # engine name -> queue index
    last_instr: dict[str, int] = field(default_factory=dict)  # -1 below first: none
    memory_bytes: dict[str, int] = field(default_factory=dict)  # bytes moved per memory

    @property
    def module(self) -> str:
        """The PyTorch module path of the layer ('' when the frontend recorded none)."""
        return module_of(self.loc)

    @property
    def label(self) -> str:
        """What users call the layer: its module path, else its IR name."""
        return layer_label(self.name, self.loc)


def layer_label(name: str, loc: str) -> str:
    """The one name a layer is shown by: the PyTorch module path of its source location, else
    (a layer the frontend recorded no module for) its IR name."""
    return module_of(loc) or name


def module_of(loc: str) -> str:
    """The module path in a source location string ``file:line (module a.b.c)``."""
    m = _MODULE.search(loc)
    return m.group(1) if m else ""


_MODULE = re.compile(r"\(module ([^)]*)\)\s*$")


@dataclass(frozen=True)
class InferenceFigures:
    """What one inference of a model costs on an NPU, as the simulator's profile and the
    analytical estimate (tessel.analysis.estimate) both report it (docs/figures.md)."""

    model: str
    target: str
    clock_hz: int
    cycles: int
    latency_ms: float
    macs: int
    mac_utilisation: float
    energy_pj: dict[str, float]  # per energy event (MACs, SRAM, each off-chip memory, ...)
    bytes_read: dict[str, int]  # per off-chip memory
    bytes_written: dict[str, int]
    layers: tuple[Any, ...]
    host_ops: tuple[str, ...] = field(default=())  # one line per host (CPU) op

    @property
    def energy_uj(self) -> float:
        return sum(self.energy_pj.values()) / 1e6

    def to_json(self) -> str:
        """Every figure; each layer with ``layer`` (its module path, else its IR name) next
        to ``name`` (its IR name)."""
        data = asdict(self)
        for record, lay in zip(data["layers"], self.layers, strict=True):
            record["layer"] = lay.label
        return json.dumps(data, indent=1, sort_keys=True)


@dataclass(frozen=True)
class Profile(InferenceFigures):
    """The simulator's figures of a compiled model: the whole inference and every layer."""

    layers: tuple[LayerStats, ...]
    arena_peak_bytes: int = 0
    arena_naive_bytes: int = 0
    macs_executed: int = 0  # MACs the NPU ran (cascaded stripes recompute their halo rows)
    regions: int = 1  # NPU regions (host parts run between them)
    fallback: str = ""  # the fallback summary (ops and MACs on the NPU, host ops by reason)

    def slowest(self, k: int = 5) -> list[LayerStats]:
        return sorted(self.layers, key=lambda layer: -layer.cycles)[:k]

    def layer_table(self, top: int | None = None) -> Table:
        """Per-layer table (all layers in program order, or the ``top`` slowest); layers are
        named by module path, the IR name in the last column. The CSV / HTML report have
        more."""
        layers = self.slowest(top) if top is not None else list(self.layers)
        rows = [(x.label, x.op, fmt_int(x.cycles), x.bound, f"{100 * x.mac_utilisation:.1f}",
                 fmt_int(sum(x.bytes_read.values())), fmt_int(sum(x.bytes_written.values())),
                 f"{x.energy_pj / 1e6:.3f}", x.mapping, x.name) for x in layers]
        tips = [("", "", f"estimate {x.estimated_cycles:,}", "", "", "", "", "", "", "")
                for x in layers]
        title = (f"{len(layers)} slowest of {plural(len(self.layers), 'layer')}"
                 if top is not None else plural(len(layers), "layer"))
        return Table(("layer", "op", "cycles", "bound", "MAC%", "read B", "written B", "uJ",
                      "mapping", "IR name"), rows,
                     numeric=(False, False, True, False, True, True, True, True, False, False),
                     title=title, tooltips=tips, secondary=(9,))

    def table(self, width: int | None = TERMINAL_WIDTH) -> str:
        """The per-layer table as text, at most ``width`` columns (None: no limit)."""
        return self.layer_table().text(width)

    def __repr__(self) -> str:
        return short_repr("Profile", [
            ("model", repr(self.model)), ("target", repr(self.target)),
            ("cycles", fmt_int(self.cycles)), ("latency_ms", f"{self.latency_ms:.3f}"),
            ("energy_uj", f"{self.energy_uj:.2f}"),
            ("mac_utilisation", f"{100 * self.mac_utilisation:.1f}%"),
            ("layers", len(self.layers)), ("host_ops", len(self.host_ops))])

    def _repr_html_(self) -> str:
        t = self.layer_table(TOP_LAYERS)
        return summary_html(f"Profile of {self.model} on {self.target}",
                            self.summary().split("\n"), [t])

    def summary(self) -> str:
        rd, wr = sum(self.bytes_read.values()), sum(self.bytes_written.values())
        lines = [
            f"model {self.model} on {self.target}: {self.cycles:,} cycles = "
            f"{self.latency_ms:.3f} ms at {self.clock_hz / 1e6:.0f} MHz" + host_note(self.host_ops),
            f"energy {self.energy_uj:.2f} uJ per inference ("
            + ", ".join(f"{k} {v / 1e6:.2f}" for k, v in self.energy_pj.items()) + ")",
            f"MACs {self.macs / 1e6:.1f} M, MAC utilisation {100 * self.mac_utilisation:.1f} %",
            f"off-chip traffic: read {rd / 1e6:.2f} MB, written {wr / 1e6:.2f} MB; DRAM arena "
            f"{self.arena_peak_bytes / 1e6:.2f} MB (naive {self.arena_naive_bytes / 1e6:.2f} MB)",
        ]
        if self.fallback:
            lines.append(self.fallback)
        if self.regions > 1:
            lines.append(f"{self.regions} NPU regions, host (CPU) parts between them; cycles "
                         "are the regions' NPU cycles added up")
        if self.host_ops:
            lines.append(f"host (CPU) ops, not in the cycle count: {len(self.host_ops)}: "
                         + "; ".join(self.host_ops[:5]) + (" ..." if len(self.host_ops) > 5
                                                          else ""))
        return "\n".join(lines)


def host_note(host_ops: Sequence[str]) -> str:
    """What a headline latency leaves out: "" without host ops."""
    if not host_ops:
        return ""
    return f" (NPU only: {plural(len(host_ops), 'host (CPU) op')} not included)"


def build_profile(program: TslProgram, arch: NpuArch) -> Profile:
    # the simulator's timing model, imported here: the estimate (tessel.analysis.estimate)
    # needs this module's figures, not the simulator, and a Ray actor imports it at its start
    from tessel.runtime.regions import regions_of
    from tessel.sim.prepare import prepared
    from tessel.sim.stats import event_row, events_from_row
    from tessel.sim.timing import events_matrix, instr_times

    meta = program.metadata
    prep = prepared(program, arch)
    sched = instr_times(prep)
    total = sched.total_cycles
    ev_rows = _events_by_instruction(prep)
    n_mem = len(arch.offchip)
    names = [m.name for m in arch.offchip]
    peak = arch.peak_macs_per_cycle
    layers = []
    for info in meta.get("layers", []):
        rows, start, end = [], None, 0
        busy = dict.fromkeys((e.name for e in Engine), 0)
        tiles = []
        for e in Engine:
            lo, hi = info["first"][e.name], info["last"][e.name]
            for i in range(lo, hi + 1):
                s, t = sched.starts[e][i], sched.ends[e][i]
                op = prep.queues[e][i]
                if op.opcode not in _CONTROL:  # token waits / signals of a
                    start = s if start is None else min(start, s)  # step run early or idle
                    busy[e.name] += t - s
                    if e is Engine.MATRIX:
                        tiles.append(gemm_dims(op.instr))
                end = max(end, t)
                rows.append(ev_rows[e][i])
        width = len(event_row(None, n_mem))
        ev = events_from_row(np.sum(np.array(rows, np.int64).reshape(-1, width), axis=0), n_mem)
        cycles = max(0, end - (end if start is None else start))
        macs = info.get("macs", ev.macs)
        layers.append(LayerStats(
            info["name"], info["op"], info["loc"], info["mapping"], info["bound"], cycles,
            info["estimated_cycles"], macs, macs / (cycles * peak) if cycles else 0.0,
            dict(zip(names, ev.offchip_read_bytes, strict=True)),
            dict(zip(names, ev.offchip_write_bytes, strict=True)),
            sum(energy_breakdown_pj(ev, arch).values()), busy, len(tiles),
            max(tiles, key=lambda d: d[0] * d[1] * d[2], default=(0, 0, 0)),
            dict(info["first"]), dict(info["last"]), _memory_bytes(ev, names)))
    total_ev = events_from_row(events_matrix(prep).sum(axis=0), n_mem)
    energy = dict(energy_breakdown_pj(total_ev, arch))
    energy["static"] = static_energy_pj(total, arch)
    model_macs = sum(lay.macs for lay in layers) if layers else total_ev.macs
    return Profile(
        meta.get("model", "?"), arch.name, arch.clock_hz, total, 1e3 * total / arch.clock_hz,
        model_macs, model_macs / (total * peak) if total else 0.0, energy,
        dict(zip(names, total_ev.offchip_read_bytes, strict=True)),
        dict(zip(names, total_ev.offchip_write_bytes, strict=True)), tuple(layers),
        tuple(meta.get("host_ops", ())), meta.get("arena_peak_bytes", 0),
        meta.get("arena_naive_bytes", 0), total_ev.macs, len(regions_of(program)),
        summary_text(meta["fallback"]) if isinstance(meta.get("fallback"), dict) else "")


def _memory_bytes(ev: Any, names: list[str]) -> dict[str, int]:
    """Bytes read + written per memory: each off-chip memory by name, the scratchpad SRAM
    ("sram"), the accumulator ("acc", 4 bytes per entry access) and the operand buffers."""
    out = {n: r + w for n, r, w in zip(names, ev.offchip_read_bytes, ev.offchip_write_bytes,
                                       strict=True)}
    out["sram"] = ev.sram_read_bytes + ev.sram_write_bytes
    out["acc"] = 4 * (ev.acc_reads + ev.acc_writes)
    out["operand"] = ev.operand_bytes
    return out


def _events_by_instruction(prep: Any) -> dict[Engine, list[list[int]]]:
    """Event rows per engine and instruction index (control instructions: zeros)."""
    from tessel.sim.stats import event_row

    n_mem = len(prep.arch.offchip)
    out = {}
    for e in Engine:
        out[e] = [event_row(instruction_cost(op.instr, prep.arch, e).events, n_mem)
                  for op in prep.queues[e]]
    return out
