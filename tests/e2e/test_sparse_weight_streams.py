"""2:4 sparse weights stored as weight streams: on a target with both 2:4 sparsity and the
weight decoder, the sparse convs' ranges become mode-3 streams (indices as packed ranks), the
constants shrink below the sparse ones without the decoder, the program runs bit-exact against
the golden model (also after a write / read of the binary) and the estimate agrees with the
simulation per layer; int4 + 2:4 ResNet-18 fits tnpu-xs's flash this way."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from zoo_cache import XS_SPARSE, resnet18_2_4_int4

import tessel
from tessel.analysis.estimate import estimate_graph
from tessel.arch import load_preset
from tessel.driver import compile_graph
from tessel.errors import TesselCompileError
from tessel.isa import Opcode
from tessel.isa.weight_codec import StreamMode
from tessel.quant.config import QuantConfig, WeightDtype
from tessel.runtime.compiled import CompiledModel


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 32, 3, padding=1)
        self.a = torch.nn.Conv2d(32, 64, 3, padding=1, stride=2)
        self.b = torch.nn.Conv2d(64, 64, 3, padding=1)
        self.fc = torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.b(torch.relu(self.a(torch.relu(self.stem(x))))))
        return self.fc(x.mean(dim=(2, 3)))


def _modes(cm) -> set[StreamMode]:
    blob = cm.program.constants
    return {StreamMode(blob[i.ext_addr]) for q in cm.program.streams.values() for i in q
            if i.opcode is Opcode.DMA_LOAD_W}


@pytest.mark.parametrize("weights", [WeightDtype.INT4, WeightDtype.INT8])
def test_sparse_blocks_as_streams(weights: WeightDtype) -> None:
    torch.manual_seed(0)
    pruned, _ = tessel.prune_2_4(_Net().eval())
    inputs = (torch.randn(1, 3, 16, 16),)
    calib = [(torch.randn(1, 3, 16, 16),) for _ in range(4)]
    qm = tessel.quantize(pruned, inputs, calibration_data=calib,
                         quant_config=QuantConfig(weights=weights))
    arch = load_preset("tnpu-xs").with_params({"sparse.enabled": True,
                                               "wdecoder.enabled": True})
    cm = compile_graph(qm.graph, arch, name="net")
    plain = compile_graph(qm.graph, arch.with_param("wdecoder.enabled", False), name="net")
    assert StreamMode.SPARSE24 in _modes(cm)
    assert len(cm.program.constants) < len(plain.program.constants)
    want = qm.run(*inputs)
    for run in (cm.run(*inputs), CompiledModel.from_bytes(cm.binary).run(*inputs)):
        for got, w in zip(run, want, strict=True):
            np.testing.assert_array_equal(got, w)
    est = {la.name: la.cycles for la in estimate_graph(qm.graph, arch, name="net").layers}
    sim = {la.name: la.cycles for la in cm.profile.layers}
    assert est == sim


def test_the_flash_holds_the_stored_bytes() -> None:
    """A flash between the stored and the raw constants: the decoder's program compiles and
    estimates (the fit is checked on the streams), without the decoder it is refused."""
    torch.manual_seed(1)
    pruned, _ = tessel.prune_2_4(_Net().eval())
    inputs = (torch.randn(1, 3, 16, 16),)
    qm = tessel.quantize(pruned, inputs, calibration_data=[inputs],
                         quant_config=QuantConfig(weights=WeightDtype.INT4))
    arch = load_preset("tnpu-xs").with_params({"sparse.enabled": True,
                                               "wdecoder.enabled": True})
    stored = len(compile_graph(qm.graph, arch, name="net").program.constants)
    raw = len(compile_graph(qm.graph, arch.with_param("wdecoder.enabled", False),
                            name="net").program.constants)
    assert stored < raw
    small = arch.with_param("offchip.flash.size_bytes", stored)
    assert len(compile_graph(qm.graph, small, name="net").program.constants) == stored
    assert estimate_graph(qm.graph, small, name="net").cycles > 0
    with pytest.raises(TesselCompileError, match=f"constants need {raw} bytes"):
        compile_graph(qm.graph, small.with_param("wdecoder.enabled", False), name="net")


@pytest.mark.slow
@pytest.mark.xdist_group("resnet18-2-4")  # the model is shared with test_c_sparse_models
def test_int4_2_4_resnet18_fits_tnpu_xs_bit_exact() -> None:
    """ResNet-18 pruned 2:4, int4 weights: 4.51 MB of constants stored raw, over tnpu-xs's
    4 MiB flash; with the weight decoder its sparse blocks' streams fit, and it runs bit-exact
    on one input."""
    qm, cm, inputs, _ = resnet18_2_4_int4()
    xs = load_preset("tnpu-xs").with_params(XS_SPARSE)
    flash = xs.offchip[xs.memory_index(xs.weights_memory)].size_bytes
    with pytest.raises(TesselCompileError, match="constants need"):
        compile_graph(qm.graph, xs.with_param("wdecoder.enabled", False), name="resnet18")
    assert len(cm.program.constants) <= flash
    assert StreamMode.SPARSE24 in _modes(cm)
    for got, want in zip(cm.run(*inputs), qm.run(*inputs), strict=True):
        np.testing.assert_array_equal(got, want)
