"""Per-layer profile JSON (docs/analysis.md): busy cycles per engine, matrix tiles and their
GEMM dims, first/last instruction index, bytes per memory; checked against the simulation."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
from test_conv_codegen import conv_graph

from compile_region import compile_region
from tessel.arch import load_preset
from tessel.isa import Engine, Opcode
from tessel.runtime.profile import build_profile


def test_layer_fields_match_the_simulation() -> None:
    arch = load_preset("tnpu-s")
    rng = np.random.default_rng(3)
    g = conv_graph(rng, h=14, w=14, c=8, cout=24)
    node = g.nodes[-1]
    rp = compile_region(g, [node], ["x"], [node.name], arch, {"model": "t"})
    lay = rp.layers[0]
    meta = {"model": "t", "layers": [{
        "name": lay.name, "op": lay.op, "loc": lay.loc, "mapping": lay.mapping, "bound": "x",
        "estimated_cycles": lay.estimate.cycles, "first": lay.first_instr,
        "last": lay.last_instr}]}
    prog = dataclasses.replace(rp.program, metadata=meta)
    prof = build_profile(prog, arch)
    row = json.loads(prof.to_json())["layers"][0]
    convs = [i for i in prog.streams[Engine.MATRIX] if i.opcode is Opcode.CONV]
    assert row["matrix_tiles"] == len(convs) > 0
    m, n, k = row["tile_gemm"]
    assert k == 3 * 3 * 8 and n <= 24 and m <= 14 * 14
    assert set(row["busy_cycles"]) == {e.name for e in Engine}
    assert 0 < row["busy_cycles"]["MATRIX"] <= row["cycles"]
    assert row["busy_cycles"]["DMA_IN"] > 0 and row["busy_cycles"]["DMA_OUT"] > 0
    assert row["first_instr"] == lay.first_instr and row["last_instr"] == lay.last_instr
    mem = row["memory_bytes"]
    assert mem["lpddr"] == sum(row["bytes_read"].values()) + sum(row["bytes_written"].values())
    assert mem["lpddr"] >= 14 * 14 * 8 + 14 * 14 * 24 + 3 * 3 * 8 * 24
    assert mem["sram"] > 0 and mem["operand"] > 0 and mem["acc"] > 0
