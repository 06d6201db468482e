"""Partition an integer graph into alternating host (CPU) segments and NPU regions.

    host 0 (prologue) -> NPU region 1 -> host 1 -> NPU region 2 -> ... -> host N (epilogue)

NPU ops (tessel.ops.registry.npu_supported) run on the NPU; everything else (quantise /
dequantise at the boundaries, gathers, float ops left by the quantiser) on the host through the
golden model's kernels. Every node goes to the earliest stage of its kind that follows all of
its operands' stages (stage 0, 2, 4, ... host; 1, 3, ... NPU), so a host op in the middle of
the graph splits the NPU work into as many regions as the graph needs and nothing after it is
sent to the host. A region with no real NPU work (only views) runs on the host instead.

Values cross between stages by name through the runtime: any value (a graph input, a constant,
a result of any earlier stage) can be read by any later stage or be a graph output. The
prologue declares (and hands on) every graph input no NPU region reads, so the binary records
the type of each input the caller passes. With
no_fallback, any host op other than the boundary quantize/dequantize is an error naming each
op once, with its reason and source line.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessel.binary.metadata import host_part_keys
from tessel.errors import TesselCompileError
from tessel.ir import Graph, GraphBuilder, Node, Value, verify
from tessel.lower.fallback import is_boundary, no_fallback_message, op_label
from tessel.ops.registry import is_view, npu_supported


@dataclass(frozen=True)
class NpuRegion:
    """One NPU region: its nodes in order, the values it reads from outside the NPU (written by
    the runtime before it runs) and the values it hands to later host stages or the caller."""

    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class Partition:
    hosts: tuple[Graph, ...]  # host segment k runs before region k+1; len(regions) + 1 of them
    regions: tuple[NpuRegion, ...]
    npu_nodes: tuple[Node, ...]  # every NPU node, in order (regions concatenated)
    npu_inputs: tuple[str, ...]  # values the NPU reads from the host (all regions)
    npu_outputs: tuple[str, ...]  # NPU values the host or the caller reads (all regions)
    host_ops: tuple[Node, ...]  # host nodes other than the boundary (quantize/dequantize)
    moved_to_host: tuple[Node, ...] = ()  # NPU-capable nodes run on the host (view-only regions)

    @property
    def prologue(self) -> Graph:
        return self.hosts[0]

    @property
    def epilogue(self) -> Graph:
        return self.hosts[-1]

    def host_keys(self) -> list[str]:
        """The binary's key of each host part, in run order (prologue, host_1, ..., epilogue)."""
        return host_part_keys(len(self.regions))[:len(self.hosts)]

    def text(self) -> str:
        """The host parts and NPU regions, one line each, in run order."""
        lines = []
        for k, (host, key) in enumerate(zip(self.hosts, self.host_keys(), strict=True)):
            ops = ", ".join(f"%{n.name} = {op_label(n)}" for n in host.nodes
                            if not n.is_constant)
            lines.append(f"host {key}: {ops or '(nothing)'}")
            if k < len(self.regions):
                r = self.regions[k]
                lines.append(f"npu region {k + 1}: {len(r.nodes)} op(s) "
                             f"{', '.join('%' + n.name for n in r.nodes)}; reads "
                             f"{', '.join('%' + v for v in r.inputs)}; hands on "
                             f"{', '.join('%' + v for v in r.outputs)}")
        return "\n".join(lines) + "\n"


def partition(graph: Graph, *, no_fallback: bool = False) -> Partition:
    on_npu = {n.name for n in graph.nodes if not n.is_constant and npu_supported(n, graph)}
    host_ops = [n for n in graph.nodes if not n.is_constant and n.name not in on_npu
                and not is_boundary(n)]
    if no_fallback and host_ops:
        raise TesselCompileError(no_fallback_message(graph, host_ops))
    moved: list[Node] = []
    while True:
        stage = _stages(graph, on_npu)
        view_only = _view_only_regions(graph, stage)
        if not view_only:
            break
        for n in graph.nodes:
            if stage.get(n.name) in view_only:
                on_npu.discard(n.name)
                moved.append(n)
    last = max([s for s in stage.values()] + [0])
    count = last // 2 + 1 if last % 2 == 0 else last // 2 + 2  # host stages
    regions = tuple(_region(graph, stage, 2 * k + 1) for k in range(count - 1))
    hosts = tuple(_host(graph, stage, 2 * k, count) for k in range(count))
    npu_nodes = tuple(n for r in regions for n in r.nodes)
    npu_inputs = tuple(dict.fromkeys(v for r in regions for v in r.inputs))
    npu_outputs = tuple(dict.fromkeys(v for r in regions for v in r.outputs))
    return Partition(hosts, regions, npu_nodes, npu_inputs, npu_outputs, tuple(host_ops),
                     tuple(moved))


def _stages(graph: Graph, on_npu: set[str]) -> dict[str, int]:
    """Stage of every non-constant value: graph inputs 0, a node the earliest stage of its kind
    (even: host, odd: NPU) not before any operand's stage."""
    stage = {v.name: 0 for v in graph.inputs}
    for node in graph.nodes:
        if node.is_constant:
            continue
        s = max([stage[i] for i in node.inputs if i in stage] + [0])
        want = 1 if node.name in on_npu else 0
        stage[node.name] = s if s % 2 == want else s + 1
    return stage


def _view_only_regions(graph: Graph, stage: dict[str, int]) -> set[int]:
    """Odd stages whose nodes are all views (no NPU step): not worth a region."""
    work: dict[int, bool] = {}
    for n in graph.nodes:
        s = stage.get(n.name)
        if s is not None and s % 2 == 1:
            work[s] = work.get(s, False) or not is_view(n)
    return {s for s, has_work in work.items() if not has_work}


def _readers_after(graph: Graph, stage: dict[str, int], s: int) -> set[str]:
    """Values produced at stage <= s that a node of a later stage reads, plus graph outputs."""
    need = set(graph.outputs)
    for n in graph.nodes:
        if stage.get(n.name, -1) > s:
            need.update(n.inputs)
    return need


def _region(graph: Graph, stage: dict[str, int], s: int) -> NpuRegion:
    nodes = tuple(n for n in graph.nodes if stage.get(n.name) == s)
    inputs = tuple(dict.fromkeys(
        i for n in nodes for i in n.inputs
        if i in stage and stage[i] % 2 == 0))  # values from the host (or graph inputs)
    outputs = tuple(n.name for n in nodes if _host_reads(graph, stage, n.name))
    return NpuRegion(nodes, inputs, outputs)


def _host_reads(graph: Graph, stage: dict[str, int], name: str) -> bool:
    """Whether a host stage or the caller reads NPU value `name`."""
    if name in graph.outputs:
        return True
    return any(stage.get(u.name, 1) % 2 == 0 for u in graph.users.get(name, ()))


def _host(graph: Graph, stage: dict[str, int], s: int, count: int) -> Graph:
    """Host stage `s` as a graph: inputs = values it reads from elsewhere, outputs = its values
    read later (and, for the last stage, the constants that are graph outputs)."""
    last = s == 2 * (count - 1)
    nodes = [n for n in graph.nodes if stage.get(n.name) == s]
    names = {n.name for n in nodes}
    reads = dict.fromkeys(i for n in nodes for i in n.inputs
                          if i not in names and graph.constant_value(i) is None)
    later = _readers_after(graph, stage, s)
    outputs = [n.name for n in nodes if n.name in later]
    if last:
        outputs += [o for o in graph.outputs if graph.constant_value(o) is not None]
    if s == 0:  # the prologue declares every model input the NPU does not read as it is
        passing = _passed_through(graph, stage, reads)
        reads.update(dict.fromkeys(passing))
        outputs += passing
    inputs = [Value(v, graph.type_of(v)) for v in reads]
    suffix = "prologue" if s == 0 else "epilogue" if last else f"host{s // 2}"
    return _subgraph(graph, f"{graph.name}_{suffix}", inputs, nodes, tuple(dict.fromkeys(outputs)))


def _passed_through(graph: Graph, stage: dict[str, int], reads: dict[str, None]) -> list[str]:
    """Graph inputs that neither the prologue's ops nor an NPU region read: inputs only a later
    host part reads, inputs that are outputs as they are, unused inputs. The prologue takes them
    and hands them on, so the binary records every model input's type (runtime.inputs)."""
    npu_reads = {i for n in graph.nodes if stage.get(n.name, 0) % 2 == 1 for i in n.inputs}
    return [v.name for v in graph.inputs if v.name not in reads and v.name not in npu_reads]


def _subgraph(graph: Graph, name: str, inputs, nodes, outputs) -> Graph:
    """A graph of `nodes` (plus the constants they read or return) with the given I/O."""
    b = GraphBuilder(name)
    have = set()
    for v in inputs:
        b.input(v.name, v.type)
        have.add(v.name)

    def constant(i: str) -> None:
        c = graph.producer(i)
        if c is not None and c.is_constant and i not in have:
            b.append(c)
            have.add(i)

    for n in nodes:
        for i in n.inputs:
            constant(i)
        b.append(n)
        have.add(n.name)
    for o in outputs:
        constant(o)
    missing = [o for o in outputs if o not in have]
    if missing:  # an internal error: _host asks only for what it computes or reads
        raise TesselCompileError(f"{name}: outputs {missing} are not computed here")
    graph = b.build(list(outputs))
    return verify(graph) if outputs else graph  # nothing to hand on: the runtime skips it
