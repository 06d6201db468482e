"""Differential fuzzing of the whole compiler on the models users build (`make fuzz-users`).

    python tests/e2e/fuzz_user_models.py --seeds 300 [--start 0]
        [--family transformer,recurrent,vision] [--each]

Each seed builds one model of each family asked for (random_user_models.py: Hugging Face
transformers from their configs at odd sizes, GRU / LSTM layers and cells, vision chains of
conv-transpose, dilated depthwise, ceil_mode pooling, mixed-scale concats, broadcasting adds,
slices, pads and means with several inputs and outputs), quantises it on 3 seeded calibration
samples with the seed's QuantConfig, compiles it for a preset chosen by the seed, writes and
reads back the `.tsl`, runs it on a seeded input and compares every output with the golden model
bit for bit, and the C runtime with the simulator where it loads the binary (it refuses, as
documented, a host op it has no kernel for and a count above a TSL_MAX_* limit of its build).
Counted as in fuzz_models.py: mismatches, crashes, unrunnable binaries, refusals. Exit status 1
on any mismatch, crash or unrunnable binary.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from fuzz_models import C_ENGINE_MISSING, Outcome, Tally, _add, _c_feature, _reasons, _run_both, _same, _where  # noqa: E402
from random_user_models import FAMILIES, random_user_model  # noqa: E402

from tessel.arch import list_presets, load_preset  # noqa: E402
from tessel.driver import compile_graph  # noqa: E402
from tessel.errors import TesselError, TesselFormatError  # noqa: E402
from tessel.runtime.compiled import CompiledModel  # noqa: E402

C_LIMIT = "(code 130)"  # TSL_E_LIMIT: docs/runtime.md


def one(seed: int, family: str, presets: list[str]) -> Outcome:
    """Quantise, compile, save / load and run one model of `family`; golden comparison (and C
    runtime = simulator where it loads the binary)."""
    import tessel

    try:
        model, example, calib, config = random_user_model(seed, family)
        qm = tessel.quantize(model, example, calib, quant_config=config)
        arch = load_preset(presets[seed % len(presets)])
        cm = compile_graph(qm.graph, arch, name=f"{family}{seed}")
    except TesselFormatError as exc:
        return Outcome(f"crash: {_where(exc)}")
    except TesselError as exc:
        return Outcome(f"refused: {str(exc).splitlines()[0][:120]}")
    except Exception as exc:  # noqa: BLE001 - a crash is what we count
        return Outcome(f"crash: {_where(exc)}")
    x = [t.numpy() for t in example]
    try:
        ((got, c_got), limit), want = _run(CompiledModel.from_bytes(cm.binary), x), qm.run(*x)
    except Exception as exc:  # noqa: BLE001 - a binary that cannot run is a finding
        return Outcome(f"unrunnable: {_where(exc)}")
    features = ({"C runtime: above a TSL_MAX_* limit"} if limit else _c_feature(c_got)) | {
        f"preset {arch.name}"}
    if c_got is not None and not _same(c_got, got):
        return Outcome("mismatch: C runtime != simulator", _reasons(cm), features)
    if not _same(got, want):
        return Outcome("mismatch: simulator != golden", _reasons(cm), features)
    return Outcome("ok", _reasons(cm), features)


def _run(cm: CompiledModel, x):
    """(simulator outputs, C outputs or None), and whether the C runtime refused the binary for a
    count above a limit of its build (TSL_E_LIMIT, documented in docs/runtime.md)."""
    try:
        return _run_both(cm, *x), False
    except TesselFormatError as exc:
        if C_LIMIT not in str(exc):
            raise
        return (cm.run(*x), None), True


def run(seeds: range, families: tuple[str, ...], each: bool = False) -> dict[str, Tally]:
    presets = list_presets()
    tallies = {f: Tally() for f in families}
    for seed in seeds:
        for family in families:
            _add(tallies[family], family, seed, one(seed, family, presets), each)
    return tallies


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=300)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--family", default=",".join(FAMILIES),
                   help=f"comma-separated families among {', '.join(FAMILIES)} (default: all)")
    p.add_argument("--each", action="store_true",
                   help="print every seed's outcome to stderr as it is done")
    args = p.parse_args(argv)
    families = tuple(f for f in args.family.split(",") if f)
    if not families or set(families) - set(FAMILIES):
        p.error(f"--family: choose among {', '.join(FAMILIES)}")
    t0 = time.perf_counter()
    tallies = run(range(args.start, args.start + args.seeds), families, args.each)
    print(f"{args.seeds} seeds ({args.start}..{args.start + args.seeds - 1}) x "
          f"{len(families)} famil{'y' if len(families) == 1 else 'ies'} in "
          f"{time.perf_counter() - t0:.0f} s")
    for family, tally in tallies.items():
        print("\n".join(tally.report(family, args.seeds)))
    print("C runtime: " + (C_ENGINE_MISSING or "compared with the simulator on every binary it "
                            "loads"))
    return 1 if any(t.failed() for t in tallies.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
