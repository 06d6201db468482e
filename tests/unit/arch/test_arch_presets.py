"""Presets load, carry the figures the brief asks for, and their energy/area follow sources.py."""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from importlib import resources

import pytest

from tessel.arch import Dataflow, MemoryKind, NpuArch, list_presets, load_preset, load_target
from tessel.arch.sources import LEAKAGE_MW_PER_MM2, horowitz_area, horowitz_energy
from tessel.errors import TesselConfigError

PRESETS = ["tnpu-m", "tnpu-s", "tnpu-xs", "u55-256", "u65-512"]


def _text(name: str) -> str:
    return (resources.files("tessel.arch") / "presets" / f"{name}.toml").read_text()


def test_list_presets() -> None:
    assert list_presets() == PRESETS


@pytest.mark.parametrize("name", PRESETS)
def test_preset_loads_and_derives(name: str) -> None:
    a = load_preset(name)
    assert a.name == name
    assert a.peak_macs_per_cycle == a.matrix.rows * a.matrix.cols
    assert a.peak_tops == pytest.approx(2 * a.peak_macs_per_cycle * a.clock_hz / 1e12)
    assert a.derived.weights_memory_index == a.memory_index(a.weights_memory)
    assert a.derived.acc_entries * 4 == a.onchip.acc_bytes


def test_tnpu_figures() -> None:
    s, xs, m = load_preset("tnpu-s"), load_preset("tnpu-xs"), load_preset("tnpu-m")
    assert 0.4 <= s.peak_tops <= 0.6 and s.onchip.sram_bytes == 512 * 1024
    assert s.offchip[0].kind == MemoryKind.LPDDR
    assert xs.peak_macs_per_cycle == 64 and xs.clock_hz < s.clock_hz
    assert xs.onchip.sram_bytes < s.onchip.sram_bytes
    assert 1.8 <= m.peak_tops <= 2.2 and m.onchip.sram_bytes == 2 * 2**20


def test_u55_matches_brief() -> None:
    a = load_preset("u55-256")
    assert a.peak_macs_per_cycle == 256 and a.clock_hz == 500_000_000
    act = a.offchip[a.derived.activations_memory_index]
    wts = a.offchip[a.derived.weights_memory_index]
    assert (act.kind, act.bytes_per_cycle) == (MemoryKind.SYS_SRAM, 8)
    assert (wts.kind, wts.bytes_per_cycle) == (MemoryKind.FLASH, 1)
    assert 64 * 1024 <= a.onchip.sram_bytes <= 128 * 1024


def test_u65_matches_brief() -> None:
    a = load_preset("u65-512")
    assert a.peak_macs_per_cycle == 512 and a.clock_hz == 1_000_000_000
    assert a.onchip.sram_bytes == 384 * 1024 and a.derived.sram_bytes_per_cycle == 16
    dram = a.offchip[a.memory_index("dram")]
    assert (dram.bytes_per_cycle, dram.latency_cycles) == (12, 500)


@pytest.mark.parametrize("name", PRESETS)
def test_energy_and_area_follow_documented_rule(name: str) -> None:
    a = load_preset(name)
    e = horowitz_energy(a.process_node_nm, a.onchip.sram_bytes, a.onchip.sram_banks,
                        a.onchip.acc_bytes, a.matrix.cols, a.onchip.lut_entries)
    for key, value in e.items():
        assert getattr(a.energy, key) == pytest.approx(value, rel=1e-4), key
    for key, value in horowitz_area(a.process_node_nm).items():
        assert getattr(a.area, key) == pytest.approx(value, rel=1e-4), key
    assert a.energy.static_power_mw == pytest.approx(
        LEAKAGE_MW_PER_MM2 * a.derived.area_mm2, rel=1e-4)


@pytest.mark.parametrize("name", PRESETS)
def test_every_energy_and_area_number_cites_a_source(name: str) -> None:
    table = None
    for line in _text(name).splitlines():
        if line.startswith("["):
            table = line.split("]")[0].strip("[")
        elif table in ("energy", "area") and "=" in line:
            assert "#" in line, f"{name}: no source comment on {line!r}"
            comment = line.split("#", 1)[1].lower()
            assert re.search(r"horowitz|mistry|assumption", comment), line
    data = tomllib.loads(_text(name))
    energy = load_preset(name).energy
    assert set(data["energy"]) == {f.name for f in dataclasses.fields(energy)}


def test_arch_hash_is_stable_and_sensitive() -> None:
    a, b = load_preset("tnpu-s"), load_preset("tnpu-s")
    assert a.arch_hash == b.arch_hash and re.fullmatch(r"[0-9a-f]{64}", a.arch_hash)
    assert a.arch_hash_bytes == bytes.fromhex(a.arch_hash)
    assert dataclasses.replace(a, description="other words").arch_hash == a.arch_hash
    faster = a.with_param("clock_hz", a.clock_hz + 1)
    assert faster.arch_hash != a.arch_hash
    assert len({load_preset(n).arch_hash for n in PRESETS}) == len(PRESETS)


def test_replace_is_validated_and_rederived() -> None:
    a = load_preset("tnpu-s")
    big = dataclasses.replace(a, matrix=dataclasses.replace(a.matrix, rows=32))
    assert big.peak_macs_per_cycle == 512 and big.peak_tops == pytest.approx(1.024)
    with pytest.raises(TesselConfigError, match="matrix.rows must be a positive power of two"):
        dataclasses.replace(a, matrix=dataclasses.replace(a.matrix, rows=12))
    with pytest.raises(TesselConfigError, match="memory.weights must name"):
        dataclasses.replace(a, weights_memory="flash")
    # figures a preset declares are checked against the parameters
    with pytest.raises(TesselConfigError, match="derived.peak_macs_per_cycle is declared as 1"):
        big.check_declared({"peak_macs_per_cycle": 1})


def test_load_target_by_name_and_path(tmp_path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(_text("tnpu-xs").replace('name = "tnpu-xs"', 'name = "mine"'))
    assert load_target(str(path)).name == "mine"
    assert NpuArch.from_toml(path).name == "mine"
    assert load_target("u55-256").name == "u55-256"
    with pytest.raises(TesselConfigError, match="unknown target 'nope'.*tnpu-s"):
        load_target("nope")
    with pytest.raises(TesselConfigError, match="cannot read"):
        load_target(str(tmp_path / "missing.toml"))


def test_summary_and_to_dict() -> None:
    a = load_preset("tnpu-s")
    s = a.summary()
    assert s["peak_macs_per_cycle"] == 256 and s["matrix.dataflow"] == "WEIGHT_STATIONARY"
    d = a.to_dict()
    assert d["matrix"]["dataflow"] == Dataflow.WEIGHT_STATIONARY.name
    assert d["offchip"][0]["kind"] == "LPDDR"
    assert math.isclose(s["peak_tops"], 0.512)


def test_toml_dict_roundtrip_every_preset():
    from tessel.arch import arch_from_dict, list_presets, load_preset
    for name in list_presets():
        arch = load_preset(name)
        again = arch_from_dict(arch.to_toml_dict())
        assert again == arch and again.arch_hash == arch.arch_hash
