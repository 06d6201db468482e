"""Why an op runs on the host CPU, and the fallback summary `tessel compile` prints:

    NPU: 11 of 14 ops, 97.3 % of MACs, in 2 regions; host ops by reason: unsupported op 1 (fft_rfft)

Reasons (HostReason): the op has no NPU lowering (an ATen op the IR cannot express, or an IR op
without an NPU emitter), it was left in float by the quantiser, or the NPU's emitters cannot
take its shape. Quantise / dequantise at the model's edges are not counted as ops.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tessel.ir import Graph, Node, Op
from tessel.ir.host import host_node_macs, is_region
from tessel.ops import Trait, definition
from tessel.ops.registry import node_macs, npu_refusal

if TYPE_CHECKING:
    from tessel.lower.partition import Partition



def is_boundary(node: Node) -> bool:
    """Quantize / dequantize at the model's edges: always on the host, not counted as ops."""
    return definition(node.op).has(Trait.BOUNDARY)


class HostReason(enum.Enum):
    UNSUPPORTED_OP = "unsupported op"
    NOT_QUANTISED = "not quantised"
    SHAPE_LIMIT = "shape limit"
    VIEW_ONLY = "reshape between host ops"  # an NPU region would have no work
    UNTYPED = "complex values"  # a host region: intermediates the IR cannot type


def host_reason(graph: Graph, node: Node) -> HostReason:
    """Why `node` (which npu_supported refused) runs on the host."""
    if node.is_host:
        return HostReason.UNTYPED if is_region(node) else HostReason.UNSUPPORTED_OP
    if not node.type.dtype.is_int:
        return HostReason.NOT_QUANTISED
    if definition(node.op).npu is not None:
        return HostReason.SHAPE_LIMIT
    return HostReason.UNSUPPORTED_OP


def host_op_lines(graph: Graph, nodes: Sequence[Node]) -> list[str]:
    """One line per host op (each once): the op, and why it runs on the host in words a user
    can act on ("NPU: ..." for an integer op the NPU refuses, "host: ..." otherwise)."""
    lines = []
    for n in {n.name: n for n in nodes}.values():
        op = op_label(n)
        if n.type.dtype.is_int and not n.is_host:
            op += f" (NPU: {npu_refusal(n, graph) or 'runs after a host op'})"
        else:
            op += f" (host: {host_why(graph, n)})"
        lines.append(f"%{n.name} = {op} at {n.loc}")
    return lines


def host_why(graph: Graph, node: Node) -> str:
    """Why a float or `host` op runs on the host, and what would change that."""
    if node.is_host:
        target = str(node.attr("target"))
        if is_region(node):
            return (f"{target.replace('+', ', ')} compute complex values, which neither the "
                    "IR nor the NPU holds; they run in PyTorch as one host region")
        if not node.type.dtype.is_float:
            return (f"index / mask arithmetic on {node.type.dtype.value} (the NPU holds "
                    "i8 / i16 / i32 activations); it folds away when its inputs are constants")
        return (f"no NPU lowering for {target}; replace it with supported ops, or cut the "
                "model before it and run that part yourself")
    for name in node.inputs:
        producer = graph.producer(name)
        if producer is not None and _runs_on_host(producer):
            return f"its input %{name} is computed on the host, in float"
    if node.op is Op.EMBEDDING:
        return ("a table lookup by integer index (the NPU has no gather); its result is "
                "quantised for the NPU")
    if node.op is Op.CONV_TRANSPOSE2D and node.attr("groups", 1) != 1:
        return (f"ConvTranspose2d with groups {node.attr('groups')}: only groups = 1 is "
                "quantised (weights per output channel); split it into groups-1 convs")
    if definition(node.op).lower:
        return (f"'{node.op.value}' left in float by the quantiser (a QuantConfig rule, or "
                "arguments outside its rules): see docs/numerics.md")
    return (f"'{node.op.value}' has no integer form on the NPU; it runs in float "
            "(rewrite it with supported ops to move it)")


def _runs_on_host(node: Node) -> bool:
    if node.is_constant or is_boundary(node):
        return False
    return node.is_host or not node.type.dtype.is_int


def all_macs(graph: Graph, node: Node) -> int:
    """MACs of any op, a `host` op's too (its ATen op's, counted by torch)."""
    if node.is_host:
        return host_node_macs(node, [graph.type_of(i) for i in node.inputs])
    return node_macs(graph, node)


def op_label(node: Node) -> str:
    """The op as a user knows it: the ATen target of a float host op, else the IR op."""
    return str(node.attr("target")) if node.is_host else node.op.value


@dataclass(frozen=True)
class FallbackSummary:
    npu_ops: int
    total_ops: int
    npu_macs: int
    total_macs: int
    regions: int
    by_reason: dict[HostReason, tuple[str, ...]]  # reason -> op labels (one per host op)

    def text(self) -> str:
        return summary_text(self.to_dict())

    def to_dict(self) -> dict:
        return {"npu_ops": self.npu_ops, "total_ops": self.total_ops, "npu_macs": self.npu_macs,
                "total_macs": self.total_macs, "regions": self.regions,
                "host_ops": {r.value: list(v) for r, v in self.by_reason.items()}}


def summary_text(d: dict) -> str:
    """One line from `FallbackSummary.to_dict()` (as stored in a binary's metadata)."""
    percent = 100.0 * d["npu_macs"] / d["total_macs"] if d["total_macs"] else 100.0
    regions = d["regions"]
    head = (f"NPU: {d['npu_ops']} of {d['total_ops']} ops, {percent:.1f} % of MACs, in "
            f"{regions} region{'s' if regions != 1 else ''}")
    if not d["host_ops"]:
        return head + "; no host ops"
    parts = []
    for reason, labels in d["host_ops"].items():
        counts: dict[str, int] = {}
        for label in labels:
            counts[label] = counts.get(label, 0) + 1
        ops = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in counts.items())
        parts.append(f"{reason} {len(labels)} ({ops})")
    return head + "; host ops by reason: " + "; ".join(parts)


def summarize(graph: Graph, part: Partition) -> FallbackSummary:
    """The summary of a partition of `graph`."""
    ops = [n for n in graph.nodes if not n.is_constant and not is_boundary(n)]
    on_npu = {n.name for n in part.npu_nodes}
    by_reason: dict[HostReason, list[str]] = {}
    for n in part.host_ops:
        by_reason.setdefault(host_reason(graph, n), []).append(op_label(n))
    for n in part.moved_to_host:
        by_reason.setdefault(HostReason.VIEW_ONLY, []).append(op_label(n))
    macs = {n.name: all_macs(graph, n) for n in ops}
    return FallbackSummary(
        sum(1 for n in ops if n.name in on_npu), len(ops),
        sum(m for k, m in macs.items() if k in on_npu), sum(macs.values()), len(part.regions),
        {r: tuple(v) for r, v in sorted(by_reason.items(), key=lambda kv: kv[0].value)})


def no_fallback_message(graph: Graph, host_ops: list[Node]) -> str:
    """Each host op once: its op (the ATen target of a float host op), reason, source line."""
    lines = [f"  {n.loc.module + ': ' if n.loc.module else ''}%{n.name} = {op_label(n)}: "
             f"{host_reason(graph, n).value} at {n.loc}" for n in host_ops]
    return ("--no-fallback: these ops would run on the host CPU:\n" + "\n".join(lines)
            + "\n(compile without --no-fallback to run them on the host; `tessel compile` then "
            "prints the fallback summary)")
