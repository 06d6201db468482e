"""The fast path (``tessel.sim.fastpath``, what ``CompiledModel.run`` uses) equals the reference
handlers bit for bit: every instruction kind on random memories, several runs of one prepared
program (its pooled buffers and tables reused with other data), and random ELTWISE / CONV /
MATMUL / REQUANT / DMA fields, including zero points and multipliers at their extremes. Every
test runs twice: with the compiled kernels (``tessel.sim.kern_*``) and with the numpy forms
(``TESSEL_SIM_KERNELS=0``)."""

from __future__ import annotations

import numpy as np
import pytest
from simkit import ARCH, I, program
from test_sim_batch import CASES, CONV, _fill, _params

from tessel.errors import TesselSimError
from tessel.isa import DType, Engine, Opcode
from tessel.isa.fields import AccMode, EltOp, ParamMode
from tessel.sim import kern_conv
from tessel.sim.fastpath import fast_steps
from tessel.sim.functional import run_functional
from tessel.sim.prepare import prepare
from tessel.sim.state import MachineState

V, MX, DI, DO = Engine.VECTOR, Engine.MATRIX, Engine.DMA_IN, Engine.DMA_OUT


# every test both ways: the closures with the compiled kernels and without (conftest.kernels;
# `jit.enabled` is read when a program's closures are built: every test prepares its own)
pytestmark = pytest.mark.usefixtures("kernels")


def _state(seed: int, extra=()) -> MachineState:
    sram, acc, lut = _fill(seed, None)
    for addr, raw in extra:
        sram[addr:addr + len(raw)] = np.frombuffer(raw, np.uint8)
    st = MachineState(ARCH)
    for dst, src in ((st.sram, sram), (st.acc_bytes, acc), (st.lut_bytes, lut)):
        dst[:src.size] = src
    st.offchip[0][:65536] = np.random.default_rng(50 + seed).integers(0, 256, 65536,
                                                                        dtype=np.uint8)
    return st


def _same_both_ways(streams, seeds=(0, 1, 2), expect_fast: bool = True, extra=()) -> None:
    prep = prepare(program(streams), ARCH)
    if expect_fast:  # the cases below exercise closures, not the reference fallback
        assert any(s is not None for q in fast_steps(prep) for s in q)
    for seed in seeds:
        fast, ref = _state(seed, extra), _state(seed, extra)
        run_functional(prep, fast, fast=True)
        run_functional(prep, ref, fast=False)
        for name in ("sram", "acc_bytes", "lut_bytes"):
            assert np.array_equal(getattr(fast, name), getattr(ref, name)), (name, seed)
        assert np.array_equal(fast.offchip[0][:1 << 20], ref.offchip[0][:1 << 20]), seed


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_instruction_kind(case):
    _same_both_ways(CASES[case], expect_fast=False)


def _conv(**kw):
    return {MX: [I(Opcode.CONV, **{**CONV, **kw})]}


@pytest.mark.parametrize("kw", [
    {},
    {"mode": AccMode.ACCUMULATE},
    {"in_zp": -128, "w_zp": 127},  # worst-case zero points: the chunked float64 path
    {"kh": 1, "kw": 1, "pad_top": 0, "pad_left": 0, "stride_h": 1, "out_h": 7, "out_w": 6},
    {"kh": 1, "kw": 1, "pad_top": 0, "pad_left": 0, "stride_h": 2, "stride_w": 2, "out_h": 4,
     "out_w": 3},
    {"kh": 1, "kw": 1, "pad_top": 1, "pad_left": 0, "stride_h": 1, "out_h": 8, "out_w": 6},
    {"dil_h": 2, "dil_w": 2, "pad_top": 2, "pad_left": 2, "out_h": 4, "out_w": 6},
    {"cin": 8, "in_zp": 0, "w_zp": 0},
])
def test_conv(kw):
    _same_both_ways(_conv(**kw))


def test_conv_long_reduction_chunks():
    # cin 200 x 9 = 1800 products > 1023 (symmetric int8): the l1 bound or the chunks decide
    conv = dict(CONV, cin=200, in_stride_h=6 * 200, in_stride_w=200, w_addr=30_000,
                w_stride_k=200 * 9, w_stride_ci=9, in_zp=0, w_zp=0)
    _same_both_ways({MX: [I(Opcode.CONV, **conv)]})


@pytest.mark.parametrize("kw", [
    dict(m=7, n=5, k=300, a_zp=3, b_zp=0),
    dict(m=4, n=3, k=9, mode=AccMode.ACCUMULATE),
    dict(m=9, n=6, k=2000, a_zp=-128, b_zp=127),  # chunked
    dict(m=5, n=4, k=2000),
])
def test_matmul(kw):
    k, n = kw["k"], kw["n"]
    _same_both_ways({MX: [I(Opcode.MATMUL, a_addr=0, a_stride_m=k, b_addr=20_000,
                            b_stride_k=n, acc_addr=4, acc_stride=n, **kw)]})


def test_dwconv_variants():
    base = CASES["dwconv"][V][0].as_dict()
    for kw in ({}, {"kh": 1, "kw": 1, "pad_top": 0, "pad_left": 0, "out_h": 4, "out_w": 6},
               {"in_zp": 127, "mode": AccMode.ACCUMULATE},
               # 16 x 28 x 16 outputs > DW_EINSUM_MAX: the per-position loop
               {"in_h": 16, "in_w": 28, "ch": 16, "in_stride_h": 28 * 16, "in_stride_w": 16,
                "stride_h": 1, "out_h": 16, "out_w": 28, "w_stride_k": 16, "acc_addr": 0,
                "acc_stride": 16}):
        f = {k: v for k, v in {**base, **kw}.items() if k != "opcode"}
        _same_both_ways({V: [I(Opcode.DWCONV, **f)]})


def _dw(ch, in_h, in_w, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, **kw_):
    return dict(in_addr=0, in_h=in_h, in_w=in_w, in_stride_h=in_w * ch + 3, in_stride_w=ch,
                ch=ch, in_zp=-9, kh=kh, kw=kw, stride_h=sh, stride_w=sw, dil_h=dh, dil_w=dw,
                pad_top=pt, pad_left=pl, out_h=oh, out_w=ow, w_addr=40_000, w_stride_k=ch + 1,
                acc_addr=10, acc_stride=ch + 2, **kw_)


@pytest.mark.parametrize("f", [
    _dw(16, 4, 14, 3, 3, 1, 1, 1, 1, 1, 1, 4, 14),  # stride 1: one phase
    _dw(16, 5, 14, 3, 3, 2, 2, 1, 1, 1, 1, 3, 7),  # stride 2: two phases, padding both sides
    _dw(16, 5, 13, 3, 3, 2, 2, 1, 1, 0, 0, 2, 6),  # stride 2 without padding, odd width
    _dw(8, 6, 16, 3, 3, 1, 3, 1, 1, 1, 2, 6, 6),  # stride 3, pad_left 2
    _dw(8, 8, 12, 3, 3, 1, 1, 2, 2, 2, 2, 8, 12),  # dilation 2
    _dw(8, 7, 15, 3, 5, 1, 2, 2, 3, 1, 4, 5, 8),  # stride 2 and dilation 3: phases mix
    _dw(24, 3, 9, 5, 5, 1, 1, 1, 1, 2, 2, 3, 9),  # 5x5
    _dw(32, 4, 10, 3, 3, 1, 1, 1, 1, 1, 1, 4, 10, mode=AccMode.ACCUMULATE),
    _dw(16, 3, 7, 1, 1, 1, 1, 1, 1, 0, 0, 3, 7),  # 1x1
    _dw(64, 2, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2, 8),  # 64 channels, small, stride 1: wide rows
    _dw(64, 3, 9, 3, 3, 2, 2, 1, 1, 1, 1, 2, 5),  # 64 channels, small, stride 2: the einsum
    _dw(8, 9, 15, 5, 5, 2, 2, 1, 1, 2, 2, 5, 8),  # 5x5, stride 2: a 0-weighted position
    _dw(8, 5, 17, 3, 3, 1, 4, 1, 1, 1, 1, 5, 5),  # stride 4 > kw: a phase without positions
    _dw(8, 4, 12, 2, 2, 1, 2, 1, 1, 0, 0, 3, 6),  # 2x2, stride 2: one position per phase
    _dw(64, 8, 14, 3, 3, 1, 1, 1, 1, 1, 1, 8, 14),  # 64 channels, large: wide rows
])
def test_dwconv_wide_rows(f):
    """DWCONV over the phases of a strided frame (``_dw_wide``) and the einsum: every stride,
    dilation and padding of the columns, accumulate mode, equal to the reference; run twice
    with other data (the frame's border and the repeated weights are reused)."""
    _same_both_ways({V: [I(Opcode.DWCONV, **f)]}, seeds=(0, 1, 2, 3))


def test_dwconv_wide_rows_follow_new_weights():
    """The repeated weight rows are keyed by the weights' bytes: new weights, new rows."""
    f = _dw(16, 4, 14, 3, 3, 1, 1, 1, 1, 1, 1, 4, 14)
    prep = prepare(program({V: [I(Opcode.DWCONV, **f)]}), ARCH)
    for seed in range(3):
        fast, ref = _state(seed), _state(seed)
        for st in (fast, ref):
            st.sram[40_000:40_000 + 9 * 17] = np.random.default_rng(seed).integers(
                0, 256, 9 * 17, dtype=np.uint8)
        run_functional(prep, fast, fast=True)
        run_functional(prep, ref, fast=False)
        assert np.array_equal(fast.acc_bytes, ref.acc_bytes), seed


@pytest.mark.parametrize("seed", range(12))
def test_requant_random(seed):
    rng = np.random.default_rng(seed)
    dt = [DType.I8, DType.I16][seed % 2]
    lo, hi = (-128, 127) if dt == DType.I8 else (-32768, 32767)
    a, b = sorted(rng.integers(lo, hi + 1, 2))
    per_tensor = seed % 3 == 0
    rq = I(Opcode.REQUANT, src=seed % 2, src_addr=0, src_stride=64 + seed % 3, rows=5, ch=64,
           out_dtype=dt, dst_addr=8000, dst_stride=130, param_addr=2900 if per_tensor else 2000,
           param_mode=[ParamMode.PER_CHANNEL, ParamMode.PER_TENSOR][per_tensor],
           out_zp=int(rng.integers(-100, 100)), act_min=int(a), act_max=int(b))
    one = _params(rng, 1).tobytes()
    # twice: the second run of a parameter block reuses its plan
    _same_both_ways({V: [rq, rq]}, extra=[(2900, one)])


@pytest.mark.parametrize(("limit", "rows"), [(64, 5), (128, 4), (192, 6), (100_000, 6)])
def test_requant_tiled_rows(monkeypatch, limit, rows):
    """REQUANT tiles above TILE_ELEMS_MAX work in rows of ``tile_rows`` tile rows (2-D, the
    plan broadcast over them), smaller ones flattened against a whole-tile plan: both equal
    to the reference on accumulators mostly inside the unsaturated range, per channel and per
    tensor (the plan's scalars), the FLOAT form (a relu floor) and the FUSED one, from the
    accumulator (contiguous) and from strided SRAM rows."""
    from tessel.sim import fastrq

    monkeypatch.setattr(fastrq, "TILE_ELEMS_MAX", limit)
    for k in range(6):
        rng = np.random.default_rng(40 + k)
        dt, per_tensor, relu, src = DType.I8 if k % 3 else DType.I16, k % 2 == 1, k < 3, k % 2
        p, ch = (1 if per_tensor else 64), 64
        params = np.stack([rng.integers(-5000, 5000, p), rng.integers(2**30, 2**31, p),
                           -rng.integers(1, 4 if dt == DType.I16 else 9, p)]).astype(np.int32)
        zp = int(rng.integers(-100, 100))
        stride = ch if src == 0 else ch + 3
        top = 127 if dt == DType.I8 else 32767
        rq = I(Opcode.REQUANT, src=src, src_addr=0 if src == 0 else 20_000, src_stride=stride,
               rows=rows, ch=ch, out_dtype=dt, dst_addr=8000, dst_stride=130, param_addr=2000,
               param_mode=[ParamMode.PER_CHANNEL, ParamMode.PER_TENSOR][per_tensor],
               out_zp=zp, act_min=zp if relu else -100, act_max=top)
        prep = prepare(program({V: [rq, rq]}), ARCH)
        acc = rng.integers(-(1 << 14), 1 << 14, rows * stride).astype(np.int32)
        acc[rng.random(acc.size) < 0.1] = rng.integers(-(2**31), 2**31, 1)  # a few saturate
        states = []
        for fast in (True, False):
            st = _state(k)
            st.sram[2000:2000 + params.nbytes] = params.view(np.uint8).reshape(-1)
            if src == 0:
                st.acc_bytes[:acc.nbytes] = acc.view(np.uint8)
            else:
                st.sram[20_000:20_000 + acc.nbytes] = acc.view(np.uint8)
            run_functional(prep, st, fast=fast)
            states.append(st)
        assert np.array_equal(states[0].sram, states[1].sram), k


@pytest.mark.parametrize("seed", range(8))
def test_requant_float_form(seed, kernels):
    """REQUANT with relu-floor parameters (the FLOAT form: int32 clamp, float64 multiply-add)
    from contiguous and strided accumulator rows, int8 / int16, per channel / per tensor,
    accumulators of every magnitude and many inside the unsaturated range: equal to the
    reference handler (which keeps the integer forms); the form is checked to be taken."""
    from tessel.sim.fastfix import FLOAT

    rng = np.random.default_rng(300 + seed)
    dt = [DType.I8, DType.I16][seed % 2]
    zp = int(rng.integers(-100, 100))
    per_tensor = seed % 4 == 3
    p = 1 if per_tensor else 48
    params = np.stack([rng.integers(-5000, 5000, p), rng.integers(2**30, 2**31, p),
                       -rng.integers(1, 4 if dt == DType.I16 else 9, p)]).astype(np.int32)
    rows, ch, stride = 12, 48, 48 + (seed % 3) * 5  # stride > ch: not contiguous
    rq = I(Opcode.REQUANT, src=0, src_addr=0, src_stride=stride, rows=rows, ch=ch,
           out_dtype=dt, dst_addr=8000, dst_stride=130, param_addr=2000,
           param_mode=[ParamMode.PER_CHANNEL, ParamMode.PER_TENSOR][per_tensor],
           out_zp=zp, act_min=zp, act_max=127 if dt == DType.I8 else 32767)
    prep = prepare(program({V: [rq, rq]}), ARCH)
    for k in range(3):
        acc = rng.integers(-(2**31), 2**31, rows * stride + 64)
        small = rng.random(acc.size) < 0.8  # mostly near the unsaturated range
        acc[small] = rng.integers(-(1 << (12 + k * 4)), 1 << (12 + k * 4), int(small.sum()))
        states = []
        for fast in (True, False):
            st = _state(seed + k)
            st.sram[2000:2000 + params.nbytes] = params.view(np.uint8).reshape(-1)
            st.acc_bytes[:acc.size * 4] = acc.astype(np.int32).view(np.uint8)
            run_functional(prep, st, fast=fast)
            states.append(st)
        assert np.array_equal(states[0].sram, states[1].sram), k
    if not kernels:  # the kernel has no plan forms
        assert [plan[0] for plan in prep.cache["requant_plans"].values()] == [FLOAT]


def test_requant_bad_parameters_trap_like_the_reference():
    rq = I(Opcode.REQUANT, src=0, src_addr=0, src_stride=64, rows=1, ch=64, out_dtype=DType.I8,
           dst_addr=8000, dst_stride=64, param_addr=2000, param_mode=ParamMode.PER_CHANNEL,
           act_min=-128, act_max=127)
    prep = prepare(program({V: [rq]}), ARCH)
    msgs = []
    for fast in (True, False):
        st = _state(0)
        bad = _params(np.random.default_rng(0), 64)
        bad[1, 5] = -1  # a negative multiplier
        st.sram[2000:2000 + bad.nbytes] = bad.view(np.uint8).reshape(-1)
        with pytest.raises(TesselSimError) as exc:
            run_functional(prep, st, fast=fast)
        msgs.append(str(exc.value))
    assert msgs[0] == msgs[1] and "parameter entry 5" in msgs[0]


_DT = [DType.I8, DType.I16, DType.I32]


@pytest.mark.parametrize("seed", range(40))
def test_eltwise_random(seed):
    rng = np.random.default_rng(1000 + seed)
    op = EltOp(int(rng.integers(0, 5)))
    da, db, do = (_DT[int(rng.integers(0, 3))] for _ in range(3))
    w = {DType.I8: 1, DType.I16: 2, DType.I32: 4}
    info = {DType.I8: (-128, 127), DType.I16: (-32768, 32767), DType.I32: (-2**31, 2**31 - 1)}
    lo, hi = sorted(int(v) for v in rng.integers(*info[do], 2, endpoint=True))

    def zp(dt):
        big = rng.random() < 0.2  # zero points far outside the dtype
        return int(rng.integers(-2**31, 2**31)) if big else int(rng.integers(-300, 300))

    mult = lambda: int(rng.integers(0, 2**31))  # noqa: E731
    shift = lambda: int(rng.integers(-31, 31))  # noqa: E731
    el = I(Opcode.ELTWISE, op=op, a_dtype=da, b_dtype=db, out_dtype=do, d0=16, d1=3,
           a_addr=0, a_s0=w[da], a_s1=16 * w[da], b_addr=300,
           b_s0=w[db] * int(rng.integers(0, 2)), b_s1=16 * w[db], out_addr=9000, out_s0=w[do],
           out_s1=16 * w[do], a_zp=zp(da), b_zp=zp(db), left_shift=int(rng.integers(0, 32)),
           a_mult=mult(), a_shift=shift(), b_mult=mult(), b_shift=shift(),
           out_mult=mult(), out_shift=shift(), out_zp=int(rng.integers(-1000, 1000)),
           act_min=lo, act_max=hi)
    _same_both_ways({V: [el]})


def test_eltwise_tflite_add_uses_an_output_table():
    """int8 ADD as TFLite emits it: both inputs and the output stage are tables."""
    el = CASES["eltwise"][V][0].as_dict()
    el = {k: v for k, v in el.items() if k != "opcode"}
    el.update(b_dtype=DType.I8, b_s0=1, left_shift=20, a_mult=1 << 30, a_shift=1,
              b_mult=1 << 30, b_shift=1)
    _same_both_ways({V: [I(Opcode.ELTWISE, **el)]})


@pytest.mark.parametrize("kw", [
    dict(dtype=DType.I8, d0=100, d1=3, ext_s0=1, ext_s1=100, sram_s0=1, sram_s1=100),
    dict(dtype=DType.I16, d0=10, d1=7, ext_s0=2, ext_s1=40, sram_s0=2, sram_s1=20),
    dict(dtype=DType.I32, d0=5, d1=4, d2=3, ext_s0=4, ext_s1=20, ext_s2=80, sram_s0=8,
         sram_s1=40, sram_s2=160),
])
def test_dma(kw):
    load = I(Opcode.DMA_LOAD, mem=0, ext_addr=100, sram_addr=40_000, **kw)
    store = I(Opcode.DMA_STORE, mem=0, ext_addr=200_000, sram_addr=300, **kw)
    _same_both_ways({DI: [load], DO: [store]})


def test_many_instructions_share_pooled_buffers():
    """Tiles of one geometry at different addresses (a layer's tiles): the pooled frame keeps
    its zero border, results equal the reference for every tile and every run."""
    convs = [I(Opcode.CONV, **dict(CONV, in_addr=100 * t, acc_addr=54 * t * 0 + 216 * (t % 2)))
             for t in range(4)]
    _same_both_ways({MX: convs})


# ---- batches: the closures on a leading axis of samples equal the reference handlers -------
def _batch_state(n: int, same, shared_consts: bool = False):
    from tessel.sim.state import BatchState

    st = BatchState(ARCH, n, [1 << 20 for _ in ARCH.offchip])
    for k in range(n):
        sram, acc, lut = _fill(k, same)
        for dst, src in ((st.sram, sram), (st.acc_bytes, acc), (st.lut_bytes, lut)):
            dst[k, :src.size] = src
        st.offchip[0][k, :65536] = np.random.default_rng(50 + k).integers(0, 256, 65536,
                                                                            dtype=np.uint8)
    return st


def _batch_same_both_ways(streams, n: int = 3, same=None) -> None:
    prep = prepare(program(streams), ARCH)
    fast, ref = _batch_state(n, same), _batch_state(n, same)
    run_functional(prep, fast, fast=True)
    run_functional(prep, ref, fast=False)
    for name in ("sram", "acc_bytes", "lut_bytes"):
        assert np.array_equal(getattr(fast, name), getattr(ref, name)), name
    assert np.array_equal(fast.offchip[0], ref.offchip[0])


_BATCH_EXTRA = {
    "conv_1x1": _conv(kh=1, kw=1, pad_top=0, pad_left=0, stride_h=1, out_h=7, out_w=6),
    "conv_chunked": _conv(in_zp=-128, w_zp=127),
    "dwconv_loop": {V: [I(Opcode.DWCONV, **{**{k: v for k, v in CASES["dwconv"][V][0].as_dict(
        ).items() if k != "opcode"}, "in_h": 16, "in_w": 28, "ch": 16, "in_stride_h": 28 * 16,
        "in_stride_w": 16, "stride_h": 1, "out_h": 16, "out_w": 28, "w_stride_k": 16,
        "acc_addr": 0, "acc_stride": 16})]},
    "dma": {DI: [I(Opcode.DMA_LOAD, mem=0, ext_addr=100, sram_addr=40_000, dtype=DType.I16,
                   d0=10, d1=7, ext_s0=2, ext_s1=40, sram_s0=2, sram_s1=20),
                 I(Opcode.DMA_LOAD, mem=0, ext_addr=100, sram_addr=50_000, dtype=DType.I8,
                   d0=300, ext_s0=1, sram_s0=1)],
            DO: [I(Opcode.DMA_STORE, mem=0, ext_addr=200_000, sram_addr=300, dtype=DType.I8,
                   d0=100, d1=3, ext_s0=1, ext_s1=100, sram_s0=1, sram_s1=100),
                 I(Opcode.DMA_STORE, mem=0, ext_addr=300_000, sram_addr=300, dtype=DType.I32,
                   d0=5, d1=4, ext_s0=4, ext_s1=20, sram_s0=8, sram_s1=40)]},
}


@pytest.mark.parametrize("same", [None, (0, 60_000)], ids=["differ", "same"])
@pytest.mark.parametrize("case", sorted(CASES) + sorted(_BATCH_EXTRA))
def test_batch_fast_equals_reference(case, same):
    _batch_same_both_ways({**CASES, **_BATCH_EXTRA}[case], same=same)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_batch_conv_sample_chunks(n, monkeypatch):
    """A batch's CONV in GEMMs of a few samples (the last one partial) equals the reference."""
    import tessel.sim.fastpath as fp

    monkeypatch.setattr(fp, "BATCH_GEMM_BYTES", 2 * 4 * 24 * 72)  # two samples per GEMM
    _batch_same_both_ways(_conv(), n=n, same=(0, 60_000))
    _batch_same_both_ways(_conv(), n=n)


# ---- the int8 GEMM (torch._int_mm) of CONV / MATMUL, on every tile size -------------------
_CONV_KW = [
    {}, {"mode": AccMode.ACCUMULATE}, {"in_zp": -128, "w_zp": 127}, {"in_zp": 127, "w_zp": -128},
    {"kh": 1, "kw": 1, "pad_top": 0, "pad_left": 0, "stride_h": 2, "stride_w": 2, "out_h": 4,
     "out_w": 3, "w_zp": 5},
    {"dil_h": 2, "dil_w": 2, "pad_top": 2, "pad_left": 2, "out_h": 4, "out_w": 6},
    {"in_zp": 200},  # padding not representable in int8: the float path
]
_MM_KW = [dict(m=7, n=5, k=300, a_zp=3, b_zp=0), dict(m=4, n=3, k=9, mode=AccMode.ACCUMULATE),
          dict(m=9, n=6, k=2000, a_zp=-128, b_zp=127), dict(m=5, n=4, k=2000, a_zp=255,
                                                            b_zp=-256)]


@pytest.fixture
def every_gemm_int(monkeypatch):
    import tessel.sim.fastmatmul as fm
    import tessel.sim.fastpath as fp

    monkeypatch.setattr(fp, "FORCE_INT_MM", True)  # where it is exact, also if slow here
    if fp.int_mm() is None or fm.int_mm_out() is None:
        pytest.skip("torch._int_mm is not exact / not available on this host")
    monkeypatch.setattr(fp, "INT_MM_MIN_MACS", 0)
    monkeypatch.setattr(fm, "INT_MM_MIN_MACS", 0)
    monkeypatch.setattr(kern_conv, "KERNEL_MAX_MACS", 0)  # CONV: the BLAS closures
    return fp


def _kinds(streams) -> set[str]:
    prep = prepare(program(streams), ARCH)
    return {s.__name__ for q in fast_steps(prep) for s in q if s is not None}


@pytest.mark.parametrize("kw", _CONV_KW)
def test_conv_int8_gemm(kw, every_gemm_int):
    streams = _conv(**kw)
    assert _kinds(streams) == ({"step"} if kw.get("in_zp") == 200 else {"step_int"})
    every_gemm_int.INT_MM_MIN_MACS = 10**9  # one sample: float, a batch: int8 (its branch)
    assert _kinds(streams) == {"step"}
    _batch_same_both_ways(streams, same=(0, 60_000))
    every_gemm_int.INT_MM_MIN_MACS = 0
    _same_both_ways(streams)
    _batch_same_both_ways(streams, same=(0, 60_000))
    _batch_same_both_ways(streams)  # weights differing between samples: the reference


@pytest.mark.parametrize("kw", _MM_KW)
def test_matmul_int8_gemm(kw, every_gemm_int):
    k, n = kw["k"], kw["n"]
    streams = {MX: [I(Opcode.MATMUL, a_addr=0, a_stride_m=k, b_addr=20_000, b_stride_k=n,
                      acc_addr=4, acc_stride=n, **kw)]}
    assert _kinds(streams) == {"step_int1"}  # one sample: tessel.sim.fastmatmul
    _same_both_ways(streams)
    _batch_same_both_ways(streams, same=(0, 60_000))
    _batch_same_both_ways(streams)


def test_conv_int8_batch_chunks(every_gemm_int, monkeypatch):
    monkeypatch.setattr(every_gemm_int, "BATCH_GEMM_BYTES", 2 * 24 * 72)  # two samples a GEMM
    _batch_same_both_ways(_conv(), n=5, same=(0, 60_000))


def test_int_mm_self_test_refuses_a_wrong_kernel(monkeypatch):
    """A kernel that saturates like AVX2's 16-bit pair sums is refused by the self-test."""
    import torch

    import tessel.sim.fastpath as fp

    def saturating(a, b):
        return torch.clamp(torch.mm(a.to(torch.int64), b.to(torch.int64)), -2**20,
                           2**20).to(torch.int32)

    monkeypatch.setattr(fp, "_INT_MM", [])
    monkeypatch.setattr(torch, "_int_mm", saturating)
    assert fp.int_mm() is None
    assert fp.exact_int_mm() is None
    monkeypatch.setattr(fp, "_INT_MM", [])


def test_int_mm_exact_but_slower_than_float32_is_not_used(monkeypatch):
    """An exact int8 GEMM slower than the float32 one here (AVX2 hosts: ~1 vs 30-80 GMAC/s)
    passes the self-test but the simulator keeps the float32 GEMMs; tests can force it."""
    import time

    import torch

    import tessel.sim.fastpath as fp

    def exact_but_slow(a, b):
        time.sleep(0.005)  # a 256x576x64 float32 GEMM takes well under 5 ms on any host
        return torch.mm(a.to(torch.int64), b.to(torch.int64)).to(torch.int32)

    monkeypatch.setattr(fp, "_INT_MM", [])
    monkeypatch.setattr(fp, "_INT_MM_FAST", [])
    monkeypatch.setattr(torch, "_int_mm", exact_but_slow)
    assert fp.exact_int_mm() is exact_but_slow
    assert not fp.int_mm_fast()
    assert fp.int_mm() is None
    monkeypatch.setattr(fp, "FORCE_INT_MM", True)
    assert fp.int_mm() is exact_but_slow
    monkeypatch.setattr(fp, "_INT_MM", [])
    monkeypatch.setattr(fp, "_INT_MM_FAST", [])


# ---- POOL and the int8 x int8 ELTWISE pair table ----------------------------------------------
@pytest.mark.parametrize("seed", range(16))
def test_pool_random(seed):
    """A random POOL the fast path runs (fields drawn again until the ISA's rules hold and no
    static trap sends it to the reference), the same both ways, batched and not."""
    rng = np.random.default_rng(300 + seed)
    for _ in range(100):
        streams = _random_pool(rng, seed)
        try:
            prep = prepare(program(streams), ARCH)
        except Exception:  # noqa: BLE001 - fields outside the ISA's rules: draw again
            continue
        if fast_steps(prep)[V][0] is not None:
            break
    else:
        raise AssertionError("no random POOL the fast path runs in 100 draws")
    _same_both_ways(streams)
    _batch_same_both_ways(streams)


def _random_pool(rng, seed: int) -> dict:
    from tessel.isa.fields import PoolOp

    dt = [DType.I8, DType.I16][seed % 2]
    w = 1 if dt == DType.I8 else 2
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    sh, sw, dh, dw = (int(rng.integers(1, 3)) for _ in range(4))
    pt, pl = int(rng.integers(0, kh)), int(rng.integers(0, kw))
    ch, in_h, in_w = int(rng.integers(1, 6)), int(rng.integers(3, 8)), int(rng.integers(3, 8))
    oh = max(1, (in_h + pt - (kh - 1) * dh - 1) // sh + 1)
    ow = max(1, (in_w + pl - (kw - 1) * dw - 1) // sw + 1)
    lim = (-128, 127) if dt == DType.I8 else (-32768, 32767)
    lo, hi = sorted(int(v) for v in rng.integers(lim[0] - 50, lim[1] + 50, 2))
    pool = I(Opcode.POOL, op=[PoolOp.MAX, PoolOp.AVG][(seed // 2) % 2], dtype=dt, in_addr=0,
             in_h=in_h, in_w=in_w, in_stride_h=in_w * ch * w + 3 * w, in_stride_w=ch * w,
             ch=ch, kh=kh, kw=kw, stride_h=sh, stride_w=sw, dil_h=dh, dil_w=dw, pad_top=pt,
             pad_left=pl, out_h=oh, out_w=ow, out_addr=9000, out_stride_h=ow * ch * w,
             out_stride_w=ch * w, act_min=lo, act_max=hi)
    return {V: [pool]}


@pytest.mark.parametrize("case", ["pool_max", "pool_avg"])
def test_pool_cases_use_the_closure(case):
    assert _kinds(CASES[case]) == {"step"}
    _same_both_ways(CASES[case])


@pytest.mark.parametrize("seed", range(12))
def test_eltwise_int8_pair_table(seed, kernels):
    rng = np.random.default_rng(700 + seed)
    op = EltOp(int(rng.integers(0, 5)))
    do = [DType.I8, DType.I16, DType.I32][seed % 3]
    lo, hi = sorted(int(v) for v in rng.integers(-128, 128, 2)) if do == DType.I8 else \
        sorted(int(v) for v in rng.integers(-300, 300, 2))
    el = I(Opcode.ELTWISE, op=op, a_dtype=DType.I8, b_dtype=DType.I8, out_dtype=do, d0=16,
           d1=3, a_addr=0, a_s0=1, a_s1=16, b_addr=300, b_s0=int(rng.integers(0, 2)),
           b_s1=16, out_addr=9000, out_s0=[1, 2, 4][seed % 3], out_s1=16 * [1, 2, 4][seed % 3],
           a_zp=int(rng.integers(-128, 128)), b_zp=int(rng.integers(-128, 128)),
           left_shift=int(rng.integers(0, 21)), a_mult=int(rng.integers(2**29, 2**31)),
           a_shift=int(rng.integers(-5, 2)), b_mult=int(rng.integers(2**29, 2**31)),
           b_shift=int(rng.integers(-5, 2)), out_mult=int(rng.integers(2**29, 2**31)),
           out_shift=int(rng.integers(-25, 0)), out_zp=int(rng.integers(-20, 20)),
           act_min=lo, act_max=hi)
    streams = {V: [el]}
    assert _kinds(streams) == {"step_kernel" if kernels else "step_pair"}
    _same_both_ways(streams)
    _batch_same_both_ways(streams)
    _batch_same_both_ways(streams, same=(0, 60_000))


def test_eltwise_tflite_add_is_one_pair_gather(kernels):
    el = {k: v for k, v in CASES["eltwise"][V][0].as_dict().items() if k != "opcode"}
    el.update(b_dtype=DType.I8, b_s0=1, left_shift=20, a_mult=1 << 30, a_shift=1,
              b_mult=1 << 30, b_shift=1)
    assert _kinds({V: [I(Opcode.ELTWISE, **el)]}) == {"step_kernel" if kernels else "step_pair"}


# ---- LUT, COPY, REDUCE, UNARY --------------------------------------------------------------
def test_lut_tables_follow_lut_loads(kernels):
    """Both modes, with LUT_LOADs changing the entries between lookups (a new value table),
    kernels off (the numpy tables) and on (``kern_vec``, reading the entries)."""
    from tessel.isa.fields import LutMode

    look = [I(Opcode.LUT, lut_mode=LutMode.I16_513, lut_base=100, d0=8, d1=8, src_addr=0,
              src_s0=2, src_s1=16, dst_addr=9000, dst_s0=2, dst_s1=16),
            I(Opcode.LUT, lut_mode=LutMode.I8_256, lut_base=7, d0=64, d1=2, src_addr=500,
              src_s0=1, src_s1=64, dst_addr=9500, dst_s0=1, dst_s1=64)]
    streams = {V: look + [I(Opcode.LUT_LOAD, lut_base=0, count=700, src_addr=1000)] + look}
    streams[V] += [I(Opcode.LUT_LOAD, lut_base=50, count=600, src_addr=3000)] + look
    assert _kinds(streams) == {"step_kernel" if kernels else "step"}
    _same_both_ways(streams)
    _batch_same_both_ways(streams)
    _batch_same_both_ways(streams, same=(0, 60_000))


@pytest.mark.parametrize("seed", range(16))
def test_reduce_random(seed):
    from tessel.isa.fields import ReduceOp

    rng = np.random.default_rng(900 + seed)
    op = ReduceOp(seed % 4)
    dt = [DType.I8, DType.I16, DType.I32][int(rng.integers(0, 3))]
    w = {DType.I8: 1, DType.I16: 2, DType.I32: 4}[dt]
    d0, d1, d2 = (int(v) for v in rng.integers(1, 7, 3))
    axis = int(rng.integers(0, 3))
    kept = [n for k, n in enumerate((d0, d1, d2)) if k != axis]
    ow = 4 if op in (ReduceOp.SUM, ReduceOp.SUMSQ) else w
    zp = int(rng.choice([0, 3, -1000, 2**20, -(2**31)])) if dt == DType.I32 else \
        int(rng.integers(-300, 300))
    red = I(Opcode.REDUCE, op=op, dtype=dt, axis=axis, d0=d0, d1=d1, d2=d2, src_addr=0,
            src_s0=w, src_s1=w * d0 + w, src_s2=w * (d0 + 1) * d1, in_zp=zp,
            dst_addr=9000, dst_s0=ow, dst_s1=ow * kept[0])
    streams = {V: [red]}
    prep = prepare(program(streams), ARCH)
    if prep.queues[V][0].error is not None:
        pytest.skip(prep.queues[V][0].error)
    _same_both_ways(streams)
    _batch_same_both_ways(streams)


@pytest.mark.parametrize("fb", [0, 1, 15, 20, 30, 31])
def test_unary_edge_values(fb, kernels):
    from tessel.isa.fields import UnaryOp

    vals = np.array([-(2**31), -5, -1, 0, 1, 2, 3, 4, 5, 7, 1000, 2**20 + 1, 2**30,
                     2**31 - 1, 2**31 - 2, 65535, 65536, 999_999_937], np.int32)
    raw = vals.tobytes()
    for op in UnaryOp:
        un = I(Opcode.UNARY, op=op, frac_bits=fb, d0=len(vals), src_addr=40_000, src_s0=4,
               dst_addr=9000, dst_s0=4)
        streams = {V: [un]}
        assert _kinds(streams) == ({"step_kernel"} if kernels else  # kern_reduce
                                   {"step" if op == UnaryOp.RECIP else "step_scalar"})
        _same_both_ways(streams, extra=[(40_000, raw)])
        # random words too (the reference's float sqrt corrections vs isqrt)
        _same_both_ways({V: [I(Opcode.UNARY, op=op, frac_bits=fb, d0=60, src_addr=0,
                               src_s0=4, dst_addr=9000, dst_s0=4)]})


def test_copy_overlapping_and_contiguous():
    streams = {V: [I(Opcode.COPY, dtype=DType.I8, d0=300, src_addr=0, src_s0=1, dst_addr=100,
                     dst_s0=1),  # overlapping: every read first
                   I(Opcode.COPY, dtype=DType.I16, d0=50, d1=3, src_addr=2000, src_s0=2,
                     src_s1=100, dst_addr=5000, dst_s0=2, dst_s1=100),  # bytes
                   I(Opcode.COPY, dtype=DType.I32, d0=6, d1=4, src_addr=8000, src_s0=4,
                     src_s1=24, dst_addr=8010, dst_s0=16, dst_s1=4)]}
    assert _kinds(streams) == {"step", "step_bytes"}
    _same_both_ways(streams)
    _batch_same_both_ways(streams)


@pytest.mark.parametrize("where", [0, 1, 7, 8, 300, 646, 647])
def test_batch_conv_weights_differing_in_one_byte(where, monkeypatch):
    """The batch's byte-wise weight check (64-bit middle, byte ends) sees one differing byte
    anywhere in the weights (648 bytes at 20,000): that CONV then runs the reference."""
    import tessel.sim.fastpath as fp

    for int_macs in (10**9, 0):  # the float32 and the int8 GEMM closures
        monkeypatch.setattr(fp, "INT_MM_MIN_MACS", int_macs)
        prep = prepare(program(_conv()), ARCH)
        fast, ref = _batch_state(3, (0, 60_000)), _batch_state(3, (0, 60_000))
        for st in (fast, ref):
            st.sram[2, 20_000 + where] ^= 0x5A
        run_functional(prep, fast, fast=True)
        run_functional(prep, ref, fast=False)
        assert np.array_equal(fast.acc_bytes, ref.acc_bytes)
        assert fp._bytes_uniform(fast.sram, 20_000, 20_648) is False
        fast.sram[2, 20_000 + where] ^= 0x5A
        assert fp._bytes_uniform(fast.sram, 20_000, 20_648) is True


def _refill(dst: MachineState, src: MachineState) -> None:
    for name in ("sram", "acc_bytes", "lut_bytes"):
        getattr(dst, name)[...] = getattr(src, name)
    dst.offchip[0][:65536] = src.offchip[0][:65536]


_STRIDED = dict(dtype=DType.I16, d0=10, d1=7, ext_s0=2, ext_s1=40, sram_s0=2, sram_s1=20)
_AGAIN = {**CASES, "dma_strided": {
    DI: [I(Opcode.DMA_LOAD, mem=0, ext_addr=100, sram_addr=40_000, **_STRIDED)],
    DO: [I(Opcode.DMA_STORE, mem=0, ext_addr=200_000, sram_addr=300, **_STRIDED)]}}


@pytest.mark.parametrize("case", sorted(_AGAIN))
def test_one_state_run_again_with_new_data_keeps_exact_views(case):
    """The closures keep their views and buffers per (state, pool) (``fastpath.Views``):
    one state run again and again with other memory contents (as ``NpuSession(reuse=True)``
    does) equals the reference on fresh states each time."""
    prep = prepare(program(_AGAIN[case]), ARCH)
    reused = MachineState(ARCH)
    for seed in (3, 4, 5):
        _refill(reused, _state(seed))
        ref = _state(seed)
        run_functional(prep, reused, fast=True)
        run_functional(prep, ref, fast=False)
        for name in ("sram", "acc_bytes", "lut_bytes"):
            assert np.array_equal(getattr(reused, name), getattr(ref, name)), (name, seed)
        assert np.array_equal(reused.offchip[0][:1 << 20], ref.offchip[0][:1 << 20]), seed


def test_threads_sharing_a_program_keep_their_own_views():
    """Threads running one prepared program on their own states (each reused run after run)
    share its closures' ``Views``: every result equals the reference."""
    import threading

    streams = {MX: CASES["conv"][MX], V: CASES["requant"][V] + CASES["dwconv"][V],
               DI: _AGAIN["dma_strided"][DI], DO: _AGAIN["dma_strided"][DO]}
    prep = prepare(program(streams), ARCH)
    want = {}
    for seed in range(4):
        ref = _state(seed)
        run_functional(prep, ref, fast=False)
        want[seed] = (ref.sram.tobytes(), ref.acc_bytes.tobytes(),
                      ref.offchip[0][:1 << 20].tobytes())
    bad: list = []

    def worker(seed: int) -> None:
        st = MachineState(ARCH)
        for _ in range(15):
            _refill(st, _state(seed))
            run_functional(prep, st, fast=True)
            got = (st.sram.tobytes(), st.acc_bytes.tobytes(), st.offchip[0][:1 << 20].tobytes())
            if got != want[seed]:
                bad.append(seed)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_pool_kept_once_per_pool_that_keeps_its_buffers():
    """``PoolKept``: made once per pool without a limit (a new state on the same pool reuses
    it), made on every call for a pool that may drop its buffers (a batch's)."""
    from tessel.sim.fastpath import Pool, PoolKept

    calls: list = []
    kept = PoolKept(lambda pool: calls.append(pool) or len(calls))
    one, other, limited = Pool(), Pool(), Pool(limit=1 << 20)
    assert [kept.get(one), kept.get(one), kept.get(other), kept.get(one)] == [1, 1, 2, 3]
    assert [kept.get(limited), kept.get(limited)] == [4, 5]
    assert kept.get(one) == 3  # a limited pool's calls left the kept one in place


def test_pack_cache_drops_least_recently_used_entries_past_its_limit():
    """``PackCache`` counts an entry's bytes and arrays (a view of another of its arrays
    once) and, past its limit, drops the entries used longest ago, never the newest."""
    from tessel.sim.fastpath import PackCache

    def entry(n: int) -> tuple:
        buf = np.zeros(n, np.float32)
        return (bytes(n), buf.reshape(n, 1), buf)  # 5n bytes: the view is not counted

    packs = PackCache(limit=1000)
    for key in "abc":
        packs.put(key, entry(60))
    assert packs.nbytes == 900 and list(packs.entries) == ["a", "b", "c"]
    assert packs.get("a") is not None  # now the most recent
    packs.put("d", entry(60))  # 1200 > 1000: "b" goes
    assert list(packs.entries) == ["c", "a", "d"] and packs.nbytes == 900
    packs.put("c", entry(20))  # a replacement is counted once
    assert packs.nbytes == 700 and packs.get("b") is None
    packs.put("e", entry(400))  # larger than the limit alone: kept, all others dropped
    assert list(packs.entries) == ["e"] and packs.nbytes == 2000


@pytest.mark.parametrize("case", ["requant", "matmul_int8", "matmul_float"])
def test_fresh_states_remake_only_memory_views(case, monkeypatch, kernels):
    """A new state per run (``simulate``) on the program's pool: the pooled part of REQUANT /
    MATMUL views is made once, the memory views every run, and fresh states alternating
    with a reused one all equal the reference."""
    from test_fastmatmul import _matmul

    from tessel.sim import fastmatmul
    from tessel.sim import fastpath as fp

    streams = {"requant": CASES["requant"], "matmul_int8": _matmul(37, 300, 13, a_zp=5),
               "matmul_float": _matmul(8, 32, 16, a_zp=9, b_zp=-2)}[case]
    monkeypatch.setattr(fp, "FORCE_INT_MM", True)  # where it is exact, also if slow here
    if case == "matmul_int8" and fastmatmul.int_mm_out() is None:
        pytest.skip("torch._int_mm is not exact / not available on this host")
    made = {"pool": 0, "views": 0}
    real_pool_get, real_views_get = fp.PoolKept.get, fp.Views.get

    def pool_get(self, pool):
        if self.kept[0] is not pool:
            made["pool"] += 1
        return real_pool_get(self, pool)

    def views_get(self, state):
        if self.kept[0] is not state.sram:
            made["views"] += 1
        return real_views_get(self, state)
    monkeypatch.setattr(fp.PoolKept, "get", pool_get)
    monkeypatch.setattr(fp.Views, "get", views_get)
    prep = prepare(program(streams), ARCH)
    reused = MachineState(ARCH)
    for seed in (0, 1, 2, 3):
        fast = reused if seed % 2 else _state(seed)
        if seed % 2:
            _refill(reused, _state(seed))
        ref = _state(seed)
        run_functional(prep, fast, fast=True)
        run_functional(prep, ref, fast=False)
        for name in ("sram", "acc_bytes", "lut_bytes"):
            assert np.array_equal(getattr(fast, name), getattr(ref, name)), (name, seed)
    assert made["views"] == 4 * len([s for q in fast_steps(prep) for s in q if s is not None])
    pooled = not (kernels and case == "requant")  # the REQUANT kernel needs no work buffers
    assert made["pool"] >= pooled and made["pool"] <= made["views"] // 4


def test_memory_views_shared_per_state_by_closures_reading_one_operand():
    """``memory_view`` / ``memory_tensor``: one object per (state, key), another state's own;
    MATMULs (int8 and float32 closures) reading and writing the same A, B and accumulator
    through the shared views equal the reference on fresh states."""
    from test_fastmatmul import _matmul

    from tessel.sim.fastpath import memory_tensor, memory_view

    one, two = MachineState(ARCH), MachineState(ARCH)
    key = ("sram", 64, (3, 5), (7, 1), np.dtype(np.int8))
    assert memory_view(one, key) is memory_view(one, key)
    assert memory_view(two, key) is not memory_view(one, key)
    assert memory_tensor(one, key) is memory_tensor(one, key)
    one.sram[64 + 7 * 2 + 4] = 0xFF
    assert memory_view(one, key)[2, 4] == -1 and int(memory_tensor(one, key)[2, 4]) == -1
    assert memory_view(two, key)[2, 4] == 0
    big = _matmul(37, 300, 13, a_zp=5, b_zp=-3)[MX]
    acc = _matmul(37, 300, 13, a_zp=5, b_zp=-3, mode=AccMode.ACCUMULATE)[MX]
    small = _matmul(8, 32, 16, a_zp=9, mode=AccMode.ACCUMULATE)[MX]
    _same_both_ways({MX: big + acc + small + acc + big}, seeds=(0, 1, 2))
