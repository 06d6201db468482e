"""The simulator's other forms of the same semantics against docs/isa.md (``isa_ref``): the
float32 GEMM a host without a fast exact int8 GEMM runs (one sample and batches), the int8
GEMM on every tile size, and every kernel run uncompiled (its Python source, as with kernels
off). Which form runs changes speed only, never a result."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle_kit import Case, check
from test_isa_oracle_matrix import conv_case, dwconv_case, matmul_case
from test_isa_oracle_move import dma_case
from test_isa_oracle_vector import (
    copy_case,
    eltwise_case,
    lut_case,
    pool_case,
    reduce_case,
    requant_case,
    unary_case,
)

from tessel.sim import gemm, jit
from tessel.sim.instr import conv

FIXTURE = [HealthCheck.function_scoped_fixture]
MATRIX = st.one_of(conv_case(), matmul_case())


@settings(max_examples=100, deadline=None, suppress_health_check=FIXTURE)
@given(MATRIX)
def test_float32_gemm(monkeypatch: Any, case: Case) -> None:
    monkeypatch.setattr(gemm, "USE_INT_MM", False)
    check(case)


@settings(max_examples=100, deadline=None, suppress_health_check=FIXTURE)
@given(MATRIX)
def test_int8_gemm_on_every_tile(monkeypatch: Any, case: Case) -> None:
    if gemm.exact_int_mm() is None:
        pytest.skip("no exact torch._int_mm on this host")
    monkeypatch.setattr(gemm, "FORCE_INT_MM", True)
    monkeypatch.setattr(conv, "INT_MM_MIN_MACS", 0)
    check(case)


UNCOMPILED = st.one_of(conv_case(), matmul_case(), dwconv_case(), requant_case(),
                       eltwise_case(), lut_case(), pool_case(), reduce_case(), unary_case(),
                       copy_case(), dma_case())


@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURE)
@given(UNCOMPILED)
def test_kernels_uncompiled(monkeypatch: Any, case: Case) -> None:
    """``TESSEL_SIM_KERNELS=0``: the steps run their kernels' Python source."""
    monkeypatch.setenv(jit.ENV, "0")
    check(case)
