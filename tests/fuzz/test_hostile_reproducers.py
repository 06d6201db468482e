"""Hostile inputs as regression tests, in three groups (malformed text and binaries, accepted
instructions that would make the simulator allocate without bound, metadata that disagrees
with the program): the IR parser, verifier, assembler, .tsl reader, runtime and simulator
raise only tessel.errors types on them, and the simulator's memory stays within the target's
memories plus a constant."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "sim"))

from simkit import ARCH, I, program  # noqa: E402

from tessel.binary import read_tsl, write_tsl  # noqa: E402
from tessel.errors import (  # noqa: E402
    TesselFormatError,
    TesselParseError,
    TesselSimError,
    TesselVerifyError,
)
from tessel.ir import parse_graph, verify  # noqa: E402
from tessel.isa import DType, Engine, Opcode  # noqa: E402
from tessel.isa.fields import PoolOp  # noqa: E402
from tessel.isa.text import assemble  # noqa: E402
from tessel.runtime.cengine import available as c_available  # noqa: E402
from tessel.runtime.compiled import CompiledModel  # noqa: E402
from tessel.sim import simulate  # noqa: E402
from tessel.sim.budget import ENV as BUDGET_ENV  # noqa: E402

CORPUS = Path(__file__).resolve().parent / "corpus"
GOOD = """graph @g(%x: tensor<1x2x4x4xf32>) {
  %p = max_pool2d(%x) {kernel = [2, 2], stride = [2, 2], padding = [0, 0, 0, 0]} \
: tensor<1x2x2x2xf32> loc("m" at "m.py":3)
  %c = constant() {value = dense<[1, 2]>} : tensor<2xi8>
  %q = quantize(%x) {dtype = i8, qmax = 127, qmin = -128, scale = 0.5, zero_point = 0} \
: tensor<1x2x4x4xi8, q([0.5, 0.5], [0, 0], axis = 1)>
  return %p, %c, %q
}
"""
LONG = "9" * 4400
# (the failure it guards against, the edit of GOOD that reproduces it, the error class, a
# message part)
IR_CASES = [
    ("OverflowError: int8 constant out of range", ("dense<[1, 2]>", "dense<[1, 300]>"),
     TesselParseError, "is not a i8 integer"),
    ("OverflowError: axis=inf", ("axis = 1", "axis = inf"), TesselParseError, "must be an integer"),
    ("ValueError: NaN in a loc line", ('"m.py":3', '"m.py":nan'), TesselParseError,
     "source line must be an integer"),
    ("ValueError: 4,400-digit attribute", ("qmax = 127", f"qmax = {LONG}"), TesselParseError,
     "out of range"),
    ("ValueError: 4,400-digit dimension", ("tensor<2xi8>", f"tensor<{LONG}xi8>"),
     TesselParseError, "dimension out of range"),
    ("ValueError: 4,400-digit zero point", ("[0, 0], axis", f"[0, {LONG}], axis"),
     TesselParseError, "out of range"),
    ("ZeroDivisionError: pool stride 0", ("stride = [2, 2]", "stride = [0, 2]"),
     TesselVerifyError, "stride 0 and dilation 1 must be >= 1"),
]


def test_good_text_is_valid():
    verify(parse_graph(GOOD))


@pytest.mark.parametrize("what, edit, error, message", IR_CASES, ids=[c[0] for c in IR_CASES])
def test_ir_reproducers_are_tessel_errors(what, edit, error, message):
    text = GOOD.replace(*edit)
    assert text != GOOD
    with pytest.raises(error, match=message):
        verify(parse_graph(text))


@pytest.mark.parametrize("what, edit, error, message", IR_CASES, ids=[c[0] for c in IR_CASES])
def test_ir_reproducers_in_host_graphs_are_format_errors(what, edit, error, message):
    base = read_tsl((CORPUS / "tiny_cnn.tsl").read_bytes())
    graphs = {**base.host_graphs, "prologue": GOOD.replace(*edit)}
    data = write_tsl(dataclasses.replace(base, host_graphs=graphs))
    with pytest.raises(TesselFormatError, match="HOST_GRAPHS.*not valid IR"):
        read_tsl(data)


def test_asm_long_integer_is_a_parse_error():
    with pytest.raises(TesselParseError, match="<asm>:1:.*out of range"):
        assemble(f"DMA_LOAD d0={LONG}")
    with pytest.raises(TesselParseError, match="out of range"):
        assemble(f"WAIT token=0x{'f' * 5000}")


# ---- accepted instructions that would make the simulator allocate without bound ------------
DMA_STORE_45TIB = I(Opcode.DMA_STORE, mem=0, dtype=DType.I8, d0=4, d1=4, d2=65535, d3=65535,
                    ext_addr=0, ext_s0=1, ext_s1=4, ext_s2=0, ext_s3=0, sram_addr=0, sram_s0=1,
                    sram_s1=4, sram_s2=0, sram_s3=0)
CONV_1TIB = I(Opcode.CONV, in_addr=0, in_h=2, in_w=2, in_stride_h=0, in_stride_w=0, cin=65535,
              cout=1, kh=2, kw=2, stride_h=15, stride_w=15, dil_h=15, dil_w=15, out_h=127,
              out_w=127, w_addr=0, w_stride_k=0, w_stride_ci=1, w_stride_co=0, acc_addr=0,
              acc_stride=1)
CONV_IM2COL = I(Opcode.CONV, in_addr=0, in_h=128, in_w=128, in_stride_h=0, in_stride_w=0, cin=16,
                cout=1, kh=15, kw=15, out_h=114, out_w=114, w_addr=0, w_stride_k=0,
                w_stride_ci=1, w_stride_co=0, acc_addr=0, acc_stride=1)
DWCONV_FRAME = I(Opcode.DWCONV, in_addr=0, in_h=1, in_w=1, in_stride_h=0, in_stride_w=0,
                 ch=4096, kh=15, kw=15, stride_h=15, stride_w=15, dil_h=15, dil_w=15,
                 out_h=2, out_w=2, w_addr=0, w_stride_k=0, acc_addr=0, acc_stride=4096)
POOL_ALIAS = I(Opcode.POOL, in_addr=0, in_h=4095, in_w=4095, in_stride_h=0, in_stride_w=0, ch=1,
               dtype=DType.I8, op=PoolOp.MAX, kh=1, kw=1, out_h=1, out_w=1, out_addr=0,
               act_min=-128, act_max=127)
HOSTILE = [
    ("DMA_STORE zero outer strides d2=d3=65535", Engine.DMA_OUT, DMA_STORE_45TIB,
     "sram has 68717379600 elements"),
    ("CONV zero strides cin=65535 stride/dilation 15", Engine.MATRIX, CONV_1TIB,
     "window frame of .* elements exceeds 64 x"),
    ("CONV 15x15 im2col of an aliased tile", Engine.MATRIX, CONV_IM2COL,
     "im2col of .* elements exceeds 64 x"),
    ("DWCONV dilated frame", Engine.VECTOR, DWCONV_FRAME, "window frame"),
    ("POOL tile aliased by zero strides", Engine.VECTOR, POOL_ALIAS, "in has 16769025 elements"),
]


def _memories(arch) -> int:
    return (sum(m.size_bytes for m in arch.offchip) + arch.onchip.sram_bytes
            + 4 * arch.derived.acc_entries + 2 * arch.onchip.lut_entries)


@pytest.mark.parametrize("what, engine, instr, message", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_instruction_traps_statically_with_bounded_memory(what, engine, instr, message):
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(TesselSimError, match=f"{engine.name} instruction 0.*{message}"):
            simulate(program({engine: [instr]}), ARCH, {})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # the simulator's memory: the target's memories plus a constant (here: 16 MiB)
    assert peak <= _memories(ARCH) + 16 * 2**20, f"{what}: peak traced allocation {peak} B"
    assert time.perf_counter() - t0 < 5


def test_irregular_destination_overlap_is_decided_without_enumeration():
    # interleaved strides (not nested), 255^3 elements: decided in closed form, quickly
    instr = I(Opcode.DMA_LOAD, mem=0, dtype=DType.I8, d0=64, d1=64, d2=64, ext_addr=0,
              ext_s0=1, ext_s1=64, ext_s2=4096, sram_addr=0, sram_s0=3, sram_s1=5, sram_s2=7)
    t0 = time.perf_counter()
    with pytest.raises(TesselSimError, match="writes some bytes twice"):
        simulate(program({Engine.DMA_IN: [instr]}), ARCH, {})
    assert time.perf_counter() - t0 < 5


# ---- metadata that disagrees with the program ---------------------------------------------
def _mutant(edit) -> bytes:
    base = read_tsl((CORPUS / "tiny_cnn.tsl").read_bytes())
    meta = dict(base.metadata)
    edit(meta)
    return write_tsl(dataclasses.replace(base, metadata=meta))


def _layer(meta, key, value):
    layers = [dict(x) for x in meta["layers"]]
    if value is None:
        del layers[0][key]
    else:
        layers[0][key] = value
    meta["layers"] = layers


METADATA_CASES = [
    ("KeyError: model input not in program", lambda m: m.update(model_inputs=["nope"]),
     "the prologue needs 'x'"),
    ("KeyError: model output produced nowhere", lambda m: m.update(model_outputs=["nope"]),
     "model output 'nope' is produced by no part"),
    ("TypeError: model_outputs a number", lambda m: m.update(model_outputs=1.5),
     "'model_outputs' must be a list of strings"),
    ("KeyError: layer without engine index", lambda m: _layer(m, "first", {"DMA_IN": 0}),
     "first/last index of engine"),
    ("IndexError: layer range past the stream", lambda m: _layer(
        m, "last", {**m["layers"][0]["last"], "VECTOR": 10**6}), "not a range inside"),
    ("TypeError: layer index a string", lambda m: _layer(
        m, "first", {**m["layers"][0]["first"], "MATRIX": "0"}), "must be integers"),
    ("KeyError: layer without mapping", lambda m: _layer(m, "mapping", None), "has no 'mapping'"),
    ("TypeError: layer not an object", lambda m: m.update(layers=[3]), "must be an object"),
    ("TypeError: estimated_cycles a string", lambda m: _layer(m, "estimated_cycles", "9"),
     "estimated_cycles must be an integer"),
    ("newer metadata version", lambda m: m.update(metadata_version=99), "newer than this reader"),
    ("TypeError: arena a float", lambda m: m.update(arena_peak_bytes=1.5), "arena_peak_bytes"),
    # found by `run_fuzz.py --harness tsl` after the several-region merge (fallback.py:80)
    ("AttributeError: fallback a string", lambda m: m.update(fallback="x"),
     "'fallback' must be an object"),
    ("fallback host ops not lists", lambda m: m.update(fallback={
        **m["fallback"], "host_ops": {"unsupported op": 3}}), "'fallback' must be an object"),
]

# several NPU regions (format 1.1): the reader walks prologue, region 1, host_1, region 2, ...
REGION_CASES = [
    ("regions not a list", lambda m: m.update(npu_regions=3), "'npu_regions' must be"),
    ("region without ends", lambda m: _region(m, "ends", None), "needs inputs, outputs and ends"),
    ("ends past the stream", lambda m: _region(m, "ends", {
        k: 10**6 for k in m["npu_regions"][0]["ends"]}), "not within the streams"),
    ("regions swapped", lambda m: m.update(npu_regions=m["npu_regions"][::-1]),
     "npu_regions"),
    ("one region for three host parts", lambda m: m.update(npu_regions=[{
        "inputs": m["npu_regions"][0]["inputs"], "outputs": m["npu_regions"][1]["outputs"],
        "ends": m["npu_regions"][1]["ends"]}]), "do not fit 1 NPU region"),
]


def _region(meta, key, value):
    regions = [dict(r) for r in meta["npu_regions"]]
    if value is None:
        del regions[0][key]
    else:
        regions[0][key] = value
    meta["npu_regions"] = regions


@pytest.mark.parametrize("what, edit, message", REGION_CASES, ids=[c[0] for c in REGION_CASES])
def test_region_metadata_disagreeing_with_program_is_a_format_error(what, edit, message):
    base = read_tsl((CORPUS / "tiny_regions.tsl").read_bytes())
    assert len(base.metadata["npu_regions"]) == 2 and "host_1" in base.host_graphs
    meta = dict(base.metadata)
    edit(meta)
    with pytest.raises(TesselFormatError, match=f"METADATA.*{message}"):
        read_tsl(write_tsl(dataclasses.replace(base, metadata=meta)))


@pytest.mark.parametrize("what, edit, message", METADATA_CASES, ids=[c[0] for c in METADATA_CASES])
def test_metadata_disagreeing_with_program_is_a_format_error(what, edit, message):
    with pytest.raises(TesselFormatError, match=f"METADATA.*{message}"):
        read_tsl(_mutant(edit))


def test_valid_corpus_runs_and_profiles():
    import numpy as np

    for path in sorted(CORPUS.glob("*.tsl")):
        cm = CompiledModel.from_bytes(path.read_bytes())
        shape = cm.prologue.inputs[0].type.shape
        out = cm.run(np.zeros(shape, np.float32))
        assert len(out) == len(cm.output_names) and cm.profile.cycles > 0


def test_bad_arch_metadata_is_a_format_error():
    data = _mutant(lambda m: m.update(arch={"onchip": 3}))
    with pytest.raises(TesselFormatError, match="metadata 'arch'"):
        CompiledModel.from_bytes(data)


def test_host_memory_exhaustion_is_a_tessel_error(monkeypatch):
    import numpy as np

    from tessel.errors import TesselConfigError
    from tessel.sim import instr, state

    copy = I(Opcode.DMA_LOAD, mem=0, dtype=DType.I8, d0=4, ext_addr=0, ext_s0=1, sram_addr=0,
             sram_s0=1)
    prog = program({Engine.DMA_IN: [copy]})

    def out_of_memory(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setitem(instr.BUILDERS, Opcode.DMA_LOAD, lambda op, prep: out_of_memory)
    with pytest.raises(TesselSimError, match="DMA_IN instruction 0.*ran out of memory"):
        simulate(prog, ARCH, {})
    monkeypatch.setattr(state.np, "zeros", out_of_memory)
    with pytest.raises(TesselConfigError, match="cannot map the memories"):
        simulate(prog, ARCH, {})
    monkeypatch.setattr(state.np, "zeros", np.zeros)


# ---- an architecture in the metadata that declares more memory than the budget ------------
HIGH = (4 << 30) - 4096  # an address near the top of a 4 GiB off-chip memory


def _arch_4gib(program_edit=None) -> bytes:
    """tiny_cnn.tsl with metadata 'arch' declaring 4 GiB of off-chip memory and the header's
    arch hash recomputed (so the reader and the runtime accept it); `program_edit` moves parts
    of the program into the high addresses."""
    from tessel.arch import arch_from_dict

    base = read_tsl((CORPUS / "tiny_cnn.tsl").read_bytes())
    meta = json.loads(json.dumps(base.metadata))
    meta["arch"]["offchip"][0]["size_bytes"] = 4 << 30
    program = dataclasses.replace(base, metadata=meta,
                                  arch_hash=arch_from_dict(meta["arch"]).arch_hash_bytes)
    return write_tsl(program_edit(program) if program_edit else program)


def _output_at_the_top(program):
    """The output tensor and the DMA that stores it moved to HIGH."""
    from tessel.isa.instruction import Instruction

    streams = {e: [Instruction.make(i.opcode, **{**i.as_dict(), "ext_addr": HIGH})
                   if i.opcode is Opcode.DMA_STORE else i for i in s]
               for e, s in program.streams.items()}
    assert any(i.opcode is Opcode.DMA_STORE for s in streams.values() for i in s)
    outputs = tuple(dataclasses.replace(d, address=HIGH) for d in program.outputs)
    return dataclasses.replace(program, streams=streams, outputs=outputs)


# runs `tessel ARGS...` and, at exit, writes its own peak RSS (VmHWM, kB) to the file in argv[1]
_MEASURED_CLI = """import atexit, runpy, sys
def _peak(path):
    hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM:')]
    open(path, 'w').write(hwm[0].split()[1])
atexit.register(_peak, sys.argv[1])
sys.argv = ['tessel'] + sys.argv[2:]
runpy.run_module('tessel', run_name='__main__')
"""


def _cli_run(tmp_path, data: bytes, engine: str) -> tuple[int, list[str], float]:
    """`tessel run --engine E` in a child process: exit code, stderr lines other than progress
    lines, and the child's peak RSS in MiB. The peak is the child's own VmHWM after exec: the
    rusage of a child also counts the RSS of the (test worker) process it was forked from."""
    import subprocess

    import numpy as np

    binary, x = tmp_path / f"arch4g_{engine}.tsl", tmp_path / "x.npy"
    peak_file = tmp_path / "peak_kib"
    binary.write_bytes(data)
    np.save(x, np.zeros((1, 3, 8, 8), np.float32))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    env.pop(BUDGET_ENV, None)
    proc = subprocess.run([sys.executable, "-c", _MEASURED_CLI, str(peak_file), "run",
                           "--engine", engine, "--input", str(x), str(binary)],
                          capture_output=True, text=True, env=env, timeout=600)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("[")]
    return proc.returncode, lines, int(peak_file.read_text()) / 1024


ENGINES = ["python", pytest.param("c", marks=pytest.mark.skipif(
    c_available() is not None, reason=str(c_available())))]


@pytest.mark.parametrize("engine", ENGINES)
def test_declared_4gib_memory_that_the_program_does_not_touch_runs_lazily(tmp_path, engine):
    """Declaring a large memory costs nothing: only the bytes the program can touch count
    (a 1 GiB off-chip memory is a real target's)."""
    code, lines, peak = _cli_run(tmp_path, _arch_4gib(), engine)
    assert code == 0, lines
    assert peak < 1024


@pytest.mark.parametrize("engine", ENGINES)
def test_4gib_memory_touched_at_its_top_is_refused_before_allocating(tmp_path, engine):
    code, lines, peak = _cli_run(tmp_path, _arch_4gib(_output_at_the_top), engine)
    assert code == 1
    assert len(lines) == 1 and lines[0].startswith("tessel run: error: "), lines
    assert "more than the simulator's budget of 1024 MiB" in lines[0]
    assert peak < 1024
