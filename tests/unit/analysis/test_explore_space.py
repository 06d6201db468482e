"""Design-space files, design points -> NpuArch, the study file and the Pareto front."""

from __future__ import annotations

import itertools
import json

import pytest

from tessel.analysis.explore_output import arch_to_toml
from tessel.analysis.explore_space import (
    LatencyAgg,
    build_arch,
    check_against,
    load_space,
    parse_space,
    point_key,
)
from tessel.analysis.explore_store import ModelFigures, PointResult, Study, pareto_front
from tessel.arch import Dataflow, arch_from_text, load_target
from tessel.errors import TesselConfigError

BASE = load_target("tnpu-s")


def test_parse_nested_dotted_and_ranges(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('[matrix]\nrows = [8, 16]\ncols = {from = 4, to = 32, factor = 2}\n'
                    '[params]\n"matrix.feed_bytes_per_cycle" = {from = 16, to = 64, step = 16}\n'
                    'clock_hz = 500_000_000\n[constraints]\nmax_area_mm2 = 1\nfps = 60\n'
                    '[objectives]\nlatency = "max"\n')
    space = load_space(path)
    assert dict(space.params) == {"clock_hz": (500_000_000,), "matrix.cols": (4, 8, 16, 32),
                                  "matrix.feed_bytes_per_cycle": (16, 32, 48, 64),
                                  "matrix.rows": (8, 16)}
    assert space.size == 32 and len(list(space.points())) == 32
    assert space.constraints.max_area_mm2 == 1.0 and space.constraints.fps == 60.0
    assert space.latency is LatencyAgg.MAX


@pytest.mark.parametrize(("data", "names"), [
    ({"matrix": {"depth": [1]}}, "matrix.depth"),
    ({"bogus": [1]}, "bogus"),
    ({"matrix": {"dataflow": ["DIAGONAL"]}}, "matrix.dataflow"),
    ({"vector": {"lanes": [0]}}, "vector.lanes"),
    ({"vector": {"lanes": [16, 16]}}, "vector.lanes"),
    ({"vector": {"lanes": []}}, "vector.lanes"),
    ({"vector": {"lanes": {"from": 8, "to": 4, "step": 1}}}, "vector.lanes"),
    ({"vector": {"lanes": {"from": 8, "to": 64}}}, "vector.lanes"),
    ({"vector": {"lanes": {"from": 8, "to": 64, "stride": 2}}}, "vector.lanes.stride"),
    ({"clock_hz": [1.5e9]}, "clock_hz"),
    ({"clock_hz": [1], "constraints": {"max_area": 1}}, "constraints.max_area"),
    ({"clock_hz": [1], "constraints": {"max_power_mw": -1}}, "constraints.max_power_mw"),
    ({"clock_hz": [1], "objectives": {"latency": "mean"}}, "objectives.latency"),
    ({}, "names no parameter"),
])
def test_parse_errors_name_the_key(data, names):
    with pytest.raises(TesselConfigError, match=names.replace(".", r"\.")):
        parse_space(data)


def test_bad_toml_and_missing_file(tmp_path):
    with pytest.raises(TesselConfigError, match="does not exist"):
        load_space(tmp_path / "nope.toml")
    (tmp_path / "bad.toml").write_text("[matrix\n")
    with pytest.raises(TesselConfigError, match="not valid TOML"):
        load_space(tmp_path / "bad.toml")


def test_values_checked_by_the_declared_rules_and_against_the_base():
    check_against(parse_space({"onchip": {"sram_bytes": [65536]}}), BASE)
    with pytest.raises(TesselConfigError, match=r"onchip.sram_bytes must be an integer in \[1024"):
        parse_space({"onchip": {"sram_bytes": [1000]}})
    with pytest.raises(TesselConfigError, match="vector.lanes must be a positive power of two"):
        parse_space({"vector": {"lanes": {"from": 16, "to": 64, "step": 16}}})  # 48
    assert parse_space({"matrix": {"input_buffer_bytes": [0]}}).size == 1  # 0: no buffer


def test_build_arch_replaces_values_and_scales_static_power():
    point = {"matrix.rows": 32, "matrix.cols": 8, "matrix.dataflow": "OUTPUT_STATIONARY",
             "vector.lanes": 64, "onchip.sram_bytes": 262144, "dram_bytes_per_cycle": 8,
             "clock_hz": 500_000_000}
    arch = build_arch(BASE, point)
    assert (arch.matrix.rows, arch.matrix.cols, arch.vector.lanes) == (32, 8, 64)
    assert arch.matrix.dataflow is Dataflow.OUTPUT_STATIONARY
    assert arch.onchip.sram_bytes == 262144 and arch.clock_hz == 500_000_000
    assert all(m.bytes_per_cycle == 8 for m in arch.offchip if m.name == BASE.weights_memory)
    assert arch.name == "tnpu-s-f500m-d8-c8-os-r32-s256k-v64"
    ratio = arch.derived.area_mm2 / BASE.derived.area_mm2
    assert arch.energy.static_power_mw == pytest.approx(BASE.energy.static_power_mw * ratio)
    assert build_arch(BASE, {}).derived.area_mm2 == pytest.approx(BASE.derived.area_mm2)


def test_preset_toml_round_trip():
    arch = build_arch(BASE, {"matrix.rows": 8, "vector.lanes": 16})
    assert arch_from_text(arch_to_toml(arch)) == arch


def test_point_key_is_canonical():
    a = point_key({"b": 1, "a": 2}, ("m",))
    assert a == point_key({"a": 2, "b": 1}, ("m",)) and a != point_key({"a": 2, "b": 1}, ("n",))


def _result(i: int, lat: float, en: float, area: float, feasible: bool = True) -> PointResult:
    per = {"m": ModelFigures(lat, en, 0.1 * en)} if feasible else {}
    return PointResult(f"k{i}", {"x": i}, ("m",), f"a{i}", feasible, None if feasible else "no",
                       area, 1.0, per)


def test_pareto_front_matches_brute_force():
    vals = list(itertools.product([1.0, 2.0, 3.0], [3.0, 1.0, 2.0], [2.0, 1.0]))
    points = [_result(i, *v) for i, v in enumerate(vals[::3] + vals[1::5])]
    points.append(_result(99, 0.1, 0.1, 0.1, feasible=False))
    from tessel.analysis.explore_space import Constraints

    front = pareto_front(points, Constraints(), LatencyAgg.SUM)
    feas = [p for p in points if p.feasible]
    brute = {p.key for p in feas if not any(
        all(a <= b for a, b in zip(q.objectives(LatencyAgg.SUM), p.objectives(LatencyAgg.SUM),
                                   strict=True)) and q.objectives(LatencyAgg.SUM)
        != p.objectives(LatencyAgg.SUM) for q in feas)}
    assert {p.key for p in front} == brute and "k99" not in brute
    capped = pareto_front(points, Constraints(max_area_mm2=1.5), LatencyAgg.SUM)
    assert capped and all(p.area_mm2 <= 1.5 for p in capped)


def test_study_appends_and_drops_a_truncated_last_line(tmp_path):
    study = Study(tmp_path)
    study.append(_result(1, 1.0, 1.0, 1.0))
    study.append(_result(2, 2.0, 1.0, 1.0))
    study.append(_result(2, 2.0, 1.0, 1.0))  # already there: not written twice
    study.close()
    path = tmp_path / "study.jsonl"
    assert len(path.read_text().splitlines()) == 2
    with open(path, "a") as f:
        f.write(_result(3, 3.0, 1.0, 1.0).to_json()[:40])  # a write cut by kill -9
    again = Study(tmp_path)
    assert sorted(again.points) == ["k1", "k2"]
    again.append(_result(4, 4.0, 1.0, 1.0))
    again.close()
    lines = path.read_text().splitlines()
    assert [json.loads(x)["key"] for x in lines] == ["k1", "k2", "k4"]
