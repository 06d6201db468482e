"""tessel.analysis: reports of a compiled model (HTML with plots, Chrome/Perfetto trace,
per-layer CSV). docs/analysis.md explains how to read them.

    from tessel.analysis import write_html, write_trace, write_csv
    write_html(cm, "report.html", fps=30); write_trace(cm, "trace.json")
    write_csv(cm.profile, "layers.csv")
"""

_LAZY = {  # imported on first use, so that `tessel --help` does not load the runtime
    "write_csv": "tessel.analysis.csv", "report_html": "tessel.analysis.html",
    "write_html": "tessel.analysis.html", "Timeline": "tessel.analysis.timeline",
    "build_timeline": "tessel.analysis.timeline", "trace_events": "tessel.analysis.trace",
    "write_trace": "tessel.analysis.trace",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tessel.analysis' has no attribute {name!r}")


__all__ = ["Timeline", "build_timeline", "report_html", "trace_events", "write_csv",
           "write_html", "write_trace"]
