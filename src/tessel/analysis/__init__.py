"""tessel.analysis: reports of a compiled model (HTML with plots, Chrome/Perfetto trace,
per-layer CSV). docs/analysis.md explains how to read them.

    from tessel.analysis import write_html, write_trace, write_csv
    write_html(cm, "report.html", fps=30); write_trace(cm, "trace.json")
    write_csv(cm.profile, "layers.csv")
"""

from tessel.analysis.csv import write_csv
from tessel.analysis.html import report_html, write_html
from tessel.analysis.timeline import Timeline, build_timeline
from tessel.analysis.trace import trace_events, write_trace

__all__ = ["Timeline", "build_timeline", "report_html", "trace_events", "write_csv",
           "write_html", "write_trace"]
