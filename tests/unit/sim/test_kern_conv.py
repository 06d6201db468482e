"""The CONV kernels (``tessel.sim.kern_conv``) equal the reference handler
(``matrix.exec_conv``) bit for bit, both as their Python source (``Kernel.py``) and compiled
(``Kernel.compiled``): Hypothesis draws instructions the static rules accept (1x1 and KxK,
strides, dilations, padding, negative and padded strides of the tile and the weights, odd
channel counts, OVERWRITE and ACCUMULATE over random accumulators) and memories mixing small
values with the int8 edges, with both zero points at their field's ends, so that the float32
bound holds on some tiles and fails on others (K split into exact chunks)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from simkit import ARCH, I, kernels_as, program
from test_kern_rq_dw_pool import _edge_or, _out_size, _same, _states, _values

from tessel.isa import Engine, Opcode
from tessel.isa.fields import AccMode
from tessel.sim import kern_conv
from tessel.sim.fastpath import Pool
from tessel.sim.matrix import exec_conv
from tessel.sim.prepare import prepare

MX = Engine.MATRIX
SETTINGS = settings(max_examples=80, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(params=["py", "compiled"])
def impl(request, monkeypatch) -> str:
    """Kernels on; ``py``: the builder gets each kernel's uncompiled source instead. No int8
    GEMM: on a host with a fast one (AVX-512 VNNI, AMX) ``kernel_wins`` leaves the large
    tiles to ``_build_conv``, and these tests are about the kernels."""
    from tessel.sim import fastpath

    monkeypatch.setattr(fastpath, "USE_INT_MM", False)
    return kernels_as(request.param, monkeypatch,
                      [(kern_conv, "conv_pack"), (kern_conv, "conv_pack_a"),
                       (kern_conv, "conv_pack_b"),
                       (kern_conv, "acc_store")])


def _sign(draw) -> int:
    return draw(st.sampled_from([1, -1]))


@st.composite
def conv_case(draw, pointwise: bool = False):
    """A CONV and its memories; ``pointwise``: a 1x1 kernel without padding, its samples
    inside the tile's columns, often over dense input rows (``kern_conv._pointwise``)."""
    cin, cout = draw(st.integers(1, 40)), draw(st.integers(1, 20))
    in_h, in_w = draw(st.integers(1, 5)), draw(st.integers(1, 6))
    kh, kw = (1, 1) if pointwise else (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    sh, sw, dh, dw = (draw(st.integers(1, 3)) for _ in range(4))
    pt, pl = (0, 0) if pointwise else (draw(st.integers(0, 3)), draw(st.integers(0, 3)))
    sw = draw(st.sampled_from([1, 1, sw])) if pointwise else sw
    oh = draw(st.integers(1, _out_size(in_h, pt, kh, dh, sh) + 1))
    ow = draw(st.integers(1, _out_size(in_w, pl, kw, dw, sw) + (0 if pointwise else 1)))
    xsw = _sign(draw) * (cin + draw(st.integers(0, 2)))
    xsw = draw(st.sampled_from([cin, xsw])) if pointwise else xsw
    xsh = _sign(draw) * (in_w * abs(xsw) + draw(st.integers(0, 3)))
    wsco = _sign(draw) * draw(st.integers(1, 2))
    wsci = _sign(draw) * (cout * abs(wsco) + draw(st.integers(0, 2)))
    wsk = _sign(draw) * (cin * abs(wsci) + draw(st.integers(0, 2)))
    mode = draw(st.sampled_from([AccMode.OVERWRITE, AccMode.ACCUMULATE]))
    acc_stride = cout + draw(st.integers(0, 2))
    instr = I(Opcode.CONV, in_addr=2000, in_h=in_h, in_w=in_w, in_stride_h=xsh,
              in_stride_w=xsw, cin=cin, in_zp=draw(_edge_or(-256, 255, -128, 127)), kh=kh,
              kw=kw, stride_h=sh, stride_w=sw, dil_h=dh, dil_w=dw, pad_top=pt, pad_left=pl,
              out_h=oh, out_w=ow, w_addr=40_000, w_stride_k=wsk, w_stride_ci=wsci,
              w_stride_co=wsco, w_zp=draw(_edge_or(-256, 255, -128, 127)), cout=cout,
              acc_addr=64, acc_stride=acc_stride, mode=mode)
    x = _values(draw, 4000, np.int8, 3)  # SRAM bytes 0..4000: the tile
    w = _values(draw, 32_000, np.int8, 3)  # weights around 40_000
    acc = _values(draw, 64 + oh * ow * acc_stride, np.int32, 70_000)
    return instr, {0: x.tobytes(), 24_000: w.tobytes()}, {0: acc.tobytes()}


@SETTINGS
@given(case=st.one_of(conv_case(), conv_case(pointwise=True)))
def test_conv_kernel_equals_the_reference(impl, case):
    instr, sram, acc = case
    try:
        prep = prepare(program({MX: [instr]}), ARCH)
    except Exception:  # noqa: BLE001 - fields outside the ISA's rules
        assume(False)
        raise
    op = prep.queues[MX][0]
    assume(op.error is None)
    step = kern_conv.build(op, ARCH.onchip.sram_bytes)
    assume(step is not None)  # a frame beyond the static bound, an all-padding tile
    assert step.__module__ == "tessel.sim.kern_conv"
    fast, ref = _states(sram, acc)
    fast.pool = Pool()
    step(fast)
    exec_conv(ref, op.f)
    _same(fast, ref)


@pytest.mark.parametrize("mode", [AccMode.OVERWRITE, AccMode.ACCUMULATE])
def test_conv_kernel_chunks_a_long_reduction(impl, mode):
    """Zero points and values at their ends over K = 3 * 3 * 40 = 360 > chunk_len (114): the
    float32 bound fails, K runs in exact chunks; ACCUMULATE wraps past INT32_MAX."""
    cin, cout = 40, 7
    instr = I(Opcode.CONV, in_addr=0, in_h=3, in_w=3, in_stride_h=3 * cin, in_stride_w=cin,
              cin=cin, in_zp=255, kh=3, kw=3, stride_h=1, stride_w=1, dil_h=1, dil_w=1,
              pad_top=0, pad_left=0, out_h=1, out_w=1, w_addr=8000, w_stride_k=cin * cout,
              w_stride_ci=cout, w_stride_co=1, w_zp=-256, cout=cout, acc_addr=0,
              acc_stride=cout, mode=mode)
    prep = prepare(program({MX: [instr]}), ARCH)
    op = prep.queues[MX][0]
    assert op.error is None
    step = kern_conv.build(op, ARCH.onchip.sram_bytes)
    assert step is not None and step.__module__ == "tessel.sim.kern_conv"
    x = np.full(9 * cin, -128, np.int8)
    w = np.full(9 * cin * cout, 127, np.int8)
    acc = np.full(cout, 2**31 - 1000, np.int32)
    fast, ref = _states({0: x.tobytes(), 8000: w.tobytes()}, {0: acc.tobytes()})
    fast.pool = Pool()
    step(fast)
    exec_conv(ref, op.f)
    _same(fast, ref)


@pytest.mark.parametrize("edges", [False, True], ids=["one-gemm", "chunked"])
def test_kept_operands_are_packed_again_when_their_bytes_change(impl, edges):
    """A large tile keeps its packed im2col matrix and weights (``PackCache``): a second run
    over the same bytes reuses both entries, and a change of one input byte, then of one
    weight byte, packs that operand again; every run equals the reference. ``edges``: values
    and zero points at their ends, so the float32 bound fails and K runs in chunks."""
    cin, cout, side = 64, 64, 16
    k = 9 * cin
    assert side * side * k >= kern_conv.PACK_MIN_VALUES and k * cout >= kern_conv.PACK_MIN_VALUES
    in_zp, w_zp = (255, -256) if edges else (3, -2)
    instr = I(Opcode.CONV, in_addr=0, in_h=side, in_w=side, in_stride_h=side * cin,
              in_stride_w=cin, cin=cin, in_zp=in_zp, kh=3, kw=3, stride_h=1, stride_w=1,
              dil_h=1, dil_w=1, pad_top=1, pad_left=1, out_h=side, out_w=side,
              w_addr=20_000, w_stride_k=cin * cout, w_stride_ci=cout, w_stride_co=1,
              w_zp=w_zp, cout=cout, acc_addr=0, acc_stride=cout, mode=AccMode.OVERWRITE)
    op = prepare(program({MX: [instr]}), ARCH).queues[MX][0]
    assert op.error is None
    step = kern_conv.build(op, ARCH.onchip.sram_bytes)
    assert step is not None and step.__module__ == "tessel.sim.kern_conv"
    rng = np.random.default_rng(7)
    lo, hi = (-128, 128) if edges else (-4, 5)
    x = rng.integers(lo, hi, side * side * cin, dtype=np.int8)
    w = rng.integers(lo, hi, k * cout, dtype=np.int8)
    if edges:
        x[::2], w[::3] = -128, 127
    fast, ref = _states({0: x.tobytes(), 20_000: w.tobytes()})
    fast.pool = Pool()
    packs = fast.pool.packs

    def run_both() -> None:
        step(fast)
        exec_conv(ref, op.f)
        _same(fast, ref)

    run_both()
    kept = dict(packs.entries)
    assert {key[0] for key in kept} == {"conv_a", "conv_b"}
    run_both()  # the same bytes: the same entries
    assert all(packs.entries[key] is entry for key, entry in kept.items())
    for addr in (5 * cin + 3, 20_000 + 4 * cin * cout + 9):  # an input byte, a weight byte
        for state in (fast, ref):
            state.sram[addr] = np.uint8((int(state.sram[addr]) + 1) % 256)
        run_both()
        renewed = {key[0] for key, entry in packs.entries.items() if entry is not kept[key]}
        assert renewed == {"conv_a" if addr < 20_000 else "conv_b"}
        kept = dict(packs.entries)
