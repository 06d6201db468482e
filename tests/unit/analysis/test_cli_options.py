"""`--html/--trace/--csv/--fps` on a parser and `write_reports`, end to end on digits_cnn
compiled from PyTorch (the lead wires these into `tessel profile`)."""

from __future__ import annotations

import argparse
import csv
import json

import pytest

from tessel.analysis.cli_options import add_report_arguments, write_reports
from tessel.errors import TesselConfigError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    add_report_arguments(p)
    return p


def test_options_parse_and_nothing_is_written_without_them(compiled):
    args = parser().parse_args(["m.tsl"])
    assert (args.html, args.trace, args.csv, args.fps) == (None, None, None, 30.0)
    assert write_reports(args, compiled) == []
    with pytest.raises(TesselConfigError, match="frame rate"):
        write_reports(parser().parse_args(["m.tsl", "--fps", "-3"]), compiled)


def test_reports_for_a_pytorch_model(tmp_path):
    from tessel.driver import compile as tessel_compile
    from tessel.models import resolve

    spec = resolve("digits_cnn")
    model, inputs = spec.factory()
    cm = tessel_compile(model, inputs, target="tnpu-s", calibration_data=spec.calibration_data(4),
                        name="digits_cnn")
    files = [tmp_path / n for n in ("r.html", "t.json", "l.csv")]
    args = parser().parse_args(["m.tsl", "--html", str(files[0]), "--trace", str(files[1]),
                                "--csv", str(files[2]), "--fps", "15"])
    assert sorted(write_reports(args, cm)) == sorted(files)
    layers = [lay.label for lay in cm.profile.layers]  # module paths: conv1, fc, ...
    assert any(lay.label != lay.name for lay in cm.profile.layers)
    with files[2].open() as f:
        rows = list(csv.DictReader(f))
    assert [r["layer"] for r in rows] == layers
    assert [r["ir_name"] for r in rows] == [lay.name for lay in cm.profile.layers]
    slices = [ev for ev in json.loads(files[1].read_text())["traceEvents"]
              if ev.get("cat") == "layer"]
    assert set(layers) <= {ev["name"] for ev in slices}  # one name in every report
    assert {ev["args"]["ir_name"] for ev in slices} <= {lay.name for lay in cm.profile.layers}
    text = files[0].read_text()
    assert "at 15 fps" in text and text.count("data:image/png;base64,") >= 3
    body = text[text.index('<table id="layer-table">'):]
    assert [f"<tr><td>{x}</td>" in body for x in layers] == [True] * len(layers)
