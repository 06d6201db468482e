"""Synthetic float graphs for the pass tests: a MobileNet-like CNN and a small attention block."""

from __future__ import annotations

import numpy as np

from tessel.ir import DType, Graph, GraphBuilder, Layout, Op, TensorType


def _bn(b: GraphBuilder, x: str, c: int, rng: np.random.Generator) -> str:
    mean = b.constant(rng.normal(size=c).astype(np.float32), "mean")
    var = b.constant(rng.uniform(0.5, 2.0, size=c).astype(np.float32), "var")
    gamma = b.constant(rng.normal(size=c).astype(np.float32), "gamma")
    beta = b.constant(rng.normal(size=c).astype(np.float32), "beta")
    return b.add(Op.BATCH_NORM, (x, mean, var, gamma, beta), {"eps": 1e-5}, name="bn")


def _conv_bn_act(b: GraphBuilder, x: str, cin: int, cout: int, k: int, rng: np.random.Generator,
                 groups: int = 1, stride: int = 1, act: bool = True) -> str:
    w = b.constant(rng.normal(scale=0.3, size=(cout, cin // groups, k, k)).astype(np.float32), "w")
    p = k // 2
    y = b.add(Op.CONV2D, (x, w), {"stride": (stride, stride), "padding": (p, p, p, p),
                                  "groups": groups}, name="conv")
    y = _bn(b, y, cout, rng)
    return b.add(Op.CLAMP, (y,), {"min": 0.0, "max": 6.0}, name="relu6") if act else y


def mobilenet_like(blocks: int = 6, channels: int = 8, size: int = 12, seed: int = 0) -> Graph:
    """Inverted-residual blocks (expand 1x1, depthwise 3x3, project 1x1, residual add), then
    global mean, flatten and a linear head: about 25 nodes per block."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("mobilenet_like")
    x = b.input("x", TensorType((1, 3, size, size), DType.F32, Layout.NCHW))
    y = _conv_bn_act(b, x, 3, channels, 3, rng)
    for _ in range(blocks):
        h = _conv_bn_act(b, y, channels, 2 * channels, 1, rng)
        h = _conv_bn_act(b, h, 2 * channels, 2 * channels, 3, rng, groups=2 * channels)
        h = _conv_bn_act(b, h, 2 * channels, channels, 1, rng, act=False)
        y = b.add(Op.ADD, (y, h), name="residual")
    y = b.add(Op.MEAN, (y,), {"axes": (2, 3), "keepdim": True}, name="pool")
    y = b.add(Op.RESHAPE, (y,), {"shape": (1, channels)}, name="flatten")
    w = b.constant(rng.normal(size=(10, channels)).astype(np.float32), "fc_w")
    bias = b.constant(rng.normal(size=10).astype(np.float32), "fc_b")
    return b.build([b.add(Op.LINEAR, (y, w, bias), name="logits")])


def random_inputs(graph: Graph, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for v in graph.inputs:
        t = v.type
        if t.dtype is DType.F32:
            out.append(rng.normal(size=t.shape).astype(np.float32))
        elif t.dtype is DType.BOOL:
            out.append(rng.random(size=t.shape) < 0.8)
        else:
            out.append(rng.integers(0, 4, size=t.shape).astype(t.dtype.numpy))
    return out


def assert_same_function(before: Graph, after: Graph, seed: int = 0, rtol: float = 1e-5) -> None:
    """run_graph(before) == run_graph(after) within rtol of each output's largest magnitude."""
    from tessel.ir import run_graph
    inputs = random_inputs(before, seed)
    ref, got = run_graph(before, inputs), run_graph(after, inputs)
    assert len(ref) == len(got)
    for r, g in zip(ref, got, strict=True):
        assert r.shape == g.shape and r.dtype == g.dtype
        finite = np.isfinite(r)
        assert np.array_equal(finite, np.isfinite(g)), "non-finite values differ"
        scale = max(1.0, float(np.abs(r[finite]).max(initial=0.0)))
        err = float(np.abs(r[finite] - g[finite]).max(initial=0.0))
        assert err <= rtol * scale, f"max abs error {err:.3g} > {rtol} x {scale:.3g}"


def random_cnn(seed: int) -> Graph:
    """A random NCHW graph mixing layout ops with ops that care (or not) about dim order."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder(f"random_{seed}")
    c = int(rng.integers(2, 5))
    x = b.input("x", TensorType((1, c, 6, 5), DType.F32, Layout.NCHW))
    outputs = []
    for step in range(int(rng.integers(4, 9))):
        x, c = _random_step(b, x, c, rng, step)
        if rng.random() < 0.2:
            outputs.append(x)
    t = b.type_of(x)
    if t.rank == 4:
        outputs.append(b.add(Op.MEAN, (x,), {"axes": (1, 3), "keepdim": bool(rng.integers(2))}))
    outputs.append(x)
    return b.build(list(dict.fromkeys(outputs)))


def _random_step(b: GraphBuilder, x: str, c: int, rng: np.random.Generator, step: int
                 ) -> tuple[str, int]:
    t = b.type_of(x)
    if t.rank != 4:
        return b.add(Op.RELU, (x,)), c
    n, _, h, w = t.shape
    kind = rng.choice(["conv", "dw", "pool", "bn", "chan", "concat", "transpose2", "reshape",
                       "slice", "pad", "softmax", "upsample", "residual"])
    if kind in ("conv", "dw"):
        groups = c if kind == "dw" else 1
        cout = c if kind == "dw" else int(rng.integers(2, 6))
        k = int(rng.integers(1, min(3, h, w) + 1))
        wt = b.constant(rng.normal(size=(cout, c // groups, k, k)).astype(np.float32), "w")
        bias = b.constant(rng.normal(size=cout).astype(np.float32), "b")
        pad = tuple(int(v) for v in rng.integers(0, k, size=4))
        return b.add(Op.CONV2D, (x, wt, bias), {"groups": groups, "padding": pad}), cout
    if kind == "pool" and h >= 2 and w >= 2:
        op = Op.MAX_POOL2D if rng.random() < 0.5 else Op.AVG_POOL2D
        return b.add(op, (x,), {"kernel": (2, 2), "stride": (1, 2)}), c
    if kind == "bn":
        p = [b.constant(rng.uniform(0.5, 2, size=c).astype(np.float32)) for _ in range(4)]
        return b.add(Op.BATCH_NORM, (x, *p)), c
    if kind == "chan":
        k = b.constant(rng.normal(size=(c, 1, 1)).astype(np.float32), "k")
        return b.add(Op.MUL if rng.random() < 0.5 else Op.ADD, (k, x)), c
    if kind == "concat":
        return b.add(Op.CONCAT, (x, b.add(Op.SIGMOID, (x,))), {"axis": 1}), 2 * c
    if kind == "transpose2":  # a round trip through another order, which must cancel
        y = b.add(Op.TRANSPOSE, (x,), {"perm": (0, 2, 3, 1)})
        y = b.add(Op.TANH, (y,))
        return b.add(Op.TRANSPOSE, (y,), {"perm": (0, 3, 1, 2)}), c
    if kind == "reshape":
        y = b.add(Op.RESHAPE, (x,), {"shape": (n, c, h * w)})
        return b.add(Op.RESHAPE, (b.add(Op.NEG, (y,)),), {"shape": (n, c, h, w)}), c
    if kind == "slice" and h > 2:
        return b.add(Op.SLICE, (x,), {"axis": 2, "start": 1, "end": h, "step": 2}), c
    if kind == "pad":
        return b.add(Op.PAD, (x,), {"pads": (0, 0, 0, 1, 1, 0, 0, 2)}), c + 1
    if kind == "softmax":
        return b.add(Op.SOFTMAX, (x,), {"axis": 1}), c
    if kind == "upsample":
        return b.add(Op.UPSAMPLE_NEAREST, (x,), {"scale": (2, 1)}), c
    return b.add(Op.ADD, (x, b.add(Op.RELU, (x,)))), c


def attention_block(seq: int = 5, dim: int = 8, heads: int = 2, seed: int = 0) -> Graph:
    """A ViT-like block: patch-embedding conv, tokens, layer norm, multi-head sdpa, MLP."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("attention_block")
    img = b.input("img", TensorType((1, 3, 2 * seq, 2), DType.F32, Layout.NCHW))
    w = b.constant(rng.normal(size=(dim, 3, 2, 2)).astype(np.float32), "patch_w")
    e = b.add(Op.CONV2D, (img, w), {"stride": (2, 2)}, name="patch")
    tok = b.add(Op.RESHAPE, (e,), {"shape": (1, dim, seq)})
    tok = b.add(Op.TRANSPOSE, (tok,), {"perm": (0, 2, 1)}, name="tokens")
    x = b.add(Op.LAYER_NORM, (tok,), {"normalized_shape": (dim,)}, name="ln")
    hd = dim // heads
    qkv = []
    for name in ("q", "k", "v"):
        wq = b.constant(rng.normal(size=(dim, dim)).astype(np.float32) / dim ** 0.5, f"{name}_w")
        y = b.add(Op.LINEAR, (x, wq), name=name)
        y = b.add(Op.RESHAPE, (y,), {"shape": (1, seq, heads, hd)})
        qkv.append(b.add(Op.TRANSPOSE, (y,), {"perm": (0, 2, 1, 3)}))
    a = b.add(Op.SDPA, tuple(qkv), {"scale": hd ** -0.5, "causal": True}, name="attn")
    a = b.add(Op.TRANSPOSE, (a,), {"perm": (0, 2, 1, 3)})
    a = b.add(Op.RESHAPE, (a,), {"shape": (1, seq, dim)})
    x = b.add(Op.ADD, (tok, a), name="res")
    w1 = b.constant(rng.normal(size=(2 * dim, dim)).astype(np.float32), "fc1_w")
    h = b.add(Op.GELU, (b.add(Op.LINEAR, (x, w1)),))
    w2 = b.constant(rng.normal(size=(dim, 2 * dim)).astype(np.float32), "fc2_w")
    return b.build([b.add(Op.ADD, (x, b.add(Op.LINEAR, (h, w2))), name="out")])
