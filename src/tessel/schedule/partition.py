"""Partition an integer graph into host prologue, one NPU region, and host epilogue.

NPU ops (tessel.codegen.registry.npu_supported) run on the NPU; everything else (quantise /
dequantise at the boundaries, gathers, float ops left by the quantiser) on the host CPU
through the golden model's kernels. The runtime runs one NPU program between two host
graphs, so an NPU op that depends on a host op which itself depends on the NPU is moved to
the host epilogue as well (reported: `moved_to_host`), never dropped. With no_fallback,
any host op other than the boundary quantize/dequantize is an error naming it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessel.codegen.registry import npu_supported
from tessel.errors import TesselCompileError
from tessel.ir import Graph, GraphBuilder, Node, Op, Value, verify

BOUNDARY_OPS = frozenset({Op.QUANTIZE, Op.DEQUANTIZE})


@dataclass(frozen=True)
class Partition:
    prologue: Graph  # model inputs -> NPU inputs (+ values the epilogue needs)
    npu_nodes: tuple[Node, ...]  # in order
    npu_inputs: tuple[str, ...]
    npu_outputs: tuple[str, ...]
    epilogue: Graph  # NPU outputs + prologue values -> model outputs
    host_ops: tuple[Node, ...]  # host nodes other than the boundary (quantize/dequantize)
    moved_to_host: tuple[Node, ...]  # NPU-capable nodes run on the host (after a host op)


def partition(graph: Graph, *, no_fallback: bool = False) -> Partition:
    side: dict[str, str] = {v.name: "in" for v in graph.inputs}
    moved = []
    for node in graph.nodes:
        if node.op is Op.CONSTANT:
            side[node.name] = "const"
            continue
        srcs = {side[i] for i in node.inputs}
        if npu_supported(node) and "epi" not in srcs:
            side[node.name] = "npu"
        elif "npu" in srcs or "epi" in srcs:
            if npu_supported(node):
                moved.append(node)
            side[node.name] = "epi"
        else:
            side[node.name] = "pro"
    host = [n for n in graph.nodes if side[n.name] in ("pro", "epi")
            and n.op not in BOUNDARY_OPS]
    if no_fallback and (host or moved):
        lines = [f"  %{n.name} = {n.op.value} at {n.loc}" for n in host + moved]
        raise TesselCompileError("--no-fallback: these ops would run on the host CPU:\n"
                                 + "\n".join(lines))
    npu = tuple(n for n in graph.nodes if side[n.name] == "npu")
    npu_inputs = _boundary(graph, npu, side, {"in", "pro"})
    npu_outputs = tuple(dict.fromkeys(
        [n.name for n in npu if any(side[u.name] == "epi" for u in graph.users.get(n.name, ()))]
        + [o for o in graph.outputs if side.get(o) == "npu"]))
    pro_nodes = [n for n in graph.nodes if side[n.name] == "pro"]
    epi_nodes = [n for n in graph.nodes if side[n.name] == "epi"]
    epi_needs = _boundary(graph, epi_nodes, side, {"in", "pro"})
    pro_outputs = tuple(dict.fromkeys(
        list(npu_inputs) + list(epi_needs) + [o for o in graph.outputs if side[o] in ("in", "pro")]))
    prologue = _subgraph(graph, f"{graph.name}_prologue", graph.inputs, pro_nodes, pro_outputs)
    epi_inputs = [Value(n, graph.type_of(n)) for n in list(npu_outputs) + list(epi_needs)]
    epilogue = _subgraph(graph, f"{graph.name}_epilogue", epi_inputs, epi_nodes, graph.outputs)
    return Partition(prologue, npu, npu_inputs, npu_outputs, epilogue, tuple(host), tuple(moved))


def _boundary(graph: Graph, nodes, side: dict[str, str], sources: set[str]) -> tuple[str, ...]:
    """Non-constant values from `sources` sides that `nodes` read, in first-use order."""
    out = []
    for n in nodes:
        for i in n.inputs:
            if side[i] in sources:
                out.append(i)
    return tuple(dict.fromkeys(out))


def _subgraph(graph: Graph, name: str, inputs, nodes, outputs) -> Graph:
    """A graph of `nodes` (plus the constants they read) with the given inputs/outputs."""
    b = GraphBuilder(name)
    have = set()
    for v in inputs:
        b.input(v.name, v.type)
        have.add(v.name)
    for n in nodes:
        for i in n.inputs:
            c = graph.producer(i)
            if c is not None and c.op is Op.CONSTANT and i not in have:
                b.append(c)
                have.add(i)
        b.append(n)
        have.add(n.name)
    passthrough = [o for o in outputs if o not in have]
    if passthrough:
        raise TesselCompileError(f"{name}: outputs {passthrough} are not computed here")
    return verify(b.build(list(outputs)))
