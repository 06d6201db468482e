"""Regenerate the fuzz seed corpus (tests/fuzz/corpus/): small real compiled binaries, with
host graphs and metadata, for the .tsl / IR / asm harnesses, and for the C loader's fuzzer one
compiled for a target with the weight decoder, its weights in DMA_LOAD_W streams
(corpus/wdecoder/), one with 2:4 sparse CONV weights (corpus/sparse/), and one with both, its
2:4 weights in mode-3 streams (corpus/wdecoder/). Run from the repository root:

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


def wdecoder_seed() -> None:
    """tiny_cnn for tnpu-s with the weight decoder: its weights load as weight streams."""
    from tessel.arch import load_preset

    torch.manual_seed(0)
    model, x = TinyCnn().eval(), torch.randn(1, 3, 8, 8)
    arch = load_preset("tnpu-s").with_param("wdecoder.enabled", True)
    cm = tessel.compile(model, (x,), target=arch, name="tiny_cnn_wdecoder")
    (CORPUS / "wdecoder").mkdir(exist_ok=True)
    cm.save(CORPUS / "wdecoder" / "tiny_cnn_wdecoder.tsl")
    loads = sum(i.opcode.name == "DMA_LOAD_W" for q in cm.program.streams.values() for i in q)
    print("tiny_cnn_wdecoder", len(cm.binary), "bytes, DMA_LOAD_W:", loads)


class TinySparse(nn.Module):
    """A dense stem, two convs pruned to 2:4 (tessel.prune_2_4), a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.a = nn.Conv2d(8, 16, 3, padding=1, stride=2)
        self.b = nn.Conv2d(16, 16, 1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(torch.relu(self.stem(x))))
        return self.fc(torch.relu(self.b(y)).mean(dim=(2, 3)))


def sparse_seed() -> None:
    """TinySparse pruned to 2:4 for tnpu-s with sparse.enabled: CONVs with I8_2_4 weights."""
    from tessel.arch import load_preset

    torch.manual_seed(0)
    model, _ = tessel.prune_2_4(TinySparse().eval())
    arch = load_preset("tnpu-s").with_param("sparse.enabled", True)
    cm = tessel.compile(model, (torch.randn(1, 3, 8, 8),), target=arch, name="tiny_cnn_2_4")
    (CORPUS / "sparse").mkdir(exist_ok=True)
    cm.save(CORPUS / "sparse" / "tiny_cnn_2_4.tsl")
    sparse = sum(i.opcode.name == "CONV" and i.w_type >= 2 for q in cm.program.streams.values()
                 for i in q)
    print("tiny_cnn_2_4", len(cm.binary), "bytes, sparse CONVs:", sparse)


def sparse_wdecoder_seed() -> None:
    """TinySparse pruned to 2:4 for tnpu-s with sparse.enabled and the weight decoder: its 2:4
    CONV weights load as mode-3 weight streams (2:4 blocks)."""
    from tessel.arch import load_preset

    torch.manual_seed(0)
    model = TinySparse().eval()
    with torch.no_grad():  # heavy-tailed weights, as trained ones are: their streams are coded
        for m in (model.stem, model.a, model.b, model.fc):
            m.weight.copy_(torch.randn(m.weight.shape) ** 3 * 0.05)
    model, _ = tessel.prune_2_4(model)
    arch = load_preset("tnpu-s").with_param("sparse.enabled", True).with_param(
        "wdecoder.enabled", True)
    cm = tessel.compile(model, (torch.randn(1, 3, 8, 8),), target=arch,
                        name="tiny_cnn_2_4_wdecoder")
    (CORPUS / "wdecoder").mkdir(exist_ok=True)
    cm.save(CORPUS / "wdecoder" / "tiny_cnn_2_4_wdecoder.tsl")
    loads = sum(i.opcode.name == "DMA_LOAD_W" for q in cm.program.streams.values() for i in q)
    print("tiny_cnn_2_4_wdecoder", len(cm.binary), "bytes, DMA_LOAD_W:", loads)


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
    wdecoder_seed()
    sparse_seed()
    sparse_wdecoder_seed()


if __name__ == "__main__":
    main()
