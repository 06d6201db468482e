"""Power / performance estimate without building a binary: the backend's mapping search and
analytical cost model (tessel.schedule.step) on every NPU op, plus the energy events of the
chosen mappings' instructions. The fast path for design-space exploration; `tessel estimate`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tessel.arch import NpuArch, load_target
from tessel.arch.options import DEFAULT_CALIBRATION_SAMPLES
from tessel.codegen.context import CodegenContext, ConstPool
from tessel.codegen.program import (
    _DummyTensors,
    _emitter,
    _place_data_constants,
    pack_constants,
    plan_dram,
    plan_units,
)
from tessel.codegen.registry import is_view
from tessel.display import Table, fmt_int, short_repr, summary_html
from tessel.ir import Graph
from tessel.ir.macs import node_macs
from tessel.isa import Engine
from tessel.isa.costs import Events, energy_breakdown_pj, instruction_cost, static_energy_pj
from tessel.schedule import search_cache
from tessel.schedule.legalize import legalize
from tessel.schedule.partition import partition
from tessel.schedule.step import Slots, StepWork


@dataclass(frozen=True)
class LayerEstimate:
    name: str
    op: str
    mapping: str
    bound: str
    cycles: int
    macs: int


@dataclass(frozen=True)
class EstimateReport:
    model: str
    target: str
    clock_hz: int
    cycles: int
    latency_ms: float
    macs: int
    mac_utilisation: float
    energy_pj: dict[str, float]
    bytes_read: dict[str, int]
    bytes_written: dict[str, int]
    layers: tuple[LayerEstimate, ...]
    host_ops: tuple[str, ...]

    @property
    def energy_uj(self) -> float:
        return sum(self.energy_pj.values()) / 1e6

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    def summary(self) -> str:
        rd, wr = sum(self.bytes_read.values()), sum(self.bytes_written.values())
        return (f"estimate for {self.model} on {self.target}: {self.cycles:,} cycles = "
                f"{self.latency_ms:.3f} ms; energy {self.energy_uj:.2f} uJ; MAC utilisation "
                f"{100 * self.mac_utilisation:.1f} %; off-chip read {rd / 1e6:.2f} MB, written "
                f"{wr / 1e6:.2f} MB; host ops {len(self.host_ops)}")

    def layer_table(self, top: int | None = None) -> Table:
        """The layers (program order, or the ``top`` slowest) with a header row."""
        layers = list(self.layers) if top is None else sorted(
            self.layers, key=lambda x: -x.cycles)[:top]
        share = [100 * x.cycles / self.cycles if self.cycles else 0.0 for x in layers]
        title = (f"{len(layers)} slowest of {len(self.layers)} layers" if top is not None
                 else f"{len(layers)} layers")
        return Table(("layer", "op", "cycles", "share %", "bound", "MACs", "mapping"),
                     [(x.name, x.op, fmt_int(x.cycles), f"{share[i]:.1f}", x.bound,
                       fmt_int(x.macs), x.mapping) for i, x in enumerate(layers)],
                     numeric=(False, False, True, True, False, True, False), title=title,
                     max_widths=(30, 16, None, None, None, None, 26))

    def __repr__(self) -> str:
        return short_repr("EstimateReport", [
            ("model", repr(self.model)), ("target", repr(self.target)),
            ("cycles", fmt_int(self.cycles)), ("latency_ms", f"{self.latency_ms:.3f}"),
            ("energy_uj", f"{self.energy_uj:.2f}"), ("layers", len(self.layers)),
            ("host_ops", len(self.host_ops))])

    def _repr_html_(self) -> str:
        return summary_html(f"EstimateReport {self.model} on {self.target}", [self.summary()],
                            [self.layer_table(TOP_LAYERS)])

    def _repr_markdown_(self) -> str:
        return self.summary() + "\n\n" + self.layer_table(TOP_LAYERS).markdown()


TOP_LAYERS = 10  # layers shown by the notebook views


def estimate_graph(graph: Graph, arch: NpuArch, *, name: str | None = None,
                   timing_only: bool = False) -> EstimateReport:
    """Estimate an integer graph (as `compile_graph` would compile it) on `arch`.
    `timing_only`: cycles and layers only (the fit check still runs); no energy events, so
    `energy_pj`, `bytes_read` and `bytes_written` are empty. With a search cache active
    (tessel.schedule.search_cache.use) steps searched before are not searched again."""
    graph = legalize(graph)
    part = partition(graph)
    nodes = [n for n in part.npu_nodes if not is_view(n)]
    consts = ConstPool(arch.memory_index(arch.weights_memory))
    base = CodegenContext(arch, graph, {}, consts, arch.memory_index(arch.activations_memory))
    data = _place_data_constants(graph, nodes, ConstPool(consts.memory))
    est_ctx = CodegenContext(arch, graph, _DummyTensors(base), consts, base.act_memory)
    est_ctx.dram.update(data)
    choices = list(plan_units(graph, nodes, base))
    _check_fits(graph, part, nodes, arch, choices)
    layers, events = [], Events()
    for unit, mapping, est in choices:
        if not timing_only:
            events = events + search_cache.derived(
                "events", unit, mapping, est_ctx,
                functools.partial(_unit_events, unit, mapping, est_ctx))
        members = unit.nodes if hasattr(unit, "nodes") else (unit,)
        layers.append(LayerEstimate(unit.name, "+".join(n.op.value for n in members),
                                    str(mapping), est.bound.value, est.cycles,
                                    sum(node_macs(graph, n) for n in members)))
    cycles = sum(x.cycles for x in layers)
    host = tuple(f"%{n.name} = {n.op.value} at {n.loc}" for n in part.host_ops + part.moved_to_host)
    peak = arch.peak_macs_per_cycle
    macs = sum(x.macs for x in layers)  # the model's MACs (BENCHMARKS.md), not re-executed ones
    util = macs / (cycles * peak) if cycles else 0.0
    if timing_only:
        return EstimateReport(name or graph.name, arch.name, arch.clock_hz, cycles,
                              1e3 * cycles / arch.clock_hz, macs, util, {}, {}, {},
                              tuple(layers), host)
    energy = dict(energy_breakdown_pj(events, arch))
    energy["static"] = static_energy_pj(cycles, arch)
    names = [m.name for m in arch.offchip]
    rd = list(events.offchip_read_bytes) + [0] * len(names)
    wr = list(events.offchip_write_bytes) + [0] * len(names)
    return EstimateReport(
        name or graph.name, arch.name, arch.clock_hz, cycles, 1e3 * cycles / arch.clock_hz,
        macs, util, energy, dict(zip(names, rd, strict=False)),
        dict(zip(names, wr, strict=False)), tuple(layers), host)


def _check_fits(graph: Graph, part: Any, nodes: list, arch: NpuArch, choices: list) -> None:
    """The DRAM check `compile` makes (constants packed as codegen packs them, then the
    activation arena): a model that does not compile does not get an estimate either."""
    pool = ConstPool(arch.memory_index(arch.weights_memory))
    ctx = CodegenContext(arch, graph, dict(_place_data_constants(graph, nodes, pool)), pool,
                         arch.memory_index(arch.activations_memory))
    if search_cache.active() is None:
        pack_constants(choices, ctx)
        size = len(pool.blob)
    else:  # the sizes pack_constants would add, per step (kept in the search cache)
        size = search_cache.packed_length(len(pool.blob), [
            n for unit, mapping, _ in choices
            for n in search_cache.derived("const sizes", unit, mapping, ctx,
                                          functools.partial(_const_sizes, unit, mapping, ctx))])
    plan_dram(graph, part.npu_nodes, part.npu_inputs, part.npu_outputs, arch, choices, size)


def _unit_events(unit: Any, mapping: Any, est_ctx: CodegenContext) -> Events:
    return _events(_emitter(unit).step(unit, mapping, est_ctx, emit=False), est_ctx.arch)


def _const_sizes(unit: Any, mapping: Any, ctx: CodegenContext) -> tuple[int, ...]:
    """The bytes each ConstPool.add of the unit's emitted step adds (pack_constants)."""
    rec = search_cache.SizeRecorder(ctx.consts.memory)
    _emitter(unit).step(unit, mapping, dataclasses.replace(ctx, consts=rec), emit=True)
    return tuple(rec.sizes)


def estimate(model: Any, example_inputs: Sequence[Any], *, target: str | NpuArch = "tnpu-s",
             calibration_data: Iterable[Sequence[Any]] | None = None,
             calibration_samples: int = DEFAULT_CALIBRATION_SAMPLES, quant_config: Any = None,
             name: str | None = None) -> EstimateReport:
    """Quantise a PyTorch model and estimate it on `target` (no binary is built)."""
    from tessel.quant.api import quantize

    arch = target if isinstance(target, NpuArch) else load_target(target)
    qm = quantize(model, tuple(example_inputs), calibration_data=calibration_data,
                  config=quant_config, calibration_samples=calibration_samples)
    return estimate_graph(qm.graph, arch, name=name or type(model).__name__)


def _events(work: StepWork, arch: NpuArch) -> Events:
    """Energy events of every instruction of a step (the chosen mapping, all tiles); tiles
    with the same `tile_key` have the same instructions up to addresses, so the same events."""
    total = Events()
    memo: dict = {}
    for g in range(work.group_count):
        group = work.group_fn(g, 0)
        for ins in group.weight_loads + group.param_loads:
            total = total + instruction_cost(ins, arch).events
        for ins in group.vector_setup:
            total = total + instruction_cost(ins, arch, Engine.VECTOR).events
        for t in range(group.tile_count):
            key = work.tile_key(g, t) if work.tile_key is not None else (g, t)
            ev = memo.get(key)
            if ev is None:
                tile = work.tile_fn(g, t, Slots())
                ev = Events()
                for ins in tile.loads + tile.matrix + tile.stores:
                    ev = ev + instruction_cost(ins, arch).events
                for ins in tile.vector:
                    ev = ev + instruction_cost(ins, arch, Engine.VECTOR).events
                memo[key] = ev
            total = total + ev
    return total
