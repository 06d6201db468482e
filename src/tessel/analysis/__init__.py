"""tessel.analysis: reports of a compiled model (HTML with plots, Chrome/Perfetto trace,
per-layer CSV). docs/analysis.md explains how to read them.

    from tessel.analysis import write_html, write_trace, write_csv
    write_html(cm, "report.html", fps=30); write_trace(cm, "trace.json")
    write_csv(cm.profile, "layers.csv")
"""

import importlib
from typing import Any

_EXPORTS = {"write_csv": "csv", "report_html": "html", "write_html": "html",
            "Timeline": "timeline", "build_timeline": "timeline", "trace_events": "trace",
            "write_trace": "trace"}


def __getattr__(name: str) -> Any:
    """The report functions, imported on first use (so the CLI starts fast)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tessel.analysis' has no attribute {name!r}")
    return getattr(importlib.import_module(f"tessel.analysis.{_EXPORTS[name]}"), name)


__all__ = ["Timeline", "build_timeline", "report_html", "trace_events", "write_csv",
           "write_html", "write_trace"]
