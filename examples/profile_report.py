"""Profile a compiled binary: the summary, the slowest layers, and the reports (HTML with
plots, a Perfetto trace, a per-layer CSV).

    python examples/profile_report.py model.tsl [--out DIR]

The command line: `tessel profile model.tsl --html report.html --trace trace.json --csv l.csv`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import tessel
from tessel.analysis.csv import write_csv
from tessel.analysis.html import write_html
from tessel.analysis.timeline import build_timeline
from tessel.analysis.trace import write_trace


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary")
    ap.add_argument("--out", default=".", help="folder for report.html, trace.json, layers.csv")
    args = ap.parse_args(argv)

    cm = tessel.load(args.binary)
    print(cm.profile.summary())
    print(cm.profile.layer_table(5).text(100))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timeline = build_timeline(cm)  # the timing schedule, computed once for the three reports
    for path in (write_html(cm, out / "report.html", timeline=timeline),
                 write_trace(cm, out / "trace.json", timeline),
                 write_csv(cm.profile, out / "layers.csv",
                           timeline.sram_peaks.per_layer_working_set)):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
