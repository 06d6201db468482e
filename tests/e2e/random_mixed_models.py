"""Seeded random float PyTorch models of mixed rank (2-4) with several inputs, built so that ops
the NPU cannot run (`abs`, `maximum` / `minimum`, division by a tensor) sit before, between and
after NPU regions: the shapes a partition into host prologue | NPU | host | NPU | ... | host
epilogue has to get right.

Each model takes 1-3 inputs (`forward(*args)`, so export names them `args_0`, `args_1`, ...):
the trunk input of rank 2 ([N, F]), 3 ([N, C, L]) or 4 ([N, C, H, W]) and extra inputs that only
a host op or a concat reads. Ops: linear, conv1d, conv2d, concat of 2-5 values, squeeze /
unsqueeze / flatten between ranks, batch norm, GELU, clip, division by a constant and by a
tensor, abs, softmax, nearest interpolation, maximum / minimum, mean, residual add. Outputs: the
trunk's last value, sometimes an intermediate value, sometimes a graph input as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Step:
    """One op of the plan: its kind, the value ids it reads, its module (if any), extras."""

    kind: str
    reads: tuple[int, ...]
    module: int = -1
    extra: tuple = ()


@dataclass
class _Plan:
    rng: np.random.Generator
    shapes: list[Shape]  # of every value id (inputs first)
    steps: list[Step] = field(default_factory=list)
    modules: list[nn.Module] = field(default_factory=list)
    inputs: int = 1  # value ids below this are the graph inputs
    outputs: list[int] = field(default_factory=list)

    def add(self, kind: str, reads: tuple[int, ...], shape: Shape, module: nn.Module | None = None,
            extra: tuple = ()) -> int:
        index = -1
        if module is not None:
            self.modules.append(module)
            index = len(self.modules) - 1
        self.steps.append(Step(kind, reads, index, extra))
        self.shapes.append(tuple(int(d) for d in shape))
        return len(self.shapes) - 1

    def same_shape(self, x: int) -> list[int]:
        return [v for v, s in enumerate(self.shapes) if s == self.shapes[x] and v != x]


class MixedNet(nn.Module):
    """A random mixed-rank network (see the module docstring); `example_inputs()` gives inputs
    drawn from the same seed."""

    def __init__(self, seed: int):
        super().__init__()
        plan = _build(seed)
        self.input_shapes = [plan.shapes[i] for i in range(plan.inputs)]
        self.steps = plan.steps
        self.layers = nn.ModuleList(plan.modules)
        self.outputs = plan.outputs

    def forward(self, *args):
        vals = list(args)
        for s in self.steps:
            vals.append(_apply(s, [vals[i] for i in s.reads],
                               self.layers[s.module] if s.module >= 0 else None))
        return tuple(vals[i] for i in self.outputs)


def _apply(s: Step, a: list[torch.Tensor], m: nn.Module | None) -> torch.Tensor:
    k, e = s.kind, s.extra
    if m is not None:
        return m(a[0])
    if k == "gelu":
        return nn.functional.gelu(a[0])
    if k == "clip":
        return torch.clamp(a[0], e[0], e[1])
    if k == "abs":
        return torch.abs(a[0])
    if k == "div_const":
        return a[0] / e[0]
    if k == "div":
        return a[0] / (torch.abs(a[1]) + 0.5)
    if k == "max":
        return torch.maximum(a[0], a[1])
    if k == "min":
        return torch.minimum(a[0], a[1])
    if k == "add":
        return a[0] + a[1]
    if k == "softmax":
        return torch.softmax(a[0], dim=e[0])
    if k == "mean":
        return a[0].mean(dim=e[0], keepdim=e[1])
    if k == "cat":
        return torch.cat(a, dim=e[0])
    if k == "flatten":
        return torch.flatten(a[0], e[0])
    if k == "unsqueeze":
        return a[0].unsqueeze(e[0])
    if k == "squeeze":
        return a[0].squeeze(e[0])
    if k == "nearest":
        return nn.functional.interpolate(a[0], scale_factor=e[0], mode="nearest")
    raise AssertionError(k)


def _build(seed: int) -> _Plan:
    rng = np.random.default_rng(seed)
    n = int(rng.choice([1, 1, 2]))
    rank = int(rng.integers(2, 5))
    trunk = _input_shape(rng, n, rank)
    shapes = [trunk]
    extras = int(rng.integers(0, 3))
    for _ in range(extras):  # a same-shaped input (max / min / div / add) or a concat partner
        shapes.append(trunk if rng.integers(0, 3) else _cat_partner(rng, trunk))
    plan = _Plan(rng, shapes, inputs=len(shapes))
    x = 0
    outputs: list[int] = []
    if rng.integers(0, 3) == 0:  # a host op first: work in the prologue
        x = plan.add(str(rng.choice(["abs", "max"])) if len(plan.same_shape(0)) else "abs",
                     (0,) + tuple(plan.same_shape(0)[:1]), trunk)
    for _ in range(int(rng.integers(3, 10))):
        x = _step(plan, x)
        if rng.integers(0, 7) == 0 and x not in outputs:
            outputs.append(x)  # an intermediate value is an output too
    if rng.integers(0, 3) == 0:  # a host op last: work in the epilogue
        partner = [v for v in plan.same_shape(x)]
        x = plan.add("min" if partner else "abs", (x,) + tuple(partner[-1:]), plan.shapes[x])
    outputs.append(x)
    if rng.integers(0, 5) == 0:
        outputs.insert(int(rng.integers(0, len(outputs) + 1)), int(rng.integers(0, plan.inputs)))
    plan.outputs = list(dict.fromkeys(outputs))
    return plan


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
_ANY_RANK = ("gelu", "clip", "div_const", "softmax", "mean", "cat", "bn", "add", "linear")


def _step(p: _Plan, x: int) -> int:
    """One random op on value `x` (the trunk); returns the new trunk value."""
    r, shape = p.rng, p.shapes[x]
    by_rank = {2: ("unsqueeze",), 3: ("conv1d", "conv1d", "flatten", "unsqueeze", "nearest"),
               4: ("conv2d", "conv2d", "flatten", "nearest", "squeeze")}[len(shape)]
    kinds = list(_HOST) + list(_ANY_RANK) + list(by_rank) * 2
    kind = str(r.choice(kinds))
    if kind in _HOST:
        return _host_op(p, x, kind)
    if kind in ("gelu", "div_const"):
        return p.add(kind, (x,), shape, extra=(float(r.choice([2.0, 3.0, 0.5])),))
    if kind == "clip":
        lo = float(r.uniform(-1.5, 0.0))
        return p.add(kind, (x,), shape, extra=(lo, float(r.uniform(lo + 0.5, 2.0))))
    if kind == "softmax":
        axis = len(shape) - 1 if r.integers(0, 3) else 1
        return p.add(kind, (x,), shape, extra=(axis,))
    if kind == "mean":
        return _mean(p, x)
    if kind == "cat":
        return _cat(p, x)
    if kind == "add":
        partner = _partner(p, x)
        return p.add(kind, (x, partner), shape)
    if kind == "bn":
        return _batch_norm(p, x)
    if kind == "linear":
        out = int(r.integers(2, 33))
        return p.add(kind, (x,), shape[:-1] + (out,), nn.Linear(shape[-1], out))
    return _shape_or_conv(p, x, kind)


def _partner(p: _Plan, x: int) -> int:
    """A value of x's shape other than x (an extra input when one fits), else a GELU of x."""
    same = p.same_shape(x)
    inputs = [v for v in same if v < p.inputs]
    if inputs and p.rng.integers(0, 2):
        return int(p.rng.choice(inputs))
    if same and p.rng.integers(0, 2):
        return int(p.rng.choice(same))
    return p.add("gelu", (x,), p.shapes[x])


def _host_op(p: _Plan, x: int, kind: str) -> int:
    if kind == "abs":
        return p.add(kind, (x,), p.shapes[x])
    return p.add(kind, (x, _partner(p, x)), p.shapes[x])


def _mean(p: _Plan, x: int) -> int:
    shape, r = p.shapes[x], p.rng
    if len(shape) == 4 and r.integers(0, 2):
        axes: tuple[int, ...] = (2, 3)
    else:
        axes = (int(r.integers(1, len(shape))),)
    keep = bool(r.integers(0, 2)) or len(shape) - len(axes) < 2
    out = tuple(1 if (i in axes) else d for i, d in enumerate(shape)) if keep else tuple(
        d for i, d in enumerate(shape) if i not in axes)
    return p.add("mean", (x,), out, extra=(axes, keep))


def _cat(p: _Plan, x: int) -> int:
    """concat of x with 1-4 values along axis 1 (extra inputs of a fitting shape, earlier values,
    or new GELU / clip / abs branches of x)."""
    shape, r = p.shapes[x], p.rng
    fits = [v for v, s in enumerate(p.shapes)
            if v != x and len(s) == len(shape) and s[0] == shape[0] and s[2:] == shape[2:]]
    parts = [x]
    for _ in range(int(r.integers(1, 5))):
        if fits and r.integers(0, 2):
            parts.append(int(r.choice(fits)))
        else:
            parts.append(p.add(str(r.choice(["gelu", "abs", "div_const"])), (x,), shape,
                               extra=(2.0,)))
    width = sum(p.shapes[v][1] for v in parts)
    return p.add("cat", tuple(parts), (shape[0], width) + shape[2:], extra=(1,))


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


def random_mixed_model(seed: int) -> tuple[MixedNet, tuple[torch.Tensor, ...]]:
    """(model in eval mode with deterministic weights, example inputs)."""
    torch.manual_seed(seed)
    model = MixedNet(seed).eval()
    return model, sample_inputs(model, seed)


def sample_inputs(model: MixedNet, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(s, generator=g) for s in model.input_shapes)
