"""DRAM arena planning: every activation of the NPU region gets an address in the activations
memory, reusing space whose tensor is dead (liveness over the step order), and views
(reshapes of contiguous tensors) alias their source. Reports peak vs the naive sum."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tessel.errors import TesselCompileError
from tessel.ir import Graph, Node
from tessel.ops.context import ALIGN, DramTensor, align
from tessel.ops.registry import is_view


@dataclass(frozen=True)
class ArenaPlan:
    tensors: dict[str, DramTensor]
    base: int
    peak_bytes: int  # arena size actually needed
    naive_bytes: int  # every tensor in its own region


def plan_arena(graph: Graph, order: Sequence[Node], inputs: Sequence[str], outputs: Sequence[str],
               memory: int, base: int, capacity: int,
               fused_with_next: frozenset[str] = frozenset()) -> ArenaPlan:
    """Addresses for the region's inputs, every node's result, and outputs.

    `order`: the NPU nodes in execution order. Region inputs are live from the start, outputs
    to the end. A reshape whose input is a plain tensor aliases it (no copy, no step).
    `fused_with_next`: nodes that run in one step with the node after them (cascading,
    ops/fused_emit.py): their results stay on chip (no arena space, never written to DRAM;
    `tensors` has no entry for them) and the step's DRAM operands stay live until it ends."""
    alias = {n.name: n.inputs[0] for n in order if is_view(n)}
    root = {}

    def find(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name

    start: dict[str, int] = {}
    end: dict[str, int] = {}
    for name in inputs:
        start[find(name)] = -1
    step, steps = 0, []
    for node in order:  # the step each node runs in (a fused pair shares one)
        steps.append(step)
        if node.name not in fused_with_next:
            step += 1
    for node, i in zip(order, steps, strict=True):
        for src in node.inputs:
            if graph.constant_value(src) is None:
                end[find(src)] = max(end.get(find(src), i), i)
        if node.name in fused_with_next:
            continue
        r = find(node.name)
        root[node.name] = r
        start.setdefault(r, i)
        end.setdefault(r, i)
    for name in outputs:
        end[find(name)] = step
    sizes = {name: align(graph.type_of(name).nbytes) for name in start}
    offsets = _first_fit(sorted(start, key=lambda n: (start[n], n)), start, end, sizes)
    peak = max((offsets[n] + sizes[n] for n in offsets), default=0)
    if base + peak > capacity:
        biggest = max(sizes, key=lambda n: sizes[n])
        raise TesselCompileError(
            f"activations need {peak} bytes of DRAM arena (largest tensor %{biggest}, "
            f"{sizes[biggest]} bytes) but only {capacity - base} bytes are free in memory "
            f"{memory}")
    tensors = {}
    for name in list(start) + [n.name for n in order] + list(inputs) + list(outputs):
        if name in fused_with_next:
            continue
        r = find(name)
        t = graph.type_of(name)
        tensors[name] = DramTensor(memory, base + offsets[r], t.shape, t.dtype)
    return ArenaPlan(tensors, base, peak, sum(sizes.values()))


def _first_fit(names: list[str], start: dict[str, int], end: dict[str, int],
               sizes: dict[str, int]) -> dict[str, int]:
    """Place each tensor at the lowest offset not overlapping a tensor live at the same time."""
    placed: list[tuple[int, int, int, int]] = []  # (offset, size, start, end)
    offsets = {}
    for name in names:
        s, e, size = start[name], end[name], sizes[name]
        busy = sorted((o, o + sz) for o, sz, s2, e2 in placed if not (e2 < s or e < s2))
        off = 0
        for lo, hi in busy:
            if off + size <= lo:
                break
            off = max(off, align(hi, ALIGN))
        offsets[name] = off
        placed.append((off, size, s, e))
    return offsets
