"""`write_html`: one self-contained HTML report of a compiled model on its design point.

Sections: summary (``figures.summary_rows``), energy breakdown, roofline and engine timeline
(PNG plots from ``plots``, embedded as base64 data URIs), the per-layer table
(``table``), host ops, and the definitions. The page loads nothing from anywhere: no
scripts, no external style sheets, fonts or images. Every piece of text is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path

from tessel.analysis import plots
from tessel.analysis.figures import Summary, check_fps, summarize, summary_rows
from tessel.analysis.table import columns, layer_rows
from tessel.analysis.timeline import Timeline, build_timeline
from tessel.fileio import write_atomic as write_text
from tessel.runtime.compiled import CompiledModel
from tessel.runtime.profile import Profile

STYLE = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ddd; padding: 2px 6px; }
th { background: #f3f3f3; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.wide { overflow-x: auto; } .note { color: #555; font-size: 0.9em; }
img { max-width: 100%; }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _img(png: bytes, alt: str, ident: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img id="{_e(ident)}" alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _summary_section(s: Summary) -> str:
    rows = "".join(f'<tr data-field="{_e(key)}"><th>{_e(label)}</th><td>{_e(value)}</td></tr>'
                   for key, label, value in summary_rows(s))
    notes = ["Peak SRAM use is the highest scratchpad byte any instruction touches (each "
             "layer's SRAM is allocated from address 0)."]
    if not s.fps_achievable:
        notes.append(f"The frame rate {s.fps:g} fps is above the throughput "
                     f"({s.throughput_ips:,.1f} inferences/s): the design cannot keep up.")
    return (f'<section id="summary"><h2>Summary</h2><table class="summary">{rows}</table>'
            + "".join(f'<p class="note">{_e(n)}</p>' for n in notes) + "</section>")


def _energy_section(profile: Profile, tl: Timeline) -> str:
    groups = plots.energy_groups(profile.energy_pj, [m.name for m in tl.compiled.arch.offchip])
    rows = "".join(f'<tr data-component="{_e(name)}"><th>{_e(name)}</th>'
                   f'<td class="num">{_e(f"{pj / 1e6:.4f}")}</td></tr>' for name, pj in groups)
    return ('<section id="energy"><h2>Energy per inference</h2>'
            + _img(plots.energy_png(profile, tl), "energy breakdown", "energy-plot")
            + f'<table class="energy"><tr><th>component</th><th>uJ</th></tr>{rows}</table>'
            + "</section>")


def _roofline_section(profile: Profile, tl: Timeline) -> str:
    pts = plots.roofline_points(profile)
    skipped = len(profile.layers) - len(pts)
    no_bytes = sum(1 for p in pts if p.intensity == float("inf"))
    notes = [f"{len(pts)} layers plotted; compute roof {tl.compiled.arch.peak_macs_per_cycle} "
             "MACs/cycle; bandwidth roofs: "
             + "; ".join(r.label for r in plots.bandwidth_roofs(tl)) + "."]
    if skipped:
        notes.append(f"{skipped} layers without MACs (pooling, element-wise, data movement) "
                     "are not plotted.")
    if no_bytes:
        notes.append(f"{no_bytes} layers moved no off-chip byte; drawn at the right edge.")
    return ('<section id="roofline"><h2>Roofline</h2>'
            + _img(plots.roofline_png(profile, tl), "roofline", "roofline-plot")
            + "".join(f'<p class="note">{_e(n)}</p>' for n in notes) + "</section>")


def _timeline_section(profile: Profile, tl: Timeline) -> str:
    return ('<section id="timeline"><h2>Engine timeline</h2>'
            + _img(plots.timeline_png(profile, tl), "engine timeline", "timeline-plot")
            + '<p class="note">Bars are the cycles in which an engine runs an instruction of '
            "a layer; the lower panel is the average off-chip bandwidth (dashed: the "
            "memory's peak). The trace (--trace) has the same schedule, per instruction "
            "group.</p></section>")


def _layers_section(profile: Profile, tl: Timeline) -> str:
    cols = columns(profile, with_sram=True)
    head = "".join(f'<th data-key="{_e(c.key)}">{_e(c.label)}</th>' for c in cols)
    body = "".join(
        "<tr>" + "".join(f'<td class="num">{_e(v)}</td>' if c.numeric else f"<td>{_e(v)}</td>"
                         for c, v in zip(cols, row, strict=True)) + "</tr>"
        for row in layer_rows(profile, tl.sram_peaks.per_layer_sram))
    return (f'<section id="layers"><h2>Layers ({len(profile.layers)})</h2><div class="wide">'
            f'<table id="layer-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
            "</table></div></section>")


def _host_section(profile: Profile) -> str:
    if not profile.host_ops:
        return ('<section id="host-ops"><h2>Host ops</h2><p>None: the whole model runs on '
                "the NPU.</p></section>")
    items = "".join(f"<li><code>{_e(op)}</code></li>" for op in profile.host_ops)
    return (f'<section id="host-ops"><h2>Host ops ({len(profile.host_ops)})</h2><p>These run '
            f"on the CPU and are not in the cycle count.</p><ul>{items}</ul></section>")


DEFINITIONS = (
    "Cycles: from the first instruction issued to the last output byte written (simulator "
    "timing model). Latency = cycles / clock. Throughput = clock / cycles. MAC utilisation = "
    "MACs / (cycles x peak MACs per cycle). Energy = per-instruction events x the preset's "
    "per-event energies + static power x latency. Average power = dynamic energy x fps + "
    "static power. TOPS/W = 2 x MACs / energy per inference. Layer cycles = the layer's span "
    "in the schedule (layers may overlap). Full definitions: docs/analysis.md and "
    "BENCHMARKS.md."
)


def _advice_section(advice) -> str:
    """Co-design advice (tessel.analysis.advise.Advice): what binds, and the ranked gains."""
    if advice is None:
        return ""
    rows = "".join(
        f"<tr><td>{_e(g.change)}</td><td>{_e(g.limit.value)}</td>"
        f"<td>{g.latency_gain_pct:.1f} %</td><td>{g.energy_gain_pct:.1f} %</td>"
        f"<td>{_e(f'{g.area_mm2_delta:+.4f} mm2 ({g.area_pct:+.1f} %)' if g.area_modelled else 'n/m')}"
        f"</td></tr>" for g in advice.ranked)
    return (f'<section id="advice"><h2>Co-design advice</h2><p>Binding limit of the whole '
            f'model: {_e(advice.binding.value)}. Gains of relaxing each parameter 2x, with the '
            f'compiler in the loop (mappings and fusion re-searched), ranked:</p>'
            f'<table id="advice-table"><thead><tr><th>change</th><th>limit</th>'
            f'<th>latency gain</th><th>energy gain</th><th>area cost</th></tr></thead>'
            f'<tbody>{rows}</tbody></table></section>')


def report_html(compiled: CompiledModel, fps: float = 30.0,
                timeline: Timeline | None = None, advice=None) -> str:
    """The report page as a string (with a co-design advice section when `advice` is given:
    `tessel.analysis.advise.advise(graph, arch)`)."""
    fps = check_fps(fps)
    tl = timeline or build_timeline(compiled)
    profile = compiled.profile
    s = summarize(profile, tl, fps)
    title = f"Tessel report: {s.model} on {s.target}"
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="note">{_e(compiled.arch.description)} Architecture hash '
        f"{_e(compiled.arch.arch_hash[:16])}.</p>",
        _summary_section(s), _energy_section(profile, tl), _roofline_section(profile, tl),
        _timeline_section(profile, tl), _layers_section(profile, tl), _host_section(profile),
        _advice_section(advice),
        f'<section id="definitions"><h2>Definitions</h2><p>{_e(DEFINITIONS)}</p></section>',
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def write_html(compiled: CompiledModel, path: str | Path, fps: float = 30.0,
               timeline: Timeline | None = None, advice=None) -> Path:
    """Write the self-contained HTML report of ``compiled`` (power figures at ``fps``)."""
    return write_text(path, report_html(compiled, fps, timeline, advice))
