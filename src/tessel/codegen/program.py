"""Backend of one NPU region: choose a mapping per op (cost model + search), plan DRAM, emit
token-ordered instruction streams, pack constants, describe I/O -> a TslProgram."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessel.arch import NpuArch
from tessel.binary import DType as BinDType
from tessel.binary import QuantParams as BinQuant
from tessel.binary import TensorDescriptor, TslProgram
from tessel.codegen import ops_fused, resident
from tessel.codegen.context import CodegenContext, ConstPool, DramTensor, align
from tessel.codegen.emit import emit_step
from tessel.codegen.ops_fused import FusedPair
from tessel.codegen.registry import DATA_MOVEMENT_OPS, emitter_for, is_view
from tessel.codegen.streams import Streams
from tessel.errors import TesselCompileError
from tessel.ir import DType, Graph, Node
from tessel.isa import Engine
from tessel.progress import task
from tessel.schedule import search_cache
from tessel.schedule.memory import ArenaPlan, plan_arena
from tessel.schedule.step import Estimate, estimate_step

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


def compile_region(graph: Graph, nodes: Sequence[Node], inputs: Sequence[str],
                   outputs: Sequence[str], arch: NpuArch, metadata: dict[str, Any],
                   units: list | None = None, region_sizes: Sequence[int] | None = None,
                   residency: bool = False) -> RegionProgram:
    """Compile the NPU nodes `nodes` (in order) of `graph`; `inputs` / `outputs` are the
    boundary values (they become the program's I/O descriptors). `region_sizes`: how many of
    `nodes` each NPU region has (one region if None); regions share one DRAM arena and one
    constant pool, their steps are never fused across a boundary, and the instruction index
    where each region ends is returned. `units`: the steps and mappings to use instead of
    searching (tests). `residency`: keep activations on chip between steps where the cost
    model finds it faster (experimental, codegen/resident.py)."""
    wmem = arch.memory_index(arch.weights_memory)
    amem = arch.memory_index(arch.activations_memory)
    consts = ConstPool(wmem)
    work_nodes = [n for n in nodes if not is_view(n)]
    data_consts = _place_data_constants(graph, work_nodes, consts)
    # constants first when weights and activations share a memory: the arena follows them
    ctx = CodegenContext(arch, graph, dict(data_consts), consts, amem)
    if units is not None:
        per_region = [list(units)]
    else:
        per_region = [plan_units(graph, [n for n in group if not is_view(n)], ctx)
                      for group in _split(nodes, region_sizes)]
    choices = [c for group in per_region for c in group]
    pack_constants(choices, ctx)
    arena = plan_dram(graph, nodes, inputs, outputs, arch, choices, len(consts.blob))
    pool = ConstPool(wmem)
    _place_data_constants(graph, work_nodes, pool)
    ctx = CodegenContext(arch, graph, {**arena.tensors, **data_consts}, pool, amem)
    residents = (_plan_residents(graph, nodes, inputs, outputs, per_region, ctx, wmem)
                 if residency else None)
    streams = Streams()
    layers = []
    ends = []
    k = -1
    for group in per_region:
        for unit, mapping, est in group:
            k += 1
            first = {e.name: len(streams.queues[e]) for e in Engine}
            work = _emitter(unit).step(unit, mapping, ctx, emit=True)
            if residents is not None and residents[k]:
                work = resident.rewrite_step(work, residents[k])
                est = estimate_step(work, arch)
            emit_step(work, streams)
            last = {e.name: len(streams.queues[e]) - 1 for e in Engine}
            members = unit.nodes if isinstance(unit, FusedPair) else (unit,)
            layers.append(LayerPlan(unit.name, "+".join(n.op.value for n in members),
                                    str(members[-1].loc), str(mapping), est, first, last,
                                    tuple(n.name for n in members)))
        ends.append({e.name: len(streams.queues[e]) for e in Engine})
    assert bytes(ctx.consts.blob) == bytes(consts.blob), "constant packing is not deterministic"
    queues = streams.finish()
    ends[-1] = {e.name: len(queues[e]) for e in Engine}
    program = TslProgram(
        arch.arch_hash_bytes, queues, bytes(ctx.consts.blob), wmem, 0,
        tuple(_descriptor(graph, n, arena.tensors[n]) for n in inputs),
        tuple(_descriptor(graph, n, arena.tensors[n]) for n in outputs), metadata)
    return RegionProgram(program, tuple(layers), arena.peak_bytes, arena.naive_bytes,
                         tuple(ends))


def _plan_residents(graph: Graph, nodes: Sequence[Node], inputs: Sequence[str],
                    outputs: Sequence[str], per_region: list, ctx: CodegenContext, wmem: int
                    ) -> list[list[resident.Resident]]:
    """Per step, the resident tensors it reads or writes on chip (codegen/resident.py)."""
    alias = {n.name: n.inputs[0] for n in nodes if is_view(n)}

    def root(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name

    scratch = CodegenContext(ctx.arch, graph, ctx.dram, ConstPool(wmem), ctx.act_memory)
    works, writes, reads, regions = [], [], [], []
    for r, group in enumerate(per_region):
        for unit, mapping, _ in group:
            members = unit.nodes if isinstance(unit, FusedPair) else (unit,)
            inner = {n.name for n in members[:-1]}
            works.append(_emitter(unit).step(unit, mapping, scratch, emit=True))
            writes.append(root(members[-1].name))
            reads.append({root(i) for n in members for i in n.inputs
                          if i not in inner and graph.constant_value(i) is None})
            regions.append(r)
    excluded = {root(n) for n in list(inputs) + list(outputs)}
    per_step, _ = resident.plan_step_residents(works, writes, reads, regions, ctx.dram,
                                               excluded, ctx.arch)
    return per_step


def _split(nodes: Sequence[Node], sizes: Sequence[int] | None) -> list[list[Node]]:
    """`nodes` cut into consecutive groups of `sizes` (one group if None)."""
    if sizes is None:
        return [list(nodes)]
    if sum(sizes) != len(nodes) or any(k < 1 for k in sizes):
        raise ValueError(f"region sizes {list(sizes)} do not split {len(nodes)} nodes")
    out, k = [], 0
    for size in sizes:
        out.append(list(nodes[k:k + size]))
        k += size
    return out


def pack_constants(choices: Sequence, ctx: CodegenContext) -> None:
    """Add every step's constants to ``ctx.consts`` in program order (as codegen packs them)."""
    for unit, mapping, _ in choices:
        _emitter(unit).step(unit, mapping, ctx, emit=True)


def plan_dram(graph: Graph, nodes: Sequence[Node], inputs: Sequence[str],
              outputs: Sequence[str], arch: NpuArch, choices: Sequence,
              consts_bytes: int) -> ArenaPlan:
    """Where constants and activations go in DRAM, checked against the memories' sizes: the one
    check of "does it fit" that `compile` and `estimate` (and so `explore`) share. Raises a
    TesselCompileError naming the memory and the bytes needed."""
    wmem = arch.memory_index(arch.weights_memory)
    amem = arch.memory_index(arch.activations_memory)
    wmemory, amemory = arch.offchip[wmem], arch.offchip[amem]
    if consts_bytes > wmemory.size_bytes:
        raise TesselCompileError(f"constants need {consts_bytes} bytes but memory "
                                 f"'{wmemory.name}' has {wmemory.size_bytes}")
    base = align(consts_bytes, 4096) if wmem == amem else 0
    if base > amemory.size_bytes:
        raise TesselCompileError(f"constants need {base} bytes (aligned to 4096, activations "
                                 f"follow them) but memory '{amemory.name}' has "
                                 f"{amemory.size_bytes}")
    fused = frozenset(u.first.name for u, _, _ in choices if isinstance(u, FusedPair))
    return plan_arena(graph, nodes, inputs, outputs, amem, base, amemory.size_bytes, fused)


def _place_data_constants(graph: Graph, nodes: Sequence[Node], pool: ConstPool
                          ) -> dict[str, DramTensor]:
    """Constants that data-movement ops read like activations (e.g. ViT's class token, an
    operand of concat) go to the constant pool first, as DRAM tensors."""
    out = {}
    for node in nodes:
        if node.op not in DATA_MOVEMENT_OPS:
            continue
        for name in node.inputs:
            value = graph.constant_value(name)
            if value is not None and name not in out:
                t = graph.type_of(name)
                arr = np.ascontiguousarray(value.astype(t.dtype.numpy.newbyteorder("<")))
                out[name] = DramTensor(pool.memory, pool.add(arr), t.shape, t.dtype)
    return out


Unit = Node | FusedPair


def plan_units(graph: Graph, nodes: Sequence[Node], ctx: CodegenContext
               ) -> list[tuple[Unit, Any, Estimate]]:
    """The steps of the region with their mappings: each node alone, or a fusible pair as one
    cascaded step when its best estimate beats the two layers' estimates added up."""
    out: list[tuple[Unit, Any, Estimate]] = []
    k = 0
    with task("mapping search", total=len(nodes)) as bar:
        while k < len(nodes):
            node = nodes[k]
            alone = _choose(node, ctx)
            nxt = nodes[k + 1] if k + 1 < len(nodes) else None
            if nxt is not None and ops_fused.fusible(graph, node, nxt):
                second = _choose(nxt, ctx)
                pair = ops_fused.FusedPair(node, nxt)
                fused = _choose(pair, ctx, required=False)
                if fused is not None and fused[1].cycles < alone[1].cycles + second[1].cycles:
                    out.append((pair, *fused))
                    k += 2
                    bar.advance(2)
                    continue
            out.append((node, *alone))
            k += 1
            bar.advance()
    return out


def _emitter(unit: Unit):
    return ops_fused if isinstance(unit, FusedPair) else emitter_for(unit)


def _choose(node: Unit, ctx: CodegenContext, *, required: bool = True
            ) -> tuple[Any, Estimate] | None:
    """The mapping with the fewest estimated cycles: every candidate ranked on a sampled
    estimate, the best few estimated in full (ties: first candidate, deterministic); the
    search, its closed-form pruning and its cache: tessel.schedule.search_cache."""
    est_ctx = CodegenContext(ctx.arch, ctx.graph, _DummyTensors(ctx), ctx.consts, ctx.act_memory)
    return search_cache.choose(node, ctx, _emitter(node), est_ctx, required=required)


class _DummyTensors(dict):
    """DRAM placement stand-in for estimation: the tensors already placed (data constants such
    as ViT's class token, in the weights memory) where they are, every other one at address 0
    of the activation memory (addresses do not change costs, memories do)."""

    def __init__(self, ctx: CodegenContext):
        super().__init__(ctx.dram)
        self._ctx = ctx

    def __missing__(self, name: str):
        from tessel.codegen.context import DramTensor
        t = self._ctx.graph.type_of(name)
        self[name] = DramTensor(self._ctx.act_memory, 0, t.shape, t.dtype)
        return self[name]


def _descriptor(graph: Graph, name: str, t) -> TensorDescriptor:
    ty = graph.type_of(name)
    quant = None
    if ty.quant is not None:
        quant = BinQuant(ty.quant.scale, ty.quant.zero_point, ty.quant.axis)
    return TensorDescriptor(name, _BIN_DTYPE[ty.dtype], ty.shape, t.memory, t.address, quant)
