"""Whole int8 TFLite models in the layouts the Keras converter writes, built with `tflite_builder`
(no converter, no network), small enough for unit tests:

* `resnet18_style`: 3x3 stem, max pool, basic blocks (two 3x3 convs and a residual add, a
  strided 1x1 projection where the shape changes), global average pool (MEAN over H, W), FC;
* `mobilenet_v2_style`: inverted residuals (1x1 expand + RELU6, 3x3 depthwise + RELU6, 1x1
  project, residual add where the shape stays), 1x1 head, global average pool, FC;
* `ds_cnn_style`: DS-CNN keyword spotting: a strided 10x4 conv on a [49, 10] MFCC map,
  depthwise-separable blocks (3x3 depthwise + RELU, 1x1 + RELU), average pool over the map, FC
  (an output) and softmax (an output: flat here, the random weights shrink the logits).

Each returns its `Net` with its outputs marked (float input -> QUANTIZE ... DEQUANTIZE -> float).
"""

from __future__ import annotations

import tflite
from tflite_builder import ACT, B, Net

SAME, VALID = tflite.Padding.SAME, tflite.Padding.VALID


def _basic_block(n: Net, x, cout: int, stride: int):
    y = n.conv(x, cout, 3, stride, SAME, ACT.RELU)
    y = n.conv(y, cout, 3, 1, SAME, ACT.NONE)
    skip = x if stride == 1 and x.shape[3] == cout else n.conv(x, cout, 1, stride, SAME)
    return n.binary(B.ADD, y, skip, ACT.RELU)


def resnet18_style(seed: int = 0) -> Net:
    n = Net(seed=seed)
    x = n.input((1, 32, 32, 3), 0.02, -10)
    y = n.conv(x, 16, 3, 1, SAME, ACT.RELU)
    y = n.pool(y, B.MAX_POOL_2D, 3, 2, SAME)
    for cout, stride in ((16, 1), (16, 1), (32, 2), (32, 1), (64, 2), (64, 1)):
        y = _basic_block(n, y, cout, stride)
    g = n.mean(y, (1, 2), keep=False)
    n.output(n.fc(g, 10))
    return n


def _inverted_residual(n: Net, x, expand: int, cout: int, stride: int):
    y = n.conv(x, x.shape[3] * expand, 1, 1, SAME, ACT.RELU6) if expand > 1 else x
    y = n.conv(y, 1, 3, stride, SAME, ACT.RELU6, depthwise=True)
    y = n.conv(y, cout, 1, 1, SAME)
    return n.binary(B.ADD, y, x) if stride == 1 and x.shape[3] == cout else y


def mobilenet_v2_style(seed: int = 0) -> Net:
    n = Net(seed=seed)
    x = n.input((1, 32, 32, 3), 0.02, -10)
    y = n.conv(x, 16, 3, 2, SAME, ACT.RELU6)
    for expand, cout, stride in ((1, 8, 1), (6, 12, 2), (6, 12, 1), (6, 16, 2), (6, 16, 1),
                                 (6, 24, 1)):
        y = _inverted_residual(n, y, expand, cout, stride)
    y = n.conv(y, 64, 1, 1, SAME, ACT.RELU6)
    g = n.mean(y, (1, 2), keep=False)
    n.output(n.fc(g, 10))
    return n


def ds_cnn_style(seed: int = 0) -> Net:
    n = Net(seed=seed)
    x = n.input((1, 49, 10, 1), 0.1, 0)
    y = n.conv(x, 32, 3, 2, SAME, ACT.RELU)
    for _ in range(4):
        y = n.conv(y, 1, 3, 1, SAME, ACT.RELU, depthwise=True)
        y = n.conv(y, 32, 1, 1, SAME, ACT.RELU)
    y = n.pool(y, B.AVERAGE_POOL_2D, 5, 5, VALID)
    y = n.reshape(y, (1, y.shape[1] * y.shape[2] * y.shape[3]))
    logits = n.fc(y, 12)
    n.output(logits)
    n.output(n.softmax(logits))
    return n


MODELS = {"resnet18_style": resnet18_style, "mobilenet_v2_style": mobilenet_v2_style,
          "ds_cnn_style": ds_cnn_style}
