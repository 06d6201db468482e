"""int16 activations on the matrix engine (docs/isa.md, "The wide accumulator"): CONV and MATMUL
with ``in_type`` I16 into wide entries, REQUANT with ``acc_width`` WIDE. The simulator equals a
plain-integer reference (Python ints, no numpy arithmetic) and the C NPU model bit for bit,
traps alike on the rules, and its cost is the int8 tile's times ``matrix.int16_pass_factor``."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessel.arch import load_preset
from tessel.binary import TslProgram
from tessel.isa import Engine, Instruction, Opcode, encode_stream
from tessel.isa.codec import decode, encode
from tessel.isa.cost_rules import gemm_cycles
from tessel.isa.costs import instruction_cost
from tessel.isa.fields import AccWidth, InType
from tessel.isa.footprint import static_error
from tessel.isa.instrs.matrix import WeightType
from tessel.ops import intops
from tessel.runtime import cengine
from tessel.sim.functional import run_functional
from tessel.sim.instr import wide
from tessel.sim.prepare import prepare
from tessel.sim.state import MachineState

ARCH = load_preset("tnpu-s")
PRESETS = ("tnpu-s", "tnpu-xs", "u55-256")
END = Instruction.make(Opcode.END)
W_ADDR, P_ADDR, D_ADDR = 1 << 15, 5 << 14, 6 << 14  # within the smallest presets' 128 KiB


# ---- plain-integer references -------------------------------------------------------------------
def wrap48(v: int) -> int:
    return (v + (1 << 47)) % (1 << 48) - (1 << 47)


def rd(mem: bytes, addr: int, n: int) -> int:
    return int.from_bytes(mem[addr:addr + n], "little", signed=True)


def wt(mem: bytes, base: int, off: int, i4: bool) -> int:
    if not i4:
        return rd(mem, base + off, 1)
    n = 2 * base + off
    v = (mem[n >> 1] >> (4 * (n & 1))) & 0xF
    return v - 16 if v >= 8 else v


def conv_ref(i: Instruction, sram: bytes, acc: bytearray) -> None:
    """docs/isa.md CONV with in_type I16, element by element."""
    for oy in range(i.out_h):
        for ox in range(i.out_w):
            for co in range(i.cout):
                s = 0
                for ky in range(i.kh):
                    for kx in range(i.kw):
                        iy = oy * i.stride_h - i.pad_top + ky * i.dil_h
                        ix = ox * i.stride_w - i.pad_left + kx * i.dil_w
                        if not (0 <= iy < i.in_h and 0 <= ix < i.in_w):
                            continue
                        for ci in range(i.cin):
                            x = rd(sram, i.in_addr + iy * i.in_stride_h + ix * i.in_stride_w
                                   + 2 * ci, 2)
                            k = wt(sram, i.w_addr, (ky * i.kw + kx) * i.w_stride_k
                                   + ci * i.w_stride_ci + co * i.w_stride_co, i.w_type == 1)
                            s += x * k
                        del x
                _put(acc, i.acc_addr + (oy * i.out_w + ox) * i.acc_stride + 2 * co, s, i.mode)


def matmul_ref(i: Instruction, sram: bytes, acc: bytearray) -> None:
    for r in range(i.m):
        for j in range(i.n):
            s = sum(rd(sram, i.a_addr + r * i.a_stride_m + t * i.a_stride_k, 2)
                    * wt(sram, i.b_addr, t * i.b_stride_k + j * i.b_stride_n, i.b_type == 1)
                    for t in range(i.k))
            _put(acc, i.acc_addr + r * i.acc_stride + 2 * j, s, i.mode)


def _put(acc: bytearray, entry: int, s: int, mode: int) -> None:
    old = rd(acc, 4 * entry, 8) if mode else 0
    acc[4 * entry:4 * entry + 8] = wrap48(old + s).to_bytes(8, "little", signed=True)


def requant_ref(i: Instruction, sram: bytearray, acc: bytes) -> None:
    """docs/isa.md REQUANT WIDE and docs/numerics.md's wide rule, in Python ints."""
    p_n = i.ch if i.param_mode == 0 else 1
    w = i.out_dtype.nbytes
    for r in range(i.rows):
        for c in range(i.ch):
            p = c if i.param_mode == 0 else 0
            bias = rd(sram, i.param_addr + 8 * p, 8)
            q31 = rd(sram, i.param_addr + 8 * p_n + 4 * p, 4)
            shift = rd(sram, i.param_addr + 12 * p_n + 4 * p, 4)
            x = wrap48(rd(acc, 4 * (i.src_addr + r * i.src_stride + 2 * c), 8))
            v = min(max(x + bias, -(1 << 47)), (1 << 47) - 1)
            q15 = (q31 + (1 << 15)) >> 16 if q31 < 0x7FFF0000 else 0x7FFF
            s = 15 - shift
            t = min(max((v * q15 + (1 << (s - 1))) >> s, -(1 << 31)), (1 << 31) - 1)
            y = min(max(t + i.out_zp, i.act_min), i.act_max)
            at = i.dst_addr + r * i.dst_stride + c * w
            sram[at:at + w] = y.to_bytes(w, "little", signed=True)


# ---- running one queue on the simulator and on the C model --------------------------------------
def run_sim(arch, ins: list[Instruction], engine: Engine, sram: np.ndarray, acc: np.ndarray
            ) -> MachineState:
    queues = {e: ((*ins, END) if e is engine else (END,)) for e in Engine}
    state = MachineState(arch)
    state.sram[:] = sram
    state.acc_bytes[:] = acc
    run_functional(prepare(TslProgram(arch.arch_hash_bytes, queues, b"", 0, 0, (), ()), arch),
                   state)
    return state


def run_c(arch, ins: list[Instruction], engine: Engine, sram: np.ndarray, acc: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    s, a = sram.copy(), acc.copy()
    lut = np.zeros(2 * arch.onchip.lut_entries, np.uint8)
    code, index, why = cengine.run_queue(arch, int(engine), encode_stream(ins), len(ins), s, a,
                                         lut, np.zeros(1 << 12, np.uint8))
    assert code == 0, (index, why)
    return s, a


needs_c = pytest.mark.skipif(cengine.available() is not None, reason=str(cengine.available()))


def _memories(arch, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """SRAM and accumulator bytes, random (every byte: stale entries are part of ACCUMULATE)."""
    sram = rng.integers(0, 256, arch.onchip.sram_bytes, dtype=np.uint8)
    acc = rng.integers(0, 256, 4 * arch.derived.acc_entries, dtype=np.uint8)
    return sram, acc


def _extreme_i16(rng: np.random.Generator, n: int) -> np.ndarray:
    """int16 values, a third of them at the type's ends (sums far past int32)."""
    v = rng.integers(-32768, 32768, n)
    ends = rng.random(n) < 1 / 3
    return np.where(ends, rng.choice([-32768, 32767], n), v).astype("<i2")


def conv_case(rng: np.random.Generator, *, h: int, w: int, cin: int, cout: int, k: int,
              stride: int, pad: int, w_type: WeightType, mode: int, arch=ARCH
              ) -> tuple[Instruction, np.ndarray, np.ndarray]:
    """A CONV in_type I16 over a dense HWC int16 input at 0 and dense HWIO weights."""
    sram, acc = _memories(arch, rng)
    x = _extreme_i16(rng, h * w * cin)
    sram[:x.nbytes] = x.view(np.uint8)
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    per = w_type.per_byte
    ins = Instruction.make(
        Opcode.CONV, in_addr=0, in_h=h, in_w=w, in_stride_h=2 * w * cin, in_stride_w=2 * cin,
        cin=cin, kh=k, kw=k, stride_h=stride, stride_w=stride, pad_top=pad, pad_left=pad,
        out_h=oh, out_w=ow, cout=cout, w_addr=W_ADDR, w_stride_k=cin * cout,
        w_stride_ci=cout, w_stride_co=1, acc_addr=2 * int(rng.integers(0, 8)),
        acc_stride=2 * cout + 2 * int(rng.integers(0, 3)), mode=mode, w_type=w_type,
        in_type=InType.I16)
    nbytes = -(-k * k * cin * cout // per)
    wt_bytes = rng.integers(0, 256, nbytes, dtype=np.uint8)
    if per == 1:
        wt_bytes[rng.random(nbytes) < 0.3] = 0x80  # -128: the weights' end
    sram[W_ADDR:W_ADDR + nbytes] = wt_bytes
    return ins, sram, acc


CONV_SHAPES = [  # (h, w, cin, cout, k, stride, pad)
    (1, 1, 1, 1, 1, 1, 0),
    (4, 5, 3, 7, 1, 1, 0),  # 1x1, odd sizes
    (5, 6, 7, 9, 3, 1, 1),  # 3x3 same
    (7, 5, 5, 6, 3, 2, 1),  # 3x3 strided
    (3, 3, 600, 3, 3, 1, 0),  # K = 5400: sums far past int32
]


@pytest.mark.parametrize("shape", CONV_SHAPES)
@pytest.mark.parametrize("w_type", [WeightType.I8, WeightType.I4])
def test_conv_int16_equals_the_integer_reference(shape, w_type):
    rng = np.random.default_rng(hash((shape, int(w_type))) % 2**32)
    h, w, cin, cout, k, stride, pad = shape
    for mode in (0, 1):
        ins, sram, acc = conv_case(rng, h=h, w=w, cin=cin, cout=cout, k=k, stride=stride,
                                   pad=pad, w_type=w_type, mode=mode)
        want = bytearray(acc.tobytes())
        conv_ref(ins, sram.tobytes(), want)
        got = run_sim(ARCH, [ins], Engine.MATRIX, sram, acc).acc_bytes
        assert got.tobytes() == bytes(want), (shape, w_type, mode)


def test_conv_and_matmul_equal_the_golden_intops():
    """The simulator's wide CONV / MATMUL equal tessel.ops.intops (the golden model's MACs)."""
    rng = np.random.default_rng(11)
    h, w, cin, cout = 6, 5, 9, 4
    ins, sram, acc = conv_case(rng, h=h, w=w, cin=cin, cout=cout, k=3, stride=2, pad=1,
                               w_type=WeightType.I8, mode=0)
    x = sram[:2 * h * w * cin].view("<i2").reshape(1, h, w, cin).astype(np.int16)
    wt8 = sram[W_ADDR:W_ADDR + 9 * cin * cout].view(np.int8).reshape(3, 3, cin, cout)
    want = intops.conv_acc(x, wt8, 0, stride=(2, 2), dilation=(1, 1), pad=(1, 1, 1, 1),
                           out_hw=(ins.out_h, ins.out_w))[0]
    got = run_sim(ARCH, [ins], Engine.MATRIX, sram, acc).acc_bytes.view("<i8")
    r, c = np.ix_(np.arange(ins.out_h * ins.out_w), np.arange(cout))
    assert np.array_equal(got[(ins.acc_addr + r * ins.acc_stride) // 2 + c],
                          want.reshape(-1, cout))
    a = _extreme_i16(rng, 5 * 300).reshape(5, 300)
    b = rng.integers(-128, 128, (300, 7)).astype(np.int8)
    sram[:a.nbytes] = a.view(np.uint8).reshape(-1)
    sram[W_ADDR:W_ADDR + b.size] = b.view(np.uint8).reshape(-1)
    mm = Instruction.make(Opcode.MATMUL, m=5, n=7, k=300, a_addr=0, a_stride_m=600,
                          a_stride_k=2, b_addr=W_ADDR, b_stride_k=7, acc_addr=0, acc_stride=14,
                          in_type=InType.I16)
    got = run_sim(ARCH, [mm], Engine.MATRIX, sram, acc).acc_bytes[:8 * 35].view("<i8")
    assert np.array_equal(got.reshape(5, 7), intops.matmul_acc(a.astype(np.int16), b))


def test_requant_wide_equals_the_golden_requantisation():
    """REQUANT WIDE equals tessel.ops.intops.requant(wide=True) (bias within 48 bits)."""
    rng = np.random.default_rng(12)
    ins, sram, acc = requant_case(rng, 6, 10, 1, True)
    p = P_ADDR
    sram[p:p + 80] = rng.integers(-(1 << 45), 1 << 45, 10).astype("<i8").view(np.uint8)
    got = run_sim(ARCH, [ins], Engine.VECTOR, sram, acc).sram
    bias = sram[p:p + 80].view("<i8")
    q31, shift = sram[p + 80:p + 120].view("<i4"), sram[p + 120:p + 160].view("<i4")
    x = acc.view("<i8")[:6 * 20].reshape(6, 20)[:, :10]  # src_stride 4 * ch entries
    x = wide.wrap48(x)
    want = intops.requant(x, bias, q31, shift, ins.out_zp, ins.act_min, ins.act_max, np.int16,
                          wide=True)
    y = np.stack([got[D_ADDR + r * 30:D_ADDR + r * 30 + 20].view("<i2") for r in range(6)])
    assert np.array_equal(y, want)


def test_large_k_overflows_int32_and_wraps_at_48_bits():
    """A reduction of 2^16 extreme products passes 2^31 by far; the entry holds the exact sum
    (below 2^47), its upper 16 bits the sign."""
    k = 65535
    sram, acc = np.zeros(ARCH.onchip.sram_bytes, np.uint8), np.zeros(
        4 * ARCH.derived.acc_entries, np.uint8)
    sram[1 << 17:(1 << 17) + 2 * k] = np.full(k, -32768, "<i2").view(np.uint8)
    sram[:k] = np.full(k, -128, np.int8).view(np.uint8)
    ins = Instruction.make(Opcode.MATMUL, m=1, n=1, k=k, a_addr=1 << 17, a_stride_m=0,
                           a_stride_k=2, b_addr=0, b_stride_k=1, b_stride_n=1, acc_addr=0, acc_stride=2,
                           in_type=InType.I16)
    got = run_sim(ARCH, [ins], Engine.MATRIX, sram, acc).acc_bytes[:8].view("<i8")[0]
    assert got == k * 32768 * 128 > 2**31
    # ACCUMULATE onto an entry near 2^47 passes it and wraps
    acc[:8] = np.array([(1 << 47) - 1000], "<i8").view(np.uint8)
    got = run_sim(ARCH, [ins.replace(mode=1)], Engine.MATRIX, sram, acc).acc_bytes[:8]
    assert got.view("<i8")[0] == wrap48((1 << 47) - 1000 + k * 32768 * 128) < 0


@pytest.mark.parametrize("b_type", [WeightType.I8, WeightType.I4])
def test_matmul_int16_equals_the_integer_reference(b_type):
    rng = np.random.default_rng(int(b_type) + 7)
    for m, n, k, mode in ((1, 1, 1, 0), (5, 7, 33, 0), (3, 19, 130, 1), (17, 3, 9, 1)):
        sram, acc = _memories(ARCH, rng)
        a = _extreme_i16(rng, m * k)
        sram[:a.nbytes] = a.view(np.uint8)
        # A transposed (k-major) and B with strided columns: strides in bytes / nibbles
        ins = Instruction.make(
            Opcode.MATMUL, m=m, n=n, k=k, a_addr=0, a_stride_m=2, a_stride_k=2 * m,
            b_addr=W_ADDR, b_stride_k=1, b_stride_n=k, acc_addr=4, acc_stride=2 * n + 2,
            mode=mode, b_type=b_type, in_type=InType.I16)
        want = bytearray(acc.tobytes())
        matmul_ref(ins, sram.tobytes(), want)
        got = run_sim(ARCH, [ins], Engine.MATRIX, sram, acc).acc_bytes
        assert got.tobytes() == bytes(want), (m, n, k, mode)


def requant_case(rng: np.random.Generator, rows: int, ch: int, out_dtype: int, per_channel: bool,
                 arch=ARCH) -> tuple[Instruction, np.ndarray, np.ndarray]:
    """A REQUANT WIDE over wide entries near the 48-bit ends and parameters over their range."""
    sram, acc = _memories(arch, rng)
    p = ch if per_channel else 1
    vals = rng.integers(-(1 << 47), 1 << 47, rows * 2 * ch, dtype=np.int64)
    vals[rng.random(vals.size) < 0.5] >>= 20  # half of them in the requantised range
    acc[:8 * vals.size] = vals.astype("<i8").view(np.uint8)
    bias = rng.integers(-(1 << 40), 1 << 40, p).astype("<i8")
    bias[0] = np.int64(-(1 << 62))  # beyond sat48 on its own
    q31 = rng.integers(1 << 30, 1 << 31, p).astype("<i4")
    q31[-1] = 0x7FFFFFFF  # reduces to 0x7FFF
    shift = rng.integers(-31, 15, p).astype("<i4")
    raw = np.concatenate([bias.view(np.uint8), q31.view(np.uint8), shift.view(np.uint8)])
    sram[P_ADDR:P_ADDR + raw.size] = raw
    dt = [np.int8, np.int16][out_dtype]
    lo, hi = int(np.iinfo(dt).min), int(np.iinfo(dt).max)
    ins = Instruction.make(
        Opcode.REQUANT, src=0, src_addr=0, src_stride=4 * ch, rows=rows, ch=ch,
        out_dtype=out_dtype, dst_addr=D_ADDR, dst_stride=3 * ch, param_addr=P_ADDR,
        param_mode=0 if per_channel else 1, out_zp=int(rng.integers(-5, 5)) if out_dtype == 0
        else 0, act_min=lo + 3, act_max=hi, acc_width=AccWidth.WIDE)
    return ins, sram, acc


@pytest.mark.parametrize("out_dtype", [0, 1])
@pytest.mark.parametrize("per_channel", [True, False])
def test_requant_wide_equals_the_integer_reference(out_dtype, per_channel):
    rng = np.random.default_rng(10 * out_dtype + per_channel)
    for rows, ch in ((1, 1), (3, 5), (7, 33)):
        ins, sram, acc = requant_case(rng, rows, ch, out_dtype, per_channel)
        want = bytearray(sram.tobytes())
        requant_ref(ins, want, acc.tobytes())
        got = run_sim(ARCH, [ins], Engine.VECTOR, sram, acc).sram
        assert got.tobytes() == bytes(want), (rows, ch)


def test_requant_wide_traps_on_a_shift_beyond_14():
    rng = np.random.default_rng(3)
    ins, sram, acc = requant_case(rng, 2, 3, 0, True)
    sram[P_ADDR + 12 * 3:P_ADDR + 16 * 3] = np.array([0, 15, 0], "<i4").view(np.uint8)
    from tessel.errors import TesselSimError

    with pytest.raises(TesselSimError, match=r"shift 15"):
        run_sim(ARCH, [ins], Engine.VECTOR, sram, acc)


@pytest.mark.parametrize(("ins", "why"), [
    (dict(in_zp=3), "in_zp 0"),
    (dict(acc_addr=1), "even"),
    (dict(acc_stride=3), "acc_stride 3 < 2 \\* cout 2"),
    (dict(w_type=WeightType.I8_2_4, cin=4), "dense weights"),
])
def test_the_int16_rules_name_the_field(ins, why):
    base = dict(in_addr=0, in_h=2, in_w=2, in_stride_h=8, in_stride_w=4, cin=2, out_h=2,
                out_w=2, cout=2, w_addr=W_ADDR, w_stride_k=4, w_stride_ci=2, w_stride_co=1,
                acc_addr=0, acc_stride=4, in_type=InType.I16)
    arch = ARCH.with_param("sparse.enabled", True)
    err = static_error(Instruction.make(Opcode.CONV, **{**base, **ins}), arch)
    assert err is not None and re.search(why, err), err


def test_requant_wide_rules():
    base = dict(src=0, src_addr=0, src_stride=4, rows=1, ch=2, out_dtype=0, dst_addr=D_ADDR,
                dst_stride=2, param_addr=P_ADDR, act_min=-128, act_max=127,
                acc_width=AccWidth.WIDE)
    assert static_error(Instruction.make(Opcode.REQUANT, **base), ARCH) is None
    for change, why in ((dict(src_addr=1), "even"), (dict(src=1), "src ACC"),
                        (dict(out_dtype=2, act_min=0, act_max=0), "I8 or I16")):
        err = static_error(Instruction.make(Opcode.REQUANT, **{**base, **change}), ARCH)
        assert err is not None and why in err, (change, err)


# ---- cost ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("preset", PRESETS)
def test_an_int16_pass_costs_the_factor_times_the_int8_compute(preset):
    """Same compute-bound tile (one fold of R x C weights, 256 rows streamed), int8 vs int16
    input: the cycles are the GEMM's, times int16_pass_factor for int16; MACs equal, input
    bytes and accumulator entries double."""
    arch = load_preset(preset)
    mx = arch.matrix
    assert mx.int16_pass_factor == 2
    r, c, m = mx.rows, mx.cols, 256
    i8 = Instruction.make(Opcode.MATMUL, m=m, n=c, k=r, a_addr=0, a_stride_m=r,
                          b_addr=W_ADDR, b_stride_k=c, acc_addr=0, acc_stride=2 * c)
    i16 = i8.replace(in_type=InType.I16, a_stride_m=2 * r, a_stride_k=2)
    c8, c16 = instruction_cost(i8, arch), instruction_cost(i16, arch)
    g = gemm_cycles(m, c, r, r, c, mx.dataflow, mx.fold_pipelining)
    assert (c8.cycles, c16.cycles) == (g, 2 * g)
    assert c16.events.macs == c8.events.macs == m * c * r
    assert c16.events.acc_writes == 2 * c8.events.acc_writes
    assert c16.events.sram_read_bytes - c8.events.sram_read_bytes == m * r


def test_the_factor_is_a_cost_parameter():
    i16 = Instruction.make(Opcode.MATMUL, m=256, n=16, k=16, a_addr=0, a_stride_m=32,
                           a_stride_k=2, b_addr=W_ADDR, b_stride_k=16, acc_addr=0,
                           acc_stride=32, in_type=InType.I16)
    c2 = instruction_cost(i16, ARCH).cycles
    c1 = instruction_cost(i16, ARCH.with_param("matrix.int16_pass_factor", 1)).cycles
    c4 = instruction_cost(i16, ARCH.with_param("matrix.int16_pass_factor", 4)).cycles
    assert c1 < c2 < c4


# ---- encoding -----------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.sampled_from([0, 1]), st.sampled_from([0, 1]), st.integers(0, 1000))
def test_the_new_fields_round_trip(in_type, acc_width, addr):
    conv = Instruction.make(Opcode.CONV, in_addr=addr, cin=3, cout=5, w_addr=0,
                            acc_addr=2 * addr, acc_stride=10, in_type=in_type)
    mm = Instruction.make(Opcode.MATMUL, a_addr=addr, b_addr=0, acc_addr=2 * addr,
                          acc_stride=2, in_type=in_type)
    rq = Instruction.make(Opcode.REQUANT, src=0, src_addr=2 * addr, out_dtype=0, dst_addr=0,
                          param_addr=addr, act_min=-128, act_max=127, acc_width=acc_width)
    for ins in (conv, mm, rq):
        assert decode(encode(ins))[0] == ins


def test_an_int8_instruction_encodes_as_before_the_fields():
    """The new fields sit in bits that were padding: an int8 instruction's bytes have them 0."""
    conv = Instruction.make(Opcode.CONV, in_addr=0, cin=3, cout=5, w_addr=0, acc_addr=0,
                            acc_stride=5)
    raw = encode(conv)
    bit = 365  # in_type: after w_type (bits 363-364)
    assert (raw[bit // 8] >> (bit % 8)) & 1 == 0
    wide = encode(conv.replace(in_type=1))
    assert decode(wide)[0].in_type == 1
    assert int.from_bytes(wide, "little") == int.from_bytes(raw, "little") | (1 << bit)


# ---- the C NPU model ----------------------------------------------------------------------------
@needs_c
@pytest.mark.parametrize("preset", PRESETS)
def test_c_model_equals_the_simulator(preset):
    arch = load_preset(preset)
    rng = np.random.default_rng(len(preset))
    for shape in CONV_SHAPES[1:4]:
        h, w, cin, cout, k, stride, pad = shape
        for w_type in (WeightType.I8, WeightType.I4):
            ins, sram, acc = conv_case(rng, h=h, w=w, cin=cin, cout=cout, k=k, stride=stride,
                                       pad=pad, w_type=w_type, mode=int(rng.integers(0, 2)),
                                       arch=arch)
            _, c_acc = run_c(arch, [ins], Engine.MATRIX, sram, acc)
            assert np.array_equal(c_acc, run_sim(arch, [ins], Engine.MATRIX, sram, acc).acc_bytes)
    for out_dtype in (0, 1):
        ins, sram, acc = requant_case(rng, 4, 6, out_dtype, bool(out_dtype), arch=arch)
        c_sram, _ = run_c(arch, [ins], Engine.VECTOR, sram, acc)
        assert np.array_equal(c_sram, run_sim(arch, [ins], Engine.VECTOR, sram, acc).sram)


@needs_c
def test_c_model_matmul_and_its_traps():
    rng = np.random.default_rng(5)
    sram, acc = _memories(ARCH, rng)
    ins = Instruction.make(Opcode.MATMUL, m=3, n=5, k=700, a_addr=0, a_stride_m=1400,
                           a_stride_k=2, b_addr=W_ADDR, b_stride_k=5, acc_addr=2,
                           acc_stride=12, mode=1, in_type=InType.I16)
    _, c_acc = run_c(ARCH, [ins], Engine.MATRIX, sram, acc)
    assert np.array_equal(c_acc, run_sim(ARCH, [ins], Engine.MATRIX, sram, acc).acc_bytes)
    lut = np.zeros(2 * ARCH.onchip.lut_entries, np.uint8)
    for bad in (ins.replace(a_zp=1), ins.replace(acc_addr=3), ins.replace(acc_stride=9)):
        code, _, why = cengine.run_queue(ARCH, int(Engine.MATRIX), encode_stream([bad]), 1,
                                         sram.copy(), acc.copy(), lut,
                                         np.zeros(1 << 12, np.uint8))
        assert code != 0 and why, bad


def test_a_batch_runs_each_sample_as_alone():
    """BatchState: the wide CONV then REQUANT on three samples' memories equal three single
    runs."""
    from tessel.sim.state import BatchState

    rng = np.random.default_rng(21)
    conv, sram0, _ = conv_case(rng, h=5, w=4, cin=6, cout=5, k=3, stride=1, pad=1,
                               w_type=WeightType.I8, mode=0)
    rq, sram1, _ = requant_case(rng, 20, 5, 0, True)
    rq = rq.replace(src_addr=conv.acc_addr, src_stride=conv.acc_stride)
    samples = []
    for _ in range(3):
        s, a = _memories(ARCH, rng)
        s[W_ADDR:P_ADDR] = sram0[W_ADDR:P_ADDR]  # the weights and parameters alike, the rest
        s[P_ADDR:P_ADDR + 80] = sram1[P_ADDR:P_ADDR + 80]  # each sample's own
        samples.append((s, a))
    batch = BatchState(ARCH, 3, [m.size_bytes for m in ARCH.offchip])
    for k, (s, a) in enumerate(samples):
        batch.sram[k], batch.acc_bytes[k] = s, a
    for ins, eng in ((conv, Engine.MATRIX), (rq, Engine.VECTOR)):
        q = {e: ((ins, END) if e is eng else (END,)) for e in Engine}
        run_functional(prepare(TslProgram(ARCH.arch_hash_bytes, q, b"", 0, 0, (), ()), ARCH),
                       batch)
    for k, (s, a) in enumerate(samples):
        one = run_sim(ARCH, [conv], Engine.MATRIX, s, a)
        one = run_sim(ARCH, [rq], Engine.VECTOR, one.sram, one.acc_bytes)
        assert np.array_equal(batch.acc_bytes[k], one.acc_bytes), k
        assert np.array_equal(batch.sram[k], one.sram), k
