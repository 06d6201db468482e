"""max_pool2d / qavg_pool2d -> POOL and qmean -> REDUCE SUM + REQUANT programs: the simulated
output equals an independent int64 reference and the golden model bit for bit on every preset;
split reductions stay exact where int32 saturates; the estimate equals the simulated cycles."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from compile_region import assert_estimates_exact, compile_region
from tessel.arch import load_preset
from tessel.errors import TesselCompileError
from tessel.ir import DType, GraphBuilder, Layout, Op, TensorType, verify
from tessel.isa import fixedpoint as fp
from tessel.quant.golden import GOLDEN_KERNELS
from tessel.sim import simulate

PRESETS = ["tnpu-s", "tnpu-xs", "u55-256", "u65-512", "tnpu-m"]


def pool_attrs(k, s, p, ceil=False, **extra):
    return dict(kernel=(k, k), stride=(s, s), padding=(p, p, p, p), ceil_mode=ceil,
                layout=Layout.NHWC, **extra)


def mean_attrs(axes, n, keep, dt, in_zp=3):
    m, s = fp.quantize_multipliers(np.array([0.8 / n]))
    lo, hi = dt.bounds
    return dict(axes=axes, keepdim=keep, in_zp=in_zp, multiplier=int(m[0]), shift=int(s[0]),
                out_zp=-2, act_min=lo, act_max=hi, dtype=dt)


def reference(op: Op, a: dict, x: np.ndarray) -> np.ndarray:
    """int64 reference, independent of intops: torch pooling with -inf / count masks."""
    if op is Op.QMEAN:
        axes = tuple(ax % x.ndim for ax in a["axes"])
        acc = np.clip((x.astype(np.int64) - a["in_zp"]).sum(axis=axes, keepdims=a["keepdim"]),
                      -(2**31), 2**31 - 1)
        return fp.requantize(np.reshape(acc, (-1,)), 0, a["multiplier"], a["shift"],
                             a["out_zp"], a["act_min"], a["act_max"],
                             out_dtype=a["dtype"].numpy).reshape(np.shape(acc))
    pt, pl, pb, pr = a["padding"]
    xt = torch.tensor(x.astype(np.float64)).permute(0, 3, 1, 2)
    kw = dict(kernel_size=a["kernel"], stride=a["stride"], ceil_mode=a["ceil_mode"])
    if op is Op.MAX_POOL2D:
        xp = torch.nn.functional.pad(xt, (pl, pr, pt, pb), value=-1e9)
        y = torch.nn.functional.max_pool2d(xp, dilation=a["dilation"], **kw).numpy()
        return y.transpose(0, 2, 3, 1).astype(x.dtype)
    pad = lambda t: torch.nn.functional.pad(t, (pl, pr, pt, pb))  # noqa: E731
    s = torch.nn.functional.avg_pool2d(pad(xt), **kw) * a["kernel"][0] * a["kernel"][1]
    n = torch.nn.functional.avg_pool2d(pad(torch.ones_like(xt)), **kw) * a["kernel"][0] * \
        a["kernel"][1]
    s, n = np.rint(s.numpy()).astype(np.int64), np.rint(n.numpy()).astype(np.int64)
    q = (2 * np.abs(s) + n) // (2 * n) * np.sign(s)  # halves away from zero
    return np.clip(q, a["act_min"], a["act_max"]).transpose(0, 2, 3, 1).astype(x.dtype)


def run(op, shape, attrs, preset, dt=DType.I8, x=None, seed=0):
    rng = np.random.default_rng(seed)
    arch = load_preset(preset)
    b = GraphBuilder("t")
    name = b.input("x", TensorType(shape, dt))
    g = verify(b.build([b.add(op, [name], attrs)]))
    node = g.nodes[-1]
    rp = compile_region(g, [node], ["x"], [node.name], arch, {"model": "t"})
    lo, hi = dt.bounds
    x = rng.integers(lo, hi + 1, shape).astype(dt.numpy) if x is None else x
    res = simulate(rp.program, arch, {"x": x})
    out = res.outputs[node.name]
    a = dict(node.attr_map)
    np.testing.assert_array_equal(out, GOLDEN_KERNELS[op](a, [x]))
    np.testing.assert_array_equal(out, reference(op, a, x))
    return rp, res


CASES = [
    (Op.MAX_POOL2D, (1, 56, 56, 64), pool_attrs(3, 2, 1, dilation=(1, 1)), DType.I8),
    (Op.MAX_POOL2D, (1, 15, 13, 7), pool_attrs(3, 2, 1, True, dilation=(1, 1)), DType.I16),
    (Op.MAX_POOL2D, (1, 9, 9, 5), pool_attrs(2, 2, 0, dilation=(1, 1)), DType.I8),
    (Op.QAVG_POOL2D, (1, 7, 7, 1280), pool_attrs(7, 1, 0, act_min=-128, act_max=127),
     DType.I8),
    (Op.QAVG_POOL2D, (1, 17, 19, 24), pool_attrs(3, 2, 1, act_min=-100, act_max=90), DType.I8),
    (Op.QAVG_POOL2D, (1, 10, 11, 3), pool_attrs(3, 1, 1, act_min=-32768, act_max=32767),
     DType.I16),
    # DS-CNN's global pool: kernel = input, stride 25 x 5 (beyond POOL's 4-bit stride fields)
    (Op.QAVG_POOL2D, (1, 25, 5, 64), {**pool_attrs(1, 1, 0, act_min=-128, act_max=127),
                                      "kernel": (25, 5), "stride": (25, 5)}, DType.I8),
    (Op.QMEAN, (1, 7, 7, 256), mean_attrs((1, 2), 49, True, DType.I8), DType.I8),
    (Op.QMEAN, (1, 64, 384), mean_attrs((-1,), 384, False, DType.I16), DType.I16),
    (Op.QMEAN, (1, 56, 56, 96), mean_attrs((1, 2), 56 * 56, False, DType.I8), DType.I8),
    (Op.QMEAN, (3, 50, 7), mean_attrs((1,), 50, True, DType.I8), DType.I8),
    (Op.QMEAN, (2, 18), mean_attrs((0, 1), 36, True, DType.I8), DType.I8),  # every axis
]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize(("op", "shape", "attrs", "dt"), CASES,
                         ids=[f"{c[0].value}{k}" for k, c in enumerate(CASES)])
def test_pool_bit_exact_and_estimate_exact(preset, op, shape, attrs, dt):
    rp, _ = run(op, shape, attrs, preset, dt)
    assert_estimates_exact(rp, load_preset(preset))


@pytest.mark.parametrize("preset", ["tnpu-s", "u55-256"])
def test_large_max_pool_estimate_is_exact(preset):
    """Loads dominate the shared off-chip port (ResNet's stem pool): the estimate books the port
    first come, first served in issue order, as the simulator does."""
    rp, _ = run(Op.MAX_POOL2D, (1, 112, 112, 64), pool_attrs(3, 2, 1, dilation=(1, 1)),
                preset)
    assert_estimates_exact(rp, load_preset(preset))


def test_split_reduction_is_exact_where_int32_saturates():
    """int16, 40000 elements of 65535 above the zero point: the total saturates, the 32768-
    element partials do not, and the final REDUCE saturates once, as the golden sat32(sum)."""
    shape = (1, 40000)
    x = np.full(shape, 32767, np.int16)
    x[0, :100] = -32768  # a few negative terms: a saturating running sum would differ
    attrs = mean_attrs((-1,), 40000, False, DType.I16, in_zp=-32768)
    rp, _ = run(Op.QMEAN, shape, attrs, "tnpu-xs", DType.I16, x=x)
    assert "reduce_chunk=40000" not in rp.layers[0].mapping  # 80 KB: split on 128 KiB SRAM


def test_large_global_pool_tiles_channels_or_rows():
    rp, _ = run(Op.QMEAN, (1, 30, 30, 160), mean_attrs((1, 2), 900, True, DType.I8),
                "tnpu-xs")
    assert "reduce_chunk=900" not in rp.layers[0].mapping or "kept=1x160" not in \
        rp.layers[0].mapping


def test_mean_over_non_adjacent_axes_is_rejected():
    b = GraphBuilder("t")
    x = b.input("x", TensorType((2, 3, 4), DType.I8))
    y = b.add(Op.QMEAN, [x], mean_attrs((0, 2), 8, False, DType.I8))
    g = b.build([y])
    with pytest.raises(TesselCompileError, match="non-adjacent"):
        compile_region(g, [g.nodes[-1]], ["x"], [y], load_preset("tnpu-s"), {})


def test_nchw_pool_is_rejected():
    b = GraphBuilder("t")
    x = b.input("x", TensorType((1, 4, 8, 8), DType.I8))
    y = b.add(Op.MAX_POOL2D, [x], dict(kernel=(2, 2), stride=(2, 2), layout=Layout.NCHW))
    g = b.build([y])
    with pytest.raises(TesselCompileError, match="NHWC"):
        compile_region(g, [g.nodes[-1]], ["x"], [y], load_preset("tnpu-s"), {})
