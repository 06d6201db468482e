"""Lossless weight compression (tessel.isa.weight_codec): per model and weight precision, the
bytes of the quantised weights raw, as weight streams (one per layer, as the binary stores them),
compressed by zstd at its highest level (one frame per layer: the same bytes, the same
granularity) and at the empirical order-0 entropy of the bytes (int8) or nibbles (int4).

Then, on the NPU: per model and target, the binary's constants bytes and the simulated cycles
without and with the weight decoder (``wdecoder.enabled``; code generation stores the ranges
that pay as streams, tessel.emit.compress), the outputs checked against the golden model.

Run: ``python -m benchmarks.bench_weight_codec [MODEL ...]``; prints two markdown tables.
Figures: ``wcodec_vs_zstd/MODEL`` (stream bytes / zstd bytes, int8 weights),
``wcodec_ratio/MODEL`` (stream bytes / raw bytes), ``wcodec_random_ratio`` (uniform random
bytes: stored bytes / raw bytes, a raw stream stored as its raw bytes) and
``wcodec_npu_cycles/MODEL`` (cycles with the decoder / without).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace

import numpy as np
import zstandard

from benchmarks.report import Section
from tessel.arch import load_preset
from tessel.driver import compile_graph
from tessel.ir.types import DType
from tessel.isa.weight_codec import StreamMode, encode, info
from tessel.models import load, resolve
from tessel.quant.api import quantize
from tessel.quant.config import WeightDtype, default_config

MODELS = ["minilm", "digits_cnn", "resnet18"]
NPU = [("resnet18", "u55-256"), ("mobilenet_v2", "u55-256"), ("minilm", "tnpu-s")]
NPU_HEAD = ("| model | target | constants bytes | with the decoder | cycles | with the decoder "
            "| bit-exact |\n|---|---|---:|---:|---:|---:|---|")
CALIBRATION = 4  # the weights do not depend on calibration; its ranges are not measured here
MIN_WEIGHTS = 256  # constants below this many elements (biases, tables) are left out
RANDOM_BYTES = 1 << 20
HEAD = ("| model | weights | layers | raw bytes | streams (ratio) | zstd -22 (ratio) "
        "| streams / zstd | order-0 entropy (ratio) | raw layers |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|")


@dataclass(frozen=True)
class Sizes:
    layers: int
    raw: int
    stream: int  # per layer min(raw, stream): what is stored
    zstd: int
    entropy: float
    raw_layers: int  # layers whose stream is raw


def pack_int4(values: np.ndarray) -> bytes:
    """Signed 4-bit values two per byte, low nibble first (odd counts padded with a zero)."""
    v = values.reshape(-1).astype(np.int8)
    v = np.concatenate([v, np.zeros(v.size % 2, np.int8)])
    return ((v[0::2] & 0xF) | ((v[1::2] & 0xF) << 4)).astype(np.uint8).tobytes()


def layer_weights(name: str, precision: WeightDtype) -> list[bytes]:
    """The int8 (or packed int4) bytes of each quantised weight constant of a zoo model."""
    spec = resolve(name)
    model, example = load(name)
    config = replace(default_config(spec.name), weights=precision)
    qm = quantize(model, example, list(spec.calibration_data(CALIBRATION)), config,
                  calibration_samples=CALIBRATION)
    out = []
    for node in qm.graph.nodes:
        if not node.is_constant or node.type.dtype not in (DType.I8, DType.I4):
            continue
        array = node.attr("value").array
        if array.size >= MIN_WEIGHTS:
            out.append(pack_int4(array) if node.type.dtype is DType.I4 else array.tobytes())
    return out


def entropy_bytes(layers: list[bytes], nibbles: bool) -> float:
    """Bytes at the empirical order-0 entropy of all the layers' bytes (or nibbles)."""
    a = np.frombuffer(b"".join(layers), np.uint8)
    symbols = np.concatenate([a & 0xF, a >> 4]) if nibbles else a
    p = np.bincount(symbols, minlength=256) / max(symbols.size, 1)
    p = p[p > 0]
    return float(-(p * np.log2(p)).sum() * symbols.size / 8)


def measure(layers: list[bytes], nibbles: bool) -> Sizes:
    zc = zstandard.ZstdCompressor(level=22)
    stream = zstd = raw_layers = 0
    for data in layers:
        coded = encode(data, nibbles=nibbles)
        is_raw = info(coded).mode is StreamMode.RAW
        raw_layers += is_raw
        stream += len(data) if is_raw else len(coded)
        zstd += len(zc.compress(data))
    raw = sum(len(d) for d in layers)
    return Sizes(len(layers), raw, stream, zstd, entropy_bytes(layers, nibbles), raw_layers)


def _row(name: str, what: str, s: Sizes) -> str:
    return (f"| {name} | {what} | {s.layers} | {s.raw:,} | {s.stream:,} ({s.stream / s.raw:.3f})"
            f" | {s.zstd:,} ({s.zstd / s.raw:.3f}) | {s.stream / s.zstd:.3f}x"
            f" | {s.entropy:,.0f} ({s.entropy / s.raw:.3f}) | {s.raw_layers} |")


def npu_row(name: str, preset: str) -> tuple[str, float]:
    """The NPU table's row of a model on a target, and cycles with / without the decoder."""
    spec = resolve(name)
    model, example = load(name)
    qm = quantize(model, example, list(spec.calibration_data(CALIBRATION)),
                  default_config(spec.name), calibration_samples=CALIBRATION)
    inputs = [t.numpy() for t in example]
    want = qm.run(*inputs)
    sizes, cycles, exact = [], [], True
    for enabled in (False, True):
        arch = load_preset(preset).with_param("wdecoder.enabled", enabled)
        cm = compile_graph(qm.graph, arch, name=name)
        sizes.append(len(cm.program.constants))
        cycles.append(cm.profile.cycles)
        exact &= all(np.array_equal(g, w) for g, w in zip(cm.run(*inputs), want, strict=True))
    return (f"| {name} | {preset} | {sizes[0]:,} | {sizes[1]:,} ({sizes[1] / sizes[0]:.3f}) "
            f"| {cycles[0]:,} | {cycles[1]:,} ({cycles[1] / cycles[0]:.3f}) "
            f"| {'yes' if exact else 'NO'} |"), cycles[1] / cycles[0]


def run(models: list[str], int4: bool = True,
        npu: list[tuple[str, str]] | None = None) -> Section:
    rows, figures = [], {}
    for name in models:
        for precision in (WeightDtype.INT8, WeightDtype.INT4) if int4 else (WeightDtype.INT8,):
            nibbles = precision is WeightDtype.INT4
            s = measure(layer_weights(name, precision), nibbles)
            rows.append(_row(name, precision.value, s))
            print(rows[-1], file=sys.stderr, flush=True)
            if not nibbles:
                figures[f"wcodec_vs_zstd/{name}"] = s.stream / s.zstd
                figures[f"wcodec_ratio/{name}"] = s.stream / s.raw
    rnd = np.random.default_rng(0).integers(0, 256, RANDOM_BYTES, dtype=np.uint8).tobytes()
    s = measure([rnd[i:i + RANDOM_BYTES // 16] for i in range(0, RANDOM_BYTES, RANDOM_BYTES // 16)],
                nibbles=True)
    rows.append(_row("uniform random bytes", "any", s))
    figures["wcodec_random_ratio"] = s.stream / s.raw
    npu_rows, npu = [], NPU if npu is None else npu
    for name, preset in npu:
        row, ratio = npu_row(name, preset)
        npu_rows.append(row)
        print(row, file=sys.stderr, flush=True)
        figures[f"wcodec_npu_cycles/{name}"] = ratio
    command = ("python -m benchmarks.bench_weight_codec " + " ".join(models)
               + ("" if int4 else " --int8-only")
               + (" --npu " + ",".join(f"{m}:{p}" for m, p in npu) if npu != NPU else ""))
    note = ("Streams: one per layer (tessel.isa.weight_codec; a layer whose stream would not be "
            "smaller is stored raw and counted as its raw bytes). zstd: `zstandard` level 22, "
            "one frame per layer. int4 weights packed two per byte in the order of the "
            "constant's elements. ResNet-18's weights are its seeded random initialisation.")
    table = HEAD + "\n" + "\n".join(rows) + "\n\n" + note
    if npu_rows:
        table += "\n\n" + NPU_HEAD + "\n" + "\n".join(npu_rows)
    return Section("Lossless weight compression", command, table, figures)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=MODELS)
    ap.add_argument("--int8-only", action="store_true", help="leave out the int4 rows")
    ap.add_argument("--npu", default=None,
                    help="MODEL:PRESET,... of the NPU table (default: "
                         + ",".join(f"{m}:{p}" for m, p in NPU) + "; '' for none)")
    args = ap.parse_args(argv)
    npu = None if args.npu is None else [tuple(x.split(":")) for x in args.npu.split(",") if x]
    section = run(args.models, int4=not args.int8_only, npu=npu)
    section.print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
