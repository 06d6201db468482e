"""One-tile conv layers vs SCALE-Sim v3 run on the same layers (tests/data/scalesim_golden.json,
made by benchmarks/scalesim_golden.py): compiled with fold pipelining off, the matrix engine
is busy for SCALE-Sim's compute cycles (what it prints plus one: the last cycle's index, counted
from 0), and the output is bit-exact."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_conv_codegen import conv_graph, reference

from compile_region import compile_region
from tessel.arch import Dataflow, load_preset
from tessel.isa import Engine, Opcode
from tessel.ops import conv_emit
from tessel.ops.context import CodegenContext, ConstPool
from tessel.schedule.estimate import estimate_step
from tessel.schedule.plan import estimation_context
from tessel.sim import simulate
from tessel.sim.prepare import prepared
from tessel.sim.timing import instr_times

GOLDEN = json.loads((Path(__file__).parents[2] / "data" / "scalesim_golden.json").read_text())
DF = {"os": Dataflow.OUTPUT_STATIONARY, "ws": Dataflow.WEIGHT_STATIONARY}


def golden_arch(row: dict):
    """tnpu-s with the golden row's array, fold pipelining off and an operand path wide enough
    that the array, not operand delivery, sets the pace (as SCALE-Sim assumes)."""
    base = load_preset("tnpu-s")
    return base.with_params({"matrix.rows": row["rows"], "matrix.cols": row["cols"],
                             "matrix.dataflow": DF[row["dataflow"]],
                             "matrix.fold_pipelining": False,
                             "matrix.feed_bytes_per_cycle": 4096}, name="golden")


def matrix_busy(prog, arch) -> tuple[int, int]:
    """(matrix instructions, cycles the matrix engine spends in them) in the simulated run."""
    prep = prepared(prog, arch)
    sched = instr_times(prep)
    q = prep.queues[Engine.MATRIX]
    spans = [(s, e) for s, e, op in zip(sched.starts[Engine.MATRIX], sched.ends[Engine.MATRIX], q,
                                        strict=True) if op.opcode in (Opcode.CONV, Opcode.MATMUL)]
    return len(spans), sum(e - s for s, e in spans)


@pytest.mark.parametrize("row", [r for r in GOLDEN["layers"] if r["kind"] == "conv"],
                         ids=lambda r: f"{r['layer']}-{r['dataflow']}{r['rows']}")
def test_one_tile_conv_layer_matches_scalesim(row):
    arch = golden_arch(row)
    rng = np.random.default_rng(0)
    g = conv_graph(rng, h=row["in_h"], w=row["in_w"], c=row["cin"], cout=row["cout"],
                   k=row["kh"], s=row["stride"], p=0)
    node = g.nodes[-1]
    ctx = CodegenContext(arch, g, {}, ConstPool(0), 0)
    one_tile = conv_emit.ConvMapping(rows=node.type.shape[1], chunk=row["cout"])
    est_ctx = estimation_context(ctx)
    est = estimate_step(conv_emit.step(node, one_tile, est_ctx), arch)
    rp = compile_region(g, [node], ["x"], [node.name], arch, {"model": "t"},
                        units=[(node, one_tile, est)])
    count, busy = matrix_busy(rp.program, arch)
    assert count == 1, "the layer's GEMM must run as one tile"
    assert busy == row["scalesim_cycles"] + 1, (busy, row["scalesim_cycles"])
    x = rng.integers(-128, 128, g.inputs[0].type.shape).astype(np.int8)
    out = simulate(rp.program, arch, {"x": x}).outputs[node.name]
    np.testing.assert_array_equal(out, reference(g, x))
