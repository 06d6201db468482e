"""Operating points: declared once ([[operating_point]], voltage_v), validated, older presets
load, and every figure at a point follows the CMOS rule (tessel.arch.operating)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from tessel.arch import arch_from_dict, arch_from_text, list_presets, load_preset
from tessel.arch.operating import (
    at_point,
    dynamic_scale,
    leakage_scale,
    scale_breakdown,
    static_power_mw,
)
from tessel.arch.params import parse_settings
from tessel.arch.sources import LPDDR_CONSERVATIVE_BYTE_PJ, operating_points
from tessel.arch.types import NOMINAL, OperatingPoint, offchip_figures
from tessel.errors import TesselConfigError
from tessel.isa.costs import Events, energy_breakdown_pj, static_energy_pj
from tessel.isa.events import COMPONENTS

SCHEMA2 = Path(__file__).parent / "data" / "tnpu-s-schema-2.toml"
S = load_preset("tnpu-s")


@pytest.mark.parametrize("name", list_presets())
def test_presets_points_follow_the_documented_rule(name: str) -> None:
    a = load_preset(name)
    expected = operating_points(a.process_node_nm, a.clock_hz)
    assert [(p.name, p.clock_hz, p.voltage_v) for p in a.operating_points] == expected
    assert a.nominal_point == a.point(len(expected) - 1) == a.point("nominal")
    assert (a.nominal_point.clock_hz, a.nominal_point.voltage_v) == (a.clock_hz, a.voltage_v)


def test_a_schema_2_preset_loads_with_the_nominal_point_alone() -> None:
    old = arch_from_text(SCHEMA2.read_text(), "old.toml")
    assert old.operating_points == (OperatingPoint(NOMINAL, old.clock_hz, 0.8),)
    assert old.energy.lpddr_byte_pj == LPDDR_CONSERVATIVE_BYTE_PJ == 160
    # it describes the hardware the previous release did: same hash (its binaries stay valid),
    # same TOML for a .tsl's metadata (no key added)
    assert old.arch_hash == "6502c88ba2a56ba75cedec9caa6cd4769281b5d859c9fa9074203ff101522c53"
    assert "operating_point" not in old.to_toml_dict() and "voltage_v" not in old.to_dict()
    assert old.to_toml_dict()["schema"] == 2


def test_points_round_trip_through_the_toml_layout() -> None:
    d = S.to_toml_dict()
    assert d["schema"] == 3 and [p["name"] for p in d["operating_point"]] == [
        "quarter", "half", "nominal"]
    assert arch_from_dict(d) == S and arch_from_dict(d).arch_hash == S.arch_hash


def _points(*pts: tuple[str, int, float]) -> tuple[OperatingPoint, ...]:
    return tuple(OperatingPoint(*p) for p in pts)


@pytest.mark.parametrize("points,message", [
    (_points(("a", 10**9, 0.8), ("b", 5 * 10**8, 0.6)), "'b' must have a higher clock"),
    (_points(("a", 5 * 10**8, 0.7), ("b", 10**9, 0.6)), "at a lower voltage"),
    (_points(("a", 5 * 10**8, 0.6), ("b", 9 * 10**8, 0.8)), "no point at clock_hz"),
    (_points(("a", 5 * 10**8, 0.6), ("b", 10**9, 0.9)), "its voltage must be voltage_v"),
    (_points(("a", 5 * 10**8, 0.6), ("a", 10**9, 0.8)), r"operating_point\[1\].name must be "
     "unique"),
    (_points(("a", 5 * 10**8, 0.1), ("b", 10**9, 0.8)), r"operating_point\[0\].voltage_v must "
     r"be a number in \[0.3, 2.0\]"),
])
def test_bad_points_are_rejected(points, message) -> None:
    with pytest.raises(TesselConfigError, match=message):
        dataclasses.replace(S, operating_point=points)


def test_a_schema_2_file_cannot_declare_points() -> None:
    text = SCHEMA2.read_text().replace("[energy]", "[[operating_point]]\nname = \"x\"\n"
                                       "clock_hz = 1_000_000_000\nvoltage_v = 0.8\n\n[energy]")
    with pytest.raises(TesselConfigError, match=r"\[\[operating_point\]\] tables need schema 3 "
                       r"\(this file is schema 2\)"):
        arch_from_text(text)


def test_points_are_found_by_name_or_index() -> None:
    assert S.point(0).name == "quarter" and S.point("1") == S.point("half")
    with pytest.raises(TesselConfigError, match="3 operating point"):
        S.point(3)
    with pytest.raises(TesselConfigError, match="no operating point 'hlf'.*did you mean 'half'"):
        S.point("hlf")


def test_a_new_clock_or_voltage_moves_the_points_with_it() -> None:
    slow = S.with_param("clock_hz", 500_000_000)
    assert [p.clock_hz for p in slow.operating_points] == [125_000_000, 250_000_000, 500_000_000]
    assert [p.voltage_v for p in slow.operating_points] == [p.voltage_v for p in
                                                            S.operating_points]
    high = S.with_param("voltage_v", 0.88)
    assert [p.voltage_v for p in high.operating_points] == pytest.approx(
        [1.1 * p.voltage_v for p in S.operating_points])
    lower = S.with_param("operating_point.half.voltage_v", 0.6)
    assert lower.point("half").voltage_v == 0.6 and lower.point("quarter") == S.point("quarter")


def test_at_point_scales_the_npu_not_the_memories() -> None:
    half = S.point("half")
    h = at_point(S, "half")
    assert (h.clock_hz, h.voltage_v) == (half.clock_hz, half.voltage_v)
    assert h.nominal_point == half and h.operating_points == S.operating_points
    dyn = (half.voltage_v / S.voltage_v) ** 2
    assert dynamic_scale(S, half) == pytest.approx(dyn) and dyn < 0.5
    for f in dataclasses.fields(S.energy):
        before, after = getattr(S.energy, f.name), getattr(h.energy, f.name)
        if f.name in offchip_figures():
            assert after == before, f.name
        elif f.name == "static_power_mw":
            assert after == pytest.approx(before * half.voltage_v / S.voltage_v)
        else:
            assert after == pytest.approx(before * dyn), f.name
    assert static_power_mw(S, half) == pytest.approx(h.energy.static_power_mw)
    assert leakage_scale(S, half) == pytest.approx(half.voltage_v / 0.8)
    assert at_point(S, S.nominal_point) is S
    # at a point and back: the nominal figures again
    back = at_point(h, "nominal")
    assert back.energy.mac_int8_pj == pytest.approx(S.energy.mac_int8_pj)


def test_scale_breakdown_equals_the_breakdown_at_the_point() -> None:
    """A breakdown computed at the nominal point and scaled equals the one computed from the
    arch at the point, component by component (off-chip bytes included)."""
    ev = Events(macs=1000, sram_read_bytes=300, sram_write_bytes=200, acc_reads=40,
                acc_writes=40, vector_lane_ops=77, lut_accesses=5, operand_bytes=900,
                int4_unpacked=64, offchip_read_bytes=(4096,), offchip_write_bytes=(1024,))
    cycles = 12_345
    assert {c for c, _, _ in COMPONENTS} | {"lpddr"} == set(energy_breakdown_pj(ev, S))
    for point in S.operating_points:
        nominal = dict(energy_breakdown_pj(ev, S), static=static_energy_pj(cycles, S))
        at = at_point(S, point)
        direct = dict(energy_breakdown_pj(ev, at), static=static_energy_pj(cycles, at))
        scaled = scale_breakdown(nominal, S, point)
        assert scaled.keys() == direct.keys()
        for k in direct:
            assert scaled[k] == pytest.approx(direct[k], rel=1e-12), (point.name, k)
        assert scaled["lpddr"] == nominal["lpddr"] == 5120 * S.energy.lpddr_byte_pj
    # the slower point: half the clock, so twice the time to leak, at a lower voltage
    q = scale_breakdown({"static": 1.0}, S, S.point("quarter"))["static"]
    assert q == pytest.approx(4 * 0.5 / 0.8)


def test_settings_parse_as_toml_values() -> None:
    assert parse_settings(["energy.lpddr_byte_pj=160", "memory.weights = lpddr",
                           "matrix.fold_pipelining=false"], S) == {
        "energy.lpddr_byte_pj": 160, "memory.weights": "lpddr",
        "matrix.fold_pipelining": False}
    assert S.with_params(parse_settings(["energy.lpddr_byte_pj=160"], S)).energy.lpddr_byte_pj \
        == 160
    with pytest.raises(TesselConfigError, match="KEY=VALUE"):
        parse_settings(["energy.lpddr_byte_pj"], S)
    with pytest.raises(TesselConfigError, match="unknown hardware parameter"):
        parse_settings(["energy.dram_pj=1"], S)


def test_operating_point_scaling_keeps_the_time_in_cycles() -> None:
    h = at_point(S, "quarter")
    assert h.derived.peak_tops == pytest.approx(S.derived.peak_tops / 4)
    assert math.isclose(static_energy_pj(1000, h) / static_energy_pj(1000, S), 4 * 0.5 / 0.8)


def test_explore_varies_the_point_through_its_declaration() -> None:
    from tessel.analysis.explore_space import EXPLORABLE, build_arch, parse_space

    assert "operating_point" in EXPLORABLE and S.param("operating_point") == "nominal"
    space = parse_space({"params": {"operating_point": ["quarter", "half"]}})
    assert dict(space.params) == {"operating_point": ("quarter", "half")}
    a = build_arch(S, {"operating_point": "half"})
    assert a.name == "tnpu-s-ophalf" and a.param("operating_point") == "half"
    assert a.energy == at_point(S, "half").energy  # (same area: the static power is the point's)
    smaller = build_arch(S, {"operating_point": "half", "matrix.rows": 8})
    ratio = smaller.derived.area_mm2 / S.derived.area_mm2
    assert smaller.energy.static_power_mw == pytest.approx(
        static_power_mw(S, S.point("half")) * ratio)
    with pytest.raises(TesselConfigError, match="tnpu-s has no operating point 'turbo'"):
        S.with_param("operating_point", "turbo")
