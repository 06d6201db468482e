"""Run SCALE-Sim v3 itself on a few GEMMs and convolutions and write its compute cycles.

The table it writes (``tests/data/scalesim_golden.json``) is the independent oracle for the
matrix engine's fold formula (docs/architecture.md, "Matrix engine cycles"): tests compare
Tessel's cycles with these numbers, never with a formula copied from Tessel's own code.

SCALE-Sim is not a Tessel dependency; install it only to regenerate the table::

    pip install scalesim==3.0.0
    PYTHONPATH=src python -m benchmarks.scalesim_golden [--out tests/data/scalesim_golden.json]

Every layer runs with SRAMs large enough and a DRAM interface wide enough that SCALE-Sim
reports no stall cycles, so its "Total Cycles" column is its compute cycles.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import tempfile
from pathlib import Path

ARRAYS = (16, 32)
DATAFLOWS = ("os", "ws")
# name, ifmap H, ifmap W, filter H, filter W, channels, filters, stride (SCALE-Sim's conv CSV)
CONVS = (
    ("conv3x3_c8_k16", 10, 10, 3, 3, 8, 16, 1),
    ("conv3x3_c16_k32", 8, 8, 3, 3, 16, 32, 1),
    ("conv1x1_c32_k24", 6, 6, 1, 1, 32, 24, 1),
    ("conv3x3_s2_c3_k8", 9, 9, 3, 3, 3, 8, 2),
)
# name, M, N, K (SCALE-Sim's GEMM CSV)
GEMMS = (
    ("gemm_16_16_16", 16, 16, 16),
    ("gemm_64_32_48", 64, 32, 48),
    ("gemm_100_40_300", 100, 40, 300),
    ("gemm_8_200_8", 8, 200, 8),
    ("gemm_1_64_128", 1, 64, 128),
)

_CONFIG = """[general]
run_name = {name}

[architecture_presets]
ArrayHeight: {rows}
ArrayWidth: {cols}
IfmapSramSzkB: 65536
FilterSramSzkB: 65536
OfmapSramSzkB: 65536
IfmapOffset: 0
FilterOffset: 10000000
OfmapOffset: 20000000
Dataflow: {df}
Bandwidth: 1024
ReadRequestBuffer: 32
WriteRequestBuffer: 32

[layout]
IfmapCustomLayout: False
IfmapSRAMBankBandwidth: 10
IfmapSRAMBankNum: 10
IfmapSRAMBankPort: 2
FilterCustomLayout: False
FilterSRAMBankBandwidth: 10
FilterSRAMBankNum: 10
FilterSRAMBankPort: 2

[sparsity]
SparsitySupport: false
SparseRep: ellpack_block
OptimizedMapping: false
BlockSize: 8
RandomNumberGeneratorSeed: 40

[run_presets]
InterfaceBandwidth: USER
UseRamulatorTrace: False
"""


def _write_inputs(tmp: Path, rows: int, df: str, gemm: bool) -> tuple[Path, Path, Path]:
    cfg = tmp / f"{df}{rows}.cfg"
    cfg.write_text(_CONFIG.format(name=f"{df}{rows}", rows=rows, cols=rows, df=df))
    topo, layout = tmp / ("gemm.csv" if gemm else "conv.csv"), tmp / "layout.csv"
    if gemm:
        lines = ["Layer, M, N, K,"] + [f"{n}, {m}, {nn}, {k}," for n, m, nn, k in GEMMS]
    else:
        lines = ["Layer, IFMAP H, IFMAP W, Filter H, Filter W, Channels, Num Filter, Strides,"]
        lines += [", ".join(str(x) for x in c) + "," for c in CONVS]
    topo.write_text("\n".join(lines) + "\n")
    n = len(GEMMS) if gemm else len(CONVS)
    header = "Layer, IFMAP H, IFMAP W, Filter H, Filter W, Channels, Num Filter, Strides,"
    layout.write_text("\n".join([header] + [f"l{i}, 1, 1, 1, 1, 1, 1, 1," for i in range(n)]))
    return cfg, topo, layout


def _numpy2_shim() -> None:
    """SCALE-Sim 3.0.0 calls ``int(max(...))`` on 1-element arrays (rows of an (n, 1) array,
    lists of them), which NumPy >= 2.4 rejects. Give its memory modules a ``max`` that returns
    the largest element as a scalar, the value each of those calls meant."""
    import numpy as np
    from scalesim.memory import double_buffered_scratchpad_mem, read_buffer

    def _max(*args):
        items = args[0] if len(args) == 1 else args
        return np.concatenate([np.ravel(np.asarray(x)) for x in items]).max()

    for module in (double_buffered_scratchpad_mem, read_buffer):
        module.max = _max


def _run(rows: int, df: str, gemm: bool) -> list[int]:
    from scalesim.scale_sim import scalesim

    _numpy2_shim()

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cfg, topo, layout = _write_inputs(tmp, rows, df, gemm)
        sim = scalesim(save_disk_space=True, verbose=False, config=str(cfg), topology=str(topo),
                       layout=str(layout), input_type_gemm=gemm)
        with contextlib.redirect_stdout(io.StringIO()):
            sim.run_scale(top_path=str(tmp / "out"))
        report = tmp / "out" / f"{df}{rows}" / "COMPUTE_REPORT.csv"
        with report.open() as f:
            body = list(csv.reader(f))[1:]
    cycles, stalls = [int(float(r[2])) for r in body], [int(float(r[3])) for r in body]
    if any(stalls):
        raise RuntimeError(f"SCALE-Sim reported stalls {stalls}: enlarge the SRAMs / bandwidth")
    return cycles


def golden_table() -> list[dict]:
    """One row per (layer, array, dataflow) with SCALE-Sim's compute cycles and the GEMM dims."""
    rows = []
    for size in ARRAYS:
        for df in DATAFLOWS:
            for name, m, n, k in GEMMS:
                rows.append(dict(layer=name, kind="gemm", m=m, n=n, k=k, rows=size, cols=size,
                                 dataflow=df))
            conv_rows = []
            for name, h, w, kh, kw, c, f, s in CONVS:
                oh, ow = (h - kh) // s + 1, (w - kw) // s + 1
                conv_rows.append(dict(layer=name, kind="conv", in_h=h, in_w=w, kh=kh, kw=kw,
                                      cin=c, cout=f, stride=s, m=oh * ow, n=f, k=kh * kw * c,
                                      rows=size, cols=size, dataflow=df))
            for row, cyc in zip(rows[-len(GEMMS):], _run(size, df, True), strict=True):
                row["scalesim_cycles"] = cyc
            for row, cyc in zip(conv_rows, _run(size, df, False), strict=True):
                row["scalesim_cycles"] = cyc
            rows.extend(conv_rows)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/data/scalesim_golden.json")
    args = ap.parse_args()
    from importlib.metadata import version

    table = {"tool": f"scalesim {version('scalesim')}", "layers": golden_table()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {len(table['layers'])} rows to {args.out}")


if __name__ == "__main__":
    main()
