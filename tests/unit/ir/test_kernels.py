"""Float reference kernels vs torch eager, one op at a time (including NHWC variants)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tessel.ir import DType, GraphBuilder, Layout, Op, TensorType, run_graph, verify

RNG = np.random.default_rng(0)


def _run(op, inputs, attrs, consts=()):
    """Build graph op(inputs..., consts...) and run it."""
    b = GraphBuilder("k")
    names = [b.input(f"x{i}", TensorType(a.shape, DType.from_numpy(a.dtype)))
             for i, a in enumerate(inputs)]
    names += [b.constant(c, f"c{i}") for i, c in enumerate(consts)]
    out = b.add(op, names, attrs)
    return run_graph(verify(b.build([out])), inputs)[0]


def _close(ours, ref):
    ref = ref.detach().numpy() if isinstance(ref, torch.Tensor) else ref
    assert ours.shape == ref.shape
    err = np.abs(ours - ref).max()
    assert err <= 1e-4 * max(1.0, np.abs(ref).max()), err


def _t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


@pytest.mark.parametrize("groups, stride, pad, dil, layout", [
    (1, (1, 1), (1, 1, 1, 1), (1, 1), Layout.NCHW),
    (1, (2, 2), (0, 1, 2, 1), (1, 1), Layout.NCHW),
    (2, (1, 2), (1, 1, 1, 1), (2, 1), Layout.NCHW),
    (8, (2, 2), (1, 1, 1, 1), (1, 1), Layout.NCHW),
    (8, (1, 1), (2, 2, 2, 2), (2, 2), Layout.NHWC),
    (1, (2, 1), (1, 0, 1, 0), (1, 1), Layout.NHWC),
])
def test_conv2d(groups, stride, pad, dil, layout):
    x = RNG.standard_normal((2, 8, 9, 10)).astype(np.float32)
    w = RNG.standard_normal((16, 8 // groups, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(16).astype(np.float32)
    xp = F.pad(_t(x), (pad[1], pad[3], pad[0], pad[2]))
    ref = F.conv2d(xp, _t(w), _t(b), stride, 0, dil, groups)
    attrs = {"stride": stride, "padding": pad, "dilation": dil, "groups": groups, "layout": layout}
    if layout is Layout.NHWC:
        out = _run(Op.CONV2D, [x.transpose(0, 2, 3, 1)], attrs, [w.transpose(0, 2, 3, 1), b])
        out = out.transpose(0, 3, 1, 2)
    else:
        out = _run(Op.CONV2D, [x], attrs, [w, b])
    _close(out, ref)


@pytest.mark.parametrize("op, k, s, p, ceil, incl", [
    (Op.MAX_POOL2D, (3, 3), (2, 2), (1, 1, 1, 1), False, True),
    (Op.MAX_POOL2D, (2, 2), (2, 2), (0, 0, 0, 0), True, True),
    (Op.AVG_POOL2D, (3, 3), (2, 2), (1, 1, 1, 1), False, True),
    (Op.AVG_POOL2D, (3, 3), (2, 2), (1, 1, 1, 1), False, False),
    (Op.AVG_POOL2D, (2, 2), (2, 2), (0, 0, 0, 0), True, True),
    (Op.AVG_POOL2D, (3, 3), (2, 2), (1, 1, 1, 1), True, False),
])
def test_pool2d(op, k, s, p, ceil, incl):
    x = RNG.standard_normal((1, 4, 7, 9)).astype(np.float32)
    attrs = {"kernel": k, "stride": s, "padding": p, "ceil_mode": ceil}
    if op is Op.MAX_POOL2D:
        ref = F.max_pool2d(_t(x), k, s, p[:2], ceil_mode=ceil)
    else:
        attrs["count_include_pad"] = incl
        ref = F.avg_pool2d(_t(x), k, s, p[:2], ceil_mode=ceil, count_include_pad=incl)
    _close(_run(op, [x], attrs), ref)


def test_matmul_linear_sdpa_layer_norm_softmax():
    q = RNG.standard_normal((1, 3, 5, 8)).astype(np.float32)
    k = RNG.standard_normal((1, 3, 6, 8)).astype(np.float32)
    v = RNG.standard_normal((1, 3, 6, 4)).astype(np.float32)
    mask = np.where(RNG.random((1, 1, 1, 6)) > 0.3, 0.0, -1e9).astype(np.float32)
    ref = F.scaled_dot_product_attention(_t(q), _t(k), _t(v), attn_mask=_t(mask))
    _close(_run(Op.SDPA, [q, k, v, mask], {"scale": 8 ** -0.5}), ref)
    ref = F.scaled_dot_product_attention(_t(q), _t(k), _t(v), is_causal=True)
    _close(_run(Op.SDPA, [q, k[:, :, :5], v[:, :, :5]], {"scale": 8 ** -0.5, "causal": True}),
           F.scaled_dot_product_attention(_t(q), _t(k[:, :, :5]), _t(v[:, :, :5]),
                                          is_causal=True))
    del ref
    x = RNG.standard_normal((2, 5, 8)).astype(np.float32)
    w = RNG.standard_normal((6, 8)).astype(np.float32)
    _close(_run(Op.LINEAR, [x], {}, [w]), F.linear(_t(x), _t(w)))
    _close(_run(Op.MATMUL, [x, w.T.copy()], {}), _t(x) @ _t(w.T.copy()))
    g, bb = RNG.standard_normal(8).astype(np.float32), RNG.standard_normal(8).astype(np.float32)
    _close(_run(Op.LAYER_NORM, [x], {"normalized_shape": (8,), "eps": 1e-12}, [g, bb]),
           F.layer_norm(_t(x), (8,), _t(g), _t(bb), 1e-12))
    _close(_run(Op.SOFTMAX, [x], {"axis": 1}), F.softmax(_t(x), 1))


@pytest.mark.parametrize("op, fn", [
    (Op.RELU, F.relu), (Op.SIGMOID, torch.sigmoid), (Op.TANH, torch.tanh),
    (Op.HARDSWISH, F.hardswish), (Op.HARDSIGMOID, F.hardsigmoid), (Op.SILU, F.silu),
    (Op.EXP, torch.exp), (Op.NEG, torch.neg), (Op.ABS, torch.abs),
])
def test_unary(op, fn):
    x = (RNG.standard_normal((3, 17)) * 4).astype(np.float32)
    _close(_run(op, [x], {}), fn(_t(x)))


@pytest.mark.parametrize("approx", ["none", "tanh"])
def test_gelu(approx):
    x = (RNG.standard_normal((3, 17)) * 4).astype(np.float32)
    _close(_run(Op.GELU, [x], {"approximate": approx}), F.gelu(_t(x), approximate=approx))


def test_broadcast_binary_reduce_and_movement():
    a = RNG.standard_normal((2, 1, 4)).astype(np.float32)
    b = RNG.standard_normal((3, 1)).astype(np.float32)
    for op, fn in [(Op.ADD, torch.add), (Op.SUB, torch.sub), (Op.MUL, torch.mul),
                   (Op.DIV, torch.div), (Op.MAXIMUM, torch.maximum)]:
        _close(_run(op, [a, b], {}), fn(_t(a), _t(b)))
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    _close(_run(Op.MEAN, [x], {"axes": (2, 3), "keepdim": True}), _t(x).mean((2, 3), True))
    _close(_run(Op.SUM, [x], {"axes": (-1,)}), _t(x).sum(-1))
    _close(_run(Op.TRANSPOSE, [x], {"perm": (0, 2, 3, 1)}), _t(x).permute(0, 2, 3, 1))
    _close(_run(Op.SLICE, [x], {"axis": 3, "start": 1, "end": 5, "step": 2}), _t(x)[..., 1:5:2])
    _close(_run(Op.PAD, [x], {"pads": (0, 0, 1, 0, 0, 2, 1, 1), "value": 0.5}),
           F.pad(_t(x), (1, 1, 0, 2, 1, 0), value=0.5))
    _close(_run(Op.UPSAMPLE_NEAREST, [x], {"scale": (2, 3)}),
           F.interpolate(_t(x), scale_factor=(2, 3), mode="nearest"))
    _close(_run(Op.CONCAT, [x, x[:, :1].copy()], {"axis": 1}), torch.cat([_t(x), _t(x[:, :1])], 1))


def test_embedding_and_cast():
    table = RNG.standard_normal((10, 4)).astype(np.float32)
    idx = np.array([[1, 9, 0]], np.int64)
    b = GraphBuilder("e")
    ids = b.input("ids", TensorType((1, 3), DType.I64))
    emb = b.add(Op.EMBEDDING, [b.constant(table, "table"), ids])
    _close(run_graph(verify(b.build([emb])), [idx])[0], F.embedding(_t(idx), _t(table)))
    b = GraphBuilder("c")
    x = b.input("x", TensorType((3,), DType.I64))
    y = b.add(Op.CAST, [x], {"dtype": DType.F32})
    out = run_graph(b.build([y]), [np.array([1, 2, 3])])[0]
    assert out.dtype == np.float32 and out.tolist() == [1.0, 2.0, 3.0]
