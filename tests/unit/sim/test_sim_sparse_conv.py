"""CONV with 2:4 sparse weights (w_type I8_2_4 / I4_2_4) in the simulator: the accumulator of
the dense CONV on the same weights (one sample and a batch), indices that are not increasing
trap, MATMUL / DWCONV refuse the sparse types, a target without sparsity refuses them; the
cost: half the reduction on the array, the values and indices read."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simkit import ARCH, I, acc_read, program, run_raw

from tessel.errors import TesselSimError
from tessel.isa import Engine, Opcode
from tessel.isa.costs import instruction_cost
from tessel.isa.events import energy_breakdown_pj
from tessel.isa.footprint import static_error
from tessel.isa.instrs.matrix import WeightType
from tessel.isa.sparse24 import decode, encode, index_bytes, pack_nibbles
from tessel.sim.functional import run_functional
from tessel.sim.prepare import prepare
from tessel.sim.state import BatchState

SP = ARCH.with_param("sparse.enabled", True)
M = Engine.MATRIX
KH = KW = 3
CIN, COUT, H, W = 8, 12, 6, 5
IN_ADDR, W_ADDR = 0, 4096


def _weights(rng: np.random.Generator, lo: int, hi: int) -> np.ndarray:
    """[taps, cin, cout] weights with two non-zeros (or fewer) in each group of four."""
    w = rng.integers(lo, hi + 1, (KH * KW, CIN, COUT)).astype(np.int8)
    for t in range(KH * KW):
        for g in range(CIN // 4):
            for co in range(COUT):
                drop = rng.choice(4, size=rng.integers(2, 5), replace=False)
                w[t, 4 * g + drop, co] = 0
    return w


def _conv(w_type: WeightType, **kw) -> object:
    return I(Opcode.CONV, in_addr=IN_ADDR, in_h=H, in_w=W, in_stride_h=W * CIN, in_stride_w=CIN,
             cin=CIN, in_zp=3, kh=KH, kw=KW, pad_top=1, pad_left=1, out_h=H, out_w=W,
             cout=COUT, w_addr=W_ADDR, w_stride_k=(CIN // (2 if w_type.sparse else 1)) * COUT,
             w_stride_ci=COUT, w_stride_co=1, acc_addr=0, acc_stride=COUT, w_type=w_type, **kw)


def _stored(w: np.ndarray, w_type: WeightType) -> bytes:
    """The weights as the CONV of ``w_type`` reads them from W_ADDR."""
    from tessel.ops.conv_weights import pack_int4

    if not w_type.sparse:
        return pack_int4(w.reshape(-1)) if w_type is WeightType.I4 else w.tobytes()
    values, nibbles = encode(w)
    v = pack_int4(values.reshape(-1)) if w_type.values is WeightType.I4 else values.tobytes()
    return v + pack_nibbles(nibbles)


@pytest.mark.parametrize("w_type", [WeightType.I8_2_4, WeightType.I4_2_4])
def test_sparse_conv_equals_the_dense_one(w_type: WeightType) -> None:
    rng = np.random.default_rng(int(w_type))
    lo, hi = (-7, 7) if w_type.values is WeightType.I4 else (-128, 127)
    w = _weights(rng, lo, hi)
    x = rng.integers(-128, 128, (H, W, CIN)).astype(np.int8)
    values, nibbles = encode(w)
    assert np.array_equal(decode(values, nibbles), w)
    stored = _stored(w, w_type)
    assert len(stored) == (KH * KW * CIN // 2 * COUT) // w_type.per_byte + index_bytes(
        KH * KW, CIN, COUT)
    dense_type = w_type.values
    dense = run_raw({M: [_conv(dense_type)]}, arch=SP,
                    sram=[(IN_ADDR, x), (W_ADDR, np.frombuffer(_stored(w, dense_type), np.int8))])
    sparse = run_raw({M: [_conv(w_type)]}, arch=SP,
                     sram=[(IN_ADDR, x), (W_ADDR, np.frombuffer(stored, np.int8))])
    want = acc_read(dense, 0, (H * W, COUT))
    assert np.array_equal(acc_read(sparse, 0, (H * W, COUT)), want)
    # and the formula: sum over taps and channels of (x - in_zp) * w, padding contributing 0
    xp = np.pad(x.astype(np.int64) - 3, ((1, 1), (1, 1), (0, 0)))
    ref = sum(xp[ky:ky + H, kx:kx + W] @ w[ky * KW + kx].astype(np.int64)
              for ky in range(KH) for kx in range(KW))
    assert np.array_equal(want, ref.reshape(H * W, COUT))


def test_a_batch_of_sparse_convs() -> None:
    rng = np.random.default_rng(7)
    w = _weights(rng, -128, 127)
    xs = rng.integers(-128, 128, (3, H, W, CIN)).astype(np.int8)
    prep = prepare(program({M: [_conv(WeightType.I8_2_4)]}, SP), SP)
    state = BatchState(SP, 3, [0], None)
    stored = np.frombuffer(_stored(w, WeightType.I8_2_4), np.uint8)
    state.sram[:, W_ADDR:W_ADDR + stored.size] = stored
    state.sram[:, IN_ADDR:IN_ADDR + xs[0].size] = xs.reshape(3, -1).view(np.uint8)
    run_functional(prep, state)
    for s in range(3):
        one = run_raw({M: [_conv(WeightType.I8_2_4)]}, arch=SP,
                      sram=[(IN_ADDR, xs[s]), (W_ADDR, stored.view(np.int8))])
        got = state.acc_bytes[s].view("<i4")[:H * W * COUT]
        assert np.array_equal(got, acc_read(one, 0, (H * W * COUT,)))


def test_indices_not_increasing_trap() -> None:
    rng = np.random.default_rng(1)
    stored = bytearray(_stored(_weights(rng, -128, 127), WeightType.I8_2_4))
    stored[-1] = 0x55  # the last two groups: indices 1, 1
    with pytest.raises(TesselSimError, match="2:4 indices"):
        run_raw({M: [_conv(WeightType.I8_2_4)]}, arch=SP,
                sram=[(W_ADDR, np.frombuffer(bytes(stored), np.int8))])


def test_static_rules() -> None:
    assert static_error(_conv(WeightType.I8_2_4), SP) is None
    odd = _conv(WeightType.I8_2_4).replace(cin=6, in_stride_h=6 * W, in_stride_w=6)
    assert "multiple of 4" in static_error(odd, SP)
    assert "w_zp 0" in static_error(_conv(WeightType.I8_2_4, w_zp=1), SP)
    mm = I(Opcode.MATMUL, m=1, n=4, k=8, a_addr=0, a_stride_m=8, b_addr=64, b_stride_k=4,
           acc_addr=0, acc_stride=4, b_type=WeightType.I8_2_4)
    assert "dense weights only" in static_error(mm, SP)
    assert "sparse.enabled" in static_error(_conv(WeightType.I8_2_4), ARCH)
    assert static_error(_conv(WeightType.I8), ARCH) is None


def test_a_target_without_sparsity_traps() -> None:
    with pytest.raises(TesselSimError, match="sparse.enabled"):
        run_raw({M: [_conv(WeightType.I8_2_4)]}, arch=ARCH)


@pytest.mark.parametrize("w_type", [WeightType.I8_2_4, WeightType.I4_2_4])
def test_cost_runs_half_the_reduction(w_type: WeightType) -> None:
    dense, sparse = instruction_cost(_conv(w_type.values), SP), instruction_cost(_conv(w_type), SP)
    k = KH * KW * CIN
    assert sparse.events.macs * 2 == dense.events.macs == H * W * COUT * k
    assert sparse.events.sparse_indices == k // 4 * COUT  # weight-stationary: read once
    assert dense.events.sparse_indices == 0
    assert sparse.cycles < dense.cycles
    pj = energy_breakdown_pj(sparse.events, SP)["sparse_index"]
    assert pj == k // 4 * COUT * SP.sparse.index_decode_pj
    # a big reduction on the array: the folds over K halve
    big = dict(cin=256, in_stride_h=W * 256, in_stride_w=256, cout=64, acc_stride=64)
    d = instruction_cost(_conv(w_type.values).replace(**big), SP)
    s = instruction_cost(_conv(w_type).replace(**big), SP)
    assert s.cycles < 0.6 * d.cycles


# ---- any layout of the values: docs/isa.md's wt() in plain integers ---------------------------
def _doc_weight(sram: bytes, f: dict, t: int, ci: int, co: int) -> int:
    """docs/isa.md, CONV with 2:4 sparse weights: the weight (t, ci, co) from the values and
    the index nibble after the values' box (written independently of tessel.isa.sparse24)."""
    int4 = f["w_type"] == WeightType.I4_2_4
    per = 2 if int4 else 1
    taps, half = f["kh"] * f["kw"], f["cin"] // 2
    offs = [t_ * f["w_stride_k"] + r * f["w_stride_ci"] + c * f["w_stride_co"]
            for t_ in range(taps) for r in range(half) for c in range(f["cout"])]
    hi = per * f["w_addr"] + max(offs) + 1  # elements, exclusive
    meta = 2 * (-(-hi // per)) + (t * (f["cin"] // 4) + ci // 4) * f["cout"] + co
    m = (sram[meta >> 1] >> (4 * (meta & 1))) & 0xF
    i0, i1 = m & 3, m >> 2
    assert i0 < i1
    if ci % 4 not in (i0, i1):
        return 0
    r = 2 * (ci // 4) + (ci % 4 == i1)
    off = t * f["w_stride_k"] + r * f["w_stride_ci"] + co * f["w_stride_co"]
    if not int4:
        v = sram[f["w_addr"] + off]
        return v - 256 if v >= 128 else v
    n = 2 * f["w_addr"] + off
    v = (sram[n >> 1] >> (4 * (n & 1))) & 0xF
    return v - 16 if v >= 8 else v


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_any_value_layout_follows_the_doc(data) -> None:
    w_type = data.draw(st.sampled_from([WeightType.I8_2_4, WeightType.I4_2_4]))
    per = w_type.per_byte
    cin, cout = 4 * data.draw(st.integers(1, 3)), data.draw(st.integers(1, 6))
    kh, kw = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 2))
    taps, half = kh * kw, cin // 2
    order = data.draw(st.permutations(range(3)))  # which dim is innermost, ...
    dims = [taps, half, cout]
    strides, span = [0, 0, 0], 1
    for d in reversed(order):
        strides[d] = data.draw(st.sampled_from([span, span + 3, -span]))
        span = abs(strides[d]) * dims[d] + span
    lo = sum(min(0, s * (n - 1)) for s, n in zip(strides, dims, strict=True))
    base_el = 4096 * per - lo + data.draw(st.integers(0, 1))  # elements, box above byte 4096
    w_addr = base_el // per
    f = dict(kh=kh, kw=kw, cin=cin, cout=cout, w_addr=w_addr, w_stride_k=strides[0],
             w_stride_ci=strides[1], w_stride_co=strides[2], w_type=w_type)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    sram = bytearray(rng.integers(0, 256, 16384, dtype=np.uint8).tobytes())
    # valid indices for every group after the values' box
    offs = [per * w_addr + t * strides[0] + r * strides[1] + c * strides[2]
            for t in range(taps) for r in range(half) for c in range(cout)]
    meta = -(-(max(offs) + 1) // per)
    pairs = [(a, b) for a in range(4) for b in range(a + 1, 4)]
    for k in range(taps * (cin // 4) * cout):
        a, b = pairs[rng.integers(len(pairs))]
        byte, shift = meta + k // 2, 4 * (k % 2)
        sram[byte] = (sram[byte] & ~(0xF << shift) & 0xFF) | ((a | b << 2) << shift)
    x = rng.integers(-128, 128, (2, 3, cin)).astype(np.int8)
    sram[:x.size] = x.tobytes()
    conv = I(Opcode.CONV, in_addr=0, in_h=2, in_w=3, in_stride_h=3 * cin, in_stride_w=cin,
             in_zp=-5, pad_top=kh // 2, pad_left=kw // 2, out_h=2, out_w=3, acc_addr=0,
             acc_stride=cout, **f)
    state = run_raw({M: [conv]}, arch=SP, sram=[(0, np.frombuffer(bytes(sram), np.int8))])
    w = np.array([[[_doc_weight(bytes(sram), f, t, ci, co) for co in range(cout)]
                   for ci in range(cin)] for t in range(taps)], np.int64)
    xp = np.pad(x.astype(np.int64) + 5, ((kh // 2, kh), (kw // 2, kw), (0, 0)))
    want = sum(xp[ky:ky + 2, kx:kx + 3] @ w[ky * kw + kx] for ky in range(kh) for kx in range(kw))
    assert np.array_equal(acc_read(state, 0, (6, cout)), want.reshape(6, cout))
