"""Fuzz harnesses for the error contract: the .tsl reader + runtime + simulator, the IR parser +
verifier and the assembler must raise only ``tessel.errors`` types, never hang and never
allocate beyond the target's memories, on any input.

Each harness is a seed corpus (real compiled binaries of tests/fuzz/corpus/, with host graphs
and metadata, and the IR / assembly text they contain), a structured mutator ``mutate(rng,
seed) -> input`` (mutations of the .tsl are written back through ``write_tsl`` or have their
checksums recomputed, so they reach the checks behind the checksums) and ``run(input)``, which
returns an outcome label or raises a non-Tessel exception (a finding). The short seeded runs
(tests/fuzz/test_fuzz_short.py) drive the mutators from Hypothesis; ``make fuzz``
(tests/fuzz/run_fuzz.py) runs them long and reports exceptions, hangs and peak RSS.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
REGRESSIONS = HERE / "regressions"
sys.path.insert(0, str(HERE.parents[0] / "unit" / "binary"))
sys.path.insert(0, str(HERE))

import harness_models as models  # noqa: E402
from tsl_samples import fix_checksums  # noqa: E402

from tessel.binary import read_tsl, write_tsl  # noqa: E402
from tessel.errors import TesselError  # noqa: E402
from tessel.ir import parse_graph, verify  # noqa: E402
from tessel.isa.text import assemble, disassemble  # noqa: E402

SIM_TIMEOUT_NOTE = "a case is a hang when it runs longer than the runner's limit (5 s)"


@dataclass(frozen=True)
class Harness:
    name: str
    seeds: Callable[[], list[Any]]
    mutate: Callable[[random.Random, Any], Any]
    run: Callable[[Any], str]
    suffix: str  # file extension of saved inputs


# ---- seeds --------------------------------------------------------------------------------------
@cache
def tsl_seeds() -> list[bytes]:
    return [p.read_bytes() for p in sorted(CORPUS.glob("*.tsl"))]


@cache
def ir_seeds() -> list[str]:
    texts = []
    for data in tsl_seeds():
        texts.extend(read_tsl(data).host_graphs.values())
    texts.extend(p.read_text() for p in sorted(CORPUS.glob("*.tir")))
    golden = HERE.parents[0] / "golden"
    texts.extend(p.read_text() for p in sorted(golden.rglob("*.tir"))[:40])
    return texts


@cache
def asm_seeds() -> list[str]:
    out = []
    for data in tsl_seeds():
        for instrs in read_tsl(data).streams.values():
            out.append(disassemble(instrs))
    return out


# ---- text mutations (IR and assembly) ----------------------------------------------------------
_NUM = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?|\binf\b|\bnan\b")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
EXTREME_NUMBERS = ["0", "-1", "1", "2", "15", "16", "127", "128", "-129", "255", "256", "65535",
                   "65536", "2147483647", "-2147483648", "4294967296", "9223372036854775808",
                   "1" * 50, "9" * 4400, "inf", "-inf", "nan", "1e308", "1e999", "0.5", "-0.0",
                   "0x10", "0b1", "1" * 30]


def _replace_match(rng: random.Random, text: str, pattern: re.Pattern, choices: list[str]) -> str:
    matches = list(pattern.finditer(text))
    if not matches:
        return text
    m = rng.choice(matches)
    return text[:m.start()] + rng.choice(choices) + text[m.end():]


def mutate_text(rng: random.Random, text: str, words: list[str]) -> str:
    """One to three structured edits: extreme numbers, swapped words, line edits, splices."""
    for _ in range(rng.randint(1, 3)):
        if not text:
            return rng.choice(words)
        kind = rng.randrange(9)
        lines = text.split("\n")
        if kind <= 2:
            text = _replace_match(rng, text, _NUM, EXTREME_NUMBERS)
        elif kind == 3:
            text = _replace_match(rng, text, _WORD, words)
        elif kind == 4:
            i = rng.randrange(len(lines))
            del lines[i]
            text = "\n".join(lines)
        elif kind == 5:
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines.insert(i, lines[j])
            text = "\n".join(lines)
        elif kind == 6:
            at = rng.randrange(len(text) + 1)
            text = text[:at] + rng.choice(["(", ")", "[", "]", "{", "}", "<", ">", ",", "%",
                                           "\"", "\\", "x", ":", "=", "//", "\n", "@", "#",
                                           "\u00e9", "\x00"]) + text[at:]
        elif kind == 7:
            a = rng.randrange(len(text) + 1)
            b = min(len(text), a + rng.randint(1, 40))
            text = text[:a] + text[b:]
        else:
            text = text[: rng.randrange(len(text) + 1)]
    return text


IR_WORDS = ["conv2d", "max_pool2d", "avg_pool2d", "linear", "add", "requantize", "quantize",
            "softmax", "i8", "i32", "f32", "u8", "i16", "bool", "nhwc", "nchw", "stride",
            "padding", "dilation", "axis", "groups", "kernel", "true", "false", "value",
            "dense", "loc", "return", "graph", "resources", "q", "x", "ceil_mode", "shift",
            "multiplier", "zero_point", "layout", "host", "reshape", "transpose", "concat"]
ASM_WORDS = ["DMA_LOAD", "DMA_STORE", "CONV", "MATMUL", "REQUANT", "ELTWISE", "LUT", "POOL",
             "DWCONV", "REDUCE", "COPY", "UNARY", "WAIT", "SIGNAL", "END", "I8", "I16", "I32",
             "d0", "d1", "d2", "d3", "stride_h", "cin", "cout", "mem", "token", "engine"]


def run_ir(text: str) -> str:
    try:
        verify(parse_graph(text, source="fuzz"))
    except TesselError as exc:
        return type(exc).__name__
    return "ok"


def run_asm(text: str) -> str:
    try:
        instrs = assemble(text, source="fuzz")
    except TesselError as exc:
        return type(exc).__name__
    assert assemble(disassemble(instrs)) == instrs, "disassembly does not round-trip"
    return "ok"


# ---- .tsl mutations ---------------------------------------------------------------------------
EXTREME_INTS = [0, 1, -1, 2, 3, 7, 8, 15, 16, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32,
                2**53, 2**63, -(2**63), 10**30]
EXTREME_JSON: list[Any] = [None, True, False, 0, -1, 1, 2**63, 1.5, "", "x", "tiny_cnn", [], {},
                           [0], ["x"], {"x": 1}, [[]], "%x", -(10**20)]


def _json_paths(value: Any, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_json_paths(v, (*path, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value[:8]):
            out.extend(_json_paths(v, (*path, i)))
    return out


def _json_set(root: Any, path: tuple, value: Any, delete: bool) -> Any:
    if not path:
        return value
    parent = root
    for k in path[:-1]:
        parent = parent[k]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return root


def mutate_metadata(rng: random.Random, meta: dict, names: list[str]) -> dict:
    meta = json.loads(json.dumps(meta))
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in _json_paths(meta) if p]
        if not paths:
            break
        path = rng.choice(paths)
        choice = rng.randrange(5)
        if choice == 0:
            meta = _json_set(meta, path, None, delete=True)
        elif choice == 1:
            meta = _json_set(meta, path, rng.choice(names), delete=False)
        elif choice == 2:
            meta = _json_set(meta, path, rng.choice(EXTREME_INTS), delete=False)
        else:
            meta = _json_set(meta, path, rng.choice(EXTREME_JSON), delete=False)
    return meta if isinstance(meta, dict) else {}


def _mutate_instruction(rng: random.Random, instr: Any) -> Any:
    from tessel.isa.instruction import Instruction
    from tessel.isa.table import SPECS

    spec = SPECS[instr.opcode]
    values = instr.as_dict()
    for _ in range(rng.randint(1, 3)):
        f = rng.choice(spec.fields)
        if f.enum is not None:
            values[f.name] = rng.choice(list(f.enum))
        else:
            values[f.name] = rng.choice([f.min, f.max, 0, 1, 2, f.max // 2, f.max - 1,
                                         rng.randint(f.min, f.max), 15, 65535 if f.max >= 65535
                                         else f.max])
            values[f.name] = min(max(values[f.name], f.min), f.max)
    return Instruction.make(instr.opcode, **values)


def _mutate_descriptor(rng: random.Random, desc: Any, names: list[str]) -> Any:
    field = rng.choice(["name", "shape", "address", "memory"])
    if field == "name":
        return dataclasses.replace(desc, name=rng.choice(names))
    if field == "shape":
        shape = list(desc.shape) or [1]
        shape[rng.randrange(len(shape))] = rng.choice([0, 1, 2, 3, 65535, 2**20])
        return dataclasses.replace(desc, shape=tuple(shape))
    return dataclasses.replace(desc, **{field: rng.choice(EXTREME_INTS[:12])})


@cache
def _seed_program(data: bytes) -> Any:
    return read_tsl(data)


def mutate_tsl(rng: random.Random, data: bytes) -> bytes:
    """A structured mutation written back with valid checksums (or a byte-level one)."""
    program = _seed_program(data)
    names = [d.name for d in (*program.inputs, *program.outputs)]
    names += list(program.metadata.get("model_inputs", [])) + ["x", ""]
    kind = rng.randrange(10)
    try:
        if kind <= 1:
            program = dataclasses.replace(
                program, metadata=mutate_metadata(rng, dict(program.metadata), names))
        elif kind <= 3 and program.host_graphs:
            key = rng.choice(sorted(program.host_graphs))
            graphs = dict(program.host_graphs)
            graphs[key] = mutate_text(rng, graphs[key], IR_WORDS + names)
            program = dataclasses.replace(program, host_graphs=graphs)
        elif kind <= 6:
            streams = {e: list(s) for e, s in program.streams.items()}
            engine = rng.choice(sorted(streams, key=lambda e: e.value))
            body = [i for i, ins in enumerate(streams[engine]) if ins.opcode.name != "END"]
            if body:
                i = rng.choice(body)
                streams[engine][i] = _mutate_instruction(rng, streams[engine][i])
            program = dataclasses.replace(program, streams=streams)
        elif kind == 7:
            which = rng.choice(["inputs", "outputs"])
            descs = list(getattr(program, which))
            i = rng.randrange(len(descs))
            descs[i] = _mutate_descriptor(rng, descs[i], names)
            program = dataclasses.replace(program, **{which: tuple(descs)})
        else:
            out = bytearray(data)
            for _ in range(rng.randint(1, 6)):
                at = rng.randrange(80, len(out) - 4)
                if rng.random() < 0.5:
                    out[at] ^= 1 << rng.randrange(8)
                else:
                    struct.pack_into("<I", out, at - at % 4, rng.choice(EXTREME_INTS[:14]) % 2**32)
            return fix_checksums(bytes(out))
        return write_tsl(program)
    except TesselError:  # the writer refused the mutant: mutate the bytes instead
        out = bytearray(data)
        out[rng.randrange(80, len(out))] ^= 1 << rng.randrange(8)
        return fix_checksums(bytes(out))


def _inputs_for(cm: Any, rng: np.random.Generator) -> list[np.ndarray]:
    """Random model inputs of the right shapes (from the prologue or the NPU descriptors)."""
    from tessel.binary.layout import DType as IoDType

    types = {}
    if cm.prologue is not None:
        types.update({v.name: (v.type.shape, v.type.dtype.numpy) for v in cm.prologue.inputs})
    np_of = {IoDType.INT8: np.int8, IoDType.UINT8: np.uint8, IoDType.INT16: np.int16,
             IoDType.INT32: np.int32, IoDType.FLOAT16: np.float16, IoDType.FLOAT32: np.float32}
    for d in cm.program.inputs:
        types.setdefault(d.name, (d.shape, np_of[d.dtype]))
    out = []
    for name in cm.input_names:
        shape, dtype = types.get(name, ((1,), np.float32))
        if int(np.prod(shape)) > 1 << 20:
            shape = (1,)
        out.append((rng.standard_normal(shape) * 4).astype(dtype))
    return out


def run_tsl(data: bytes) -> str:
    """Read; if accepted, load as a CompiledModel, run it once on random inputs and profile it."""
    from tessel.runtime.compiled import CompiledModel

    try:
        program = read_tsl(data)
    except TesselError as exc:
        return "reader:" + type(exc).__name__
    try:
        cm = CompiledModel.from_bytes(data)  # (reads again: the runtime's own entry point)
        cm.run(*_inputs_for(cm, np.random.default_rng(0)), timing=False)
        _ = cm.profile
    except TesselError as exc:
        return "runtime:" + type(exc).__name__
    assert read_tsl(write_tsl(program)) == program, "re-serialised program differs"
    return "ok"


HARNESSES = {
    "tsl": Harness("tsl", tsl_seeds, mutate_tsl, run_tsl, ".tsl"),
    "ir": Harness("ir", ir_seeds, lambda rng, t: mutate_text(rng, t, IR_WORDS), run_ir, ".tir"),
    "asm": Harness("asm", asm_seeds, lambda rng, t: mutate_text(rng, t, ASM_WORDS), run_asm,
                   ".asm"),
    "onnx": Harness("onnx", lambda: models.seeds(".onnx"), models.mutate_onnx, models.run_onnx,
                    ".onnx"),
    "tflite": Harness("tflite", lambda: models.seeds(".tflite"), models.mutate_tflite,
                      models.run_tflite, ".tflite"),
    "pt2": Harness("pt2", lambda: models.seeds(".pt2"), models.mutate_pt2, models.run_pt2,
                   ".pt2"),
    "tosa": Harness("tosa", lambda: models.seeds(".tosa"), models.mutate_tflite,
                    models.run_tosa, ".tosa"),
}


def case_input(harness: Harness, rng: random.Random) -> Any:
    seeds = harness.seeds()
    return harness.mutate(rng, seeds[rng.randrange(len(seeds))])


def save_input(harness: Harness, value: Any, label: str) -> Path:
    """Keep a crashing input as a regression file (tests/fuzz/regressions/<harness>/)."""
    folder = REGRESSIONS / harness.name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{label}{harness.suffix}"
    if isinstance(value, bytes):
        path.write_bytes(value)
    else:
        path.write_text(value, encoding="utf-8", errors="surrogatepass")
    return path


def load_input(path: Path) -> Any:
    if path.suffix in (".tsl", ".onnx", ".tflite", ".tosa", ".pt2"):
        return path.read_bytes()
    return path.read_text(encoding="utf-8", errors="surrogatepass")
