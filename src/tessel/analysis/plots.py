"""The report's plots as PNG bytes (matplotlib's Agg canvas, no pyplot global state):
roofline, energy breakdown and engine timeline. Definitions: docs/analysis.md.

Roofline: one point per layer with MACs, x = arithmetic intensity (MACs per off-chip byte
the layer moved, reads + writes, all memories), y = achieved MACs per cycle (MACs / layer
cycles); the compute roof is the matrix engine's peak MACs/cycle, each bandwidth roof is
intensity x the bytes/cycle a DMA gets from that memory (min(memory, SRAM) bytes/cycle) for
the weights and the activations memory. A dash-dotted line marks the vector engine's lanes
(depthwise convolutions run there at one MAC per lane per cycle at best).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass

from tessel.analysis.timeline import PROGRAM_LAYER, Timeline
from tessel.display import plural
from tessel.isa.fields import Engine
from tessel.runtime.profile import Profile

BOUND_COLOURS = {"compute": "tab:blue", "vector": "tab:green", "dram": "tab:red",
                 "latency": "tab:orange"}
TOP_LAYERS = 10  # the timeline colours the slowest layers (one colour each), the rest grey
GREY = (0.72, 0.72, 0.72, 1.0)  # layers outside the top TOP_LAYERS
PROGRAM_GREY = (0.45, 0.45, 0.45, 1.0)  # instructions outside every layer
DPI = 100
ANNOTATED = 6  # roofline points labelled with their layer name (most cycles first)


@dataclass(frozen=True)
class RooflinePoint:
    layer: str  # module path (IR name when there is none)
    bound: str
    intensity: float  # MACs per off-chip byte; math.inf when the layer moved no off-chip byte
    macs_per_cycle: float
    macs: int
    cycles: int


@dataclass(frozen=True)
class Roof:
    label: str
    bytes_per_cycle: float


def roofline_points(profile: Profile) -> list[RooflinePoint]:
    """One point per layer with MACs and cycles."""
    out = []
    for lay in profile.layers:
        if lay.macs <= 0 or lay.cycles <= 0:
            continue
        moved = sum(lay.bytes_read.values()) + sum(lay.bytes_written.values())
        out.append(RooflinePoint(lay.label, lay.bound, lay.macs / moved if moved else math.inf,
                                 lay.macs / lay.cycles, lay.macs, lay.cycles))
    return out


def bandwidth_roofs(timeline: Timeline) -> list[Roof]:
    """Roofs of the weights and activations memories (one roof if they are the same)."""
    arch = timeline.compiled.arch
    sram_bw = arch.derived.sram_bytes_per_cycle
    roofs: list[Roof] = []
    for role, name in (("weights", arch.weights_memory), ("activations", arch.activations_memory)):
        mem = arch.offchip[arch.memory_index(name)]
        bw = float(min(mem.bytes_per_cycle, sram_bw))
        same = [r for r in roofs if r.label.startswith(name + " ")]
        if same:
            roofs[roofs.index(same[0])] = Roof(f"{same[0].label[:-1]}+{role})", bw)
        else:
            roofs.append(Roof(f"{name} {bw:g} B/cycle ({role})", bw))
    return roofs


def figure(width: float, height: float):
    """A matplotlib Figure on its own Agg canvas (no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def png_bytes(fig) -> bytes:
    """The figure as PNG bytes (no timestamp or software tag: the same bytes every run)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def roofline_png(profile: Profile, timeline: Timeline) -> bytes:
    points = roofline_points(profile)
    peak = float(timeline.compiled.arch.peak_macs_per_cycle)
    roofs = bandwidth_roofs(timeline)
    fig = figure(8, 5)
    ax = fig.add_subplot(1, 1, 1)
    finite = [p.intensity for p in points if math.isfinite(p.intensity)]
    ridges = [peak / r.bytes_per_cycle for r in roofs]
    lo = min(finite + ridges) / 4
    hi = max(finite + ridges) * 4
    xs = [lo * (hi / lo) ** (k / 200) for k in range(201)]
    lanes = timeline.compiled.arch.vector.lanes
    ax.axhline(peak, color="black", lw=1.5, label=f"compute roof {peak:g} MACs/cycle")
    ax.axhline(lanes, color="tab:green", lw=1, ls="-.",
               label=f"vector engine (depthwise) {lanes} MACs/cycle")
    for r, style in zip(roofs, ("--", ":"), strict=False):
        ax.plot(xs, [min(peak, r.bytes_per_cycle * x) for x in xs], style, color="gray",
                lw=1.5, label=f"bandwidth roof: {r.label}")
    for bound, colour in BOUND_COLOURS.items():
        sel = [p for p in points if p.bound == bound]
        if sel:
            ax.scatter([min(p.intensity, hi) for p in sel], [p.macs_per_cycle for p in sel],
                       s=22, color=colour, label=f"layers bound by {bound} (estimate)", zorder=3)
    other = [p for p in points if p.bound not in BOUND_COLOURS]
    if other:
        ax.scatter([min(p.intensity, hi) for p in other], [p.macs_per_cycle for p in other],
                   s=22, color="tab:purple", label="other layers", zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ymin = min([p.macs_per_cycle for p in points] + [peak, lanes]) / 4
    ax.set_ylim(ymin, peak * 2)
    ax.set_xlabel("arithmetic intensity (MACs per off-chip byte)")
    ax.set_ylabel("achieved MACs per cycle")
    ax.set_title(f"Roofline: {plural(len(points), 'layer')} with MACs on "
                 f"{timeline.compiled.arch.name}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()  # before the labels: their overlap test needs the final axes geometry
    _label_slowest(ax, points, hi)
    return png_bytes(fig)


_LEADER = {"arrowstyle": "-", "lw": 0.5, "color": "0.45", "shrinkA": 0, "shrinkB": 3}


def _label_slowest(ax, points: list[RooflinePoint], hi: float) -> None:
    """Name the slowest layers (they matter most for latency) next to their points; each label
    takes the first of 16 positions around its point that overlaps no earlier label (a label
    with no free position is left out rather than drawn over another)."""
    renderer = ax.figure.canvas.get_renderer()
    placed: list = []
    offsets = [(sx * dx, sy * dy) for dy, dx in ((4, 5), (12, 5), (22, 10), (34, 14))
               for sy in (1, -1) for sx in (1, -1)]
    for p in sorted(points, key=lambda p: (-p.cycles, p.layer))[:ANNOTATED]:
        xy = (min(p.intensity, hi), p.macs_per_cycle)
        for dx, dy in offsets:
            text = ax.annotate(p.layer, xy, fontsize=7, xytext=(dx, dy), textcoords="offset points",
                               ha="left" if dx > 0 else "right", va="bottom" if dy > 0 else "top",
                               arrowprops=None if abs(dy) < 10 else _LEADER)
            ax.figure.canvas.draw()  # final geometry of this label
            box = text.get_window_extent(renderer).expanded(1.06, 1.3)
            if not any(box.overlaps(b) for b in placed):
                placed.append(box)
                break
            text.remove()


def energy_groups(energy_pj: dict[str, float], offchip: list[str]) -> list[tuple[str, float]]:
    """Energy per inference grouped for display: MAC, SRAM (with the matrix operand buffers),
    accumulator, each off-chip memory, vector, LUT, static (pJ)."""
    groups = [("MAC", energy_pj.get("mac", 0.0)),
              ("SRAM", energy_pj.get("sram_read", 0.0) + energy_pj.get("sram_write", 0.0)
               + energy_pj.get("operand", 0.0)),
              ("accumulator", energy_pj.get("acc", 0.0))]
    groups += [(f"off-chip {name}", energy_pj.get(name, 0.0)) for name in offchip]
    groups += [("vector", energy_pj.get("vector", 0.0)), ("LUT", energy_pj.get("lut", 0.0)),
               ("static", energy_pj.get("static", 0.0))]
    return groups


def energy_png(profile: Profile, timeline: Timeline) -> bytes:
    groups = energy_groups(profile.energy_pj, [m.name for m in timeline.compiled.arch.offchip])
    total = math.fsum(v for _, v in groups) or 1.0
    fig = figure(8, 0.45 * len(groups) + 1.2)
    ax = fig.add_subplot(1, 1, 1)
    labels = [g for g, _ in groups][::-1]
    values = [v / 1e6 for _, v in groups][::-1]
    bars = ax.barh(labels, values, color="tab:blue")
    for bar, v in zip(bars, values, strict=True):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                f" {v:.3f} uJ ({100 * v * 1e6 / total:.1f} %)", va="center", fontsize=8)
    ax.set_xlim(0, max(values + [1e-12]) * 1.35)
    ax.set_xlabel("energy per inference (uJ)")
    ax.set_title(f"Energy breakdown: {total / 1e6:.3f} uJ per inference")
    fig.tight_layout()
    return png_bytes(fig)


def top_layers(profile: Profile, k: int = TOP_LAYERS) -> list[int]:
    """Indices of the ``k`` slowest layers, slowest first (ties: program order)."""
    order = sorted(range(len(profile.layers)), key=lambda i: (-profile.layers[i].cycles, i))
    return order[:k]


def layer_colours(profile: Profile) -> list[tuple[float, float, float, float]]:
    """One distinct colour (tab10) for each of the TOP_LAYERS slowest layers, grey for the rest."""
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    colours = [GREY] * len(profile.layers)
    for rank, i in enumerate(top_layers(profile)):
        colours[i] = cmap(rank % 10)
    return colours


def timeline_png(profile: Profile, timeline: Timeline) -> bytes:
    from matplotlib.patches import Patch

    us = 1e6 / timeline.compiled.arch.clock_hz
    colours = layer_colours(profile)
    fig = figure(11, 5.5)
    gantt, bw = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1.3]})
    engines = list(Engine)
    for row, e in enumerate(engines):
        y = len(engines) - 1 - row
        for sl in timeline.on(e):
            colour = colours[sl.layer_index] if sl.layer_index >= 0 else PROGRAM_GREY
            gantt.broken_barh([(s * us, (t - s) * us) for s, t in sl.bursts], (y - 0.4, 0.8),
                              facecolors=colour, linewidth=0)
    gantt.set_yticks(range(len(engines)), [e.name for e in reversed(engines)])
    gantt.set_title(f"Engine activity ({timeline.total_cycles:,} cycles); colour = layer, "
                    "gaps = waiting")
    top = top_layers(profile)
    handles = [Patch(color=colours[k], label=_short(profile.layers[k].label)) for k in top]
    if len(profile.layers) > len(top):
        handles.append(Patch(color=GREY, label=f"other {plural(len(profile.layers) - len(top), 'layer')}"))
    if any(sl.layer_index < 0 for sl in timeline.slices):
        handles.append(Patch(color=PROGRAM_GREY, label=PROGRAM_LAYER))
    if handles:
        gantt.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0),
                     title="slowest layer" if len(top) == 1 else f"slowest {len(top)} layers",
                     title_fontsize=7)
    _bandwidth_axis(bw, timeline, us)
    fig.tight_layout()
    return png_bytes(fig)


def _short(name: str, width: int = 28) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1):]


def _bandwidth_axis(ax, timeline: Timeline, us: float) -> None:
    edges, per_mem = timeline.bandwidth()
    gbps = timeline.compiled.arch.clock_hz / 1e9
    x = [float(v) * us for v in edges]
    for name, bpc in per_mem.items():
        ax.stairs([float(v) * gbps for v in bpc], x, label=f"{name}")
    for mem in timeline.compiled.arch.offchip:
        ax.axhline(mem.bytes_per_cycle * gbps, ls="--", lw=0.8, color="gray")
    ax.set_ylabel("off-chip GB/s")
    ax.set_xlabel("time (us)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
