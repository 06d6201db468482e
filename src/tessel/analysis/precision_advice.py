"""What a precision change would give: for the layers that lose the most accuracy, candidate
changes measured on the model itself.

1. Per-layer accuracy (``layer_accuracy``): the SQNR of every quantised activation against
   float; a layer's loss is how far its SQNR falls below its quantised inputs' lowest (the
   precision it loses itself, not what it inherits).
2. For the ``layers`` worst by that loss, the candidates ``QuantConfig`` supports: int16
   activations on that op of that module (a residual add's too), on every op of that type and
   on the whole block around it, and int8 weights where the layer's are int4.
3. Each candidate measured: the model quantised again with the override added, its golden
   (integer) model against float on the held-out inputs (whole-model SQNR, dB) and its
   estimated cycles on the target; ranked by the SQNR gained. A change that moves ops to the
   host (which runs them in float) is not ranked: its gain would not be the NPU's.
4. ``combined``: the candidates that gained, best first, each kept if the model with it and
   the ones kept before measures better and stays within ``cycles_budget`` percent more
   cycles than the model as configured (gains do not add: two layers' noises overlap).

    advice = precision_advice(model, example, calibration, held_out)
    print(advice.text()); advice.config     # the QuantConfig with the combined overrides
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch

from tessel.analysis.accuracy import sqnr_db
from tessel.analysis.layer_accuracy import LayerAccuracyReport, layer_accuracy
from tessel.display import Table, fmt_int, plural, short_repr
from tessel.errors import TesselError
from tessel.ir import Graph, Op
from tessel.progress import track
from tessel.quant.api import QuantizedModel, quantize
from tessel.quant.config import (
    ActDtype,
    LayerOverride,
    OpKind,
    QuantConfig,
    WeightDtype,
    config_keyword,
    override_flag,
)
from tessel.quant.pt2e import reused_export

Sample = tuple[torch.Tensor, ...]
MIN_GAIN_DB = 0.5  # a candidate gaining less is left out of the combined change
DEFAULT_LAYERS = 5
BLOCK_DEPTH = 2  # module path names that make a block: features.4 of features.4.block.2
CYCLES_BUDGET_PCT = 10.0  # the combined change's default cycle budget (% more)
IR_KINDS = {"conv2d": OpKind.CONV, "depthwise_conv2d": OpKind.CONV, "linear": OpKind.LINEAR,
            "matmul": OpKind.MATMUL, "max_pool2d": OpKind.MAX_POOL,
            "avg_pool2d": OpKind.AVG_POOL}  # IR op names that differ from the OpKind's
WEIGHTED = (OpKind.CONV, OpKind.LINEAR, OpKind.CONV_TRANSPOSE)


@dataclass(frozen=True)
class Candidate:
    """One measured change: the override, its command-line form and what it gave."""

    layer: str  # module path
    change: str  # e.g. "int16 activations (mul)"
    flag: str  # the command line's form, e.g. "--layer-precision 'features.6:mul=int16'"
    sqnr_db: float  # whole-model SQNR with the change (first output)
    sqnr_gain_db: float  # against the model without it
    cycles: int
    cycles_change_pct: float
    overrides: tuple[LayerOverride, ...] = field(repr=False)  # what QuantConfig adds


@dataclass(frozen=True)
class PrecisionAdvice:
    """Per-layer accuracy, the worst layers' measured candidates (best first) and the
    combined change."""

    model: str
    target: str
    sqnr_db: float  # the model as configured (first output)
    cycles: int
    layers: LayerAccuracyReport
    losses: tuple[tuple[str, str, float], ...]  # (layer, op, dB lost there), worst first
    candidates: tuple[Candidate, ...]
    combined: Candidate | None
    skipped: tuple[str, ...] = ()  # candidates that did not quantise or compile, and why
    config: QuantConfig = field(default_factory=QuantConfig, repr=False)

    def table(self) -> Table:
        rows = [(c.layer, c.change, f"{c.sqnr_gain_db:+.1f}", f"{c.sqnr_db:.1f}",
                 f"{c.cycles_change_pct:+.1f}", c.flag) for c in self.candidates]
        if self.combined is not None:
            c = self.combined
            rows.append((c.layer, c.change, f"{c.sqnr_gain_db:+.1f}",
                         f"{c.sqnr_db:.1f}", f"{c.cycles_change_pct:+.1f}", c.flag))
        return Table(("layer", "change", "SQNR gain dB", "SQNR dB", "cycles %", "apply with"),
                     rows, numeric=(False, False, True, True, True, False),
                     title=f"precision changes measured (model: {self.sqnr_db:.1f} dB, "
                           f"{fmt_int(self.cycles)} cycles on {self.target})", secondary=(5,))

    def loss_table(self, k: int = 10) -> Table:
        rows = [(layer, op, f"{loss:.1f}") for layer, op, loss in self.losses[:k]]
        return Table(("layer", "op", "dB lost"), rows, numeric=(False, False, True),
                     title=f"{len(rows)} layers losing the most SQNR (below their inputs')")

    def text(self, width: int | None = 100) -> str:
        parts = [self.loss_table().text(width), self.table().text(width)]
        c = self.combined
        if c is not None:
            parts.append(f"follow the advice ({c.change}: {c.sqnr_gain_db:+.1f} dB, "
                         f"{c.cycles_change_pct:+.1f} % cycles): {c.flag}")
        else:
            parts.append("no change measured gains within the cycle budget")
        parts += [f"not measured: {s}" for s in self.skipped]
        return "\n\n".join(parts)

    def to_json(self) -> dict:
        def cand(c: Candidate) -> dict:
            d = asdict(c)
            d["overrides"] = [{k: (v.value if hasattr(v, "value") else v)
                               for k, v in asdict(o).items() if v is not None}
                              for o in c.overrides]
            return d
        return {"model": self.model, "target": self.target, "sqnr_db": self.sqnr_db,
                "cycles": self.cycles,
                "losses": [{"layer": a, "op": b, "db_lost": c} for a, b, c in self.losses],
                "candidates": [cand(c) for c in self.candidates],
                "combined": cand(self.combined) if self.combined else None,
                "skipped": list(self.skipped),
                "layers": json.loads(self.layers.to_json())["layers"]}

    def __repr__(self) -> str:
        best = self.candidates[0] if self.candidates else None
        return short_repr("PrecisionAdvice", [
            ("model", repr(self.model)), ("sqnr_db", f"{self.sqnr_db:.1f}"),
            ("best", f"{best.layer} {best.change} {best.sqnr_gain_db:+.1f} dB" if best else None)])


def layer_losses(report: LayerAccuracyReport, qm: QuantizedModel) -> list[tuple[str, str, float]]:
    """(layer, op, dB lost) per quantised activation, worst first: its SQNR below the lowest
    of its op's quantised inputs (0 when none of them is quantised)."""
    qdq = qm.qdq_graph
    own = {x.ir_name: x for x in report.layers}
    out = []
    for x in report.layers:
        node = qdq.node_map[x.ir_name]
        producer = qdq.producer(node.inputs[0])
        ins = [] if producer is None else [_quantised_source(qdq, i) for i in producer.inputs]
        prior = [own[q].sqnr_db for q in ins if q in own]
        out.append((x.layer, x.op, min(prior) - x.sqnr_db if prior else 0.0))
    return sorted(out, key=lambda t: -t[2])


def _quantised_source(g: Graph, value: str) -> str | None:
    """The quantize node a value was dequantised from (through one dequantize), if any."""
    node = g.producer(value)
    if node is None or not node.inputs:
        return None
    src = g.producer(node.inputs[0])
    return src.name if src is not None and src.op is Op.QUANTIZE else None


def _kind(op: str) -> OpKind | None:
    if op in IR_KINDS:
        return IR_KINDS[op]
    try:
        return OpKind(op)
    except ValueError:
        return None


def candidates_for(layer: str, op: str, config: QuantConfig) -> list[tuple[str, LayerOverride]]:
    """The changes ``config`` supports for one layer: int16 activations (inputs and output;
    MAC inputs stay int8) on that op of the module, on every op of its type and on every op of
    its block (the module path's first ``BLOCK_DEPTH`` names: ``features.4``), int8 weights
    where they are int4."""
    kind = _kind(op)
    out = [(f"int16 activations ({op})", LayerOverride(module=layer, op=kind,
                                                       dtype=ActDtype.INT16))]
    if kind is not None:
        out.append((f"int16 activations (every {op})", LayerOverride(module="*", op=kind,
                                                                     dtype=ActDtype.INT16)))
    block = ".".join(layer.split(".")[:BLOCK_DEPTH])
    if block != layer:
        out.append((f"int16 activations (all of {block})",
                    LayerOverride(module=block, dtype=ActDtype.INT16)))
    if kind in WEIGHTED and config.weights is WeightDtype.INT4:
        out.append(("int8 weights", LayerOverride(module=layer, op=kind,
                                                  weights=WeightDtype.INT8)))
    return out


class _Measure:
    """Quantise with a config, then whole-model SQNR (golden vs float, first output) and
    estimated cycles."""

    def __init__(self, model: torch.nn.Module, example: Sample, calibration: Sequence[Sample],
                 inputs: Sequence[Sample], target: str) -> None:
        from tessel.arch import load_target

        self.model, self.example, self.calibration, self.inputs = model, example, \
            calibration, inputs
        self.arch = load_target(target)
        with torch.no_grad():
            self.floats = np.concatenate([_first(model(*s)) for s in inputs])

    def quantised(self, config: QuantConfig) -> QuantizedModel:
        return quantize(self.model, self.example, self.calibration, config,
                        calibration_samples=len(self.calibration))

    def __call__(self, config: QuantConfig, qm: QuantizedModel | None = None
                 ) -> tuple[float, int, int]:
        """(SQNR dB, estimated cycles, host ops)."""
        from tessel.analysis.estimate import estimate_graph

        qm = qm or self.quantised(config)
        golden = np.concatenate([qm.run(*s)[0] for s in self.inputs])
        est = estimate_graph(qm.graph, self.arch, timing_only=True)
        return sqnr_db(self.floats, golden), est.cycles, len(est.host_ops)


def _first(out: object) -> np.ndarray:
    t = out if isinstance(out, torch.Tensor) else out[0]  # type: ignore[index]
    return t.detach().numpy()


def precision_advice(model: torch.nn.Module, example: Sample, calibration: Sequence[Sample],
                     inputs: Sequence[Sample], quant_config: QuantConfig | None = None, *,
                     target: str = "tnpu-s", layers: int = DEFAULT_LAYERS,
                     cycles_budget: float = CYCLES_BUDGET_PCT, name: str | None = None,
                     config: QuantConfig | None = None) -> PrecisionAdvice:
    """Measure the precision changes of the ``layers`` layers that lose the most SQNR and
    combine the best within ``cycles_budget`` percent more cycles (see the module docstring):
    ``calibration`` quantises, ``inputs`` (held out) measure."""
    config = config_keyword(quant_config, config, "precision_advice") or QuantConfig()
    with reused_export(model):  # every candidate quantises the same model: export it once
        return _advice(model, example, calibration, inputs, config, target, layers,
                       cycles_budget, name)


def _advice(model: torch.nn.Module, example: Sample, calibration: Sequence[Sample],
            inputs: Sequence[Sample], config: QuantConfig, target: str, layers: int,
            cycles_budget: float, name: str | None) -> PrecisionAdvice:
    measure = _Measure(model, example, calibration, inputs, target)
    qm = measure.quantised(config)
    base_sqnr, base_cycles, base_host = measure(config, qm)
    report = layer_accuracy(qm, inputs)
    losses = layer_losses(report, qm)
    tried: dict[tuple, tuple[str, str, LayerOverride]] = {}
    for layer, op, _ in losses[:layers]:
        for change, o in candidates_for(layer, op, config):
            tried.setdefault((o.module, o.op, o.dtype, o.weights), (layer, change, o))
    found, skipped = [], []
    for layer, change, o in track(list(tried.values()), "precision advice: candidates"):
        try:
            s, c, h = measure(replace(config, overrides=config.overrides + (o,)))
        except TesselError as exc:
            skipped.append(f"{layer} {change}: {str(exc).splitlines()[0]}")
            continue
        if h > base_host:  # host ops run in float: a gain there is not the NPU's
            skipped.append(f"{layer} {change}: moves {plural(h - base_host, 'op')} to the host "
                           f"({s - base_sqnr:+.1f} dB with them in float)")
            continue
        found.append(_candidate(layer, change, (o,), s, c, base_sqnr, base_cycles))
    found.sort(key=lambda c: (-c.sqnr_gain_db, c.cycles_change_pct))
    combined, best = _combine(found, config, measure, base_sqnr, base_cycles, base_host,
                              cycles_budget)
    return PrecisionAdvice(name or type(model).__name__, measure.arch.name, base_sqnr,
                           base_cycles, report, tuple(losses), tuple(found), combined,
                           tuple(skipped), best)


def _combine(found: list[Candidate], config: QuantConfig, measure: _Measure, base_sqnr: float,
             base_cycles: int, base_host: int, budget: float
             ) -> tuple[Candidate | None, QuantConfig]:
    """Greedy forward selection, measured (module docstring, 4.): (the combined change, its
    config), or (None, ``config``) when no candidate helps within the budget."""
    chosen: tuple[LayerOverride, ...] = ()
    best_sqnr, best_cycles = base_sqnr, base_cycles
    for cand in found:
        if cand.sqnr_gain_db < MIN_GAIN_DB or cand.cycles_change_pct > budget:
            continue
        trial = chosen + cand.overrides
        s, c, h = measure(replace(config, overrides=config.overrides + trial))
        if s >= best_sqnr + MIN_GAIN_DB and 100.0 * (c - base_cycles) / base_cycles <= budget \
                and h <= base_host:
            chosen, best_sqnr, best_cycles = trial, s, c
    if not chosen:
        return None, config
    flags = " ".join(override_flag(o) for o in chosen)
    return (_candidate("(combined)", plural(len(chosen), "change"), chosen, best_sqnr,
                       best_cycles, base_sqnr, base_cycles, flags),
            replace(config, overrides=config.overrides + chosen))


def _candidate(layer: str, change: str, overrides: tuple[LayerOverride, ...], s: float, c: int,
               base_sqnr: float, base_cycles: int, flag: str | None = None) -> Candidate:
    return Candidate(layer, change, flag or override_flag(overrides[0]), s, s - base_sqnr, c,
                     100.0 * (c - base_cycles) / base_cycles if base_cycles else 0.0, overrides)


def advise_model(model_spec: str, calibration: int, eval_samples: int,
                 config: QuantConfig | None = None, *, target: str = "tnpu-s",
                 layers: int = DEFAULT_LAYERS, cycles_budget: float = CYCLES_BUDGET_PCT
                 ) -> PrecisionAdvice:
    """``precision_advice`` of a zoo model (or path/to/file.py:factory) on the inputs ``tessel
    accuracy`` evaluates: ``calibration`` samples quantise, ``eval_samples`` held-out ones
    measure."""
    from tessel.analysis.accuracy import eval_set
    from tessel.models import load, resolve
    from tessel.quant.config import default_config

    spec = resolve(model_spec)
    model, example = load(model_spec)
    calib = list(spec.calibration_data(calibration))
    inputs = eval_set(spec, calibration, eval_samples, example)[0]
    return precision_advice(model, example, calib, inputs,
                            config if config is not None else default_config(spec.name),
                            target=target, layers=layers, cycles_budget=cycles_budget,
                            name=spec.name)
