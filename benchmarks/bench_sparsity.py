"""2:4 structured sparsity on the NPU: a zoo model pruned by ``tessel.prune_2_4`` (no
fine-tune), compiled dense (the preset) and sparse (``sparse.enabled``), per target and weight
precision: matrix-engine cycles on the convolutions, total cycles, constants bytes, energy,
outputs checked against the golden model; and the pruned float model's SQNR against the
unpruned float model (the accuracy pruning costs, measured on held-out inputs).

Run: ``python -m benchmarks.bench_sparsity [MODEL] [--targets A,B] [--int4 PRESET,...]``;
prints two markdown tables. Figures: ``sparse_conv_matrix_speedup/MODEL/PRESET`` (dense /
sparse matrix cycles on convs), ``sparse_bytes_ratio/MODEL/PRESET`` (sparse / dense constants
bytes, int8), ``sparse_int4_constants/MODEL/PRESET`` (constants bytes of int4 + 2:4, the
weight decoder on), ``sparse_WEIGHTS_exact/MODEL/PRESET`` (1 when bit-exact) and
``sparse_sqnr_db/MODEL``.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, replace

import numpy as np

from benchmarks.report import Section
from tessel.analysis.accuracy import eval_set, sqnr_db
from tessel.analysis.precision import float_outputs, golden_outputs
from tessel.arch import load_preset
from tessel.driver import compile_graph
from tessel.errors import TesselCompileError
from tessel.ir import Op
from tessel.models import load, resolve
from tessel.prune import prune_2_4
from tessel.quant.api import quantize
from tessel.quant.config import WeightDtype, default_config

MODEL = "resnet18"
TARGETS = ["u55-256", "tnpu-s"]
INT4_TARGETS = ["tnpu-xs"]  # int4 + 2:4: whether ResNet-18 fits the 4 MB flash
INT4_SETTINGS = {"wdecoder.enabled": True}  # int4 runs: weight streams (2:4 blocks: mode 3)
CALIBRATION = 8
HELD_OUT = 4
FINETUNE_STEPS = 16  # SGD steps of the fine-tuned variant (accuracy only; not compiled)
FINETUNE_LR = 1e-2
HEAD = ("| model | target | weights | weights stored | matrix cycles on convs | cycles "
        "| constants bytes | energy uJ | bit-exact |\n|---|---|---|---|---:|---:|---:|---:|---|")


@dataclass(frozen=True)
class Refused:
    why: str
    constants: int | None  # the constants bytes the target could not hold, when it says


@dataclass(frozen=True)
class Run:
    conv_matrix: int  # MATRIX busy cycles of the conv layers
    cycles: int
    constants: int
    energy_uj: float
    exact: bool


def _run(graph, name: str, preset: str, sparse: bool, inputs: list, want: list,
         settings: dict | None = None) -> Run | Refused:
    arch = load_preset(preset).with_params({**(settings or {}), "sparse.enabled": sparse})
    try:
        cm = compile_graph(graph, arch, name=name)
    except TesselCompileError as exc:
        need = re.search(r"constants need (\d+) bytes", str(exc))
        return Refused(str(exc).split(":")[-1].strip(), int(need[1]) if need else None)
    prof = cm.profile
    # a 2:4 linear layer runs as a conv on a sparse target (its name kept): not a conv here
    linears = {n.name for n in graph.nodes if n.op is Op.QLINEAR}
    conv = sum(la.busy_cycles.get("MATRIX", 0) for la in prof.layers
               if "conv" in la.op and la.name not in linears)
    got = cm.run(*inputs)
    exact = all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    return Run(conv, prof.cycles, len(cm.program.constants), prof.energy_uj, exact)


def _row(name: str, preset: str, weights: str, stored: str, r: Run | Refused,
         base: Run | Refused | None) -> str:
    if isinstance(r, Refused):
        return f"| {name} | {preset} | {weights} | {stored} | - | - | refused: {r.why} | - | - |"

    def vs(x: float, y: float | None) -> str:
        return "" if y is None else f" ({x / y:.3f})"

    b = base if isinstance(base, Run) else None
    return (f"| {name} | {preset} | {weights} | {stored} "
            f"| {r.conv_matrix:,}{vs(r.conv_matrix, b and b.conv_matrix)} "
            f"| {r.cycles:,}{vs(r.cycles, b and b.cycles)} "
            f"| {r.constants:,}{vs(r.constants, b and b.constants)} "
            f"| {r.energy_uj:,.1f}{vs(r.energy_uj, b and b.energy_uj)} "
            f"| {'yes' if r.exact else 'NO'} |")


def run(model_name: str = MODEL, targets: list[str] | None = None,
        int4_targets: list[str] | None = None) -> Section:
    targets = TARGETS if targets is None else targets
    int4_targets = INT4_TARGETS if int4_targets is None else int4_targets
    spec = resolve(model_name)
    model, example = load(model_name)
    pruned, report = prune_2_4(model)
    calibration = list(spec.calibration_data(CALIBRATION))
    held_out = eval_set(spec, CALIBRATION, HELD_OUT, example)[0][:HELD_OUT]
    dense_f = float_outputs(model, held_out)
    sqnr = sqnr_db(dense_f[0], float_outputs(pruned, held_out)[0])
    tuned, _ = prune_2_4(model, finetune_data=calibration, steps=FINETUNE_STEPS, lr=FINETUNE_LR)
    tuned_sqnr = sqnr_db(dense_f[0], float_outputs(tuned, held_out)[0])
    figures: dict[str, float] = {f"sparse_sqnr_db/{model_name}": sqnr,
                                 f"sparse_finetuned_sqnr_db/{model_name}": tuned_sqnr}
    rows = []
    inputs = [t.numpy() for t in example]
    for weights, presets in (("int8", targets), ("int4", int4_targets)):
        if not presets:
            continue
        config = default_config(spec.name)
        if weights == "int4":
            config = replace(config, weights=WeightDtype.INT4)
        qm = quantize(pruned, example, calibration, config, calibration_samples=CALIBRATION)
        want = qm.run(*inputs)
        q_sqnr = sqnr_db(dense_f[0], golden_outputs(qm, held_out)[0])
        figures[f"sparse_{weights}_golden_sqnr_db/{model_name}"] = q_sqnr
        settings = INT4_SETTINGS if weights == "int4" else {}
        where = "".join(f", {k}={str(v).lower()}" for k, v in settings.items())
        for preset in presets:
            dense = _run(qm.graph, model_name, preset, False, inputs, want, settings)
            sparse = _run(qm.graph, model_name, preset, True, inputs, want, settings)
            rows += [_row(model_name, preset + where, weights, "dense", dense, None),
                     _row(model_name, preset + where, weights, "2:4 where exact", sparse,
                          dense)]
            print(rows[-2] + "\n" + rows[-1], file=sys.stderr, flush=True)
            if isinstance(dense, Run) and isinstance(sparse, Run) and weights == "int8":
                figures[f"sparse_conv_matrix_speedup/{model_name}/{preset}"] = (
                    dense.conv_matrix / sparse.conv_matrix)
                figures[f"sparse_bytes_ratio/{model_name}/{preset}"] = (
                    sparse.constants / dense.constants)
            if sparse.constants is not None:
                figures[f"sparse_{weights}_constants/{model_name}/{preset}"] = sparse.constants
            if isinstance(sparse, Run):
                figures[f"sparse_{weights}_exact/{model_name}/{preset}"] = float(sparse.exact)
    command = (f"python -m benchmarks.bench_sparsity {model_name} --targets {','.join(targets)}"
               f" --int4 {','.join(int4_targets)}")
    left = "; ".join(f"{n}: {w}" for n, w in report.dense)
    golden_sqnr = figures.get(f"sparse_int8_golden_sqnr_db/{model_name}", float("nan"))
    note = (f"{model_name} pruned by `tessel.prune_2_4` without fine-tune: {len(report.pruned)} "
            f"layers 2:4, {len(report.dense)} dense ({left}); {report.zeroed:,} of "
            f"{report.weights:,} weights zeroed. "
            "Dense: the preset; sparse: `sparse.enabled` (exactly 2:4 convs, and the linear "
            "layer as a 1x1 conv, stored as values and indices where that pays; fused chains "
            "stay dense). Matrix cycles on convs: the matrix engine's busy cycles in the conv "
            "layers (the linear layer's left out). Ratios in "
            f"brackets are sparse / dense. Accuracy: SQNR of the pruned float model against "
            f"the unpruned one on {HELD_OUT} held-out inputs {sqnr:.2f} dB; of the int8 golden "
            f"model of the pruned network against the unpruned float model {golden_sqnr:.2f} dB. "
            "The zoo model's weights are its seeded random initialisation, and pruning them "
            "without fine-tune changes the network's function: these SQNRs measure that loss, "
            "not the accuracy a trained and fine-tuned 2:4 network keeps. With the optional "
            f"fine-tune ({FINETUNE_STEPS} SGD steps at lr {FINETUNE_LR:g} towards the dense "
            f"model's outputs on the {CALIBRATION} calibration inputs, the mask kept): "
            f"{tuned_sqnr:.2f} dB on the same held-out inputs. int4 + 2:4 stores 3/4 of "
            "int4's bytes (the values halve, a 4-bit index per four weights adds a quarter); "
            "the int4 rows run with the weight decoder on (weight streams; a range of 2:4 "
            "blocks as mode 3, its indices as base-6 ranks, 8/3 bits each: 2/3 of int4's "
            "bytes before the values' coding), bit-exact on the example input.")
    table = HEAD + "\n" + "\n".join(rows) + "\n\n" + note
    return Section("2:4 structured sparsity", command, table, figures)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default=MODEL)
    ap.add_argument("--targets", default=",".join(TARGETS), help="presets, int8 weights")
    ap.add_argument("--int4", default=",".join(INT4_TARGETS), help="presets, int4 weights")
    args = ap.parse_args(argv)
    section = run(args.model, [t for t in args.targets.split(",") if t],
                  [t for t in args.int4.split(",") if t])
    section.print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
