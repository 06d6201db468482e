"""Simulator micro-benchmark: instructions per second and int8 GEMM throughput.

Run: ``python -m benchmarks.bench_sim``; prints markdown tables. Every figure is the median of
``REPEATS`` runs after one warm-up run (which also fills the prepared-program cache, so
decoding and the static checks are reported separately as "prepare").

``python -m benchmarks.bench_sim --models resnet18 mobilenet_v2 vit_small minilm``: bit-exact
simulation of one input vs torch fp32 eager of the same input, in the same process, one thread
each, interleaved, medians of CPU seconds (``time.process_time``: on a shared, loaded machine
wall time mostly measures the other tenants) and of wall seconds. ``--models resnet18 --batch
64``: 64 inputs through ``CompiledModel.run_batch`` vs eager on the same 64 in one batch.
``--repeats N``: medians of N (default 7, 3 for a batch).
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections.abc import Callable

from benchmarks.report import Section
from tessel.arch import NpuArch, load_preset
from tessel.binary import TslProgram
from tessel.isa import DType, EltOp, Engine, Instruction, Opcode
from tessel.sim import prepare, simulate

REPEATS = 7
M = Opcode


def _median_seconds(fn: Callable[[], object], repeats: int = REPEATS) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _program(arch: NpuArch, streams: dict[Engine, list[Instruction]]) -> TslProgram:
    end = Instruction.make(M.END)
    return TslProgram(arch.arch_hash_bytes,
                      {e: tuple(streams.get(e, ())) + (end,) for e in Engine})


def _mk(opcode: Opcode, /, **kw: object) -> Instruction:
    return Instruction.make(opcode, **kw)


def _sig(peer: Engine, tok: int = 0) -> Instruction:
    return _mk(M.SIGNAL, engine=peer, token=tok)


def _wait(peer: Engine, tok: int = 0) -> Instruction:
    return _mk(M.WAIT, engine=peer, token=tok)


def _tile(t: int, tiles: int) -> dict[Engine, list[Instruction]]:
    """One tile of a double-buffered loop; token 0 = data ready, token 1 = buffer free."""
    buf, acc, out = (t % 2) * 0x8000, (t % 2) * 2048, 0x20000 + (t % 2) * 0x4000
    reuse, freed = t >= 2, t + 2 < tiles  # wait for / give back the buffer of tile t +- 2
    di = [_wait(Engine.MATRIX, 1)] if reuse else []
    di += [_mk(M.DMA_LOAD, mem=0, dtype=DType.I8, d0=32, d1=64, ext_addr=t * 2048, ext_s0=1,
               ext_s1=32, sram_addr=buf, sram_s0=1, sram_s1=32), _sig(Engine.MATRIX)]
    mx = [_wait(Engine.DMA_IN)] + ([_wait(Engine.VECTOR, 1)] if reuse else [])
    mx += [_mk(M.MATMUL, m=64, n=32, k=32, a_addr=buf, a_stride_m=32, b_addr=0x10000,
               b_stride_k=32, acc_addr=acc, acc_stride=32), _sig(Engine.VECTOR)]
    mx += [_sig(Engine.DMA_IN, 1)] if freed else []
    ve = [_wait(Engine.MATRIX)] + ([_wait(Engine.DMA_OUT, 1)] if reuse else [])
    ve += [_mk(M.REQUANT, src=0, src_addr=acc, src_stride=32, rows=64, ch=32,
               out_dtype=DType.I8, dst_addr=out, dst_stride=32, param_addr=0x30000,
               act_min=-128, act_max=127),
           _mk(M.ELTWISE, op=EltOp.ADD, a_dtype=DType.I8, b_dtype=DType.I8,
               out_dtype=DType.I8, d0=2048, a_addr=out, a_s0=1, b_addr=out, b_s0=1,
               out_addr=out, out_s0=1, left_shift=20, a_mult=1 << 30, a_shift=1,
               b_mult=1 << 30, b_shift=1, out_mult=1 << 30, out_shift=-19, act_min=-128,
               act_max=127),
           _sig(Engine.DMA_OUT)] + ([_sig(Engine.MATRIX, 1)] if freed else [])
    do = [_wait(Engine.VECTOR),
          _mk(M.DMA_STORE, mem=0, dtype=DType.I8, d0=2048, ext_addr=0x100000 + t * 2048,
              ext_s0=1, sram_addr=out, sram_s0=1)] + ([_sig(Engine.VECTOR, 1)] if freed else [])
    return {Engine.DMA_IN: di, Engine.MATRIX: mx, Engine.VECTOR: ve, Engine.DMA_OUT: do}


def mixed_program(arch: NpuArch, tiles: int) -> TslProgram:
    """Double-buffered tiles: load, matmul, requant, eltwise, store, ordered by tokens."""
    streams: dict[Engine, list[Instruction]] = {e: [] for e in Engine}
    for t in range(tiles):
        for e, instrs in _tile(t, tiles).items():
            streams[e] += instrs
    return _program(arch, streams)


def bench_instruction_rate(arch: NpuArch, tiles: int = 200) -> list[tuple[str, float, float]]:
    prog = mixed_program(arch, tiles)
    n = sum(len(q) for q in prog.streams.values())
    rows = []
    t_prep = _median_seconds(lambda: prepare(prog, arch), 3)
    rows.append(("prepare (decode + static checks, once per program)", n / t_prep, t_prep))
    t_f = _median_seconds(lambda: simulate(prog, arch, {}, timing=False))
    rows.append(("functional only", n / t_f, t_f))
    t_t = _median_seconds(lambda: simulate(prog, arch, {}, timing=True))
    rows.append(("functional + timing + energy", n / t_t, t_t))
    return rows


def bench_gemm(arch: NpuArch) -> list[tuple[str, float, float]]:
    rows = []
    for m, n, k in ((64, 64, 64), (128, 128, 128), (128, 128, 1024), (256, 64, 2048)):
        mm = Instruction.make(M.MATMUL, m=m, n=n, k=k, a_addr=0, a_stride_m=k,
                              b_addr=m * k, b_stride_k=n, acc_addr=0, acc_stride=n)
        prog = _program(arch, {Engine.MATRIX: [mm]})
        t = _median_seconds(lambda p=prog: simulate(p, arch, {}, timing=False))
        rows.append((f"MATMUL {m}x{n}x{k}", m * n * k / t / 1e9, t))
    conv = Instruction.make(M.CONV, in_addr=0, in_h=18, in_w=18, in_stride_h=18 * 64,
                            in_stride_w=64, cin=64, in_zp=-3, kh=3, kw=3, out_h=16, out_w=16,
                            cout=64, w_addr=0x20000, w_stride_k=64 * 64, w_stride_ci=64,
                            acc_addr=0, acc_stride=64)
    prog = _program(arch, {Engine.MATRIX: [conv]})
    t = _median_seconds(lambda: simulate(prog, arch, {}, timing=False))
    rows.append(("CONV 3x3 16x16x64->64", 16 * 16 * 64 * 9 * 64 / t / 1e9, t))
    return rows


def _one_blas_thread() -> contextlib.AbstractContextManager[object]:
    """Limit BLAS to one thread if threadpoolctl is installed (it is, with scikit-learn)."""
    try:
        import threadpoolctl
    except ImportError:
        return contextlib.nullcontext()
    return threadpoolctl.threadpool_limits(1)


def _interleaved(fns: list[Callable[[], object]], repeats: int) -> list[tuple[float, float]]:
    """Median (CPU, wall) seconds of each function, after one warm-up call each, the calls
    interleaved (f1, f2, f1, f2, ...): a shared machine's load drifts, and both sides of a
    ratio then see the same drift."""
    for fn in fns:
        fn()
    times: list[tuple[list[float], list[float]]] = [([], []) for _ in fns]
    for _ in range(repeats):
        for fn, (cpu, wall) in zip(fns, times, strict=True):
            c0, w0 = time.process_time(), time.perf_counter()
            fn()
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
    return [(statistics.median(cpu), statistics.median(wall)) for cpu, wall in times]


def _versus_eager_row(name: str, preset: str, repeats: int, batch: int) -> tuple[str, float]:
    """One model's row and its CPU ratio (simulation / eager)."""
    import numpy as np
    import torch

    from tessel.driver import compile_graph
    from tessel.models import resolve
    from tessel.quant.api import quantize
    from tessel.quant.config import default_config

    spec = resolve(name)
    model, example = spec.factory()
    qm = quantize(model, example, calibration_data=spec.calibration_data(4),
                  quant_config=default_config(name), calibration_samples=4)
    cm = compile_graph(qm.graph, load_preset(preset), name=name)
    with torch.no_grad(), _one_blas_thread():
        if batch:
            samples = list(spec.calibration_data(batch))
            xb = [np.stack([s[i].numpy() for s in samples]) for i in range(len(example))]
            eb = [torch.cat([s[i] for s in samples]) for i in range(len(example))]
            (s_cpu, s_wall), (e_cpu, e_wall) = _interleaved(
                [lambda: cm.run_batch(*xb), lambda: model(*eb)], repeats)
            name = f"{name} x{batch}"
        else:
            x = [t.numpy() for t in example]
            (s_cpu, s_wall), (e_cpu, e_wall) = _interleaved(
                [lambda: cm.run(*x), lambda: model(*example)], repeats)
    return (f"| {name} | {s_cpu:.3f} | {e_cpu:.3f} | {s_cpu / e_cpu:.2f}x | {s_wall:.3f} | "
            f"{e_wall:.3f} | {s_wall / e_wall:.2f}x |"), s_cpu / e_cpu


def versus_eager(names: list[str], preset: str = "tnpu-s", repeats: int = REPEATS,
                 batch: int = 0) -> Section:
    """Simulator vs torch eager on zoo models (calibration 4: only the binary matters here).
    ``batch=N``: N inputs (the model's calibration generator) simulated together by
    ``CompiledModel.run_batch`` vs eager on the same N inputs concatenated in one batch.
    Figures: ``sim_vs_eager_cpu/NAME`` (or ``batch_vs_eager_cpu/NAME``), the CPU ratio."""
    import torch

    torch.set_num_threads(1)
    lines = [f"{preset}, 1 thread each, medians of {repeats} after a warm-up.\n",
             "| model | sim CPU s | eager CPU s | ratio (CPU) | sim wall s | eager wall s | "
             "ratio (wall) |", "|---|---:|---:|---:|---:|---:|---:|"]
    figures = {}
    for name in names:
        row, ratio = _versus_eager_row(name, preset, repeats, batch)
        lines.append(row)
        figures[f"{'batch' if batch else 'sim'}_vs_eager_cpu/{name}"] = ratio
        print(row, file=sys.stderr, flush=True)
    command = f"python -m benchmarks.bench_sim --models {' '.join(names)}" + (
        f" --batch {batch}" if batch else "")
    title = (f"Simulation of a batch of {batch} vs torch fp32 eager" if batch
             else "Bit-exact simulation vs torch fp32 eager")
    return Section(title, command, "\n".join(lines), figures)


def micro(tiles: int = 200) -> Section:
    """Instructions per second of a mixed program, and int8 GEMM throughput, on tnpu-m."""
    arch = load_preset("tnpu-m")  # the largest accumulator / SRAM of the presets
    lines = [f"{arch.name}, medians of {REPEATS} after a warm-up.\n",
             "| mode | instructions/s | seconds |", "|---|---:|---:|"]
    for name, rate, sec in bench_instruction_rate(arch, tiles):
        lines.append(f"| {name} | {rate:,.0f} | {sec:.4f} |")
    default = bench_gemm(arch)
    with _one_blas_thread():
        single = bench_gemm(arch)
    lines += ["", "| int8 tile (functional) | GMAC/s, default BLAS threads | GMAC/s, 1 BLAS "
              "thread |", "|---|---:|---:|"]
    for (name, rate, _), (_, rate1, _) in zip(default, single, strict=True):
        lines.append(f"| {name} | {rate:.2f} | {rate1:.2f} |")
    return Section("Simulator micro-benchmark", "python -m benchmarks.bench_sim",
                   "\n".join(lines))


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--models":
        args = sys.argv[2:]
        opts = {"--batch": 0, "--repeats": 0}
        for flag in opts:  # --models NAME... [--batch N] [--repeats N]
            if flag in args:
                at = args.index(flag)
                opts[flag], args = int(args[at + 1]), args[:at] + args[at + 2:]
        batch = opts["--batch"]
        repeats = opts["--repeats"] or (3 if batch else REPEATS)
        print(versus_eager(args, repeats=repeats, batch=batch).markdown)
        return
    print(micro().markdown)


if __name__ == "__main__":
    main()
