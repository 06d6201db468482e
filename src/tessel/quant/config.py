"""How the user steers Tessel's quantiser: observer kind, int16 tensors, int4 weights,
per-layer overrides.

One frozen :class:`QuantConfig` is handed to :class:`tessel.quant.quantizer.TesselQuantizer`. It
holds only choices; what the NPU can execute (int8 or int16 x int8 / int4 MACs, per-channel
weights, int32 or int64 bias) is fixed by the quantiser and not configurable.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any

from tessel.errors import TesselConfigError


class ObserverKind(enum.Enum):
    """How PTQ calibration turns observed activations into a range (QAT: moving averages)."""

    MINMAX = "minmax"  # running min / max
    MOVING_AVERAGE = "moving_average"  # exponential moving average of per-batch min / max
    HISTOGRAM = "histogram"  # torchao's L2-error-minimising histogram search
    PERCENTILE = "percentile"  # mean over batches of the p-th / (100-p)-th percentiles


class ActDtype(enum.Enum):
    """Integer type of an activation tensor."""

    INT8 = "int8"  # asymmetric per tensor, [-128, 127]
    INT16 = "int16"  # symmetric per tensor, [-32768, 32767], zero point 0


class WeightDtype(enum.Enum):
    """Integer type of a conv / linear layer's weights (symmetric, per output channel)."""

    INT8 = "int8"  # [-127, 127], one per byte
    INT4 = "int4"  # [-7, 7], two per byte on the NPU: half the bytes, coarser weights


class Int4Rounding(enum.Enum):
    """How an int4 weight layer's values are chosen (int8 weights always round to nearest of
    the channel's max |w| range)."""

    NEAREST = "nearest"  # range max |w| per channel, each weight rounded to the nearest level
    CLIP_MSE = "clip_mse"  # range clipped to the least weight rounding error, then nearest
    GPTQ = "gptq"  # clipped range; error-compensating rounding on the layer's calibration inputs


class OpKind(enum.Enum):
    """The op types the quantiser knows (anything else stays float and runs on the host)."""

    CONV = "conv"
    CONV_TRANSPOSE = "conv_transpose"  # groups 1: weights per output channel (axis 1)
    LINEAR = "linear"
    MATMUL = "matmul"
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"  # division by a scalar only
    CAT = "cat"
    SIGMOID = "sigmoid"
    TANH = "tanh"
    HARDSWISH = "hardswish"
    HARDSIGMOID = "hardsigmoid"
    GELU = "gelu"
    SILU = "silu"
    EXP = "exp"
    NEG = "neg"
    RSQRT = "rsqrt"  # RMS norm's 1 / sqrt(mean(x^2) + eps)
    SOFTMAX = "softmax"
    LAYER_NORM = "layer_norm"
    RELU = "relu"
    CLAMP = "clamp"  # relu6, hardtanh, clamp with constant bounds
    MAX_POOL = "max_pool"
    AVG_POOL = "avg_pool"
    MEAN = "mean"
    DATA_MOVEMENT = "data_movement"  # reshape, permute, pad, slice, ...
    RESAMPLE = "resample"  # bilinear upsampling: convex combinations of input values
    SPLIT = "split"  # unbind / split: a list of tensors, read by getitem
    BATCH_NORM = "batch_norm"  # only inside a conv -> bn (-> act) chain (QAT)


@dataclass(frozen=True)
class LayerOverride:
    """Changes the quantisation of the ops it matches; later overrides win over earlier ones.

    ``module`` is an ``fnmatch`` pattern matched against every fully qualified module name in the
    op's ``nn_module_stack`` (e.g. ``"encoder.layer.*.attention"``, ``"features.0"``); ``op`` limits
    it to one op type. Either or both must be given. ``dtype`` sets the activation type of the
    op's inputs and output (a MAC op's output only: its input keeps int8 unless ``mac_input``
    says otherwise), ``mac_input`` the activation input type of a conv / linear layer (INT16:
    an int16 x int8 / int4 MAC with an int64 bias and a 48-bit accumulator, docs/numerics.md;
    a matmul of two activations and a transposed conv always read int8; the op that produces
    the input then writes int16), ``weights`` the type of a conv / linear layer's weights,
    ``observer`` its observer, and ``quantize=False`` leaves the op in float (a host op).

        LayerOverride(module="encoder.layer.*.output.dense", mac_input=ActDtype.INT16)
    """

    module: str | None = None
    op: OpKind | None = None
    dtype: ActDtype | None = None
    observer: ObserverKind | None = None
    quantize: bool = True
    weights: WeightDtype | None = None
    mac_input: ActDtype | None = None

    def __post_init__(self) -> None:
        if self.module is None and self.op is None:
            raise TesselConfigError("LayerOverride: give `module` (a name pattern), `op`, or both")
        if self.op is not None and not isinstance(self.op, OpKind):
            raise TesselConfigError(f"LayerOverride.op must be an OpKind, got {self.op!r}")
        if self.dtype is not None and not isinstance(self.dtype, ActDtype):
            raise TesselConfigError(f"LayerOverride.dtype must be an ActDtype, got {self.dtype!r}")
        if self.observer is not None and not isinstance(self.observer, ObserverKind):
            raise TesselConfigError(
                f"LayerOverride.observer must be an ObserverKind, got {self.observer!r}"
            )
        if self.weights is not None and not isinstance(self.weights, WeightDtype):
            raise TesselConfigError(
                f"LayerOverride.weights must be a WeightDtype, got {self.weights!r}"
            )
        if self.mac_input is not None and not isinstance(self.mac_input, ActDtype):
            raise TesselConfigError(
                f"LayerOverride.mac_input must be an ActDtype, got {self.mac_input!r}"
            )


_MAC_INPUT_KINDS = frozenset({OpKind.CONV, OpKind.CONV_TRANSPOSE, OpKind.LINEAR, OpKind.MATMUL})
_DEFAULT_INT16_INPUTS = frozenset({OpKind.SOFTMAX, OpKind.LAYER_NORM})
_DEFAULT_INT16_OUTPUTS = frozenset({OpKind.SOFTMAX})


@dataclass(frozen=True)
class QuantConfig:
    """Quantisation choices for one model.

    * ``observer`` / ``percentile``: the activation observer for PTQ calibration;
    * ``int16_inputs`` / ``int16_outputs``: op types whose activation inputs / output are int16
      (default: softmax in and out, layer norm in). Add ``OpKind.ADD`` to both for a transformer's
      residual stream; ``OpKind.CONV`` / ``OpKind.LINEAR`` in ``int16_inputs`` make those layers'
      inputs int16 (int16 x int8 MACs; matmul and transposed-conv inputs stay int8);
    * ``weights``: the weight type of every conv / linear layer (int8, or int4: half the bytes);
    * ``int4_rounding``: how int4 weights are rounded (:class:`Int4Rounding`);
    * ``overrides``: per-layer changes by module name or op type (see :class:`LayerOverride`);
    * ``share_residual_qparams``: the two inputs of a tensor + tensor add / sub share one scale
      and zero point (the add then needs no input rescale on the NPU, at some accuracy cost).
    """

    observer: ObserverKind = ObserverKind.MINMAX
    percentile: float = 99.99
    int16_inputs: frozenset[OpKind] = field(default=_DEFAULT_INT16_INPUTS)
    int16_outputs: frozenset[OpKind] = field(default=_DEFAULT_INT16_OUTPUTS)
    overrides: tuple[LayerOverride, ...] = ()
    share_residual_qparams: bool = False
    weights: WeightDtype = WeightDtype.INT8
    int4_rounding: Int4Rounding = Int4Rounding.GPTQ

    def __post_init__(self) -> None:
        if not isinstance(self.int4_rounding, Int4Rounding):
            raise TesselConfigError(f"QuantConfig.int4_rounding must be an Int4Rounding, got "
                                    f"{self.int4_rounding!r}")
        if not isinstance(self.observer, ObserverKind):
            raise TesselConfigError(
                f"QuantConfig.observer must be an ObserverKind, got {self.observer!r}"
            )
        if not 50.0 < self.percentile <= 100.0:
            raise TesselConfigError(
                f"QuantConfig.percentile must be in (50, 100], got {self.percentile!r}"
            )
        for name in ("int16_inputs", "int16_outputs"):
            kinds = getattr(self, name)
            if not all(isinstance(k, OpKind) for k in kinds):
                raise TesselConfigError(f"QuantConfig.{name} must hold OpKind values: {kinds!r}")
            object.__setattr__(self, name, frozenset(kinds))
        if not isinstance(self.weights, WeightDtype):
            raise TesselConfigError(f"QuantConfig.weights must be a WeightDtype, got "
                                    f"{self.weights!r}")
        if not all(isinstance(o, LayerOverride) for o in self.overrides):
            raise TesselConfigError("QuantConfig.overrides must be a tuple of LayerOverride")
        object.__setattr__(self, "overrides", tuple(self.overrides))


@dataclass(frozen=True)
class NodeRule:
    """What the config says for one op after overrides: skip it, or its dtypes and observer."""

    quantize: bool
    in_dtype: ActDtype  # a conv / linear: its activation input (LayerOverride.mac_input)
    out_dtype: ActDtype
    observer: ObserverKind
    weights: WeightDtype = WeightDtype.INT8


def resolve_rule(config: QuantConfig, kind: OpKind, module_paths: tuple[str, ...]) -> NodeRule:
    """Apply ``config`` (int16 sets, then overrides in order) to an op of ``kind`` in modules.
    A MAC op's ``in_dtype`` follows ``int16_inputs`` and ``LayerOverride.mac_input``, not
    ``LayerOverride.dtype``."""
    mac = kind in _MAC_INPUT_KINDS
    rule = NodeRule(
        quantize=True,
        in_dtype=ActDtype.INT16 if kind in config.int16_inputs else ActDtype.INT8,
        out_dtype=ActDtype.INT16 if kind in config.int16_outputs else ActDtype.INT8,
        observer=config.observer,
        weights=config.weights,
    )
    for o in config.overrides:
        if o.op is not None and o.op != kind:
            continue
        if o.module is not None and not any(fnmatchcase(p, o.module) for p in module_paths):
            continue
        rule = NodeRule(
            quantize=o.quantize,
            in_dtype=(o.mac_input if mac else o.dtype) or rule.in_dtype,
            out_dtype=o.dtype or rule.out_dtype,
            observer=o.observer or rule.observer,
            weights=o.weights or rule.weights,
        )
    return rule


MINILM_CONFIG = QuantConfig(
    int16_inputs=frozenset({OpKind.SOFTMAX, OpKind.LAYER_NORM, OpKind.ADD}),
    int16_outputs=frozenset({OpKind.SOFTMAX, OpKind.ADD}),
)
"""MiniLM's residual stream needs int16: the residual adds read and write int16."""


def config_keyword(quant_config: QuantConfig | None, config: QuantConfig | None,
                   where: str) -> QuantConfig | None:
    """The QuantConfig an entry point was given: every API names it ``quant_config=``;
    ``config=``, a deprecated alias in ``quantize`` and the precision tools, works with a
    DeprecationWarning, and giving both is an error."""
    if config is None:
        return quant_config
    if quant_config is not None:
        raise TesselConfigError(f"{where}: give quant_config= only (config= is a deprecated alias of it)")
    import warnings

    warnings.warn(f"{where}(config=...) is deprecated: use quant_config=", DeprecationWarning,
                  stacklevel=3)
    return config


def default_config(model_name: str, weights: dict[str, Any] | None = None) -> QuantConfig:
    """The QuantConfig the zoo's accuracy path uses for a model (MiniLM: int16 residual adds),
    with the weight types of `weights` (`weights_record`) if given."""
    config = MINILM_CONFIG if model_name == "minilm" else QuantConfig()
    return with_weights(config, weights) if weights else config


def weights_record(config: QuantConfig) -> dict[str, Any]:
    """The weight types `config` chooses, and its per-layer activation and MAC input types, as a binary's
    metadata keeps them so that the model can be quantised again (`with_weights`); empty when
    every weight is int8 and no layer's activation type is overridden."""
    layers = [[o.module, o.op.value if o.op else None, o.weights.value]
              for o in config.overrides if o.weights is not None]
    acts = [[o.module, o.op.value if o.op else None, o.dtype.value]
            for o in config.overrides if o.dtype is not None]
    macs = [[o.module, o.op.value if o.op else None, o.mac_input.value]
            for o in config.overrides if o.mac_input is not None]
    if config.weights is WeightDtype.INT8 and not layers and not acts and not macs:
        return {}
    return {"weights": config.weights.value, "layers": layers,
            **({"activations": acts} if acts else {}),
            **({"mac_inputs": macs} if macs else {})}


def with_weights(config: QuantConfig, record: dict[str, Any]) -> QuantConfig:
    """`config` with the weight types (and activation types) of a `weights_record`."""
    try:
        default = WeightDtype(record.get("weights", WeightDtype.INT8.value))
        acts = tuple(LayerOverride(module=m, op=OpKind(k) if k else None, dtype=ActDtype(t))
                     for m, k, t in record.get("activations", []))
        acts += tuple(LayerOverride(module=m, op=OpKind(k) if k else None,
                                    mac_input=ActDtype(t))
                      for m, k, t in record.get("mac_inputs", []))
        layers = tuple(LayerOverride(module=m, op=OpKind(k) if k else None,
                                     weights=WeightDtype(t))
                       for m, k, t in record.get("layers", []))
    except (ValueError, TypeError, AttributeError) as exc:
        raise TesselConfigError(f"weight types {record!r}: {exc}") from None
    return replace(config, weights=default, overrides=config.overrides + acts + layers)


def with_weight_choices(config: QuantConfig, default: WeightDtype,
                        layers: Sequence[tuple[str, WeightDtype]]) -> QuantConfig:
    """`config` with `default` for every conv / linear layer's weights, then each (module
    pattern, type) in order (the command line's --weights and --layer-weights)."""
    return replace(config, weights=default, overrides=config.overrides + tuple(
        LayerOverride(module=p, weights=t) for p, t in layers))


def parse_layer_weights(text: str) -> tuple[str, WeightDtype]:
    """`PATTERN=TYPE` (a module-name pattern and int8 / int4), as the command line takes it."""
    pattern, sep, kind = text.rpartition("=")
    choices = ", ".join(w.value for w in WeightDtype)
    if not sep or not pattern:
        raise TesselConfigError(f"--layer-weights {text!r}: expected PATTERN=TYPE, e.g. "
                                f"'features.*=int4' (TYPE: {choices})")
    try:
        return pattern, WeightDtype(kind)
    except ValueError:
        raise TesselConfigError(f"--layer-weights {text!r}: weight type {kind!r} is not one of "
                                f"{choices}") from None


MAC_INPUT = "input"  # --layer-precision PATTERN:input=TYPE: a conv / linear layer's input type


def parse_layer_precision(text: str) -> LayerOverride:
    """``PATTERN[:OP]=TYPE`` (a module-name pattern, optionally one op type of it, and int8 /
    int16 activations), as the command line's --layer-precision takes it; ``PATTERN:input=TYPE``
    sets the activation input of the conv / linear layers it matches (``mac_input``)."""
    target, sep, kind = text.rpartition("=")
    pattern, _, op = target.partition(":")
    types = ", ".join(a.value for a in ActDtype)
    if not sep or not pattern:
        raise TesselConfigError(f"--layer-precision {text!r}: expected PATTERN[:OP]=TYPE, e.g. "
                                f"'features.6.block.2:mul=int16' (TYPE: {types})")
    try:
        dtype = ActDtype(kind)
    except ValueError:
        raise TesselConfigError(f"--layer-precision {text!r}: activation type {kind!r} is not "
                                f"one of {types}") from None
    if op == MAC_INPUT:
        return LayerOverride(module=pattern, mac_input=dtype)
    try:
        kind_of = OpKind(op) if op else None
    except ValueError:
        raise TesselConfigError(f"--layer-precision {text!r}: op {op!r} is not one of "
                                f"{', '.join(k.value for k in OpKind)}") from None
    return LayerOverride(module=pattern, op=kind_of, dtype=dtype)


def with_precision_choices(config: QuantConfig, layers: Sequence[LayerOverride]) -> QuantConfig:
    """`config` with the command line's --layer-precision overrides added, in order."""
    return replace(config, overrides=config.overrides + tuple(layers))


def override_flag(o: LayerOverride) -> str:
    """The command-line option that makes override ``o`` (--layer-precision for an activation
    or MAC input type, --layer-weights for a weight type)."""
    if o.dtype is not None:
        op = f":{o.op.value}" if o.op is not None else ""
        return f"--layer-precision '{o.module or '*'}{op}={o.dtype.value}'"
    if o.weights is not None:
        return f"--layer-weights '{o.module or '*'}={o.weights.value}'"
    if o.mac_input is not None:
        return f"--layer-precision '{o.module or '*'}:{MAC_INPUT}={o.mac_input.value}'"
    return ""
