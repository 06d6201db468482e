"""`estimate_graph` reads the Schedule `compile_graph` builds (tessel.schedule.plan): its cycles
are the compiled layers' estimates added up, layer by layer, with on-chip residency off and on;
and its off-chip bytes are those of the instructions compile emits (the simulator counts them)."""

from __future__ import annotations

import pytest
from zoo_cache import quantized

from tessel.analysis.estimate import estimate_graph
from tessel.arch import CompileOptions, load_preset
from tessel.driver import compile_graph


@pytest.mark.parametrize("residency", [False, True], ids=["dram", "resident"])
@pytest.mark.parametrize("preset", ["tnpu-s", "u65-512"])
@pytest.mark.parametrize("name", [pytest.param(m, marks=pytest.mark.xdist_group(f"zoo-{m}"))
                                  for m in ("digits_cnn", "ds_cnn")])
def test_estimate_is_the_compiled_schedule(name, preset, residency):
    qm, _, _ = quantized(name)
    arch = load_preset(preset)
    options = CompileOptions(on_chip_residency=residency)
    est = estimate_graph(qm.graph, arch, name=name, options=options)
    cm = compile_graph(qm.graph, arch, name=name, options=options)
    layers = cm.program.metadata["layers"]
    assert [(x.name, x.mapping, x.cycles) for x in est.layers] == \
        [(x["name"], x["mapping"], x["estimated_cycles"]) for x in layers]
    assert est.cycles == sum(x["estimated_cycles"] for x in layers)
    prof = cm.profile
    assert est.bytes_read == prof.bytes_read and est.bytes_written == prof.bytes_written


@pytest.mark.parametrize("name", [pytest.param("ds_cnn", marks=pytest.mark.xdist_group("zoo-ds_cnn"))])
def test_residency_changes_the_estimate(name):
    """The option reaches the estimate: DS-CNN on tnpu-s keeps activations on chip, so fewer
    off-chip bytes are written and fewer cycles estimated than without it."""
    qm, _, _ = quantized(name)
    arch = load_preset("tnpu-s")
    off = estimate_graph(qm.graph, arch, options=CompileOptions(on_chip_residency=False))
    on = estimate_graph(qm.graph, arch, options=CompileOptions(on_chip_residency=True))
    assert sum(on.bytes_written.values()) < sum(off.bytes_written.values())
    assert on.cycles < off.cycles
