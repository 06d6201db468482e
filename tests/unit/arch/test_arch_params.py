"""One parameter vocabulary: NpuArch.with_param / with_params / param by dotted TOML name."""

from __future__ import annotations

import enum

import pytest

from tessel.arch import Dataflow, list_presets, load_preset
from tessel.arch.decl import Affects
from tessel.arch.params import FIELDS, PARAMS, SCHEMA, param_names
from tessel.arch.validate import check_value
from tessel.errors import TesselConfigError

S = load_preset("tnpu-s")


def test_with_param_sets_one_value_and_revalidates() -> None:
    a = S.with_param("matrix.rows", 32)
    assert a.matrix.rows == 32 and a.peak_macs_per_cycle == 512 and S.matrix.rows == 16
    assert S.with_param("matrix.dataflow", "OUTPUT_STATIONARY").matrix.dataflow \
        == Dataflow.OUTPUT_STATIONARY
    assert S.with_param("offchip.lpddr.latency_cycles", 7).offchip[0].latency_cycles == 7
    assert S.with_param("dram_bytes_per_cycle", 8).param("dram_bytes_per_cycle") == 8
    assert S.with_params({"clock_hz": 500_000_000, "dma.channels": 4}, name="x").name == "x"
    with pytest.raises(TesselConfigError, match="matrix.rows must be a positive power of two"):
        S.with_param("matrix.rows", 12)


def test_unknown_parameter_lists_the_vocabulary() -> None:
    with pytest.raises(TesselConfigError, match="unknown hardware parameter 'matrix.depth'.*"
                                                "matrix.fold_pipelining"):
        S.with_param("matrix.depth", 3)
    with pytest.raises(TesselConfigError, match="no off-chip memory named 'hbm'"):
        S.param("offchip.hbm.bytes_per_cycle")


def _other(arch, name):
    """Another valid value of `name` on `arch`, or None."""
    v = arch.param(name)
    if isinstance(v, bool):
        return not v
    if isinstance(v, enum.Enum):
        return next(m for m in type(v) if m is not v)
    if isinstance(v, str):
        pool = [p.name for p in arch.operating_points] if name == "operating_point" \
            else [m.name for m in arch.offchip]
        return next((n for n in pool if n != v), None)
    others = (2 * v, v // 2, v + 1) if isinstance(v, int) else (2 * v, v / 2, 1.01 * v, 0.99 * v)
    for other in others:
        try:
            arch.with_param(name, other)
            return other
        except TesselConfigError:
            pass
    return None


@pytest.mark.parametrize("preset", list_presets())
def test_every_declared_parameter_can_be_read_and_set_by_its_name(preset: str) -> None:
    a = load_preset(preset)
    names = param_names(a)
    expected = {p.key for p in PARAMS if p.settable and not p.per_entry}
    expected |= {f"{p.entries}.{e.name}.{p.field}" for p in FIELDS if p.per_entry and p.settable
                 for e in getattr(a, p.entries)}
    assert set(names) == expected
    changed = 0
    virtual = {p.key for p in PARAMS if p.writes}  # (sets every bus memory: not lossless)
    for name in names:
        assert name in virtual or a.with_param(name, a.param(name)) == a, name
        other = _other(a, name)
        if other is not None:
            assert a.with_param(name, other).param(name) == other, name
            changed += 1
    # (memory.*: one memory only, on most presets; the nominal operating point's clock and
    # voltage are clock_hz and voltage_v, set with them)
    assert changed >= len(names) - 4


def test_declarations_are_consistent() -> None:
    assert len({p.key for p in PARAMS}) == len(PARAMS) and SCHEMA >= 1
    for p in PARAMS:
        assert p.type in (int, float, bool, str) or issubclass(p.type, enum.Enum), p.key
        if not p.required:  # a default is a valid value
            check_value(p, p.key, p.default, None)
        if p.candidates:  # a parameter candidate lists depend on never changes programs
            assert p.affects is Affects.COSTS, p.key
        if p.explore is not None:
            assert p.settable and p.type is not float, p.key
            assert p.explore.group == 0 or p.candidates, p.key
        if p.knob is not None:
            assert p.settable and p.type is int, p.key
    groups = [p.explore.group for p in PARAMS if p.explore and p.explore.group]
    assert len(groups) == len(set(groups))


def test_area_terms_are_the_area_model_s() -> None:
    """A parameter declared `area_term` changes Derived.area_mm2, no other one does (on a target
    with every optional unit, whose parameters only then have area)."""
    a = load_preset("tnpu-s").with_params({"wdecoder.enabled": True, "sparse.enabled": True})
    for p in FIELDS:
        if not p.settable or p.per_entry or p.table == "area":
            continue
        other = _other(a, p.key)
        if other is None:
            continue
        moved = a.with_param(p.key, other).derived.area_mm2 != a.derived.area_mm2
        assert moved == p.area_term, p.key
