"""On-chip residency, the step rewrite (experimental, behind `CompileOptions.on_chip_residency`,
default off): a tensor placed in SRAM by `schedule.residency.plan_residency` is written by its
producer and read by its consumers there instead of through DRAM.

A step's DMA that touches a live resident tensor (recognised by its `ext` box inside the
tensor's DRAM arena range) is rewritten within its tile: a load whose SRAM strides equal its
`ext` strides is dropped and the instructions reading its slot are re-based onto the tensor;
other loads become a vector COPY (VECTOR-first steps only); a store becomes a vector COPY at
the end of the tile's vector work. Rings and tokens are unchanged. docs/backend.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tessel.codegen.step import GroupWork, Slots, StepWork, TileWork
from tessel.isa import Engine, Instruction, Opcode
from tessel.isa.footprint import Space, accesses

_BASE_FIELD = {"in": "in_addr", "a": "a_addr", "b": "b_addr", "src": "src_addr",
               "w": "w_addr", "params": "param_addr"}


@dataclass(frozen=True)
class Resident:
    """Bytes [lo, hi) of off-chip memory `mem` live at SRAM `sram` during this step."""

    mem: int
    lo: int
    hi: int
    sram: int


class NotResidentCapable(Exception):
    """The step cannot read / write this tensor on chip."""


def _hit(ins: Instruction, res: Sequence[Resident]) -> Resident | None:
    ext = accesses(ins)[0]
    for r in res:
        if ext.mem == r.mem and r.lo <= ext.lo and ext.hi <= r.hi:
            return r
        if ext.mem == r.mem and ext.lo < r.hi and r.lo < ext.hi:
            raise NotResidentCapable("a transfer straddles a resident tensor")
    return None


def _dims(ins: Instruction, side: str) -> list[tuple[int, int]]:
    return [(getattr(ins, f"d{k}"), getattr(ins, f"{side}_s{k}")) for k in range(4)]


def _translated(ins: Instruction) -> bool:
    """SRAM side is the `ext` side shifted: equal strides on every dimension of extent > 1."""
    return all(n == 1 or a == b for (n, a), (_, b) in zip(_dims(ins, "ext"), _dims(ins, "sram"),
                                                             strict=True))


def _copy(ins: Instruction, src: int, src_side: str, dst: int, dst_side: str) -> Instruction:
    fields = {f"d{k}": getattr(ins, f"d{k}") for k in range(4)}
    for k in range(4):
        fields[f"src_s{k}"] = getattr(ins, f"{src_side}_s{k}")
        fields[f"dst_s{k}"] = getattr(ins, f"{dst_side}_s{k}")
    try:
        return Instruction.make(Opcode.COPY, dtype=ins.dtype, src_addr=src, dst_addr=dst,
                                **fields)
    except Exception as exc:  # a stride beyond COPY's 24-bit fields
        raise NotResidentCapable(str(exc)) from exc


_DST_FIELD = {"dst": "dst_addr", "out": "out_addr"}


def _rebase(instrs: list[Instruction], lo: int, hi: int, shift: int, *, writes: bool = False
            ) -> list[Instruction] | None:
    """Instructions whose accesses inside SRAM [lo, hi) move by `shift` (reads only, unless
    `writes`); None when one touches the box only in part, or writes it and not `writes`."""
    out = []
    for ins in instrs:
        moved = {}
        for a in accesses(ins):
            if a.space is not Space.SRAM or a.hi <= lo or hi <= a.lo:
                continue
            fields = _DST_FIELD if a.write else _BASE_FIELD
            if (a.write and not writes) or not (lo <= a.lo and a.hi <= hi) \
                    or a.what not in fields:
                return None
            f = fields[a.what]
            moved[f] = getattr(ins, f) + shift
        try:
            out.append(ins.replace(**moved) if moved else ins)
        except Exception as exc:  # a re-based field out of its range
            raise NotResidentCapable(str(exc)) from exc
    return out


def _touches(dmas: Sequence[Instruction], lo: int, hi: int) -> bool:
    """Whether a DMA's SRAM side overlaps SRAM [lo, hi) (DMAs are never re-based)."""
    return any(a.space is Space.SRAM and a.lo < hi and lo < a.hi
               for ins in dmas for a in accesses(ins))


def rewrite_tile(tile: TileWork, res: Sequence[Resident], first: Engine) -> TileWork:
    """The tile with its DMAs of resident tensors replaced (see module docstring)."""
    loads, pre, post, stores = [], [], [], []
    matrix, vector = list(tile.matrix), list(tile.vector)
    for ld in tile.loads:
        r = _hit(ld, res)
        if r is None:
            loads.append(ld)
            continue
        src = r.sram + ld.ext_addr - r.lo
        box = accesses(ld)[1]
        if _translated(ld) and not _touches(tile.stores, box.lo, box.hi):
            m2 = _rebase(matrix, box.lo, box.hi, src - ld.sram_addr)
            v2 = _rebase(vector, box.lo, box.hi, src - ld.sram_addr)
            if m2 is not None and v2 is not None:
                matrix, vector = m2, v2
                continue
        if first is not Engine.VECTOR:
            raise NotResidentCapable("a matrix-first step loads a resident tensor into a slot")
        pre.append(_copy(ld, src, "ext", ld.sram_addr, "sram"))
    for st in tile.stores:
        r = _hit(st, res)
        if r is None:
            stores.append(st)
            continue
        dst = r.sram + st.ext_addr - r.lo
        box = accesses(st)[1]
        if _translated(st) and not _touches(tile.loads, box.lo, box.hi):  # written in place
            v2 = _rebase(vector, box.lo, box.hi, dst - st.sram_addr, writes=True)
            if v2 is not None and _rebase(matrix, box.lo, box.hi, 0) == matrix:
                vector = v2
                continue
        post.append(_copy(st, st.sram_addr, "sram", dst, "ext"))
    return TileWork(loads, matrix, pre + vector + post, stores)


def rewrite_step(work: StepWork, res: Sequence[Resident]) -> StepWork:
    """`work` reading / writing the resident tensors `res` on chip."""
    if not res:
        return work
    first = Engine.MATRIX if work.shape.uses_matrix else Engine.VECTOR

    def group_fn(g: int, slot: int) -> GroupWork:
        group = work.group_fn(g, slot)
        for ins in group.weight_loads + group.param_loads:
            if _hit(ins, res) is not None:
                raise NotResidentCapable("a group load reads a resident tensor")
        return group

    def tile_fn(g: int, t: int, s: Slots) -> TileWork:
        return rewrite_tile(work.tile_fn(g, t, s), res, first)

    return StepWork(work.shape, work.group_count, group_fn, tile_fn, work.tile_key)


def all_instructions(work: StepWork) -> list[Instruction]:
    """Every instruction of the step, with the highest slot of each ring (working set)."""
    sh = work.shape
    s = Slots(inp=sh.in_depth - 1, acc=sh.acc_depth - 1, out=sh.out_depth - 1,
              group=sh.group_depth - 1)
    out = []
    for g in range(work.group_count):
        group = work.group_fn(g, sh.group_depth - 1)
        out += group.weight_loads + group.param_loads + group.vector_setup
        for t in range(group.tile_count):
            tile = work.tile_fn(g, t, s)
            out += tile.loads + tile.matrix + tile.vector + tile.stores
    return out
