"""Per-layer accuracy: where quantising the activations loses precision, layer by layer.

The quantised model's QDQ graph (``QuantizedModel.qdq_graph``: float ops between quantize /
dequantize nodes, the integer model's semantics in float) is run twice on the same inputs: as
it is, and with every ``dequantize(quantize(x))`` replaced by ``x`` (activations in float, the
weights int8 in both). At each activation the model quantises, the SQNR of the quantised value
against the float one is the error accumulated up to that layer; a layer whose SQNR drops
far below its predecessors' is where precision goes. Layers are named by module path (the
nearest producer with one), the IR name beside it.

    report = layer_accuracy(qm, inputs)          # qm = tessel.quantize(model, inputs)
    print(report.table().text(100)); report.worst(5)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from tessel.analysis.accuracy import sqnr_db
from tessel.display import Table, plural, short_repr, summary_html
from tessel.ir import Graph, Node, Op, run_graph
from tessel.quant.api import QuantizedModel

LOOKBACK = 8  # producers walked back to find a module path for a quantised activation


@dataclass(frozen=True)
class LayerAccuracy:
    layer: str  # module path of the value's producer (else its IR name)
    ir_name: str  # the quantize node
    op: str  # the op that produced the quantised value
    dtype: str
    scale: float
    sqnr_db: float  # quantised vs float activation, over the inputs


@dataclass(frozen=True)
class LayerAccuracyReport:
    model: str
    samples: int
    layers: tuple[LayerAccuracy, ...]  # in graph order

    def worst(self, k: int = 5) -> list[LayerAccuracy]:
        return sorted(self.layers, key=lambda x: (x.sqnr_db, x.ir_name))[:k]

    def table(self) -> Table:
        rows = [(x.layer, x.op, x.dtype, f"{x.sqnr_db:.1f}", f"{x.scale:.3g}", x.ir_name)
                for x in self.layers]
        return Table(("layer", "op", "dtype", "SQNR dB", "scale", "IR name"), rows,
                     numeric=(False, False, False, True, True, False),
                     title=f"{plural(len(self.layers), 'quantised activation')}: SQNR against "
                           f"float activations ({plural(self.samples, 'input')})",
                     secondary=(5,))

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    def __repr__(self) -> str:
        worst = self.worst(1)
        return short_repr("LayerAccuracyReport", [
            ("model", repr(self.model)), ("layers", len(self.layers)),
            ("worst", f"{worst[0].layer} {worst[0].sqnr_db:.1f} dB" if worst else None)])

    def _repr_html_(self) -> str:
        lines = [f"lowest SQNR: {x.layer} ({x.op}) {x.sqnr_db:.1f} dB" for x in self.worst(3)]
        return summary_html(f"LayerAccuracyReport of {self.model}: per-layer accuracy", lines,
                            [self.table()])


def layer_accuracy(qm: QuantizedModel, inputs: Sequence[np.ndarray] | Sequence[Sequence]
                   ) -> LayerAccuracyReport:
    """The SQNR at every quantised activation of ``qm`` over ``inputs`` (one sample: the
    model's inputs; or a list of samples)."""
    samples = [inputs] if _is_one(inputs) else list(inputs)
    qdq = qm.qdq_graph
    floating = _unquantised(qdq)
    points = [n for n in qdq.nodes if n.op is Op.QUANTIZE]
    dequant = {n.inputs[0]: n.name for n in qdq.nodes if n.op is Op.DEQUANTIZE}
    quantised: dict[str, list] = {n.name: [] for n in points}
    reference: dict[str, list] = {n.name: [] for n in points}
    for sample in samples:
        arrays = [np.asarray(x.detach().cpu() if hasattr(x, "detach") else x) for x in sample]
        q = run_graph(qdq, arrays, keep_all=True)
        f = run_graph(floating, arrays, keep_all=True)
        assert isinstance(q, dict) and isinstance(f, dict)
        for n in points:
            if n.name in dequant:
                quantised[n.name].append(q[dequant[n.name]])
                reference[n.name].append(f[n.inputs[0]])
    out = []
    for n in points:
        if not quantised[n.name]:
            continue
        ref = np.concatenate([np.ravel(v) for v in reference[n.name]]).astype(np.float64)
        got = np.concatenate([np.ravel(v) for v in quantised[n.name]]).astype(np.float64)
        producer = qdq.producer(n.inputs[0])
        out.append(LayerAccuracy(_label(qdq, n), n.name,
                                 producer.op.value if producer else "input",
                                 n.type.dtype.value, float(n.attr("scale")),
                                 float(sqnr_db(ref, got))))
    return LayerAccuracyReport(qdq.name, len(samples), tuple(out))


def _is_one(inputs) -> bool:
    first = inputs[0] if len(inputs) else None
    return hasattr(first, "shape")


def _unquantised(g: Graph) -> Graph:
    """``g`` with each dequantize(quantize(x)) read as x (the quantize nodes stay, unread)."""
    alias = {}
    for n in g.nodes:
        src = g.producer(n.inputs[0]) if n.op is Op.DEQUANTIZE and n.inputs else None
        if src is not None and src.op is Op.QUANTIZE:
            alias[n.name] = src.inputs[0]
    nodes = tuple(n.replace(inputs=tuple(alias.get(i, i) for i in n.inputs))
                  for n in g.nodes if n.name not in alias)
    return Graph(g.name, g.inputs, nodes, tuple(alias.get(o, o) for o in g.outputs))


def _label(g: Graph, q: Node) -> str:
    """The module path of the quantised value: its own, else its nearest producer's."""
    node: Node | None = q
    for _ in range(LOOKBACK):
        if node is None:
            break
        if node.loc.module:
            return node.loc.module
        node = g.producer(node.inputs[0]) if node.inputs else None
    src = q.inputs[0]
    return f"input {src}" if src in g.input_map else q.name
