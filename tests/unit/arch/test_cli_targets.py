"""`tessel targets [--json] [--target NAME|FILE]`, through the command's register()."""

from __future__ import annotations

import argparse
import json
from importlib import resources

import pytest

from tessel.arch import list_presets
from tessel.cli import hw
from tessel.errors import TesselConfigError


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tessel")
    hw.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_table_lists_every_preset(capsys) -> None:
    assert _run(["targets"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:5] == ["target", "node", "nm", "MHz", "array"]
    assert out[0].rstrip().endswith("area mm2")
    assert [line.split()[0] for line in out[2:]] == list_presets()
    u55 = next(line for line in out if line.startswith("u55-256"))
    assert u55.split()[1:3] == ["22", "500"] and "16x16 OS" in u55 and "0.256" in u55
    assert "flash 0.5 GB/s, 64 c" in u55 and u55.rstrip().endswith("0.262")
    m = next(line for line in out if line.startswith("tnpu-m"))
    assert m.split()[1] == "7"  # the process node its area is for


def test_json_has_key_figures(capsys) -> None:
    assert _run(["targets", "--json", "--target", "u65-512"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["peak_macs_per_cycle"] == 512 and entry["clock_hz"] == 1_000_000_000
    assert entry["onchip.sram_bytes"] == 384 * 1024 and entry["sram_bytes_per_cycle"] == 16
    assert entry["offchip"][0]["bytes_per_cycle"] == 12 and len(entry["arch_hash"]) == 64


def test_custom_file_and_bad_file(tmp_path, capsys) -> None:
    text = (resources.files("tessel.arch") / "presets" / "tnpu-s.toml").read_text()
    good = tmp_path / "good.toml"
    good.write_text(text.replace('name = "tnpu-s"', 'name = "good"'))
    assert _run(["targets", "--target", str(good)]) == 0
    assert capsys.readouterr().out.splitlines()[2].startswith("good ")
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("rows = 16", "rows = 12"))
    with pytest.raises(TesselConfigError, match=r"bad.toml: matrix.rows must be a positive power"):
        _run(["targets", "--target", str(bad)])


def test_add_target_argument() -> None:
    parser = argparse.ArgumentParser()
    hw.add_target_argument(parser)
    assert parser.parse_args([]).target == "tnpu-s"
    assert parser.parse_args(["--target", "x.toml"]).target == "x.toml"


def test_operating_points_in_table_and_json(capsys) -> None:
    """Each preset's DVFS points, slowest first: in the table (name, MHz @ V) and in --json."""
    from tessel.arch import load_target

    assert _run(["targets", "--wide"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "operating points (MHz @ V)" in out[0]
    for name in list_presets():
        line = next(x for x in out if x.startswith(name + " "))
        for p in load_target(name).operating_points:
            assert f"{p.name} {p.clock_hz / 1e6:g} @ {p.voltage_v:g}" in line
    assert _run(["targets", "--json"]) == 0
    for entry in json.loads(capsys.readouterr().out):
        points = load_target(entry["name"]).operating_points
        assert entry["operating_points"] == [
            {"name": p.name, "clock_hz": p.clock_hz, "voltage_v": p.voltage_v} for p in points]
        clocks = [p["clock_hz"] for p in entry["operating_points"]]
        assert clocks == sorted(clocks) and entry["clock_hz"] in clocks
