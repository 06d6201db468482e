"""Matrix-engine cycles vs SCALE-Sim v3 run on the same layers (tests/data/scalesim_golden.json,
made by benchmarks/scalesim_golden.py): with fold pipelining off, a layer whose GEMM runs as
one tile keeps the matrix engine busy for SCALE-Sim's compute cycles: what it prints plus one
(it prints the last cycle's index, counted from 0)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from simkit import I, program

from tessel.arch import Dataflow, load_preset
from tessel.isa import Engine, Opcode
from tessel.sim.prepare import prepared
from tessel.sim.timing import instr_times

GOLDEN = json.loads((Path(__file__).parents[2] / "data" / "scalesim_golden.json").read_text())
ROWS = GOLDEN["layers"]
DF = {"os": Dataflow.OUTPUT_STATIONARY, "ws": Dataflow.WEIGHT_STATIONARY}


def _arch(row: dict):
    """tnpu-s with the golden row's array, fold pipelining off and an operand path wide enough
    that the array, not operand delivery, sets the pace (as SCALE-Sim assumes)."""
    base = load_preset("tnpu-s")
    matrix = dataclasses.replace(base.matrix, rows=row["rows"], cols=row["cols"],
                                 dataflow=DF[row["dataflow"]], fold_pipelining=False)
    arch = dataclasses.replace(base, name="golden", matrix=matrix)
    return arch.with_param("matrix.feed_bytes_per_cycle", 4096)


def _matrix_busy(prog, arch) -> tuple[int, int]:
    """(matrix instructions, cycles the matrix engine spends in them) in the simulated run."""
    prep = prepared(prog, arch)
    sched = instr_times(prep)
    q = prep.queues[Engine.MATRIX]
    spans = [(s, e) for s, e, op in zip(sched.starts[Engine.MATRIX], sched.ends[Engine.MATRIX], q,
                                        strict=True) if op.opcode in (Opcode.CONV, Opcode.MATMUL)]
    return len(spans), sum(e - s for s, e in spans)


@pytest.mark.parametrize("row", [r for r in ROWS if r["kind"] == "gemm"],
                         ids=lambda r: f"{r['layer']}-{r['dataflow']}{r['rows']}")
def test_gemm_tile_matches_scalesim(row):
    arch = _arch(row)
    m, n, k = row["m"], row["n"], row["k"]
    mm = I(Opcode.MATMUL, m=m, n=n, k=k, a_addr=0, a_stride_m=k, b_addr=0x40000, b_stride_k=n,
           acc_addr=0, acc_stride=n)
    count, busy = _matrix_busy(program({Engine.MATRIX: [mm]}, arch), arch)
    assert count == 1
    assert busy == row["scalesim_cycles"] + 1, (busy, row["scalesim_cycles"])


def test_golden_table_covers_both_arrays_and_dataflows():
    assert {(r["rows"], r["dataflow"]) for r in ROWS} == {(16, "os"), (16, "ws"), (32, "os"),
                                                          (32, "ws")}
    assert GOLDEN["tool"].startswith("scalesim 3.")
