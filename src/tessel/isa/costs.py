"""Cycle and energy-event cost of every instruction, in isolation (docs/isa.md, "Costs").

One function per instruction class; the simulator's timing model and the compiler's
analytical model both call these, so they cannot disagree about a single instruction.
What this module does NOT model is interaction between instructions: waiting on tokens and
DMA engines sharing an off-chip memory's bandwidth are the simulator's job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from operator import itemgetter

from tessel.arch.types import Dataflow, NpuArch
from tessel.isa.fields import AccMode, AccSrc, Engine, LutMode, ParamMode, ReduceOp
from tessel.isa.instruction import Instruction
from tessel.isa.table import SPECS, Opcode

CONTROL_CYCLES = 1  # WAIT (when the token is there), SIGNAL, END
UNARY_STEPS = 8  # RECIP / RSQRT: iterative radix-16 divider, 8 steps per 32-bit element


@dataclass(frozen=True)
class Events:
    """Countable energy events; ``offchip_*`` are per off-chip memory index."""

    macs: int = 0
    sram_read_bytes: int = 0
    sram_write_bytes: int = 0
    acc_reads: int = 0
    acc_writes: int = 0
    vector_lane_ops: int = 0
    lut_accesses: int = 0
    operand_bytes: int = 0  # bytes the matrix array reads from its operand buffers
    offchip_read_bytes: tuple[int, ...] = ()
    offchip_write_bytes: tuple[int, ...] = ()

    def __add__(self, other: Events) -> Events:
        vals = {}
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, tuple):
                n = max(len(a), len(b))
                a, b = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
                vals[f.name] = tuple(x + y for x, y in zip(a, b, strict=True))
            else:
                vals[f.name] = a + b
        return Events(**vals)


@dataclass(frozen=True)
class Cost:
    cycles: int
    events: Events


def _field_names(op: Opcode) -> list[str]:
    return [f.name for f in SPECS[op].fields]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ---- matrix engine ------------------------------------------------------------------------------
def gemm_dims(i: Instruction) -> tuple[int, int, int]:
    """(M, N, K) of a CONV or MATMUL tile: output rows (pixels), output columns, reduction;
    of a DWCONV in the array's depthwise mode: pixels, channels (columns), kernel taps (rows)."""
    if i.opcode == Opcode.CONV:
        return i.out_h * i.out_w, i.cout, i.kh * i.kw * i.cin
    if i.opcode == Opcode.DWCONV:
        return i.out_h * i.out_w, i.ch, i.kh * i.kw
    if i.opcode == Opcode.MATMUL:
        return i.m, i.n, i.k
    raise ValueError(f"{i.opcode.name} is not a matrix instruction")


def gemm_folds(m: int, n: int, k: int, rows: int, cols: int, dataflow: Dataflow) -> tuple[int, int]:
    """(folds, T): how many R x C mappings the GEMM needs and the stream length of each.

    WS: rows hold K, columns N, the M rows stream (T = M). OS: rows hold M, columns N, the
    reduction streams (T = K). SCALE-Sim's Sr, Sc, T in the same roles.
    """
    if dataflow == Dataflow.WEIGHT_STATIONARY:
        return _cdiv(k, rows) * _cdiv(n, cols), m
    return _cdiv(m, rows) * _cdiv(n, cols), k


def fold_cycles(t: int, rows: int, cols: int, dataflow: Dataflow) -> int:
    """Cycles of one fold alone (SCALE-Sim v3): WS 2R + C + T - 2 (R to load the weights,
    T to stream, R + C - 2 of wavefront skew); OS R + C + T - 2 (T to stream the reduction,
    R + C - 2 of skew; the outputs leave through the accumulator port, no separate drain)."""
    load = rows if dataflow == Dataflow.WEIGHT_STATIONARY else 0
    return load + rows + cols + t - 2


def gemm_cycles(m: int, n: int, k: int, rows: int, cols: int, dataflow: Dataflow,
                pipelined: bool = True) -> int:
    """Cycles of an M x N x K GEMM on an R x C array.

    Not pipelined (SCALE-Sim v3's compute cycles): folds * fold_cycles. Pipelined (the next
    fold's weight load or the previous fold's drain overlaps the current stream, so a new fold
    starts every max(T, R) cycles): (folds - 1) * max(T, R) + fold_cycles. Equal for one fold.
    """
    folds, t = gemm_folds(m, n, k, rows, cols, dataflow)
    one = fold_cycles(t, rows, cols, dataflow)
    if not pipelined:
        return folds * one
    return (folds - 1) * max(t, rows) + one


def scalesim_cycles(m: int, n: int, k: int, rows: int, cols: int, dataflow: Dataflow) -> int:
    """SCALE-Sim v3's compute cycles for the same GEMM: folds back to back, no overlap.

    SCALE-Sim's COMPUTE_REPORT prints this minus one (it reports the index of the last cycle,
    counted from 0); tests/data/scalesim_golden.json holds what it prints.
    """
    return gemm_cycles(m, n, k, rows, cols, dataflow, pipelined=False)


def _input_bytes(i: Instruction) -> tuple[int, int]:
    """(tile input bytes with the halo, bytes without reuse: one per array operand) of a
    matrix-engine instruction."""
    m, n, k = gemm_dims(i)
    if i.opcode == Opcode.CONV:
        return i.in_h * i.in_w * i.cin, m * k
    if i.opcode == Opcode.DWCONV:
        return i.in_h * i.in_w * i.ch, m * k * n  # each column reads its own channel
    return m * k, m * k


def matrix_cost(i: Instruction, arch: NpuArch) -> Cost:
    """CONV / MATMUL / DWCONV (depthwise mode) on the array: the GEMM fold formula, bounded
    below by the operand path (SRAM bytes into the operand buffers / feed_bytes_per_cycle)."""
    m, n, k = gemm_dims(i)
    mx = arch.matrix
    r, c, df = mx.rows, mx.cols, mx.dataflow
    col_folds, row_folds = _cdiv(n, c), _cdiv(m, r)
    window, im2col = _input_bytes(i)
    depthwise = i.opcode == Opcode.DWCONV
    weights = k * n
    # the tile's input is read once when it fits the input window buffer, else per operand
    in_reads = window if window <= mx.input_buffer_bytes else im2col * (1 if depthwise
                                                                          else col_folds)
    operand = im2col * (1 if depthwise else col_folds)
    if df == Dataflow.WEIGHT_STATIONARY:
        w_reads = weights  # preloaded into the array once per fold
        operand += weights
        k_folds = _cdiv(k, r)
        acc_writes = m * n * k_folds
        acc_reads = m * n * (k_folds - 1 + (i.mode == AccMode.ACCUMULATE))
    else:
        w_reads = weights if weights <= mx.weight_buffer_bytes else weights * row_folds
        operand += weights * row_folds
        acc_writes = m * n
        acc_reads = m * n * (i.mode == AccMode.ACCUMULATE)
    sram_reads = in_reads + w_reads
    compute = gemm_cycles(m, n, k, r, c, df, mx.fold_pipelining)
    cycles = max(compute, _cdiv(sram_reads, mx.feed_bytes_per_cycle))
    return Cost(cycles, Events(macs=m * n * k, sram_read_bytes=sram_reads, operand_bytes=operand,
                               acc_reads=acc_reads, acc_writes=acc_writes))


# ---- DMA ----------------------------------------------------------------------------------------
def dma_cost(i: Instruction, arch: NpuArch) -> Cost:
    """DMA_LOAD / DMA_STORE alone: latency + ceil(bytes / bytes_per_cycle)."""
    nbytes = i.d0 * i.d1 * i.d2 * i.d3 * i.dtype.nbytes
    mem = arch.offchip[i.mem]
    bpc = min(mem.bytes_per_cycle, arch.derived.sram_bytes_per_cycle)
    per_mem = [0] * len(arch.offchip)
    per_mem[i.mem] = nbytes
    if i.opcode == Opcode.DMA_LOAD:
        ev = Events(sram_write_bytes=nbytes, offchip_read_bytes=tuple(per_mem),
                    offchip_write_bytes=(0,) * len(per_mem))
    else:
        ev = Events(sram_read_bytes=nbytes, offchip_write_bytes=tuple(per_mem),
                    offchip_read_bytes=(0,) * len(per_mem))
    return Cost(mem.latency_cycles + _cdiv(nbytes, bpc), ev)


# ---- vector engine ------------------------------------------------------------------------------
def _vector_events(i: Instruction) -> tuple[int, Events]:
    """(lane-groups of work in elements, events) of a vector instruction."""
    op = i.opcode
    if op == Opcode.REQUANT:
        e = i.rows * i.ch
        p = i.ch if i.param_mode == ParamMode.PER_CHANNEL else 1
        src_acc = i.src == AccSrc.ACC
        return e, Events(acc_reads=e if src_acc else 0,
                         sram_read_bytes=12 * p + (0 if src_acc else 4 * e),
                         sram_write_bytes=e * i.out_dtype.nbytes, vector_lane_ops=e)
    if op == Opcode.ELTWISE:
        e = i.d0 * i.d1 * i.d2
        return e, Events(sram_read_bytes=e * (i.a_dtype.nbytes + i.b_dtype.nbytes),
                         sram_write_bytes=e * i.out_dtype.nbytes, vector_lane_ops=e)
    if op == Opcode.LUT:
        e, w = i.d0 * i.d1 * i.d2, (1 if i.lut_mode == LutMode.I8_256 else 2)
        return e, Events(sram_read_bytes=e * w, sram_write_bytes=e * w, vector_lane_ops=e,
                         lut_accesses=e * w)
    if op == Opcode.LUT_LOAD:
        return i.count, Events(sram_read_bytes=2 * i.count, lut_accesses=i.count)
    if op in (Opcode.POOL, Opcode.DWCONV):
        outs = i.out_h * i.out_w * i.ch
        e = outs * i.kh * i.kw
        if op == Opcode.POOL:
            w = i.dtype.nbytes
            return e, Events(sram_read_bytes=e * w, sram_write_bytes=outs * w, vector_lane_ops=e)
        return e, Events(macs=e, sram_read_bytes=2 * e, acc_writes=outs,
                         acc_reads=outs * (i.mode == AccMode.ACCUMULATE))
    if op == Opcode.REDUCE:
        e = i.d0 * i.d1 * i.d2
        outs = e // (i.d0, i.d1, i.d2)[i.axis]
        wout = 4 if i.op in (ReduceOp.SUM, ReduceOp.SUMSQ) else i.dtype.nbytes
        return e, Events(sram_read_bytes=e * i.dtype.nbytes, sram_write_bytes=outs * wout,
                         vector_lane_ops=e)
    if op == Opcode.COPY:
        e = i.d0 * i.d1 * i.d2 * i.d3
        nb = e * i.dtype.nbytes
        return e, Events(sram_read_bytes=nb, sram_write_bytes=nb)
    if op == Opcode.UNARY:
        e = i.d0 * i.d1 * i.d2
        return e * UNARY_STEPS, Events(sram_read_bytes=4 * e, sram_write_bytes=4 * e,
                                       vector_lane_ops=e * UNARY_STEPS)
    raise ValueError(f"{op.name} is not a vector instruction")


def vector_cost(i: Instruction, arch: NpuArch) -> Cost:
    """latency + max(ceil(work / lanes), ceil(SRAM bytes / SRAM bytes per cycle))."""
    work, ev = _vector_events(i)
    sram = _cdiv(ev.sram_read_bytes + ev.sram_write_bytes, arch.derived.sram_bytes_per_cycle)
    cycles = arch.vector.pipeline_latency_cycles + max(_cdiv(work, arch.vector.lanes), sram)
    return Cost(cycles, ev)


def control_cost(i: Instruction, arch: NpuArch) -> Cost:
    """WAIT / SIGNAL / END: one cycle (a WAIT's blocked time is not part of its cost)."""
    return Cost(CONTROL_CYCLES, Events())


_VECTOR = {Opcode.REQUANT, Opcode.ELTWISE, Opcode.LUT, Opcode.LUT_LOAD, Opcode.POOL,
           Opcode.DWCONV, Opcode.REDUCE, Opcode.COPY, Opcode.UNARY}


def instruction_cost(i: Instruction, arch: NpuArch, engine: Engine | None = None) -> Cost:
    """Cost of any instruction (dispatches to the class functions above). ``engine``: the
    queue it runs in; only DWCONV runs on two engines (MATRIX, its depthwise mode, when None)."""
    if i.opcode in (Opcode.DMA_LOAD, Opcode.DMA_STORE):
        return dma_cost(i, arch)
    if i.opcode in (Opcode.CONV, Opcode.MATMUL):
        return matrix_cost(i, arch)
    if i.opcode == Opcode.DWCONV and engine != Engine.VECTOR:
        return matrix_cost(i, arch)
    if i.opcode in _VECTOR:
        return vector_cost(i, arch)
    return control_cost(i, arch)


# ---- memo key ---------------------------------------------------------------------------------
# per opcode: the fields instruction_cost reads (its cycles and events); addresses, strides, zero
# points and the like are not among them, so tiles at other addresses share one cost
# (tests/unit/isa/test_isa_cost_key.py checks this against the fields the functions above read)
COST_FIELDS: dict[Opcode, tuple[str, ...]] = {
    Opcode.DMA_LOAD: ("mem", "dtype", "d0", "d1", "d2", "d3"),
    Opcode.DMA_STORE: ("mem", "dtype", "d0", "d1", "d2", "d3"),
    Opcode.CONV: ("in_h", "in_w", "cin", "kh", "kw", "out_h", "out_w", "cout", "mode"),
    Opcode.DWCONV: ("in_h", "in_w", "ch", "kh", "kw", "out_h", "out_w", "mode"),
    Opcode.MATMUL: ("m", "n", "k", "mode"),
    Opcode.REQUANT: ("src", "rows", "ch", "out_dtype", "param_mode"),
    Opcode.ELTWISE: ("a_dtype", "b_dtype", "out_dtype", "d0", "d1", "d2"),
    Opcode.LUT: ("lut_mode", "d0", "d1", "d2"),
    Opcode.LUT_LOAD: ("count",),
    Opcode.POOL: ("dtype", "ch", "kh", "kw", "out_h", "out_w"),
    Opcode.REDUCE: ("op", "dtype", "axis", "d0", "d1", "d2"),
    Opcode.COPY: ("dtype", "d0", "d1", "d2", "d3"),
    Opcode.UNARY: ("d0", "d1", "d2"),
    Opcode.WAIT: (), Opcode.SIGNAL: (), Opcode.END: (),
}
_COST_GET = {op: itemgetter(*(_field_names(op).index(name) for name in names)) if names
             else (lambda args: ()) for op, names in COST_FIELDS.items()}


def cost_key(i: Instruction, engine: Engine | None = None) -> tuple:
    """A key equal for instructions whose `instruction_cost(i, arch, engine)` is equal on every
    arch: the opcode, whether a DWCONV runs on the vector engine, and the COST_FIELDS values.
    (Plain ints where it can: an enum member hashes in Python, the key is on hot paths.)"""
    op = i.opcode
    return (int(op), op == _DWCONV and engine == _VECTOR_ENGINE, _COST_GET[op](i.args))


_DWCONV, _VECTOR_ENGINE = Opcode.DWCONV, Engine.VECTOR


# ---- energy -------------------------------------------------------------------------------------
def energy_breakdown_pj(ev: Events, arch: NpuArch) -> dict[str, float]:
    """Dynamic energy of ``ev`` in pJ by component (off-chip memories by name)."""
    en = arch.energy
    out = {
        "mac": ev.macs * en.mac_int8_pj,
        "sram_read": ev.sram_read_bytes * en.sram_read_byte_pj,
        "sram_write": ev.sram_write_bytes * en.sram_write_byte_pj,
        "acc": (ev.acc_reads + ev.acc_writes) * en.acc_access_pj,
        "vector": ev.vector_lane_ops * en.vector_lane_op_pj,
        "lut": ev.lut_accesses * en.lut_lookup_pj,
        "operand": ev.operand_bytes * en.operand_buffer_byte_pj,
    }
    for idx, mem in enumerate(arch.offchip):
        rd = ev.offchip_read_bytes[idx] if idx < len(ev.offchip_read_bytes) else 0
        wr = ev.offchip_write_bytes[idx] if idx < len(ev.offchip_write_bytes) else 0
        out[mem.name] = (rd + wr) * en.offchip_byte_pj(mem.kind)
    return out


def energy_pj(ev: Events, arch: NpuArch) -> float:
    """Total dynamic energy of ``ev`` in pJ."""
    return math.fsum(energy_breakdown_pj(ev, arch).values())


def static_energy_pj(cycles: int, arch: NpuArch) -> float:
    """Leakage over ``cycles`` at the preset's clock: mW * s = mJ = 1e9 pJ."""
    return arch.energy.static_power_mw * cycles / arch.clock_hz * 1e9
