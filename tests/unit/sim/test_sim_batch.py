"""Batched simulation (``BatchState``): every instruction applied to n samples at once equals
running each sample alone, bit for bit, with operands that differ between the samples (the
per-sample GEMM and per-sample requantisation paths) and that are the same (one GEMM)."""

from __future__ import annotations

import numpy as np
import pytest
from simkit import ARCH, I, program

from tessel.isa import Engine, Opcode
from tessel.isa.fields import (
    AccMode,
    DType,
    EltOp,
    LutMode,
    ParamMode,
    PoolOp,
    ReduceOp,
    UnaryOp,
)
from tessel.sim.functional import run_functional
from tessel.sim.prepare import prepare
from tessel.sim.state import BatchState, MachineState

N = 3
V, MX = Engine.VECTOR, Engine.MATRIX


def _params(rng, p: int) -> np.ndarray:
    bias = rng.integers(-(2**20), 2**20, p)
    q31 = rng.integers(2**30, 2**31, p)
    shift = rng.integers(-31, 5, p)
    return np.stack([bias, q31, shift]).astype(np.int32)


def _fill(k: int, same: tuple[int, int] | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SRAM, accumulator and LUT bytes of sample k: random; bytes [same) equal in all."""
    rng = np.random.default_rng(100 + k)
    sram = rng.integers(0, 256, 65536, dtype=np.uint8)
    sram[2000:2000 + 3 * 4 * 64] = _params(rng, 64).view(np.uint8).reshape(-1)
    if same is not None:
        lo, hi = same
        sram[lo:hi] = np.random.default_rng(7).integers(0, 256, hi - lo, dtype=np.uint8)
        sram[2000:2000 + 3 * 4 * 64] = _params(np.random.default_rng(8), 64).view(
            np.uint8).reshape(-1)
    acc = rng.integers(0, 256, 16384, dtype=np.uint8)
    lut = rng.integers(0, 256, 2048, dtype=np.uint8)
    return sram, acc, lut


def _check(streams, same: tuple[int, int] | None = None) -> None:
    prep = prepare(program(streams), ARCH)
    batch = BatchState(ARCH, N, [1024 for _ in ARCH.offchip])
    singles = []
    for k in range(N):
        sram, acc, lut = _fill(k, same)
        one = MachineState(ARCH)
        for dst, src in ((one.sram, sram), (one.acc_bytes, acc), (one.lut_bytes, lut)):
            dst[:src.size] = src
        for dst, src in ((batch.sram, sram), (batch.acc_bytes, acc), (batch.lut_bytes, lut)):
            dst[k, :src.size] = src
        run_functional(prep, one)
        singles.append(one)
    run_functional(prep, batch)
    for k, one in enumerate(singles):
        for name in ("sram", "acc_bytes", "lut_bytes"):
            assert np.array_equal(getattr(batch, name)[k], getattr(one, name)), (name, k)


CONV = dict(in_addr=0, in_h=7, in_w=6, in_stride_h=6 * 8, in_stride_w=8, cin=8, in_zp=5, kh=3,
            kw=3, stride_h=2, stride_w=1, pad_top=1, pad_left=1, out_h=4, out_w=6, cout=9,
            w_addr=20_000, w_stride_k=8 * 9, w_stride_ci=9, w_stride_co=1, w_zp=-2, acc_addr=0,
            acc_stride=9)
CASES = {
    "matmul": {MX: [I(Opcode.MATMUL, m=7, n=5, k=300, a_addr=0, a_stride_m=300, a_zp=3,
                      b_addr=20_000, b_stride_k=5, acc_addr=4, acc_stride=5)]},
    "matmul_acc": {MX: [I(Opcode.MATMUL, m=4, n=3, k=9, a_addr=100, a_stride_m=9,
                          b_addr=20_000, b_stride_k=3, acc_addr=0, acc_stride=3,
                          mode=AccMode.ACCUMULATE)]},
    "conv": {MX: [I(Opcode.CONV, **CONV)]},
    "conv_acc": {MX: [I(Opcode.CONV, mode=AccMode.ACCUMULATE, **CONV)]},
    "dwconv": {V: [I(Opcode.DWCONV, in_addr=0, in_h=7, in_w=6, in_stride_h=72, in_stride_w=12,
                     ch=12, in_zp=-9, kh=3, kw=3, stride_h=2, stride_w=1, pad_top=1,
                     pad_left=1, out_h=4, out_w=6, w_addr=20_000, w_stride_k=12, acc_addr=10,
                     acc_stride=12)]},
    "requant": {V: [I(Opcode.REQUANT, src=0, src_addr=0, src_stride=66, rows=5, ch=64,
                      out_dtype=DType.I8, dst_addr=8000, dst_stride=65, param_addr=2000,
                      param_mode=ParamMode.PER_CHANNEL, out_zp=-3, act_min=-100, act_max=127)]},
    "eltwise": {V: [I(Opcode.ELTWISE, op=EltOp.ADD, a_dtype=DType.I8, b_dtype=DType.I16,
                      out_dtype=DType.I8, d0=16, d1=3, a_addr=0, a_s0=1, a_s1=16, b_addr=100,
                      b_s0=2, b_s1=0, out_addr=9000, out_s0=1, out_s1=16, left_shift=20,
                      a_mult=1 << 30, a_shift=1, b_mult=1 << 29, b_shift=0, out_mult=1 << 30,
                      out_shift=-19, out_zp=4, act_min=-128, act_max=127)]},
    "eltwise_mul": {V: [I(Opcode.ELTWISE, op=EltOp.MUL, a_dtype=DType.I32, b_dtype=DType.I8,
                          out_dtype=DType.I16, d0=10, a_addr=0, a_s0=4, b_addr=100, b_s0=1,
                          out_addr=9000, out_s0=2, out_mult=1 << 30, out_shift=-3,
                          act_min=-32768, act_max=32767)]},
    "lut8": {V: [I(Opcode.LUT_LOAD, lut_base=7, count=256, src_addr=1000),
                 I(Opcode.LUT, lut_mode=LutMode.I8_256, lut_base=7, d0=64, d1=2, src_addr=0,
                   src_s0=1, src_s1=64, dst_addr=9000, dst_s0=1, dst_s1=64)]},
    "lut16": {V: [I(Opcode.LUT, lut_mode=LutMode.I16_513, lut_base=100, d0=8, d1=8,
                    src_addr=0, src_s0=2, src_s1=16, dst_addr=9000, dst_s0=2, dst_s1=16)]},
    "pool_max": {V: [I(Opcode.POOL, op=PoolOp.MAX, dtype=DType.I8, in_addr=0, in_h=5, in_w=6,
                       in_stride_h=18, in_stride_w=3, ch=3, kh=3, kw=3, stride_h=2,
                       stride_w=2, pad_top=1, pad_left=1, out_h=3, out_w=3, out_addr=9000,
                       out_stride_h=9, out_stride_w=3, act_min=-118, act_max=127)]},
    "pool_avg": {V: [I(Opcode.POOL, op=PoolOp.AVG, dtype=DType.I16, in_addr=0, in_h=5,
                       in_w=6, in_stride_h=36, in_stride_w=6, ch=3, kh=3, kw=3, stride_h=2,
                       stride_w=2, pad_top=1, pad_left=1, out_h=3, out_w=3, out_addr=9000,
                       out_stride_h=18, out_stride_w=6, act_min=-32768, act_max=32767)]},
    "reduce": {V: [I(Opcode.REDUCE, op=op, dtype=DType.I16, axis=axis, d0=5, d1=4, d2=3,
                     src_addr=0, src_s0=2, src_s1=10, src_s2=40, in_zp=-1000,
                     dst_addr=9000 + 100 * i, dst_s0=4, dst_s1=4 * 5)
                   for i, (op, axis) in enumerate([(ReduceOp.SUM, 0), (ReduceOp.SUMSQ, 1),
                                                   (ReduceOp.SUM, 2)])]
               + [I(Opcode.REDUCE, op=ReduceOp.MAX, dtype=DType.I16, axis=1, d0=5, d1=4,
                    d2=3, src_addr=0, src_s0=2, src_s1=10, src_s2=40, dst_addr=9500,
                    dst_s0=2, dst_s1=10)]},
    "copy": {V: [I(Opcode.COPY, dtype=DType.I32, d0=6, d1=4, src_addr=0, src_s0=4, src_s1=24,
                   dst_addr=0, dst_s0=16, dst_s1=4)]},
    "unary": {V: [I(Opcode.UNARY, op=op, frac_bits=20, d0=10, src_addr=0, src_s0=4,
                    dst_addr=9000 + 64 * i, dst_s0=4) for i, op in enumerate(UnaryOp)]},
}


@pytest.mark.parametrize("same", [None, (0, 60_000)], ids=["differ", "same"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_batch_equals_each_sample_alone(case, same):
    _check(CASES[case], same)
