"""A program made ready to simulate: decoded queues, field values and data-independent traps.

Everything here depends only on the program and the architecture, never on the data, so it
is computed once per (program, arch) and cached (``prepared``): running the same program on
many inputs pays for decoding, the static rules of docs/isa.md section 3 and the per-
instruction costs only once. A static trap found here is attached to its instruction and
raised when execution reaches it, so traps keep their execution order.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tessel.arch.types import NpuArch
from tessel.binary.memory import check_placements
from tessel.binary.program import TslProgram
from tessel.errors import TesselConfigError
from tessel.isa.codec import check_stream, decode_stream
from tessel.isa.fields import DType, Engine, ReduceOp
from tessel.isa.footprint import self_overlapping, static_error
from tessel.isa.instruction import Instruction
from tessel.isa.table import Opcode
from tessel.sim.state import surely_disjoint

CONTROL = frozenset({Opcode.WAIT, Opcode.SIGNAL, Opcode.END})


@dataclass(frozen=True, slots=True)
class Op:
    """One instruction of one queue, with its fields as a dict (fast to read)."""

    engine: Engine
    index: int
    opcode: Opcode
    instr: Instruction
    f: dict[str, Any]
    error: str | None  # a data-independent trap, raised when the instruction runs

    def where(self) -> str:
        return f"{self.engine.name} instruction {self.index} ({self.opcode.name})"


@dataclass
class PreparedProgram:
    """Queues indexed by engine value; ``cache`` holds lazily computed static tables."""

    program: TslProgram
    arch: NpuArch
    queues: tuple[tuple[Op, ...], ...]
    cache: dict[str, Any] = field(default_factory=dict)

    @property
    def ops(self) -> list[Op]:
        return [op for q in self.queues for op in q]


def _queue(engine: Engine, stream: Any, arch: NpuArch) -> tuple[Op, ...]:
    if isinstance(stream, bytes):
        instrs = decode_stream(engine, stream)
    else:
        instrs = list(stream)
        check_stream(engine, instrs)
    out = []
    for idx, ins in enumerate(instrs):
        err = None
        if ins.opcode not in CONTROL:
            err = static_error(ins, arch) or write_overlap_error(ins)
        out.append(Op(engine, idx, ins.opcode, ins, ins.as_dict(), err))
    return tuple(out)


def prepare(program: TslProgram, arch: NpuArch) -> PreparedProgram:
    """Check the program against ``arch`` and decode it (no caching; see ``prepared``)."""
    if bytes(program.arch_hash) != arch.arch_hash_bytes:
        raise TesselConfigError(
            f"simulate: the program was compiled for architecture hash "
            f"{bytes(program.arch_hash).hex()[:16]}..., not {arch.name} ({arch.arch_hash[:16]}...)"
        )
    check_placements(program, arch)
    streams = {Engine(k): v for k, v in program.streams.items()}
    queues = tuple(_queue(e, streams[e], arch) if e in streams else () for e in Engine)
    return PreparedProgram(program, arch, queues)


_CACHE: dict[tuple[int, int], tuple[Any, Any, PreparedProgram]] = {}
_CACHE_SIZE = 8


def prepared(program: TslProgram | PreparedProgram, arch: NpuArch) -> PreparedProgram:
    """``prepare`` with a small cache keyed by the identity of (program, arch)."""
    if isinstance(program, PreparedProgram):
        if program.arch is not arch and program.arch.arch_hash != arch.arch_hash:
            raise TesselConfigError("simulate: the prepared program was made for another arch")
        return program
    key = (id(program), id(arch))
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is program and hit[1]() is arch:
        return hit[2]
    prep = prepare(program, arch)
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = (weakref.ref(program), weakref.ref(arch), prep)
    return prep


# ---- destinations written twice -----------------------------------------------------------------
def _dst_pattern(i: Instruction) -> tuple[int, Sequence[int], Sequence[int], int] | None:
    """(base, dims, strides, element bytes) of the bytes an instruction writes, or None."""
    op, f = i.opcode, i.as_dict()
    if op in (Opcode.DMA_LOAD, Opcode.DMA_STORE, Opcode.COPY):
        pre = {Opcode.DMA_LOAD: "sram", Opcode.DMA_STORE: "ext", Opcode.COPY: "dst"}[op]
        dims = [f[f"d{k}"] for k in range(4)]
        return f[f"{pre}_addr"], dims, [f[f"{pre}_s{k}"] for k in range(4)], f["dtype"].nbytes
    if op in (Opcode.ELTWISE, Opcode.LUT, Opcode.UNARY):
        pre = "out" if op == Opcode.ELTWISE else "dst"
        w = {Opcode.ELTWISE: lambda: f["out_dtype"].nbytes, Opcode.UNARY: lambda: 4,
             Opcode.LUT: lambda: f["lut_mode"].dtype.nbytes}[op]()
        dims = [f[f"d{k}"] for k in range(3)]
        return f[f"{pre}_addr"], dims, [f[f"{pre}_s{k}"] for k in range(3)], w
    if op == Opcode.REQUANT:
        w = f["out_dtype"].nbytes
        return f["dst_addr"], (f["ch"], f["rows"]), (w, f["dst_stride"]), w
    if op == Opcode.POOL:
        w = f["dtype"].nbytes
        return (f["out_addr"], (f["ch"], f["out_w"], f["out_h"]),
                (w, f["out_stride_w"], f["out_stride_h"]), w)
    if op == Opcode.REDUCE:
        dims = [f["d0"], f["d1"], f["d2"]]
        kept = [n for k, n in enumerate(dims) if k != f["axis"]]
        w = 4 if f["op"] in (ReduceOp.SUM, ReduceOp.SUMSQ) else DType(f["dtype"]).nbytes
        return f["dst_addr"], kept, (f["dst_s0"], f["dst_s1"]), w
    return None  # accumulator writes: rows cannot overlap (static rule 3); LUT_LOAD: contiguous


def write_overlap_error(i: Instruction) -> str | None:
    """Why ``i`` would write one byte twice (a trap in Tessel's simulator), or None."""
    pat = _dst_pattern(i)
    if pat is None:
        return None
    base, dims, strides, w = pat
    if surely_disjoint(dims, strides, w) or not self_overlapping(base, dims, strides, w):
        return None
    return (f"destination pattern at {base} (dims {list(dims)}, strides {list(strides)}, "
            f"{w}-byte elements) writes some bytes twice")
