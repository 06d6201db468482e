"""Fuzz harnesses of the model importers: mutated valid `.onnx`, `.tflite`, `.tosa` and `.pt2`
files through the entry points a model file takes (`onnx_module`, `tflite_module`,
`tosa_module`, `load_pt2` and the program's import), which must raise only ``tessel.errors``
types, never hang and never allocate past the importers' size bounds.

The seeds are the small model files of tests/fuzz/corpus/ (make_model_corpus.py). The ONNX
mutator edits the parsed ModelProto (attributes, node inputs and op types, initializer dims and data,
input dims and element types, the opset) and serialises it again, or flips bytes; the TFLite
mutator overwrites aligned 32-bit words and bytes of the flatbuffer with extreme integers and
float bit patterns (NaN, 0, inf scales); the .pt2 mutator edits the archive's JSON members
(the serialised graph and the weights' configuration), truncates or swaps weight files, or
flips bytes of one member, and writes the archive again.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import random
import shutil
import struct
import tempfile
import zipfile
from functools import cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"

INTS = [0, 1, -1, 2, 3, 7, 255, 65535, 2**31 - 1, -(2**31), 2**40, 2**62, -(2**62), 10**9]
FLOAT_BITS = [0x7FC00000, 0x00000000, 0x7F800000, 0xFF800000, 0x80000000, 0x00000001,
              0x3F800000, 0x7F7FFFFF]


@cache
def seeds(suffix: str) -> list[bytes]:
    """The seed files; the importers' modules are imported here, before any timed case (a
    first import of torch can take longer than the hang limit)."""
    import tessel.frontend.importer
    import tessel.frontend.ir_module
    import tessel.frontend.onnx_ops
    import tessel.frontend.pt2
    import tessel.frontend.tflite_ops
    import tessel.frontend.tosa_import
    import tessel.models.loader  # noqa: F401

    files = [p.read_bytes() for p in sorted(CORPUS.glob(f"*{suffix}"))]
    if suffix == ".pt2":
        run_pt2(files[0])  # torch's first archive load initialises for seconds
    return files


def flip_bytes(rng: random.Random, data: bytes, start: int = 0) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(start, len(out))
        out[at] = rng.choice([out[at] ^ (1 << rng.randrange(8)), 0, 0xFF, 0x7F, 0x80])
    return bytes(out)


# ---- ONNX --------------------------------------------------------------------------------------
ONNX_OPS = ["Conv", "Relu", "Gemm", "MatMul", "Add", "Reshape", "Concat", "MaxPool",
            "AveragePool", "GlobalAveragePool", "Flatten", "Softmax", "Clip", "Transpose",
            "Gather", "Slice", "Pad", "ConstantOfShape", "Shape", "Unsqueeze", "Squeeze",
            "QuantizeLinear", "DequantizeLinear", "Resize", "Split", "Expand", "Tile",
            "BatchNormalization", "LayerNormalization", "ReduceMean", "Cast", "Where", "Range",
            "Constant", "Identity", "Mul", "Div", "HardSwish", "Einsum", "Upsample"]


def _mutate_attribute(rng: random.Random, node: Any) -> None:
    from onnx import helper

    if node.attribute and rng.random() < 0.7:
        a = rng.choice(list(node.attribute))
        if a.ints:
            a.ints[rng.randrange(len(a.ints))] = rng.choice(INTS)
            if rng.random() < 0.3:
                del a.ints[rng.randrange(len(a.ints))]
        elif a.type == a.INT:
            a.i = rng.choice(INTS)
        elif a.type == a.FLOAT:
            a.f = rng.choice([float("nan"), 0.0, float("inf"), -1.0, 1e30])
        elif a.type == a.STRING:
            a.s = rng.choice([b"", b"SAME_LOWER", b"VALID", b"\xff", b"tanh"])
        else:
            node.attribute.remove(a)
        return
    name = rng.choice(["kernel_shape", "strides", "pads", "axis", "axes", "perm", "group",
                       "dilations", "keepdims", "shape", "value", "to", "mode", "transB"])
    values = [rng.choice(INTS) for _ in range(rng.randint(1, 5))]
    node.attribute.append(helper.make_attribute(name, values if rng.random() < 0.6 else
                                                rng.choice(INTS)))


def _mutate_tensor(rng: random.Random, t: Any) -> None:
    choice = rng.randrange(5)
    if choice == 0 and t.dims:
        t.dims[rng.randrange(len(t.dims))] = rng.choice(INTS)
    elif choice == 1:
        t.dims.append(rng.choice([0, 1, 2, 2**20]))
    elif choice == 2 and t.raw_data:
        raw = bytearray(t.raw_data)
        at = rng.randrange(0, max(1, len(raw) - 3))
        raw[at:at + 4] = struct.pack("<I", rng.choice(FLOAT_BITS))
        t.raw_data = bytes(raw[:len(t.raw_data)])
    elif choice == 3:
        t.data_type = rng.choice([0, 1, 2, 3, 5, 6, 7, 9, 10, 11, 16, 17, 99])
    else:
        t.raw_data = t.raw_data[: rng.randrange(len(t.raw_data) + 1)]


def mutate_onnx(rng: random.Random, data: bytes) -> bytes:
    import onnx

    if rng.random() < 0.15:
        return flip_bytes(rng, data)
    model = onnx.load_from_string(data)
    g = model.graph
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(10)
        names = [i for n in g.node for i in (*n.input, *n.output)] + ["", "missing"]
        if kind <= 2 and g.node:
            _mutate_attribute(rng, rng.choice(list(g.node)))
        elif kind == 3 and g.node:
            node = rng.choice(list(g.node))
            if node.input and rng.random() < 0.5:
                node.input[rng.randrange(len(node.input))] = rng.choice(names)
            elif node.input:
                del node.input[rng.randrange(len(node.input))]
            else:
                node.input.append(rng.choice(names))
        elif kind == 4 and g.node:
            rng.choice(list(g.node)).op_type = rng.choice(ONNX_OPS)
        elif kind == 5 and g.initializer:
            _mutate_tensor(rng, rng.choice(list(g.initializer)))
        elif kind == 6 and g.input:
            t = rng.choice(list(g.input)).type.tensor_type
            if t.shape.dim and rng.random() < 0.7:
                t.shape.dim[rng.randrange(len(t.shape.dim))].dim_value = rng.choice(INTS)
            else:
                t.elem_type = rng.choice([0, 1, 2, 3, 6, 7, 9, 10, 11, 16])
        elif kind == 7 and g.node:
            del g.node[rng.randrange(len(g.node))]
        elif kind == 8 and g.node:
            i, j = rng.randrange(len(g.node)), rng.randrange(len(g.node))
            node = onnx.NodeProto()
            node.CopyFrom(g.node[j])
            g.node.insert(i, node)
        else:
            model.opset_import[0].version = rng.choice([1, 12, 13, 17, 21, 99, -1])
    try:
        return model.SerializeToString()
    except Exception:  # noqa: BLE001 - protobuf refuses some mutants (out-of-range ints)
        return flip_bytes(rng, data)


def run_onnx(data: bytes) -> str:
    from tessel.errors import TesselError
    from tessel.frontend.onnx_import import onnx_module

    try:
        onnx_module(data)
    except TesselError as exc:
        return type(exc).__name__
    return "ok"


# ---- TFLite ------------------------------------------------------------------------------------
def mutate_tflite(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(8, len(out) - 4) & ~3
        kind = rng.randrange(4)
        if kind == 0:
            struct.pack_into("<i", out, at, rng.choice(INTS[:10]))
        elif kind == 1:
            struct.pack_into("<I", out, at, rng.choice(FLOAT_BITS))
        elif kind == 2:
            value = struct.unpack_from("<i", out, at)[0]
            struct.pack_into("<i", out, at, max(-(2**31), min(2**31 - 1,
                                                              value + rng.choice([-1, 1, 4, -4]))))
        else:
            out[rng.randrange(8, len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def run_tflite(data: bytes) -> str:
    from tessel.errors import TesselError
    from tessel.frontend.tflite_import import tflite_module

    try:
        tflite_module(data)
    except TesselError as exc:
        return type(exc).__name__
    return "ok"


# ---- TOSA --------------------------------------------------------------------------------------
def run_tosa(data: bytes) -> str:
    """A mutated TOSA flatbuffer (mutate_tflite's word and bit edits: both are flatbuffers)
    through `tosa_module`, the entry point of `tessel compile model.tosa`."""
    from tessel.errors import TesselError
    from tessel.frontend.tosa_import import tosa_module

    try:
        tosa_module(data)
    except TesselError as exc:
        return type(exc).__name__
    return "ok"


# ---- .pt2 --------------------------------------------------------------------------------------
PT2_JSON_VALUES: list[Any] = [None, 0, -1, 1, 2**40, -(2**40), "", "x", [], {}, [0], [-1],
                              [2**31], {"as_int": -5}, {"as_int": 2**40}, "aten.relu.default",
                              "torch.float64", 1.5, True]


def _mutate_json(rng: random.Random, raw: bytes) -> bytes:
    from harness import _json_paths, _json_set  # (tests/fuzz is on sys.path: harness.py)

    try:
        doc = json.loads(raw)
    except ValueError:
        return raw
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in _json_paths(doc) if p]
        if not paths:
            break
        value = json.loads(json.dumps(rng.choice(PT2_JSON_VALUES)))  # a fresh copy: no cycles
        doc = _json_set(doc, rng.choice(paths), value, delete=rng.random() < 0.2)
    return json.dumps(doc).encode()


@cache
def _pt2_members(data: bytes) -> tuple[tuple[str, bytes], ...]:
    """A seed archive's members (read once: every case starts from one of two seeds)."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return tuple((i.filename, z.read(i)) for i in z.infolist())


def mutate_pt2(rng: random.Random, data: bytes) -> bytes:
    members = list(_pt2_members(data))
    if rng.random() < 0.1:
        return flip_bytes(rng, data)
    for _ in range(rng.randint(1, 2)):
        k = rng.randrange(len(members))
        name, raw = members[k]
        kind = rng.randrange(6)
        if name.endswith(".json") and kind <= 3:
            raw = _mutate_json(rng, raw)
        elif kind == 4:
            raw = raw[: rng.randrange(len(raw) + 1)] if rng.random() < 0.5 else raw * 2
        elif raw:
            raw = flip_bytes(rng, raw)
        members[k] = (name, raw)
        if rng.random() < 0.05:
            del members[rng.randrange(len(members))]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, raw in members:
            z.writestr(name, raw)
    return buf.getvalue()


def run_pt2(data: bytes) -> str:
    """Load weights-only, take the stored example inputs, walk the loaded program with the
    importer (host fallback on). `tessel compile` exports the loaded module again before that
    walk; torch's export (~0.5 s a case) is left out so the run reaches its case count."""
    from tessel.errors import TesselError
    from tessel.frontend.importer import import_program
    from tessel.frontend.model_input import example_inputs_of
    from tessel.frontend.pt2 import load_pt2
    from tessel.models.loader import check_sample

    path = _pt2_case_path()
    path.write_bytes(data)
    try:
        program = load_pt2(path)
        check_sample(example_inputs_of(program, None), "the example inputs")
        import_program(program, "fuzz", allow_host_ops=True)
    except TesselError as exc:
        return type(exc).__name__
    return "ok"


@cache
def _pt2_case_path() -> Path:
    """The file each case is written to (load_pt2 reads a path, like `tessel compile`): one
    per process, overwritten by every case, removed at exit; in a memory file system where
    there is one (rewriting a file on a disk's file system costs more than loading it)."""
    shm = Path("/dev/shm")
    memory_fs = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    folder = tempfile.mkdtemp(prefix="tessel-fuzz-pt2-", dir=memory_fs)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return Path(folder) / "model.pt2"
