"""Differential fuzzing of the whole compiler with two random-model generators (`make fuzz-models`).

    python tests/e2e/fuzz_models.py --seeds 2000 [--start 0] [--family int,mixed] [--host-outputs]
        [--weights]

Families (each seed builds one model of each family asked for):

* `int` (random_models.py): an integer NHWC graph of the NPU's ops, compiled as it is (the graph
  input is an output too in every fifth model; --host-outputs: in every model);
* `mixed` (random_mixed_models.py): a float PyTorch model of rank 2-4 with 1-3 inputs, whose
  host ops (abs, maximum / minimum, division by a tensor) sit before, between and after NPU
  regions; quantised on 3 seeded calibration samples (torch.export, pt2e), compiled, written
  and read back as a `.tsl`.

--weights (weight_features.py): the weight features too. `int` models hold exact 2:4 masks on
about two layers in three that can take one (int4 weights in one in four, as always); `mixed`
models are pruned by `tessel.prune_2_4` (magnitude or SparseGPT) and quantised with a drawn
QuantConfig (int4 weights by default or per layer, int16 inputs / outputs of element-wise ops
by set, op or module); the preset gets the weight decoder and / or 2:4 sparsity, each in about
two seeds of three. The report counts the models whose binary holds each feature (sparse and
int4 CONVs, DMA_LOAD_W streams by mode, int16 ops, 2:4 linear layers run as 1x1 convs); `mixed`
models are run on the C runtime too, as `int` models always are.

For each model: compile for a preset chosen by the seed, run the binary on a seeded input and
compare with the golden model bit for bit (NaN equal to NaN, dtypes equal); `int` models also on
the C runtime and C NPU model against the simulator (when a C compiler is available; a binary
whose host part holds an op the C runtime has no kernel for, which it refuses at load as
documented, counts as 'C runtime: host op refused'). Counted: mismatches
(simulator != golden, or C != simulator), crashes (any exception other than a clean Tessel refusal while
compiling; a TesselFormatError, an instruction the compiler built that cannot be encoded, is
one), unrunnable binaries (any exception while reading or running a compiled binary),
refusals (a Tessel error naming the reason), models fully on the NPU, and for `mixed` where the
host ops sit (prologue, between NPU regions, epilogue) and how often inputs only host parts
read and outputs that are inputs occur. Exit status 1 on any mismatch, crash or unrunnable
binary.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from random_mixed_models import random_mixed_model, sample_inputs  # noqa: E402
from random_models import random_model  # noqa: E402
from weight_features import census, random_quant_config, random_target  # noqa: E402

from tessel.arch import list_presets, load_preset  # noqa: E402
from tessel.driver import compile_graph  # noqa: E402
from tessel.errors import TesselError, TesselFormatError  # noqa: E402
from tessel.quant.golden import run_golden  # noqa: E402
from tessel.runtime.cengine import available  # noqa: E402
from tessel.runtime.compiled import CompiledModel  # noqa: E402

FAMILIES = ("int", "mixed")
C_ENGINE_MISSING = available()


C_HOST_OP_REFUSED = "(code 113)"  # TSL_E_HOST_OP_UNSUPPORTED: docs/runtime.md


def _run_both(cm: CompiledModel, *x):
    """The simulator's outputs, and the C engine's where it is built (else None); None too
    when the C runtime refuses the binary for a host op it has no kernel for, as documented
    (docs/runtime.md: a qconv2d the NPU cannot run stays a host op of the binary)."""
    got = cm.run(*x)
    if C_ENGINE_MISSING is not None:
        return got, None
    try:
        return got, cm.run(*x, engine="c")
    except TesselFormatError as exc:
        if C_HOST_OP_REFUSED not in str(exc):
            raise
        return got, None


def _c_feature(c_got) -> set[str]:
    """Whether the C runtime ran the binary (None: it refused a host op, or is not built)."""
    if C_ENGINE_MISSING is not None:
        return set()
    return {"C runtime: ran" if c_got is not None else "C runtime: host op refused"}


@dataclass
class Outcome:
    """One model's result: status ('ok', 'mismatch', 'refused: ...', 'crash: ...',
    'unrunnable: ...'), the host-op reasons and, for mixed models, its shape features."""

    status: str
    reasons: list[str] = field(default_factory=list)
    features: set[str] = field(default_factory=set)


def _where(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__} at {Path(tb.filename).name}:{tb.lineno}: {str(exc)[:100]}"


def _same(got, want) -> bool:
    return len(got) == len(want) and all(
        a.dtype == b.dtype and a.shape == b.shape
        and np.array_equal(a, b, equal_nan=a.dtype.kind == "f") for a, b in zip(got, want, strict=False))


def _reasons(cm: CompiledModel) -> list[str]:
    return [re.sub(r"^%\S+ = ", "", h).split(" at ")[0] for h in cm.program.metadata["host_ops"]]


def _target(seed: int, presets: list[str], weights: bool):
    arch = load_preset(presets[seed % len(presets)])
    return random_target(seed, arch) if weights else arch


def one_int(seed: int, presets: list[str], host_outputs: bool | None,
            weights: bool = False) -> Outcome:
    """Compile + run one integer random model against the golden model (weights: with the
    weight features drawn, and their census as the outcome's features)."""
    try:
        g = random_model(seed, host_outputs=host_outputs, weights=weights)
        arch = _target(seed, presets, weights)
        x = np.random.default_rng(seed).integers(-128, 128, g.inputs[0].type.shape, np.int8)
        cm = compile_graph(g, arch, name=g.name)
    except TesselFormatError as exc:  # an instruction the compiler built cannot be encoded
        return Outcome(f"crash: {_where(exc)}")
    except TesselError as exc:  # a clean refusal names its reason
        return Outcome(f"refused: {str(exc).splitlines()[0][:120]}")
    except Exception as exc:  # noqa: BLE001 - a crash is what we count
        return Outcome(f"crash: {_where(exc)}")
    try:
        (got, c_got), want = _run_both(CompiledModel.from_bytes(cm.binary), x), run_golden(g, [x])
    except Exception as exc:  # noqa: BLE001 - a binary that cannot run is a finding
        return Outcome(f"unrunnable: {_where(exc)}")
    same = _same(got, want) and (c_got is None or _same(c_got, got))
    return Outcome("ok" if same else "mismatch", _reasons(cm),
                   (census(cm, g) if weights else set()) | _c_feature(c_got))


def one_mixed(seed: int, presets: list[str], weights: bool = False) -> Outcome:
    """Quantise, compile, save / load and run one mixed-rank float model; golden comparison
    (weights: pruned, quantised with a drawn config, for a drawn target; the binary's census of
    weight features joins the outcome's features)."""
    import tessel

    try:
        model, example = random_mixed_model(seed, weights)
        calib = [sample_inputs(model, 1000 * seed + k) for k in range(1, 4)]
        config = random_quant_config(seed, len(model.layers)) if weights else None
        qm = tessel.quantize(model, example, calib, quant_config=config)
        arch = _target(seed, presets, weights)
        cm = compile_graph(qm.graph, arch, name=f"mixed{seed}")
    except TesselFormatError as exc:
        return Outcome(f"crash: {_where(exc)}")
    except TesselError as exc:
        return Outcome(f"refused: {str(exc).splitlines()[0][:120]}")
    except Exception as exc:  # noqa: BLE001
        return Outcome(f"crash: {_where(exc)}")
    x = [t.numpy() for t in sample_inputs(model, 1000 * seed + 7)]
    try:
        loaded = CompiledModel.from_bytes(cm.binary)
        (got, c_got), want = (_run_both(loaded, *x) if weights else (loaded.run(*x), None)), \
            qm.run(*x)
    except Exception as exc:  # noqa: BLE001
        return Outcome(f"unrunnable: {_where(exc)}")
    features = _features(loaded, qm.graph, model)
    if weights:
        features |= census(cm, qm.graph) | _c_feature(c_got)
    same = _same(got, want) and (c_got is None or _same(c_got, got))
    return Outcome("ok" if same else "mismatch", _reasons(cm), features)


def _features(cm: CompiledModel, graph, model) -> set[str]:
    """Where the host ops sit and which I/O shapes the model has (the generator's targets)."""
    def works(g) -> bool:
        return g is not None and any(not n.is_constant and n.op.value not in (
            "quantize", "dequantize") for n in g.nodes)

    parts = cm.host_parts
    out = set()
    if works(parts[0]):
        out.add("host ops before the NPU")
    if len(parts) > 2 and any(works(p) for p in parts[1:-1]):
        out.add("host ops between NPU regions")
    if len(parts) > 1 and works(parts[-1]):
        out.add("host ops after the NPU")
    if not cm.regions or not cm.program.metadata.get("layers"):
        out.add("no NPU work")
    later = {v.name for p in parts[1:] if p is not None for v in p.inputs}
    early = _read_by(parts[0]) | {n for r in cm.regions for n in r.inputs}
    if any(v.name in later and v.name not in early for v in graph.inputs):
        out.add("inputs only later host parts read")
    if set(graph.outputs) & {v.name for v in graph.inputs}:
        out.add("outputs that are inputs")
    ranks = {len(s) for s in model.input_shapes}
    out.update(f"rank-{r} input" for r in ranks)
    out.update(f"op {s.kind}" for s in model.steps)
    return out


def _read_by(graph) -> set[str]:
    """Values some node of `graph` reads."""
    return set() if graph is None else {i for n in graph.nodes for i in n.inputs}


@dataclass
class Tally:
    """Counts of one family over the seeds run."""

    counts: collections.Counter = field(default_factory=collections.Counter)
    reasons: collections.Counter = field(default_factory=collections.Counter)
    features: collections.Counter = field(default_factory=collections.Counter)
    full: int = 0
    bad: list[str] = field(default_factory=list)

    def add(self, seed: int, o: Outcome) -> None:
        kind = o.status.split(":")[0]
        self.counts[kind] += 1
        self.full += kind == "ok" and not o.reasons
        self.reasons.update(o.reasons)
        self.features.update(o.features)
        if kind != "ok":
            self.bad.append(f"seed {seed}: {o.status}")

    def failed(self) -> bool:
        return any(self.counts[k] for k in ("mismatch", "crash", "unrunnable"))

    def report(self, family: str, n: int) -> list[str]:
        c = self.counts
        lines = [f"[{family}] ok {c['ok']}, mismatches {c['mismatch']}, crashes {c['crash']}, "
                 f"unrunnable {c['unrunnable']}, refused {c['refused']}; fully on the NPU "
                 f"{self.full} ({100.0 * self.full / n:.1f} %)"]
        for what, k in sorted(self.features.items()):
            if not what.startswith("op "):
                lines.append(f"  {what}: {k} ({100.0 * k / n:.1f} %)")
        ops = sorted((w[3:], k) for w, k in self.features.items() if w.startswith("op "))
        if ops:
            lines.append("  models with op: " + ", ".join(f"{w} {k}" for w, k in ops))
        lines += [f"  host op x{k}: {why}" for why, k in self.reasons.most_common(12)]
        lines += ["  " + line for line in self.bad[:50]]
        return lines


def _add(tally: Tally, family: str, seed: int, outcome: Outcome, each: bool) -> None:
    """Count `outcome`; one that is not ok (each: every one, with its features) is printed to
    stderr as it happens (a long run's findings show before its end)."""
    tally.add(seed, outcome)
    if outcome.status != "ok" or each:
        print(f"[{family}] seed {seed}: {outcome.status} {sorted(outcome.features)}",
              file=sys.stderr, flush=True)


def run(seeds: range, families: tuple[str, ...], host_outputs: bool = False,
        weights: bool = False, each: bool = False) -> dict[str, Tally]:
    presets = list_presets()
    tallies = {f: Tally() for f in families}
    for seed in seeds:
        if "int" in families:
            _add(tallies["int"], "int", seed,
                 one_int(seed, presets, True if host_outputs else None, weights), each)
        if "mixed" in families:
            _add(tallies["mixed"], "mixed", seed, one_mixed(seed, presets, weights), each)
    return tallies


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=2000)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--family", default=",".join(FAMILIES),
                   help=f"comma-separated generators among {', '.join(FAMILIES)} (default: both)")
    p.add_argument("--host-outputs", action="store_true",
                   help="int: make the graph input an output of every model (default: every fifth)")
    p.add_argument("--weights", action="store_true",
                   help="draw the weight features too: 2:4 masks / prune_2_4, int4 and int16 "
                   "per layer, targets with the weight decoder and 2:4 sparsity")
    p.add_argument("--each", action="store_true",
                   help="print every seed's outcome and features to stderr as it is done")
    args = p.parse_args(argv)
    families = tuple(f for f in args.family.split(",") if f)
    if not families or set(families) - set(FAMILIES):
        p.error(f"--family: choose among {', '.join(FAMILIES)}")
    t0 = time.perf_counter()
    tallies = run(range(args.start, args.start + args.seeds), families, args.host_outputs,
                  args.weights, args.each)
    print(f"{args.seeds} seeds ({args.start}..{args.start + args.seeds - 1}) x "
          f"{len(families)} famil{'y' if len(families) == 1 else 'ies'} in "
          f"{time.perf_counter() - t0:.0f} s")
    for family, tally in tallies.items():
        print("\n".join(tally.report(family, args.seeds)))
    print("C runtime: " + (C_ENGINE_MISSING or "compared with the simulator on every int model "
                            "it loads"))
    return 1 if any(t.failed() for t in tallies.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
