"""Structured 2:4 pruning of a torch model along the reduction axis (``tessel.prune_2_4``).

In every group of four consecutive input-channel weights of a conv or linear layer (for one
output channel and, for a conv, one kernel tap) the two of smallest magnitude are set to zero:
the layout the NPU's sparse weights store (docs/isa.md, ``w_type`` I8_2_4 / I4_2_4) and the one
NVIDIA Ampere's sparse tensor cores and Arm Ethos-U85 use. Depthwise convs (one input channel
per output: no group of four) and layers whose input channels per group are not a multiple of
four stay dense.

The optional fine-tune runs a few SGD steps on user inputs with the mask kept, the loss the mean
squared error between the pruned model's outputs and the dense model's over the dense outputs'
mean square (no labels needed), the gradient's norm clipped to ``CLIP_NORM``.
Pruning without it costs accuracy; how much is a property of the model, measured, never assumed.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

GROUP = 4  # weights per group along the reduction axis
KEPT = 2  # of which are kept
CLIP_NORM = 1.0  # the fine-tune's gradient norm bound


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


def prune_2_4(model: Any, *, skip: Sequence[str] = (), finetune_data: Iterable[Any] | None = None,
              steps: int = 20, lr: float = 1e-3, inplace: bool = False) -> tuple[Any, PruneReport]:
    """Prune ``model``'s Conv2d and Linear layers to 2:4 along their input channels.

    ``skip``: module paths (or their prefixes) left dense. ``finetune_data``: inputs (a tensor
    or a tuple of tensors each) for ``steps`` SGD steps at ``lr`` towards the dense model's
    outputs, the zeros kept. Returns the pruned model (a copy unless ``inplace``) and a
    ``PruneReport``."""
    import torch

    dense_model = model
    if not inplace:
        model = copy.deepcopy(model)
    pruned, dense, masks = [], [], {}
    zeroed = total = 0
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
        keep = mask_2_4(module.weight)
        with torch.no_grad():
            zeroed += int((module.weight != 0).sum() - (module.weight * keep != 0).sum())
            module.weight.mul_(keep)
        total += module.weight.numel()
        masks[name] = keep
        pruned.append(name)
    before = after = None
    if finetune_data is not None and pruned:
        before, after = _finetune(model, dense_model, masks, finetune_data, steps, lr)
    return model, PruneReport(tuple(pruned), tuple(dense), zeroed, total, before, after,
                              steps if before is not None else 0, masks)


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
