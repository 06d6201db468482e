"""The C runtime through its Python binding: it builds wherever a C compiler is, says in one line
what is missing where none is, refuses a binary with a host op it has no kernel for (naming the
op, also when the op reads an int4 constant, and from the caller's bytes after a failed open
freed its copy), names the rule a corrupted binary breaks, decodes weight streams (DMA_LOAD_W), and
`run(engine="c")` equals the simulator."""

from __future__ import annotations

import ctypes
import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest

from tessel.binary import read_tsl, write_tsl
from tessel.errors import TesselConfigError, TesselFormatError, TesselSimError
from tessel.runtime import cbuild, cengine
from tessel.runtime.cengine import Engine
from tessel.runtime.compiled import CompiledModel

CORPUS = Path(__file__).resolve().parents[2] / "fuzz" / "corpus"


def _compiler_on_path() -> bool:
    return any(shutil.which(c) for c in cbuild.COMPILERS)


def test_the_c_engine_is_available_where_a_compiler_is():
    """So that the C comparisons of the zoo and random-model tests cannot silently vanish."""
    if _compiler_on_path():
        assert cengine.available() is None
    else:
        assert "C compiler" in cengine.available()


def test_without_a_compiler_one_line_says_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(cbuild, "_installed", lambda: None)
    cbuild.library.cache_clear()
    monkeypatch.setattr(cengine, "_LIB", None)
    try:
        with pytest.raises(TesselConfigError) as err:
            cbuild.library()
        message = str(err.value)
        assert "\n" not in message and "C compiler" in message and "cc, gcc or clang" in message
        assert cengine.available() == message
    finally:
        cbuild.library.cache_clear()


def _tiny() -> CompiledModel:
    return CompiledModel.from_bytes((CORPUS / "tiny_cnn.tsl").read_bytes())


def test_engine_c_equals_the_simulator_and_an_unknown_engine_is_named():
    cm = _tiny()
    x = np.random.default_rng(0).standard_normal(cm.c_engine.inputs[0].shape).astype(np.float32)
    for got, want in zip(cm.run(x, engine="c"), cm.run(x), strict=True):
        np.testing.assert_array_equal(got, want)
    batch = np.stack([x, -x])
    for got, want in zip(cm.run_batch(batch, engine="c"), cm.run_batch(batch), strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(TesselConfigError, match="unknown engine 'cuda'; choose from python, c"):
        cm.run(x, engine="cuda")


def _with_host_graph(data: bytes, key: str, text: str) -> bytes:
    program = read_tsl(data)
    graphs = {**program.host_graphs, key: text}
    return write_tsl(dataclasses.replace(program, host_graphs=graphs, parsed_host=None))


def test_a_host_op_without_a_c_kernel_is_refused_at_load_by_name():
    cm = _tiny()
    epilogue = cm.program.host_graphs["epilogue"]
    out = epilogue.split("return %", 1)[1].split()[0]
    shape = epilogue.split(f"%{out} = ", 1)[1].split(": ", 1)[1].split("\n", 1)[0]
    text = epilogue.replace(f"  return %{out}",
                            f"  %s = sigmoid(%{out}) : {shape}\n  return %s")
    data = _with_host_graph(cm.binary, "epilogue", text)
    read_tsl(data)  # the Python reader accepts it: the simulator runs sigmoid
    with pytest.raises(TesselFormatError, match=r"host op .*name 'sigmoid'"):
        cengine.CEngine(data, cm.arch)


def test_a_corrupted_binary_names_its_rule():
    data = (CORPUS / "tiny_cnn.tsl").read_bytes()
    assert cengine.check(data)[0] == 0
    assert cengine.check(data[:79])[0] == 1  # TSL_E_TRUNCATED
    assert cengine.check(b"XSL" + data[3:])[0] == 2  # TSL_E_MAGIC
    flipped = bytearray(data)
    flipped[40] ^= 1  # inside the arch hash: the header CRC no longer matches
    code, err, _ = cengine.check(bytes(flipped))
    assert code == 4 and "header CRC-32 mismatch" in cengine.describe(err)


def _decoded_load_binary(arch, data: bytes) -> bytes:
    """A binary whose DMA_IN decodes the weight stream of `data` into the SRAM and whose DMA_OUT
    stores the bytes to its one output."""
    from tessel.binary import DType as IoDType
    from tessel.binary import TensorDescriptor, TslProgram
    from tessel.isa import DType, Engine, Instruction, Opcode
    from tessel.isa.weight_codec import encode

    stream, n = encode(data), len(data)
    end = Instruction.make(Opcode.END)
    load = Instruction.make(Opcode.DMA_LOAD_W, mem=0, ext_addr=0x100, ext_bytes=len(stream),
                            sram_addr=0, out_bytes=n)
    store = Instruction.make(Opcode.DMA_STORE, mem=0, dtype=DType.I8, d0=n, ext_addr=0x10000,
                             ext_s0=1, sram_addr=0, sram_s0=1)
    sig = Instruction.make(Opcode.SIGNAL, engine=Engine.DMA_OUT, token=0)
    wait = Instruction.make(Opcode.WAIT, engine=Engine.DMA_IN, token=0)
    queues = {e: (end,) for e in Engine}
    queues[Engine.DMA_IN] = (load, sig, end)
    queues[Engine.DMA_OUT] = (wait, store, end)
    out = TensorDescriptor("w", IoDType.INT8, (n,), 0, 0x10000)
    return write_tsl(TslProgram(arch.arch_hash_bytes, queues, stream, 0, 0x100, (), (out,)))


def test_a_decoded_weight_load_runs_on_the_c_npu_model():
    """The C NPU model's weight decoder: DMA_LOAD_W decodes the stream into the SRAM; on a
    target without the decoder the instruction traps, naming it."""
    if cengine.available() is not None:
        pytest.skip(cengine.available())
    from tessel.arch import load_preset

    weights = np.round(np.random.default_rng(2).normal(0, 4, 500)).astype(np.int8)
    arch = load_preset("tnpu-s").with_param("wdecoder.enabled", True)
    data = _decoded_load_binary(arch, weights.tobytes())
    assert cengine.check(data)[0] == 0
    (out,) = cengine.CEngine(data, arch).run()
    np.testing.assert_array_equal(out, weights)
    plain = load_preset("tnpu-s")
    with pytest.raises(TesselSimError, match="weight decoder"):
        cengine.CEngine(_decoded_load_binary(plain, weights.tobytes()), plain).run()


def test_a_nan_input_quantises_as_zero_on_every_engine():
    """allow_nonfinite: NaN quantises to the zero point, the code of 0.0 (a cast of NaN to an
    integer is undefined), in the simulator's host graph and the C runtime alike; +-inf to
    the ends of the range, as the largest finite values do."""
    cm = _tiny()
    x = np.random.default_rng(1).standard_normal(cm.c_engine.inputs[0].shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[::7] = np.nan
    flat[3::11], flat[5::13] = np.inf, -np.inf
    want = np.where(np.isnan(x), 0.0, np.clip(x, -1e30, 1e30)).astype(np.float32)
    for engine in Engine:
        got = cm.run(x, engine=engine, allow_nonfinite=True)
        for g, w in zip(got, cm.run(want, engine=engine), strict=True):
            np.testing.assert_array_equal(g, w)


def _host_int4_conv():
    """A compiled model whose one layer, a conv with int4 weights and a stride past the CONV
    field with padding, stays a host op (the weights an i4 constant of the host graph)."""
    from tessel.arch import load_preset
    from tessel.driver import compile_graph
    from tessel.ir import DType, GraphBuilder, Layout, Op, QuantParams, TensorType, verify

    b = GraphBuilder("host_int4")
    x = b.input("x", TensorType((1, 1, 40, 8), DType.I8, Layout.NHWC, QuantParams((0.05,), (0,))))
    w = np.tile(np.array([-8, 7, 0, 1], np.int8), 80).reshape(8, 1, 5, 8)
    y = b.add(Op.QCONV2D, [x, b.constant(w, "w", type_=TensorType(w.shape, DType.I4)),
                           b.constant(np.zeros(8, np.int32), "bias"),
                           b.constant(np.full(8, 1 << 30, np.int32), "mult"),
                           b.constant(np.full(8, -4, np.int32), "shift")],
              dict(stride=(1, 17), padding=(0, 2, 0, 2), dilation=(1, 1), groups=1,
                   layout=Layout.NHWC, in_zp=0, out_zp=0, act_min=-128, act_max=127,
                   dtype=DType.I8))
    cm = compile_graph(verify(b.build([y])), load_preset("tnpu-s"), name="host_int4")
    assert "tensor<8x1x5x8xi4>" in cm.program.host_graphs["prologue"]
    return cm


def test_a_host_conv_with_int4_weights_is_refused_by_the_op_name():
    """An i4 constant in a host graph (int4 weights, held one per byte) parses: the conv the C
    runtime has no kernel for is what it refuses, by name, not the type."""
    if cengine.available() is not None:
        pytest.skip(cengine.available())
    cm = _host_int4_conv()
    with pytest.raises(TesselFormatError, match=r"\(code 113\).*name 'qconv2d'"):
        cengine.CEngine(cm.binary, cm.arch)


def test_a_failed_open_names_the_op_from_the_callers_bytes():
    """A failed open frees its copy of the binary; the error's name then points into the
    caller's bytes, so it reads the same after the freed memory is reused."""
    if cengine.available() is not None:
        pytest.skip(cengine.available())
    cm = _host_int4_conv()
    lib, data = cengine.lib(), bytes(cm.binary)
    for _ in range(20):
        err, status = cengine.Error(), ctypes.c_int(0)
        handle = lib.tslh_open(data, len(data), ctypes.byref(cengine.target_of(cm.arch)),
                               ctypes.byref(cengine.sim_config(cm.arch)), ctypes.byref(err),
                               ctypes.byref(status))
        assert not handle and status.value == 113
        reused = [ctypes.create_string_buffer(b"\xff" * len(data)) for _ in range(4)]
        name = ctypes.create_string_buffer(64)
        assert lib.tslh_error_name(ctypes.byref(err), name, len(name)) >= 0
        assert name.value == b"qconv2d", (name.value, len(reused))
