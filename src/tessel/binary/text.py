"""Readable text of a whole .tsl program: `program_to_text` (disasm) and `program_from_text` (asm).

    ; comment
    .arch_hash 4f1c...            (64 hex digits)   or   .target tnpu-s
    .input  x dtype=INT8 shape=1x8x8x16 memory=0 address=0x0 q=0.0235/-3
    .output y dtype=INT8 shape=1x10 memory=0 address=0x400 q=[0.5,0.25]/[0,0]/axis=1
    .output s dtype=INT32 shape=scalar memory=0 address=0x500      (rank 0)
    .constants memory=1 address=0x0
    .data 00ff10...               (hex bytes, any number of lines)
    .metadata {"model": "tiny"}
    .host_graph prologue "graph @p(...) {...}"   (host parts: IR text as a JSON string)
    .engine DMA_IN
    DMA_LOAD ...                  (instructions, as tessel.isa.disassemble prints them)
    END

`program_from_text(program_to_text(p)) == p`, so `tessel asm` of `tessel disasm` output writes
the same bytes.
"""

from __future__ import annotations

import json
import re

from tessel.binary.layout import DType, ScaleType
from tessel.binary.program import QuantParams, TensorDescriptor, TslProgram
from tessel.errors import TesselParseError

_DATA_LINE = 64  # bytes per .data line


def program_to_text(program: TslProgram) -> str:
    from tessel.isa import Engine, disassemble

    lines = [f".arch_hash {program.arch_hash.hex()}"]
    lines += [_io_line(".input", d) for d in program.inputs]
    lines += [_io_line(".output", d) for d in program.outputs]
    if program.constants:
        lines.append(f".constants memory={program.constants_memory} "
                     f"address={program.constants_address:#x}")
        data = program.constants
        lines += [f".data {data[i:i + _DATA_LINE].hex()}" for i in range(0, len(data), _DATA_LINE)]
    if program.metadata:
        lines.append(".metadata " + json.dumps(program.metadata, sort_keys=True))
    for key, text in sorted(program.host_graphs.items()):  # host parts: IR text as one JSON line
        lines.append(f".host_graph {key} " + json.dumps(text))
    for engine in Engine:
        if engine in program.streams:
            lines.append(f".engine {engine.name}")
            lines.append(disassemble(program.streams[engine]).rstrip("\n"))
    return "\n".join(lines) + "\n"


def _io_line(directive: str, d: TensorDescriptor) -> str:
    text = (f"{directive} {d.name} dtype={d.dtype.name} shape={'x'.join(map(str, d.shape)) or 'scalar'} "
            f"memory={d.memory} address={d.address:#x}")
    if d.quant is not None:
        q = d.quant
        if q.axis is None:
            text += f" q={q.scales[0]!r}/{q.zero_points[0]}"
        else:
            scales = ",".join(repr(s) for s in q.scales)
            zps = ",".join(str(z) for z in q.zero_points)
            text += f" q=[{scales}]/[{zps}]/axis={q.axis}"
        if q.scale_type is not ScaleType.FLOAT32:
            text += f" scale_type={q.scale_type.name}"
    return text


def program_from_text(text: str, source: str = "<asm>") -> TslProgram:
    """Parse program text; TesselParseError with line and column on any problem."""
    from tessel.isa import Engine, assemble

    state = _State()
    engine_lines: dict[Engine, dict[int, str]] = {}
    current: Engine | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = re.split(r"[#;]", raw, maxsplit=1)[0].rstrip()
        if not line.strip():
            continue
        col = len(line) - len(line.lstrip()) + 1
        if not line.lstrip().startswith("."):
            if current is None:
                raise TesselParseError("instruction before any .engine directive", lineno, col,
                                       source)
            engine_lines[current][lineno] = raw
            continue
        word, _, rest = line.strip().partition(" ")
        if word == ".engine":
            try:
                current = Engine[rest.strip()]
            except KeyError:
                names = ", ".join(e.name for e in Engine)
                raise TesselParseError(f"unknown engine {rest.strip()!r} (one of {names})",
                                       lineno, col + 8, source) from None
            if current in engine_lines:
                raise TesselParseError(f"engine {current.name} given twice", lineno, col, source)
            engine_lines[current] = {}
            continue
        state.directive(word, rest.strip(), lineno, col, source)
    streams = {e: tuple(assemble(_with_line_numbers(ls), source)) for e, ls in engine_lines.items()}
    return state.program(streams, source)


def _with_line_numbers(lines: dict[int, str]) -> str:
    """The engine's lines at their original line numbers (blank elsewhere), for asm errors."""
    last = max(lines, default=0)
    return "\n".join(lines.get(i, "") for i in range(1, last + 1))


class _State:
    def __init__(self) -> None:
        self.arch_hash: bytes | None = None
        self.inputs: list[TensorDescriptor] = []
        self.outputs: list[TensorDescriptor] = []
        self.constants = bytearray()
        self.const_place = (0, 0)
        self.metadata: dict = {}
        self.host_graphs: dict[str, str] = {}

    def directive(self, word: str, rest: str, line: int, col: int, source: str) -> None:
        def fail(msg: str) -> TesselParseError:
            return TesselParseError(msg, line, col, source)

        if word == ".arch_hash":
            try:
                self.arch_hash = bytes.fromhex(rest)
            except ValueError:
                raise fail(f"bad hex arch hash {rest!r}") from None
        elif word == ".target":
            from tessel.arch import load_target
            self.arch_hash = load_target(rest).arch_hash_bytes
        elif word in (".input", ".output"):
            desc = _parse_io(rest, fail)
            (self.inputs if word == ".input" else self.outputs).append(desc)
        elif word == ".constants":
            kv = _pairs(rest.split(), fail)
            self.const_place = (_int(kv.pop("memory", "0"), fail), _int(kv.pop("address", "0"), fail))
            if kv:
                raise fail(f".constants has unknown keys {sorted(kv)}")
        elif word == ".data":
            try:
                self.constants += bytes.fromhex(rest)
            except ValueError:
                raise fail("bad hex in .data") from None
        elif word == ".metadata":
            try:
                self.metadata = json.loads(rest)
            except json.JSONDecodeError as exc:
                raise fail(f"bad JSON in .metadata: {exc.msg}") from None
        elif word == ".host_graph":
            key, _, blob = rest.partition(" ")
            try:
                self.host_graphs[key] = json.loads(blob)
            except json.JSONDecodeError as exc:
                raise fail(f"bad JSON string in .host_graph: {exc.msg}") from None
        else:
            raise fail(f"unknown directive {word!r}")

    def program(self, streams: dict, source: str) -> TslProgram:
        if self.arch_hash is None:
            raise TesselParseError("missing .arch_hash or .target", 1, 1, source)
        return TslProgram(self.arch_hash, streams, bytes(self.constants), self.const_place[0],
                          self.const_place[1], tuple(self.inputs), tuple(self.outputs),
                          self.metadata, self.host_graphs)


def _pairs(tokens: list[str], fail) -> dict[str, str]:
    out = {}
    for tok in tokens:
        key, eq, val = tok.partition("=")
        if not eq:
            raise fail(f"expected key=value, got {tok!r}")
        out[key] = val
    return out


def _int(text: str, fail) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise fail(f"expected an integer, got {text!r}") from None


def _parse_io(rest: str, fail) -> TensorDescriptor:
    name, *tokens = rest.split()
    kv = _pairs(tokens, fail)
    try:
        dtype = DType[kv.pop("dtype")]
        text = kv.pop("shape")
        shape = () if text == "scalar" else tuple(int(d) for d in text.split("x"))
    except (KeyError, ValueError) as exc:
        raise fail(f"I/O descriptor {name!r} needs dtype=NAME and shape=AxBxC ({exc})") from None
    memory, address = _int(kv.pop("memory", "0"), fail), _int(kv.pop("address", "0"), fail)
    quant = None
    if "q" in kv:
        scale_type = ScaleType[kv.pop("scale_type", "FLOAT32")]
        quant = _parse_quant(kv.pop("q"), scale_type, fail)
    if kv:
        raise fail(f"I/O descriptor {name!r} has unknown keys {sorted(kv)}")
    return TensorDescriptor(name, dtype, shape, memory, address, quant)


def _parse_quant(text: str, scale_type: ScaleType, fail) -> QuantParams:
    parts = text.split("/")
    try:
        if len(parts) == 2:
            return QuantParams((float(parts[0]),), (int(parts[1]),), None, scale_type)
        if len(parts) == 3 and parts[2].startswith("axis="):
            scales = tuple(float(s) for s in parts[0].strip("[]").split(","))
            zps = tuple(int(z) for z in parts[1].strip("[]").split(","))
            return QuantParams(scales, zps, int(parts[2][5:]), scale_type)
    except ValueError:
        pass
    raise fail(f"bad quantisation {text!r}: use q=SCALE/ZP or q=[S,...]/[ZP,...]/axis=A")
