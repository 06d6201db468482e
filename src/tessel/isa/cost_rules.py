"""How an instruction's cost in isolation is formed on an engine (docs/isa.md, "Costs").

An instruction's definition (``InstrSpec.cost``) is one of four rules: ``Control`` (WAIT,
SIGNAL, END), ``Transfer`` (a DMA), ``Gemm`` (the matrix array: the GEMM fold formula bounded
by the operand path) and ``Vector`` (lane work bounded by the SRAM ports). The sizes a rule
reads are ``Product``s of fields, so the same declaration computes them and writes their
formula into docs/isa.md. What no rule models is interaction between instructions: waiting on
tokens and DMA engines sharing an off-chip memory's bandwidth are the simulator's job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tessel.arch.types import Dataflow
from tessel.isa.events import Events
from tessel.isa.fields import AccMode

if TYPE_CHECKING:
    from tessel.arch.types import NpuArch
    from tessel.isa.instruction import Instruction

CONTROL_CYCLES = 1  # WAIT (when the token is there), SIGNAL, END


@dataclass(frozen=True)
class Cost:
    cycles: int
    events: Events


@dataclass(frozen=True)
class Product:
    """``factor`` times the product of the fields ``names`` (a size in a cost or rule)."""

    names: tuple[str, ...]
    factor: int = 1

    def of(self, i: Instruction) -> int:
        n = self.factor
        for name in self.names:
            n *= getattr(i, name)
        return n

    def doc(self) -> str:
        """The formula, as docs/isa.md writes it (``8*d0*d1*d2``)."""
        return "*".join(([str(self.factor)] if self.factor != 1 else []) + list(self.names))


def product(*names: str, factor: int = 1) -> Product:
    return Product(names, factor)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class CostRule:
    """The cycles and events of an instruction in isolation on one engine."""

    def cost(self, i: Instruction, arch: NpuArch) -> Cost:
        raise NotImplementedError

    def cycles_doc(self) -> str:
        """The cycle formula, for docs/isa.md's table of cost rules."""
        raise NotImplementedError

    def events_doc(self) -> str:
        raise NotImplementedError


_NO_EVENTS = Events()


@dataclass(frozen=True)
class Control(CostRule):
    """WAIT / SIGNAL / END: one cycle (a WAIT's blocked time is not part of its cost)."""

    def cost(self, i: Instruction, arch: NpuArch) -> Cost:
        return Cost(CONTROL_CYCLES, _NO_EVENTS)

    def cycles_doc(self) -> str:
        return str(CONTROL_CYCLES)

    def events_doc(self) -> str:
        return "none"


@dataclass(frozen=True)
class Transfer(CostRule):
    """A DMA alone: latency + ceil(bytes / bytes_per_cycle) of its off-chip memory, bounded by
    the SRAM ports."""

    load: bool  # off-chip -> SRAM (else SRAM -> off-chip)
    elements: Product

    def cost(self, i: Instruction, arch: NpuArch) -> Cost:
        nbytes = self.elements.of(i) * i.dtype.nbytes
        mem = arch.offchip[i.mem]
        bpc = min(mem.bytes_per_cycle, arch.derived.sram_bytes_per_cycle)
        per_mem = [0] * len(arch.offchip)
        per_mem[i.mem] = nbytes
        if self.load:
            ev = Events(sram_write_bytes=nbytes, offchip_read_bytes=tuple(per_mem),
                        offchip_write_bytes=(0,) * len(per_mem))
        else:
            ev = Events(sram_read_bytes=nbytes, offchip_write_bytes=tuple(per_mem),
                        offchip_read_bytes=(0,) * len(per_mem))
        return Cost(mem.latency_cycles + _cdiv(nbytes, bpc), ev)

    def cycles_doc(self) -> str:
        return ("`latency + ceil(bytes / min(mem.bytes_per_cycle, SRAM_BW))`, "
                f"`bytes = {self.elements.doc()}*nbytes(dtype)`")

    def events_doc(self) -> str:
        return "off-chip bytes read (LOAD) / written (STORE) of `mem`; SRAM bytes written / read"


@dataclass(frozen=True)
class DecodedTransfer(CostRule):
    """DMA_LOAD_W: the stream crosses the off-chip link while the weight decoder writes its
    bytes, the slower of the two setting the pace."""

    def cost(self, i: Instruction, arch: NpuArch) -> Cost:
        mem = arch.offchip[i.mem]
        link = _cdiv(i.ext_bytes, min(mem.bytes_per_cycle, arch.derived.sram_bytes_per_cycle))
        decode = _cdiv(i.out_bytes, arch.wdecoder.bytes_per_cycle)
        per_mem = [0] * len(arch.offchip)
        per_mem[i.mem] = i.ext_bytes
        ev = Events(sram_write_bytes=i.out_bytes, offchip_read_bytes=tuple(per_mem),
                    offchip_write_bytes=(0,) * len(per_mem), weight_decoded_bytes=i.out_bytes)
        return Cost(mem.latency_cycles + max(link, decode), ev)

    def cycles_doc(self) -> str:
        return ("`latency + max(ceil(ext_bytes / min(mem.bytes_per_cycle, SRAM_BW)), "
                "ceil(out_bytes / wdecoder.bytes_per_cycle))`")

    def events_doc(self) -> str:
        return ("off-chip bytes read of `mem` (`ext_bytes`); SRAM bytes written and bytes "
                "decoded (`out_bytes`)")


# ---- the matrix array ---------------------------------------------------------------------------
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


@dataclass(frozen=True)
class Gemm(CostRule):
    """CONV / MATMUL / DWCONV (depthwise mode) on the array: an M x N x K GEMM, the fold
    formula bounded below by the operand path (SRAM bytes into the operand buffers /
    feed_bytes_per_cycle)."""

    m: Product  # output rows (pixels)
    n: Product  # output columns
    k: Product  # reduction (DWCONV: kernel taps)
    window: Product | None  # the input tile's bytes with its halo (None: M*K, no halo)
    depthwise: bool = False  # each column reads its own channel: M*K*N operand bytes, once
    # weights per byte as stored (None: one): the weight path reads the bytes as stored and
    # unpacks them before the array
    weights_per_byte: Callable[[Instruction], int] | None = None
    # 2:4 sparse weights (None: never): half the reduction reaches the array, the values and
    # their indices are read, one index decoded per group of four weights
    sparse: Callable[[Instruction], bool] | None = None
    # the activation input's type (None: int8): int16 elements are two bytes on the operand
    # path, a pass takes matrix.int16_pass_factor times the cycles, and each result is a wide
    # accumulator entry (two entries read or written)
    in_type: Callable[[Instruction], Any] | None = None

    def dims(self, i: Instruction) -> tuple[int, int, int]:
        """(M, N, K) of the tile."""
        return self.m.of(i), self.n.of(i), self.k.of(i)

    def input_bytes(self, i: Instruction) -> tuple[int, int]:
        """(tile input bytes with the halo, bytes without reuse: one per array operand)."""
        m, n, k = self.dims(i)
        nb = 1 if self.in_type is None else self.in_type(i).nbytes
        im2col = m * k * n if self.depthwise else m * k
        return (m * k if self.window is None else self.window.of(i)) * nb, im2col * nb

    def cost(self, i: Instruction, arch: NpuArch) -> Cost:
        m, n, k = self.dims(i)
        mx = arch.matrix
        r, c, df = mx.rows, mx.cols, mx.dataflow
        col_folds, row_folds = _cdiv(n, c), _cdiv(m, r)
        window, im2col = self.input_bytes(i)
        per_byte = 1 if self.weights_per_byte is None else self.weights_per_byte(i)
        if per_byte > 1 and not mx.int4_weights:
            raise ValueError(f"{i.opcode.name} with int4 weights on an NPU without the int4 "
                             "decoder (matrix.int4_weights = false)")
        # a target without sparsity traps on such an instruction (its spec's ``requires``)
        sparse = self.sparse is not None and self.sparse(i)
        indices = k // 4 * n if sparse else 0  # one per group of four weights
        k_run = k // 2 if sparse else k  # the reduction the array runs: the kept weights
        weights = k_run * n
        w_bytes = _cdiv(weights, per_byte) + _cdiv(indices, 2)  # as stored in SRAM
        # the tile's input is read once when it fits the input window buffer, else per operand
        per_operand = im2col * (1 if self.depthwise else col_folds)
        in_reads = window if window <= mx.input_buffer_bytes else per_operand
        operand = per_operand
        if df == Dataflow.WEIGHT_STATIONARY:
            w_reads, unpacked, passes = w_bytes, weights, 1  # preloaded once per fold
            operand += weights
            k_folds = _cdiv(k_run, r)
            acc_writes = m * n * k_folds
            acc_reads = m * n * (k_folds - 1 + (i.mode == AccMode.ACCUMULATE))
        else:
            passes = 1 if w_bytes <= mx.weight_buffer_bytes else row_folds
            w_reads, unpacked = w_bytes * passes, weights * passes
            operand += weights * row_folds
            acc_writes = m * n
            acc_reads = m * n * (i.mode == AccMode.ACCUMULATE)
        sram_reads = in_reads + w_reads
        compute = gemm_cycles(m, n, k_run, r, c, df, mx.fold_pipelining)
        wide = self.in_type is not None and self.in_type(i).entries > 1
        if wide:
            compute *= mx.int16_pass_factor
            acc_reads, acc_writes = 2 * acc_reads, 2 * acc_writes
        cycles = max(compute, _cdiv(sram_reads, mx.feed_bytes_per_cycle))
        unpacked = unpacked if per_byte > 1 else 0
        if unpacked:
            cycles = max(cycles, _cdiv(unpacked, mx.int4_decode_per_cycle))
        decoded = indices * passes
        if decoded:
            cycles = max(cycles, _cdiv(decoded, arch.sparse.index_decode_per_cycle))
        return Cost(cycles, Events(macs=m * n * k_run, sram_read_bytes=sram_reads,
                                   operand_bytes=operand, acc_reads=acc_reads,
                                   acc_writes=acc_writes, int4_unpacked=unpacked,
                                   sparse_indices=decoded))

    def cycles_doc(self) -> str:
        return ("`max(G, ceil(sram_reads / matrix.feed_bytes_per_cycle), ceil(unpacked / "
                "matrix.int4_decode_per_cycle), ceil(indices / sparse.index_decode_per_cycle))`, "
                "`G` = GEMM cycles below (2:4 sparse weights: of the reduction `K/2`; "
                "`in_type` I16: times `matrix.int16_pass_factor`, input bytes two per element), "
                "`unpacked` the int4 weights read (0 for int8), `indices` the 2:4 indices read "
                "(`K/4*N` per pass; 0 dense)")

    def events_doc(self) -> str:
        return ("`macs = M*N*K` (2:4 sparse: `M*N*K/2`); SRAM reads, operand-buffer bytes, "
                "accumulator reads/writes below (`in_type` I16: two entries per wide result)")


# ---- the vector engine --------------------------------------------------------------------------
@dataclass(frozen=True)
class Vector(CostRule):
    """A vector instruction: latency + max(ceil(work / lanes), ceil(SRAM bytes / SRAM bytes
    per cycle)); ``events(i)`` counts its events, ``events_text`` says which for the docs."""

    work: Product  # lane-cycles
    events: Callable[[Instruction], Events]
    events_text: str

    def cost(self, i: Instruction, arch: NpuArch) -> Cost:
        work, ev = self.work.of(i), self.events(i)
        sram = _cdiv(ev.sram_read_bytes + ev.sram_write_bytes, arch.derived.sram_bytes_per_cycle)
        cycles = arch.vector.pipeline_latency_cycles + max(_cdiv(work, arch.vector.lanes), sram)
        return Cost(cycles, ev)

    def cycles_doc(self) -> str:
        return "`pipeline_latency + max(ceil(work / L), ceil((sram_read + sram_write) / SRAM_BW))`"

    def events_doc(self) -> str:
        return "below"
