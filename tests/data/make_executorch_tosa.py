"""Writes tests/data/executorch_cnn.tosa and executorch_residual.tosa: a small int8 CNN (conv,
relu, max pool, average pool, linear; the residual one adds a residual add) quantised and lowered
to TOSA 1.0 flatbuffers by ExecuTorch's Arm backend (TOSA-1.0+INT).

Needs ExecuTorch (the ``executorch`` optional extra, installed without changing torch:
``echo torch==$(python -c 'import torch; print(torch.__version__.split("+")[0])') > pin.txt;
pip install -c pin.txt executorch``). The tests read the committed file and do not need it.
Run: ``python tests/data/make_executorch_tosa.py [out_dir]``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch
from executorch.backends.arm.quantizer import TOSAQuantizer, get_symmetric_quantization_config
from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
from executorch.exir import to_edge_transform_and_lower
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

OUT = Path(__file__).parent


class SmallCnn(torch.nn.Module):
    """conv-relu, conv (+ the residual when ``residual``)-relu, max pool, average pool, linear."""

    def __init__(self, residual: bool) -> None:
        super().__init__()
        self.residual = residual
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.pool = torch.nn.MaxPool2d(2)
        self.avg = torch.nn.AvgPool2d(3, stride=1)
        self.fc = torch.nn.Linear(8 * 2 * 2, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(self.conv1(x))
        b = torch.relu(self.conv2(a) + a if self.residual else self.conv2(a))
        p = self.avg(self.pool(b))
        return self.fc(torch.flatten(p, 1))


def lower(model: torch.nn.Module, out: Path) -> None:
    """Quantise ``model`` (symmetric int8, calibrated on random inputs) and write the TOSA
    flatbuffer of its one delegated partition to ``out``."""
    example = (torch.randn(1, 3, 8, 8),)
    spec = TosaCompileSpec("TOSA-1.0+INT")
    with tempfile.TemporaryDirectory() as tmp:
        spec.dump_intermediate_artifacts_to(tmp)
        quantizer = TOSAQuantizer(spec)
        quantizer.set_global(get_symmetric_quantization_config())
        prepared = prepare_pt2e(torch.export.export(model, example).module(), quantizer)
        for _ in range(8):
            prepared(torch.randn(1, 3, 8, 8))
        quantised = convert_pt2e(prepared)
        to_edge_transform_and_lower(torch.export.export(quantised, example),
                                    partitioner=[TOSAPartitioner(spec)])
        files = sorted(Path(tmp).rglob("*.tosa"))
        if len(files) != 1:
            raise SystemExit(f"expected one delegated TOSA graph, got {[f.name for f in files]}")
        out.write_bytes(files[0].read_bytes())
    print(f"wrote {out} ({out.stat().st_size} bytes)")


def main(folder: Path) -> None:
    for name, residual in (("executorch_cnn", False), ("executorch_residual", True)):
        torch.manual_seed(0)
        lower(SmallCnn(residual).eval(), folder / f"{name}.tosa")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
