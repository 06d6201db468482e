"""Error-compensating (GPTQ) rounding of int4 weights on a layer's calibration inputs.

Rounding each int4 weight to its nearest level minimises the weight error; what the network
feels is the layer's output error ``||X W^T - X Q^T||^2`` on its inputs ``X``. GPTQ (Frantar et
al., 2023) rounds the input columns of ``W`` one at a time and spreads each rounding error over
the columns not yet rounded, weighted by the inverse of ``H = X^T X + damp I``, so that the
output error stays close to its least; the per-channel scale is fixed beforehand (the
observer's range), and every value stays on the int4 grid of that scale.

* the rows of ``X``: a linear layer's input vectors; a conv's im2col patches (one matrix per
  group), at most :data:`ROWS_PER_SAMPLE` of each calibration sample, evenly strided (only
  those patches are gathered); the samples go through in calibration's batches when it could
  batch them;
* ``H`` is kept as its diagonal blocks of at most :data:`MAX_BLOCK` inputs (contiguous input
  channels with all their kernel taps): errors are compensated within a block, and the cost
  of the Cholesky factorisations stays linear in the layer's width;
* ``damp`` = :data:`DAMP` times the mean of the block's diagonal; an input that is zero on
  every row keeps nearest rounding;
* a weight that is exactly 0 (a pruned one: 2:4 sparsity) stays 0, its error compensated by
  the others like a rounding error;
* per output channel, GPTQ runs with two ranges, max |w| and :func:`int4_clip`'s (side by
  side, in one pass), and the one with the smaller output error ``e^T H e`` is kept
  (clipping shrinks a channel's gain, which the compensation cannot undo, but its finer step
  may pay); GPTQ yields that error as it goes (:func:`gptq_runs`);
* the cost: the Gram blocks (a rank-k update per batch), one Cholesky factorisation per
  block (no inverse: :func:`_round_block`) and a column loop in numpy, updating the columns
  not yet rounded :data:`LAZY` at a time. Rounding the columns by descending ``H`` diagonal
  (act-order), or damping by 0.03 or 0.3, measured worse on ResNet-18 or MiniLM.

:func:`round_int4_weights` runs after calibration on a prepared pt2e module: every conv /
linear layer whose weight observer is a :class:`PerChannelInt4GptqObserver` gets its weight
replaced by ``q * scale`` (``q`` the rounded int4 values, ``scale`` the observer's, which is
then frozen), so that conversion quantises it back to exactly ``q``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.linalg import blas
from torch.fx import GraphModule, Interpreter, Node
from torchao.quantization.pt2e import ObserverBase

from tessel.quant.config import OpKind, WeightDtype
from tessel.quant.optable import op_kind
from tessel.quant.pt2e import CALIBRATION_BATCH, _batchable, _same_rows, _stack
from tessel.quant.qspecs import WEIGHT_RANGES, PerChannelInt4GptqObserver
from tessel.threads import single_threaded

ROWS_PER_SAMPLE = 256  # input rows of one calibration sample that enter H, at most
MAX_BLOCK = 1152  # inputs per diagonal block of H
DAMP = 0.1  # added to H's diagonal, times its mean
LAZY = 32  # columns rounded before the remaining columns are updated in one product


@dataclass(frozen=True)
class ConvShape:
    """What im2col needs of a conv (linear layers: None)."""

    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int


def input_rows(x: torch.Tensor, conv: ConvShape | None, samples: int = 1) -> torch.Tensor:
    """The rows ``[groups, N, d]`` an input ``x`` of ``samples`` samples (split along its
    dim 0; one sample: all of ``x``) contributes to ``H`` (every output position's input
    patch; for a linear layer every input vector), at most :data:`ROWS_PER_SAMPLE` per
    sample, evenly strided within each."""
    x = x.detach().to(torch.float32)
    if conv is None:
        per = x.reshape(samples, -1, x.shape[-1])
        step = max(1, math.ceil(per.shape[1] / ROWS_PER_SAMPLE))
        return per[:, ::step].reshape(1, -1, x.shape[-1])
    if len(conv.kernel) == 1:  # conv1d as a conv2d of height 1
        x = x.unsqueeze(-2)
        conv = ConvShape((1, *conv.kernel), (1, *conv.stride), (0, *conv.padding),
                         (1, *conv.dilation), conv.groups)
    if x.dim() == 3:  # one unbatched sample
        x = x[None]
    b, channels = x.shape[0], x.shape[1]
    cols = _patches(x, conv)  # [B, C, taps, N]
    rows = cols.reshape(b, conv.groups, channels // conv.groups * cols.shape[2], -1)
    rows = rows.permute(1, 0, 3, 2)
    return rows.reshape(conv.groups, -1, rows.shape[-1])


def _patches(x: torch.Tensor, conv: ConvShape) -> torch.Tensor:
    """The input patches [B, C, taps, N] of a 2-d conv at its output positions ``0, step,
    2 step, ...`` (row-major order; ``step`` keeps at most :data:`ROWS_PER_SAMPLE`): im2col's
    columns of those positions, gathered without the others."""
    x = torch.nn.functional.pad(x, (conv.padding[1], conv.padding[1],
                                    conv.padding[0], conv.padding[0]))
    out = [(x.shape[2 + k] - conv.dilation[k] * (conv.kernel[k] - 1) - 1) // conv.stride[k] + 1
           for k in range(2)]
    step = max(1, math.ceil(out[0] * out[1] / ROWS_PER_SAMPLE))
    pos = torch.arange(0, out[0] * out[1], step)
    ky, kx = (torch.arange(conv.kernel[k]) * conv.dilation[k] for k in range(2))
    iy = (pos // out[1] * conv.stride[0])[None, None, :] + ky[:, None, None]  # [kh, 1, N]
    ix = (pos % out[1] * conv.stride[1])[None, None, :] + kx[None, :, None]  # [1, kw, N]
    cols = x[:, :, iy, ix]  # [B, C, kh, kw, N]
    return cols.reshape(x.shape[0], x.shape[1], -1, pos.numel())


def _blocks(d: int, align: int = 1) -> list[tuple[int, int]]:
    count = max(1, math.ceil(d / MAX_BLOCK))
    size = math.ceil(d / count / align) * align
    return [(i, min(i + size, d)) for i in range(0, d, size)]


@dataclass
class Gram:
    """The diagonal blocks of ``H = X^T X`` (float64, per group) accumulated over inputs;
    every block starts at a multiple of ``align`` inputs (2:4 pruning keeps its groups of
    four in one block)."""

    width: int
    align: int = 1
    blocks: list[tuple[int, int]] = field(init=False)
    # per block, the float64 sum of the inputs' X^T X; one group's: its upper triangle only
    sums: list[torch.Tensor | None] = field(init=False)

    factors: list[tuple[torch.Tensor, torch.Tensor]] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.blocks = _blocks(self.width, self.align)
        self.sums = [None] * len(self.blocks)

    @property
    def parts(self) -> list[torch.Tensor]:
        """Per block, ``H``'s diagonal block [G, b, b] (symmetric)."""
        return [h if h.shape[0] > 1 else h.triu() + h.triu(1).transpose(-1, -2) for h in self.sums]

    def inverse_factors(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per block, ``V`` (float32) and the diagonal ``D`` added to ``H`` (float64),
        computed once (:func:`_factor`)."""
        if self.factors is None:
            self.factors = [_factor(h) for h in self.parts]
        return self.factors

    def add(self, rows: torch.Tensor) -> None:
        """Add ``rows`` [G, N, width]: per block, ``X^T X`` of float32 rows (one group: its
        upper triangle by a rank-k update, half a product's work), summed in float64."""
        for k, (a, b) in enumerate(self.blocks):
            xb = rows[..., a:b]
            if xb.shape[0] == 1:
                part = torch.from_numpy(blas.ssyrk(1.0, xb[0].numpy().T))[None]
            else:
                part = xb.transpose(-1, -2) @ xb
            part = part.to(torch.float64)
            self.sums[k] = part if self.sums[k] is None else self.sums[k] + part


def _factor(h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``V`` upper triangular with ``V V^T = H + D`` (``U = V^-1`` is GPTQ's upper Cholesky
    factor of ``(H + D)^-1``), and ``D``: ``damp`` on the diagonal (a dead input's, 0 in
    ``H``, becomes 1 first). With ``P`` the reversal and ``P (H + D) P = L L^T``, ``V = P L
    P``: one factorisation, no inverse."""
    diag = torch.diagonal(h, dim1=-2, dim2=-1)
    live = torch.where(diag > 0, diag, torch.ones_like(diag))
    added = live - diag + DAMP * live.mean(-1, keepdim=True)
    low = torch.linalg.cholesky((h + torch.diag_embed(added)).flip(-1, -2))
    return low.flip(-1, -2).to(torch.float32).contiguous(), added


def _round_block(w: np.ndarray, v: np.ndarray, scale: np.ndarray, zero: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """GPTQ on one block, columns first: ``w`` [G, b, M], ``v`` [G, b, b] (:func:`_factor`),
    ``scale`` [G, M], ``zero`` [G, b, M] the weights that stay 0; returns the int4 values
    [G, b, M] (as floats) and the scaled errors ``e`` [G, b, M], whose squares sum to the
    damped output error. GPTQ's ``W - Q = e U`` gives ``e = (W - Q) V``: column ``i`` is
    rounded at ``W_i + sum_{k<i} r_k V_ki / V_ii``, ``r = W - Q`` (the rounded columns'
    residuals), which is GPTQ's compensated weight; the sums over earlier blocks of
    :data:`LAZY` columns are one product."""
    qmin, qmax = WEIGHT_RANGES[WeightDtype.INT4]
    q = np.empty_like(w)
    err = np.empty_like(w)
    res = np.empty_like(w)
    width = w.shape[1]
    for i1 in range(0, width, LAZY):
        i2 = min(i1 + LAZY, width)
        acc = np.swapaxes(v[:, :i1, i1:i2], 1, 2) @ res[:, :i1]  # [G, i2 - i1, M]
        for i in range(i1, i2):
            vii = v[:, i, i, None]
            col = w[:, i] + acc[:, i - i1] / vii
            qi = np.clip(np.rint(col / scale), qmin, qmax)
            qi[zero[:, i]] = 0.0
            q[:, i] = qi
            err[:, i] = (col - qi * scale) * vii
            res[:, i] = w[:, i] - qi * scale
            acc[:, i - i1 + 1:] += v[:, i, i + 1:i2, None] * res[:, i, None, :]
    return q, err


def gptq_runs(w: torch.Tensor, gram: Gram, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GPTQ of ``w`` [O, I / groups, *kernel] once per row of ``scales`` [R, O] (all in one
    pass): the int4 values [R, *w.shape] (floats) and each channel's output error ``e^T H e``
    [R, O] (float64)."""
    groups = gram.sums[0].shape[0]
    out = w.shape[0]
    runs = scales.shape[0]
    w3 = w.detach().to(torch.float32).reshape(groups, out // groups, -1)
    s = scales.detach().to(torch.float32)
    s = torch.where(s > 0, s, torch.ones_like(s)).reshape(runs, groups, out // groups)
    # columns first, the R runs side by side: [G, d, R * O / G]
    cols = w3.permute(0, 2, 1).unsqueeze(-2).expand(-1, -1, runs, -1).reshape(
        groups, w3.shape[-1], -1)
    s_cols = s.permute(1, 0, 2).reshape(groups, -1)
    work = cols.numpy().copy()
    zero = work == 0  # pruned weights (2:4 sparsity) stay 0; their neighbours compensate
    q = np.empty_like(work)
    error = torch.zeros(groups, cols.shape[-1], dtype=torch.float64)
    for (a, b), (v, added) in zip(gram.blocks, gram.inverse_factors(), strict=True):
        qb, eb = _round_block(work[:, a:b], v.numpy(), s_cols.numpy(), zero[:, a:b])
        q[:, a:b] = qb
        r = cols[:, a:b].to(torch.float64) - torch.from_numpy(qb).to(torch.float64) * \
            s_cols.to(torch.float64)[:, None]
        error += (torch.from_numpy(eb).to(torch.float64) ** 2).sum(1) - (
            added[..., None] * r * r).sum(1)
    q_t = torch.from_numpy(q).reshape(groups, -1, runs, out // groups).permute(2, 0, 3, 1)
    q_t = q_t.reshape(runs, *w.shape).to(w.dtype)
    error = error.reshape(groups, runs, out // groups).permute(1, 0, 2).reshape(runs, out)
    return q_t, error


def gptq_int4(w: torch.Tensor, gram: Gram, scale: torch.Tensor) -> torch.Tensor:
    """The int4 values (float tensor shaped like ``w``) GPTQ gives a conv / linear weight ``w``
    [O, I / groups, *kernel] with per-output-channel ``scale`` [O] and the input Gram matrix
    ``gram`` of its layer (:func:`input_rows` rows)."""
    return gptq_runs(w, gram, scale[None])[0][0]


# -- the pass on a prepared pt2e module -----------------------------------------------------------


@dataclass
class _Layer:
    node: Node  # the conv / linear
    weight: str  # its weight's attribute
    observer: PerChannelInt4GptqObserver
    conv: ConvShape | None
    gram: Gram


def _ints(value: object, n: int, default: int) -> tuple[int, ...] | None:
    if value is None:
        return (default,) * n
    if isinstance(value, int):
        return (value,) * n
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        return tuple(value) if len(value) == n else (value[0],) * n if len(value) == 1 else None
    return None


def _conv_shape(node: Node, weight: torch.Tensor) -> ConvShape | None:
    """The conv's im2col shape, or None when an argument is not a plain int list (padding
    'same')."""
    n = weight.dim() - 2
    args = list(node.args) + [None] * (7 - len(node.args))
    for k, name in enumerate(("stride", "padding", "dilation", "groups"), start=3):
        if name in node.kwargs:
            args[k] = node.kwargs[name]
    parts = [_ints(args[3], n, 1), _ints(args[4], n, 0), _ints(args[5], n, 1)]
    groups = 1 if args[6] is None else args[6]
    if any(p is None for p in parts) or not isinstance(groups, int):
        return None
    return ConvShape(tuple(weight.shape[2:]), *parts, groups)


def _attr(module: torch.nn.Module, target: str) -> torch.Tensor:
    for part in target.split("."):
        module = getattr(module, part)
    return module


def gptq_layers(prepared: GraphModule) -> list[_Layer]:
    """The conv / linear layers of ``prepared`` whose int4 weights GPTQ rounds: a weight
    observer of that kind, fed by a weight attribute nothing else reads."""
    layers = []
    for node in prepared.graph.nodes:
        kind = op_kind(node)
        if kind not in (OpKind.CONV, OpKind.LINEAR) or len(node.args) < 2:
            continue
        obs_node = node.args[1]
        if not isinstance(obs_node, Node) or obs_node.op != "call_module":
            continue
        observer = prepared.get_submodule(obs_node.target)
        if not isinstance(observer, PerChannelInt4GptqObserver) or observer.ch_axis != 0:
            continue
        w_node = obs_node.args[0] if obs_node.args else None
        if not isinstance(w_node, Node) or w_node.op != "get_attr" or len(w_node.users) != 1 \
                or len(obs_node.users) != 1 or not isinstance(node.args[0], Node):
            continue
        weight = _attr(prepared, w_node.target)
        conv = _conv_shape(node, weight) if kind is OpKind.CONV else None
        if kind is OpKind.CONV and (conv is None or weight.dim() not in (3, 4)):
            continue
        width = weight[0].numel()
        layers.append(_Layer(node, w_node.target, observer, conv, Gram(width)))
    return layers


class _Capture(Interpreter):
    """Runs the prepared graph with its observers passed through (observing nothing) and adds
    each chosen layer's input rows to its Gram matrix (of every sample of a batch from
    ``skip`` on)."""

    def __init__(self, prepared: GraphModule, layers: Sequence[_Layer]) -> None:
        super().__init__(prepared)
        self.layers = {layer.node: layer for layer in layers}
        self.samples, self.skip = 1, 0

    def run_node(self, n: Node) -> object:
        layer = self.layers.get(n)
        if layer is not None:
            x = self.env[n.args[0]]
            if self.samples > 1:
                x = x[self.skip:]
            layer.gram.add(input_rows(x, layer.conv, self.samples - self.skip))
        return super().run_node(n)

    def call_module(self, target, args, kwargs) -> object:  # noqa: ANN001 - fx's signature
        if isinstance(self.module.get_submodule(target), ObserverBase):
            return args[0]
        return super().call_module(target, args, kwargs)

    def batch(self, samples: list[tuple[torch.Tensor, ...]], skip: int = 0) -> object:
        self.samples, self.skip = len(samples), skip
        try:
            return self.run(*_stack(samples))
        finally:
            self.samples, self.skip = 1, 0


def _capture(prepared: GraphModule, layers: Sequence[_Layer],
             samples: list[tuple[torch.Tensor, ...]]) -> None:
    """Every sample's input rows into the layers' Gram matrices: in batches of
    :data:`CALIBRATION_BATCH` when calibration could batch them (the first batch, which
    carries the first sample again without adding its rows, checked against that sample run
    alone; otherwise its rows are dropped and the samples run one by one)."""
    capture = _Capture(prepared, layers)
    first = capture.run(*samples[0])
    rest = samples[1:]
    if len(rest) > 1 and _batchable(prepared, samples):
        saved = [list(layer.gram.sums) for layer in layers]
        trial = [samples[0], *rest[:CALIBRATION_BATCH - 1]]
        try:
            ok = _same_rows(capture.batch(trial, skip=1), first, len(trial))
        except Exception:  # noqa: BLE001 - any failure: the model does not take a batch
            ok = False
        if ok:
            for k in range(CALIBRATION_BATCH - 1, len(rest), CALIBRATION_BATCH):
                chunk = rest[k:k + CALIBRATION_BATCH]
                capture.batch(chunk) if len(chunk) > 1 else capture.run(*chunk[0])
            rest = []
        else:
            for layer, sums in zip(layers, saved, strict=True):
                layer.gram.sums = sums
    for sample in rest:
        capture.run(*sample)


def round_int4_weights(prepared: GraphModule, samples: Sequence[Sequence[torch.Tensor]]
                       ) -> int:
    """GPTQ for every layer :func:`gptq_layers` finds (module docstring), after calibration;
    returns how many layers it rounded."""
    layers = gptq_layers(prepared)
    if not layers:
        return 0
    with torch.no_grad(), single_threaded():
        _capture(prepared, layers, [tuple(s) for s in samples])
        for layer in layers:
            _write_back(prepared, layer)
    return len(layers)


def output_error(w: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, gram: Gram
                 ) -> torch.Tensor:
    """Per output channel, ``e^T H e`` with ``e = w - q * scale`` (the layer's squared output
    error on its calibration rows, within :class:`Gram`'s blocks), float64 [O]."""
    groups = gram.sums[0].shape[0]
    out = w.shape[0]
    e = (w.to(torch.float64) - q.to(torch.float64) * scale.to(torch.float64).reshape(
        [-1] + [1] * (w.dim() - 1))).reshape(groups, out // groups, -1)
    total = torch.zeros(groups, out // groups, dtype=torch.float64)
    for (a, b), h in zip(gram.blocks, gram.parts, strict=True):
        eb = e[..., a:b]
        total += ((eb @ h) * eb).sum(-1)
    return total.reshape(out)


def int4_scale(ranges: torch.Tensor) -> torch.Tensor:
    """Per channel, the int4 step of the symmetric range ``ranges`` (1 for an all-zero
    channel)."""
    qmax = WEIGHT_RANGES[WeightDtype.INT4][1]
    return torch.where(ranges > 0, ranges / qmax, torch.ones_like(ranges))


def choose_int4(w: torch.Tensor, gram: Gram, clip: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(ranges [O], int4 values like ``w``) of a weight: per output channel, of GPTQ with the
    range max |w| and with the clipped range ``clip``, the one with the smaller output error
    (clipping shrinks the channel's gain, which GPTQ cannot compensate; its finer step may
    still pay). Both run in one pass; the errors are GPTQ's own (:func:`gptq_runs`)."""
    amax = w.detach().reshape(w.shape[0], -1).abs().amax(dim=1).to(torch.float32)
    ranges = torch.stack([amax, clip.to(torch.float32)])
    q, err = gptq_runs(w, gram, int4_scale(ranges))
    better = err[1] < err[0]
    mask = better.reshape([-1] + [1] * (w.dim() - 1))
    return torch.where(better, ranges[1], ranges[0]), torch.where(mask, q[1], q[0])


def _write_back(prepared: GraphModule, layer: _Layer) -> None:
    """The layer's weight replaced by ``q * scale`` (a new tensor: the exported module may
    share the user's parameters), its observer frozen on the chosen ranges."""
    weight = _attr(prepared, layer.weight)
    ranges, q = choose_int4(weight, layer.gram, layer.observer.max_val)
    layer.observer.freeze(ranges.to(layer.observer.max_val.dtype))
    scale, _ = layer.observer.calculate_qparams()
    shape = [-1] + [1] * (weight.dim() - 1)
    new = (q * scale.to(weight.dtype).reshape(shape)).detach()
    owner_name, _, name = layer.weight.rpartition(".")
    owner = prepared.get_submodule(owner_name) if owner_name else prepared
    if isinstance(getattr(owner, name), torch.nn.Parameter):
        new = torch.nn.Parameter(new, requires_grad=False)
    setattr(owner, name, new)
