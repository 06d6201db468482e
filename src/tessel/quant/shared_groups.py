"""Shared-scale groups as equivalence classes (union-find), computed before pt2e sees them.

The annotators of `tessel.quant.quantizer` say locally what shares parameters with what (a
cat's inputs with its first input, a reshape's output with its input, ...). Written as chains
of ``SharedQuantizationSpec`` those links can form cycles (``y = cat([a, b]); cat([y, a])``),
on which torchao's unwrapping recurses forever. Here every link is a union of two keys (a node's
output, or an (argument, user) edge); torchao's implicit sharing (an input edge
shares its producer's observer when their specs agree) is applied the same way; each class
gets one root, the first key in graph order with a concrete spec, and every other key of the
class is re-annotated as sharing that root directly: one level, no cycles, the same classes.
"""

from __future__ import annotations

from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.quantizer import (
    FixedQParamsQuantizationSpec,
    QuantizationSpec,
    SharedQuantizationSpec,
)
from torchao.quantization.pt2e.quantizer.quantizer import Q_ANNOTATION_KEY

Key = Node | tuple[Node, Node]


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[Key, Key] = {}

    def find(self, k: Key) -> Key:
        self.parent.setdefault(k, k)
        root = k
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[k] != root:  # path compression
            self.parent[k], k = root, self.parent[k]
        return root

    def union(self, a: Key, b: Key) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


def _specs(model: GraphModule) -> dict[Key, object]:
    """Every annotated key (node outputs and input edges) and its qspec, in graph order."""
    specs: dict[Key, object] = {}
    for node in model.graph.nodes:
        ann = node.meta.get(Q_ANNOTATION_KEY)
        if ann is None:
            continue
        for arg, spec in ann.input_qspec_map.items():
            specs[(arg, node)] = spec
        if ann.output_qspec is not None:
            specs[node] = ann.output_qspec
    return specs


def _set(key: Key, spec: object) -> None:
    if isinstance(key, tuple):
        arg, user = key
        user.meta[Q_ANNOTATION_KEY].input_qspec_map[arg] = spec
    else:
        key.meta[Q_ANNOTATION_KEY].output_qspec = spec


_SAME = ("dtype", "quant_min", "quant_max", "qscheme", "ch_axis", "is_dynamic", "scale",
         "zero_point")


def _concrete(spec: object) -> bool:
    return isinstance(spec, (QuantizationSpec, FixedQParamsQuantizationSpec))


def _signature(spec: object) -> tuple:
    return tuple(getattr(spec, a, None) for a in _SAME)


def _implicit_unions(specs: dict[Key, object], uf: _UnionFind) -> bool:
    """torchao's implicit sharing: an input edge shares the observer of its producer's output
    and of the producer's other input edges when their (class) specs agree. True if any
    classes merged."""
    first: dict[Key, object] = {}
    for key, spec in specs.items():
        if _concrete(spec):
            first.setdefault(uf.find(key), spec)
    merged = False
    for key in specs:
        if not isinstance(key, tuple):
            continue
        arg, user = key
        if not user.meta[Q_ANNOTATION_KEY].allow_implicit_sharing:
            continue
        mine = first.get(uf.find(key))
        others = [(arg, u) for u in arg.users if u is not user] + [arg]
        for other in others:
            theirs = first.get(uf.find(other)) if other in specs else None
            if mine is None or theirs is None or uf.find(other) == uf.find(key):
                continue
            if _signature(mine) == _signature(theirs):
                uf.union(other, key)
                merged = True
    return merged


def flatten_shared_specs(model: GraphModule) -> None:
    """Re-annotate every shared-scale class to share one concrete root (see module doc)."""
    specs = _specs(model)
    uf = _UnionFind()
    for key, spec in specs.items():
        uf.find(key)
        if isinstance(spec, SharedQuantizationSpec):
            uf.union(spec.edge_or_node, key)
    while _implicit_unions(specs, uf):
        pass
    roots: dict[Key, Key] = {}
    for key, spec in specs.items():  # graph order: the first concrete spec is the root
        if _concrete(spec):
            roots.setdefault(uf.find(key), key)
    for key, spec in specs.items():
        root = roots.get(uf.find(key))
        if root is not None and root != key and (
                _concrete(spec) or isinstance(spec, SharedQuantizationSpec)):
            _set(key, SharedQuantizationSpec(root))
