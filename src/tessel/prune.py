"""Structured 2:4 pruning of a torch model along the reduction axis (``tessel.prune_2_4``).

In every group of four consecutive input-channel weights of a conv or linear layer (for one
output channel and, for a conv, one kernel tap) two are set to zero:
the layout the NPU's sparse weights store (docs/isa.md, ``w_type`` I8_2_4 / I4_2_4) and the one
NVIDIA Ampere's sparse tensor cores and Arm Ethos-U85 use. Depthwise convs (one input channel
per output: no group of four) and layers whose input channels per group are not a multiple of
four stay dense.

Which two of a group are kept (:class:`PruneMethod`): the two of largest magnitude, or, given
calibration inputs, the SparseGPT choice (Frantar and Alistarh, 2023). The latter takes each
layer's ``H = X^T X`` of its inputs ``X`` on the calibration data (the dense model's, all layers
in one pass; the Gram blocks of ``tessel.quant.int4_weights``, a conv's columns ordered tap by
tap so that a group of four is four adjacent columns) and prunes the columns one at a time:
at a group's first column, the two kept weights are those of largest OBS saliency
``w^2 / [H^-1]_jj`` (on the weights as compensated so far), and every pruned or kept column's
change is spread over the columns not yet pruned, weighted by ``H^-1``, as GPTQ does with
rounding errors, so that the layer's output error ``||X W^T - X W'^T||^2`` stays small. A
layer the calibration inputs never reach keeps the magnitude choice. Pruning layer by layer on
the inputs of the model pruned so far measured no better (MiniLM held-out cosine 0.827 against
0.822, ResNet-18 SQNR 18.2 dB against 18.6 dB) at two to three times the CPU time.

The optional fine-tune runs a few SGD steps on user inputs with the mask kept, the loss the mean
squared error between the pruned model's outputs and the dense model's over the dense outputs'
mean square (no labels needed), the gradient's norm clipped to ``CLIP_NORM``.
Pruning without it costs accuracy; how much is a property of the model, measured, never assumed.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tessel.errors import TesselConfigError

GROUP = 4  # weights per group along the reduction axis
KEPT = 2  # of which are kept
CLIP_NORM = 1.0  # the fine-tune's gradient norm bound


class PruneMethod(enum.Enum):
    """How ``prune_2_4`` picks the two kept weights of a group of four."""

    MAGNITUDE = "magnitude"  # the two of largest magnitude; no data
    SPARSEGPT = "sparsegpt"  # OBS saliency on calibration inputs, the rest compensated


@dataclass(frozen=True)
class PruneReport:
    """What ``prune_2_4`` did: the pruned layers (module paths), the layers left dense with the
    reason, the zeros it made, and the fine-tune's loss before and after (None: no fine-tune)."""

    pruned: tuple[str, ...]
    dense: tuple[tuple[str, str], ...]
    zeroed: int
    weights: int  # weights of the pruned layers
    loss_before: float | None = None
    loss_after: float | None = None
    steps: int = 0
    masks: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __repr__(self) -> str:
        ft = "" if self.loss_before is None else (
            f", fine-tune {self.steps} steps: relative mse {self.loss_before:.4g} -> {self.loss_after:.4g}")
        return (f"PruneReport({len(self.pruned)} layers 2:4, {len(self.dense)} dense, "
                f"{self.zeroed} of {self.weights} weights zeroed{ft})")


def mask_2_4(weight: Any) -> Any:
    """The boolean keep-mask of a conv (O, I, kh, kw) or linear (O, I) weight: in each group of
    four consecutive input channels the two largest magnitudes (ties to the lower index)."""
    import torch

    w = weight.detach()
    o, i = w.shape[0], w.shape[1]
    taps = w.reshape(o, i, -1).permute(0, 2, 1)  # (O, taps, I): groups along I
    groups = taps.reshape(o, taps.shape[1], i // GROUP, GROUP).abs()
    # a stable descending sort keeps the lower index of equal magnitudes
    order = torch.sort(groups, dim=-1, descending=True, stable=True).indices[..., :KEPT]
    keep = torch.zeros_like(groups, dtype=torch.bool).scatter_(-1, order, True)
    keep = keep.reshape(o, taps.shape[1], i).permute(0, 2, 1)
    return keep.reshape(w.shape)


def is_2_4(values: Any, axis: int) -> bool:
    """Whether an array has at most two non-zeros in every group of four consecutive elements
    along ``axis`` (whose length is a multiple of four)."""
    import numpy as np

    v = np.moveaxis(np.asarray(values), axis, -1)
    if v.shape[-1] % GROUP:
        return False
    nz = (v.reshape(*v.shape[:-1], -1, GROUP) != 0).sum(axis=-1)
    return bool((nz <= KEPT).all())


def _why_dense(module: Any) -> str | None:
    import torch

    if isinstance(module, torch.nn.Conv2d):
        if module.groups > 1 and module.groups == module.in_channels:
            return "depthwise (one input channel per output)"
        cin = module.in_channels // module.groups
    elif isinstance(module, torch.nn.Linear):
        cin = module.in_features
    else:
        return "not a conv or linear layer"
    if cin % GROUP:
        return f"{cin} input channels per group (not a multiple of {GROUP})"
    return None


def prune_2_4(model: Any, *, skip: Sequence[str] = (), method: PruneMethod = PruneMethod.MAGNITUDE,
              calibration_data: Iterable[Any] | None = None,
              finetune_data: Iterable[Any] | None = None, steps: int = 20, lr: float = 1e-3,
              inplace: bool = False) -> tuple[Any, PruneReport]:
    """Prune ``model``'s Conv2d and Linear layers to 2:4 along their input channels.

    ``skip``: module paths (or their prefixes) left dense. ``method``: which weights are kept
    (:class:`PruneMethod`; SPARSEGPT needs ``calibration_data``, inputs as for
    ``finetune_data``). ``finetune_data``: inputs (a tensor or a tuple of tensors each) for
    ``steps`` SGD steps at ``lr`` towards the dense model's outputs, the zeros kept. Returns
    the pruned model (a copy unless ``inplace``) and a ``PruneReport``."""
    import torch

    if method is PruneMethod.SPARSEGPT and calibration_data is None:
        raise TesselConfigError("SparseGPT pruning needs calibration_data")
    dense_model = model
    if not inplace:
        model = copy.deepcopy(model)
    layers, dense = _layers(model, skip)
    new_weights = {}
    if method is PruneMethod.SPARSEGPT and layers:
        new_weights = _sparsegpt(model, layers, calibration_data)
    masks = {}
    zeroed = total = 0
    with torch.no_grad():
        for name, module in layers.items():
            nonzero = int((module.weight != 0).sum())
            if name in new_weights:  # already 2:4: the mask keeps its non-zeros
                module.weight.copy_(new_weights[name])
            keep = mask_2_4(module.weight)
            zeroed += nonzero - int((module.weight * keep != 0).sum())
            module.weight.mul_(keep)
            total += module.weight.numel()
            masks[name] = keep
    before = after = None
    if finetune_data is not None and layers:
        before, after = _finetune(model, dense_model, masks, finetune_data, steps, lr)
    return model, PruneReport(tuple(layers), tuple(dense), zeroed, total, before, after,
                              steps if before is not None else 0, masks)


def _layers(model: Any, skip: Sequence[str]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The layers to prune (path -> module, in the model's order) and those left dense."""
    import torch

    layers, dense = {}, []
    for name, module in model.named_modules():
        if not isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
            continue
        if any(name == s or name.startswith(s + ".") for s in skip):
            dense.append((name, "skipped by the caller"))
            continue
        why = _why_dense(module)
        if why is not None:
            dense.append((name, why))
            continue
        layers[name] = module
    return layers, dense


def _tap_major(module: Any) -> Any:
    """The permutation of a layer's input columns (channel-major: ``c * taps + t``) that
    orders them tap-major (``t * channels + c``): a 2:4 group becomes four adjacent columns."""
    import torch

    w = module.weight
    channels, taps = w.shape[1], w[0, 0].numel()
    return torch.arange(channels * taps).reshape(channels, taps).T.reshape(-1)


def _conv_shape(module: Any) -> Any:
    import torch

    from tessel.quant.int4_weights import ConvShape

    if not isinstance(module, torch.nn.Conv2d):
        return None
    if isinstance(module.padding, str):
        raise TesselConfigError(f"SparseGPT pruning: padding {module.padding!r} of a conv")
    return ConvShape(tuple(module.kernel_size), tuple(module.stride), tuple(module.padding),
                     tuple(module.dilation), module.groups)


def _sparsegpt(model: Any, layers: dict[str, Any], data: Iterable[Any]) -> dict[str, Any]:
    """Per layer, its SparseGPT-pruned weight (module docstring), from one pass of the
    calibration inputs through the dense ``model``."""
    import torch

    from tessel.quant.int4_weights import Gram, input_rows
    from tessel.threads import single_threaded

    grams, hooks = {}, []
    for name, module in layers.items():
        conv, perm = _conv_shape(module), _tap_major(module)
        grams[name] = Gram(perm.numel(), align=GROUP)

        def hook(_m: Any, args: tuple[Any, ...], _out: Any, gram: Any = grams[name],
                 conv: Any = conv, perm: Any = perm) -> None:
            gram.add(input_rows(args[0], conv)[..., perm].contiguous())
        hooks.append(module.register_forward_hook(hook))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), single_threaded():
            count = 0
            for d in data:
                model(*(d if isinstance(d, tuple) else (d,)))
                count += 1
            if not count:
                raise TesselConfigError("SparseGPT pruning needs at least one calibration input")
            return {name: _prune_layer(module.weight, grams[name], _tap_major(module))
                    for name, module in layers.items() if grams[name].sums[0] is not None}
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)


def _prune_layer(w: Any, gram: Any, perm: Any) -> Any:
    """SparseGPT of one weight [O, I / groups, *kernel] on its (tap-major) Gram blocks."""
    import numpy as np
    import torch

    groups = gram.sums[0].shape[0]
    out = w.shape[0]
    w3 = w.detach().to(torch.float32).reshape(groups, out // groups, -1)[..., perm]
    work = w3.permute(0, 2, 1).numpy().copy()  # columns first: [G, d, O / G]
    for (a, b), (v, _) in zip(gram.blocks, gram.inverse_factors(), strict=True):
        work[:, a:b] = _prune_block(work[:, a:b], v.numpy())
    pruned = np.empty_like(work)
    pruned[:, perm.numpy()] = work
    return torch.from_numpy(pruned).permute(0, 2, 1).reshape(w.shape).to(w.dtype)


def _prune_block(w: Any, v: Any) -> Any:
    """SparseGPT on one block, columns first: ``w`` [G, b, M] (``b`` a multiple of four),
    ``v`` [G, b, b] (``V V^T = H + damp``, ``V = U^-1`` for ``U`` the upper Cholesky factor
    of ``(H + damp)^-1``, as GPTQ's rounding uses it). Column ``i``'s compensated weight is
    ``w_i + sum_{k<i} r_k V_ki / V_ii`` (``r`` the done columns' changes), its saliency
    ``(w_i V_ii)^2`` (= ``w^2 / U_ii^2``); returns the pruned, compensated weights."""
    import numpy as np

    from tessel.quant.int4_weights import LAZY

    out = np.empty_like(w)
    res = np.empty_like(w)
    diag = np.diagonal(v, axis1=1, axis2=2)[..., None]  # [G, b, 1]
    width = w.shape[1]
    keep = None
    for i1 in range(0, width, LAZY):
        i2 = min(i1 + LAZY, width)
        acc = np.swapaxes(v[:, :i1, i1:i2], 1, 2) @ res[:, :i1]  # [G, i2 - i1, M]
        for i in range(i1, i2):
            if i % GROUP == 0:
                cols = w[:, i:i + GROUP] + acc[:, i - i1:i - i1 + GROUP] / diag[:, i:i + GROUP]
                order = np.argsort(-np.square(cols * diag[:, i:i + GROUP]), axis=1,
                                   kind="stable")
                keep = np.zeros(cols.shape, dtype=bool)
                np.put_along_axis(keep, order[:, :KEPT], True, axis=1)
            col = w[:, i] + acc[:, i - i1] / diag[:, i]
            out[:, i] = np.where(keep[:, i % GROUP], col, 0.0)
            res[:, i] = w[:, i] - out[:, i]
            acc[:, i - i1 + 1:] += v[:, i, i + 1:i2, None] * res[:, i, None, :]
    return out


def _outputs(out: Any) -> list[Any]:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    return [t for o in out for t in _outputs(o)]


def _finetune(model: Any, teacher: Any, masks: dict[str, Any], data: Iterable[Any], steps: int,
              lr: float) -> tuple[float, float]:
    """SGD towards ``teacher``'s outputs on ``data`` (cycled), the masks re-applied after each
    step; the mean loss over the samples before and after."""
    import torch

    samples = [d if isinstance(d, tuple) else (d,) for d in data]
    if not samples:
        return 0.0, 0.0
    teacher = teacher.eval()
    with torch.no_grad():
        targets = [[t.detach() for t in _outputs(teacher(*s))] for s in samples]
    modules = dict(model.named_modules())

    def loss_of(i: int) -> Any:
        outs = _outputs(model(*samples[i]))
        # relative to the dense output's power: the step size does not depend on its scale
        return sum(torch.nn.functional.mse_loss(o.float(), t.float())
                   / t.float().square().mean().clamp_min(1e-12)
                   for o, t in zip(outs, targets[i], strict=True))

    def mean_loss() -> float:
        model.eval()
        with torch.no_grad():
            return float(sum(float(loss_of(i)) for i in range(len(samples))) / len(samples))

    before = mean_loss()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    # eval mode: batch-norm statistics stay those the model was trained with
    model.eval()
    for step in range(steps):
        opt.zero_grad()
        loss_of(step % len(samples)).backward()
        # a bounded step: a few steps on few samples must not diverge
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_NORM)
        opt.step()
        with torch.no_grad():
            for name, keep in masks.items():
                modules[name].weight.mul_(keep)
    return before, mean_loss()
