"""Emit a Schedule (tessel.schedule.plan): every step's work emitted once, in order, into
token-ordered instruction streams, with the schedule's constants, the I/O descriptors, the
metadata (tessel.emit.metadata) and the host parts -> one TslProgram, and what was decided per
layer (for the profile and the report)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tessel.binary import DType as BinDType
from tessel.binary import QuantParams as BinQuant
from tessel.binary import TensorDescriptor, TslProgram
from tessel.emit.compress import compress_constants
from tessel.emit.metadata import layer_records, region_records
from tessel.emit.step import emit_step
from tessel.emit.streams import Streams
from tessel.ir import DType, Graph, print_graph
from tessel.isa import Engine
from tessel.lower.partition import Partition
from tessel.schedule.estimate import Estimate
from tessel.schedule.plan import check_constants
from tessel.schedule.result import Schedule

_BIN_DTYPE = {DType.I8: BinDType.INT8, DType.I16: BinDType.INT16, DType.I32: BinDType.INT32,
              DType.U8: BinDType.UINT8, DType.F32: BinDType.FLOAT32}


@dataclass(frozen=True)
class LayerPlan:
    """What the backend decided for one op (for the profile and the report)."""

    name: str
    op: str
    loc: str
    mapping: str
    estimate: Estimate
    first_instr: dict[str, int]  # engine name -> index of the step's first instruction
    last_instr: dict[str, int]
    nodes: tuple[str, ...] = ()  # the IR nodes of the step (two when fused)


@dataclass(frozen=True)
class RegionProgram:
    program: TslProgram
    layers: tuple[LayerPlan, ...]
    arena_peak: int
    arena_naive: int
    # per NPU region: engine name -> index one past its last instruction (the last region's
    # ends are the queue lengths, END included); the runtime stops there to run host ops
    region_ends: tuple[dict[str, int], ...] = ()


def emit(schedule: Schedule, metadata: dict[str, Any], part: Partition | None = None
         ) -> RegionProgram:
    """The program of a schedule: each step's work emitted once, in order, into token-ordered
    streams; the schedule's constant blob; the I/O descriptors where the schedule put them;
    `metadata` completed with the arena, the layers and (given the partition the schedule's
    regions come from) the regions' boundaries, and the partition's host parts."""
    arch, graph = schedule.arch, schedule.graph
    streams = Streams()
    layers = []
    ends = []
    for r in range(schedule.region_count):
        for step in schedule.region_steps(r):
            first = {e.name: len(streams.queues[e]) for e in Engine}
            emit_step(step.work, streams, prefetched=step.prefetched, prefetch=step.prefetch)
            last = {e.name: len(streams.queues[e]) - 1 for e in Engine}
            members = step.nodes
            layers.append(LayerPlan(step.name, step.op, str(members[-1].loc), str(step.mapping),
                                    step.estimate, first, last, tuple(n.name for n in members)))
        ends.append({e.name: len(streams.queues[e]) for e in Engine})
    queues = streams.finish()
    ends[-1] = {e.name: len(queues[e]) for e in Engine}
    tensors = schedule.tensors
    meta = {**metadata, "arena_peak_bytes": schedule.arena_peak,
            "arena_naive_bytes": schedule.arena_naive, "layers": layer_records(graph, layers)}
    hosts: dict[str, str] = {}
    if part is not None:
        if (regions := region_records(part, ends)) is not None:
            meta["npu_regions"] = regions
        hosts = {key: print_graph(g) for key, g in zip(part.host_keys(), part.hosts, strict=True)
                 if g.outputs and (g.nodes or g.inputs)}
    packed = compress_constants(queues, schedule.constants.blob, schedule.constants.memory, arch)
    check_constants(arch, len(packed.blob))  # the schedule's check, on the bytes stored
    program = TslProgram(
        arch.arch_hash_bytes, packed.queues, packed.blob, schedule.constants.memory, 0,
        tuple(_descriptor(graph, n, tensors[n]) for n in schedule.inputs),
        tuple(_descriptor(graph, n, tensors[n]) for n in schedule.outputs), meta, hosts)
    return RegionProgram(program, tuple(layers), schedule.arena_peak, schedule.arena_naive,
                         tuple(ends))


def _descriptor(graph: Graph, name: str, t) -> TensorDescriptor:
    ty = graph.type_of(name)
    quant = None
    if ty.quant is not None:
        quant = BinQuant(ty.quant.scale, ty.quant.zero_point, ty.quant.axis)
    return TensorDescriptor(name, _BIN_DTYPE[ty.dtype], ty.shape, t.memory, t.address, quant)
