"""Whole programs through ``simulate``: DMA patterns, tokens, I/O checks, traps and deadlock."""

from __future__ import annotations

import numpy as np
import pytest
from simkit import ARCH, I, program, run_raw, signal, wait

from tessel.binary import DType as IoDType
from tessel.binary import TensorDescriptor
from tessel.errors import TesselConfigError, TesselSimError
from tessel.isa import DType, Engine, Opcode, ParamMode, PoolOp
from tessel.sim import simulate

DI, MX, VE, DO = Engine.DMA_IN, Engine.MATRIX, Engine.VECTOR, Engine.DMA_OUT
RNG = np.random.default_rng(7)


def _io(name: str, dtype: IoDType, shape, address: int) -> TensorDescriptor:
    return TensorDescriptor(name, dtype, shape, 0, address)


def test_dma_transpose_and_slice_roundtrip():
    x = RNG.integers(-(2**15), 2**15, (6, 10)).astype(np.int16)  # at 0x1000 in LPDDR
    # load x[1:5, 2:9] transposed into SRAM as (7, 4), then store it contiguous
    load = I(Opcode.DMA_LOAD, mem=0, dtype=DType.I16, d0=4, d1=7, ext_addr=0x1000 + 2 * (10 + 2),
             ext_s0=20, ext_s1=2, sram_addr=64, sram_s0=2, sram_s1=8)
    store = I(Opcode.DMA_STORE, mem=0, dtype=DType.I16, d0=28, ext_addr=0x8000, ext_s0=2,
              sram_addr=64, sram_s0=2)
    prog = program({DI: [load, signal(DO)], DO: [wait(DI), store]},
                   inputs=[_io("x", IoDType.INT16, (6, 10), 0x1000)],
                   outputs=[_io("y", IoDType.INT16, (7, 4), 0x8000)])
    res = simulate(prog, ARCH, {"x": x}, timing=False)
    assert np.array_equal(res.outputs["y"], x[1:5, 2:9].T)
    assert res.stats.instructions == 8 and res.stats.total_cycles is None


def test_dma_negative_and_zero_strides():
    x = np.arange(8, dtype=np.int32)
    load = I(Opcode.DMA_LOAD, mem=0, dtype=DType.I32, d0=8, d1=3, ext_addr=0x100 + 28, ext_s0=-4,
             ext_s1=0, sram_addr=0, sram_s0=4, sram_s1=32)  # reversed, broadcast 3 times
    store = I(Opcode.DMA_STORE, mem=0, dtype=DType.I32, d0=24, ext_addr=0x400, ext_s0=4,
              sram_addr=0, sram_s0=4)
    prog = program({DI: [load, signal(DO)], DO: [wait(DI), store]},
                   inputs=[_io("x", IoDType.INT32, (8,), 0x100)],
                   outputs=[_io("y", IoDType.INT32, (3, 8), 0x400)])
    res = simulate(prog, ARCH, {"x": x})
    assert np.array_equal(res.outputs["y"], np.tile(x[::-1], (3, 1)))


def test_constants_are_placed_and_pipeline_runs_all_engines():
    # y = requant(pool(x) as acc?) -- here: a max pool of x then a store; constants hold a bias
    x = RNG.integers(-128, 128, (4, 4, 8)).astype(np.int8)
    load = I(Opcode.DMA_LOAD, mem=0, dtype=DType.I8, d0=128, ext_addr=0x2000, ext_s0=1,
             sram_addr=0, sram_s0=1)
    pool = I(Opcode.POOL, op=PoolOp.MAX, dtype=DType.I8, in_addr=0, in_h=4, in_w=4,
             in_stride_h=32, in_stride_w=8, ch=8, kh=2, kw=2, stride_h=2, stride_w=2, out_h=2,
             out_w=2, out_addr=512, out_stride_h=16, out_stride_w=8, act_min=-128, act_max=127)
    store = I(Opcode.DMA_STORE, mem=0, dtype=DType.I8, d0=32, ext_addr=0x3000, ext_s0=1,
              sram_addr=512, sram_s0=1)
    const_load = I(Opcode.DMA_LOAD, mem=0, dtype=DType.I8, d0=4, ext_addr=0x10, ext_s0=1,
                   sram_addr=1024, sram_s0=1)
    const_store = I(Opcode.DMA_STORE, mem=0, dtype=DType.I8, d0=4, ext_addr=0x3020, ext_s0=1,
                    sram_addr=1024, sram_s0=1)
    prog = program({DI: [load, const_load, signal(VE)], VE: [wait(DI), pool, signal(DO)],
                    DO: [wait(VE), store, const_store]},
                   constants=b"\x01\x02\x03\x04", constants_address=0x10,
                   inputs=[_io("x", IoDType.INT8, (4, 4, 8), 0x2000)],
                   outputs=[_io("y", IoDType.INT8, (2, 2, 8), 0x3000),
                            _io("c", IoDType.UINT8, (4,), 0x3020)])
    res = simulate(prog, ARCH, {"x": x})
    want = x.reshape(2, 2, 2, 2, 8).max(axis=(1, 3))
    assert np.array_equal(res.outputs["y"], want)
    assert res.outputs["c"].tolist() == [1, 2, 3, 4]


def _one_input_prog():
    return program({}, inputs=[_io("x", IoDType.INT8, (2, 3), 0)])


@pytest.mark.parametrize("inputs,msg", [
    ({}, "missing"),
    ({"x": np.zeros((2, 3), np.float32)}, "must be int8"),
    ({"x": np.zeros((3, 2), np.int8)}, "shape"),
    ({"x": np.zeros((2, 3), np.int8), "z": np.zeros(1)}, "unknown input 'z'"),
])
def test_bad_inputs_are_config_errors(inputs, msg):
    with pytest.raises(TesselConfigError, match=msg):
        simulate(_one_input_prog(), ARCH, inputs)


def test_program_for_another_arch_is_rejected():
    from tessel.arch import load_preset

    with pytest.raises(TesselConfigError, match="architecture hash"):
        simulate(_one_input_prog(), load_preset("tnpu-m"), {"x": np.zeros((2, 3), np.int8)})


@pytest.mark.parametrize("streams,where", [
    ({DI: [I(Opcode.DMA_LOAD, mem=0, dtype=DType.I8, d0=100, ext_addr=0, ext_s0=1,
             sram_addr=ARCH.onchip.sram_bytes - 50, sram_s0=1)]}, "DMA_IN instruction 0"),
    ({MX: [I(Opcode.MATMUL, m=4, n=4, k=4, a_addr=0, a_stride_m=4, b_addr=0, b_stride_k=4,
             acc_addr=ARCH.derived.acc_entries - 8, acc_stride=4)]}, "MATRIX instruction 0"),
    ({VE: [signal(DO), I(Opcode.LUT_LOAD, lut_base=ARCH.onchip.lut_entries - 2, count=4,
                         src_addr=0)], DO: [wait(VE)]}, "VECTOR instruction 1"),
])
def test_out_of_range_traps_name_engine_index_and_range(streams, where):
    with pytest.raises(TesselSimError, match=where) as info:
        simulate(program(streams), ARCH, {})
    assert "outside" in str(info.value) and "[" in str(info.value)


def test_self_overlapping_destination_traps():
    bad = I(Opcode.DMA_LOAD, mem=0, dtype=DType.I32, d0=4, ext_addr=0, ext_s0=4, sram_addr=0,
            sram_s0=2)
    with pytest.raises(TesselSimError, match="DMA_IN instruction 0.*twice"):
        simulate(program({DI: [bad]}), ARCH, {})


def test_data_dependent_traps():
    bad_params = np.array([0, -5, 0], np.int32)  # bias 0, multiplier -5, shift 0
    rq = I(Opcode.REQUANT, src=0, src_addr=0, rows=1, ch=1, out_dtype=DType.I8, dst_addr=64,
           param_addr=16, param_mode=ParamMode.PER_TENSOR, act_min=-128, act_max=127)
    with pytest.raises(TesselSimError, match="VECTOR instruction 0 \\(REQUANT\\).*multiplier -5"):
        run_raw({VE: [rq]}, sram=[(16, bad_params)])
    empty = I(Opcode.POOL, op=PoolOp.MAX, dtype=DType.I8, in_addr=0, in_h=2, in_w=2,
              in_stride_h=2, in_stride_w=1, ch=1, kh=2, kw=2, stride_h=1, pad_top=5, out_h=1,
              out_w=1, out_addr=64, act_min=-128, act_max=127)
    with pytest.raises(TesselSimError, match="POOL.*no position"):
        run_raw({VE: [empty]})


def test_deadlock_is_detected_and_names_blocked_engines():
    prog = program({MX: [wait(VE, 3), signal(VE, 1)], VE: [wait(MX, 1), signal(MX, 3)]})
    with pytest.raises(TesselSimError, match="deadlock") as info:
        simulate(prog, ARCH, {})
    text = str(info.value)
    assert "MATRIX instruction 0" in text and "VECTOR instruction 0" in text


def test_tokens_count_and_order_engines():
    # DMA_IN signals twice; VECTOR waits twice; a token is a counter, not a flag
    x = np.arange(16, dtype=np.int8)
    loads = [I(Opcode.DMA_LOAD, mem=0, dtype=DType.I8, d0=8, ext_addr=8 * j, ext_s0=1,
               sram_addr=8 * j, sram_s0=1) for j in range(2)]
    copy = I(Opcode.COPY, dtype=DType.I8, d0=16, src_addr=0, src_s0=1, dst_addr=100, dst_s0=1)
    store = I(Opcode.DMA_STORE, mem=0, dtype=DType.I8, d0=16, ext_addr=64, ext_s0=1,
              sram_addr=100, sram_s0=1)
    prog = program({DI: [loads[0], signal(VE, 2), loads[1], signal(VE, 2)],
                    VE: [wait(DI, 2), wait(DI, 2), copy, signal(DO)], DO: [wait(VE), store]},
                   inputs=[_io("x", IoDType.INT8, (16,), 0)],
                   outputs=[_io("y", IoDType.INT8, (16,), 64)])
    res = simulate(prog, ARCH, {"x": x}, trace=True)
    assert np.array_equal(res.outputs["y"], x)
    by = {(t.engine, t.index): t for t in res.stats.trace}
    assert by[(VE, 2)].start >= by[(DI, 3)].end  # the copy starts after the second signal
    assert by[(DO, 1)].start >= by[(VE, 3)].end


def test_signal_overflow_traps_in_timing_model():
    # VECTOR signals 256 times while MATRIX is busy: functionally the producer just stalls at
    # 255 (the consumer drains it), but the timed schedule really holds 256 tokens: a trap
    mm = I(Opcode.MATMUL, m=512, n=16, k=16, a_addr=0, a_stride_m=16, b_addr=0, b_stride_k=16,
           acc_addr=0, acc_stride=16)
    prog = program({VE: [signal(MX, 0)] * 256, MX: [mm] + [wait(VE, 0)] * 256})
    assert simulate(prog, ARCH, {}, timing=False).stats.instructions == 256 * 2 + 1 + 4
    with pytest.raises(TesselSimError, match="VECTOR instruction 255 .*exceed 255"):
        simulate(prog, ARCH, {})


def test_genuine_overflow_is_a_deadlock_functionally():
    prog = program({VE: [signal(MX, 0)] * 256 + [signal(MX, 1)],
                    MX: [wait(VE, 1)] + [wait(VE, 0)] * 256})
    with pytest.raises(TesselSimError, match="count is at 255"):
        simulate(prog, ARCH, {}, timing=False)


def test_binary_roundtrip_and_prepared_program_give_same_outputs():
    from tessel.binary import TslProgram, read_tsl, write_tsl
    from tessel.isa import encode_stream
    from tessel.sim import prepare

    x = np.arange(16, dtype=np.int8)
    load = I(Opcode.DMA_LOAD, mem=0, dtype=DType.I8, d0=16, ext_addr=0, ext_s0=1, sram_addr=0,
             sram_s0=1)
    store = I(Opcode.DMA_STORE, mem=0, dtype=DType.I8, d0=16, ext_addr=64 + 15, ext_s0=-1,
              sram_addr=0, sram_s0=1)  # reversed
    prog = program({DI: [load, signal(DO)], DO: [wait(DI), store]},
                   inputs=[_io("x", IoDType.INT8, (16,), 0)],
                   outputs=[_io("y", IoDType.INT8, (16,), 64)])
    again = read_tsl(write_tsl(prog), arch=ARCH)  # streams come back decoded
    assert isinstance(again.streams[DI], tuple)
    want = x[::-1]
    assert np.array_equal(simulate(again, ARCH, {"x": x}).outputs["y"], want)
    prep = prepare(prog, ARCH)
    for _ in range(2):  # a prepared program runs many times on fresh memories
        assert np.array_equal(simulate(prep, ARCH, {"x": x}).outputs["y"], want)
    raw = program({DI: [load, signal(DO)], DO: [wait(DI), store]})
    as_bytes = TslProgram(raw.arch_hash, {e: encode_stream(q) for e, q in raw.streams.items()})
    # load 16 B (100 + 1), SIGNAL, WAIT, store 16 B (100 + 1)
    assert simulate(as_bytes, ARCH, {}).stats.total_cycles == 101 + 2 + 101
