"""Helpers for the simulator tests: build programs from instruction lists, run them raw."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tessel.arch import NpuArch, load_preset
from tessel.binary import TslProgram
from tessel.isa import Engine, Instruction, Opcode
from tessel.sim.functional import run_functional
from tessel.sim.prepare import prepare
from tessel.sim.state import MachineState

ARCH = load_preset("tnpu-s")
END = Instruction.make(Opcode.END)


def I(opcode: Opcode, /, **kw) -> Instruction:  # noqa: E743 - short name for test programs
    return Instruction.make(opcode, **kw)


def wait(peer: Engine, token: int = 0) -> Instruction:
    return I(Opcode.WAIT, engine=peer, token=token)


def signal(peer: Engine, token: int = 0) -> Instruction:
    return I(Opcode.SIGNAL, engine=peer, token=token)


def program(streams: Mapping[Engine, Sequence[Instruction]], arch: NpuArch = ARCH, *,
            constants: bytes = b"", constants_address: int = 0, inputs=(), outputs=()
            ) -> TslProgram:
    """A TslProgram for ``arch``; END is appended to every queue, absent queues are [END]."""
    st = {e: tuple(streams.get(e, ())) + (END,) for e in Engine}
    return TslProgram(arch.arch_hash_bytes, st, constants, 0, constants_address,
                      tuple(inputs), tuple(outputs))


def run_raw(streams: Mapping[Engine, Sequence[Instruction]], *, arch: NpuArch = ARCH,
            sram: Sequence[tuple[int, np.ndarray]] = (), acc: Sequence[tuple[int, np.ndarray]] = ()
            ) -> MachineState:
    """Run the functional simulator on a state whose SRAM / accumulator are pre-written."""
    state = MachineState(arch)
    for addr, arr in sram:
        raw = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
        state.sram[addr:addr + raw.size] = raw
    accv = state.acc_bytes.view("<i4")
    for entry, arr in acc:
        flat = np.asarray(arr, np.int32).reshape(-1)
        accv[entry:entry + flat.size] = flat
    run_functional(prepare(program(streams, arch), arch), state)
    return state


def sram_read(state: MachineState, addr: int, shape, dtype) -> np.ndarray:
    dt = np.dtype(dtype)
    n = int(np.prod(shape)) * dt.itemsize
    return state.sram[addr:addr + n].view(dt).reshape(shape).copy()


def acc_read(state: MachineState, entry: int, shape) -> np.ndarray:
    n = int(np.prod(shape))
    return state.acc_bytes.view("<i4")[entry:entry + n].reshape(shape).copy()


def wrap32(x: np.ndarray) -> np.ndarray:
    return ((np.asarray(x, np.int64) + 2**31) % 2**32 - 2**31).astype(np.int64)
