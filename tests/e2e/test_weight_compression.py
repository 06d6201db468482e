"""Weight compression end to end: zoo models compiled for a target with the weight decoder
(`wdecoder.enabled`) store smaller constants, run bit-exact against the golden model (the
simulator decoding the streams, also after a write / read of the binary, and the C runtime on
the C NPU model decoding them too), no layer takes more simulated cycles than without the decoder, and the
analytical estimate (recorded in the binary, and `estimate_graph`'s) is that of the compressed
program, within the bounds docs/benchmarks.md gives for every zoo model."""

from __future__ import annotations

import numpy as np
import pytest
from zoo_cache import golden, quantized

from tessel.analysis.estimate import estimate_graph
from tessel.arch import load_preset
from tessel.driver import compile_graph
from tessel.isa import Opcode
from tessel.runtime.cengine import available
from tessel.runtime.compiled import CompiledModel

CASES = [("digits_cnn", "tnpu-s"), ("ds_cnn", "tnpu-s"),
         pytest.param("mobilenet_v2", "u55-256", marks=pytest.mark.slow)]
# ResNet-18 on u55-256 (a flash-bound network) is make bench's "never slower" target row


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
    _within_estimate_bounds(cm, qm.graph, arch, name)


def _within_estimate_bounds(cm: CompiledModel, graph, arch, name: str) -> None:
    """Estimate vs simulated with the decoder on: whole model <= 2 %, per layer p90 <= 5 % and
    max <= 15 % (docs/benchmarks.md); `tessel estimate`'s cycles are the binary's estimates,
    its off-chip bytes the simulated ones."""
    layers = [x for x in cm.profile.layers if x.cycles]
    est = sum(x.estimated_cycles for x in cm.profile.layers)
    whole = (est - cm.profile.cycles) / cm.profile.cycles
    errs = sorted(abs(x.estimated_cycles - x.cycles) / x.cycles for x in layers)
    p90 = errs[max(0, -(-9 * len(errs) // 10) - 1)]
    assert abs(whole) <= 0.02 and p90 <= 0.05 and errs[-1] <= 0.15, (whole, p90, errs[-1])
    full = estimate_graph(graph, arch, name=name)
    assert full.cycles == est
    # the energy events too: the stream bytes read off chip, the bytes decoded
    assert full.bytes_read == cm.profile.bytes_read
    assert abs(full.energy_uj - cm.profile.energy_uj) <= 0.005 * cm.profile.energy_uj
