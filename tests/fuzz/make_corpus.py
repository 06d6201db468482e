"""Regenerate the fuzz seed corpus (tests/fuzz/corpus/): small real compiled binaries, with
host graphs and metadata, for the .tsl / IR / asm harnesses, and small model files for the
importer harnesses (.onnx written with onnx.helper, int8 .tflite written by the test builder,
.pt2 saved by torch.export). Run from the repository root:

    PYTHONPATH=src python tests/fuzz/make_corpus.py
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

import tessel

CORPUS = Path(__file__).resolve().parent / "corpus"


class TinyCnn(nn.Module):
    """conv + relu + pool + residual add + linear + softmax: every engine and a host epilogue."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        y = self.pool(y + torch.relu(self.dw(y)))
        return torch.softmax(self.fc(y.flatten(1)), dim=-1)


class TinyMlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.b(torch.nn.functional.gelu(self.a(x))))


class TinyRegions(nn.Module):
    """conv -> cumsum (host) -> conv: two NPU regions with a host part between them (format 1.1)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(2, 4, 3, padding=1)
        self.b = nn.Conv2d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.cumsum(torch.relu(self.a(x)), dim=3))


def tiny_regions() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The factory the multi-region binary records as its source (so it stores references)."""
    torch.manual_seed(1)
    return TinyRegions().eval(), (torch.randn(1, 2, 6, 6),)


def main() -> None:
    torch.manual_seed(0)
    CORPUS.mkdir(exist_ok=True)
    for name, model, x in (("tiny_cnn", TinyCnn().eval(), torch.randn(1, 3, 8, 8)),
                           ("tiny_mlp", TinyMlp().eval(), torch.randn(2, 16))):
        cm = tessel.compile(model, (x,), target="tnpu-s", name=name)
        cm.save(CORPUS / f"{name}.tsl")
        print(name, len(cm.binary), "bytes, host graphs:", sorted(cm.program.host_graphs))
    model, inputs = tiny_regions()
    cm = tessel.compile(model, inputs, target="tnpu-s", name="tiny_regions",
                        source=f"{Path(__file__).relative_to(Path.cwd())}:tiny_regions")
    cm.save(CORPUS / "tiny_regions.tsl")
    print("tiny_regions", len(cm.binary), "bytes, host graphs:", sorted(cm.program.host_graphs),
          "metadata keys:", sorted(cm.program.metadata))
    model_files()


def model_files() -> None:
    """The importer seeds: two ONNX models (float CNN, QDQ), two int8 TFLite nets, two .pt2."""
    import sys

    sys.path.insert(0, str(CORPUS.parents[1] / "unit" / "frontend"))
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
    for p in sorted(CORPUS.glob("*.[opt][nf]*")):
        print(p.name, p.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
