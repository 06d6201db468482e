"""Every command's tables fit the terminal: with COLUMNS at 100 and at 200, no line is longer,
nothing is cut ("…"), and every op and mapping name of the command's JSON is there whole
(at 200 columns on one line; at 100 in the pieces a wrapped cell is broken into); CSV and
JSON are never cut. One tiny model, compiled once."""

from __future__ import annotations

import csv
import json
import re

import pytest
from test_cli_json import TINY

from tessel.cli import main

PIECES = re.compile(r"[^ +.,_=/:-]+[+.,_=/:-]*")


def _run(capsys, argv: list[str]) -> str:
    assert main(argv) == 0, argv
    return capsys.readouterr().out


def _readable(text: str, name: str, width: int) -> bool:
    """``name`` is in ``text``: whole on one line, or (wrapped) each of its pieces."""
    if width >= 200:
        return name in text
    return all(p in text for p in PIECES.findall(name))


@pytest.mark.slow
def test_tables_fit_100_and_200_columns_and_keep_every_name(tmp_path, capsys, monkeypatch):
    model_file = tmp_path / "tiny.py"
    model_file.write_text(TINY)
    model, tsl, tsl2 = f"{model_file}:make", tmp_path / "a.tsl", tmp_path / "b.tsl"
    space = tmp_path / "space.toml"
    space.write_text("[matrix]\nrows = [8, 16]\n")
    _run(capsys, ["-q", "compile", model, "-o", str(tsl), "--calibration", "2"])
    _run(capsys, ["-q", "compile", model, "-o", str(tsl2), "--calibration", "2",
                  "--no-on-chip-residency"])
    prof = json.loads(_run(capsys, ["profile", str(tsl), "--json", "--csv",
                                    str(tmp_path / "l.csv")]))
    est = json.loads(_run(capsys, ["-q", "estimate", model, "--calibration", "2", "--json"]))
    adv = json.loads(_run(capsys, ["-q", "advise", model, "--calibration", "2", "--json"]))
    layer_names = {x for lay in prof["layers"] + est["layers"] for x in (lay["op"], lay["mapping"])}
    with (tmp_path / "l.csv").open() as f:  # CSV: every cell whole
        rows = list(csv.DictReader(f))
    assert [(r["layer"], r["op"], r["mapping"]) for r in rows] == [
        (lay["layer"], lay["op"], lay["mapping"]) for lay in prof["layers"]]
    commands = {  # argv, the names it must show
        "targets": (["targets"], {"tnpu-s", "u55-256", "lpddr 16 GB/s, 100 c"}),
        "estimate": (["-q", "estimate", model, "--calibration", "2", "--layers", "0"],
                     {x for lay in est["layers"] for x in (lay["op"], lay["mapping"])}),
        "advise": (["-q", "advise", model, "--calibration", "2"],
                   {lay["op"] for lay in adv["layers"]} | {g["change"] for g in adv["ranked"]}),
        "profile": (["profile", str(tsl)],
                    {x for lay in prof["layers"] for x in (lay["op"], lay["mapping"])}),
        "compare": (["-q", "compare", model, "--targets", "tnpu-s,u55-256",
                     "--calibration", "2"], {"tnpu-s", "u55-256"}),
        "compare binaries": (["compare", str(tsl), str(tsl2)], {"cycles", "energy uJ"}),
        "explore": (["-q", "explore", model, "--space", str(space), "--out",
                     str(tmp_path / "x"), "--workers", "0", "--calibration", "2"],
                    {"latency_ms"}),
    }
    assert layer_names <= commands["estimate"][1] | commands["profile"][1]
    for width in (100, 200):
        monkeypatch.setenv("COLUMNS", str(width))
        for what, (argv, expected) in commands.items():
            out = _run(capsys, argv)
            assert "…" not in out, (what, width, out)
            lines = [x for x in out.splitlines() if not x.startswith("wrote ")]  # paths
            assert max(len(x) for x in lines) <= width, (what, width, out)
            missing = [n for n in expected if not _readable(out, n, width)]
            assert not missing, (what, width, missing, out)
    monkeypatch.setenv("COLUMNS", "100")
    wide = _run(capsys, ["profile", str(tsl), "--wide"])  # --wide: one line per layer
    rows = [re.split(r" {3,}", x)[-2:] for x in wide.splitlines()]
    assert all([lay["mapping"], lay["name"]] in rows for lay in prof["layers"])
