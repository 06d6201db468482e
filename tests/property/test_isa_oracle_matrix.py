"""CONV, MATMUL and DWCONV on the simulator against docs/isa.md in plain integers
(``isa_ref``): every zero point from -256 to 255, padding, strides, dilation, negative / zero /
unaligned operand strides, weights in any layout (int8 or int4), OVERWRITE and
ACCUMULATE (wrapping int32),
reductions long enough to need more than one exact float32 GEMM, one sample and batches whose
samples' weights differ (or differ in one byte); and large tiles (the sizes a GEMM library
takes) against the same formulas evaluated in int64 numpy, itself checked against
``isa_ref`` on small tiles."""

from __future__ import annotations

from typing import Any

import isa_ref as ref
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from oracle_kit import ACC_ENTRIES, ARCH, ZP9, Case, case_of, check, place, program_of, strides_for
from test_isa_oracle_vector import out_extent, pad

from tessel.isa import AccMode, Engine, Instruction, Opcode
from tessel.isa.instrs.matrix import WeightType
from tessel.sim.functional import run_functional
from tessel.sim.prepare import prepare
from tessel.sim.state import BatchState, MachineState

M = Engine.MATRIX
RUNS = settings(max_examples=150, deadline=None)
ACC_WINDOW = 4096


def _acc(draw: Any, rows: int, cols: int) -> tuple[int, int]:
    """(acc_addr, acc_stride): rows of ``cols`` entries, mostly not overlapping."""
    stride = draw(st.sampled_from([cols, cols, cols + 1, cols + 7, max(1, cols - 1)]))
    return place(draw, [cols, rows], [1, stride], 1, ACC_WINDOW), stride


def _layout(draw: Any, ns: list[int], window: int) -> tuple[int, list[int]]:
    """(base, strides) of an operand of dims ``ns`` whose dims lie in memory in a drawn order
    (each drawn dense, padded, negative, zero, unaligned or overlapping)."""
    order = draw(st.permutations(range(len(ns))))
    ss_ordered = draw(strides_for([ns[k] for k in order], 1))
    ss = [0] * len(ns)
    for k, s in zip(order, ss_ordered, strict=True):
        ss[k] = s
    return place(draw, ns, ss, 1, window), ss


def _weights(draw: Any, ns: list[int], window: int) -> tuple[WeightType, int, list[int]]:
    """(type, base, strides) of weights of dims ``ns``: int8 as ``_layout``, or int4 (strides
    in nibbles from nibble ``2 * base``)."""
    w_type = draw(st.sampled_from([WeightType.I8, WeightType.I8, WeightType.I4]))
    if w_type is WeightType.I8:
        return (w_type, *_layout(draw, ns, window))
    nib, ss = _layout(draw, ns, 2 * window)
    base = nib // 2 + draw(st.sampled_from([0, nib % 2]))
    lo, hi = ref.box(2 * base, ns, ss, 1)
    assume(lo >= 0 and hi <= 2 * window)
    return w_type, base, ss


def _mode(draw: Any) -> AccMode:
    return draw(st.sampled_from(list(AccMode)))


# ---- CONV --------------------------------------------------------------------------------------
@st.composite
def conv_case(draw: Any, big: bool = False) -> Case:
    cin, cout = draw(st.integers(1, 10)), draw(st.integers(1, 10))
    in_h, in_w = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    kh, kw = draw(st.sampled_from([1, 1, 2, 3, 3, 5])), draw(st.sampled_from([1, 1, 2, 3, 3]))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pt, pl = pad(draw, kh, dh), pad(draw, kw, dw)
    oh, ow = out_extent(draw, in_h, kh, sh, dh, pt), out_extent(draw, in_w, kw, sw, dw, pl)
    window = draw(st.sampled_from([2048, 16384]))
    in_s = draw(strides_for([in_w, in_h], 1, span=cin))
    in_addr = place(draw, [cin, in_w, in_h], [1, *in_s], 1, window)
    w_type, w_addr, (ws_k, ws_ci, ws_co) = _weights(draw, [kh * kw, cin, cout], window)
    acc_addr, acc_stride = _acc(draw, oh * ow, cout)
    ins = Instruction.make(
        Opcode.CONV, in_addr=in_addr, in_h=in_h, in_w=in_w, in_stride_h=in_s[1],
        in_stride_w=in_s[0], cin=cin, in_zp=draw(ZP9), kh=kh, kw=kw, stride_h=sh, stride_w=sw,
        dil_h=dh, dil_w=dw, pad_top=pt, pad_left=pl, out_h=oh, out_w=ow, cout=cout,
        w_addr=w_addr, w_stride_k=ws_k, w_stride_ci=ws_ci, w_stride_co=ws_co, w_zp=draw(ZP9),
        acc_addr=acc_addr, acc_stride=acc_stride, mode=_mode(draw), w_type=w_type)
    return case_of(draw, M, [ins])


@RUNS
@given(conv_case())
def test_conv(case: Case) -> None:
    check(case)


# ---- MATMUL ------------------------------------------------------------------------------------
@st.composite
def matmul_case(draw: Any) -> Case:
    m, n = draw(st.integers(1, 10)), draw(st.integers(1, 10))
    k = draw(st.one_of(st.integers(1, 40), st.integers(100, 300)))  # long: several exact GEMMs
    window = draw(st.sampled_from([2048, 16384]))
    a_addr, (a_sm, a_sk) = _layout(draw, [m, k], window)
    b_type, b_addr, (b_sk, b_sn) = _weights(draw, [k, n], window)
    acc_addr, acc_stride = _acc(draw, m, n)
    ins = Instruction.make(
        Opcode.MATMUL, m=m, n=n, k=k, a_addr=a_addr, a_stride_m=a_sm, a_stride_k=a_sk,
        a_zp=draw(ZP9), b_addr=b_addr, b_stride_k=b_sk, b_stride_n=b_sn, b_zp=draw(ZP9),
        acc_addr=acc_addr, acc_stride=acc_stride, mode=_mode(draw), b_type=b_type)
    return case_of(draw, M, [ins])


@RUNS
@given(matmul_case())
def test_matmul(case: Case) -> None:
    check(case)


# ---- DWCONV ------------------------------------------------------------------------------------
@st.composite
def dwconv_case(draw: Any) -> Case:
    ch = draw(st.integers(1, 12))
    in_h, in_w = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    kh, kw = draw(st.sampled_from([1, 2, 3, 3, 5])), draw(st.sampled_from([1, 2, 3, 3, 5]))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pt, pl = pad(draw, kh, dh), pad(draw, kw, dw)
    oh, ow = out_extent(draw, in_h, kh, sh, dh, pt), out_extent(draw, in_w, kw, sw, dw, pl)
    window = draw(st.sampled_from([2048, 16384]))
    in_s = draw(strides_for([in_w, in_h], 1, span=ch))
    in_addr = place(draw, [ch, in_w, in_h], [1, *in_s], 1, window)
    (ws_k,) = draw(strides_for([kh * kw], 1, span=ch))
    w_type = draw(st.sampled_from([WeightType.I8, WeightType.I8, WeightType.I4]))
    if w_type is WeightType.I4:  # nibbles from nibble 2 * w_addr
        nib = place(draw, [ch, kh * kw], [1, ws_k], 1, 2 * window)
        w_addr = nib // 2 + draw(st.sampled_from([0, nib % 2]))
        lo, hi = ref.box(2 * w_addr, [ch, kh * kw], [1, ws_k], 1)
        assume(lo >= 0 and hi <= 2 * window)
    else:
        w_addr = place(draw, [ch, kh * kw], [1, ws_k], 1, window)
    acc_addr, acc_stride = _acc(draw, oh * ow, ch)
    engine = draw(st.sampled_from([Engine.MATRIX, Engine.VECTOR]))
    ins = Instruction.make(
        Opcode.DWCONV, in_addr=in_addr, in_h=in_h, in_w=in_w, in_stride_h=in_s[1],
        in_stride_w=in_s[0], ch=ch, in_zp=draw(ZP9), kh=kh, kw=kw, stride_h=sh, stride_w=sw,
        dil_h=dh, dil_w=dw, pad_top=pt, pad_left=pl, out_h=oh, out_w=ow, w_addr=w_addr,
        w_stride_k=ws_k, acc_addr=acc_addr, acc_stride=acc_stride, mode=_mode(draw),
        w_type=w_type)
    return case_of(draw, engine, [ins])


@RUNS
@given(dwconv_case())
def test_dwconv(case: Case) -> None:
    check(case)


# ---- large tiles: the formulas of docs/isa.md in int64 numpy ---------------------------------------
def conv_int64(sram: np.ndarray, acc: np.ndarray, f: dict) -> np.ndarray:
    """The accumulator after a CONV (docs/isa.md's loops as int64 index arithmetic, one
    exact int64 product per kernel position)."""
    s8 = sram.view(np.int8).astype(np.int64)
    oy, ox, ci = np.ix_(np.arange(f["out_h"]), np.arange(f["out_w"]), np.arange(f["cin"]))
    ci_w, co = np.ix_(np.arange(f["cin"]), np.arange(f["cout"]))
    s = np.zeros((f["out_h"], f["out_w"], f["cout"]), np.int64)
    for ky in range(f["kh"]):
        for kx in range(f["kw"]):
            iy = oy * f["stride_h"] - f["pad_top"] + ky * f["dil_h"]
            ix = ox * f["stride_w"] - f["pad_left"] + kx * f["dil_w"]
            inside = (iy >= 0) & (iy < f["in_h"]) & (ix >= 0) & (ix < f["in_w"])
            at = np.where(inside, f["in_addr"] + iy * f["in_stride_h"] + ix * f["in_stride_w"]
                          + ci, 0)
            x = np.where(inside, s8[at] - f["in_zp"], 0)
            off = ((ky * f["kw"] + kx) * f["w_stride_k"] + ci_w * f["w_stride_ci"]
                   + co * f["w_stride_co"])
            if f["w_type"] == WeightType.I4:  # nibble 2 w_addr + off, sign-extended
                n = 2 * f["w_addr"] + off
                v = (sram[n >> 1].astype(np.int64) >> (4 * (n & 1))) & 0xF
                k = np.where(v >= 8, v - 16, v) - f["w_zp"]
            else:
                k = s8[f["w_addr"] + off] - f["w_zp"]
            s += x @ k
    return _store(acc, f, s.reshape(-1, f["cout"]))


def matmul_int64(sram: np.ndarray, acc: np.ndarray, f: dict) -> np.ndarray:
    s8 = sram.view(np.int8).astype(np.int64)
    i, t = np.ix_(np.arange(f["m"]), np.arange(f["k"]))
    t2, j = np.ix_(np.arange(f["k"]), np.arange(f["n"]))
    a = s8[f["a_addr"] + i * f["a_stride_m"] + t * f["a_stride_k"]] - f["a_zp"]
    off = t2 * f["b_stride_k"] + j * f["b_stride_n"]
    if f["b_type"] == WeightType.I4:
        n = 2 * f["b_addr"] + off
        v = (sram[n >> 1].astype(np.int64) >> (4 * (n & 1))) & 0xF
        b = np.where(v >= 8, v - 16, v) - f["b_zp"]
    else:
        b = s8[f["b_addr"] + off] - f["b_zp"]
    return _store(acc, f, a @ b)


def _store(acc: np.ndarray, f: dict, s: np.ndarray) -> np.ndarray:
    out = acc.view("<i4").astype(np.int64)
    rows, cols = s.shape
    idx = f["acc_addr"] + np.arange(rows)[:, None] * f["acc_stride"] + np.arange(cols)[None]
    out[idx] = s + (out[idx] if f["mode"] == AccMode.ACCUMULATE else 0)
    return ((out + 2**31) % 2**32 - 2**31).astype("<i4").view(np.uint8)


@settings(max_examples=30, deadline=None)
@given(st.one_of(conv_case(), matmul_case()))
def test_int64_forms_equal_the_reference(case: Case) -> None:
    """The int64 forms used on large tiles below equal ``isa_ref`` (small tiles)."""
    (ins,) = case.instrs
    f = {k: int(v) for k, v in ins.as_dict().items()}
    if ref.static_trap(ins.opcode.name, f, {"SRAM": 1 << 19, "ACC": ACC_ENTRIES}) is not None:
        return
    rng = np.random.default_rng(case.seed)
    sram = rng.integers(0, 256, 1 << 19, dtype=np.uint8)
    acc = rng.integers(0, 256, 4 * ACC_ENTRIES, dtype=np.uint8)
    m = ref.Machine(sram.tobytes(), acc.tobytes(), b"", [])
    want = (ref.ref_conv if ins.opcode == Opcode.CONV else ref.ref_matmul)(m, f).apply(m).acc
    form = conv_int64 if ins.opcode == Opcode.CONV else matmul_int64
    assert form(sram, acc, f).tobytes() == want


BIG = [  # (fields, batch): tiles the simulator hands to a GEMM library, packed operands kept
    (dict(op=Opcode.CONV, in_h=16, in_w=16, cin=32, cout=64, kh=3, kw=3, pad_top=1,
          pad_left=1, out_h=16, out_w=16, in_zp=-128, w_zp=0), None),
    (dict(op=Opcode.CONV, in_h=15, in_w=15, cin=24, cout=40, kh=3, kw=3, stride_h=2,
          stride_w=2, pad_top=1, pad_left=1, out_h=8, out_w=8, in_zp=200, w_zp=-256), 3),
    (dict(op=Opcode.CONV, in_h=14, in_w=14, cin=96, cout=64, out_h=14, out_w=14, in_zp=5,
          w_zp=3, mode=AccMode.ACCUMULATE), None),
    (dict(op=Opcode.CONV, in_h=9, in_w=9, cin=200, cout=32, kh=3, kw=3, out_h=7, out_w=7,
          in_zp=255, w_zp=-256), 2),
    (dict(op=Opcode.CONV, in_h=10, in_w=10, cin=64, cout=64, kh=3, kw=3, pad_top=1,
          pad_left=1, out_h=10, out_w=10), None),  # zero points 0: the GEMM writes the ACC
    (dict(op=Opcode.CONV, in_h=16, in_w=16, cin=32, cout=64, kh=3, kw=3, pad_top=1,
          pad_left=1, out_h=16, out_w=16, in_zp=-128, w_zp=0, w_type=WeightType.I4), None),
    (dict(op=Opcode.CONV, in_h=9, in_w=9, cin=200, cout=32, kh=3, kw=3, out_h=7, out_w=7,
          in_zp=3, w_zp=1, w_type=WeightType.I4), 2),
    (dict(op=Opcode.MATMUL, m=197, n=64, k=192, a_zp=-3, b_zp=0), None),
    (dict(op=Opcode.MATMUL, m=64, n=96, k=600, a_zp=255, b_zp=-256), 2),
    (dict(op=Opcode.MATMUL, m=120, n=130, k=576, a_zp=0, b_zp=0), None),
    (dict(op=Opcode.MATMUL, m=197, n=64, k=192, a_zp=-3, b_zp=0, b_type=WeightType.I4), None),
    (dict(op=Opcode.MATMUL, m=64, n=96, k=600, a_zp=7, b_zp=2, b_type=WeightType.I4), 2),
]


def _big_instruction(kw: dict) -> Instruction:
    kw = dict(kw)
    op = kw.pop("op")
    if op == Opcode.CONV:
        cin, cout = kw["cin"], kw["cout"]
        kk = kw.get("kh", 1) * kw.get("kw", 1)
        assert kk * cin * cout < 300_000
        return Instruction.make(op, in_addr=0, in_stride_h=kw["in_w"] * cin, in_stride_w=cin,
                                w_addr=200_000, w_stride_co=1, w_stride_ci=cout,
                                w_stride_k=cin * cout, acc_addr=0, acc_stride=cout, **kw)
    return Instruction.make(op, a_addr=0, a_stride_m=kw["k"], b_addr=200_000,
                            b_stride_k=kw["n"], acc_addr=0, acc_stride=kw["n"], **kw)


@pytest.mark.parametrize("kw,n", BIG)
def test_large_tiles(kw: dict, n: int | None) -> None:
    """One sample or a batch (samples' weights differing), each run twice with new data."""
    ins = _big_instruction(kw)
    f = {k: int(v) for k, v in ins.as_dict().items()}
    case = Case(M, [ins])
    prep = prepare(program_of(case), ARCH)
    state = MachineState(ARCH) if n is None else BatchState(ARCH, n, [1 << 16], None)
    rng = np.random.default_rng(7)
    form = conv_int64 if ins.opcode == Opcode.CONV else matmul_int64
    for run in range(2):
        samples = []
        for k in range(1 if n is None else n):
            sram = rng.integers(0, 256, ARCH.onchip.sram_bytes, dtype=np.uint8)
            if run == 1 and k == 0:  # extremes: the exactness bounds' worst case
                sram[:400_000] = rng.choice(np.array([0x7F, 0x80], np.uint8), 400_000)
            acc = rng.integers(0, 256, 4 * ACC_ENTRIES, dtype=np.uint8)
            samples.append((sram, acc))
            if n is None:
                state.sram[:], state.acc_bytes[:] = sram, acc
            else:
                state.sram[k], state.acc_bytes[k] = sram, acc
        run_functional(prep, state)
        for k, (sram, acc) in enumerate(samples):
            got = state.acc_bytes if n is None else state.acc_bytes[k]
            assert np.array_equal(got, form(sram, acc, f)), (run, k)


@pytest.mark.parametrize("dataflow", ["WEIGHT_STATIONARY", "OUTPUT_STATIONARY"])
@pytest.mark.parametrize("kw,field", [
    (dict(op=Opcode.CONV, in_h=6, in_w=6, cin=7, cout=9, kh=3, kw=3, out_h=4, out_w=4),
     "w_type"),
    (dict(op=Opcode.MATMUL, m=5, n=9, k=63), "b_type")])
def test_int4_weights_read_half_the_bytes(dataflow: str, kw: dict, field: str) -> None:
    """docs/isa.md's operand path: the weight reads are the bytes as stored, ceil(K*N/2) for
    int4; MACs and the operand-buffer (unpacked) bytes are those of int8 weights."""
    from dataclasses import replace

    from tessel.arch.types import Dataflow
    from tessel.isa.costs import instruction_cost

    arch = replace(ARCH, matrix=replace(ARCH.matrix, dataflow=Dataflow[dataflow]))
    k_n = 567  # K*N of both, odd: the last byte holds one weight
    e8 = instruction_cost(_big_instruction(kw), arch).events
    e4 = instruction_cost(_big_instruction({**kw, field: WeightType.I4}), arch).events
    assert k_n <= arch.matrix.weight_buffer_bytes // 2  # read once either way
    assert e8.sram_read_bytes - e4.sram_read_bytes == k_n - (k_n + 1) // 2
    assert (e4.macs, e4.operand_bytes) == (e8.macs, e8.operand_bytes)


@pytest.mark.parametrize("engine", [Engine.MATRIX, Engine.VECTOR])
def test_int4_depthwise_weights_read_half_the_bytes(engine: Engine) -> None:
    """DWCONV on either engine: the weight bytes read halve with int4 (the array's weight
    path reads ``ceil(K*N/2)``; the vector engine reads one input byte and half a weight
    byte per MAC)."""
    from tessel.isa.costs import instruction_cost

    kw = dict(in_addr=0, in_h=6, in_w=6, in_stride_h=6 * 7, in_stride_w=7, ch=7, kh=3, kw=3,
              out_h=4, out_w=4, w_addr=4000, w_stride_k=7, acc_addr=0, acc_stride=7)
    e8 = instruction_cost(Instruction.make(Opcode.DWCONV, **kw), ARCH, engine).events
    e4 = instruction_cost(Instruction.make(Opcode.DWCONV, w_type=WeightType.I4, **kw), ARCH,
                          engine).events
    weights = 3 * 3 * 7 if engine == Engine.MATRIX else 4 * 4 * 7 * 3 * 3  # read once / per MAC
    assert e8.sram_read_bytes - e4.sram_read_bytes == weights - (weights + 1) // 2
    assert e4.macs == e8.macs


def test_the_int4_decoder_bounds_a_tile_and_costs_energy() -> None:
    """docs/isa.md: an int4 tile takes at least ceil(unpacked / int4_decode_per_cycle) cycles
    and counts one unpacked weight per weight read; an NPU without the decoder refuses it."""
    from dataclasses import replace

    from tessel.isa.costs import instruction_cost

    kw = dict(op=Opcode.MATMUL, m=2, n=64, k=64, b_type=WeightType.I4)  # little to stream
    slow = replace(ARCH, matrix=replace(ARCH.matrix, int4_decode_per_cycle=3))
    fast = instruction_cost(_big_instruction(kw), ARCH)
    cost = instruction_cost(_big_instruction(kw), slow)
    assert cost.events.int4_unpacked == fast.events.int4_unpacked == 64 * 64
    assert cost.cycles == -(-64 * 64 // 3) > fast.cycles
    assert instruction_cost(_big_instruction({**kw, "b_type": WeightType.I8}),
                            ARCH).events.int4_unpacked == 0
    none = replace(ARCH, matrix=replace(ARCH.matrix, int4_weights=False))
    with pytest.raises(ValueError, match="without the int4 decoder"):
        instruction_cost(_big_instruction(kw), none)
