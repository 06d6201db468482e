"""The compiled kernels of REQUANT, DWCONV and POOL (``tessel.sim.kern_rq``, ``kern_dw``,
``kern_pool``) equal the reference handlers (``vector.exec_requant``, ``matrix.exec_dwconv``,
``vector.exec_pool``) bit for bit, both as their Python source (``Kernel.py``) and compiled
(``Kernel.compiled``): Hypothesis draws instructions the static rules accept (negative and
padded strides, unaligned addresses, per-channel and per-tensor parameters, every output
type, strides / dilations / padding, MAX and AVG, OVERWRITE and ACCUMULATE) and memories
mixing random values with the edges (INT32_MIN / MAX accumulators and biases, multipliers 0,
1, 2^30, 2^31 - 1, shifts -31 and 30, zero points at their field's ends, clamps at the type's).

The kernels see few array types (flat memories, int64 fields): a handful of signatures, each
compiled once and then loaded from numba's disk cache.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from simkit import ARCH, I, kernels_as, program

from tessel.isa import DType, Engine, Opcode
from tessel.isa.fields import AccMode, AccSrc, ParamMode, PoolOp
from tessel.isa.fixedpoint import INT32_MAX, INT32_MIN, MAX_SHIFT, MIN_SHIFT
from tessel.sim import kern_dw, kern_pool, kern_rq
from tessel.sim.matrix import exec_dwconv
from tessel.sim.prepare import prepare
from tessel.sim.state import NP_DTYPE, MachineState, Trap
from tessel.sim.vector import exec_pool, exec_requant

V = Engine.VECTOR
KERNELS = ((kern_rq, "requant_rows"), (kern_dw, "dwconv_tile"), (kern_pool, "pool_tile"))
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(params=["py", "compiled"])
def impl(request, monkeypatch) -> str:
    """Kernels on; ``py``: the builders get each kernel's uncompiled source instead."""
    return kernels_as(request.param, monkeypatch, KERNELS)


def _edge_or(lo: int, hi: int, *edges: int) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from([e for e in (lo, hi, 0, 1, -1, *edges) if lo <= e <= hi]),
                     st.integers(lo, hi))


def _clamp(draw, dt: DType) -> tuple[int, int]:
    info = np.iinfo(NP_DTYPE[dt])
    a, b = draw(_edge_or(int(info.min), int(info.max))), draw(_edge_or(int(info.min), int(info.max)))
    return min(a, b), max(a, b)


def _op(instr, drawn: bool = True):
    """The prepared op of one vector instruction; ``drawn``: drawn again when a static rule
    refuses it (else the rules must accept it)."""
    check = assume if drawn else _assert
    try:
        prep = prepare(program({V: [instr]}), ARCH)
    except Exception:  # noqa: BLE001 - fields outside the ISA's rules
        check(False)
        raise
    op = prep.queues[V][0]
    check(op.error is None)
    return op, prep


def _assert(ok: bool) -> None:
    assert ok


def _states(sram: dict[int, bytes], acc: dict[int, bytes] | None = None
            ) -> tuple[MachineState, ...]:
    """Two states (fast, reference) with the same blocks written at byte addresses."""
    out = []
    for _ in range(2):
        state = MachineState(ARCH)
        for mem, blocks in ((state.sram, sram), (state.acc_bytes, acc or {})):
            for addr, raw in blocks.items():
                mem[addr:addr + len(raw)] = np.frombuffer(raw, np.uint8)
        out.append(state)
    return tuple(out)


def _same(fast: MachineState, ref: MachineState) -> None:
    assert np.array_equal(fast.sram, ref.sram)
    assert np.array_equal(fast.acc_bytes, ref.acc_bytes)


def _values(draw, n: int, dtype, small: int) -> np.ndarray:
    """``n`` values of an integer ``dtype`` from a drawn seed: a third each uniform over the
    type, small (``|v| <= small``: unsaturated outputs, rounding ties) and the type's edges
    (Hypothesis' own arrays of this size are mostly one fill value)."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    edges = np.array([info.min, info.min + 1, info.max - 1, info.max, -1, 0, 1], np.int64)
    pick = rng.integers(0, 3, n)
    v = np.where(pick == 0, rng.integers(info.min, int(info.max) + 1, n, dtype=np.int64),
                 np.where(pick == 1, rng.integers(-small, small + 1, n), rng.choice(edges, n)))
    return v.astype(dtype)


# ---- REQUANT ---------------------------------------------------------------------------------
@st.composite
def requant_case(draw):
    rows, ch = draw(st.integers(1, 5)), draw(st.integers(1, 20))
    per_tensor = draw(st.booleans())
    p = 1 if per_tensor else ch
    dt = draw(st.sampled_from([DType.I8, DType.I16, DType.I32]))
    it = NP_DTYPE[dt].itemsize
    src = draw(st.sampled_from([AccSrc.ACC, AccSrc.SRAM]))
    sign = draw(st.sampled_from([1, -1])) if rows > 1 else 1
    row = ch + draw(st.integers(0, 3))  # elements between input rows
    if src == AccSrc.ACC:
        src_addr, src_stride, x_at = 512, sign * row, 4 * (512 - 4 * 23 if sign < 0 else 512)
    else:
        src_addr = 2048 + draw(st.integers(0, 3))  # unaligned int32 words too
        src_stride, x_at = sign * 4 * row, src_addr - (4 * 23 * 4 if sign < 0 else 0)
    x = _values(draw, rows * row + 4 * 23, np.int32, 70_000)
    dsign = draw(st.sampled_from([1, -1])) if rows > 1 else 1
    dst_addr = 12_000 + draw(st.integers(0, 3))
    dst_stride = dsign * it * (ch + draw(st.integers(0, 3)))
    if src == AccSrc.SRAM and dt == DType.I32 and draw(st.booleans()):
        dst_addr, dst_stride = src_addr, src_stride  # in place (a LayerNorm's rescale)
    bias = draw(st.lists(_edge_or(INT32_MIN, INT32_MAX), min_size=p, max_size=p))
    q31 = draw(st.lists(_edge_or(0, 2**31 - 1, 2**30, 2**30 + 1), min_size=p, max_size=p))
    shift = draw(st.lists(_edge_or(MIN_SHIFT, MAX_SHIFT, -30), min_size=p, max_size=p))
    lo, hi = _clamp(draw, dt)
    # the field's ends (every output saturates) and zero points inside the type
    zp = draw(st.one_of(st.sampled_from([INT32_MIN, INT32_MAX, lo, hi]), st.integers(-300, 300)))
    instr = I(Opcode.REQUANT, src=src, src_addr=src_addr, src_stride=src_stride, rows=rows,
              ch=ch, out_dtype=dt, dst_addr=dst_addr, dst_stride=dst_stride, param_addr=6000,
              param_mode=ParamMode.PER_TENSOR if per_tensor else ParamMode.PER_CHANNEL,
              out_zp=zp, act_min=lo, act_max=hi)
    params = np.array([bias, q31, shift], np.int64).astype(np.int32).tobytes()
    mem = {6000: params}
    acc = {}
    (acc if src == AccSrc.ACC else mem)[x_at] = x.tobytes()
    return instr, mem, acc


@SETTINGS
@given(case=requant_case())
def test_requant_kernel_equals_the_reference(impl, case):
    instr, sram, acc = case
    op, prep = _op(instr)
    step = kern_rq.build_requant(op, prep.cache)
    assert step is not None and step.__module__ == "tessel.sim.kern_rq"
    fast, ref = _states(sram, acc)
    step(fast)
    step(fast)  # the kept parameter rows: the same result (in place: requantised again)
    exec_requant(ref, op.f)
    exec_requant(ref, op.f)
    _same(fast, ref)


def test_requant_kernel_on_every_edge_combination(impl):
    """One channel per (bias, q31, shift) edge combination, every edge accumulator."""
    biases, mults = [INT32_MIN, -1, 0, 1, INT32_MAX], [0, 1, 2**30, 2**31 - 1]
    shifts = [MIN_SHIFT, -1, 0, 1, MAX_SHIFT]
    combos = [(b, q, s) for b in biases for q in mults for s in shifts]  # 100 channels
    accs = np.array([INT32_MIN, INT32_MIN + 1, -(2**30), -3, -1, 0, 1, 2, 2**30, INT32_MAX],
                    np.int32)
    ch = len(combos)
    params = np.array(combos, np.int64).T.astype(np.int32).tobytes()
    x = np.repeat(accs[:, None], ch, axis=1)
    for dt, zp in ((DType.I8, -128), (DType.I16, 5), (DType.I32, 0)):
        info = np.iinfo(NP_DTYPE[dt])
        instr = I(Opcode.REQUANT, src=AccSrc.ACC, src_addr=0, src_stride=ch, rows=len(accs),
                  ch=ch, out_dtype=dt, dst_addr=12_000, dst_stride=ch * info.bits // 8,
                  param_addr=6000, out_zp=zp, act_min=int(info.min), act_max=int(info.max))
        op, prep = _op(instr, drawn=False)
        step = kern_rq.build_requant(op, prep.cache)
        fast, ref = _states({6000: params}, {0: x.tobytes()})
        step(fast)
        exec_requant(ref, op.f)
        _same(fast, ref)


def test_requant_kernel_refuses_bad_parameters_as_a_trap(impl):
    instr = I(Opcode.REQUANT, src=AccSrc.ACC, src_addr=0, src_stride=4, rows=2, ch=4,
              out_dtype=DType.I8, dst_addr=12_000, dst_stride=4, param_addr=6000,
              act_min=-128, act_max=127)
    op, prep = _op(instr, drawn=False)
    step = kern_rq.build_requant(op, prep.cache)
    bad = np.array([[0] * 4, [1 << 30, -1, 1 << 30, 1 << 30], [0] * 4], np.int32).tobytes()
    fast, _ = _states({6000: bad})
    with pytest.raises(Trap):
        step(fast)


# ---- DWCONV ----------------------------------------------------------------------------------
def _out_size(n: int, pad: int, k: int, dil: int, stride: int) -> int:
    return max(1, (n + pad - (k - 1) * dil - 1) // stride + 1)


@st.composite
def dwconv_case(draw):
    ch, in_h, in_w = draw(st.integers(1, 12)), draw(st.integers(1, 6)), draw(st.integers(1, 7))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    sh, sw, dh, dw = (draw(st.integers(1, 3)) for _ in range(4))
    pt, pl = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    oh = draw(st.integers(1, _out_size(in_h, pt, kh, dh, sh) + 1))
    ow = draw(st.integers(1, _out_size(in_w, pl, kw, dw, sw) + 1))
    xsw = draw(st.sampled_from([1, -1])) * (ch + draw(st.integers(0, 2)))
    xsh = draw(st.sampled_from([1, -1])) * (in_w * abs(xsw) + draw(st.integers(0, 3)))
    wsk = draw(st.sampled_from([1, -1])) * (ch + draw(st.integers(0, 2)))
    zp = draw(_edge_or(-256, 255, -128, 127))
    mode = draw(st.sampled_from([AccMode.OVERWRITE, AccMode.ACCUMULATE]))
    acc_stride = ch + draw(st.integers(0, 2))
    instr = I(Opcode.DWCONV, in_addr=1500, in_h=in_h, in_w=in_w, in_stride_h=xsh,
              in_stride_w=xsw, ch=ch, in_zp=zp, kh=kh, kw=kw, stride_h=sh, stride_w=sw,
              dil_h=dh, dil_w=dw, pad_top=pt, pad_left=pl, out_h=oh, out_w=ow, w_addr=8000,
              w_stride_k=wsk, acc_addr=64, acc_stride=acc_stride, mode=mode)
    x = _values(draw, 3000, np.int8, 3)  # SRAM bytes 0..3000: the tile
    w = _values(draw, 512, np.int8, 3)  # weights around 8000
    acc = _values(draw, 64 + oh * ow * acc_stride, np.int32, 70_000)
    return instr, {0: x.tobytes(), 8000 - 16 * 15: w.tobytes()}, {0: acc.tobytes()}


@SETTINGS
@given(case=dwconv_case())
def test_dwconv_kernel_equals_the_reference(impl, case):
    instr, sram, acc = case
    op, prep = _op(instr)
    step = kern_dw.build_dwconv(op, ARCH.onchip.sram_bytes, {})
    assume(step is not None)  # a frame beyond the static bound, an all-padding tile
    assert step.__module__ == "tessel.sim.kern_dw"
    fast, ref = _states(sram, acc)
    step(fast)
    exec_dwconv(ref, op.f)
    _same(fast, ref)


# ---- POOL ------------------------------------------------------------------------------------
@st.composite
def pool_case(draw):
    dt = draw(st.sampled_from([DType.I8, DType.I16]))
    it = NP_DTYPE[dt].itemsize
    ch, in_h, in_w = draw(st.integers(1, 10)), draw(st.integers(1, 7)), draw(st.integers(1, 7))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    sh, sw, dh, dw = (draw(st.integers(1, 3)) for _ in range(4))
    pt, pl = draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1))
    oh = draw(st.integers(1, _out_size(in_h, pt, kh, dh, sh)))
    ow = draw(st.integers(1, _out_size(in_w, pl, kw, dw, sw)))
    xsw = draw(st.sampled_from([1, -1])) * it * (ch + draw(st.integers(0, 2)))
    xsh = draw(st.sampled_from([1, -1])) * (in_w * abs(xsw) + it * draw(st.integers(0, 3)))
    osw = draw(st.sampled_from([1, -1])) * it * (ch + draw(st.integers(0, 2)))
    osh = draw(st.sampled_from([1, -1])) * (ow * abs(osw) + it * draw(st.integers(0, 3)))
    odd = draw(st.integers(0, it - 1))  # both addresses unaligned alike
    lo, hi = _clamp(draw, dt)
    instr = I(Opcode.POOL, op=draw(st.sampled_from([PoolOp.MAX, PoolOp.AVG])), dtype=dt,
              in_addr=3000 + odd, in_h=in_h, in_w=in_w, in_stride_h=xsh, in_stride_w=xsw,
              ch=ch, kh=kh, kw=kw, stride_h=sh, stride_w=sw, dil_h=dh, dil_w=dw, pad_top=pt,
              pad_left=pl, out_h=oh, out_w=ow, out_addr=12_000 + odd, out_stride_h=osh,
              out_stride_w=osw, act_min=lo, act_max=hi)
    x = _values(draw, 6000 // it, NP_DTYPE[dt], 3)  # SRAM bytes 0..6000
    return instr, {odd: x.tobytes()}


@SETTINGS
@given(case=pool_case())
def test_pool_kernel_equals_the_reference(impl, case):
    instr, sram = case
    op, prep = _op(instr)
    step = kern_pool.build_pool(op, prep)
    assume(step is not None)  # an all-padding window: the reference traps
    assert step.__module__ == "tessel.sim.kern_pool"
    fast, ref = _states(sram)
    step(fast)
    exec_pool(ref, op.f)
    _same(fast, ref)
