"""Report options for `tessel profile` (wired by the CLI's owner):

    add_report_arguments(parser)          # --html FILE, --trace FILE, --csv FILE, --fps N
    written = write_reports(args, cm)     # after loading the binary; returns the files written
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI builds its parser without the runtime (tessel --help stays fast)
    from tessel.runtime.compiled import CompiledModel


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("reports")
    group.add_argument("--html", type=Path, metavar="FILE",
                       help="write a self-contained HTML report (summary, plots, layer table)")
    group.add_argument("--trace", type=Path, metavar="FILE",
                       help="write a Chrome/Perfetto trace-event JSON (ui.perfetto.dev)")
    group.add_argument("--csv", type=Path, metavar="FILE",
                       help="write the per-layer table as CSV")
    group.add_argument("--fps", type=float, default=30.0, metavar="N",
                       help="frame rate for the report's average power (default 30)")
    group.add_argument("--advise", action="store_true",
                       help="add the co-design advice section to the HTML report (re-quantises "
                       "the model the binary names, then relaxes each parameter 2x)")


def write_reports(args: argparse.Namespace, compiled: CompiledModel) -> list[Path]:
    """Write the reports ``args`` asks for (none if no option was given); the timing schedule
    is computed once and shared."""
    from tessel.analysis.figures import check_fps

    html_path = getattr(args, "html", None)
    trace_path = getattr(args, "trace", None)
    csv_path = getattr(args, "csv", None)
    fps = check_fps(getattr(args, "fps", 30.0))
    if not (html_path or trace_path or csv_path):
        return []
    from tessel.analysis.csv import write_csv
    from tessel.analysis.html import write_html
    from tessel.analysis.timeline import build_timeline
    from tessel.analysis.trace import write_trace

    timeline = build_timeline(compiled)
    written = []
    if csv_path:
        written.append(write_csv(compiled.profile, csv_path,
                                 timeline.sram_peaks.per_layer_working_set))
    if trace_path:
        written.append(write_trace(compiled, trace_path, timeline))
    if html_path:
        advice = _advice(compiled, getattr(args, "binary", None)) \
            if getattr(args, "advise", False) else None
        written.append(write_html(compiled, html_path, fps, timeline, advice))
    return written


def _advice(compiled: CompiledModel, binary: Path | None = None):
    """Advice for the model the binary was compiled from (its metadata names the source)."""
    from tessel.analysis.advise import advise
    from tessel.runtime.source import requantize_source

    source = compiled.program.metadata.get("source")
    _, _, qm = requantize_source(source, "--advise", binary)
    return advise(qm.graph, compiled.arch, name=source["model"])
