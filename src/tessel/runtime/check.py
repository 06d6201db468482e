"""`tessel run --check`: the simulator's outputs against the golden model (bit for bit) and
against the model's float reference (SQNR), NaN-aware, per output.

The float reference (`FloatReference`) is float PyTorch for a PyTorch model, the quantised
graph run in float between its quantize / dequantize pairs for an ONNX QDQ or TFLite model,
and none for an integer model (a TOSA file: its golden model is all the semantics it has).

* bit-exactness compares with `equal_nan` (a NaN the golden model also computes is equal);
* the float reference is computed without autograd and detached (an output that is a view
  of a parameter requires grad);
* every output that differs is named; an output with NaN where float PyTorch is finite is
  named too, with the host float ops that produced NaN from NaN-free operands (typically a
  `div` whose divisor was quantised to exactly 0).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from tessel.errors import TesselConfigError
from tessel.ir import Graph, Op, run_graph

LOW_RANGE_LSBS = 4  # an output whose values span fewer steps than this is flagged


class FloatReference(enum.StrEnum):
    """What a check's SQNR is measured against."""

    PYTORCH = "pytorch"  # the float PyTorch model
    QDQ = "qdq"  # an imported quantised graph (ONNX QDQ, TFLite) run in float
    NONE = "none"  # an integer model (TOSA): no float reference

    @property
    def label(self) -> str:
        return {FloatReference.PYTORCH: "float PyTorch",
                FloatReference.QDQ: "the quantised graph in float",
                FloatReference.NONE: "no float reference"}[self]


def float_reference_of(model: object) -> FloatReference:
    """The float reference a model has (see the module docstring)."""
    from tessel.frontend.ir_module import QDQModule

    if isinstance(model, QDQModule):
        return FloatReference.NONE if model.integer else FloatReference.QDQ
    return FloatReference.PYTORCH


@dataclass(frozen=True)
class CheckReport:
    """Per-output comparison of one run (`to_json()` is what `run --check --json` prints)."""

    bit_exact: bool
    differing: tuple[str, ...]  # outputs where simulator != golden
    sqnr_db: dict[str, float]  # golden-simulated outputs vs float PyTorch, finite entries only
    nan_outputs: tuple[str, ...]  # outputs with NaN where float PyTorch is finite
    nan_sources: tuple[str, ...]  # host ops that turned NaN-free operands into NaN
    low_range: tuple[str, ...] = ()  # outputs spanning fewer than LOW_RANGE_LSBS steps
    float_of: FloatReference = FloatReference.PYTORCH  # what sqnr_db is measured against

    def to_json(self) -> dict:
        return asdict(self)

    def text(self, engine: str = "simulator") -> str:
        """The report as lines; `engine` names what ran the binary."""
        lines = [f"check: {engine} vs golden model: " + (
            "bit-exact" if self.bit_exact else "MISMATCH in " + ", ".join(self.differing))]
        of = FloatReference(self.float_of)
        if of is FloatReference.NONE:
            lines.append("SQNR: none (an integer model: the golden model is its reference)")
        else:
            lines.append(f"SQNR vs {of.label}: " + ", ".join(
                f"{k} {v:.1f} dB" for k, v in self.sqnr_db.items()))
        if self.nan_outputs:
            lines.append(f"NaN where {of.label} is finite: " + ", ".join(self.nan_outputs)
                         + (" (from host ops: " + "; ".join(self.nan_sources) + ")"
                            if self.nan_sources else ""))
        if self.low_range:
            lines.append(f"WARNING: outputs spanning fewer than {LOW_RANGE_LSBS} quantisation "
                         "steps (little or no information survives): " + ", ".join(self.low_range))
        return "\n".join(lines)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-exact equality, NaN equal to NaN (the golden model's float host ops can give NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def finite_sqnr_db(reference: np.ndarray, test: np.ndarray) -> float:
    """SQNR over the elements where both are finite (NaN outputs are reported separately)."""
    ref = np.asarray(reference, np.float64)
    got = np.asarray(test, np.float64)
    keep = np.isfinite(ref) & np.isfinite(got)
    noise = float(np.sum((ref[keep] - got[keep]) ** 2))
    signal = float(np.sum(ref[keep] ** 2))
    if noise == 0.0:
        return math.inf
    return 10.0 * math.log10(signal / noise) if signal > 0 else -math.inf


def float_reference(model, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The float model's outputs as numpy, flattened in pytree order, detached."""
    import torch

    with torch.no_grad():
        out = model(*[torch.from_numpy(np.asarray(x)) for x in inputs])
    leaves = torch.utils._pytree.tree_leaves(out)
    return [t.detach().cpu().numpy() for t in leaves if isinstance(t, torch.Tensor)]


def nan_sources(graph: Graph, inputs: Sequence[np.ndarray]) -> list[str]:
    """Host float ops of an integer graph whose result has NaN though no operand has."""
    from tessel.quant.golden import GOLDEN_KERNELS
    from tessel.quant.lower import host_ops

    env = run_graph(graph, list(inputs), kernels=GOLDEN_KERNELS, keep_all=True)

    def nan(name: str) -> bool:
        v = np.asarray(env[name])
        return v.dtype.kind == "f" and bool(np.isnan(v).any())

    return [f"%{n.name} = {n.op.value} at {n.loc}" for n in host_ops(graph)
            if nan(n.name) and not any(nan(i) for i in n.inputs)]


def low_range_outputs(graph: Graph, outputs: Sequence[np.ndarray],
                      lsbs: int = LOW_RANGE_LSBS) -> list[str]:
    """Outputs (dequantised at a graph output) whose values span fewer than `lsbs` steps of
    their scale: e.g. a mean far below its input's LSB, quantised to (almost) one value."""
    flagged = []
    for name, value in zip(graph.outputs, outputs, strict=True):
        node = graph.node_map.get(name)
        if node is None or node.op is not Op.DEQUANTIZE or np.asarray(value).size < 2:
            continue
        v = np.asarray(value, np.float64)
        v = v[np.isfinite(v)]
        if v.size and (v.max() - v.min()) < lsbs * float(node.attr("scale")):
            flagged.append(name)
    return flagged


def compare(names: Sequence[str], outputs: Sequence[np.ndarray], golden: Sequence[np.ndarray],
            reference: Sequence[np.ndarray], graph: Graph | None = None,
            inputs: Sequence[np.ndarray] = (), low_range: Sequence[str] | None = None,
            float_of: FloatReference = FloatReference.PYTORCH) -> CheckReport:
    """Compare simulated outputs with the golden model and the float reference (`float_of`
    NONE: none, `reference` is not read). Without the integer `graph`, `low_range` names the
    low-range outputs (as stored in the binary)."""
    if float_of is FloatReference.NONE:
        reference = outputs  # no SQNR, no NaN against a reference
    for n, r, o in zip(names, reference, outputs, strict=True):
        if np.shape(r) != np.shape(o):
            raise TesselConfigError(
                f"output {n!r}: the binary gives shape {list(np.shape(o))}, the float model "
                f"{list(np.shape(r))}: the binary's outputs are not this model's (its metadata "
                "names other tensors)")
    differing = tuple(n for n, a, b in zip(names, outputs, golden, strict=True) if not same(a, b))
    sqnr = {} if float_of is FloatReference.NONE else {
        n: float(finite_sqnr_db(r, o)) for n, r, o in zip(names, reference, outputs, strict=True)}
    nan_out = tuple(n for n, r, o in zip(names, reference, outputs, strict=True)
                    if np.asarray(o).dtype.kind == "f"
                    and bool((np.isnan(o) & np.isfinite(np.asarray(r, np.float64))).any()))
    sources = tuple(nan_sources(graph, inputs)) if nan_out and graph is not None else ()
    low = tuple(low_range_outputs(graph, outputs)) if graph is not None else tuple(low_range or ())
    return CheckReport(not differing, differing, sqnr, nan_out, sources, low, float_of)
