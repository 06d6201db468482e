"""Quantisation specs of the Tessel NPU (what pt2e observers / fake-quants to insert) and the
one observer torchao lacks (percentile).

* activations: int8 asymmetric per tensor [-128, 127], or int16 symmetric per tensor
  [-32768, 32767] with zero point 0;
* weights: int8 symmetric per output channel (axis 0), [-127, 127] (so -w quantises to -q), or
  int4 [-7, 7] (held in int8 tensors; the NPU stores them two per byte) whose per-channel range
  is clipped where that lowers the channel's squared rounding error (:func:`int4_clip`), the
  values rounded as ``QuantConfig.int4_rounding`` says (GPTQ: tessel.quant.int4_weights);
* bias: int32, zero point 0, scale = input scale x weight scale per channel (derived);
* fixed ranges for LUT ops whose output range is known (sigmoid, tanh, softmax).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torchao.quantization.pt2e import (
    FakeQuantize,
    HistogramObserver,
    MinMaxObserver,
    MovingAverageMinMaxObserver,
    MovingAveragePerChannelMinMaxObserver,
    PerChannelMinMaxObserver,
)
from torchao.quantization.pt2e.quantizer import (
    DerivedQuantizationSpec,
    EdgeOrNode,
    FixedQParamsQuantizationSpec,
    QuantizationSpec,
)

from tessel.quant.config import ActDtype, Int4Rounding, ObserverKind, OpKind, WeightDtype

INT8_RANGE = (-128, 127)
INT16_RANGE = (-32768, 32767)
WEIGHT_RANGE = (-127, 127)
WEIGHT_RANGES = {WeightDtype.INT8: WEIGHT_RANGE, WeightDtype.INT4: (-7, 7)}
INT32_RANGE = (-(2**31), 2**31 - 1)


class PercentileObserver(MinMaxObserver):
    """Per-tensor observer whose range is the mean over batches of the batch's low / high
    percentiles (``100 - p`` and ``p``), which ignores rare outliers that min / max would keep.

    ``min_val`` / ``max_val`` hold those running means, so torchao's ``calculate_qparams`` of
    :class:`MinMaxObserver` turns them into a scale and zero point as usual.
    """

    def __init__(self, percentile: float = 99.99, **kwargs: object) -> None:
        super().__init__(**kwargs)
        if not 50.0 < percentile <= 100.0:
            raise ValueError(f"percentile must be in (50, 100], got {percentile}")
        self.percentile = percentile
        self.register_buffer("batches", torch.tensor(0, dtype=torch.int64))

    def forward(self, x_orig: torch.Tensor) -> torch.Tensor:
        if x_orig.numel() == 0:
            return x_orig
        x = x_orig.detach().reshape(-1).to(self.min_val.dtype)
        n = x.numel()
        k_hi = max(1, min(n, math.ceil(n * self.percentile / 100.0)))
        k_lo = max(1, n + 1 - k_hi)
        lo = torch.kthvalue(x, k_lo).values
        hi = torch.kthvalue(x, k_hi).values
        seen = int(self.batches)
        if seen == 0:
            self.min_val.copy_(lo)
            self.max_val.copy_(hi)
        else:  # running mean over batches
            self.min_val.copy_(self.min_val + (lo - self.min_val) / (seen + 1))
            self.max_val.copy_(self.max_val + (hi - self.max_val) / (seen + 1))
        self.batches.fill_(seen + 1)
        return x_orig

    def extra_repr(self) -> str:
        return f"percentile={self.percentile}, min_val={self.min_val}, max_val={self.max_val}"


class SoftmaxInputObserver(MinMaxObserver):
    """Min / max, with the low end of the range raised to ``max - span``.

    softmax(x) depends on ``x - max(x)`` only and ``exp(-span)`` is negligible, so values further
    below the maximum (additive attention masks of -1e4, say) need no codes: they saturate at
    qmin and still give ~0 probability, while the useful range keeps its resolution. Assumes each
    softmax row's maximum lies within ``span`` of the tensor's maximum.
    """

    def __init__(self, span: float = 64.0, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.span = span

    def calculate_qparams(self) -> tuple[torch.Tensor, torch.Tensor]:
        low = torch.maximum(self.min_val, self.max_val - self.span)
        return self._calculate_qparams(low, self.max_val)


# int4 clip ratios (of a channel's max |w|) tried: a coarse grid, largest first, then the
# fine steps around the coarse grid's best
INT4_COARSE_RATIOS = tuple(round(1.0 - 0.05 * i, 2) for i in range(15))  # 1.00 ... 0.30
INT4_FINE_STEPS = (0.04, 0.03, 0.02, 0.01, -0.01, -0.02, -0.03, -0.04)


def _clip_error(y: torch.Tensor, clip: torch.Tensor) -> torch.Tensor:
    """Per row of ``y``, sum (y - q(y))^2 with the int4 step ``clip / 7`` (clip > 0)."""
    qmin, qmax = WEIGHT_RANGES[WeightDtype.INT4]
    scale = (clip / float(qmax))[:, None]
    return ((torch.clamp(torch.round(y / scale), qmin, qmax) * scale - y) ** 2).sum(
        dim=1, dtype=torch.float64)


def int4_clip(w: torch.Tensor, axis: int) -> torch.Tensor:
    """Per channel along ``axis``, the clipped range ``r * max|w|`` whose int4 step
    ``r * max|w| / 7`` gives the least squared error ``sum (w - q(w))^2`` over the channel's
    weights (rounding to the nearest of 15 levels, clamping beyond them). ``r`` is searched on
    :data:`INT4_COARSE_RATIOS`, then :data:`INT4_FINE_STEPS` around the coarse best (at most
    1.0); a candidate replaces the best so far only when strictly better, so an all-zero
    channel, or one whose max is best, stays unclipped. At 4 bits clipping the few largest
    weights buys a finer step for all the others; at 8 bits it does not pay, so int8 keeps
    ``max|w|``."""
    y = torch.movedim(w.detach(), axis, 0).reshape(w.shape[axis], -1).to(torch.float32)
    amax = y.abs().amax(dim=1)
    live = amax > 0
    y, top = y[live], amax[live]
    ratio = torch.ones_like(top)
    best = torch.full_like(top, math.inf, dtype=torch.float64)
    candidates = [torch.full_like(top, r) for r in INT4_COARSE_RATIOS]
    for stage in range(2):
        for r in candidates:
            err = _clip_error(y, top * r)
            better = err < best
            ratio, best = torch.where(better, r, ratio), torch.where(better, err, best)
        if stage == 0:
            coarse = ratio.clone()
            candidates = [torch.clamp(coarse + d, max=1.0) for d in INT4_FINE_STEPS]
    out = amax.clone()
    out[live] = top * ratio
    return out


class PerChannelInt4Observer(PerChannelMinMaxObserver):
    """Per-channel symmetric observer of an int4 weight: the range of each channel is
    :func:`int4_clip`'s, not its min / max. It keeps the last tensor's ranges (a weight is one
    constant tensor; observing it again changes nothing). torchao passes a spec's channel
    axis only to observer classes whose name contains "PerChannel": hence the name."""

    def forward(self, x_orig: torch.Tensor) -> torch.Tensor:
        if x_orig.numel() == 0:
            return x_orig
        clip = int4_clip(x_orig, self.ch_axis).to(self.min_val.dtype)
        self.min_val.resize_(clip.shape)
        self.max_val.resize_(clip.shape)
        self.min_val.copy_(-clip)
        self.max_val.copy_(clip)
        return x_orig


class PerChannelInt4GptqObserver(PerChannelInt4Observer):
    """The int4 observer of a weight that tessel.quant.int4_weights rounds on the layer's
    calibration inputs after calibration: :func:`int4_clip`'s ranges until :meth:`freeze`
    sets the ones chosen there, kept whatever the observer sees next (the rounded weights are
    written back as ``q * scale`` of those ranges)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.frozen = False

    def forward(self, x_orig: torch.Tensor) -> torch.Tensor:
        if self.frozen:
            return x_orig
        return super().forward(x_orig)

    def freeze(self, ranges: torch.Tensor) -> None:
        """Keep the symmetric per-channel ``ranges`` (max |w| of the int4 grid) from now on."""
        self.min_val.resize_(ranges.shape)
        self.max_val.resize_(ranges.shape)
        self.min_val.copy_(-ranges)
        self.max_val.copy_(ranges)
        self.frozen = True


def _act_observer(kind: ObserverKind, percentile: float):
    if kind is ObserverKind.MINMAX:
        return MinMaxObserver
    if kind is ObserverKind.MOVING_AVERAGE:
        return MovingAverageMinMaxObserver
    if kind is ObserverKind.HISTOGRAM:
        return HistogramObserver
    return PercentileObserver.with_args(percentile=percentile)


def act_qspec(
    dtype: ActDtype, observer: ObserverKind, *, qat: bool, percentile: float = 99.99
) -> QuantizationSpec:
    """Spec of an activation tensor (observed in PTQ; fake-quantised, moving averages, in QAT)."""
    if qat:
        ctr = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver)
    elif dtype is ActDtype.INT16 and observer is ObserverKind.HISTOGRAM:
        ctr = MinMaxObserver  # torchao's histogram search is 2**16 bins wide for int16: too slow
    else:
        ctr = _act_observer(observer, percentile)
    if dtype is ActDtype.INT8:
        qmin, qmax = INT8_RANGE
        return QuantizationSpec(torch.int8, ctr, qmin, qmax, torch.per_tensor_affine)
    qmin, qmax = INT16_RANGE
    return QuantizationSpec(torch.int16, ctr, qmin, qmax, torch.per_tensor_symmetric)


class AddendObserver(SoftmaxInputObserver):
    """The observer of an operand of a sum that only softmaxes read (logits + additive attention
    mask): min / max with the low end raised to ``max - 1e4``. A mask of -1e4 (the one sdpa's
    decomposition writes) keeps its range; Hugging Face's eager mask of float32's minimum
    (-3.4e38, whose scale no requantiser multiplier brings to the sum's) saturates at -1e4, and
    either gives the masked logits ~0 probability."""

    def __init__(self, span: float = 1.0e4, **kwargs: object) -> None:
        super().__init__(span=span, **kwargs)


def softmax_input_qspec(dtype: ActDtype, *, qat: bool, addend: bool = False) -> QuantizationSpec:
    """Spec of a softmax input (and of its producer's output; addend: of an operand of that
    producer, a sum): range capped below, see :class:`SoftmaxInputObserver` and
    :class:`AddendObserver`. QAT uses the ordinary moving-average fake-quant."""
    spec = act_qspec(dtype, ObserverKind.MINMAX, qat=qat)
    if qat:
        return spec
    return dataclasses.replace(
        spec, observer_or_fake_quant_ctr=AddendObserver if addend else SoftmaxInputObserver)


def weight_qspec(*, qat: bool, axis: int = 0, dtype: WeightDtype = WeightDtype.INT8,
                 rounding: Int4Rounding = Int4Rounding.GPTQ) -> QuantizationSpec:
    """Spec of a conv / linear weight: symmetric per output channel (`axis`: 0, or 1 for a
    transposed conv's [in, out, kh, kw]) in `dtype`'s range, held in int8; int4 PTQ weights
    as `rounding` says (max |w|, :func:`int4_clip`'s range, or that range and GPTQ)."""
    if qat:
        ctr = FakeQuantize.with_args(observer=MovingAveragePerChannelMinMaxObserver)
    elif dtype is WeightDtype.INT4 and rounding is Int4Rounding.GPTQ:
        ctr = PerChannelInt4GptqObserver
    elif dtype is WeightDtype.INT4 and rounding is Int4Rounding.CLIP_MSE:
        ctr = PerChannelInt4Observer
    else:
        ctr = PerChannelMinMaxObserver
    qmin, qmax = WEIGHT_RANGES[dtype]
    return QuantizationSpec(
        torch.int8, ctr, qmin, qmax, torch.per_channel_symmetric, ch_axis=axis
    )


def derive_bias_qparams(obs_or_fqs: list) -> tuple[torch.Tensor, torch.Tensor]:
    """Bias scale = input scale x weight scale (per channel), zero point 0."""
    act, weight = obs_or_fqs
    act_scale, _ = act.calculate_qparams()
    w_scale, _ = weight.calculate_qparams()
    scale = (act_scale.to(torch.float32) * w_scale.to(torch.float32)).reshape(-1)
    return scale, torch.zeros_like(scale, dtype=torch.int64)


def bias_qspec(input_edge: EdgeOrNode, weight_edge: EdgeOrNode) -> DerivedQuantizationSpec:
    """Spec of a conv / linear bias: int32 per channel with a scale derived from its op's inputs."""
    qmin, qmax = INT32_RANGE
    return DerivedQuantizationSpec(
        derived_from=[input_edge, weight_edge],
        derive_qparams_fn=derive_bias_qparams,
        dtype=torch.int32,
        quant_min=qmin,
        quant_max=qmax,
        qscheme=torch.per_channel_symmetric,
        ch_axis=0,
    )


# output ranges that are known in advance: (real min, real max) of the op's output
_FIXED_RANGES = {
    OpKind.SIGMOID: (0.0, 1.0),
    OpKind.SOFTMAX: (0.0, 1.0),
    OpKind.TANH: (-1.0, 1.0),
}


def fixed_qspec(kind: OpKind, dtype: ActDtype) -> FixedQParamsQuantizationSpec | None:
    """Fixed output spec of an op with a known output range, or None.

    int8: [0, 1) -> scale 1/256, zero point -128; [-1, 1) -> scale 1/128, zero point 0 (TFLite).
    int16: [0, 1) and [-1, 1) -> scale 1/32768, zero point 0.
    """
    rng = _FIXED_RANGES.get(kind)
    if rng is None:
        return None
    if dtype is ActDtype.INT16:
        qmin, qmax = INT16_RANGE
        return FixedQParamsQuantizationSpec(
            torch.int16, 1.0 / 32768.0, 0, qmin, qmax, torch.per_tensor_symmetric
        )
    qmin, qmax = INT8_RANGE
    if rng[0] >= 0.0:
        return FixedQParamsQuantizationSpec(
            torch.int8, 1.0 / 256.0, -128, qmin, qmax, torch.per_tensor_affine
        )
    return FixedQParamsQuantizationSpec(
        torch.int8, 1.0 / 128.0, 0, qmin, qmax, torch.per_tensor_affine
    )
