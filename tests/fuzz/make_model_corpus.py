"""Regenerate the importer harnesses' seed files (tests/fuzz/corpus/): two ONNX models written
with onnx.helper (a float CNN and a QDQ model), two int8 TFLite nets written by the test
builder, two .pt2 programs saved by torch.export and four TOSA files (Tessel's export and
tosa-converter-for-tflite's of one small net, the converter's int8 and int16 softmax). Run
from the repository root:

    PYTHONPATH=src python tests/fuzz/make_model_corpus.py

(make_corpus.py writes the .tsl seeds; it is kept apart because a binary records the sha256
of the file its model came from.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

CORPUS = Path(__file__).resolve().parent / "corpus"
sys.path.insert(0, str(CORPUS.parent))
sys.path.insert(0, str(CORPUS.parents[1] / "unit" / "frontend"))

from make_corpus import TinyMlp, tiny_regions  # noqa: E402


def model_files() -> None:
    """The importer seeds: two ONNX models (float CNN, QDQ), two int8 TFLite nets, two .pt2."""
    import tflite
    from onnx_helpers import helper_cnn, helper_qdq
    from tflite_builder import Net

    (CORPUS / "helper_cnn.onnx").write_bytes(helper_cnn())
    (CORPUS / "helper_qdq.onnx").write_bytes(helper_qdq())
    b, act, pad = tflite.BuiltinOperator, tflite.ActivationFunctionType, tflite.Padding
    n = Net(seed=42)
    x = n.input((1, 8, 8, 3), 0.02, -10)
    y = n.conv(x, 4, 3, 2, pad.SAME, act.RELU6)
    d = n.conv(y, 1, 3, 1, pad.SAME, act.RELU6, depthwise=True)
    s = n.binary(b.ADD, d, n.conv(y, 4, 1, 1, pad.SAME))
    c = n.concat([n.unary(s, b.HARD_SWISH), n.pool(y, b.MAX_POOL_2D, 1, 1)], 3)
    g = n.mean(c, (1, 2), keep=False)
    n.output(n.softmax(n.fc(g, 5)))
    (CORPUS / "small_cnn.tflite").write_bytes(n.build())
    n = Net(seed=7)
    x = n.input((1, 12), 0.03, 2)
    h = n.fc(x, 8, act.RELU)
    r = n.reshape(h, (1, 2, 4))
    n.output(n.unary(n.pad(r, [(0, 0), (1, 0), (0, 1)]), b.LOGISTIC))
    (CORPUS / "small_mlp.tflite").write_bytes(n.build())
    torch.manual_seed(0)
    for name, model, x in (("tiny_mlp", TinyMlp().eval(), torch.randn(2, 16)),
                           ("tiny_regions", tiny_regions()[0], torch.randn(1, 2, 6, 6))):
        torch.export.save(torch.export.export(model, (x,)), CORPUS / f"{name}.pt2")
    tosa_files()
    for p in sorted(CORPUS.glob("*.[opt][nfo]*")):
        print(p.name, p.stat().st_size, "bytes")


def tosa_files() -> None:
    """The TOSA seeds: a small int8 net exported by Tessel, the same net written by
    tosa-converter-for-tflite (serialised by tosa-opt) where the converter is installed, and the
    converter's softmax chains."""
    import tflite
    from tflite_builder import Net

    from tessel.frontend.tflite_import import tflite_module
    from tessel.frontend.tosa_export import export_tosa
    from tessel.quant.api import quantized_import

    b, act, pad = tflite.BuiltinOperator, tflite.ActivationFunctionType, tflite.Padding
    n = Net(seed=11)
    x = n.input((1, 8, 8, 3), 0.02, -10)
    y = n.conv(x, 4, 3, 2, pad.SAME, act.RELU6)
    d = n.conv(y, 1, 3, 1, pad.SAME, act.RELU6, depthwise=True)
    s = n.binary(b.ADD, d, n.conv(y, 4, 1, 1, pad.SAME))
    p = n.pool(s, b.MAX_POOL_2D, 2, 2)
    n.output(n.fc(n.mean(p, (1, 2), keep=False), 5))
    data = n.build()
    model, _ = tflite_module(data)
    (CORPUS / "small_cnn.tosa").write_bytes(export_tosa(quantized_import(model).graph).to_bytes())
    converted("small_cnn_converted.tosa", data)
    softmax_files()


def softmax_files() -> None:
    """The converter's int8 and int16 softmax chains alone, over rows of 16 (the importer's
    template matching of `tosa_softmax`)."""
    import tflite
    from tflite_builder import B, Net, TfliteBuilder

    n = Net(seed=1)
    n.output(n.softmax(n.input((2, 16), 0.05, 3)))
    converted("softmax_converted.tosa", n.build())
    i16, f32 = tflite.TensorType.INT16, tflite.TensorType.FLOAT32
    b = TfliteBuilder()
    f, o = b.tensor("in", (2, 16), f32), b.tensor("out", (2, 16), f32)
    q, y = b.tensor("q", (2, 16), i16, (0.001,), (0,)), b.tensor("y", (2, 16), i16, (1 / 32768,), (0,))
    b.op(B.QUANTIZE, [f], [q])
    b.op(B.SOFTMAX, [q], [y], "SoftmaxOptions", Beta=1.0)
    b.op(B.DEQUANTIZE, [y], [o])
    converted("softmax16_converted.tosa", b.build([f], [o]))


def converted(name: str, tflite_data: bytes) -> None:
    """The .tosa tosa-converter-for-tflite writes for the .tflite (serialised by tosa-opt),
    where the converter is installed."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        src, mlir = Path(tmp) / "m.tflite", Path(tmp) / "m.mlir"
        src.write_bytes(tflite_data)
        try:
            subprocess.run(["tosa-converter-for-tflite", str(src), "--text", "-o", str(mlir)],
                           check=True, capture_output=True)
            subprocess.run(["tosa-opt", f"--tosa-serialize=tosa-flatbuffer-filename={CORPUS / name}",
                            str(mlir), "-o", "/dev/null"], check=True, capture_output=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            print(f"{name} not written: {exc}")


if __name__ == "__main__":
    model_files()
