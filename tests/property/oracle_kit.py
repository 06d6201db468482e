"""Run instructions on the simulator and on ``isa_ref`` (docs/isa.md in plain integers), compare.

``check(case)`` runs one ``Case`` (a queue of instructions on one engine, the bytes written
over random memories before the run, a batch size) and asserts that every memory of every
sample equals the reference's, or that both trap on the same instruction for the same
reason. Each case runs twice on the same simulated memories, the second time with new
contents (and new patches): whatever the simulator keeps between runs of one program (packed
operands, parameter tables, views) must follow the bytes.

Strategies: ``pattern`` draws an operand's dims and strides from the forms the rules allow
(dense, padded rows, negative, zero / broadcast, unaligned and self-overlapping strides) and
places it inside a small window, so that operands often overlap each other; the values that
matter (zero points, multipliers, shifts, clamps) mix extremes with realistic ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import isa_ref as ref
import numpy as np
from hypothesis import assume, event
from hypothesis import strategies as st

from tessel.arch import load_preset
from tessel.binary import TslProgram
from tessel.errors import TesselSimError
from tessel.isa import Engine, Instruction, Opcode
from tessel.sim.functional import run_functional
from tessel.sim.prepare import prepare
from tessel.sim.state import BatchState, MachineState

ARCH = load_preset("tnpu-s")
SRAM = ARCH.onchip.sram_bytes
ACC_ENTRIES = ARCH.derived.acc_entries
LUT_ENTRIES = ARCH.onchip.lut_entries
EXT_REGION = 1 << 16  # the off-chip bytes a case may touch (and that are compared)
SIZES = {"SRAM": SRAM, "ACC": ACC_ENTRIES, "LUT": LUT_ENTRIES,
         "EXT": ARCH.offchip[0].size_bytes, "EXT_COUNT": len(ARCH.offchip)}
INT32_MIN, INT32_MAX = ref.INT32_MIN, ref.INT32_MAX
CONTENT = ("random", "extreme", "small")


@dataclass
class Case:
    """A queue of instructions on ``engine``; ``patches[run][sample]``: (space, address,
    bytes) written after the random fill (e.g. REQUANT's parameters); ``n``: samples (None:
    one sample on a ``MachineState``, else a ``BatchState`` of n); ``same``: how the batch's
    samples' memories relate ("independent", "identical" or "one byte": identical but for one
    byte of the SRAM window)."""

    engine: Engine
    instrs: list[Instruction]
    patches: list[list[list[tuple[str, int, bytes]]]] = field(default_factory=list)
    n: int | None = None
    same: str = "independent"
    seed: int = 0
    content: str = "random"


# ---- memory contents -------------------------------------------------------------------------
def _fill(rng: np.random.Generator, size: int, content: str) -> np.ndarray:
    if content == "random":
        return rng.integers(0, 256, size, dtype=np.uint8)
    if content == "extreme":  # bytes of int8 / int16 / int32 extremes and their neighbours
        return rng.choice(np.array([0, 1, 0x7F, 0x80, 0xFF, 0xFE], np.uint8), size)
    # small: little-endian values near 0 (the low byte random, the others 0 or 0xff)
    out = rng.integers(0, 256, size, dtype=np.uint8)
    hi = np.arange(size) % 4 != 0
    out[hi] = np.where(rng.random(hi.sum()) < 0.8, 0, 0xFF).astype(np.uint8)
    return out


def _contents(case: Case, run: int) -> list[dict[str, np.ndarray]]:
    """Per sample: sram, acc (bytes), lut (bytes), ext (the first EXT_REGION bytes)."""
    rng = np.random.default_rng([case.seed, run])
    n = 1 if case.n is None else case.n
    first = {"sram": _fill(rng, SRAM, case.content), "acc": _fill(rng, 4 * ACC_ENTRIES, case.content),
             "lut": _fill(rng, 2 * LUT_ENTRIES, case.content),
             "ext": _fill(rng, EXT_REGION, case.content)}
    out = [first]
    for _ in range(1, n):
        if case.same == "independent":
            out.append({k: _fill(rng, len(v), case.content) for k, v in first.items()})
        else:
            other = {k: v.copy() for k, v in first.items()}
            if case.same == "one byte":
                at = int(rng.integers(0, 1 << 15))
                other["sram"][at] ^= np.uint8(1 + rng.integers(0, 255))
            out.append(other)
    patches = case.patches[run] if case.patches else [[] for _ in range(n)]
    for mem, sample_patches in zip(out, patches, strict=True):
        for space, addr, data in sample_patches:
            key = {"SRAM": "sram", "ACC": "acc", "LUT": "lut", "EXT": "ext"}[space]
            mem[key][addr:addr + len(data)] = np.frombuffer(data, np.uint8)
    return out


def _load(state: MachineState, contents: list[dict[str, np.ndarray]]) -> None:
    if state.batch is None:
        (c,) = contents
        state.sram[:] = c["sram"]
        state.acc_bytes[:] = c["acc"]
        state.lut_bytes[:] = c["lut"]
        state.offchip[0][:EXT_REGION] = c["ext"]
        return
    for k, c in enumerate(contents):
        state.sram[k] = c["sram"]
        state.acc_bytes[k] = c["acc"]
        state.lut_bytes[k] = c["lut"]
        state.offchip[0][k, :EXT_REGION] = c["ext"]


def _sample(state: MachineState, k: int) -> dict[str, np.ndarray]:
    if state.batch is None:
        return {"sram": state.sram, "acc": state.acc_bytes, "lut": state.lut_bytes,
                "ext": state.offchip[0][:EXT_REGION]}
    return {"sram": state.sram[k], "acc": state.acc_bytes[k], "lut": state.lut_bytes[k],
            "ext": state.offchip[0][k, :EXT_REGION]}


# ---- the reference on one sample ---------------------------------------------------------------
def reference(case: Case, c: dict[str, np.ndarray]) -> tuple[ref.Machine, int | None, str | None]:
    """The reference machine after the queue, and (index, reason) of its trap (or None)."""
    m = ref.Machine(c["sram"].tobytes(), c["acc"].tobytes(), c["lut"].tobytes(),
                    [c["ext"].tobytes()])
    for k, ins in enumerate(case.instrs):
        kind, res = ref.run(ins.opcode.name, _fields(ins), m, SIZES)
        if kind == "trap":
            assert isinstance(res, str)
            return m, k, res
        assert isinstance(res, ref.Machine)
        m = res
    return m, None, None


def _fields(ins: Instruction) -> dict[str, int]:
    return {k: int(v) for k, v in ins.as_dict().items()}


def program_of(case: Case) -> TslProgram:
    end = Instruction.make(Opcode.END)
    st_ = {e: ((*case.instrs, end) if e == case.engine else (end,)) for e in Engine}
    return TslProgram(ARCH.arch_hash_bytes, st_, b"", 0, 0, (), ())


# words of the simulator's message for each reason of the reference
_MESSAGE = {"twice": "writes some bytes twice", "mem": "does not exist",
            "acc_stride": "acc_stride", "clamp": "clamp", "dtype": "I8 or I16"}


def _expect_message(msg: str, case: Case, k: int, why: str) -> None:
    ins = case.instrs[k]
    assert msg.startswith(f"{case.engine.name} instruction {k} ({ins.opcode.name})"), msg
    if why.startswith("box"):
        assert "outside the" in msg, msg
    elif why.startswith("parameter entry"):
        assert f"{why}:" in msg and "multiplier" in msg, msg
    elif why.startswith("the window of output"):  # some output whose window is empty
        at = msg.index("the window of output (") + len("the window of output (")
        oy, ox = (int(v) for v in msg[at:msg.index(")", at)].split(","))
        assert ref.pool_window_empty(_fields(ins), oy, ox), msg
    else:
        assert _MESSAGE[why] in msg, (why, msg)


def check(case: Case) -> None:
    """Run ``case`` twice on one prepared program and one state; compare with the reference."""
    prep = prepare(program_of(case), ARCH)
    if case.n is None:
        state = MachineState(ARCH)
    else:
        state = BatchState(ARCH, case.n, [EXT_REGION], None)
    for run in range(2):
        contents = _contents(case, run)
        _load(state, contents)
        want = [reference(case, c) for c in contents]
        trap = next((w for w in want if w[1] is not None), None)
        event("trap: " + trap[2].split(" ")[0] if trap is not None else
              f"runs ({'batch' if case.n else 'one sample'})")
        if trap is not None:
            # a static trap is every sample's; a data-dependent one is at least one sample's
            try:
                run_functional(prep, state)
            except TesselSimError as exc:
                _expect_message(str(exc), case, trap[1], trap[2])
            else:
                raise AssertionError(f"no trap; the reference traps at {trap[1]}: {trap[2]}")
            return  # the memories after a trap are not specified
        run_functional(prep, state)
        for k, (m, _, _) in enumerate(want):
            got = _sample(state, k)
            for name, mem in (("sram", m.sram), ("acc", m.acc), ("lut", m.lut),
                              ("ext", m.ext[0])):
                g = got[name].tobytes()
                if g != mem:
                    diff = [i for i in range(len(mem)) if g[i] != mem[i]]
                    raise AssertionError(f"run {run}, sample {k}: {name} differs at "
                                         f"{len(diff)} bytes, first {diff[:8]}")


# ---- strategies --------------------------------------------------------------------------------
INT32 = st.integers(INT32_MIN, INT32_MAX)


def extremes(lo: int, hi: int, *special: int) -> st.SearchStrategy[int]:
    """Integers in [lo, hi], often an end, a neighbour of one or a special value."""
    picks = sorted({v for v in (lo, lo + 1, hi - 1, hi, 0, 1, -1, *special) if lo <= v <= hi})
    return st.one_of(st.sampled_from(picks), st.integers(lo, hi))


ZP9 = extremes(-256, 255, -128, 127)
ZP32 = extremes(INT32_MIN, INT32_MAX, -128, 127, -32768, 32767, 2**31 - 2**16)
Q31 = extremes(0, INT32_MAX, 1 << 30, (1 << 30) + 1, 1_500_000_000)
SHIFT = extremes(-31, 30, -20, -8, 8, 20)


@st.composite
def clamp_range(draw: Any, dtype: int) -> tuple[int, int]:
    lo, hi = ref.TYPE_RANGE[dtype]
    a, b = draw(extremes(lo, hi)), draw(extremes(lo, hi))
    return (a, b) if a <= b else (b, a)


STRIDE_KINDS = ("dense", "dense", "padded", "negative", "zero", "odd", "overlap")
# a destination's strides: rarely ones that write a byte twice (they trap); "safe": never
DST_KINDS = {True: ("dense",) * 6 + ("padded",) * 2 + ("negative",) * 2 + ("odd", "zero"),
             "safe": ("dense", "dense", "padded", "negative")}


@st.composite
def strides_for(draw: Any, ns: list[int], w: int, dst: bool | str = False, span: int = 0
                ) -> list[int]:
    """Strides (innermost first) for dims ``ns`` of ``w``-byte elements (``span``: the bytes
    an inner part of fixed strides spans, default one element); a destination draws zero
    and overlapping strides rarely (they trap)."""
    out = []
    span = span or w
    for n in ns:
        kinds = STRIDE_KINDS if not dst else DST_KINDS[dst]
        kind = draw(st.sampled_from(kinds))
        if kind == "dense":
            s = span
        elif kind == "padded":
            s = span + draw(st.integers(1, 9))
        elif kind == "negative":
            s = -span - draw(st.sampled_from([0, 0, 3]))
        elif kind == "zero":
            s = 0
        elif kind == "odd":
            s = draw(st.integers(-3 * w - 5, 3 * w + 5))
        else:  # overlap: a step shorter than what the inner dims span
            s = draw(st.integers(1, max(1, span - 1)))
        out.append(s)
        span = max(span, abs(s) * (n - 1) + span)
    return out


def place(draw: Any, ns: list[int], ss: list[int], w: int, window: int, lo_bound: int = 0
          ) -> int:
    """A base address putting the pattern's box inside [lo_bound, lo_bound + window)."""
    lo, hi = ref.box(0, ns, ss, w)
    first, last = lo_bound - lo, lo_bound + window - hi
    assume(first <= last)
    return draw(st.integers(first, last))


@st.composite
def pattern(draw: Any, ns: list[int], w: int, window: int, dst: bool | str = False,
            lo_bound: int = 0) -> tuple[int, list[int]]:
    """(base, strides) of a pattern of dims ``ns`` placed inside the window."""
    ss = draw(strides_for(ns, w, dst))
    return place(draw, ns, ss, w, window, lo_bound), ss


def batch_of(draw: Any) -> tuple[int | None, str]:
    n = draw(st.sampled_from([None, None, None, 1, 2, 3]))
    same = draw(st.sampled_from(["independent", "identical", "one byte"]))
    return n, same


def samples(n: int | None) -> int:
    return 1 if n is None else n


def case_of(draw: Any, engine: Engine, instrs: list[Instruction],
            patches: Any = None, n: Any = "draw") -> Case:
    """A Case with drawn batch size, memory contents and seed (``patches(draw, n)`` ->
    patches[run][sample], or None)."""
    if n == "draw":
        n, same = batch_of(draw)
    else:
        same = "independent"
    p = patches(draw, n) if patches is not None else []
    return Case(engine, instrs, p, n, same, draw(st.integers(0, 2**32 - 1)),
                draw(st.sampled_from(CONTENT)))
