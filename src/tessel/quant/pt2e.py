"""The pt2e flow with Tessel's quantiser: export -> prepare -> calibrate (or train) -> convert.

The result of :func:`quantize_pt2e_module` / :func:`convert_qat` is torchao's QDQ graph:
float ATen ops with ``quantized_decomposed`` quantize / dequantize nodes around them and int8
weights / int32 biases folded into constants. The QDQ -> integer IR lowering reads that graph.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
from torch.fx import GraphModule
from torchao.quantization.pt2e import (
    DerivedObserverOrFakeQuantize,
    FixedQParamsObserver,
    MinMaxObserver,
    MovingAverageMinMaxObserver,
    MovingAveragePerChannelMinMaxObserver,
    ObserverBase,
    PerChannelMinMaxObserver,
    move_exported_model_to_eval,
    qat_utils,
)
from torchao.quantization.pt2e import constant_fold as constant_fold_module
from torchao.quantization.pt2e.constant_fold import ConstantFolder
from torchao.quantization.pt2e.qat_utils import _fold_conv_bn_qat
from torchao.quantization.pt2e.quantize_pt2e import (
    _quant_node_constraint,
    convert_pt2e,
    prepare_pt2e,
    prepare_qat_pt2e,
)

from tessel.errors import TesselConfigError
from tessel.progress import task
from tessel.quant.config import QuantConfig
from tessel.quant.qspecs import (
    PercentileObserver,
    PerChannelInt4GptqObserver,
    PerChannelInt4Observer,
)
from tessel.quant.quantizer import TesselQuantizer
from tessel.threads import single_threaded

Sample = torch.Tensor | Sequence[torch.Tensor]


def _as_args(sample: Sample) -> tuple[torch.Tensor, ...]:
    return (sample,) if isinstance(sample, torch.Tensor) else tuple(sample)


# model id -> (the model, its example inputs' signature, its first export) within reused_export
_REUSED: dict[int, tuple[torch.nn.Module, tuple, GraphModule] | None] = {}


@contextlib.contextmanager
def reused_export(model: torch.nn.Module) -> Iterator[None]:
    """Within the block, quantising `model` again (example inputs of the same shapes and
    dtypes) starts from a copy of its first export instead of exporting it again: for callers
    that quantise one model under many configurations (precision advice) and do not change
    its parameters in between. torch.export is deterministic: the copy is the graph a new
    export would give."""
    key = id(model)
    outer = key in _REUSED
    _REUSED.setdefault(key, None)
    try:
        yield
    finally:
        if not outer:
            del _REUSED[key]


def _signature(example_inputs: Sample) -> tuple:
    return tuple((tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else repr(t)
                 for t in _as_args(example_inputs))


def export_for_quant(model: torch.nn.Module, example_inputs: Sample) -> GraphModule:
    """``torch.export.export(model, inputs, strict=False).module()``: the graph pt2e annotates
    (inside :func:`reused_export`, a copy of the model's first one)."""
    key = id(model)
    if key not in _REUSED:
        return _exported(model, example_inputs)
    kept = _REUSED[key]
    if kept is not None and kept[0] is model and kept[1] == _signature(example_inputs):
        return copy.deepcopy(kept[2])
    module = _exported(model, example_inputs)
    _REUSED[key] = (model, _signature(example_inputs), copy.deepcopy(module))
    return module


def _exported(model: torch.nn.Module, example_inputs: Sample) -> GraphModule:
    from tessel.frontend.export import exporting

    with exporting(model):
        # no shape guards: calibrate() runs batches through it, after checking every sample's
        # shapes against the example inputs itself
        program = torch.export.export(model, _as_args(example_inputs), strict=False)
        program = _unrolled_recurrent(program)
        return program.module(check_guards=False)


def _unrolled_recurrent(program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """The program with its recurrent layers and cells (`RECURRENT_KERNELS`) decomposed by
    torch into their time steps' linear layers, gates (sigmoid / tanh) and element-wise
    products, ops the quantiser annotates (whole, they would stay float on the host). A
    program without them is returned as it is."""
    if not any(n.op == "call_function" and n.target in RECURRENT_KERNELS
               for n in program.graph.nodes):
        return program
    table = torch.export.default_decompositions()
    return program.run_decompositions({op: table[op] for op in RECURRENT_KERNELS if op in table})


CALIBRATION_BATCH = 8  # samples per forward when batching is exact (calibrate)

# observers whose statistics over a batch equal those over its samples one by one (a running
# min / max) or that keep none (derived bias qparams, fixed qparams); a moving average, a
# percentile or a histogram would see batches, not samples
_BATCHABLE = (MinMaxObserver, PerChannelMinMaxObserver, DerivedObserverOrFakeQuantize,
              FixedQParamsObserver, PerChannelInt4Observer, PerChannelInt4GptqObserver)
_NOT_BATCHABLE = (MovingAverageMinMaxObserver, MovingAveragePerChannelMinMaxObserver,
                  PercentileObserver)


def calibrate(prepared: GraphModule, calibration_data: Iterable[Sample],
              example_inputs: Sample, *, batch: int = CALIBRATION_BATCH) -> int:
    """Run every calibration sample through the observed model; returns the sample count.

    Samples go through in batches of up to `batch` (concatenated on dim 0) when that observes
    what one sample at a time would (up to the float kernels' rounding, which may depend on
    the batch size): every observer keeps a running min / max (or no state), every
    input has a leading dimension of 1 and the same shape in every sample, and the model runs
    a batch as independent samples (checked on the first batch: its outputs' first rows equal
    the first sample's outputs run alone; recurrent layers, whose kernels trust their state's
    batch size, never batch). Otherwise, or if the first batch fails, the observers are
    restored and the samples run one by one. Every sample must have the
    example inputs' shapes and dtypes (the model was exported for those)."""
    samples = [_as_args(s) for s in calibration_data]
    if not samples:
        raise TesselConfigError("calibration_data is empty: PTQ needs at least one sample")
    _check_samples(samples, _as_args(example_inputs))
    with torch.no_grad(), single_threaded():  # float reduction order fixed: same binary
        with task("calibration", total=len(samples)) as bar:
            first = prepared(*samples[0])
            bar.advance()
            rest = samples[1:]
            batched = batch > 1 and len(rest) > 1 and _batchable(prepared, samples)
            with _weights_observed_once(prepared):
                if batched:
                    rest = _calibrate_batched(prepared, samples[0], first, rest, batch, bar)
                for sample in rest:
                    prepared(*sample)
                    bar.advance()
    return len(samples)


# observers for which seeing the same values again changes nothing (a running min / max, or
# no state); exact types: a subclass may observe otherwise
_IDEMPOTENT = (MinMaxObserver, PerChannelMinMaxObserver, DerivedObserverOrFakeQuantize,
               FixedQParamsObserver, PerChannelInt4Observer, PerChannelInt4GptqObserver)


class _ObservedOnce(torch.nn.Module):
    """A weight's observer after the first calibration sample: that sample's forward observed
    this very tensor, and a running min / max over the same values again is the same, so the
    observer is skipped while its input is that tensor, unmodified (its version counter);
    anything else still goes through the observer. (Per-channel weight observers would be most
    of MiniLM's calibration: 36 aminmax over 10 M weights per sample.)"""

    def __init__(self, observer: torch.nn.Module, seen: torch.Tensor) -> None:
        super().__init__()
        self.observer = observer
        self.seen, self.version = seen, seen._version

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x is self.seen and x._version == self.version:
            return x
        return self.observer(x)


class _weights_observed_once:  # noqa: N801 - a context manager used like a function
    """Within it, the observers whose one input is a weight (a get_attr node, the observer
    used nowhere else) are `_ObservedOnce` wrappers; the observers are put back on exit."""

    def __init__(self, prepared: GraphModule) -> None:
        self.prepared = prepared
        self.swapped: list[tuple[torch.nn.Module, str, torch.nn.Module]] = []

    def __enter__(self) -> None:
        uses: dict[str, list[torch.fx.Node]] = {}
        for node in self.prepared.graph.nodes:
            if node.op == "call_module":
                uses.setdefault(node.target, []).append(node)
        for target, nodes in uses.items():
            observer = self.prepared.get_submodule(target)
            if type(observer) not in _IDEMPOTENT or len(nodes) != 1:
                continue
            args = nodes[0].args
            if len(args) != 1 or nodes[0].kwargs or not isinstance(args[0], torch.fx.Node) \
                    or args[0].op != "get_attr":
                continue
            weight = _attr(self.prepared, args[0].target)
            if not isinstance(weight, torch.Tensor):
                continue
            owner_name, _, name = target.rpartition(".")
            owner = self.prepared.get_submodule(owner_name) if owner_name else self.prepared
            setattr(owner, name, _ObservedOnce(observer, weight))
            self.swapped.append((owner, name, observer))

    def __exit__(self, *exc: object) -> None:
        for owner, name, observer in reversed(self.swapped):
            setattr(owner, name, observer)
        self.swapped.clear()


def _attr(module: torch.nn.Module, target: str) -> Any:
    for part in target.split("."):
        module = getattr(module, part)
    return module


def _sample_signature(args: Sequence[Any]) -> list[tuple[Any, ...] | None]:
    return [(tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else None for a in args]


def _check_samples(samples: list[tuple[torch.Tensor, ...]], example: tuple[torch.Tensor, ...]
                   ) -> None:
    want = _sample_signature(example)
    for k, sample in enumerate(samples):
        got = _sample_signature(sample)
        if len(got) != len(want):
            raise TesselConfigError(f"calibration sample {k} has {len(got)} input(s), the "
                                    f"example inputs have {len(want)}")
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            if g != w:
                def show(x: tuple[Any, ...] | None) -> str:
                    return "not a tensor" if x is None else f"shape {list(x[0])} {x[1]}"
                raise TesselConfigError(
                    f"calibration sample {k}, input {i}: {show(g)}, but the example input is "
                    f"{show(w)} (the model is exported for the example inputs' shapes)")


# ops whose native kernels take the batch size of their state from the state tensor without
# checking it against the input's: a model exported for batch 1 creates a batch-1 state, and a
# batch through them corrupts memory instead of raising (so the first batch's check below could
# not catch it)
RECURRENT_KERNELS = frozenset(
    getattr(getattr(torch.ops.aten, name), overload)
    for name, overload in (("lstm", "input"), ("lstm", "data"), ("gru", "input"),
                           ("gru", "data"), ("rnn_tanh", "input"), ("rnn_relu", "input"),
                           ("lstm_cell", "default"), ("gru_cell", "default"),
                           ("rnn_tanh_cell", "default"), ("rnn_relu_cell", "default"))
    if hasattr(getattr(torch.ops.aten, name, None), overload))


def _batchable(prepared: GraphModule, samples: list[tuple[torch.Tensor, ...]]) -> bool:
    observers = [m for m in prepared.modules() if isinstance(m, ObserverBase)]
    if any(isinstance(m, _NOT_BATCHABLE) or not isinstance(m, _BATCHABLE) for m in observers):
        return False
    if any(n.op == "call_function" and n.target in RECURRENT_KERNELS
           for n in prepared.graph.nodes):
        return False
    first = _sample_signature(samples[0])  # all samples have it (_check_samples)
    return all(s is not None and len(s[0]) > 0 and s[0][0] == 1 for s in first)


def _calibrate_batched(prepared: GraphModule, one: tuple[torch.Tensor, ...], one_out: Any,
                       rest: list[tuple[torch.Tensor, ...]], batch: int, bar: Any
                       ) -> list[tuple[torch.Tensor, ...]]:
    """Calibrate on `rest` in batches; returns the samples still to run one by one (all of them
    if the model does not run a batch as independent samples, observers restored)."""
    saved = {name: copy.deepcopy(m.state_dict()) for name, m in prepared.named_modules()
             if isinstance(m, ObserverBase)}
    try:
        # the first batch carries the first sample again (re-observing it changes no min /
        # max) so that its rows can be checked against the sample run alone
        trial = [one, *rest[:batch - 1]]
        out = prepared(*_stack(trial))
        ok = _same_rows(out, one_out, len(trial))
    except Exception:  # noqa: BLE001 - any failure: the model does not take a batch
        ok = False
    if not ok:
        modules = dict(prepared.named_modules())
        for name, state in saved.items():
            modules[name].load_state_dict(state)
        return rest
    bar.advance(len(trial) - 1)
    for k in range(batch - 1, len(rest), batch):
        chunk = rest[k:k + batch]
        prepared(*_stack(chunk))
        bar.advance(len(chunk))
    return []


def _stack(samples: list[tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
    return tuple(torch.cat(args, dim=0) for args in zip(*samples, strict=True))


def _same_rows(batched: Any, single: Any, n: int) -> bool:
    """Every output of the batched run has `n` rows and its first row is the single run's
    output (float kernels may reorder sums by batch size: within float32 rounding)."""
    flat_b, flat_s = _flatten(batched), _flatten(single)
    if len(flat_b) != len(flat_s):
        return False
    for b, s in zip(flat_b, flat_s, strict=True):
        if not isinstance(b, torch.Tensor) or not isinstance(s, torch.Tensor):
            return False
        if b.dim() == 0 or b.shape[0] != n or s.shape[0] != 1 or b.shape[1:] != s.shape[1:]:
            return False
        if b.is_floating_point():
            scale = float(s.abs().max()) if s.numel() else 0.0
            if not torch.allclose(b[:1], s, rtol=1e-4, atol=1e-5 * max(scale, 1.0)):
                return False
        elif not torch.equal(b[:1], s):
            return False
    return True


def _flatten(out: Any) -> list[Any]:
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in _flatten(o)]
    if isinstance(out, dict):
        return [x for k in sorted(out) for x in _flatten(out[k])]
    return [out]


def convert(prepared: GraphModule) -> GraphModule:
    """``convert_pt2e(prepared)`` (quantize ops on weights folded into int8 constants), without
    the dequantize of every weight that torchao's constant folder computes and then throws
    away (it keeps dequantize nodes in the graph): MiniLM's first conversion in a process took
    2.5 CPU seconds with it, 0.63 without.

    ``convert_pt2e(fold_quantize=False)`` does everything but the fold; torchao's own
    ``constant_fold(model, _quant_node_constraint)`` (what convert_pt2e runs next) then folds
    with `_QuantizeFolder` in place of its ConstantFolder, which gives a dequantize node the
    value torchao's gives it (unknown: not folded) without computing it first.
    tests/unit/quant/test_convert.py checks the result against ``convert_pt2e(prepared)``: the
    same code, node names, constants and outputs."""
    with _qat_fold(_fold_conv_bn_ptq):
        model = convert_pt2e(prepared, fold_quantize=False)
    with _folder_class(_QuantizeFolder):
        constant_fold_module.constant_fold(model, _quant_node_constraint)
    return model


@contextlib.contextmanager
def _qat_fold(fn: Any) -> Iterator[None]:
    """convert_pt2e calls `fn` in the block where it calls torchao's `_fold_conv_bn_qat`."""
    module = importlib.import_module(convert_pt2e.__module__)
    saved = _fold_conv_bn_qat
    module._fold_conv_bn_qat = fn
    try:
        yield
    finally:
        module._fold_conv_bn_qat = saved


def _fold_conv_bn_ptq(m: GraphModule) -> GraphModule:
    """What torchao's `_fold_conv_bn_qat` does to a module prepared for PTQ, without tracing
    the 96 QAT conv / batch-norm patterns it looks for (about 11 CPU seconds whenever a batch
    norm is left, e.g. one after a linear layer). None of them occurs in a PTQ graph
    (prepare_pt2e has folded every conv -> batch norm, and only QAT prepares the patterns'
    weight scaling), so each of its four passes (conv1d, conv2d and their transposes) only
    duplicates the dequantize nodes and merges them back; that is kept, so the graph is the
    one torchao gives (tests/unit/quant/test_convert.py). A batch norm with a conv within the
    pattern's reach, or a statistics update, goes to torchao's function itself."""
    bns = [n for n in m.graph.nodes if qat_utils._is_bn_node(n)]
    if not bns:
        return m
    if any(n.target == torch.ops.aten.add_.Tensor for n in m.graph.nodes) or any(
            _conv_before(bn) for bn in bns):  # a pattern may be there: torchao's own fold
        return _fold_conv_bn_qat(m)
    for _ in range(4 * (2 if torch.cuda.is_available() else 1)):
        _merge_dequantize_pass(m)
    m.graph.eliminate_dead_code()
    m.recompile()
    return m


def _conv_before(bn: torch.fx.Node) -> bool:
    """Whether a conv feeds the batch norm within the three steps of the QAT pattern
    (conv -> div -> add -> batch norm)."""
    node = bn
    for _ in range(3):
        if not node.args or not isinstance(node.args[0], torch.fx.Node):
            return False
        node = node.args[0]
        if qat_utils._is_conv_or_conv_transpose_node(node):
            return True
    return False


@contextlib.contextmanager
def _folder_class(cls: type) -> Iterator[None]:
    """torchao's constant_fold builds `cls` instead of its ConstantFolder in the block (the
    result is the same whichever a concurrent caller gets: see `_QuantizeFolder`)."""
    saved = constant_fold_module.ConstantFolder
    constant_fold_module.ConstantFolder = cls
    try:
        yield
    finally:
        constant_fold_module.ConstantFolder = saved


# the ops torchao's ConstantFolder.is_impure never folds (the weight's dequantize stays)
_DEQUANTIZE = frozenset({
    torch.ops.quantized_decomposed.dequantize_per_channel.default,
    torch.ops.quantized_decomposed.dequantize_per_tensor.default,
    torch.ops.quantized_decomposed.dequantize_per_tensor.tensor,
    torch.ops.quantized_decomposed.convert_element_type.no_fuse,
})


class _QuantizeFolder(ConstantFolder):
    """torchao's folder, with a dequantize node unknown without computing it first (torchao
    computes it, then returns unknown because is_impure says so)."""

    def run_node(self, node: torch.fx.Node) -> Any:
        if node.op == "call_function" and node.target in _DEQUANTIZE:
            return self.unknown_value
        return super().run_node(node)


def quantize_pt2e_module(
    model: torch.nn.Module,
    example_inputs: Sample,
    calibration_data: Iterable[Sample],
    config: QuantConfig | None = None,
) -> GraphModule:
    """PTQ: export ``model`` (in eval mode; refused otherwise), annotate, calibrate, convert."""
    from tessel.frontend.model_input import as_module

    prepared = prepare_pt2e(export_for_quant(as_module(model), example_inputs), TesselQuantizer(config))
    calibrate(prepared, calibration_data, example_inputs)
    return convert(prepared)


def prepare_qat(
    model: torch.nn.Module, example_inputs: Sample, config: QuantConfig | None = None
) -> GraphModule:
    """QAT: export ``model`` in train mode and insert fake-quant modules; train the result."""
    model.train()
    gm = export_for_quant(model, example_inputs)
    return prepare_qat_pt2e(gm, TesselQuantizer(config, is_qat=True))


def convert_qat(prepared: GraphModule) -> GraphModule:
    """QAT: switch the trained fake-quant graph to eval (batch norm) and convert to QDQ
    (``convert_pt2e``, its conv / batch-norm fold looking only for the conv kinds present:
    `_fold_conv_bn_present`)."""
    move_exported_model_to_eval(prepared)
    with _qat_fold(_fold_conv_bn_present):
        return convert_pt2e(prepared)


# the conv kinds of torchao's QAT conv / batch-norm fold, in its order, with the example inputs
# it traces their patterns with and the aten ops (any overload) their patterns' convs export to
_CONV_KINDS = (
    (torch.nn.functional.conv1d, 1, torch.ops.aten.conv1d),
    (torch.nn.functional.conv2d, 2, torch.ops.aten.conv2d),
    (torch.nn.functional.conv_transpose1d, 1, torch.ops.aten.conv_transpose1d),
    (torch.nn.functional.conv_transpose2d, 2, torch.ops.aten.conv_transpose2d),
)


def _fold_conv_bn_present(m: GraphModule) -> GraphModule:
    """torchao's `_fold_conv_bn_qat`, tracing the 24 patterns of a conv kind only when the
    graph has a conv of that kind (a pattern cannot match without its conv op): each kind's
    pass costs about 3 CPU seconds of pattern exports, whether it matches or not. A kind
    absent still gets its pass's dequantize duplication and merge, so the graph is torchao's
    (tests/unit/quant/test_convert.py). A graph with a conv of another kind (conv3d, a
    generic convolution) goes to torchao's function itself."""
    if not any(qat_utils._is_bn_node(n) for n in m.graph.nodes):
        return m
    present = {getattr(n.target, "overloadpacket", n.target) for n in m.graph.nodes
               if qat_utils._is_conv_or_conv_transpose_node(n)}
    if not present <= {packet for _, _, packet in _CONV_KINDS}:
        return _fold_conv_bn_qat(m)
    for is_cuda in ([True, False] if torch.cuda.is_available() else [False]):
        for conv_fn, dims, packet in _CONV_KINDS:
            if packet in present:
                m = qat_utils._fold_conv_bn_qat_helper(m, conv_fn, _fold_example_inputs(dims),
                                                       is_cuda=is_cuda)
            else:
                _merge_dequantize_pass(m)
    for node in list(m.graph.nodes):  # torchao's last step: the batch norms' counter updates
        if (node.target == torch.ops.aten.add_.Tensor and node.args[0].op == "get_attr"
                and node.args[1] == 1 and "torch.nn.modules.batchnorm.BatchNorm2d"
                in [val[1] for val in node.meta["nn_module_stack"].values()]):
            m.graph.erase_node(node)
    m.graph.eliminate_dead_code()
    m.recompile()
    return m


def _fold_example_inputs(dims: int) -> tuple[torch.Tensor, ...]:
    """torchao's example inputs for a conv{dims}d / batch-norm pattern (x, conv weight, batch
    norm weight, bias, running mean and variance)."""
    return (torch.randn(1, 1, *[3] * dims), torch.randn(1, 1, *[1] * dims),
            *(torch.randn(1) for _ in range(4)))


def _merge_dequantize_pass(m: GraphModule) -> None:
    """What torchao's fold pass of one conv kind does to a graph without a match."""
    m.graph.eliminate_dead_code()
    m.recompile()
    qat_utils._duplicate_dequantize_node(m)
    m.recompile()
    qat_utils._remove_extra_dequantize(m)
    m.graph.eliminate_dead_code()
    m.recompile()
