"""Mixed precision chosen for the user: which layers' weights can be int4 under an accuracy budget
(and, optionally, which conv / linear inputs are worth int16).

The budget is a loss against the all-int8 model, in one metric measured on held-out inputs
(never the calibration inputs): output SQNR against float (dB), cosine similarity to float
(embeddings), or top-1 agreement with float (classifiers).

1. Sensitivity: in the float model, each conv / linear layer's weights alone are fake-quantised
   to int4 the way the quantiser does it (symmetric per output channel, [-7, 7], rounded as
   ``QuantConfig.int4_rounding`` says: GPTQ on the layer's calibration inputs by default); the
   squared error this adds at the outputs on the held-out inputs is the layer's noise.
2. Order: layers by weight bytes saved per unit of noise, the cheapest bytes first.
3. The longest prefix of that order whose predicted metric meets the budget (noise powers add:
   the int8 model's measured noise plus the chosen layers' noises), then checked for real: the
   model quantised with those layers int4, its golden (integer) model against float on the
   held-out inputs. A prefix that misses the budget is bisected on real measurements down to
   the longest one that meets it (the int8 model meets it by definition).
4. The rest of the layers, quietest first, each added when the model with it and the ones
   kept before it still measures within the budget (a layer whose bytes per unit of noise
   ranked it late may still fit the budget the prefix left), until FILL_TRIES of them miss.
5. Exchanges: a layer left out comes in for chosen layers that save fewer bytes together, when
   the noise model, fitted to the losses measured so far, predicts the budget may still hold
   (within the fit's own error); the exchange that gains the most bytes is measured first and
   kept when it meets the budget, at most EXCHANGE_TRIES of them measured (bytes per unit of
   noise is a greedy order: small quiet layers can spend the budget a large layer worth more
   bytes needed).

Steps 3-5 are :mod:`tessel.analysis.precision_search`.
0. With ``activations=InputPrecision.AUTO``, before step 3, when every layer int4 misses the
   budget with int8 inputs (else int16 inputs cannot buy more int4 bytes): each conv / linear
   layer's activation input is int8 or int16 (:func:`choose_inputs`: the groups of layers at
   the same place of repeated blocks whose measured gain per extra matrix cycle is at least
   every group's together);
   steps 3-6 then start from that model, and the budget is still a loss against the all-int8
   model, so the accuracy the int16 inputs buy is spent on more int4 weights.
6. With a target's memory (:class:`MemoryLimit`): when the constants of step 3's prefix do not
   fit, the shortest longer prefix that does, and no steps 4 and 5.

    plan = choose_weights(model, example, calibration, held_out, AccuracyBudget.parse("sqnr=1"))
    print(plan.text()); plan.config          # the QuantConfig to compile with
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch

from tessel.analysis.accuracy import cosine, sqnr_db
from tessel.analysis.precision_search import exchange, fill, longest_prefix
from tessel.display import Table, fmt_int, plural, short_repr, summary_html
from tessel.errors import TesselCompileError, TesselConfigError
from tessel.progress import info
from tessel.quant.config import (
    ActDtype,
    Int4Rounding,
    LayerOverride,
    QuantConfig,
    WeightDtype,
    config_keyword,
)
from tessel.quant.int4_weights import ConvShape, Gram, choose_int4, input_rows, int4_scale
from tessel.quant.qspecs import WEIGHT_RANGES, int4_clip

Sample = tuple[torch.Tensor, ...]
Outputs = list[np.ndarray]  # per model output, the held-out samples concatenated on axis 0


class InputPrecision(enum.Enum):
    """What ``--activations`` lets the precision search do with conv / linear inputs."""

    INT8 = "int8"  # every conv / linear input stays int8
    AUTO = "auto"  # int16 inputs where they buy the most accuracy per extra matrix cycle


class Metric(enum.Enum):
    """What an accuracy budget is measured in (golden model against float, held-out inputs)."""

    SQNR = "sqnr"  # dB over every output: 10 log10(sum y^2 / sum (y - y_int)^2)
    COSINE = "cosine"  # mean over samples of the first output's cosine similarity
    TOP1 = "top1"  # fraction of samples whose first output's argmax equals float's


@dataclass(frozen=True)
class AccuracyBudget:
    """How much of the all-int8 model's accuracy mixed precision may spend: ``loss`` in
    ``metric``'s unit (dB of SQNR, cosine similarity, or top-1 agreement as a fraction)."""

    metric: Metric = Metric.SQNR
    loss: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.metric, Metric):
            raise TesselConfigError(f"AccuracyBudget.metric must be a Metric, got "
                                    f"{self.metric!r}")
        if not (math.isfinite(self.loss) and self.loss >= 0):
            raise TesselConfigError(f"accuracy budget {self.loss!r}: give a loss >= 0")
        if self.metric is not Metric.SQNR and self.loss > 1:
            raise TesselConfigError(f"accuracy budget {self.metric.value}={self.loss}: a "
                                    f"{self.metric.value} loss is a fraction in [0, 1]")

    @staticmethod
    def parse(text: str) -> AccuracyBudget:
        """``METRIC=LOSS`` as the command line takes it: ``sqnr=1`` (dB), ``cosine=0.01``,
        ``top1=0.02``."""
        name, _, value = text.partition("=")
        metrics = ", ".join(m.value for m in Metric)
        try:
            return AccuracyBudget(Metric(name.strip().lower()), float(value))
        except ValueError:
            raise TesselConfigError(
                f"--accuracy-budget {text!r}: expected METRIC=LOSS with METRIC one of {metrics} "
                f"(e.g. sqnr=1.0: at most 1 dB of SQNR below the all-int8 model)") from None

    def __str__(self) -> str:
        unit = " dB" if self.metric is Metric.SQNR else ""
        return f"{self.metric.value} loss <= {self.loss:g}{unit}"


def measure(metric: Metric, floats: Outputs, goldens: Outputs) -> float:
    """``metric`` of ``goldens`` against ``floats`` (higher is better for all three)."""
    if metric is Metric.SQNR:
        return sqnr_db(np.concatenate([f.ravel() for f in floats]),
                       np.concatenate([g.ravel() for g in goldens]))
    f0, g0 = floats[0].reshape(floats[0].shape[0], -1), goldens[0].reshape(
        goldens[0].shape[0], -1)
    if metric is Metric.COSINE:
        return float(np.mean(cosine(f0, g0)))
    return float(np.mean(f0.argmax(-1) == g0.argmax(-1)))


@dataclass(frozen=True)
class LayerChoice:
    """One conv / linear layer: its weights' type in the plan, and what int4 does to it."""

    layer: str  # module path
    kind: str  # the module's class (Conv2d, Linear, ...)
    weights: int  # weight count
    int4: bool
    bytes_saved: int  # weight bytes int4 saves against int8 (two per byte)
    channels: int  # output channels (one bias each)
    alone_db: float  # SQNR loss (dB) predicted for the int8 model with only this layer int4
    input: str = "int8"  # its activation input's type: int16 makes it an int16 x int8 MAC
    macs: int = 0  # its multiply-accumulates per inference (int16 inputs: twice the cycles)


@dataclass(frozen=True)
class InputGroup:
    """Conv / linear layers at the same place of repeated blocks (their module paths equal
    once the numeric names are replaced by ``*``), as the activation choice measures them."""

    pattern: str  # e.g. encoder.layer.*.output.dense
    layers: tuple[str, ...]
    macs: int  # their multiply-accumulates per inference
    value: float  # the metric with only their inputs int16 (int8 weights)
    int16: bool  # chosen


@dataclass(frozen=True)
class PrecisionPlan:
    """The chosen weight types and the measurements that chose them."""

    model: str
    budget: AccuracyBudget
    samples: int  # held-out inputs measured on
    int8_value: float  # the all-int8 model's metric
    value: float  # the chosen model's metric (measured, not predicted)
    layers: tuple[LayerChoice, ...]  # in module order
    evaluations: int  # models quantised and measured
    order: tuple[str, ...]  # every layer, cheapest int4 bytes first (chosen: a prefix, the fill, exchanges)
    config: QuantConfig
    memory: str = ""  # the target memory the constants had to fit ("": no memory limit)
    memory_bytes: int = 0  # its size
    constants: int = 0  # the chosen model's constants bytes there (0: no memory limit)
    budget_met: bool = True  # False: fitting the memory took more int4 than the budget allows
    inputs_value: float | None = None  # activations auto: the metric with the int16 inputs
    input_groups: tuple[InputGroup, ...] = ()  # activations auto: what each group measured

    @property
    def int16_inputs(self) -> tuple[str, ...]:
        return tuple(x.layer for x in self.layers if x.input == "int16")

    @property
    def int16_macs(self) -> int:
        """The MACs whose activation input is int16 (each takes two int8 MAC slots)."""
        return sum(x.macs for x in self.layers if x.input == "int16")

    @property
    def bias_bytes_added(self) -> int:
        """Bias bytes the int16 inputs add: an int64 bias per output channel, not int32."""
        return sum(4 * x.channels for x in self.layers if x.input == "int16")

    @property
    def int4_layers(self) -> tuple[str, ...]:
        return tuple(x.layer for x in self.layers if x.int4)

    @property
    def bytes_saved(self) -> int:
        return sum(x.bytes_saved for x in self.layers if x.int4)

    @property
    def int8_bytes(self) -> int:
        return sum(x.weights for x in self.layers)

    def table(self) -> Table:
        rows = [(x.layer, x.kind, "int4" if x.int4 else "int8", x.input, fmt_int(x.weights),
                 fmt_int(x.bytes_saved if x.int4 else 0), f"{x.alone_db:.2f}")
                for x in self.layers]
        return Table(("layer", "module", "weights", "input", "count", "bytes saved",
                      "int4 alone: dB"),
                     rows, numeric=(False, False, False, False, True, True, True),
                     title=f"weight precision per layer ({self.budget}; "
                           f"{plural(self.samples, 'held-out input')})")

    def summary(self) -> str:
        unit = " dB" if self.budget.metric is Metric.SQNR else ""
        n4 = len(self.int4_layers)
        text = (f"precision auto: {n4} of {plural(len(self.layers), 'layer')} int4, weights "
                f"{fmt_int(self.int8_bytes - self.bytes_saved)} of {fmt_int(self.int8_bytes)} "
                f"bytes ({100 * self.bytes_saved / max(self.int8_bytes, 1):.1f} % saved); "
                f"{self.budget.metric.value} {self.value:.4g}{unit} against int8's "
                f"{self.int8_value:.4g}{unit} ({plural(self.evaluations, 'model')} measured)")
        if self.inputs_value is not None:
            macs = sum(x.macs for x in self.layers)
            text += (f"\ninputs: {len(self.int16_inputs)} of {plural(len(self.layers), 'layer')} "
                     f"int16 ({100 * self.int16_macs / max(macs, 1):.1f} % of the MACs at half "
                     f"rate, +{fmt_int(self.bias_bytes_added)} int64 bias bytes); "
                     f"{self.budget.metric.value} {self.inputs_value:.4g}{unit} with int8 weights")
        if self.memory:
            text += (f"; constants {fmt_int(self.constants)} bytes, memory '{self.memory}' has "
                     f"{fmt_int(self.memory_bytes)}")
        if not self.budget_met:
            text += (f"\nthe {self.budget} is not met: the int4 layers the budget allows "
                     f"do not fit memory '{self.memory}', these are the fewest (cheapest in "
                     "accuracy first) that do")
        return text

    def text(self, width: int | None = None) -> str:
        return self.summary() + "\n" + self.table().text(width)

    def to_json(self) -> str:
        d = asdict(self)
        d["budget"] = {"metric": self.budget.metric.value, "loss": self.budget.loss}
        d.pop("config")
        d["int4_layers"] = list(self.int4_layers)
        d["int16_inputs"] = list(self.int16_inputs)
        return json.dumps(d, indent=1, sort_keys=True)

    def __repr__(self) -> str:
        return short_repr("PrecisionPlan", [("model", repr(self.model)),
                                            ("int4", f"{len(self.int4_layers)}/{len(self.layers)}"),
                                            ("saved", f"{fmt_int(self.bytes_saved)} B"),
                                            ("value", f"{self.value:.4g}")])

    def _repr_html_(self) -> str:
        return summary_html(f"PrecisionPlan of {self.model}", [self.summary()], [self.table()])


_WEIGHT_AXIS = {torch.nn.Conv1d: 0, torch.nn.Conv2d: 0, torch.nn.Conv3d: 0, torch.nn.Linear: 0,
                torch.nn.ConvTranspose1d: 1, torch.nn.ConvTranspose2d: 1}


def weight_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module, int]]:
    """(module path, module, output-channel axis) of every conv / linear layer, in module
    order (transposed convs only with groups 1, as the quantiser takes them)."""
    out = []
    for path, m in model.named_modules():
        axis = _WEIGHT_AXIS.get(type(m))
        if axis is None or not path or getattr(m, "weight", None) is None:
            continue
        if axis == 1 and m.groups != 1:
            continue
        out.append((path, m, axis))
    return out


def fake_int4(w: torch.Tensor, axis: int, gram: Gram | None = None,
              rounding: Int4Rounding = Int4Rounding.CLIP_MSE) -> torch.Tensor:
    """``w`` through symmetric per-channel int4 quantisation the quantiser's way: GPTQ on the
    layer's input Gram matrix ``gram`` (:func:`tessel.quant.int4_weights.choose_int4`) when
    ``rounding`` is GPTQ and ``gram`` is given, else nearest rounding with each channel's range
    max |w| (NEAREST) or clipped to its least rounding error (:func:`int4_clip`)."""
    qmin, qmax = WEIGHT_RANGES[WeightDtype.INT4]
    shape = [1] * w.dim()
    shape[axis] = -1
    if rounding is Int4Rounding.GPTQ and gram is not None and axis == 0:
        ranges, q = choose_int4(w, gram, int4_clip(w, 0))
        return q * int4_scale(ranges).to(w.dtype).reshape(shape)
    if rounding is Int4Rounding.NEAREST:
        clip = torch.movedim(w.detach(), axis, 0).reshape(w.shape[axis], -1).abs().amax(1)
    else:
        clip = int4_clip(w, axis)
    scale = int4_scale(clip).to(w.dtype).reshape(shape)
    return torch.clamp(torch.round(w / scale), qmin, qmax) * scale


def _conv_shape(m: torch.nn.Module) -> ConvShape | None:
    if isinstance(m, torch.nn.Linear):
        return None
    return ConvShape(tuple(m.kernel_size), tuple(m.stride), tuple(m.padding),
                     tuple(m.dilation), m.groups)


def layer_grams(model: torch.nn.Module, samples: Sequence[Sample]) -> dict[str, Gram]:
    """Per conv / linear layer (module path), the Gram matrix of its inputs on ``samples`` (the
    float model's), as GPTQ rounding takes it; layers it cannot take (transposed convs,
    padding by name) are left out."""
    grams: dict[str, Gram] = {}
    hooks = []
    for path, m, axis in weight_layers(model):
        if axis != 0 or isinstance(getattr(m, "padding", 0), str):
            continue
        conv = _conv_shape(m)
        grams[path] = Gram(m.weight[0].numel())

        def hook(_m, args, _out, gram=grams[path], conv=conv) -> None:
            gram.add(input_rows(args[0], conv))

        hooks.append(m.register_forward_hook(hook))
    try:
        with torch.no_grad():
            for s in samples:
                model(*((s,) if isinstance(s, torch.Tensor) else s))
    finally:
        for h in hooks:
            h.remove()
    return grams


def float_outputs(model: torch.nn.Module, samples: Sequence[Sample]) -> Outputs:
    rows = []
    with torch.no_grad():
        for s in samples:
            y = model(*s)
            y = (y,) if isinstance(y, torch.Tensor) else tuple(y)
            rows.append([t.detach().numpy().astype(np.float64) for t in y])
    return [np.concatenate([r[k] for r in rows]) for k in range(len(rows[0]))]


def layer_noise(model: torch.nn.Module, samples: Sequence[Sample], floats: Outputs,
                grams: dict[str, Gram] | None = None,
                rounding: Int4Rounding = Int4Rounding.CLIP_MSE) -> list[float]:
    """Per weight layer: the squared error at the outputs when only its weights are int4
    (rounded as ``rounding`` says; GPTQ on ``grams``, :func:`layer_grams`)."""
    noises = []
    grams = grams or {}
    for path, m, axis in weight_layers(model):
        info(f"precision auto: sensitivity of {path}")
        original = m.weight.data
        m.weight.data = fake_int4(original, axis, grams.get(path), rounding)
        try:
            outs = float_outputs(model, samples)
        finally:
            m.weight.data = original
        noises.append(sum(float(np.sum((f - o) ** 2)) for f, o in zip(floats, outs,
                                                                       strict=True)))
    return noises


def _escape(path: str) -> str:
    """A module path as an fnmatch pattern that matches only itself."""
    return "".join(f"[{c}]" if c in "*?[]" else c for c in path)


def with_int4(config: QuantConfig, paths: Sequence[str]) -> QuantConfig:
    """``config`` with the weights of the modules at ``paths`` int4, before its own overrides
    (so a user's per-layer choice still wins)."""
    chosen = tuple(LayerOverride(module=_escape(p), weights=WeightDtype.INT4) for p in paths)
    return replace(config, overrides=chosen + config.overrides)


def with_int16_inputs(config: QuantConfig, paths: Sequence[str]) -> QuantConfig:
    """``config`` with the activation inputs of the conv / linear modules at ``paths`` int16,
    before its own overrides (so a user's per-layer choice still wins)."""
    chosen = tuple(LayerOverride(module=_escape(p), mac_input=ActDtype.INT16) for p in paths)
    return replace(config, overrides=chosen + config.overrides)


def layer_macs(model: torch.nn.Module, example: Sample) -> dict[str, int]:
    """Per conv / linear layer (module path), its multiply-accumulates on ``example``."""
    macs: dict[str, int] = {}
    hooks = []
    for path, m, _ in weight_layers(model):
        def hook(m, _args, out, path=path) -> None:
            per_output = m.weight[0].numel() if not isinstance(
                m, (torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d)) else (
                m.weight.shape[0] * m.weight[0, 0].numel() // m.weight.shape[1])
            macs[path] = macs.get(path, 0) + out.numel() * per_output

        hooks.append(m.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(*((example,) if isinstance(example, torch.Tensor) else example))
    finally:
        for h in hooks:
            h.remove()
    return macs


def _group_pattern(path: str) -> str:
    return ".".join("*" if part.isdigit() else part for part in path.split("."))


Evaluate = Callable[[QuantConfig], Outputs]  # a config's golden outputs on the held-out inputs


def choose_inputs(layers: Sequence[str], macs: dict[str, int],
                  value_of: Callable[[QuantConfig], float], config: QuantConfig,
                  int8_value: float) -> tuple[InputGroup, ...]:
    """The layer groups (:class:`InputGroup`) whose activation inputs are worth int16: each
    group's gain (its metric with only its inputs int16, less the all-int8 ``int8_value``)
    per extra matrix cycle (its MACs: an int16 MAC takes two int8 slots) at least that of every
    group int16 together, and above nothing. ``value_of(config)`` measures a config."""
    groups: dict[str, list[str]] = {}
    for path in layers:
        groups.setdefault(_group_pattern(path), []).append(path)
    info(f"precision auto: every conv / linear input int16 ({plural(len(groups), 'group')})")
    every = value_of(with_int16_inputs(config, list(layers)))
    total = sum(macs.get(p, 0) for p in layers)
    rate = (every - int8_value) / max(total, 1)
    out = []
    for pattern, paths in groups.items():
        info(f"precision auto: inputs of {pattern} int16")
        value = value_of(with_int16_inputs(config, paths))
        cost = sum(macs.get(p, 0) for p in paths)
        gain = value - int8_value
        out.append(InputGroup(pattern, tuple(paths), cost, value,
                              gain > 0 and rate > 0 and gain >= rate * cost))
    return tuple(out)


def input_layers(model: torch.nn.Module) -> list[str]:
    """The conv / linear layers whose activation input may be int16 (not transposed convs)."""
    return [path for path, _, axis in weight_layers(model) if axis == 0]


@dataclass(frozen=True)
class MemoryLimit:
    """The target memory the constants must fit: its name, its size, and ``constants(config)``,
    the bytes of the model quantised with ``config`` and compiled for the target (stored
    compressed where the target's weight decoder is on). ``note`` says what else could help."""

    memory: str
    size: int
    constants: Callable[[QuantConfig], int]
    note: str = ""


def choose_weights(model: torch.nn.Module, evaluate: Evaluate, held_out: Sequence[Sample],
                   budget: AccuracyBudget, config: QuantConfig | None = None,
                   name: str = "model", limit: MemoryLimit | None = None,
                   activations: InputPrecision = InputPrecision.INT8) -> PrecisionPlan:
    """The plan that makes the most weight bytes int4 within ``budget`` (module docstring).

    ``evaluate(config)`` quantises the model with ``config`` and returns its golden outputs
    on ``held_out`` (see :func:`golden_evaluator`); ``config`` is the base (all-int8 unless
    the user's overrides say otherwise). With ``limit``, the constants must also fit its
    memory: when the budget's plan does not, the shortest prefix of the order that fits
    (the least accuracy cost the noise model predicts), the budget then not met; a
    TesselCompileError when even every layer int4 does not fit.
    ``activations=InputPrecision.AUTO``, unless
    every layer int4 meets the budget with int8 inputs already, first makes the conv / linear
    inputs int16 where they buy the most accuracy per extra matrix cycle
    (:func:`choose_inputs`); the int4 search then spends the budget from there (still
    measured against the all-int8 model); INT8 (the default) keeps every MAC input int8."""
    config = config if config is not None else QuantConfig()
    if config.weights is not WeightDtype.INT8:
        raise TesselConfigError("precision auto starts from int8 weights: leave --weights / "
                                "QuantConfig.weights at int8 (per-layer choices still apply)")
    if not isinstance(activations, InputPrecision):
        raise TesselConfigError(f"precision auto: activations must be an InputPrecision "
                                f"(int8, auto), got {activations!r}")
    layers = weight_layers(model)
    if not layers:
        raise TesselConfigError(f"{name}: no conv or linear layer to choose a weight type for")
    floats = float_outputs(model, held_out)
    calibration = list(getattr(evaluate, "calibration", None) or [])[
        :getattr(evaluate, "calibration_samples", None)]
    grams = layer_grams(model, calibration) if (
        config.int4_rounding is Int4Rounding.GPTQ and calibration) else None
    noises = layer_noise(model, held_out, floats, grams, config.int4_rounding)
    signal = sum(float(np.sum(f**2)) for f in floats)
    evaluations = 0

    def evaluate_counted(c: QuantConfig) -> Outputs:
        nonlocal evaluations
        evaluations += 1
        return evaluate(c)

    info("precision auto: the all-int8 model")
    int8_value = measure(budget.metric, floats, evaluate_counted(config))
    goal = int8_value - budget.loss
    macs = layer_macs(model, held_out[0])
    groups: tuple[InputGroup, ...] = ()
    wide: list[str] = []
    inputs_value = None
    every_int4 = None  # activations auto: the all-int4 model's metric with int8 inputs
    if activations is InputPrecision.AUTO:
        info("precision auto: every layer int4, int8 inputs")
        every_int4 = measure(budget.metric, floats, evaluate_counted(
            with_int4(config, [p for p, _, _ in layers])))
    # int16 inputs may buy more int4 layers
    if activations is InputPrecision.AUTO and every_int4 < goal:
        groups = choose_inputs(input_layers(model), macs,
                               lambda c: measure(budget.metric, floats, evaluate_counted(c)), config,
                               int8_value)
        wide = [p for g in groups if g.int16 for p in g.layers]
        if wide:
            info(f"precision auto: {plural(len(wide), 'layer')} with int16 inputs")
            inputs_value = measure(budget.metric, floats,
                                   evaluate_counted(with_int16_inputs(config, wide)))
            if inputs_value <= int8_value:  # together they buy nothing: keep int8 inputs
                wide, inputs_value = [], None
        config = with_int16_inputs(config, wide)
    start = inputs_value if inputs_value is not None else int8_value
    measured = {frozenset(): start}
    if every_int4 is not None and not wide:
        measured[frozenset(range(len(layers)))] = every_int4
    start_noise = signal / 10 ** (start / 10) if budget.metric is Metric.SQNR else 0.0
    saved = [(m.weight.numel() - (m.weight.numel() + 1) // 2) for _, m, _ in layers]
    order = sorted(range(len(layers)),
                   key=lambda i: (-saved[i] / max(noises[i], 1e-30), layers[i][0]))

    def value_of(chosen: Sequence[int]) -> float:
        key = frozenset(chosen)
        if key not in measured:
            info(f"precision auto: {plural(len(key), 'layer')} int4")
            paths = [layers[i][0] for i in chosen]
            measured[key] = measure(budget.metric, floats, evaluate_counted(with_int4(config, paths)))
        return measured[key]

    room = replace(budget, loss=max(start - goal, 0.0))  # what the int4 layers may spend
    guess = _predicted_prefix(room, order, noises, signal, start_noise, floats, held_out)
    lo = longest_prefix(order, value_of, goal, guess)
    fit = {}
    if limit is not None:
        paths = [layers[i][0] for i in order]
        fit_k, constants = _fit(limit, config, paths, lo, name)
        fit = {"memory": limit.memory, "memory_bytes": limit.size, "constants": constants,
               "budget_met": value_of(order[:fit_k]) >= goal}
        lo = fit_k
    picked = list(order[:lo])
    if fit.get("budget_met", True):
        picked = fill(picked, order[lo:], noises, value_of, goal)
        picked = exchange(picked, saved, noises, value_of, goal, start, measured)
    chosen = set(picked)
    alone = [_alone_db(signal, start_noise, n) for n in noises]
    wide_set = set(wide)
    choices = tuple(LayerChoice(path, type(m).__name__, m.weight.numel(), i in chosen, saved[i],
                                m.weight.shape[axis], alone[i],
                                "int16" if path in wide_set else "int8", macs.get(path, 0))
                    for i, (path, m, axis) in enumerate(layers))
    final = with_int4(config, [layers[i][0] for i in picked])
    value = value_of(picked)
    return PrecisionPlan(name, budget, len(held_out), int8_value, value, choices,
                         evaluations, tuple(layers[i][0] for i in order), final, **fit,
                         inputs_value=inputs_value, input_groups=groups)


def _fit(limit: MemoryLimit, config: QuantConfig, paths: Sequence[str], k: int, name: str
         ) -> tuple[int, int]:
    """(the shortest prefix of ``paths``, at least ``k`` long, whose constants fit ``limit``,
    its constants bytes); bisected on compiled sizes, which fall as layers turn int4."""
    sizes: dict[int, int] = {}

    def size(j: int) -> int:
        if j not in sizes:
            info(f"precision auto: constants with {plural(j, 'layer')} int4")
            sizes[j] = limit.constants(with_int4(config, paths[:j]))
        return sizes[j]

    if size(k) <= limit.size:
        return k, sizes[k]
    if size(len(paths)) > limit.size:
        raise TesselCompileError(
            f"{name}: constants need {sizes[len(paths)]:,} bytes with every layer's weights "
            f"int4 ({sizes[k]:,} with the {plural(k, 'layer')} the accuracy budget allows) "
            f"but memory '{limit.memory}' has {limit.size:,}{limit.note}")
    lo, hi = k, len(paths)  # lo does not fit, hi does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if size(mid) <= limit.size else (mid, hi)
    return hi, sizes[hi]


def _alone_db(signal: float, int8_noise: float, noise: float) -> float:
    if int8_noise <= 0 or signal <= 0:
        return 0.0
    return 10 * math.log10((int8_noise + noise) / int8_noise)


def _predicted_prefix(budget: AccuracyBudget, order: list[int], noises: list[float],
                      signal: float, int8_noise: float, floats: Outputs,
                      held_out: Sequence[Sample]) -> int:
    """The longest prefix the noise model says meets the budget (top-1: all of them)."""
    if budget.metric is Metric.TOP1:
        return len(order)
    if budget.metric is Metric.SQNR:
        allowed = int8_noise * (10 ** (budget.loss / 10) - 1)
    else:  # 1 - cos ~ |noise|^2 / (2 |y|^2) per sample; the mean over samples
        allowed = 2 * budget.loss * signal / max(len(held_out), 1)
    total, k = 0.0, 0
    for i in order:
        total += noises[i]
        if total > allowed:
            break
        k += 1
    return k


class GoldenEvaluator:
    """``evaluate`` for :func:`choose_weights`: PTQ with the config, then the golden model on
    every held-out input; the last quantised model is kept for :func:`memory_limit`."""

    def __init__(self, model: torch.nn.Module, example: Sample, calibration: Sequence[Sample],
                 held_out: Sequence[Sample], calibration_samples: int) -> None:
        self.model, self.example, self.calibration = model, example, calibration
        self.held_out, self.calibration_samples = held_out, calibration_samples
        self._last: tuple[QuantConfig, object] | None = None

    def quantised(self, config: QuantConfig):
        """The QuantizedModel of ``config``."""
        from tessel.quant.api import quantize

        if self._last is None or self._last[0] != config:
            self._last = (config, quantize(self.model, self.example, self.calibration, config,
                                           calibration_samples=self.calibration_samples))
        return self._last[1]

    def __call__(self, config: QuantConfig) -> Outputs:
        return golden_outputs(self.quantised(config), self.held_out)


def golden_evaluator(model: torch.nn.Module, example: Sample, calibration: Sequence[Sample],
                     held_out: Sequence[Sample], calibration_samples: int) -> GoldenEvaluator:
    """``evaluate`` for :func:`choose_weights` (see :class:`GoldenEvaluator`)."""
    return GoldenEvaluator(model, example, calibration, held_out, calibration_samples)


def memory_limit(arch, evaluator: GoldenEvaluator, name: str = "model") -> MemoryLimit:
    """The MemoryLimit of ``arch``'s weights memory: constants measured by compiling the model
    quantised by ``evaluator`` for ``arch`` with that memory unbounded."""
    from tessel.arch.checks import MAX_OFFCHIP_BYTES
    from tessel.driver import compile_graph

    memory = arch.offchip[arch.memory_index(arch.weights_memory)]
    roomy = arch.with_params({f"offchip.{memory.name}.size_bytes": MAX_OFFCHIP_BYTES})

    def constants(config: QuantConfig) -> int:
        cm = compile_graph(evaluator.quantised(config).graph, roomy, name=name)
        return len(cm.program.constants)

    note = "" if arch.wdecoder.enabled else (
        " (stored raw: the target's weight decoder, wdecoder.enabled, would store them "
        "compressed)")
    return MemoryLimit(memory.name, memory.size_bytes, constants, note)


def golden_outputs(qm, samples: Sequence[Sample]) -> Outputs:
    """The golden model's outputs of a QuantizedModel on ``samples``, concatenated per output."""
    rows = [qm.run(*s) for s in samples]
    return [np.concatenate([np.asarray(r[k], np.float64) for r in rows])
            for k in range(len(rows[0]))]


def auto_weights(model: torch.nn.Module, example_inputs: Sample,
                 calibration_data: Sequence[Sample], held_out: Sequence[Sample],
                 budget: AccuracyBudget | str = "sqnr=1",
                 quant_config: QuantConfig | None = None, *,
                 calibration_samples: int | None = None,
                 config: QuantConfig | None = None, target=None,
                 activations: InputPrecision = InputPrecision.INT8) -> PrecisionPlan:
    """The weight types to quantise ``model`` with: int4 where ``budget`` allows it, measured
    on ``held_out`` (inputs not in ``calibration_data``). ``plan.config`` goes to
    ``tessel.compile(..., quant_config=plan.config)`` or ``tessel.quantize``. With ``target``
    (a preset name or NpuArch), the constants must also fit its weights memory
    (:class:`MemoryLimit`). ``activations=InputPrecision.AUTO`` also chooses int16 conv /
    linear inputs (:func:`choose_weights`)."""
    config = config_keyword(quant_config, config, "auto_weights")
    budget = AccuracyBudget.parse(budget) if isinstance(budget, str) else budget
    calibration = list(calibration_data)
    if not held_out:
        raise TesselConfigError("auto_weights needs held-out inputs to measure accuracy on")
    evaluate = golden_evaluator(model, example_inputs, calibration, held_out,
                                calibration_samples or len(calibration))
    name = type(model).__name__
    limit = None
    if target is not None:
        from tessel.arch import load_target

        arch = load_target(target) if isinstance(target, str) else target
        limit = memory_limit(arch, evaluate, name)
    return choose_weights(model, evaluate, held_out, budget, config, name, limit, activations)
