"""Scenario files (tessel.scenario.spec): the shipped XR scenario, and every malformed field
refused with the file, the line and the field."""

from __future__ import annotations

import json
import math

import pytest

from tessel.cli import main
from tessel.errors import TesselConfigError
from tessel.scenario import load_scenario, parse_scenario, shipped

BASE = """\
name = "t"

[[model]]
name = "a"
model = "ds_cnn"
rate_hz = 50

[[model]]
name = "b"
model = "digits_cnn"
rate_hz = 50
after = ["a"]

[[model]]
name = "c"
model = "kws_res8"
rate_hz = 4
"""


def test_the_shipped_xr_scenario():
    assert "xr_glasses" in shipped()
    s = load_scenario("xr_glasses")
    assert len(s.models) >= 5 and len({m.rate_hz for m in s.models}) >= 3
    assert ("eye_seg", "gaze") in s.chains() and ("hand_det", "hand_pose") in s.chains()
    assert math.isclose(s.hyperperiod_s, 1 / 3)
    # rate monotonic: every 60 Hz model more urgent than every 30 Hz one, file order within
    assert [m.name for m in sorted(s.models, key=lambda m: m.priority)] == [
        "eye_seg", "gaze", "hand_det", "hand_pose", "depth", "kws"]
    assert s.model("depth").deadline_s == pytest.approx(0.025)
    assert s.model("kws").deadline_s == pytest.approx(1 / 3)


def test_defaults_and_hyperperiod():
    s = parse_scenario(BASE, "t.toml", None)
    assert [m.priority for m in s.models] == [1, 2, 3]
    assert s.model("b").deadline_s == pytest.approx(0.02) and s.model("b").after == ("a",)
    assert math.isclose(s.hyperperiod_s, 0.5)  # lcm(20 ms, 250 ms)
    assert s.model("a").line == 4


@pytest.mark.parametrize(("old", "new", "line", "message"), [
    ("rate_hz = 4", "rate_hz = 0", 17, "'c': rate_hz: must be > 0"),
    ("rate_hz = 4", "rate = 4", 17, "unknown key (did you mean 'rate_hz'?)"),
    ('after = ["a"]', 'after = ["x"]', 12, "'b': after: 'x' is not a model of the scenario"),
    ('after = ["a"]', 'after = "a"', 12, "after: must be a list of model names"),
    ('name = "b"', 'name = "a"', 9, "model name 'a' is used twice"),
    ('model = "digits_cnn"', 'model = "digits_cn"', 10, "did you mean 'digits_cnn'?"),
    ('model = "digits_cnn"', 'model = "nets/missing.py:make"', 10, "no such file"),
    ("rate_hz = 4", "rate_hz = 4\ndeadline_ms = 300", 18, "deadline_ms: must be > 0 and <= 250"),
    ("rate_hz = 4", 'rate_hz = "4"', 17, "rate_hz: must be a number"),
    ("rate_hz = 4", "rate_hz = 4\npriority = 2", 3, "'a': priority: give every model a priority"),
    ('after = ["a"]', 'after = ["c"]', 12, "'c' runs at 4 Hz, 'b' at 50 Hz"),
    ('name = "t"', 'nme = "t"', 1, "unknown key (did you mean 'name'?)"),
    ("rate_hz = 4", "rate_hz = 4\noffset_ms = 250", 18, "offset_ms: must be < the period"),
    ('name = "c"', "", 14, "[[model]] #3: name: missing"),
    ("rate_hz = 4", "rate_hz = = 4", None, "not valid TOML"),
])
def test_a_bad_field_is_named_with_its_line(old, new, line, message):
    assert old in BASE
    text = BASE.replace(old, new, 1)
    with pytest.raises(TesselConfigError) as err:
        parse_scenario(text, "s.toml", None)
    text = str(err.value)
    assert message in text, text
    assert text.startswith(f"s.toml:{line}: " if line else "s.toml: "), text


def test_a_cycle_is_refused():
    text = BASE.replace('rate_hz = 50\n\n[[model]]\nname = "b"',
                        'rate_hz = 50\nafter = ["b"]\n\n[[model]]\nname = "b"')
    with pytest.raises(TesselConfigError, match="dependency cycle: (a -> b -> a|b -> a -> b)"):
        parse_scenario(text, "s.toml", None)


def test_paths_are_read_beside_the_file_and_the_cli_prints_json(tmp_path, capsys):
    (tmp_path / "net.py").write_text("raise SystemExit('model code must not run on check')\n")
    (tmp_path / "x.npz").write_bytes(b"")
    scenario = tmp_path / "s.toml"
    scenario.write_text(BASE.replace('"kws_res8"', '"net.py:make"').replace(
        "rate_hz = 4", 'rate_hz = 4\ninputs = "x.npz"'))
    assert main(["scenario", "check", str(scenario), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    c = next(m for m in data["models"] if m["name"] == "c")
    assert c["model"] == f"{tmp_path / 'net.py'}:make" and c["inputs"] == str(tmp_path / "x.npz")
    assert data["chains"] == [["a", "b"]]
    assert main(["scenario", "check", str(tmp_path / "nope.toml")]) != 0
    assert "no such file" in capsys.readouterr().err
