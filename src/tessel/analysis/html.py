"""`write_html`: one self-contained HTML report of a compiled model on its design point.

Sections: summary (``figures.summary_rows``), energy breakdown, roofline and engine timeline
(PNG plots from ``plots``, embedded as base64 data URIs), the per-layer table
(``table``: layers named by module path, the IR name in a tooltip; a small inline script
sorts it by any column and pages it, and without scripts every row simply shows), host ops,
and the definitions. The page loads nothing from anywhere: no external script, style sheet,
font or image. Every piece of text is HTML-escaped.
"""

from __future__ import annotations

import base64
import dataclasses
import html
from pathlib import Path

from tessel.analysis import plots
from tessel.analysis.figures import Summary, check_fps, summarize, summary_rows
from tessel.analysis.table import columns, layer_rows
from tessel.analysis.timeline import Timeline, build_timeline
from tessel.display import plural
from tessel.fileio import write_atomic as write_text
from tessel.runtime.compiled import CompiledModel
from tessel.runtime.profile import Profile

STYLE = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1280px; padding: 0 1em;
       color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ddd; padding: 2px 6px; }
th { background: #f3f3f3; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.clip { max-width: 9em; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
td.wrap { min-width: 8em; max-width: 16em; overflow-wrap: anywhere; }
.wide { overflow-x: auto; } .note { color: #555; font-size: 0.9em; }
#layer-table { font-size: 0.8em; }
#layer-table th { cursor: pointer; vertical-align: bottom; min-width: 3em; }
#layer-table th.asc::after { content: " \\25B2"; } #layer-table th.desc::after { content: " \\25BC"; }
.pager { margin: 0.4em 0; font-size: 0.85em; } .pager button { margin-right: 0.4em; }
dl.defs dt { font-weight: bold; margin-top: 0.4em; } dl.defs dd { margin-left: 1.5em; }
img { max-width: 100%; }
"""

PAGE_ROWS = 25  # rows per page of the layer table (with scripts on)

# Sort by a header click (numbers by their data-v value), page the rows; no external code.
SCRIPT = """
(function () {
  var table = document.getElementById("layer-table"); if (!table) return;
  var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
  var size = __PAGE_ROWS__, page = 0, pager = document.getElementById("layer-pager");
  function show() {
    var pages = Math.max(1, Math.ceil(rows.length / size));
    page = Math.min(Math.max(page, 0), pages - 1);
    rows.forEach(function (r, i) {
      r.style.display = (i >= page * size && i < (page + 1) * size) ? "" : "none"; });
    pager.querySelector("span").textContent = "page " + (page + 1) + " of " + pages +
      " (" + rows.length + (rows.length === 1 ? " layer)" : " layers)");
  }
  pager.innerHTML = '<button type="button">previous</button><button type="button">next' +
    '</button><button type="button">all</button><span></span>';
  var b = pager.querySelectorAll("button");
  b[0].onclick = function () { page -= 1; show(); };
  b[1].onclick = function () { page += 1; show(); };
  b[2].onclick = function () { size = size === rows.length ? __PAGE_ROWS__ : rows.length; page = 0; show(); };
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
    th.onclick = function () {
      var asc = !th.classList.contains("asc");
      Array.prototype.forEach.call(th.parentNode.cells, function (h) {
        h.classList.remove("asc", "desc"); });
      th.classList.add(asc ? "asc" : "desc");
      rows.sort(function (x, y) {
        var a = x.cells[col], c = y.cells[col], va = a.dataset.v, vc = c.dataset.v;
        var d = (va !== undefined && vc !== undefined) ? (+va - +vc)
          : a.textContent.localeCompare(c.textContent);
        return asc ? d : -d; });
      rows.forEach(function (r) { body.appendChild(r); });
      page = 0; show();
    };
  });
  show();
})();
""".replace("__PAGE_ROWS__", str(PAGE_ROWS))


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _img(png: bytes, alt: str, ident: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img id="{_e(ident)}" alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _summary_section(s: Summary) -> str:
    rows = "".join(f'<tr data-field="{_e(key)}"><th>{_e(label)}</th><td>{_e(value)}</td></tr>'
                   for key, label, value in summary_rows(s))
    notes = ["A layer's SRAM working set is the scratchpad bytes its instructions touch (tiles "
             "and the resident tensors it reads or writes); the highest byte touched includes "
             "tensors kept resident on chip between layers."]
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
    notes = [f"{plural(len(pts), 'layer')} plotted; compute roof {tl.compiled.arch.peak_macs_per_cycle} "
             "MACs/cycle; bandwidth roofs: "
             + "; ".join(r.label for r in plots.bandwidth_roofs(tl)) + "."]
    if skipped:
        notes.append(f"{plural(skipped, 'layer')} without MACs (pooling, element-wise, data "
                     "movement) "
                     "are not plotted.")
    if no_bytes:
        notes.append(f"{plural(no_bytes, 'layer')} moved no off-chip byte; drawn at the right "
                     "edge.")
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
    raw = layer_rows(profile, tl.sram_peaks.per_layer_working_set)
    pretty = layer_rows(profile, tl.sram_peaks.per_layer_working_set, pretty=True)
    head = "".join(f'<th data-key="{_e(c.key)}">{_e(c.label)}</th>' for c in cols)
    body = "".join("<tr>" + "".join(_cell(c, r[k], p[k]) for k, c in enumerate(cols)) + "</tr>"
                   for r, p in zip(raw, pretty, strict=True))
    note = ("Layers are named by their PyTorch module path (their IR name when the model "
            "recorded no module); the IR name is the second column. Hover over a clipped "
            "source cell for its full path. Click a header to sort; numbers use thousands "
            "separators.")
    return (f'<section id="layers"><h2>Layers ({len(profile.layers)})</h2>'
            f'<p class="note">{_e(note)}</p><div class="pager" id="layer-pager"></div>'
            f'<div class="wide"><table id="layer-table"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div></section>")


def _cell(col, raw: str, text: str) -> str:
    if col.numeric:
        return f'<td class="num" data-v="{_e(raw)}">{_e(text)}</td>'
    if col.key in ("mapping", "ir_name"):  # whole, wrapped: never hidden
        return f'<td class="wrap">{_e(text)}</td>'
    if col.key == "loc":
        return f'<td class="clip" title="{_e(text)}">{_e(text)}</td>'
    return f"<td>{_e(text)}</td>"


def _host_section(profile: Profile) -> str:
    if not profile.host_ops:
        return ('<section id="host-ops"><h2>Host ops</h2><p>None: the whole model runs on '
                "the NPU.</p></section>")
    items = "".join(f"<li><code>{_e(op)}</code></li>" for op in profile.host_ops)
    return (f'<section id="host-ops"><h2>Host ops ({len(profile.host_ops)})</h2><p>These run '
            f"on the CPU and are not in the cycle count.</p><ul>{items}</ul></section>")


DEFINITIONS = (
    ("Cycles", "From the first instruction issued to the last output byte written, in the "
     "simulator's timing model (data-independent). Host (CPU) ops are listed separately and "
     "never counted."),
    ("Latency / throughput", "Latency = cycles / clock frequency; throughput = clock / cycles "
     "(inferences per second, one inference at a time)."),
    ("MACs", "The model's multiply-accumulates per inference, counted for convolutions "
     "(depthwise included), linear layers and matrix multiplies only, as PyTorch's "
     "FlopCounterMode counts FLOPs / 2; halo rows that fused stripes recompute are not "
     "counted twice."),
    ("MAC utilisation", "MACs / (cycles x the matrix engine's peak MACs per cycle)."),
    ("Energy", "Per-instruction events (MACs, SRAM / accumulator bytes, off-chip bytes, vector "
     "ops, LUT lookups) x the preset's per-event energies, plus static power x latency."),
    ("Average power", "Dynamic energy per inference x frame rate + static power (the NPU "
     "leaks all the time and idles between frames)."),
    ("SRAM working set", "The scratchpad bytes a layer's instructions touch (the union of their "
     "operand boxes, resident tensors included); the summary gives the largest, and the "
     "highest scratchpad byte any instruction touches (tensors kept resident between layers "
     "sit at the top of the scratchpad)."),
    ("TOPS/W", "2 x MACs / energy per inference (one MAC = two operations)."),
    ("Layer cycles", "A layer's span in the schedule, first instruction start to last "
     "instruction end on any engine; layers overlap in a pipelined schedule, so shares of "
     "cycles need not add up to 100 %."),
    ("Estimate error", "(analytical estimate - simulated cycles) / simulated cycles."),
    ("Bound", "What limits the layer in the cost model: compute (MAC array), vector (vector "
     "lanes), dram (off-chip bandwidth) or latency (DMA latency)."),
    ("Off-chip traffic", "Bytes read and written per off-chip memory by DMA. DRAM arena: the "
     "activation arena the memory planner laid out (tensors that are not live at the same "
     "time share bytes), against one buffer per tensor."),
)


def _definitions_section() -> str:
    items = "".join(f"<dt>{_e(term)}</dt><dd>{_e(text)}</dd>" for term, text in DEFINITIONS)
    return (f'<section id="definitions"><h2>Definitions</h2><dl class="defs">{items}</dl>'
            '<p class="note">The same definitions, with the cost and energy models, are in '
            "the project's docs/analysis.md.</p></section>")


def _advice_section(advice) -> str:
    """Co-design advice (tessel.analysis.advise.Advice): what binds, and the ranked changes
    (signed: negative latency / energy = less than now; the same table as `tessel advise`)."""
    if advice is None:
        return ""
    table = dataclasses.replace(advice.ranked_table(), html_id="advice-table")
    return (f'<section id="advice"><h2>Co-design advice</h2><p>Binding limit of the whole '
            f'model: {_e(advice.binding.value)}. Changes from relaxing each parameter 2x, with '
            f'the compiler in the loop (mappings and fusion re-searched), ranked:</p>'
            f"{table.html()}</section>")


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
        _advice_section(advice), _definitions_section(),
        f"<script>{SCRIPT}</script>", "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def write_html(compiled: CompiledModel, path: str | Path, fps: float = 30.0,
               timeline: Timeline | None = None, advice=None) -> Path:
    """Write the self-contained HTML report of ``compiled`` (power figures at ``fps``)."""
    return write_text(path, report_html(compiled, fps, timeline, advice))
