"""One parameter vocabulary: NpuArch.with_param / with_params / param by dotted TOML name."""

from __future__ import annotations

import pytest

from tessel.arch import Dataflow, load_preset
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
