"""Seeded random float PyTorch models of the shapes users build and the other generators do not
(random_models.py, random_mixed_models.py, random_torch_models.py): each seed draws one model of
a family, its example inputs, calibration samples and a QuantConfig.

* `transformer`: a Hugging Face BERT, DistilBERT, GPT-2 or ViT built from its config with random
  weights (nothing downloaded), at odd sizes: heads of 8, 12 or 20 dimensions (hidden sizes not a
  multiple of the matrix array), 1-2 layers, odd intermediate sizes, sequences of 1 to 13 tokens,
  attention masks with padding (or none), ViT images of odd patch grids; outputs the last hidden
  state and now and then the pooler's output or an earlier hidden state.
* `recurrent`: GRU / LSTM layers (1-2 layers, uni- or bidirectional, batch first or not) and
  GRUCell / LSTMCell stepped in Python, 1-7 time steps, odd widths; outputs the sequence, the last
  step, the final states.
* `vision`: a random chain on [1, C, H, W] of conv-transpose (strides 2-3, output padding,
  groups), depthwise convs with dilation 2-3, max / avg pooling with ceil_mode, concat of
  branches of different scales, residual adds with broadcasting operands (per-channel,
  per-row, a second input), slices and strided slices, constant pads, means over any axes;
  1-2 inputs, intermediate tensors and constants as outputs; now and then int16 activations for
  element-wise ops set by a LayerOverride by op or by module.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from tessel.quant.config import ActDtype, LayerOverride, OpKind, QuantConfig

FAMILIES = ("transformer", "recurrent", "vision")
VOCAB = 97


def random_user_model(seed: int, family: str):
    """(model in eval mode, example inputs, calibration samples, QuantConfig or None) for `seed`."""
    rng = np.random.default_rng([seed, FAMILIES.index(family)])
    torch.manual_seed(seed)
    model, make = {"transformer": _transformer, "recurrent": _recurrent,
                   "vision": _vision}[family](rng)
    model.eval()
    example = make(seed)
    calib = [make(1000 * seed + k) for k in range(1, 4)]
    return model, example, calib, _quant_config(rng, family)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------
# transformers


class _HF(nn.Module):
    """A Hugging Face model's tensors as a tuple: the last hidden state, and (drawn) the pooler's
    output and / or the first hidden state."""

    def __init__(self, model: nn.Module, pooler: bool, hidden: bool, masked: bool, pixels: bool):
        super().__init__()
        self.model, self.pooler, self.hidden, self.masked = model, pooler, hidden, masked
        self.pixels = pixels

    def forward(self, x, mask=None):
        if self.pixels:
            out = self.model(pixel_values=x, output_hidden_states=self.hidden)
        else:
            kw = {"attention_mask": mask} if self.masked else {}
            out = self.model(input_ids=x, output_hidden_states=self.hidden, **kw)
        res = [out.last_hidden_state]
        if self.pooler:
            res.append(out.pooler_output)
        if self.hidden:
            res.append(out.hidden_states[1])
        return tuple(res) if len(res) > 1 else res[0]


def _transformer(rng: np.random.Generator):
    import transformers as tf

    kind = str(rng.choice(["bert", "distilbert", "gpt2", "vit"]))
    head = int(rng.choice([8, 12, 20]))
    heads = int(rng.integers(1, 4))
    hid = head * heads
    layers = int(rng.integers(1, 3))
    inter = int(rng.choice([hid * 2, hid * 4, hid * 2 + 3, 37]))
    seq = int(rng.choice([1, 2, 3, 5, 7, 12, 13]))
    act = str(rng.choice(["gelu", "relu", "gelu_new"]))
    common = {"attn_implementation": str(rng.choice(["eager", "sdpa"]))}
    pooler = bool(rng.random() < 0.3)
    hidden = bool(rng.random() < 0.2)
    masked = bool(rng.random() < 0.6) and kind != "vit"
    if kind == "bert":
        model = tf.BertModel(tf.BertConfig(
            vocab_size=VOCAB, hidden_size=hid, num_hidden_layers=layers, num_attention_heads=heads,
            intermediate_size=inter, max_position_embeddings=32, hidden_act=act, **common),
            add_pooling_layer=pooler)
    elif kind == "distilbert":
        pooler = False
        model = tf.DistilBertModel(tf.DistilBertConfig(
            vocab_size=VOCAB, dim=hid, n_layers=layers, n_heads=heads, hidden_dim=inter,
            max_position_embeddings=32, activation="gelu" if act != "relu" else "relu", **common))
    elif kind == "gpt2":
        pooler = False
        model = tf.GPT2Model(tf.GPT2Config(
            vocab_size=VOCAB, n_embd=hid, n_layer=layers, n_head=heads, n_inner=inter,
            n_positions=32, activation_function=act, **common))
    else:
        patch = int(rng.choice([2, 3, 4]))
        grid = int(rng.integers(1, 4))
        chans = int(rng.choice([1, 3]))
        model = tf.ViTModel(tf.ViTConfig(
            hidden_size=hid, num_hidden_layers=layers, num_attention_heads=heads,
            intermediate_size=inter, image_size=patch * grid, patch_size=patch,
            num_channels=chans, hidden_act=act, **common), add_pooling_layer=pooler)
        wrapped = _HF(model, pooler, hidden, False, True)
        return wrapped, lambda s: (torch.randn(1, chans, patch * grid, patch * grid,
                                               generator=_gen(s)),)
    wrapped = _HF(model, pooler, hidden, masked, False)
    pad = int(rng.integers(0, seq)) if masked else 0

    def make(s: int):
        ids = torch.randint(0, VOCAB, (1, seq), generator=_gen(s))
        if not masked:
            return (ids,)
        mask = torch.ones(1, seq, dtype=torch.long)
        if pad:
            mask[0, seq - pad:] = 0
        return ids, mask
    return wrapped, make


# ---------------------------------------------------------------------------------------------
# recurrent layers and cells


class _Recurrent(nn.Module):
    def __init__(self, rng: np.random.Generator, feat: int):
        super().__init__()
        self.kind = str(rng.choice(["gru", "lstm", "gru_cell", "lstm_cell"]))
        self.hid = int(rng.choice([5, 8, 13, 16, 24]))
        self.batch_first = bool(rng.random() < 0.7)
        self.bidir = bool(rng.random() < 0.3)
        self.out = str(rng.choice(["seq", "last", "state"]))
        if self.kind in ("gru", "lstm"):
            rnn = nn.GRU if self.kind == "gru" else nn.LSTM
            self.rnn = rnn(feat, self.hid, num_layers=int(rng.integers(1, 3)),
                           batch_first=self.batch_first, bidirectional=self.bidir)
        else:
            self.rnn = (nn.GRUCell if self.kind == "gru_cell" else nn.LSTMCell)(feat, self.hid)
        both = self.bidir and self.kind in ("gru", "lstm") and self.out != "state"
        width = self.hid * (2 if both else 1)
        self.head = nn.Linear(width, int(rng.integers(2, 12))) if rng.random() < 0.7 else None

    def forward(self, x):  # x: [1, T, F]
        if self.kind in ("gru", "lstm"):
            seq, state = self.rnn(x if self.batch_first else x.transpose(0, 1))
            seq = seq if self.batch_first else seq.transpose(0, 1)
            h = state[0] if self.kind == "lstm" else state
            y = {"seq": seq, "last": seq[:, -1], "state": h[-1]}[self.out]
        else:
            h = c = torch.zeros(1, self.hid)
            steps = []
            for t in range(x.shape[1]):
                if self.kind == "gru_cell":
                    h = self.rnn(x[:, t], h)
                else:
                    h, c = self.rnn(x[:, t], (h, c))
                steps.append(h)
            y = {"seq": torch.stack(steps, 1), "last": h, "state": c}[self.out]
        return self.head(y) if self.head is not None else y


def _recurrent(rng: np.random.Generator):
    frames = int(rng.integers(1, 8))
    feat = int(rng.choice([3, 7, 10, 16]))
    model = _Recurrent(rng, feat)
    scale = float(rng.choice([0.3, 1.0]))
    return model, lambda s: (torch.cumsum(torch.randn(1, frames, feat, generator=_gen(s)), 1)
                             * scale,)


# ---------------------------------------------------------------------------------------------
# vision chains


class _Vision(nn.Module):
    """A chain of steps on [1, C, H, W]; `plan` is a list of (kind, args); modules are
    `layers.<k>` (so a LayerOverride can name them)."""

    def __init__(self, rng: np.random.Generator, c: int, size: int, two_inputs: bool):
        super().__init__()
        self.plan, layers = [], []
        self.two_inputs = two_inputs
        self.register_buffer("const", torch.linspace(-1.0, 1.0, 6).reshape(1, 6))
        h = w = size
        for _ in range(int(rng.integers(2, 7))):
            kind, args, mod, c, h, w = _vision_step(rng, c, h, w, two_inputs)
            self.plan.append((kind, args, len(layers) if mod is not None else -1))
            if mod is not None:
                layers.append(mod)
        self.layers = nn.ModuleList(layers)
        self.taps = sorted({int(k) for k in rng.integers(0, len(self.plan), 2)}
                           if rng.random() < 0.4 else set())
        self.const_out = bool(rng.random() < 0.15)
        self.head_mean = bool(rng.random() < 0.5)

    def forward(self, x, x2=None):
        outs = []
        for k, (kind, args, m) in enumerate(self.plan):
            x = _vision_apply(kind, args, self.layers[m] if m >= 0 else None, x, x2)
            if k in self.taps and k != len(self.plan) - 1:
                outs.append(x)
        outs.insert(0, x.mean((2, 3)) if self.head_mean and x.shape[2] * x.shape[3] > 1 else x)
        if self.const_out:
            outs.append(self.const)
        return tuple(outs) if len(outs) > 1 else outs[0]


def _vision_step(rng, c, h, w, two_inputs):
    kinds = ["convT", "dw_dil", "pool_ceil", "cat_scales", "add_bcast", "slice", "pad", "mean",
             "mul_bcast", "eltwise_chain"]
    if two_inputs:
        kinds.append("add_input")
    kind = str(rng.choice(kinds))
    if kind == "convT" and h <= 12 and w <= 12:
        s = int(rng.choice([2, 3]))
        k = int(rng.choice([s, s + 1, 3]))
        p = int(rng.integers(0, k // 2 + 1))
        op = int(rng.integers(0, s))
        groups = int(rng.choice([1, c])) if c > 1 and rng.random() < 0.25 else 1
        cout = c * int(rng.integers(1, 3)) if groups > 1 else int(rng.integers(2, 12))
        mod = nn.ConvTranspose2d(c, cout, k, stride=s, padding=p, output_padding=op,
                                 groups=groups)
        h2, w2 = ((d - 1) * s - 2 * p + k + op for d in (h, w))
        if h2 >= 1 and w2 >= 1:
            return kind, (), mod, cout, h2, w2
    if kind == "dw_dil" or kind == "convT":
        d = int(rng.choice([2, 3]))
        mod = nn.Conv2d(c, c, 3, padding=d if rng.random() < 0.7 else 0, dilation=d, groups=c)
        h2, w2 = ((x + 2 * mod.padding[0] - 2 * d) for x in (h, w))
        if h2 >= 1 and w2 >= 1:
            return "dw_dil", (), nn.Sequential(mod, nn.ReLU6()), c, h2, w2
        kind = "pool_ceil"
    if kind == "pool_ceil":
        k = int(rng.choice([2, 3]))
        s = int(rng.choice([2, 3]))
        p = int(rng.integers(0, k // 2 + 1))
        if h + 2 * p >= k and w + 2 * p >= k:
            avg = bool(rng.random() < 0.5)
            ceil = bool(rng.random() < 0.8)
            cip = bool(rng.random() < 0.5)
            h2, w2 = (_pool_out(x, k, s, p, ceil) for x in (h, w))
            return kind, (k, s, p, ceil, avg, cip), None, c, h2, w2
        kind = "cat_scales"
    if kind == "cat_scales":
        scale = float(rng.choice([0.125, 4.0, 30.0]))
        mod = nn.Conv2d(c, int(rng.integers(1, 6)), 1)
        return kind, (scale,), mod, c + mod.out_channels, h, w
    if kind in ("add_bcast", "mul_bcast"):
        shape = [(1, c, 1, 1), (1, 1, h, 1), (1, 1, 1, w), (1, 1, h, w), (1, c, h, 1)][
            int(rng.integers(0, 5))]
        mod = _Const(torch.randn(shape) * float(rng.choice([0.1, 1.0, 5.0])))
        return kind, (), mod, c, h, w
    if kind == "add_input":
        return kind, (), nn.Conv2d(3, c, 1), c, h, w
    if kind == "slice" and (h > 2 or w > 2):
        axis = 2 if h > 2 and (w <= 2 or rng.random() < 0.5) else 3
        n = h if axis == 2 else w
        start = int(rng.integers(0, 2))
        step = int(rng.choice([1, 2, 3]))
        stop = int(rng.integers(start + 1, n + 1))
        size = len(range(start, stop, step))
        h2, w2 = (size, w) if axis == 2 else (h, size)
        return kind, (axis, start, stop, step), None, c, h2, w2
    if kind == "pad":
        pads = tuple(int(v) for v in rng.integers(0, 3, 4))
        value = float(rng.choice([0.0, 0.0, -1.5, 2.0]))
        return kind, (pads, value), None, c, h + pads[2] + pads[3], w + pads[0] + pads[1]
    if kind == "mean":
        axes = [(1,), (2,), (3,), (2, 3), (1, 2)][int(rng.integers(0, 5))]
        h2 = 1 if 2 in axes else h
        w2 = 1 if 3 in axes else w
        return kind, (axes,), None, 1 if 1 in axes else c, h2, w2
    # eltwise chain: x * a + b -> gelu / sigmoid / clamp, a scalar sub
    return "eltwise_chain", (float(rng.choice([0.5, 3.0])), float(rng.choice([-1.0, 0.25])),
                             str(rng.choice(["sigmoid", "gelu", "clamp", "tanh", "hardswish"]))), \
        nn.Identity(), c, h, w


class _Const(nn.Module):
    def __init__(self, t: torch.Tensor):
        super().__init__()
        self.t = nn.Parameter(t, requires_grad=False)

    def forward(self, x):
        return self.t


def _pool_out(n: int, k: int, s: int, p: int, ceil: bool) -> int:
    import math

    out = (math.ceil if ceil else math.floor)((n + 2 * p - k) / s) + 1
    if ceil and (out - 1) * s >= n + p:  # PyTorch: the last window starts inside the input
        out -= 1
    return out


def _vision_apply(kind, args, m, x, x2):
    if kind in ("convT", "dw_dil"):
        return m(x)
    if kind == "pool_ceil":
        k, s, p, ceil, avg, cip = args
        if avg:
            return F.avg_pool2d(x, k, s, p, ceil_mode=ceil, count_include_pad=cip)
        return F.max_pool2d(x, k, s, p, ceil_mode=ceil)
    if kind == "cat_scales":
        return torch.cat([x, m(x) * args[0]], 1)
    if kind == "add_bcast":
        return x + m(x)
    if kind == "mul_bcast":
        return x * m(x)
    if kind == "add_input":
        y = m(x2)
        return x + F.interpolate(y, size=x.shape[2:], mode="nearest") \
            if y.shape[2:] != x.shape[2:] else x + y
    if kind == "slice":
        axis, start, stop, step = args
        return x[:, :, start:stop:step] if axis == 2 else x[..., start:stop:step]
    if kind == "pad":
        return F.pad(x, args[0], value=args[1])
    if kind == "mean":
        return x.mean(args[0], keepdim=True)
    a, b, act = args
    y = (x * a + b) - 0.5
    return {"sigmoid": torch.sigmoid, "gelu": F.gelu, "tanh": torch.tanh, "hardswish": F.hardswish,
            "clamp": lambda t: t.clamp(-1.0, 2.0)}[act](y)


def _vision(rng: np.random.Generator):
    c = int(rng.choice([1, 3, 5, 8]))
    size = int(rng.choice([5, 7, 9, 12]))
    two = bool(rng.random() < 0.3)
    model = _Vision(rng, c, size, two)
    x2_size = int(rng.choice([size, 1]))

    def make(s: int):
        g = _gen(s)
        x = torch.randn(1, c, size, size, generator=g)
        return (x, torch.randn(1, 3, x2_size, x2_size, generator=g)) if two else (x,)
    return model, make


def _quant_config(rng: np.random.Generator, family: str) -> QuantConfig | None:
    """None (the defaults) in half the seeds; else int16 for element-wise ops by op type or by
    module, or a transformer's residual stream in int16."""
    if rng.random() < 0.5:
        return None
    ops = (OpKind.ADD, OpKind.MUL, OpKind.SUB, OpKind.SIGMOID, OpKind.GELU, OpKind.CLAMP,
           OpKind.TANH, OpKind.CAT, OpKind.MEAN, OpKind.LAYER_NORM)
    chosen = [op for op in ops if rng.random() < 0.3]
    overrides = [LayerOverride(op=op, dtype=ActDtype.INT16) for op in chosen]
    if family == "vision" and rng.random() < 0.5:
        overrides.append(LayerOverride(module=f"layers.{int(rng.integers(0, 3))}",
                                       dtype=ActDtype.INT16))
    if family == "transformer" and rng.random() < 0.5:
        base = QuantConfig()
        return QuantConfig(int16_inputs=base.int16_inputs | {OpKind.ADD},
                           int16_outputs=base.int16_outputs | {OpKind.ADD},
                           overrides=tuple(overrides))
    return QuantConfig(overrides=tuple(overrides))
