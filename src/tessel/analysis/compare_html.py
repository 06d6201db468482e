"""`write_compare_html`: a comparison (tessel.analysis.compare) as one self-contained HTML page,
the comparison plotted (a PNG embedded as a data URI) above its tables. Like the report
(tessel.analysis.html), the page loads nothing from anywhere and escapes every piece of text.

Targets: grouped bars per model, one bar per target, for latency, energy per inference, MAC
utilisation and off-chip traffic, and each target's area labelled with its process node.
Binaries: the cycles of the layers that changed most, a against b.
"""

from __future__ import annotations

import base64
import dataclasses
import html
from pathlib import Path

from tessel.analysis.compare import BinaryComparison, TargetComparison
from tessel.analysis.plots import figure, png_bytes
from tessel.fileio import write_atomic

STYLE = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1280px; padding: 0 1em;
       color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 2px 6px; } th { background: #f3f3f3; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
caption { text-align: left; font-weight: bold; padding: 0.3em 0; }
.note { color: #555; font-size: 0.9em; } img { max-width: 100%; }
"""
PLOTTED_LAYERS = 20  # layers in the binaries' plot (largest cycle changes)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img id="compare-plot" alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def targets_png(cmp: TargetComparison) -> bytes:
    """Grouped bars: one group per model, one bar per target, five figures."""
    names = [t.name for t in cmp.targets]
    panels = (("latency (ms)", lambda r: r.latency_ms),
              ("energy per inference (uJ)", lambda r: r.energy_uj),
              ("MAC utilisation (%)", lambda r: 100 * r.mac_utilisation),
              ("off-chip traffic (MB)", lambda r: r.offchip_bytes / 1e6))
    fig = figure(11, 8)
    axes = fig.subplots(3, 2).ravel()
    width = 0.8 / len(names)
    xs = range(len(cmp.models))
    for ax, (label, value) in zip(axes, panels, strict=False):
        for k, t in enumerate(names):
            ax.bar([x + (k - (len(names) - 1) / 2) * width for x in xs],
                   [value(cmp.result(m, t)) for m in cmp.models], width, label=t)
        ax.set_xticks(list(xs), list(cmp.models), fontsize=8)
        ax.set_title(label, fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    area = axes[4]
    bars = area.bar(names, [t.area_mm2 for t in cmp.targets], color=[
        f"C{k}" for k in range(len(names))])
    for bar, t in zip(bars, cmp.targets, strict=True):
        area.annotate(f"{t.process_node_nm} nm", (bar.get_x() + bar.get_width() / 2,
                                                  bar.get_height()),
                      ha="center", va="bottom", fontsize=8)
    area.set_title("area (mm2, at each target's process node)", fontsize=10)
    area.tick_params(axis="x", labelsize=8)
    area.set_ylim(0, max(t.area_mm2 for t in cmp.targets) * 1.2)
    handles, labels = axes[0].get_legend_handles_labels()
    axes[5].axis("off")
    axes[5].legend(handles, labels, title="target", loc="center")
    fig.suptitle(f"{', '.join(cmp.models)} on {', '.join(names)} (analytical estimate)")
    fig.tight_layout()
    return png_bytes(fig)


def binaries_png(cmp: BinaryComparison) -> bytes:
    """Horizontal bars: the cycles of the layers that changed most, a against b."""
    shown = cmp.layer_table(PLOTTED_LAYERS).rows
    fig = figure(10, 0.35 * max(len(shown), 1) + 1.8)
    ax = fig.add_subplot(1, 1, 1)
    ys = list(range(len(shown)))[::-1]
    a = [int(r[2].replace(",", "")) if r[2] != "-" else 0 for r in shown]
    b = [int(r[3].replace(",", "")) if r[3] != "-" else 0 for r in shown]
    ax.barh([y + 0.2 for y in ys], a, 0.4, label=f"a: {cmp.a.name}")
    ax.barh([y - 0.2 for y in ys], b, 0.4, label=f"b: {cmp.b.name}")
    ax.set_yticks(ys, [r[0] for r in shown], fontsize=8)
    ax.set_xlabel("cycles (simulator's timing model)")
    ax.set_title(f"{len(shown)} of {len(cmp.changed)} changed layers, largest change first; "
                 f"total {cmp.a.cycles:,} -> {cmp.b.cycles:,} cycles", fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return png_bytes(fig)


def compare_html(cmp: TargetComparison | BinaryComparison) -> str:
    """The page as a string."""
    if isinstance(cmp, TargetComparison):
        title = f"Tessel comparison: {', '.join(cmp.models)} on " \
                f"{', '.join(t.name for t in cmp.targets)}"
        intro = cmp.summary().split("\n")
        plot = _img(targets_png(cmp), "the comparison plotted")
        tables = [dataclasses.replace(cmp.table(), html_id="compare-table"),
                  dataclasses.replace(cmp.bound_table(), html_id="bound-table")]
        note = ("Figures are the analytical estimate (the schedule the compiler would emit for "
                "each target, mappings and fusion searched per target); areas are at each "
                "target's own process node. A bound change is a layer run as the same step on "
                "every target whose cost-model bound differs (compute, vector, dram, latency).")
    else:
        title = f"Tessel comparison: {cmp.a.name} vs {cmp.b.name}"
        intro = [f"a = {cmp.a.name} ({cmp.a.model} on {cmp.a.target}), b = {cmp.b.name} "
                 f"({cmp.b.model} on {cmp.b.target})"]
        plot = _img(binaries_png(cmp), "the changed layers plotted")
        tables = [dataclasses.replace(cmp.totals_table(), html_id="compare-table"),
                  dataclasses.replace(cmp.layer_table(), html_id="layer-table")]
        note = ("Figures are the simulator's timing model and energy events of each binary; "
                "layers are matched by IR name and named by module path.")
    items = "".join(f"<li>{_e(x)}</li>" for x in intro)
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>", f"<ul>{items}</ul>", plot,
        *(t.html() for t in tables), f'<p class="note">{_e(note)}</p>', "</body></html>"]) + "\n"


def write_compare_html(cmp: TargetComparison | BinaryComparison, path: str | Path) -> Path:
    """Write the comparison page (atomically)."""
    return write_atomic(path, compare_html(cmp))
