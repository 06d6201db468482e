"""Estimate vs simulation on generated layers: a few dozen random single layers and two-layer
chains (conv, depthwise conv, max / average pool, linear, matmul, add / mul, softmax, layer
norm, nearest upsample; odd shapes, strides, padding, dilation, groups) compiled on every
preset and timed by the simulator's timing model. Each layer's estimate is held to the
per-layer bound of docs/backend.md (15 %), the generated set to the per-layer p90 bound (5 %)
and each graph to the whole-model bound (2 %)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from compile_region import compile_region
from tessel.arch import load_preset
from tessel.ir import DType, GraphBuilder, Layout, Op, QuantParams, TensorType, verify
from tessel.isa import fixedpoint as fp
from tessel.isa.fields import DType as IsaDType
from tessel.ops.layer_norm import plan_layer_norm
from tessel.ops.softmax import plan_softmax
from tessel.runtime.profile import build_profile

PRESETS = ["tnpu-xs", "u55-256", "tnpu-s", "u65-512", "tnpu-m"]
LAYER_MAX, LAYER_P90, MODEL_MAX = 0.15, 0.05, 0.02  # docs/backend.md, "Cost models"
Q = QuantParams((0.05,), (3,))
SPATIAL = ("conv", "dwconv", "maxpool", "avgpool", "add", "upsample")  # NHWC in and out
ROWS = ("linear", "matmul", "mul", "softmax", "layernorm")  # (..., features) in and out
CHAINS = [("conv", "dwconv"), ("dwconv", "conv"), ("conv", "maxpool"), ("avgpool", "conv"),
          ("conv", "add"), ("linear", "softmax"), ("linear", "layernorm"), ("mul", "linear"),
          ("matmul", "softmax"), ("layernorm", "linear")]


@dataclass(frozen=True)
class Case:
    preset: str
    kinds: tuple[str, ...]
    shape: tuple[int, ...]
    seed: int

    def __str__(self) -> str:
        return f"{self.preset}-{'+'.join(self.kinds)}-{'x'.join(map(str, self.shape))}"


def _cases() -> list[Case]:
    rng = np.random.default_rng(2024)
    kinds = [(k,) for k in SPATIAL + ROWS] * 3 + CHAINS * 2
    out = []
    for n, ks in enumerate(kinds):
        preset = PRESETS[(n + n // len(PRESETS)) % len(PRESETS)]  # each kind on several
        if ks[0] in SPATIAL:
            shape = (1, int(rng.integers(3, 60)), int(rng.integers(3, 60)),
                     int(rng.integers(1, 97)))
        else:
            shape = (int(rng.integers(1, 3)), int(rng.integers(1, 130)), int(rng.integers(3, 400)))
        out.append(Case(preset, ks, shape, int(rng.integers(1 << 30))))
    return out


CASES = _cases()


def _q31(x: float) -> tuple[int, int]:
    m, s = fp.quantize_multipliers(np.array([x]))
    return int(m[0]), int(s[0])


def _requant(b: GraphBuilder, rng: np.random.Generator, n: int, fan: int) -> list[str]:
    """Bias, multipliers and shifts of a conv / linear with `n` outputs and fan-in `fan`."""
    m, s = fp.quantize_multipliers(rng.uniform(0.3 / (fan * 127), 3 / (fan * 127), n))
    return [b.constant(rng.integers(-999, 999, n).astype(np.int32), "b"),
            b.constant(m.astype(np.int32), "m"), b.constant(s.astype(np.int32), "s")]


def _conv(b, rng, x, shape, depthwise):
    c = shape[-1]
    k = int(rng.choice([3, 5])) if depthwise else int(rng.choice([1, 3, 3, 5, 7]))
    s, d = int(rng.choice([1, 2])), int(rng.choice([1, 1, 1, 2]))
    p = int(rng.integers(0, d * (k // 2) + 1))
    while d * (k - 1) + 1 > min(shape[1:3]) + 2 * p:  # the window fits the padded input
        d, k = (1, k) if d > 1 else (d, k - 2)
        p = min(p, d * (k // 2))
    groups = c if depthwise else int(rng.choice([g for g in (1, 1, 2, 4) if c % g == 0]))
    cout = c if depthwise else groups * int(rng.integers(1, 65 // groups + 1))
    w = rng.integers(-127, 128, (cout, k, k, c // groups)).astype(np.int8)
    attrs = dict(stride=(s, s), padding=(p, p, p, p), dilation=(d, d), groups=groups,
                 layout=Layout.NHWC, in_zp=3, out_zp=-5, act_min=-128, act_max=127,
                 dtype=DType.I8)
    return b.add(Op.QCONV2D, [x, b.constant(w, "w"), *_requant(b, rng, cout, k * k * c //
                                                                 groups)], attrs)


def _pool(b, rng, x, op):
    k, s = int(rng.choice([2, 3])), int(rng.choice([1, 2]))
    p = int(rng.integers(0, k // 2 + 1))
    attrs = dict(kernel=(k, k), stride=(s, s), padding=(p, p, p, p),
                 ceil_mode=bool(rng.integers(2)), layout=Layout.NHWC)
    attrs.update(dilation=(1, 1)) if op is Op.MAX_POOL2D else attrs.update(
        act_min=-128, act_max=127)
    return b.add(op, [x], attrs)


def _binary(b, rng, x, shape, op):
    bshape = shape if rng.integers(2) else (1,) * (len(shape) - 1) + (shape[-1],)
    rhs = b.constant(rng.integers(-128, 128, bshape).astype(np.int8), "c")
    if op is Op.QMUL:
        om, osh = _q31(0.01)
        attrs = dict(a_zp=3, b_zp=-2, out_multiplier=om, out_shift=osh)
    else:
        (am, ash), (bm, bsh), (om, osh) = _q31(0.4), _q31(0.3), _q31(2.5 / (1 << 20))
        attrs = dict(a_zp=3, b_zp=-2, left_shift=20, a_multiplier=am, a_shift=ash,
                     b_multiplier=bm, b_shift=bsh, out_multiplier=om, out_shift=osh)
    return b.add(op, [x, rhs], dict(attrs, out_zp=-5, act_min=-125, act_max=127,
                                    dtype=DType.I8))


def _linear(b, rng, x, shape):
    n = int(rng.integers(4, 150))
    w = b.constant(rng.integers(-127, 128, (n, shape[-1])).astype(np.int8), "w")
    return b.add(Op.QLINEAR, [x, w, *_requant(b, rng, n, shape[-1])],
                 dict(in_zp=3, out_zp=-5, act_min=-128, act_max=127, dtype=DType.I8))


def _matmul(b, rng, x, shape):
    rhs = b.constant(rng.integers(-128, 128, (shape[-1], int(rng.integers(4, 150))))
                     .astype(np.int8), "k")
    m, s = _q31(0.0015)
    return b.add(Op.QMATMUL, [x, rhs], dict(a_zp=3, b_zp=-7, multiplier=m, shift=s, out_zp=2,
                                            act_min=-128, act_max=127, dtype=DType.I8))


def _softmax(b, x, shape):
    plan = plan_softmax(0.05, 3, IsaDType.I8, IsaDType.I8, shape[-1])
    table = b.constant(np.asarray(plan.exp_table, np.int16), "exp_table")
    return b.add(Op.QSOFTMAX, [x, table], {"axis": -1, "dtype": DType.I8, **plan.to_attrs()})


def _layer_norm(b, rng, x, shape):
    n = shape[-1]
    plan = plan_layer_norm(0.05, 3, IsaDType.I8, rng.normal(1.0, 0.25, n),
                           rng.normal(0.0, 0.1, n), 1e-5, 0.02, -1, IsaDType.I8, n)
    gq, bq = b.constant(np.asarray(plan.gamma_q), "g"), b.constant(np.asarray(plan.beta_q), "b")
    return b.add(Op.QLAYER_NORM, [x, gq, bq], {"normalized_shape": (n,), "dtype": DType.I8,
                                                **plan.to_attrs()})


def _layer(b, rng, kind, x, shape):
    if kind in ("conv", "dwconv"):
        return _conv(b, rng, x, shape, kind == "dwconv")
    if kind in ("maxpool", "avgpool"):
        return _pool(b, rng, x, Op.MAX_POOL2D if kind == "maxpool" else Op.QAVG_POOL2D)
    if kind in ("add", "mul"):
        return _binary(b, rng, x, shape, Op.QADD if kind == "add" else Op.QMUL)
    if kind == "upsample":
        scale = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        return b.add(Op.UPSAMPLE_NEAREST, [x], {"scale": scale, "layout": Layout.NHWC})
    if kind == "linear":
        return _linear(b, rng, x, shape)
    if kind == "matmul":
        return _matmul(b, rng, x, shape)
    return _softmax(b, x, shape) if kind == "softmax" else _layer_norm(b, rng, x, shape)


def build(case: Case):
    rng = np.random.default_rng(case.seed)
    b = GraphBuilder("t")
    layout = Layout.NHWC if case.kinds[0] in SPATIAL else Layout.ANY
    x = b.input("x", TensorType(case.shape, DType.I8, layout, Q))
    shape = case.shape
    for kind in case.kinds:
        x = _layer(b, rng, kind, x, shape)
        shape = b.type_of(x).shape
    return verify(b.build([x]))


def layer_errors(case: Case) -> tuple[list[float], float]:
    """Per layer |estimate - simulated| / simulated (a layer's cycles as `tessel profile`
    counts them), and the graph's: its estimates added up vs the simulated program."""
    arch = load_preset(case.preset)
    g = build(case)
    nodes = [n for n in g.nodes if n.op is not Op.CONSTANT]
    rp = compile_region(g, nodes, [v.name for v in g.inputs], [g.outputs[0]], arch,
                        {"model": "t"})
    prof = build_profile(rp.program, arch)
    est = [layer.estimate.cycles for layer in rp.layers]
    errs = [abs(e - s.cycles) / s.cycles for e, s in zip(est, prof.layers, strict=True)]
    return errs, abs(sum(est) - prof.cycles) / prof.cycles


ERRORS: dict[str, list[float]] = {}


@pytest.mark.parametrize("case", CASES, ids=str)
def test_layer_estimate_within_the_per_layer_bound(case):
    errs, whole = layer_errors(case)
    ERRORS[str(case)] = errs
    assert max(errs) <= LAYER_MAX, (errs, whole)
    assert whole <= MODEL_MAX, (errs, whole)


def test_generated_layers_p90_within_bound():
    errs = sorted(e for case in CASES for e in ERRORS.get(str(case)) or layer_errors(case)[0])
    assert errs[int(0.9 * (len(errs) - 1))] <= LAYER_P90, errs[-10:]
