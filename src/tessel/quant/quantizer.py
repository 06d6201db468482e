"""TesselQuantizer: annotates a torch.export graph for the pt2e flow the way the NPU executes it.

Rules (docs/numerics.md explains why):

* conv / linear: input int8 asymmetric per tensor, weight int8 symmetric per output channel,
  bias int32 derived from input scale x weight scale; matmul: both inputs int8 per tensor;
  a conv / linear whose rule says int16 input (``LayerOverride.mac_input``,
  ``QuantConfig.int16_inputs``): input int16 symmetric, its bias left float and quantised to
  int64 at input scale x weight scale by the lowering (an int16 x int8 MAC);
* conv (-> batch_norm, in QAT) (-> relu / relu6 / hardtanh / clamp), linear / matmul / add /
  sub / mul (-> relu / clamp): the activation is fused, only its output is observed;
* cat: every input and the output share one scale and zero point; add / sub inputs share
  them too when ``QuantConfig.share_residual_qparams`` is set;
* sigmoid / tanh / softmax: fixed output parameters (known range); hardswish, hardsigmoid,
  GELU, SiLU, exp, neg, rsqrt: observed output range (all LUT ops on the vector engine);
* softmax in / out and layer-norm inputs are int16 symmetric by default (``QuantConfig``);
* data movement, max pooling and standalone relu / clamp keep their input's parameters
  (and are quantised only when their input is); average pooling and mean read their input's
  parameters but observe their own output range (an average can be far below one input LSB);
* every other op is left unannotated, i.e. float, and becomes a host op after lowering.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e.quantizer import (
    QuantizationAnnotation,
    QuantizationSpec,
    QuantizationSpecBase,
    Quantizer,
    SharedQuantizationSpec,
)
from torchao.quantization.pt2e.quantizer.quantizer import Q_ANNOTATION_KEY

from tessel.errors import TesselConfigError
from tessel.quant.config import ActDtype, NodeRule, OpKind, QuantConfig, resolve_rule
from tessel.quant.decompose import decompose_flip, decompose_sdpa, decompose_square
from tessel.quant.optable import (
    AVERAGING_KINDS,
    BINARY_KINDS,
    CLAMP_KINDS,
    INT16_INPUT_MACS,
    LUT_KINDS,
    MAC_KINDS,
    SAME_SCALE_KINDS,
    is_float_tensor,
    module_paths,
    op_kind,
)
from tessel.quant.qspecs import (
    act_qspec,
    bias_qspec,
    fixed_qspec,
    softmax_input_qspec,
    weight_qspec,
)
from tessel.quant.shared_groups import flatten_shared_specs

QSpecMap = dict[Node, QuantizationSpecBase]


def _is_annotated(node: Node) -> bool:
    ann = node.meta.get(Q_ANNOTATION_KEY)
    return ann is not None and ann._annotated


def _annotate(node: Node, inputs: QSpecMap, output: QuantizationSpecBase | None) -> None:
    node.meta[Q_ANNOTATION_KEY] = QuantizationAnnotation(
        input_qspec_map=dict(inputs), output_qspec=output, _annotated=True
    )


def _constant_nodes(model: GraphModule) -> set[Node]:
    """Nodes computed from constants alone (weights, `arange` positions, ...): left float, so
    that conversion folds them exactly (a rotary embedding's angles, a constant mask) instead of
    quantising values that never change."""
    constant: set[Node] = set()
    for node in model.graph.nodes:
        if node.op == "get_attr":
            constant.add(node)
        elif node.op == "call_function" and all(
                a in constant for a in node.all_input_nodes) and "val" in node.meta:
            constant.add(node)
    return constant


def _output_is_quantized(node: Node) -> bool:
    ann = node.meta.get(Q_ANNOTATION_KEY)
    return ann is not None and ann.output_qspec is not None


def _act_dtype(spec: QuantizationSpec) -> ActDtype:
    return ActDtype.INT16 if spec.dtype == torch.int16 else ActDtype.INT8


def _sole_user(node: Node) -> Node | None:
    return next(iter(node.users)) if len(node.users) == 1 else None


def _fused_tail(node: Node, allow_bn: bool) -> tuple[Node, list[Node]]:
    """The last node of ``node -> [batch_norm] -> [relu | clamp]`` and the nodes in between."""
    tail, middle = node, []
    nxt = _sole_user(tail)
    if allow_bn and nxt is not None and op_kind(nxt) is OpKind.BATCH_NORM and nxt.args[0] is tail:
        middle.append(tail)
        tail = nxt
        nxt = _sole_user(tail)
    if nxt is not None and op_kind(nxt) in CLAMP_KINDS and nxt.args[0] is tail:
        if is_float_tensor(nxt) and not _is_annotated(nxt):
            middle.append(tail)
            tail = nxt
    return tail, [m for m in middle if m is not node]


def _add_zero_bias_before_bn(model: GraphModule) -> None:
    for node in list(model.graph.nodes):
        if op_kind(node) is not OpKind.CONV or not is_float_tensor(node.args[1]):
            continue
        if len(node.args) > 2 and node.args[2] is not None:
            continue
        user = _sole_user(node)
        if user is None or op_kind(user) is not OpKind.BATCH_NORM:
            continue
        weight_val = node.args[1].meta["val"]
        name = f"{node.name}_zero_bias"
        model.register_parameter(
            name, torch.nn.Parameter(torch.zeros(weight_val.shape[0], dtype=weight_val.dtype))
        )
        with model.graph.inserting_before(node):
            bias = model.graph.get_attr(name)
        bias.meta["val"] = weight_val.new_zeros(weight_val.shape[0])
        node.args = (node.args[0], node.args[1], bias, *node.args[3:])
    model.recompile()


class TesselQuantizer(Quantizer):
    """pt2e quantiser for the Tessel NPU; ``is_qat`` selects fake-quant modules for QAT."""

    def __init__(self, config: QuantConfig | None = None, *, is_qat: bool = False) -> None:
        super().__init__()
        self.config = config if config is not None else QuantConfig()
        if not isinstance(self.config, QuantConfig):
            raise TesselConfigError(f"TesselQuantizer: config must be a QuantConfig: {config!r}")
        self.is_qat = is_qat

    # -- Quantizer interface ------------------------------------------------------------------

    def transform_for_annotation(self, model: GraphModule) -> GraphModule:
        """Decompose attention into matmul / softmax, a reversal into slices and a square into
        a product; in QAT, give bias-less convs followed by
        batch norm a zero bias, so that the bias folded from batch norm at convert time is
        quantised to int32 like every other bias."""
        decompose_sdpa(model)
        decompose_flip(model)
        decompose_square(model)
        if self.is_qat:
            _add_zero_bias_before_bn(model)
        return model

    def annotate(self, model: GraphModule) -> GraphModule:
        constant = _constant_nodes(model)
        for node in list(model.graph.nodes):
            if node not in constant:
                self._annotate_node(node)
        flatten_shared_specs(model)
        return model

    def validate(self, model: GraphModule) -> None:
        """The matrix engine multiplies int8 or int16 (conv / linear activations) by int8:
        every other MAC input edge must be int8."""
        for node in model.graph.nodes:
            ann = node.meta.get(Q_ANNOTATION_KEY)
            kind = op_kind(node)
            if ann is None or kind not in MAC_KINDS:
                continue
            for k, (arg, spec) in enumerate(list(ann.input_qspec_map.items())[:2]):
                if not isinstance(spec, QuantizationSpec) or spec.dtype == torch.int8:
                    continue
                if not (k == 0 and kind in INT16_INPUT_MACS and spec.dtype == torch.int16):
                    raise TesselConfigError(
                        f"{node.name}: input {arg.name} of a MAC op is {spec.dtype}; the NPU's "
                        "matrix engine takes int8 x int8 (int16 x int8: conv / linear inputs)"
                    )

    # -- dispatch -----------------------------------------------------------------------------

    def _annotate_node(self, node: Node) -> None:
        if node.op == "call_function" and node.target is operator.getitem:
            self._getitem(node)
            return
        kind = op_kind(node)
        if kind is None or _is_annotated(node):
            return
        rule = resolve_rule(self.config, kind, module_paths(node))
        if not rule.quantize:
            return
        if kind is OpKind.SPLIT:
            self._split(node, rule)
        elif not is_float_tensor(node):
            return
        elif kind in MAC_KINDS:
            self._mac(node, kind, rule)
        elif kind in BINARY_KINDS:
            self._binary(node, kind, rule)
        elif kind is OpKind.CAT:
            self._cat(node, rule)
        elif kind in LUT_KINDS or kind in (OpKind.SOFTMAX, OpKind.LAYER_NORM):
            self._unary(node, kind, rule)
        elif kind in SAME_SCALE_KINDS:
            self._same_scale(node, rule)
        elif kind in AVERAGING_KINDS:
            self._same_scale(node, rule, own_output=True)
        # BATCH_NORM outside a conv chain stays float

    def _act(self, dtype: ActDtype, rule: NodeRule) -> QuantizationSpec:
        return act_qspec(dtype, rule.observer, qat=self.is_qat, percentile=self.config.percentile)

    def _consumers(self, node: Node, depth: int = 4
                   ) -> list[tuple[OpKind | None, NodeRule | None, Node]]:
        """Kind, rule and node of each op that reads ``node``, looking through same-scale ops."""
        found: list[tuple[OpKind | None, NodeRule | None, Node]] = []
        for user in node.users:
            kind = op_kind(user)
            if kind is None or not is_float_tensor(user):
                found.append((None, None, user))
                continue
            rule = resolve_rule(self.config, kind, module_paths(user))
            if kind in SAME_SCALE_KINDS and depth > 0 and rule.quantize:
                found.extend(self._consumers(user, depth - 1))
            else:
                found.append((kind, rule if rule.quantize else None, user))
        return found

    def _wants_int16(self, node: Node, rule: NodeRule, depth: int = 4) -> bool:
        """True if ``node``'s output is int16: its rule says so, or a consumer reads int16."""
        return rule.out_dtype is ActDtype.INT16 or any(
            r is not None and self._reads_int16(user, k, r, depth)
            for k, r, user in self._consumers(node))

    def _reads_int16(self, node: Node, kind: OpKind, rule: NodeRule, depth: int = 4) -> bool:
        """True if the op reads an int16 input: its rule says so (a MAC only where it may: conv
        / linear), or it is a table op that writes int16 (a LUT maps int8 -> int8 or int16 ->
        int16, so an int16 output needs an int16 input)."""
        if rule.in_dtype is ActDtype.INT16:
            return kind not in MAC_KINDS or kind in INT16_INPUT_MACS
        return kind in LUT_KINDS and depth > 0 and self._wants_int16(node, rule, depth - 1)

    def _output_spec(self, tail: Node, rule: NodeRule) -> QuantizationSpec:
        """Output spec: int16 if the rule says so or a consumer reads int16 (no int8 bottleneck
        in front of it); the softmax-input observer if only softmaxes read it."""
        dtype = ActDtype.INT16 if self._wants_int16(tail, rule) else ActDtype.INT8
        if self._feeds_softmax(tail):
            return softmax_input_qspec(dtype, qat=self.is_qat)
        if self._feeds_softmax_sum(tail):  # an additive mask: saturates (AddendObserver)
            return softmax_input_qspec(dtype, qat=self.is_qat, addend=True)
        return self._act(dtype, rule)

    def _feeds_softmax_sum(self, tail: Node) -> bool:
        """Whether only sums that only softmaxes read read ``tail`` (a mask, or the logits)."""
        users = list(tail.users)
        return bool(users) and all(
            op_kind(u) is OpKind.ADD and is_float_tensor(u)
            and self._feeds_softmax(_fused_tail(u, allow_bn=False)[0]) for u in users)

    def _feeds_softmax(self, tail: Node) -> bool:
        """Whether only (quantised) softmaxes read ``tail``, through same-scale ops."""
        consumers = self._consumers(tail)
        return bool(consumers) and all(k is OpKind.SOFTMAX and r is not None
                                       for k, r, _ in consumers)

    def _annotate_with_tail(self, node: Node, inputs: QSpecMap, rule: NodeRule, allow_bn: bool):
        """Annotate ``node``'s inputs; observe the output after a fusable activation, if any."""
        tail, middle = _fused_tail(node, allow_bn)
        output = self._output_spec(tail, rule)
        if tail is node:
            _annotate(node, inputs, output)
            return
        _annotate(node, inputs, None)
        for m in middle:
            _annotate(m, {}, None)
        _annotate(tail, {}, output)

    # -- one annotator per op family ----------------------------------------------------------

    def _mac(self, node: Node, kind: OpKind, rule: NodeRule) -> None:
        # conv / linear: x int8, w per-channel int8, b int32 = s_x * s_w; matmul: x, y int8;
        # conv / linear with an int16 input: b float here, int64 = s_x * s_w in the lowering
        x, w = node.args[0], node.args[1]
        if not (is_float_tensor(x) and is_float_tensor(w)):
            return
        wide = kind in INT16_INPUT_MACS and rule.in_dtype is ActDtype.INT16
        x_spec = self._act(ActDtype.INT16 if wide else ActDtype.INT8, rule)
        inputs: QSpecMap = {x: x_spec}
        if kind is OpKind.MATMUL:
            inputs.setdefault(w, x_spec)
        else:
            axis = 0
            if kind is OpKind.CONV_TRANSPOSE:  # weights [in, out / groups, kh, kw]
                groups = node.args[6] if len(node.args) > 6 else 1
                if groups != 1:
                    return  # the output channels are not one weight axis: stays float
                axis = 1
            inputs[w] = weight_qspec(qat=self.is_qat, axis=axis, dtype=rule.weights,
                                     rounding=self.config.int4_rounding)
            bias = node.args[2] if len(node.args) > 2 else None
            if is_float_tensor(bias) and not wide:
                inputs[bias] = bias_qspec((x, node), (w, node))
        self._annotate_with_tail(node, inputs, rule, allow_bn=kind is OpKind.CONV)

    def _binary(self, node: Node, kind: OpKind, rule: NodeRule) -> None:
        # add / sub / mul (tensor or scalar operand), div by a scalar: rescale on the vector engine
        a, b = node.args[0], node.args[1]
        tensors = [t for t in (a, b) if isinstance(t, Node)]
        if not all(is_float_tensor(t) for t in tensors) or not tensors:
            return
        if kind is OpKind.DIV and isinstance(b, Node):
            return
        spec = self._act(rule.in_dtype, rule)
        if kind is OpKind.ADD and self._feeds_softmax(_fused_tail(node, allow_bn=False)[0]):
            # logits + additive mask: a mask far below the logits saturates (AddendObserver)
            spec = softmax_input_qspec(rule.in_dtype, qat=self.is_qat, addend=True)
        inputs: QSpecMap = {}
        for t in tensors:
            inputs.setdefault(t, spec)
        share = self.config.share_residual_qparams and kind in (OpKind.ADD, OpKind.SUB)
        if share and len(inputs) == 2:
            inputs[b] = SharedQuantizationSpec((a, node))
        self._annotate_with_tail(node, inputs, rule, allow_bn=False)

    def _cat(self, node: Node, rule: NodeRule) -> None:
        # cat: all inputs and the output share the first input's parameters (pure data movement)
        parts = node.args[0]
        if not isinstance(parts, (list, tuple)) or not parts:
            return
        if not all(is_float_tensor(p) for p in parts):
            return
        first = parts[0]
        shared = SharedQuantizationSpec((first, node))
        inputs: QSpecMap = {first: self._act(rule.in_dtype, rule)}
        for p in parts[1:]:
            inputs.setdefault(p, shared)
        _annotate(node, inputs, shared)

    def _unary(self, node: Node, kind: OpKind, rule: NodeRule) -> None:
        # LUT ops, softmax, layer norm: observed input; fixed output where the range is known
        x = node.args[0]
        if not is_float_tensor(x):
            return
        output = self._output_spec(node, rule)
        output = fixed_qspec(kind, _act_dtype(output)) or output
        if kind is OpKind.SOFTMAX:
            in_spec = softmax_input_qspec(rule.in_dtype, qat=self.is_qat)
        elif self._reads_int16(node, kind, rule):
            in_spec = self._act(ActDtype.INT16, rule)
        else:
            in_spec = self._act(rule.in_dtype, rule)
        _annotate(node, {x: in_spec}, output)

    def _same_scale(self, node: Node, rule: NodeRule, own_output: bool = False) -> None:
        # reshape / max pool / relu ...: output keeps the input's scale and zero point
        # (avg pool / mean, own_output: the output's range is observed)
        x = node.args[0]
        if not is_float_tensor(x):
            return
        if x.op == "placeholder":
            in_spec: QuantizationSpecBase = self._act(rule.in_dtype, rule)
        elif _output_is_quantized(x):
            in_spec = SharedQuantizationSpec(x)
        else:
            return  # the producer stays float, so does this op
        out = self._output_spec(node, rule) if own_output else SharedQuantizationSpec((x, node))
        _annotate(node, {x: in_spec}, out)

    def _split(self, node: Node, rule: NodeRule) -> None:
        # unbind / split of a quantised tensor: the pieces (getitem) keep its parameters
        x = node.args[0]
        if is_float_tensor(x) and x.op == "placeholder":  # a graph input: observed here
            _annotate(node, {x: self._act(rule.in_dtype, rule)}, None)
        elif is_float_tensor(x) and _output_is_quantized(x):
            _annotate(node, {x: SharedQuantizationSpec(x)}, None)

    def _getitem(self, node: Node) -> None:
        src = node.args[0]
        if not (isinstance(src, Node) and op_kind(src) is OpKind.SPLIT and _is_annotated(src)):
            return
        if is_float_tensor(node):
            (x,) = src.meta[Q_ANNOTATION_KEY].input_qspec_map
            _annotate(node, {}, SharedQuantizationSpec((x, src)))
