"""Weight compression end to end: zoo models compiled for a target with the weight decoder
(`wdecoder.enabled`) store smaller constants, run bit-exact against the golden model (the
simulator decoding the streams, also after a write / read of the binary, and the C runtime on
the C NPU model decoding them too), and no layer takes more simulated cycles than without the
decoder."""

from __future__ import annotations

import numpy as np
import pytest
from zoo_cache import golden, quantized

from tessel.arch import load_preset
from tessel.driver import compile_graph
from tessel.isa import Opcode
from tessel.runtime.cengine import available
from tessel.runtime.compiled import CompiledModel

CASES = [("digits_cnn", "tnpu-s"), ("ds_cnn", "tnpu-s"),
         pytest.param("mobilenet_v2", "u55-256", marks=pytest.mark.slow),
         pytest.param("resnet18", "u55-256", marks=pytest.mark.slow)]


@pytest.mark.parametrize(("name", "preset"), CASES)
def test_compressed_weights_bit_exact_never_slower(name: str, preset: str) -> None:
    qm, inputs, _ = quantized(name)
    plain = compile_graph(qm.graph, load_preset(preset), name=name)
    arch = load_preset(preset).with_param("wdecoder.enabled", True)
    cm = compile_graph(qm.graph, arch, name=name)
    decoded = [i for q in cm.program.streams.values() for i in q
               if i.opcode is Opcode.DMA_LOAD_W]
    assert decoded and len(cm.program.constants) < len(plain.program.constants)
    again = CompiledModel.from_bytes(cm.binary)  # its target read back from the binary
    assert again.arch.wdecoder.enabled
    runs = [cm.run(*inputs), again.run(*inputs)]
    if available() is None:  # the C runtime's decoder: the same bits
        runs.append(again.run(*inputs, engine="c"))
    for run in runs:
        for got, want in zip(run, golden(name), strict=True):
            np.testing.assert_array_equal(got, want)
    assert cm.profile.cycles <= plain.profile.cycles
    for a, b in zip(plain.profile.layers, cm.profile.layers, strict=True):
        assert a.name == b.name and b.cycles <= a.cycles, (a.name, a.cycles, b.cycles)
