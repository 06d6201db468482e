"""Bad preset files are rejected with a message naming the file and the key."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from tessel.arch import CompileOptions, arch_from_text
from tessel.arch.params import SCHEMA, param_info
from tessel.errors import TesselConfigError

BASE = (resources.files("tessel.arch") / "presets" / "tnpu-s.toml").read_text()
WHERE = "presets/x.toml"
OLD = Path(__file__).parent / "data" / "tnpu-s-before-operand-path.toml"


def _load(text: str):
    return arch_from_text(text, WHERE)


def _sub(old: str, new: str) -> str:
    assert old in BASE, old
    return BASE.replace(old, new, 1)


def test_base_is_valid() -> None:
    assert _load(BASE).name == "tnpu-s"


@pytest.mark.parametrize("old,new,message", [
    ("rows = 16", "rows = 12",
     "presets/x.toml: matrix.rows must be a positive power of two <= 512, got 12"),
    ("cols = 16", 'cols = "16"', "matrix.cols must be an integer, got '16'"),
    ('dataflow = "WEIGHT_STATIONARY"', 'dataflow = "ROW"',
     "matrix.dataflow must be one of WEIGHT_STATIONARY, OUTPUT_STATIONARY, got 'ROW'"),
    ("lanes = 32", "lanes = 0", "vector.lanes must be a positive power of two"),
    ("sram_banks = 8", "sram_banks = 3", "onchip.sram_banks must be a positive power of two"),
    ("acc_bytes = 65_536", "acc_bytes = 65_535", "onchip.acc_bytes must be a multiple of 4"),
    ("lut_entries = 1024", "lut_entries = 256", "onchip.lut_entries must be an integer in"),
    ("bytes_per_cycle = 16", "bytes_per_cycle = 0", r"offchip\[0\].bytes_per_cycle"),
    ('kind = "LPDDR"', 'kind = "HBM"', r"offchip\[0\].kind must be one of"),
    ('weights = "lpddr"', 'weights = "hbm"', "memory.weights must name one of"),
    ("channels = 2", "channels = 0", "dma.channels must be an integer in"),
    ("mac_int8_pj = 0.0842798", "mac_int8_pj = -1.0", "energy.mac_int8_pj must be a finite"),
    ("fixed_mm2 = 0.025284", "fixed_mm2 = nan", "area.fixed_mm2 must be a finite"),
    ("clock_hz = 1_000_000_000", "clock_hz = 1.5e9", "clock_hz must be an integer"),
    ("peak_tops = 0.512", "peak_tops = 0.6",
     "derived.peak_tops is declared as 0.6 but the parameters give 0.512"),
    ("peak_tops = 0.512", "peak_flops = 1.0", "derived.peak_flops is not a derived figure"),
    ("[dma]\nchannels = 2", "[dma]\nchannels = 2\nburst = 64", "unknown key 'dma.burst'"),
    ('name = "tnpu-s"', 'name = "tnpu-s"\ncolour = "red"', "unknown key 'colour'"),
    ('name = "tnpu-s"', 'name = "Bad Name"', "name must be lower-case"),
    ("rows = 16", "rows = true", "matrix.rows must be an integer, got True"),
    ("fold_pipelining = true", "fold_pipelining = 1",
     "matrix.fold_pipelining must be true or false, got 1"),
])
def test_bad_value_names_key(old: str, new: str, message: str) -> None:
    with pytest.raises(TesselConfigError, match=message) as info:
        _load(_sub(old, new))
    assert str(info.value).startswith(WHERE + ": ")


def test_every_missing_key_is_reported_at_once_with_what_it_is_for() -> None:
    text = _sub("rows = 16\n", "").replace("lanes = 32\n", "")
    text = text.split("[dma]")[0] + "[energy]" + text.split("[energy]")[1]  # no [dma] table
    with pytest.raises(TesselConfigError) as info:
        _load(text)
    message = str(info.value)
    assert message.startswith(WHERE + ": 3 problems:"), message
    for key in ("matrix.rows", "vector.lanes", "dma.channels"):
        doc = param_info(key).doc
        assert f"{key} is missing ({doc}" in message and "it has no default" in message


def test_a_key_with_a_documented_default_may_be_left_out() -> None:
    keys = ["fold_pipelining = true", "feed_bytes_per_cycle = 64", "input_buffer_bytes = 32_768",
            "weight_buffer_bytes = 16_384", "operand_buffer_byte_pj = 0.351166"]
    text = "\n".join(line for line in BASE.splitlines()
                     if not any(line.startswith(k) for k in keys))
    arch = _load(text)
    full = _load(BASE)
    for key in ("matrix.fold_pipelining", "matrix.feed_bytes_per_cycle",
                "matrix.input_buffer_bytes", "matrix.weight_buffer_bytes",
                "energy.operand_buffer_byte_pj"):
        assert arch.param(key) == param_info(key).default, key
    assert arch.matrix == full.matrix  # tnpu-s's operand path is the documented default
    assert arch.energy.operand_buffer_byte_pj == 0.0 != full.energy.operand_buffer_byte_pj
    assert arch.with_param("energy.operand_buffer_byte_pj", 0.351166) == full


def test_a_preset_from_before_the_operand_path_keys_loads() -> None:
    """A preset written before matrix.feed_bytes_per_cycle and the operand buffers existed
    loads with their defaults; the area it declares under [derived] is older than the area
    model, and the error says which defaults it was compared with."""
    text = OLD.read_text()
    with pytest.raises(TesselConfigError, match=r"derived.area_mm2 is declared as 0.3484 but the "
                       r"parameters give 0.374113 \(the file leaves out voltage_v = 0.8, "
                       r"matrix.feed_bytes_per_cycle = 64, "
                       r"matrix.input_buffer_bytes = 32768"):
        _load(text)
    arch = _load(text.split("[derived]")[0])
    assert arch.matrix == _load(BASE).matrix and "schema" not in text


@pytest.mark.parametrize("line,message", [
    ("schema = 3", None),
    (f"schema = {SCHEMA + 1}", f"schema = {SCHEMA + 1}: the file is written for a newer tessel"),
    ("schema = 0", "schema must be a positive integer, got 0"),
    ('schema = "1"', "schema must be a positive integer, got '1'"),
])
def test_schema_version(line: str, message: str | None) -> None:
    text = _sub("schema = 3", line)
    if message is None:
        assert _load(text) == _load(BASE)
    else:
        with pytest.raises(TesselConfigError, match=message):
            _load(text)
    with pytest.raises(TesselConfigError, match=r"\[\[operating_point\]\] tables need schema "
                       r"3 \(this file is schema 1\)"):
        _load(_sub("schema = 3", ""))  # no schema: 1


def test_unknown_key_suggests_the_closest_one() -> None:
    with pytest.raises(TesselConfigError, match="unknown key 'matrix.feed_byte_per_cycle' "
                                                r"\(did you mean 'feed_bytes_per_cycle'\?\)"):
        _load(_sub("feed_bytes_per_cycle", "feed_byte_per_cycle"))
    with pytest.raises(TesselConfigError, match=r"unknown key 'offchip\[0\].latency'"):
        _load(_sub("latency_cycles = 100", "latency = 100"))


def test_duplicate_memory_and_invalid_toml() -> None:
    block = BASE[BASE.index("[[offchip]]"):BASE.index("[memory]")]
    with pytest.raises(TesselConfigError, match=r"offchip\[1\].name must be unique"):
        _load(BASE.replace(block, block + block))
    with pytest.raises(TesselConfigError, match="presets/x.toml: invalid TOML"):
        _load("rows = = 3")


def test_compile_options() -> None:
    o = CompileOptions(dump_after=["fold_bn"])  # a list is normalised to a tuple
    assert o.dump_after == ("fold_bn",) and o.calibration_samples == 32 and o.seed == 0
    with pytest.raises(TesselConfigError, match="calibration_samples"):
        CompileOptions(calibration_samples=0)
    with pytest.raises(TesselConfigError, match="seed"):
        CompileOptions(seed=-1)
    with pytest.raises(TesselConfigError, match="dump_after"):
        CompileOptions(dump_after="fold_bn")
    with pytest.raises(TesselConfigError, match="allow_host_fallback"):
        CompileOptions(allow_host_fallback=1)
    assert "arch_hash" not in dir(o)
