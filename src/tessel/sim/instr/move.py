"""DMA_LOAD, DMA_STORE, COPY and LUT_LOAD: data movement, as numpy copies between views;
DMA_LOAD_W: a weight stream decoded (tessel.isa.weight_codec) into the SRAM.

An operand pattern of docs/isa.md is one strided numpy view (``hostmem.view``: any byte
strides, negative, zero, unaligned), so a transfer is one assignment; between two contiguous
patterns it is one byte-slice copy. COPY reads every element before writing any (a copy of
the source first when the two share bytes). A batch's DMA load from the constant block all
samples share reads it once, broadcast (``BatchState.ext_buffer``).
"""

from __future__ import annotations

import numpy as np

from tessel.errors import TesselFormatError
from tessel.isa.table import Opcode
from tessel.isa.weight_codec import decode
from tessel.sim.hostmem import Step, Views, assign, bindable, contiguous, disjoint, view
from tessel.sim.prepare import Op, PreparedProgram
from tessel.sim.state import NP_DTYPE, MachineState, Trap, extent


def _outside(lo: int, hi: int, size: int) -> Trap:
    return Trap(f"the off-chip operand [{lo}, {hi}) leaves its memory of {size} bytes")


def build_dma(op: Op, prep: PreparedProgram) -> Step:
    f, load = op.f, op.opcode is Opcode.DMA_LOAD
    dt = NP_DTYPE[f["dtype"]]
    shape = (f["d3"], f["d2"], f["d1"], f["d0"])
    ext_s = (f["ext_s3"], f["ext_s2"], f["ext_s1"], f["ext_s0"])
    sram_s = (f["sram_s3"], f["sram_s2"], f["sram_s1"], f["sram_s0"])
    mem, ea, sa = f["mem"], f["ext_addr"], f["sram_addr"]
    n = int(np.prod(shape)) * dt.itemsize
    lo, hi = extent(ea, shape, ext_s, dt.itemsize)
    if contiguous(shape, ext_s, dt.itemsize) and contiguous(shape, sram_s, dt.itemsize):
        if load:
            def step(state: MachineState) -> None:
                src = state.ext_buffer(mem, ea, ea + n)  # a batch's shared constants: 1-D
                if ea + n > src.shape[-1]:
                    raise _outside(ea, ea + n, src.shape[-1])
                state.sram[..., sa:sa + n] = src[..., ea:ea + n]
        else:
            def step(state: MachineState) -> None:
                dst = state.offchip[mem]
                if ea + n > dst.shape[-1]:
                    raise _outside(ea, ea + n, dst.shape[-1])
                dst[..., ea:ea + n] = state.sram[..., sa:sa + n]

        def bind(state: MachineState) -> object:
            ext = state.ext_buffer(mem, ea, ea + n)
            if ea + n > ext.shape[-1]:
                return None  # the step traps
            sram, ext = state.sram[..., sa:sa + n], ext[..., ea:ea + n]
            return assign(sram, ext) if load else assign(ext, sram)
        return bindable(step, bind)

    def make(state: MachineState) -> tuple[np.ndarray, np.ndarray]:
        buf = state.ext_buffer(mem, lo, hi) if load else state.offchip[mem]
        if hi > buf.shape[-1]:
            raise _outside(lo, hi, buf.shape[-1])
        return view(buf, ea, shape, ext_s, dt), view(state.sram, sa, shape, sram_s, dt)
    kept = Views(make)  # a trap is raised again on every call (nothing kept)

    def strided(state: MachineState) -> None:
        ext, sram = kept.get(state)
        if load:
            sram[...] = ext
        else:
            ext[...] = sram

    def bind(state: MachineState) -> object:
        ext, sram = kept.get(state)
        return assign(sram, ext) if load else assign(ext, sram)
    return bindable(strided, bind)


def build_decoded_load(op: Op, prep: PreparedProgram) -> Step:
    f = op.f
    mem, ea, n, sa, out = f["mem"], f["ext_addr"], f["ext_bytes"], f["sram_addr"], f["out_bytes"]
    last: list = [None, None]  # the stream last decoded and its bytes (samples share weights)

    def decoded(stream: np.ndarray) -> np.ndarray:
        if last[0] is None or not np.array_equal(last[0], stream):
            try:
                data = decode(stream.tobytes())
            except TesselFormatError as exc:
                raise Trap(f"malformed weight stream at [{ea}, {ea + n}): {exc}") from None
            if len(data) != out:
                raise Trap(f"the weight stream at {ea} decodes to {len(data)} bytes, "
                           f"not out_bytes {out}")
            last[:] = stream.copy(), np.frombuffer(data, np.uint8)
        return last[1]

    def step(state: MachineState) -> None:
        src = state.ext_buffer(mem, ea, ea + n)
        if ea + n > src.shape[-1]:
            raise _outside(ea, ea + n, src.shape[-1])
        streams = src[..., ea:ea + n]
        if streams.ndim == 1:
            state.sram[..., sa:sa + out] = decoded(streams)
        else:
            for k in range(streams.shape[0]):
                state.sram[k, sa:sa + out] = decoded(streams[k])
    return step


def build_copy(op: Op, prep: PreparedProgram) -> Step:
    f = op.f
    dt = NP_DTYPE[f["dtype"]]
    shape = tuple(f[f"d{k}"] for k in (3, 2, 1, 0))
    src_s = tuple(f[f"src_s{k}"] for k in (3, 2, 1, 0))
    dst_s = tuple(f[f"dst_s{k}"] for k in (3, 2, 1, 0))
    sa, da = f["src_addr"], f["dst_addr"]
    apart = disjoint(extent(sa, shape, src_s, dt.itemsize), extent(da, shape, dst_s, dt.itemsize))
    n = int(np.prod(shape)) * dt.itemsize
    if apart and contiguous(shape, src_s, dt.itemsize) and contiguous(shape, dst_s, dt.itemsize):
        def step_bytes(state: MachineState) -> None:
            state.sram[..., da:da + n] = state.sram[..., sa:sa + n]
        return bindable(step_bytes, lambda state: assign(state.sram[..., da:da + n],
                                                         state.sram[..., sa:sa + n]))
    views = Views(lambda state: (view(state.sram, sa, shape, src_s, dt),
                                 view(state.sram, da, shape, dst_s, dt)))

    def step(state: MachineState) -> None:
        x, y = views.get(state)
        y[...] = x if apart else x.copy()  # all reads first

    def bind(state: MachineState) -> object:
        x, y = views.get(state)
        return assign(y, x) if apart else None
    return bindable(step, bind)


def build_lut_load(op: Op, prep: PreparedProgram) -> Step:
    f = op.f
    n, base, sa = f["count"], f["lut_base"], f["src_addr"]

    def step(state: MachineState) -> None:
        state.lut_bytes[..., 2 * base:2 * (base + n)] = state.sram[..., sa:sa + 2 * n]
    return step
