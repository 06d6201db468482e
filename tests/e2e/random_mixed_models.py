"""Seeded random float PyTorch models of mixed rank (2-4) with several inputs, built so that ops
the NPU cannot run (`abs`, `maximum` / `minimum`, division by a tensor) sit before, between and
after NPU regions: the shapes a partition into host prologue | NPU | host | NPU | ... | host
epilogue has to get right.

Each model takes 1-4 inputs (`forward(*args)`, so export names them `args_0`, `args_1`, ...):
the trunk input of rank 2 ([N, F]), 3 ([N, C, L]) or 4 ([N, C, H, W]) and extra inputs that a
host op, an add or a concat reads later (often only a host op after an NPU region), some of a
shape that broadcasts against the value they meet. Ops:
linear, conv1d, conv2d, concat of 2-5 values along any axis, squeeze / unsqueeze / flatten /
transpose between ranks, batch norm, GELU, ReLU, clip, division by a constant and by a tensor,
abs, softmax along any axis, nearest interpolation, maximum / minimum, mean over any axes,
residual add, multiply. Outputs: the trunk's last value, sometimes intermediate values,
sometimes a graph input as it is.

With `weights=True` (weight_features.py) some layers are pruned 2:4 by `tessel.prune_2_4`
(magnitude or SparseGPT on calibration inputs, some layers skipped) and the conv1d layers it
leaves dense given an exact 2:4 mask; `weight_features.random_quant_config` draws the
quantiser's per-layer weight and activation types for the model's `layers.<k>` modules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from weight_features import MASK, mask_2_4, stream

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Step:
    """One op of the plan: its kind, the value ids it reads (inputs are -1, -2, ...), its
    module's index (-1: none) and its constant arguments."""

    kind: str
    reads: tuple[int, ...]
    module: int = -1
    extra: tuple = ()


@dataclass
class _Plan:
    rng: np.random.Generator
    shapes: dict[int, Shape] = field(default_factory=dict)  # value id -> shape
    inputs: list[Shape] = field(default_factory=list)  # input k is value id -(k + 1)
    steps: list[Step] = field(default_factory=list)
    modules: list[nn.Module] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)

    def input(self, shape: Shape) -> int:
        self.inputs.append(tuple(shape))
        v = -len(self.inputs)
        self.shapes[v] = tuple(shape)
        return v

    def add(self, kind: str, reads: tuple[int, ...], shape: Shape, module: nn.Module | None = None,
            extra: tuple = ()) -> int:
        index = -1
        if module is not None:
            self.modules.append(module)
            index = len(self.modules) - 1
        self.steps.append(Step(kind, reads, index, extra))
        v = len(self.steps) - 1
        self.shapes[v] = tuple(int(d) for d in shape)
        return v

    def same_shape(self, x: int) -> list[int]:
        return [v for v, s in self.shapes.items() if s == self.shapes[x] and v != x]


class MixedNet(nn.Module):
    """A random mixed-rank network (see the module docstring)."""

    def __init__(self, seed: int):
        super().__init__()
        plan = _build(seed)
        self.input_shapes = list(plan.inputs)
        self.steps = plan.steps
        self.layers = nn.ModuleList(plan.modules)
        self.outputs = plan.outputs

    def forward(self, *args):
        vals = {-(k + 1): a for k, a in enumerate(args)}
        for k, s in enumerate(self.steps):
            vals[k] = _apply(s, [vals[i] for i in s.reads],
                             self.layers[s.module] if s.module >= 0 else None)
        return tuple(vals[i] for i in self.outputs)


_UNARY = {
    "gelu": lambda x, e: nn.functional.gelu(x),
    "relu": lambda x, e: torch.relu(x),
    "clip": lambda x, e: torch.clamp(x, e[0], e[1]),
    "abs": lambda x, e: torch.abs(x),
    "div_const": lambda x, e: x / e[0],
    "softmax": lambda x, e: torch.softmax(x, dim=e[0]),
    "mean": lambda x, e: x.mean(dim=e[0], keepdim=e[1]),
    "flatten": lambda x, e: torch.flatten(x, e[0]),
    "unsqueeze": lambda x, e: x.unsqueeze(e[0]),
    "squeeze": lambda x, e: x.squeeze(e[0]),
    "transpose": lambda x, e: x.transpose(e[0], e[1]),
    "nearest": lambda x, e: nn.functional.interpolate(x, scale_factor=e[0], mode="nearest"),
}
_BINARY = {
    "div": lambda a, b: a / (torch.abs(b) + 0.5),
    "max": torch.maximum,
    "min": torch.minimum,
    "add": torch.add,
    "mul": torch.mul,
}


def _apply(s: Step, a: list[torch.Tensor], m: nn.Module | None) -> torch.Tensor:
    if m is not None:
        return m(a[0])
    if s.kind == "cat":
        return torch.cat(a, dim=s.extra[0])
    if s.kind in _BINARY:
        return _BINARY[s.kind](a[0], a[1])
    return _UNARY[s.kind](a[0], s.extra)


def _build(seed: int) -> _Plan:
    rng = np.random.default_rng(seed)
    n = int(rng.choice([1, 1, 2, 3]))
    p = _Plan(rng)
    x = p.input(_input_shape(rng, n, int(rng.integers(2, 5))))
    for _ in range(int(rng.integers(0, 3))):  # inputs read later by a concat or a host op
        p.input(p.shapes[x] if rng.integers(0, 3) else _cat_partner(rng, p.shapes[x]))
    if rng.integers(0, 3) == 0:  # a host op first: work in the prologue
        x = _host_op(p, x, str(rng.choice(["abs", "max", "div"])))
    outputs: list[int] = []
    for _ in range(int(rng.integers(3, 10))):
        x = _step(p, x)
        if rng.integers(0, 7) == 0:
            outputs.append(x)  # an intermediate value is an output too
    if rng.integers(0, 3) == 0:  # a host op last: work in the epilogue
        x = _host_op(p, x, str(rng.choice(["abs", "min", "div"])))
    outputs.append(x)
    if rng.integers(0, 5) == 0:  # an input is an output as it is
        outputs.insert(int(rng.integers(0, len(outputs) + 1)), -int(rng.integers(1, 1 + len(p.inputs))))
    p.outputs = list(dict.fromkeys(outputs))
    return p


def _input_shape(rng: np.random.Generator, n: int, rank: int) -> Shape:
    if rank == 2:
        return n, int(rng.integers(4, 33))
    if rank == 3:
        return n, int(rng.integers(2, 17)), int(rng.integers(4, 33))
    return n, int(rng.integers(1, 9)), int(rng.integers(4, 13)), int(rng.integers(4, 13))


def _cat_partner(rng: np.random.Generator, shape: Shape) -> Shape:
    """A shape that concatenates with `shape` along axis 1."""
    return (shape[0], int(rng.integers(1, 9))) + shape[2:]


_HOST = ("abs", "max", "min", "div")
_ANY_RANK = ("gelu", "relu", "clip", "div_const", "softmax", "mean", "cat", "bn", "add", "mul",
             "linear", "transpose")
_BY_RANK = {2: ("unsqueeze",), 3: ("conv1d", "conv1d", "flatten", "unsqueeze", "nearest"),
            4: ("conv2d", "conv2d", "flatten", "nearest", "squeeze")}


def _step(p: _Plan, x: int) -> int:
    """One random op on value `x` (the trunk); returns the new trunk value."""
    r, shape = p.rng, p.shapes[x]
    kind = str(r.choice(list(_HOST) + list(_ANY_RANK) + list(_BY_RANK[len(shape)]) * 2))
    if kind in _HOST:
        return _host_op(p, x, kind)
    if kind in ("add", "mul"):
        return p.add(kind, (x, _partner(p, x, inputs_first=False)), shape)
    if kind in ("gelu", "relu", "div_const", "clip"):
        return _pointwise(p, x, kind)
    if kind == "softmax":
        axis = len(shape) - 1 if r.integers(0, 2) else int(r.integers(0, len(shape)))
        return p.add(kind, (x,), shape, extra=(axis,))
    if kind == "mean":
        return _mean(p, x)
    if kind == "cat":
        return _cat(p, x)
    if kind == "bn":
        return _batch_norm(p, x)
    if kind == "linear":
        out = int(r.integers(2, 33))
        return p.add(kind, (x,), shape[:-1] + (out,), nn.Linear(shape[-1], out))
    return _shape_or_conv(p, x, kind)


def _pointwise(p: _Plan, x: int, kind: str) -> int:
    r, shape = p.rng, p.shapes[x]
    if kind == "div_const":
        return p.add(kind, (x,), shape, extra=(float(r.choice([2.0, 3.0, 0.5, -4.0])),))
    if kind == "clip":
        lo = float(r.uniform(-1.5, 0.0))
        bounds = [(lo, float(r.uniform(lo + 0.5, 2.0))), (0.0, 6.0), (lo, None), (None, 0.5)]
        return p.add(kind, (x,), shape, extra=bounds[int(r.integers(0, len(bounds)))])
    return p.add(kind, (x,), shape)


def _partner(p: _Plan, x: int, inputs_first: bool = True) -> int:
    """A second operand for x: sometimes of a shape that broadcasts against x's (a new input);
    often a graph input of x's shape (a new one when none fits), else an earlier value of
    that shape, else a GELU of x."""
    r = p.rng
    if r.integers(0, 5) == 0:
        return p.input(_broadcast_shape(r, p.shapes[x]))
    same = p.same_shape(x)
    inputs = [v for v in same if v < 0]
    if inputs_first and r.integers(0, 2):
        return int(r.choice(inputs)) if inputs and r.integers(0, 2) else p.input(p.shapes[x])
    if same and r.integers(0, 2):
        return int(r.choice(same))
    return p.add("gelu", (x,), p.shapes[x])


def _broadcast_shape(r: np.random.Generator, shape: Shape) -> Shape:
    """A shape that broadcasts to `shape` without changing it: some axes 1, or fewer axes."""
    if r.integers(0, 3) == 0:
        return shape[int(r.integers(1, len(shape))):]
    ones = r.integers(0, 2, len(shape)).astype(bool)
    return tuple(1 if one else d for one, d in zip(ones, shape, strict=True))


def _host_op(p: _Plan, x: int, kind: str) -> int:
    if kind == "abs":
        return p.add(kind, (x,), p.shapes[x])
    return p.add(kind, (x, _partner(p, x)), p.shapes[x])


def _mean(p: _Plan, x: int) -> int:
    shape, r = p.shapes[x], p.rng
    if len(shape) == 4 and r.integers(0, 2):
        axes: tuple[int, ...] = (2, 3)
    elif r.integers(0, 4) == 0:
        axes = tuple(sorted(int(a) for a in r.choice(len(shape), 2, replace=False)))
    else:
        axes = (int(r.integers(1, len(shape))),)
    keep = bool(r.integers(0, 2)) or len(shape) - len(axes) < 2
    out = tuple(1 if (i in axes) else d for i, d in enumerate(shape)) if keep else tuple(
        d for i, d in enumerate(shape) if i not in axes)
    return p.add("mean", (x,), out, extra=(axes, keep))


def _cat(p: _Plan, x: int) -> int:
    """concat of x with 1-4 values along one axis (earlier values or inputs of a fitting shape,
    or new pointwise branches of x)."""
    shape, r = p.shapes[x], p.rng
    axis = 1 if r.integers(0, 2) else int(r.integers(0, len(shape)))
    fits = [v for v, s in p.shapes.items()
            if v != x and len(s) == len(shape) and s[:axis] == shape[:axis]
            and s[axis + 1:] == shape[axis + 1:]]
    parts = [x]
    for _ in range(int(r.integers(1, 5))):
        if fits and r.integers(0, 2):
            parts.append(int(r.choice(fits)))
        else:
            parts.append(_pointwise(p, x, str(r.choice(["gelu", "relu", "div_const", "clip"]))))
    width = sum(p.shapes[v][axis] for v in parts)
    return p.add("cat", tuple(parts), shape[:axis] + (width,) + shape[axis + 1:],
                 extra=(axis,))


def _batch_norm(p: _Plan, x: int) -> int:
    shape = p.shapes[x]
    bn = (nn.BatchNorm2d if len(shape) == 4 else nn.BatchNorm1d)(shape[1])
    bn.running_mean.uniform_(-0.5, 0.5)
    bn.running_var.uniform_(0.5, 2.0)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    return p.add("bn", (x,), shape, bn)


def _shape_or_conv(p: _Plan, x: int, kind: str) -> int:
    shape, r = p.shapes[x], p.rng
    if kind == "transpose":
        a, b = sorted(int(v) for v in r.choice(np.arange(1, len(shape)), 2, replace=False)) \
            if len(shape) > 2 else (0, 1)
        out = list(shape)
        out[a], out[b] = out[b], out[a]
        return p.add(kind, (x,), tuple(out), extra=(a, b))
    if kind == "unsqueeze":
        return p.add(kind, (x,), shape[:2] + (1,) + shape[2:], extra=(2,))
    if kind == "squeeze":
        ones = [i for i in range(1, len(shape)) if shape[i] == 1]
        if not ones:
            return p.add("flatten", (x,), shape[:2] + (shape[2] * shape[3],), extra=(2,))
        return p.add(kind, (x,), tuple(d for i, d in enumerate(shape) if i != ones[0]),
                     extra=(ones[0],))
    if kind == "flatten":
        start = 1 if len(shape) == 3 or r.integers(0, 2) else 2
        return p.add(kind, (x,), shape[:start] + (int(np.prod(shape[start:])),), extra=(start,))
    if kind == "nearest":
        if int(np.prod(shape[2:])) > 256:
            return p.add("gelu", (x,), shape)
        return p.add(kind, (x,), shape[:2] + tuple(2 * d for d in shape[2:]), extra=(2,))
    cin = shape[1]
    cout, k = int(r.integers(2, 17)), int(r.choice([1, 3, 5]))
    groups = cin if r.integers(0, 4) == 0 else 1
    cout = cin if groups > 1 else cout
    if kind == "conv1d":
        conv: nn.Module = nn.Conv1d(cin, cout, k, padding=k // 2, groups=groups)
    else:
        conv = nn.Conv2d(cin, cout, k, padding=k // 2, groups=groups)
    return p.add(kind, (x,), (shape[0], cout) + shape[2:], conv)


def random_mixed_model(seed: int, weights: bool = False) -> tuple[MixedNet, tuple[torch.Tensor, ...]]:
    """(model in eval mode with deterministic weights, example inputs); weights: some layers
    pruned 2:4 (the module docstring)."""
    torch.manual_seed(seed)
    model = MixedNet(seed).eval()
    if weights:
        model = _pruned(model, seed)
    return model, sample_inputs(model, seed)


def _pruned(model: MixedNet, seed: int) -> MixedNet:
    """`model` with half its layers' weights heavy-tailed, about three layers in four pruned 2:4
    (prune_2_4 for conv2d and linear, a random exact mask for conv1d), by magnitude or, one
    seed in three, SparseGPT."""
    import tessel
    from tessel.prune import PruneMethod

    r = stream(seed, MASK)
    with torch.no_grad():  # heavy-tailed weights, as trained ones are: their codes compress
        for m in model.layers:
            if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Linear)) and r.random() < 0.5:
                w = r.standard_normal(tuple(m.weight.shape)) ** 3 * 0.05
                m.weight.copy_(torch.from_numpy(w.astype(np.float32)))
    skip = [f"layers.{k}" for k in range(len(model.layers)) if r.random() < 0.25]
    sparsegpt = r.random() < 0.33
    calib = [sample_inputs(model, 1000 * seed + 100 + k) for k in range(2)] if sparsegpt else None
    model, _ = tessel.prune_2_4(model, skip=skip, calibration_data=calib, inplace=True,
                                method=PruneMethod.SPARSEGPT if sparsegpt else PruneMethod.MAGNITUDE)
    with torch.no_grad():
        for k, m in enumerate(model.layers):
            if (isinstance(m, nn.Conv1d) and m.groups == 1 and m.in_channels % 4 == 0
                    and f"layers.{k}" not in skip):
                w = mask_2_4(r, m.weight.numpy(), axis=1)
                m.weight.copy_(torch.from_numpy(w))
    return model


def sample_inputs(model: MixedNet, seed: int) -> tuple[torch.Tensor, ...]:
    """Standard normal inputs of the model's input shapes, from `seed`."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(s, generator=g) for s in model.input_shapes)
