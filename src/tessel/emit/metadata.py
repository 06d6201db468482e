"""The binary's metadata (docs/binary-format.md, "Metadata"): what the runtime, the profile and
`tessel run --check` read besides the instruction streams: the model and target, the NPU's
parameters, the model's inputs and outputs, the host ops and why they run there, the fallback
summary, the DRAM arena, one record per layer, and the NPU regions' boundaries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tessel.arch import NpuArch
from tessel.binary.metadata import METADATA_VERSION
from tessel.ir import Graph
from tessel.lower.fallback import FallbackSummary, host_op_lines
from tessel.lower.partition import Partition
from tessel.ops.registry import node_macs
from tessel.version import __version__

if TYPE_CHECKING:
    from tessel.emit.program import LayerPlan


def model_metadata(graph: Graph, arch: NpuArch, name: str, part: Partition,
                   fallback: FallbackSummary) -> dict[str, Any]:
    """What is known before scheduling: the model, the target, the I/O names, the host ops."""
    return {
        "metadata_version": METADATA_VERSION,
        "model": name, "target": arch.name, "tessel_version": __version__,
        "arch": arch.to_toml_dict(), "model_inputs": [v.name for v in graph.inputs],
        "model_outputs": list(graph.outputs),
        "host_ops": host_op_lines(graph, part.host_ops + part.moved_to_host),
        "fallback": fallback.to_dict(),
    }


def layer_records(graph: Graph, layers: Sequence[LayerPlan]) -> list[dict[str, Any]]:
    """One record per step: its name, op, source, mapping, bound, estimate, instruction range
    per engine, IR nodes and MACs."""
    out = []
    for lay in layers:
        nodes = lay.nodes or (lay.name,)
        out.append({"name": lay.name, "op": lay.op, "loc": lay.loc, "mapping": lay.mapping,
                    "bound": lay.estimate.bound.value, "estimated_cycles": lay.estimate.cycles,
                    "first": lay.first_instr, "last": lay.last_instr, "nodes": list(nodes),
                    "macs": sum(node_macs(graph, graph.node_map[n]) for n in nodes)})
    return out


def region_records(part: Partition, ends: Sequence[Mapping[str, int]]
                   ) -> list[dict[str, Any]] | None:
    """Each NPU region's inputs, outputs and where its instructions end per engine; None for a
    single region (format 1.1: absent means one region with every descriptor)."""
    if len(part.regions) <= 1:
        return None
    return [{"inputs": list(r.inputs), "outputs": list(r.outputs), "ends": dict(e)}
            for r, e in zip(part.regions, ends, strict=False)]
