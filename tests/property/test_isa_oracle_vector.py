"""Vector-engine instructions on the simulator against docs/isa.md in plain integers
(``isa_ref``): REQUANT, ELTWISE, LUT (with LUT_LOAD), POOL, REDUCE, COPY, UNARY; one sample
and batches, every dtype, extreme zero points / multipliers / shifts / clamps, negative, zero,
padded, unaligned and overlapping strides, operands overlapping each other, and traps."""

from __future__ import annotations

import struct
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from oracle_kit import (
    INT32,
    Q31,
    SHIFT,
    ZP32,
    Case,
    case_of,
    check,
    clamp_range,
    extremes,
    pattern,
    place,
    samples,
    strides_for,
)

from tessel.isa import (
    AccSrc,
    DType,
    EltOp,
    Engine,
    Instruction,
    LutMode,
    Opcode,
    ParamMode,
    PoolOp,
    ReduceOp,
    Rounding,
    UnaryOp,
)

V = Engine.VECTOR
RUNS = settings(max_examples=150, deadline=None)
DTYPES = st.sampled_from(list(DType))


def _i32(values: list[int]) -> bytes:
    return struct.pack(f"<{len(values)}i", *values)


def _row_stride(draw: Any, row: int, unit: int, dst: bool) -> int:
    """A row stride for rows of ``row`` bytes (or entries): dense, padded, negative, zero,
    unaligned or overlapping."""
    kinds = ["dense", "dense", "padded", "negative", "odd"] + ([] if dst else ["zero", "overlap"])
    kind = draw(st.sampled_from(kinds))
    return {"dense": row, "padded": row + draw(st.integers(1, 9)) * unit, "negative": -row,
            "zero": 0, "odd": draw(st.integers(-row - 7, row + 7)),
            "overlap": draw(st.integers(1, max(1, row - 1)))}[kind]


# ---- REQUANT -----------------------------------------------------------------------------------
@st.composite
def requant_params(draw: Any, p: int) -> bytes:
    bias = [draw(extremes(INT32_MIN, INT32_MAX, -(2**20), 2**20)) for _ in range(p)]
    q31 = [draw(Q31) for _ in range(p)]
    shift = [draw(SHIFT) for _ in range(p)]
    if draw(st.integers(0, 29)) == 0:  # a bad entry: the instruction traps
        j = draw(st.integers(0, p - 1))
        if draw(st.booleans()):
            q31[j] = draw(st.integers(INT32_MIN, -1))
        else:
            shift[j] = draw(st.sampled_from([-32, 31, 100, INT32_MIN, INT32_MAX]))
    return _i32(bias) + _i32(q31) + _i32(shift)


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@st.composite
def requant_case(draw: Any) -> Case:
    rows, ch = draw(st.integers(1, 8)), draw(st.integers(1, 12))
    src = draw(st.sampled_from(list(AccSrc)))
    out_dtype = draw(DTYPES)
    mode = draw(st.sampled_from(list(ParamMode)))
    p = ch if mode == ParamMode.PER_CHANNEL else 1
    window = draw(st.sampled_from([512, 4096]))
    w = out_dtype.nbytes
    if src == AccSrc.ACC:
        ss = _row_stride(draw, ch, 1, False)
        src_addr = place(draw, [ch, rows], [1, ss], 1, 2048)
    else:
        ss = _row_stride(draw, 4 * ch, 4, False)
        src_addr = place(draw, [ch, rows], [4, ss], 4, window)
    ds = _row_stride(draw, w * ch, w, True)
    dst_addr = place(draw, [ch, rows], [w, ds], w, window)
    param_addr = place(draw, [12 * p], [1], 1, window)
    lo, hi = draw(clamp_range(out_dtype))
    ins = Instruction.make(Opcode.REQUANT, src=src, src_addr=src_addr, src_stride=ss,
                           rows=rows, ch=ch, out_dtype=out_dtype, dst_addr=dst_addr,
                           dst_stride=ds, param_addr=param_addr, param_mode=mode,
                           out_zp=draw(ZP32), act_min=lo, act_max=hi,
                           rounding=draw(st.sampled_from(list(Rounding))))

    def patches(draw: Any, n: int | None) -> list:
        out = []
        for _ in range(2):
            shared = draw(st.booleans())
            first = draw(requant_params(p))
            out.append([[("SRAM", param_addr, first if shared or k == 0 else
                           draw(requant_params(p)))] for k in range(samples(n))])
        return out
    return case_of(draw, V, [ins], patches)


@RUNS
@given(requant_case())
def test_requant(case: Case) -> None:
    check(case)


# ---- ELTWISE -----------------------------------------------------------------------------------
@st.composite
def eltwise_fields(draw: Any, op: EltOp) -> dict[str, int]:
    style = draw(st.sampled_from(["tflite", "tflite", "one", "wild", "wild"]))
    if style == "one":  # inputs rescaled by exactly 1, (2^30, 1): a layer norm's SUB, MAX / MIN
        return dict(a_zp=draw(ZP32), b_zp=draw(ZP32), left_shift=draw(extremes(0, 31)),
                    a_mult=1 << 30, a_shift=1, b_mult=draw(st.sampled_from([1 << 30, 5 << 27])),
                    b_shift=draw(st.sampled_from([1, 1, 0])), out_mult=draw(Q31),
                    out_shift=draw(SHIFT), out_zp=draw(ZP32))
    if style == "tflite":  # TFLite-like add / mul
        return dict(a_zp=draw(st.integers(-128, 127)), b_zp=draw(st.integers(-128, 127)),
                    left_shift=draw(st.sampled_from([0, 15, 20])),
                    a_mult=draw(st.integers(1 << 30, INT32_MAX)),
                    a_shift=draw(st.integers(-8, 1)),
                    b_mult=draw(st.integers(1 << 30, INT32_MAX)),
                    b_shift=draw(st.integers(-8, 1)),
                    out_mult=draw(st.integers(1 << 30, INT32_MAX)),
                    out_shift=draw(st.integers(-25, 1)), out_zp=draw(st.integers(-128, 127)))
    return dict(a_zp=draw(ZP32), b_zp=draw(ZP32), left_shift=draw(extremes(0, 31, 15, 20)),
                a_mult=draw(Q31), a_shift=draw(SHIFT), b_mult=draw(Q31), b_shift=draw(SHIFT),
                out_mult=draw(Q31), out_shift=draw(SHIFT), out_zp=draw(ZP32))


@st.composite
def eltwise_instr(draw: Any, window: int, dst: bool | str = True) -> Instruction:
    op = draw(st.sampled_from(list(EltOp)))
    dts = [draw(DTYPES) for _ in range(3)]
    ns = [draw(st.integers(1, 10)), draw(st.integers(1, 4)), draw(st.integers(1, 3))]
    a = draw(pattern(ns, dts[0].nbytes, window))
    b = draw(pattern(ns, dts[1].nbytes, window))
    same = draw(st.sampled_from([None, None, 0, 1]))  # the output over an operand's bytes
    if same is not None and dts[same] == dts[2] and (a, b)[same][1] != [0, 0, 0]:
        out = (a, b)[same]
    else:
        out = draw(pattern(ns, dts[2].nbytes, window, dst=dst))
    lo, hi = draw(clamp_range(dts[2]))
    return Instruction.make(
        Opcode.ELTWISE, op=op, a_dtype=dts[0], b_dtype=dts[1], out_dtype=dts[2], d0=ns[0],
        d1=ns[1], d2=ns[2], a_addr=a[0], a_s0=a[1][0], a_s1=a[1][1], a_s2=a[1][2],
        b_addr=b[0], b_s0=b[1][0], b_s1=b[1][1], b_s2=b[1][2], out_addr=out[0],
        out_s0=out[1][0], out_s1=out[1][1], out_s2=out[1][2], act_min=lo, act_max=hi,
        rounding=draw(st.sampled_from(list(Rounding))), **draw(eltwise_fields(op)))


@st.composite
def eltwise_case(draw: Any) -> Case:
    window = draw(st.sampled_from([256, 2048]))
    return case_of(draw, V, [draw(eltwise_instr(window))])


@settings(max_examples=250, deadline=None)
@given(eltwise_case())
def test_eltwise(case: Case) -> None:
    check(case)


# ---- LUT ---------------------------------------------------------------------------------------
@st.composite
def lut_instr(draw: Any, window: int, mode: LutMode, base: int) -> Instruction:
    w = 1 if mode == LutMode.I8_256 else 2
    ns = [draw(st.integers(1, 12)), draw(st.integers(1, 4)), draw(st.integers(1, 3))]
    src = draw(pattern(ns, w, window))
    dst = src if draw(st.integers(0, 3)) == 0 and 0 not in src[1] else \
        draw(pattern(ns, w, window, dst=True))
    return Instruction.make(
        Opcode.LUT, lut_mode=mode, lut_base=base, d0=ns[0], d1=ns[1], d2=ns[2],
        src_addr=src[0], src_s0=src[1][0], src_s1=src[1][1], src_s2=src[1][2],
        dst_addr=dst[0], dst_s0=dst[1][0], dst_s1=dst[1][1], dst_s2=dst[1][2])


@st.composite
def lut_case(draw: Any) -> Case:
    """A LUT alone (the LUT memory's random contents), or after a LUT_LOAD of its table."""
    mode = draw(st.sampled_from(list(LutMode)))
    size = 256 if mode == LutMode.I8_256 else 513
    base = draw(st.one_of(st.integers(0, 1024 - size), st.integers(0, 4095)))
    window = draw(st.sampled_from([512, 4096]))
    ins = draw(lut_instr(window, mode, base))
    if draw(st.booleans()):
        count = draw(st.sampled_from([size, size, 1, 100]))
        load = Instruction.make(Opcode.LUT_LOAD, lut_base=min(base, 4096 - count),
                                count=count, src_addr=draw(st.integers(0, window)))
        return case_of(draw, V, [load, ins])
    return case_of(draw, V, [ins])


@RUNS
@given(lut_case())
def test_lut(case: Case) -> None:
    check(case)


def pad(draw: Any, k: int, dil: int, most: int = 15) -> int:
    """Implicit padding: mostly at most the window's reach (as a network's), sometimes any."""
    if draw(st.integers(0, 7)) == 0:
        return draw(st.integers(0, min(most, 4)))
    return draw(st.integers(0, min(most, (k - 1) * dil)))


# ---- POOL --------------------------------------------------------------------------------------
def out_extent(draw: Any, n_in: int, k: int, stride: int, dil: int, pad: int) -> int:
    """Output rows (columns) of a window: mostly ones whose windows reach the tile, sometimes
    any (an output wholly in the padding traps in POOL)."""
    reach = max(1, (n_in - 1 + pad) // stride + 1)
    return draw(st.one_of(st.integers(1, reach), st.integers(1, 5))) if \
        draw(st.integers(0, 5)) == 0 else draw(st.integers(1, reach))


@st.composite
def pool_case(draw: Any) -> Case:
    dtype = draw(st.sampled_from([DType.I8] * 5 + [DType.I16] * 4 + [DType.I32]))
    w = dtype.nbytes
    ch = draw(st.integers(1, 6))
    in_h, in_w = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    sh, sw, dh, dw = (draw(st.integers(1, 3)), draw(st.integers(1, 3)),
                      draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pt, pl = pad(draw, kh, dh), pad(draw, kw, dw)
    oh, ow = out_extent(draw, in_h, kh, sh, dh, pt), out_extent(draw, in_w, kw, sw, dw, pl)
    window = draw(st.sampled_from([1024, 8192]))
    ins_s = draw(strides_for([in_w, in_h], w, span=ch * w))
    in_addr = place(draw, [ch, in_w, in_h], [w, *ins_s], w, window)
    out_s = draw(strides_for([ow, oh], w, dst=True, span=ch * w))
    out_addr = place(draw, [ch, ow, oh], [w, *out_s], w, window)
    lo, hi = draw(clamp_range(dtype if dtype != DType.I32 else DType.I16))
    ins = Instruction.make(
        Opcode.POOL, op=draw(st.sampled_from(list(PoolOp))), dtype=dtype, in_addr=in_addr,
        in_h=in_h, in_w=in_w, in_stride_h=ins_s[1], in_stride_w=ins_s[0], ch=ch, kh=kh, kw=kw,
        stride_h=sh, stride_w=sw, dil_h=dh, dil_w=dw, pad_top=pt, pad_left=pl, out_h=oh,
        out_w=ow, out_addr=out_addr, out_stride_h=out_s[1], out_stride_w=out_s[0], act_min=lo,
        act_max=hi)
    return case_of(draw, V, [ins])


@RUNS
@given(pool_case())
def test_pool(case: Case) -> None:
    check(case)


# ---- REDUCE ------------------------------------------------------------------------------------
@st.composite
def reduce_instr(draw: Any, window: int, dst_kind: bool | str = True) -> Instruction:
    op = draw(st.sampled_from(list(ReduceOp)))
    dtype = draw(DTYPES)
    axis = draw(st.integers(0, 2))
    ns = [draw(st.integers(1, 7)), draw(st.integers(1, 5)), draw(st.integers(1, 4))]
    src = draw(pattern(ns, dtype.nbytes, window))
    lo, hi = [k for k in range(3) if k != axis]
    w = 4 if op in (ReduceOp.SUM, ReduceOp.SUMSQ) else dtype.nbytes
    dst = draw(pattern([ns[lo], ns[hi]], w, window, dst=dst_kind))
    return Instruction.make(
        Opcode.REDUCE, op=op, dtype=dtype, axis=axis, d0=ns[0], d1=ns[1], d2=ns[2],
        src_addr=src[0], src_s0=src[1][0], src_s1=src[1][1], src_s2=src[1][2],
        in_zp=draw(ZP32), dst_addr=dst[0], dst_s0=dst[1][0], dst_s1=dst[1][1])


@st.composite
def reduce_case(draw: Any) -> Case:
    return case_of(draw, V, [draw(reduce_instr(draw(st.sampled_from([256, 4096]))))])


@RUNS
@given(reduce_case())
def test_reduce(case: Case) -> None:
    check(case)


# ---- UNARY -------------------------------------------------------------------------------------
@st.composite
def unary_instr(draw: Any, window: int, dst_kind: bool | str = True) -> Instruction:
    ns = [draw(st.integers(1, 8)), draw(st.integers(1, 4)), draw(st.integers(1, 3))]
    src = draw(pattern(ns, 4, window))
    dst = src if draw(st.integers(0, 3)) == 0 and 0 not in src[1] else \
        draw(pattern(ns, 4, window, dst=dst_kind))
    return Instruction.make(
        Opcode.UNARY, op=draw(st.sampled_from(list(UnaryOp))),
        frac_bits=draw(extremes(0, 31, 15, 16, 20, 30)), d0=ns[0], d1=ns[1], d2=ns[2],
        src_addr=src[0], src_s0=src[1][0], src_s1=src[1][1], src_s2=src[1][2],
        dst_addr=dst[0], dst_s0=dst[1][0], dst_s1=dst[1][1], dst_s2=dst[1][2])


@st.composite
def unary_case(draw: Any) -> Case:
    window = draw(st.sampled_from([256, 4096]))
    ins = draw(unary_instr(window))

    def patches(draw: Any, n: int | None) -> list:
        # the values where RECIP / RSQRT change behaviour, over the source's first elements
        vals = st.lists(st.one_of(extremes(INT32_MIN, INT32_MAX, 2, 3, 4, 65536, 2**30),
                                  INT32), min_size=1, max_size=8)
        return [[[("SRAM", ins.src_addr, _i32(draw(vals)))] for _ in range(samples(n))]
                for _ in range(2)] if ins.src_addr + 32 <= window else []
    return case_of(draw, V, [ins], patches)


@RUNS
@given(unary_case())
def test_unary(case: Case) -> None:
    check(case)


# ---- COPY --------------------------------------------------------------------------------------
@st.composite
def copy_case(draw: Any) -> Case:
    dtype = draw(DTYPES)
    w = dtype.nbytes
    ns = [draw(st.integers(1, 6)), draw(st.integers(1, 4)), draw(st.integers(1, 3)),
          draw(st.integers(1, 2))]
    window = draw(st.sampled_from([256, 4096]))
    src = draw(pattern(ns, w, window))
    if draw(st.integers(0, 2)) == 0:  # a transpose: dense in one dim order to another
        def dense(perm: list[int]) -> list[int]:
            out = [0] * 4
            for j, k in enumerate(perm):
                out[k] = w * _prod([ns[perm[i]] for i in range(j)])
            return out
        ss, ds = dense(draw(st.permutations(range(4)))), dense(draw(st.permutations(range(4))))
        base = place(draw, ns, ss, w, window)
        src = (base, ss)
        dst = (base if draw(st.booleans()) else place(draw, ns, ds, w, window), ds)
    else:
        dst = draw(pattern(ns, w, window, dst=True))
    ins = Instruction.make(
        Opcode.COPY, dtype=dtype, d0=ns[0], d1=ns[1], d2=ns[2], d3=ns[3], src_addr=src[0],
        src_s0=src[1][0], src_s1=src[1][1], src_s2=src[1][2], src_s3=src[1][3],
        dst_addr=dst[0], dst_s0=dst[1][0], dst_s1=dst[1][1], dst_s2=dst[1][2],
        dst_s3=dst[1][3])
    return case_of(draw, V, [ins])


def _prod(xs: list[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


@RUNS
@given(copy_case())
def test_copy(case: Case) -> None:
    check(case)


# ---- sequences -----------------------------------------------------------------------------------
@st.composite
def vector_sequence(draw: Any) -> Case:
    """Two to four vector instructions in one queue over one small window: each reads what
    the one before wrote (and the second run's new contents must reach every one)."""
    window = 512
    make = [lambda: draw(eltwise_instr(window, "safe")),
            lambda: draw(reduce_instr(window, "safe")), lambda: draw(unary_instr(window, "safe"))]
    instrs = [draw(st.sampled_from(make))() for _ in range(draw(st.integers(2, 4)))]
    return case_of(draw, V, instrs)


@settings(max_examples=80, deadline=None)
@given(vector_sequence())
def test_vector_sequences(case: Case) -> None:
    check(case)
