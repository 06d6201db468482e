"""Seeded random integer models (NHWC, int8) built from the NPU's ops: convolutions of every
kind, pools, residual adds, multiplies, concats, LUTs, requantisation, data movement, a mean
and a linear head; about one conv / linear layer in four has int4 weights; with `weights=True`
about two in three whose input channels per group are a multiple of four are exactly 2:4 along
them (weight_features.mask_2_4), small or extreme weights now and then, about one conv in
seven four or eight times as wide, conv1d kernels of up to 31 taps and strides up to 17 now
and then, and about two element-wise ops in five read and / or write
int16 (requantised to and from int8 around them); with `mac16=True` about two in five ordinary
or grouped convs and linear heads read int16 (symmetric, int64 bias: the wide accumulator).
Each model is a valid integer Graph IR the golden model defines."""

from __future__ import annotations

import numpy as np
from weight_features import MAC16, MASK, WIDE, mask_2_4, stream

from tessel.ir import DType, Graph, GraphBuilder, Layout, Op, QuantParams, TensorType, verify
from tessel.isa import fixedpoint as fp

I8, I16 = DType.I8, DType.I16
RANGE = {I8: (-128, 127), I16: (-32768, 32767)}


class _Net:
    def __init__(self, seed: int, extended: bool = True, weights: bool = False,
                 mac16: bool = False):
        self.rng = np.random.default_rng(seed)
        # a stream of its own: the int4 choices leave every other draw of a seed as it was
        self.int4 = np.random.default_rng([seed, 4])
        self.sparse = stream(seed, MASK) if weights else None  # 2:4 masks: their own too
        self.wide = stream(seed, WIDE) if weights else None  # int16 element-wise ops
        self.mac16 = stream(seed, MAC16) if mac16 else None  # int16 MAC inputs
        self.extended = extended
        self.b = GraphBuilder(f"random{seed}")
        self.zp: dict[str, int] = {}

    def zero_point(self) -> int:
        return int(self.rng.integers(-20, 21))

    def mult(self, lo: float, hi: float, n: int | None = None):
        reals = self.rng.uniform(lo, hi, 1 if n is None else n)
        q, s = fp.quantize_multipliers(reals)
        if n is None:
            return int(q[0]), int(s[0])
        return self.b.constant(q.astype(np.int32), "mult"), self.b.constant(
            s.astype(np.int32), "shift")

    def add(self, op: Op, inputs, attrs, out_zp: int) -> str:
        name = self.b.add(op, inputs, attrs)
        t = self.b.type_of(name)
        self.b._types[name] = TensorType(t.shape, t.dtype, t.layout,
                                         QuantParams((0.05,), (out_zp,)))
        self.zp[name] = out_zp
        return name

    def shape(self, x: str) -> tuple[int, ...]:
        return self.b.type_of(x).shape

    def weights(self, w: np.ndarray, name: str) -> str:
        """A weight constant: int8 `w`, or (one in four) int4 weights (its high half); with
        the weight features drawn, `edge_weights(w)`."""
        if self.sparse is not None:
            w = self.edge_weights(w)
        if self.int4.random() < 0.25:
            return self.b.constant(w >> 4, name, type_=TensorType(w.shape, DType.I4))
        return self.b.constant(w, name)

    def edge_weights(self, w: np.ndarray) -> np.ndarray:
        """(one in three) small weights, (two in three, where the input channels allow) an
        exact 2:4 mask, and (one in eight) some weights at the int8 extremes -128 / 127
        (int4: -8 / 7)."""
        r = self.sparse
        if r.random() < 0.35:  # small weights, as trained ones mostly are: the codes compress
            w = np.round(w * (r.random(w.shape) ** 2 * r.uniform(0.05, 0.5))).astype(np.int8)
        if w.shape[-1] % 4 == 0 and r.random() < 0.67:
            w = mask_2_4(r, w)
        if r.random() < 0.125:
            at = (w != 0) & (r.random(w.shape) < 0.3)
            w = np.where(at, np.where(r.random(w.shape) < 0.5, -128, 127), w).astype(np.int8)
        return w

    def widened(self, cout: int) -> int:
        """`cout`, or with the weight features drawn (one in seven) four or eight times it:
        layers whose weights take several loads (and streams) per layer."""
        if self.sparse is None or self.sparse.random() >= 1 / 7:
            return cout
        return cout * int(self.sparse.choice([4, 8]))

    def long_kernel(self, k: int, dil: int) -> tuple[int, int]:
        """(k, dil), or with the weight features drawn (one in eight) a kernel of 9-31 taps:
        CONVs of accumulating blocks past the kernel field, padding past its field."""
        if self.sparse is None or self.sparse.random() >= 1 / 8:
            return k, dil
        return int(self.sparse.choice([9, 16, 17, 31])), int(self.sparse.choice([1, 1, 2]))

    def long_stride(self, stride: int) -> int:
        """`stride`, or with the weight features drawn (one in ten) 3, 16 or 17: strides past
        the stride field run as sums of polyphase convs."""
        if self.sparse is None or self.sparse.random() >= 0.1:
            return stride
        return int(self.sparse.choice([3, 16, 17]))

    # ---- ops
    def conv(self, x: str, same: bool = False) -> str:
        """A random conv; with same=True one that keeps the shape (a residual branch)."""
        _, h, w, c = self.shape(x)
        if h == 1:
            return self.conv1d(x, same)
        r = self.rng
        kind = "same" if same else r.choice(["plain", "dw", "grouped", "pointwise"])
        k = 1 if kind in ("pointwise", "same") else int(r.choice([1, 3, 5]))
        stride = int(r.choice([1, 1, 2])) if min(h, w) > 4 else 1
        dil = int(r.choice([1, 1, 2])) if k > 1 and min(h, w) > 2 * k else 1
        pad = tuple(int(p) for p in r.integers(0, (k // 2) * dil + 1, 4))
        eff = dil * (k - 1) + 1
        if h + pad[0] + pad[2] < eff or w + pad[1] + pad[3] < eff:
            lo = (eff - 1) // 2
            pad = (lo, lo, eff - 1 - lo, eff - 1 - lo)
        groups, cout = 1, self.widened(int(r.integers(4, 33)))
        if kind == "same":
            k, stride, dil, pad, cout = 3, 1, 1, (1, 1, 1, 1), c
        if kind == "dw":
            groups, cout = c, c
        elif kind == "grouped" and c % 2 == 0:
            groups, cout = 2, 2 * int(r.integers(2, 12))
        w_ = r.integers(-127, 128, (cout, k, k, c // groups)).astype(np.int8)
        fan = k * k * c // groups
        m, s = self.mult(0.3 / (fan * 127), 3.0 / (fan * 127), cout)
        bias = self.b.constant(r.integers(-3000, 3000, cout).astype(np.int32), "bias")
        out_zp = self.zero_point()
        relu = bool(r.integers(0, 2))
        if kind != "dw" and self.mac16 is not None and self.mac16.random() < 0.4:
            x, m, s, bias = self.int16_input(x, fan, cout)
        return self.add(Op.QCONV2D, [x, self.weights(w_, "w"), bias, m, s], dict(
            stride=(stride, stride), padding=pad, dilation=(dil, dil), groups=groups,
            layout=Layout.NHWC, in_zp=self.zp[x], out_zp=out_zp,
            act_min=out_zp if relu else -128, act_max=127, dtype=I8), out_zp)

    def conv1d(self, x: str, same: bool = False) -> str:
        """A conv over a [N, 1, L, C] signal (conv1d as the frontend lowers it): kernel 1 x k,
        dilated, grouped or depthwise, causal (left) or symmetric padding."""
        _, _, w, c = self.shape(x)
        r = self.rng
        k = 3 if same else int(r.choice([1, 3, 5, 7]))
        dil = 1 if same else int(r.choice([1, 2, 4, 8]))
        k, dil = (k, dil) if same else self.long_kernel(k, dil)
        eff = dil * (k - 1)
        pad = (0, eff, 0, 0) if same or r.integers(0, 2) else (0, eff // 2, 0, eff - eff // 2)
        stride = 1 if same else self.long_stride(int(r.choice([1, 1, 2])))
        groups, cout = 1, c if same else self.widened(int(r.integers(4, 33)))
        kind = "same" if same else r.choice(["plain", "dw", "grouped"])
        if kind == "dw":
            groups, cout = c, c
        elif kind == "grouped" and c % 2 == 0:
            groups, cout = 2, 2 * int(r.integers(2, 12))
        w_ = r.integers(-127, 128, (cout, 1, k, c // groups)).astype(np.int8)
        fan = k * c // groups
        m, s = self.mult(0.3 / (fan * 127), 3.0 / (fan * 127), cout)
        bias = self.b.constant(r.integers(-3000, 3000, cout).astype(np.int32), "bias")
        out_zp = self.zero_point()
        return self.add(Op.QCONV2D, [x, self.weights(w_, "w"), bias, m, s], dict(
            stride=(1, stride), padding=pad, dilation=(1, dil), groups=groups,
            layout=Layout.NHWC, in_zp=self.zp[x], out_zp=out_zp, act_min=-128, act_max=127,
            dtype=I8), out_zp)

    def pool(self, x: str) -> str:
        _, h, w, _ = self.shape(x)
        if self.extended and self.rng.integers(0, 4) == 0:
            return self.large_pool(x)
        k = int(self.rng.choice([2, 3])) if min(h, w) >= 3 else 1
        s = int(self.rng.choice([1, 2]))
        p = int(self.rng.integers(0, k // 2 + 1))
        kh = 1 if h == 1 else k
        attrs = dict(kernel=(kh, k), stride=(s, s), padding=(min(p, kh // 2), p) * 2,
                     layout=Layout.NHWC)
        if self.rng.integers(0, 2):
            return self.add(Op.MAX_POOL2D, [x], {**attrs, "dilation": (1, 1)}, self.zp[x])
        return self.add(Op.QAVG_POOL2D, [x], {**attrs,
                                               "act_min": -128, "act_max": 127}, self.zp[x])

    def large_pool(self, x: str) -> str:
        """A pool whose window is the whole map (global) or most of it, unpadded."""
        _, h, w, _ = self.shape(x)
        kh, kw = (h, w) if self.rng.integers(0, 2) else (max(1, h - 1), max(1, w - 1))
        attrs = dict(kernel=(kh, kw), stride=(1, 1), padding=(0,) * 4, layout=Layout.NHWC)
        if self.rng.integers(0, 2):
            return self.add(Op.MAX_POOL2D, [x], {**attrs, "dilation": (1, 1)}, self.zp[x])
        return self.add(Op.QAVG_POOL2D, [x], {**attrs, "act_min": -128, "act_max": 127},
                        self.zp[x])

    def const_operand(self, x: str) -> str:
        """add / mul with a rank-0 or a broadcast ([1, 1, 1, C] or [1, 1, W, 1]) constant."""
        _, _, w, c = self.shape(x)
        shape = [(), (1, 1, 1, c), (1, 1, w, 1)][int(self.rng.integers(0, 3))]
        k = self.b.constant(self.rng.integers(-100, 101, shape).astype(np.int8), "k")
        self.zp[k] = 0
        op = Op.QMUL if self.rng.integers(0, 2) else Op.QADD
        return self.eltwise(x, k, op)

    def cat_chain(self, x: str) -> str:
        """concat of 2-3 same-shaped values, then possibly a concat of that with x again."""
        parts = [x] + [self.unary(x) for _ in range(int(self.rng.integers(1, 3)))]
        y = self.add(Op.CONCAT, parts, dict(axis=3), self.zp[x])
        if self.rng.integers(0, 2):
            y = self.add(Op.CONCAT, [y, x], dict(axis=3), self.zp[x])
        return y

    def eltwise(self, a: str, b: str, op: Op) -> str:
        out_zp = self.zero_point()
        if op is Op.QMUL:
            m, s = self.mult(0.002, 0.02)
            attrs = dict(a_zp=self.zp[a], b_zp=self.zp[b], out_multiplier=m, out_shift=s)
        else:
            am, ash = self.mult(0.2, 0.5)
            bm, bsh = self.mult(0.2, 0.5)
            om, osh = self.mult(0.5 / 2 ** 20, 2.0 / 2 ** 20)
            attrs = dict(a_zp=self.zp[a], b_zp=self.zp[b], left_shift=20, a_multiplier=am,
                         a_shift=ash, b_multiplier=bm, b_shift=bsh, out_multiplier=om,
                         out_shift=osh)
        if self.wide is not None and self.wide.random() < 0.4:
            return self.wide_eltwise(a, b, op)
        return self.add(op, [a, b], {**attrs, "out_zp": out_zp, "act_min": -128,
                                     "act_max": 127, "dtype": I8}, out_zp)

    # ---- int16 MAC inputs (mac16=True: the draws of a stream of their own)
    def int16_input(self, x: str, fan: int, cout: int) -> tuple[str, str, str, str]:
        """x requantised to int16 (zero point 0, about 200x its int8 values), with the
        multipliers, shifts and int64 bias of a MAC over it of `fan` products per output."""
        r = self.mac16
        q, s = fp.quantize_multipliers(np.array([200.0 * r.uniform(0.5, 2.0)]))
        x16 = self.add(Op.REQUANTIZE, [x], dict(in_zp=self.zp[x], multiplier=int(q[0]),
                                                shift=int(s[0]), out_zp=0, act_min=-32768,
                                                act_max=32767, dtype=I16), 0)
        mq, ms = fp.quantize_multipliers(r.uniform(0.3, 3.0, cout) / (fan * 127 * 200))
        bias = r.integers(-3000 * 200, 3000 * 200, cout).astype(np.int64)
        return (x16, self.b.constant(mq.astype(np.int32), "mult"),
                self.b.constant(ms.astype(np.int32), "shift"), self.b.constant(bias, "bias"))

    # ---- int16 (weights=True: the draws of a stream of their own)
    def requantize(self, x: str, dtype: DType, real: float) -> str:
        """x requantised to `dtype` by about `real` (zero point 0, or now and then not)."""
        r = self.wide
        q, s = fp.quantize_multipliers(np.array([real * r.uniform(0.5, 2.0)]))
        zp = 0 if r.random() < 0.85 else int(r.integers(-20, 21)) * (1 if dtype is I8 else 16)
        lo, hi = RANGE[dtype]
        return self.add(Op.REQUANTIZE, [x], dict(in_zp=self.zp[x], multiplier=int(q[0]),
                                                 shift=int(s[0]), out_zp=zp, act_min=lo,
                                                 act_max=hi, dtype=dtype), zp)

    def wide_eltwise(self, a: str, b: str, op: Op) -> str:
        """add / sub / mul with int16 operands and / or output (an int16 output requantised
        back to int8 for the ops after it), now and then with single rounding (TOSA's) or a
        fused ReLU: the vector engine's int16 ELTWISE."""
        r = self.wide
        wa, wb, wout = (bool(v < 0.6) for v in r.random(3))
        if not (wa or wb or wout):
            wout = True
        a = self.requantize(a, I16, 200.0) if wa else a
        b = self.requantize(b, I16, 200.0) if wb else b
        mag = [32768.0 if self.b.type_of(v).dtype is I16 else 128.0 for v in (a, b)]
        dtype = I16 if wout else I8
        target = RANGE[dtype][1]
        if op is Op.QMUL:
            om = target / (mag[0] * mag[1]) * r.uniform(0.5, 4.0)
            attrs = dict(a_zp=self.zp[a], b_zp=self.zp[b])
        else:
            shift = 15 if I16 in (self.b.type_of(a).dtype, self.b.type_of(b).dtype, dtype) \
                else 20
            ra, rb = r.uniform(0.2, 0.5, 2)
            (am, bm), (ash, bsh) = fp.quantize_multipliers(np.array([ra, rb]))
            om = target / ((mag[0] * ra + mag[1] * rb) * 2 ** shift) * r.uniform(0.5, 4.0)
            attrs = dict(a_zp=self.zp[a], b_zp=self.zp[b], left_shift=shift,
                         a_multiplier=int(am), a_shift=int(ash), b_multiplier=int(bm),
                         b_shift=int(bsh))
        (q,), (s,) = fp.quantize_multipliers(np.array([om]))
        out_zp = 0 if r.random() < 0.85 or not wout else int(r.integers(-300, 301))
        lo, hi = RANGE[dtype]
        extra = {"rounding": int(fp.Rounding.SINGLE)} if r.random() < 0.2 else {}
        if r.random() < 0.2:  # a fused ReLU
            lo = out_zp
        y = self.add(op, [a, b], {**attrs, "out_multiplier": int(q), "out_shift": int(s),
                                  "out_zp": out_zp, "act_min": lo, "act_max": hi,
                                  "dtype": dtype, **extra}, out_zp)
        return self.requantize(y, I8, 1 / 256) if wout else y

    def unary(self, x: str) -> str:
        if self.rng.integers(0, 2):
            table = self.rng.integers(-128, 128, 256).astype(np.int8)
            return self.add(Op.LUT, [x, self.b.constant(np.sort(table), "table")], {}, 0)
        m, s = self.mult(0.5, 2.0)
        out_zp = self.zero_point()
        return self.add(Op.REQUANTIZE, [x], dict(in_zp=self.zp[x], multiplier=m, shift=s,
                                                 out_zp=out_zp, act_min=-128, act_max=127,
                                                 dtype=I8), out_zp)

    def movement(self, x: str) -> str:
        _, h, w, c = self.shape(x)
        kind = self.rng.choice(["pad", "slice", "upsample", "transpose"])
        if kind == "pad":
            pads = (0, 0, *[int(v) for v in self.rng.integers(0, 3, 4)], 0, 0)
            return self.add(Op.PAD, [x], dict(pads=pads, value=float(self.zp[x])), self.zp[x])
        if kind == "slice" and c > 2:
            return self.add(Op.SLICE, [x], dict(axis=3, start=1, end=c, step=1), self.zp[x])
        if kind == "upsample" and h * w <= 256:
            return self.add(Op.UPSAMPLE_NEAREST, [x], dict(scale=(2, 2), layout=Layout.NHWC),
                            self.zp[x])
        return self.add(Op.TRANSPOSE, [x], dict(perm=(0, 2, 1, 3)), self.zp[x])  # swap H, W


def _input_shape(net: _Net) -> tuple[int, int, int, int]:
    r = net.rng
    if not net.extended:
        return 1, int(r.integers(4, 17)), int(r.integers(4, 17)), int(r.integers(1, 17))
    n = 1 if r.integers(0, 2) else int(r.integers(2, 9))
    c = int(r.integers(1, 17))
    if r.integers(0, 6) == 0:  # a 1-D signal [N, 1, L, C]: conv1d
        return n, 1, int(r.integers(8, 49)), c
    hi = 17 if n == 1 else 11
    return n, int(r.integers(4, hi)), int(r.integers(4, hi)), c


def random_model(seed: int, *, extended: bool = True, host_outputs: bool | None = None,
                 weights: bool = False, mac16: bool = False) -> Graph:
    """A random int8 NHWC network; graph input and outputs are int8 tensors.

    extended: batch 1-8, 1-D signals (conv1d), rank-0 / broadcast constants, cat chains,
    large pooling windows and extra outputs taken from inside the network (False: the
    original generator, batch 1, one output). host_outputs: the graph input is an output too
    (the partitioner passes graph inputs through to the outputs); None: every fifth seed of the
    extended generator. weights: the weight features (module docstring; drawn from streams of
    their own, so weights=False models are those of the generator without them). mac16: int16
    inputs to some convs and linear heads (a stream of its own too)."""
    if host_outputs is None:
        host_outputs = extended and seed % 5 == 0
    net = _Net(seed, extended, weights, mac16)
    r = net.rng
    n, h, w, c = _input_shape(net)
    x = net.b.input("x", TensorType((n, h, w, c), I8, Layout.NHWC, QuantParams((0.05,), (3,))))
    net.zp[x] = 3
    outputs = [x] if host_outputs else []
    kinds = ["conv", "conv", "residual", "concat", "pool", "unary", "mul", "move"]
    if extended:
        kinds += ["const", "cat_chain"]
    for _ in range(int(r.integers(2, 7))):
        x = _step(net, x, str(r.choice(kinds)))
        if extended and r.integers(0, 8) == 0 and x not in outputs:
            outputs.append(x)  # an intermediate value is an output as well
    return verify(net.b.build(outputs + [_head(net, x)]))


def _step(net: _Net, x: str, kind: str) -> str:
    r = net.rng
    if kind == "conv":
        return net.conv(x)
    if kind == "residual":
        y = net.conv(x, same=True)
        return net.eltwise(x, y, Op.QADD if r.integers(0, 2) else Op.QSUB)
    if kind == "concat":
        y = net.conv(x)
        if net.shape(y)[:3] == net.shape(x)[:3]:
            return net.add(Op.CONCAT, [x, y], dict(axis=3), net.zp[x])
        return y
    if kind == "pool":
        return net.pool(x)
    if kind == "unary":
        return net.unary(x)
    if kind == "mul":
        return net.eltwise(x, x, Op.QMUL)
    if kind == "const":
        return net.const_operand(x)
    if kind == "cat_chain":
        return net.cat_chain(x)
    return net.movement(x)


def _head(net: _Net, x: str) -> str:
    """Global mean over H, W then a linear layer (the classifier of a CNN)."""
    _, h, w, c = net.shape(x)
    m, s = net.mult(0.5 / (h * w), 1.5 / (h * w))
    pooled = net.add(Op.QMEAN, [x], dict(axes=(1, 2), keepdim=False, in_zp=net.zp[x],
                                         multiplier=m, shift=s, out_zp=0, act_min=-128,
                                         act_max=127, dtype=I8), 0)
    n = int(net.rng.integers(2, 11))
    wt = net.rng.integers(-127, 128, (n, c)).astype(np.int8)
    mm, ss = net.mult(0.3 / (c * 127), 3.0 / (c * 127), n)
    bias = net.b.constant(net.rng.integers(-500, 500, n).astype(np.int32), "fc_bias")
    if net.mac16 is not None and net.mac16.random() < 0.4:
        pooled, mm, ss, bias = net.int16_input(pooled, c, n)
    return net.add(Op.QLINEAR, [pooled, net.weights(wt, "fc_w"), bias, mm, ss], dict(
        in_zp=0, out_zp=-10, act_min=-128, act_max=127, dtype=I8), -10)
