"""Write int8 TFLite flatbuffers from a small Python spec (no converter, no network).

`TfliteBuilder` is the raw writer (tensors, buffers, operators, options tables with the `tflite`
package's generated schema); `Net` on top of it builds fully-int8 graphs the way the TFLite
converter lays them out: float input -> QUANTIZE -> int8 ops (per-channel int8 weights, int32
bias at scale s_in * s_w, fused activations) -> DEQUANTIZE -> float output. Weights are drawn
with a fixed seed; output scales follow the expected spread of each op's result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import flatbuffers
import numpy as np
import tflite

B = tflite.BuiltinOperator
ACT = tflite.ActivationFunctionType
_NP = {tflite.TensorType.FLOAT32: np.float32, tflite.TensorType.INT8: np.int8,
       tflite.TensorType.INT32: np.int32}


@dataclass
class _Tensor:
    name: str
    shape: tuple[int, ...]
    ttype: int
    buffer: int
    scales: tuple[float, ...] = ()
    zps: tuple[int, ...] = ()
    axis: int = 0


class TfliteBuilder:
    """Collect tensors and operators, then `build()` the flatbuffer bytes."""

    def __init__(self) -> None:
        self.tensors: list[_Tensor] = []
        self.buffers: list[bytes] = [b""]
        self.ops: list[tuple[int, list[int], list[int], str | None, dict[str, Any]]] = []

    def tensor(self, name: str, shape: tuple[int, ...], ttype: int, scales: tuple[float, ...] = (),
               zps: tuple[int, ...] = (), data: np.ndarray | None = None, axis: int = 0) -> int:
        buffer = 0
        if data is not None:
            self.buffers.append(np.ascontiguousarray(data, _NP[ttype]).tobytes())
            buffer = len(self.buffers) - 1
        self.tensors.append(_Tensor(name, tuple(shape), ttype, buffer, tuple(scales), tuple(zps), axis))
        return len(self.tensors) - 1

    def op(self, code: int, inputs: list[int], outputs: list[int], options: str | None = None,
           **fields: Any) -> None:
        self.ops.append((code, inputs, outputs, options, fields))

    # ------------------------------------------------------------ writing
    def build(self, inputs: list[int], outputs: list[int]) -> bytes:
        b = flatbuffers.Builder(1024)
        buffers = [self._buffer(b, data) for data in self.buffers]
        tensors = [self._tensor(b, t) for t in self.tensors]
        codes = sorted({op[0] for op in self.ops})
        operators = [self._operator(b, codes.index(c), i, o, name, fields)
                     for c, i, o, name, fields in self.ops]
        opcodes = []
        for code in codes:
            tflite.OperatorCodeStart(b)
            tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            tflite.OperatorCodeAddBuiltinCode(b, code)
            tflite.OperatorCodeAddVersion(b, 1)
            opcodes.append(tflite.OperatorCodeEnd(b))
        name = b.CreateString("main")
        t_vec, o_vec = self._tables(b, tensors), self._tables(b, operators)
        in_vec, out_vec = self._ints(b, inputs), self._ints(b, outputs)
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, t_vec)
        tflite.SubGraphAddInputs(b, in_vec)
        tflite.SubGraphAddOutputs(b, out_vec)
        tflite.SubGraphAddOperators(b, o_vec)
        tflite.SubGraphAddName(b, name)
        subgraph = tflite.SubGraphEnd(b)
        codes_vec, sub_vec, buf_vec = (self._tables(b, opcodes), self._tables(b, [subgraph]),
                                       self._tables(b, buffers))
        desc = b.CreateString("tessel test model")
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, 3)
        tflite.ModelAddOperatorCodes(b, codes_vec)
        tflite.ModelAddSubgraphs(b, sub_vec)
        tflite.ModelAddDescription(b, desc)
        tflite.ModelAddBuffers(b, buf_vec)
        b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())

    @staticmethod
    def _tables(b: flatbuffers.Builder, offsets: list[int]) -> int:
        b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()

    @staticmethod
    def _ints(b: flatbuffers.Builder, values: list[int]) -> int:
        return b.CreateNumpyVector(np.asarray(values, np.int32))

    def _buffer(self, b: flatbuffers.Builder, data: bytes) -> int:
        vec = b.CreateNumpyVector(np.frombuffer(data, np.uint8)) if data else None
        tflite.BufferStart(b)
        if vec is not None:
            tflite.BufferAddData(b, vec)
        return tflite.BufferEnd(b)

    def _tensor(self, b: flatbuffers.Builder, t: _Tensor) -> int:
        name = b.CreateString(t.name)
        shape = self._ints(b, list(t.shape))
        quant = None
        if t.scales:
            scale = b.CreateNumpyVector(np.asarray(t.scales, np.float32))
            zp = b.CreateNumpyVector(np.asarray(t.zps, np.int64))
            tflite.QuantizationParametersStart(b)
            tflite.QuantizationParametersAddScale(b, scale)
            tflite.QuantizationParametersAddZeroPoint(b, zp)
            tflite.QuantizationParametersAddQuantizedDimension(b, t.axis)
            quant = tflite.QuantizationParametersEnd(b)
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, shape)
        tflite.TensorAddType(b, t.ttype)
        tflite.TensorAddBuffer(b, t.buffer)
        tflite.TensorAddName(b, name)
        if quant is not None:
            tflite.TensorAddQuantization(b, quant)
        return tflite.TensorEnd(b)

    def _operator(self, b: flatbuffers.Builder, opcode: int, inputs: list[int], outputs: list[int],
                  options: str | None, fields: dict[str, Any]) -> int:
        opts = None
        if options is not None:
            getattr(tflite, f"{options}Start")(b)
            for key, value in fields.items():
                getattr(tflite, f"{options}Add{key}")(b, value)
            opts = getattr(tflite, f"{options}End")(b)
        in_vec, out_vec = self._ints(b, inputs), self._ints(b, outputs)
        tflite.OperatorStart(b)
        tflite.OperatorAddOpcodeIndex(b, opcode)
        tflite.OperatorAddInputs(b, in_vec)
        tflite.OperatorAddOutputs(b, out_vec)
        if opts is not None:
            tflite.OperatorAddBuiltinOptionsType(b, getattr(tflite.BuiltinOptions, options))
            tflite.OperatorAddBuiltinOptions(b, opts)
        return tflite.OperatorEnd(b)


@dataclass(frozen=True)
class Q:
    """An int8 activation of a Net: tensor index, shape, scale, zero point."""

    index: int
    shape: tuple[int, ...]
    scale: float
    zp: int


I8, I32, F32 = tflite.TensorType.INT8, tflite.TensorType.INT32, tflite.TensorType.FLOAT32
_SPREAD = 74.0  # std of a uniformly used int8 range, in LSBs


class Net:
    """Fully-int8 graphs as the TFLite converter writes them (see the module docstring)."""

    def __init__(self, seed: int = 0) -> None:
        self.b = TfliteBuilder()
        self.rng = np.random.default_rng(seed)
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.input_q: list[Q] = []

    def _act(self, name: str, shape: tuple[int, ...], scale: float, zp: int) -> Q:
        zp = int(np.clip(zp, -128, 127))
        return Q(self.b.tensor(name, shape, I8, (float(np.float32(scale)),), (zp,)), shape,
                 float(np.float32(scale)), zp)

    def input(self, shape: tuple[int, ...], scale: float = 0.05, zp: int = -3) -> Q:
        f = self.b.tensor(f"input{len(self.inputs)}", shape, F32)
        self.inputs.append(f)
        q = self._act(f"input{len(self.inputs) - 1}_q", shape, scale, zp)
        self.b.op(B.QUANTIZE, [f], [q.index])
        self.input_q.append(q)
        return q

    def output(self, x: Q) -> None:
        f = self.b.tensor(f"output{len(self.outputs)}", x.shape, F32)
        self.b.op(B.DEQUANTIZE, [x.index], [f])
        self.outputs.append(f)

    def build(self) -> bytes:
        return self.b.build(self.inputs, self.outputs)

    def _out_params(self, std_real: float, act: int) -> tuple[float, int]:
        """Output scale / zero point covering +-3 std (relu-like: [0, 3 std])."""
        if act in (ACT.RELU, ACT.RELU6):
            return 3 * std_real / 255, -128
        return 6 * std_real / 255, int(self.rng.integers(-10, 11))

    # ------------------------------------------------------------ ops
    def conv(self, x: Q, out_ch: int, k: int = 3, stride: int = 1, padding: int = 0,
             act: int = ACT.NONE, depthwise: bool = False, dilation: int = 1) -> Q:
        n, h, w, c = x.shape
        cout = c * out_ch if depthwise else out_ch
        fan_in = k * k * (1 if depthwise else c)
        w_scales = self.rng.uniform(0.5, 1.5, cout) * (1.0 / math.sqrt(fan_in)) / 127
        wq = self.rng.integers(-127, 128, (cout, k, k, 1 if depthwise else c)).astype(np.int8)
        b_scales = (np.float32(x.scale) * w_scales.astype(np.float32)).astype(np.float32)
        bias = self.rng.integers(-3000, 3000, cout).astype(np.int32)
        if depthwise:
            wq = np.ascontiguousarray(np.transpose(wq, (3, 1, 2, 0)))  # [1, k, k, C*M]
        wt = self.b.tensor("w", wq.shape, I8, tuple(w_scales), (0,) * cout, wq, 3 if depthwise else 0)
        bt = self.b.tensor("b", (cout,), I32, tuple(b_scales), (0,) * cout, bias)
        same = padding == tflite.Padding.SAME
        oh = -(-h // stride) if same else (h - (k - 1) * dilation - 1) // stride + 1
        ow = -(-w // stride) if same else (w - (k - 1) * dilation - 1) // stride + 1
        std = math.sqrt(fan_in) * _SPREAD * x.scale * 73 * float(np.mean(w_scales))
        y = self._act("conv", (n, oh, ow, cout), *self._out_params(std, act))
        common = dict(Padding=padding, StrideW=stride, StrideH=stride, FusedActivationFunction=act,
                      DilationWFactor=dilation, DilationHFactor=dilation)
        if depthwise:
            self.b.op(B.DEPTHWISE_CONV_2D, [x.index, wt, bt], [y.index], "DepthwiseConv2DOptions",
                      DepthMultiplier=out_ch, **common)
        else:
            self.b.op(B.CONV_2D, [x.index, wt, bt], [y.index], "Conv2DOptions", **common)
        return y

    def fc(self, x: Q, out: int, act: int = ACT.NONE, per_channel: bool = True) -> Q:
        fan_in = x.shape[-1]
        w_scales = (self.rng.uniform(0.5, 1.5, out if per_channel else 1)
                    / math.sqrt(fan_in) / 127)
        wq = self.rng.integers(-127, 128, (out, fan_in)).astype(np.int8)
        wt = self.b.tensor("fc_w", wq.shape, I8, tuple(w_scales), (0,) * len(w_scales), wq, 0)
        full = np.broadcast_to(w_scales, (out,))
        b_scales = (np.float32(x.scale) * full.astype(np.float32)).astype(np.float32)
        bias = self.rng.integers(-3000, 3000, out).astype(np.int32)
        bt = self.b.tensor("fc_b", (out,), I32, tuple(b_scales[:len(w_scales)]),
                           (0,) * len(w_scales), bias)
        std = math.sqrt(fan_in) * _SPREAD * x.scale * 73 * float(np.mean(w_scales))
        y = self._act("fc", (int(np.prod(x.shape[:-1])), out), *self._out_params(std, act))
        self.b.op(B.FULLY_CONNECTED, [x.index, wt, bt], [y.index], "FullyConnectedOptions",
                  FusedActivationFunction=act)
        return y

    def binary(self, code: int, a: Q, b: Q, act: int = ACT.NONE) -> Q:
        shape = tuple(np.broadcast_shapes(a.shape, b.shape))
        if code == B.MUL:
            std = _SPREAD * a.scale * _SPREAD * b.scale
            y = self._act("mul", shape, *self._out_params(std, act))
            self.b.op(code, [a.index, b.index], [y.index], "MulOptions", FusedActivationFunction=act)
        else:
            std = _SPREAD * math.hypot(a.scale, b.scale)
            y = self._act("add", shape, *self._out_params(std, act))
            name = "AddOptions" if code == B.ADD else "SubOptions"
            self.b.op(code, [a.index, b.index], [y.index], name, FusedActivationFunction=act)
        return y

    def pool(self, x: Q, code: int, k: int, stride: int, padding: int = 0) -> Q:
        n, h, w, c = x.shape
        same = padding == tflite.Padding.SAME
        oh = -(-h // stride) if same else (h - k) // stride + 1
        ow = -(-w // stride) if same else (w - k) // stride + 1
        y = self._act("pool", (n, oh, ow, c), x.scale, x.zp)  # TFLite: same parameters
        self.b.op(code, [x.index], [y.index], "Pool2DOptions", Padding=padding, StrideW=stride,
                  StrideH=stride, FilterWidth=k, FilterHeight=k)
        return y

    def mean(self, x: Q, axes: tuple[int, ...], keep: bool = True, same: bool = False) -> Q:
        """MEAN; `same`: the output keeps the input's scale and zero point."""
        at = self.b.tensor("axes", (len(axes),), I32, data=np.asarray(axes, np.int32))
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes)
        y = self._act("mean", shape, x.scale if same else x.scale * 0.6, x.zp + (0 if same else 5))
        self.b.op(B.MEAN, [x.index, at], [y.index], "ReducerOptions", KeepDims=keep)
        return y

    def reshape(self, x: Q, shape: tuple[int, ...]) -> Q:
        st = self.b.tensor("shape", (len(shape),), I32, data=np.asarray(shape, np.int32))
        y = self._act("reshape", shape, x.scale, x.zp)
        self.b.op(B.RESHAPE, [x.index, st], [y.index])
        return y

    def softmax(self, x: Q) -> Q:
        y = self._act("softmax", x.shape, 1 / 256, -128)
        self.b.op(B.SOFTMAX, [x.index], [y.index], "SoftmaxOptions", Beta=1.0)
        return y

    def concat(self, xs: list[Q], axis: int) -> Q:
        shape = list(xs[0].shape)
        shape[axis] = sum(x.shape[axis] for x in xs)
        y = self._act("concat", tuple(shape), xs[0].scale, xs[0].zp)  # TFLite int8: same params
        self.b.op(B.CONCATENATION, [x.index for x in xs], [y.index], "ConcatenationOptions",
                  Axis=axis)
        return y

    def pad(self, x: Q, pads: list[tuple[int, int]]) -> Q:
        pt = self.b.tensor("paddings", (len(pads), 2), I32, data=np.asarray(pads, np.int32))
        shape = tuple(d + lo + hi for d, (lo, hi) in zip(x.shape, pads, strict=True))
        y = self._act("pad", shape, x.scale, x.zp)
        self.b.op(B.PAD, [x.index, pt], [y.index])
        return y

    def unary(self, x: Q, code: int) -> Q:
        params = {B.LOGISTIC: (1 / 256, -128), B.TANH: (1 / 128, 0),
                  B.HARD_SWISH: ((x.scale * (127 - x.zp) + 0.4) / 255 * 1.02, -100)}[code]
        y = self._act("act", x.shape, *params)
        self.b.op(code, [x.index], [y.index])
        return y

    def requantize(self, x: Q, scale: float, zp: int) -> Q:
        y = self._act("requant", x.shape, scale, zp)
        self.b.op(B.QUANTIZE, [x.index], [y.index])
        return y
