"""On-chip residency, the step rewrite (behind `CompileOptions.on_chip_residency`): a
tensor placed in SRAM by `schedule.residency.plan_residency` is written by its producer and
read by its consumers there instead of through DRAM (wholly, or a prefix of it).

A step's DMA that touches a live resident tensor (recognised by its `ext` box inside the
tensor's DRAM arena range) is rewritten within its tile: a load whose SRAM strides equal its
`ext` strides (or whose slot the instructions walk along its own dimensions) is dropped and
the instructions reading its slot are re-based onto the tensor; other loads become a vector
COPY (VECTOR-first steps only); a store is written in place or becomes a vector COPY at the
end of the tile's vector work. Rings and tokens are unchanged. docs/backend.md.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tessel.isa import Engine, Instruction, Opcode
from tessel.isa.footprint import Space, accesses
from tessel.isa.table import SPECS
from tessel.ops.step import GroupWork, Slots, StepWork, TileWork, top_slots

# positions in a DMA's `args` (DMA_LOAD and DMA_STORE share their fields): d0..d3, ext_s0..3,
# sram_s0..3 (field reads by name are on this module's hot path)
_DMA_FIELDS = [f.name for f in SPECS[Opcode.DMA_LOAD].fields]
assert _DMA_FIELDS == [f.name for f in SPECS[Opcode.DMA_STORE].fields]
_D, _EXT_S, _SRAM_S = ([_DMA_FIELDS.index(f"{p}{k}") for k in range(4)]
                       for p in ("d", "ext_s", "sram_s"))
_SRAM_ADDR, _DTYPE = _DMA_FIELDS.index("sram_addr"), _DMA_FIELDS.index("dtype")
_D0, _D1, _D2, _D3 = _D
_E0, _E1, _E2, _E3 = _EXT_S
_S0, _S1, _S2, _S3 = _SRAM_S
_D_OF, _EXT_S_OF, _SRAM_S_OF = (operator.itemgetter(*p) for p in (_D, _EXT_S, _SRAM_S))

_BASE_FIELD = {"in": "in_addr", "a": "a_addr", "b": "b_addr", "src": "src_addr",
               "w": "w_addr", "params": "param_addr"}


@dataclass(frozen=True)
class Resident:
    """Bytes [lo, hi) of off-chip memory `mem` live at SRAM `sram` during this step.

    partial: the tensor goes on past `hi` in DRAM (a transfer straddling `hi` stays a DMA);
    keep: off-chip ranges [lo, hi) that some consumer still reads from DRAM, so a store
    touching one is written both on chip and to DRAM."""

    mem: int
    lo: int
    hi: int
    sram: int
    partial: bool = False
    keep: tuple[tuple[int, int], ...] = ()


class NotResidentCapable(Exception):
    """The step cannot read / write this tensor on chip."""


def _hit(ins: Instruction, res: Sequence[Resident]) -> Resident | None:
    ext = accesses(ins)[0]
    mem, lo, hi = ext.mem, ext.lo, ext.hi
    for r in res:
        if mem == r.mem:
            if r.lo <= lo and hi <= r.hi:
                return r
            if lo < r.hi and r.lo < hi and not r.partial:
                raise NotResidentCapable("a transfer straddles a resident tensor")
    return None


def _translated(ins: Instruction) -> bool:
    """SRAM side (of a DMA) is the `ext` side shifted: equal strides on every dimension of
    extent > 1."""
    a = ins.args
    return ((a[_D0] == 1 or a[_E0] == a[_S0]) and (a[_D1] == 1 or a[_E1] == a[_S1])
            and (a[_D2] == 1 or a[_E2] == a[_S2]) and (a[_D3] == 1 or a[_E3] == a[_S3]))


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


# field name -> position in `args`, per opcode (the operand patterns read fields by position)
_INDEX = {op: {f.name: k for k, f in enumerate(spec.fields)} for op, spec in SPECS.items()}
# (operand, dimensions) -> its base field and its (extent field, stride field) per dimension
_STRIDED = {(p, n): (f"{p}_addr", tuple((f"d{k}", f"{p}_s{k}") for k in range(n)))
            for p in ("a", "b", "out", "src", "dst") for n in (3, 4)}


def _strided(ins: Instruction, p: str, n: int, elem: int) -> tuple[str, list, int]:
    """`_pattern` of operand `p`: n dimensions of extents d0.. and strides `p`_s0.."""
    a, at = ins.args, _INDEX[ins.opcode]
    base, dims = _STRIDED[p, n]
    return base, [(a[at[d]], st, a[at[st]]) for d, st in dims], elem


def _nhwc(ins: Instruction, p: str, h: int, w: int, ch: int, elem: int
          ) -> tuple[str, list, int]:
    """`_pattern` of operand `p`: h x w pixels (strides `p`_stride_h / _w) of ch channels."""
    a, at = ins.args, _INDEX[ins.opcode]
    sh, sw = f"{p}_stride_h", f"{p}_stride_w"
    return f"{p}_addr", [(h, sh, a[at[sh]]), (w, sw, a[at[sw]]), (ch, None, elem)], elem


def _pattern(ins: Instruction, what: str
             ) -> tuple[str, list[tuple[int, str | None, int]], int] | None:
    """Operand `what` of `ins` as (base field, [(extent, stride field or None when fixed,
    stride in bytes)], element bytes); None for an operand this module does not re-base."""
    op = ins.opcode
    if op in (Opcode.CONV, Opcode.DWCONV) and what == "in":
        ch = ins.cin if op == Opcode.CONV else ins.ch
        return _nhwc(ins, "in", ins.in_h, ins.in_w, ch, 1)
    if op == Opcode.POOL and what in ("in", "out"):
        w = ins.dtype.nbytes
        if what == "in":
            return _nhwc(ins, "in", ins.in_h, ins.in_w, ins.ch, w)
        return _nhwc(ins, "out", ins.out_h, ins.out_w, ins.ch, w)
    if op == Opcode.MATMUL and what in ("a", "b"):
        if what == "a":
            return "a_addr", [(ins.m, "a_stride_m", ins.a_stride_m),
                              (ins.k, "a_stride_k", ins.a_stride_k)], 1
        return "b_addr", [(ins.k, "b_stride_k", ins.b_stride_k),
                          (ins.n, "b_stride_n", ins.b_stride_n)], 1
    if op == Opcode.REQUANT and what in ("src", "dst"):
        if what == "src":
            return "src_addr", [(ins.rows, "src_stride", ins.src_stride), (ins.ch, None, 4)], 4
        w = ins.out_dtype.nbytes
        return "dst_addr", [(ins.rows, "dst_stride", ins.dst_stride), (ins.ch, None, w)], w
    if op == Opcode.ELTWISE and what in ("a", "b", "out"):
        return _strided(ins, what, 3, getattr(ins, f"{what}_dtype").nbytes)
    if op == Opcode.LUT and what in ("src", "dst"):
        return _strided(ins, what, 3, ins.lut_mode.dtype.nbytes)
    if op == Opcode.UNARY and what in ("src", "dst"):
        return _strided(ins, what, 3, 4)
    if op == Opcode.COPY and what in ("src", "dst"):
        return _strided(ins, what, 4, ins.dtype.nbytes)
    if op == Opcode.REDUCE and what == "src":
        return _strided(ins, what, 3, ins.dtype.nbytes)
    return None


class _Map:
    """Slot -> tensor: the element at slot index (i0..i3) of a DMA's SRAM pattern lives at
    `dst + sum(i_k * to_s[k])` (its `ext` pattern moved onto the resident tensor)."""

    __slots__ = ("src", "src_s", "dims", "dst", "to_s", "lo", "hi", "elem", "_outer_first",
                 "_nested", "by_stride")

    def __init__(self, src: int, src_s: tuple[int, ...], dims: tuple[int, ...], dst: int,
                 to_s: tuple[int, ...], lo: int, hi: int, elem: int):
        self.src, self.src_s, self.dims, self.dst, self.to_s = src, src_s, dims, dst, to_s
        self.lo, self.hi, self.elem = lo, hi, elem
        big = [k for k in range(4) if dims[k] > 1]  # the dimensions of extent > 1
        stride = src_s.__getitem__
        self._outer_first = sorted(big, key=stride, reverse=True)  # largest stride first
        span, nested = 1, True
        for k in sorted(big, key=stride):
            if src_s[k] < span:
                nested = False
                break
            span = src_s[k] * dims[k]
        self._nested = nested
        self.by_stride: dict[int, int] = {}  # stride -> the first such dimension
        for k in big:
            self.by_stride.setdefault(src_s[k], k)

    @classmethod
    def of(cls, dma: Instruction, dst: int) -> _Map:
        box, a = accesses(dma)[1], dma.args
        return cls(a[_SRAM_ADDR], _SRAM_S_OF(a), _D_OF(a), dst, _EXT_S_OF(a), box.lo, box.hi,
                   (1, 2, 4)[a[_DTYPE]])

    def index(self, addr: int) -> list[int] | None:
        """Slot index of byte `addr` (None unless the slot's dimensions nest: each stride
        positive and past the span of the smaller ones, so the index is unique)."""
        idx, off = [0] * 4, addr - self.src
        if off < 0:
            return None
        for k in self._outer_first:
            idx[k], off = divmod(off, self.src_s[k])
            if self.src_s[k] <= 0 or idx[k] >= self.dims[k]:
                return None
        return idx if off == 0 else None

    def nested(self) -> bool:
        """Whether each stride (of a dimension of extent > 1) steps past the span of the
        smaller ones."""
        return self._nested


def _remap(instrs: list[Instruction], m: _Map, *, writes: bool = False
           ) -> list[Instruction] | None:
    """Instructions whose accesses inside the slot box move onto the tensor (reads only,
    unless `writes`), strides included (a channel chunk of a wider tensor: the pixel stride
    becomes the tensor's); None when one cannot be moved exactly (touches the box in part,
    writes it and not `writes`, an operand or stride that does not map element by element)."""
    out = []
    nested = m.nested()
    for ins in instrs:
        moved: dict[str, int] = {}
        for a in accesses(ins):
            if a.space is not Space.SRAM or a.hi <= m.lo or m.hi <= a.lo:
                continue
            pat = _pattern(ins, a.what) if nested else None
            if (a.write and not writes) or not (m.lo <= a.lo and a.hi <= m.hi) or pat is None \
                    or pat[2] != m.elem:
                return None
            base, dims, _ = pat
            idx = m.index(getattr(ins, base))
            if idx is None:
                return None
            to_s = m.to_s
            addr = m.dst + idx[0] * to_s[0] + idx[1] * to_s[1] + idx[2] * to_s[2] + idx[3] * to_s[3]
            reach = idx[:]
            for n, field, stride in dims:
                if n == 1 or stride == 0:  # one element, or a broadcast: nothing to map
                    continue
                k = m.by_stride.get(stride)
                if k is None:
                    return None
                reach[k] += n - 1
                if reach[k] >= m.dims[k]:
                    return None
                if field is None:
                    if m.to_s[k] != stride:
                        return None
                else:
                    moved[field] = m.to_s[k]
            moved[base] = addr
        try:
            out.append(ins.replace(**moved) if moved else ins)
        except Exception as exc:  # a re-based field out of its range
            raise NotResidentCapable(str(exc)) from exc
    return out


def _touches(dmas: Sequence[Instruction], lo: int, hi: int) -> bool:
    """Whether a DMA's SRAM side overlaps SRAM [lo, hi) (DMAs are never re-based)."""
    for ins in dmas:
        for a in accesses(ins):
            if a.lo < hi and lo < a.hi and a.space is Space.SRAM:
                return True
    return False


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
        if not _touches(tile.stores, box.lo, box.hi):
            if _translated(ld):
                m2 = _rebase(matrix, box.lo, box.hi, src - ld.sram_addr)
                v2 = _rebase(vector, box.lo, box.hi, src - ld.sram_addr)
            else:  # a window of the tensor with other strides (a channel chunk)
                m = _Map.of(ld, src)
                m2, v2 = _remap(matrix, m), _remap(vector, m)
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
        box, ext = accesses(st)[1], accesses(st)[0]
        also_dram = any(ext.lo < k1 and k0 < ext.hi for k0, k1 in r.keep)
        if not _touches(tile.loads, box.lo, box.hi) and not _touches(matrix, box.lo, box.hi):
            if _translated(st):  # written in place
                v2 = _rebase(vector, box.lo, box.hi, dst - st.sram_addr, writes=True)
            else:  # written in place with the tensor's strides
                v2 = _remap(vector, _Map.of(st, dst), writes=True)
            if v2 is not None:
                vector = v2
                if also_dram:  # the DMA reads the tensor where it now is
                    stores.append(_from_tensor(st, dst))
                continue
        post.append(_copy(st, st.sram_addr, "sram", dst, "ext"))
        if also_dram:
            stores.append(st)
    return TileWork(loads, matrix, pre + vector + post, stores)


def _from_tensor(st: Instruction, dst: int) -> Instruction:
    """The store `st` reading its elements from the on-chip tensor at `dst` (its strides)."""
    try:
        return st.replace(sram_addr=dst, **{f"sram_s{k}": getattr(st, f"ext_s{k}")
                                            for k in range(4)})
    except Exception as exc:  # a stride beyond the 24-bit SRAM fields
        raise NotResidentCapable(str(exc)) from exc


def rewrite_step(work: StepWork, res: Sequence[Resident], *, keyed: bool = False) -> StepWork:
    """`work` reading / writing the resident tensors `res` on chip.

    keyed: give the rewritten step a tile key (the residency planner's estimates of many
    candidate tensors): tiles the emitter keys alike whose DMAs hit the same residents the
    same way (`_signature`) are taken to rewrite to the same costs, so the estimate rewrites
    one tile per key. Without it every tile is rewritten (the schedule's final estimates and
    the emitted program), which is also where a tile the key skipped would fail."""
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

    # unkeyed: tiles the emitter found alike may differ now (in the resident prefix or not, a
    # re-based load or a COPY), so the estimate builds every tile
    key = work.tile_key
    if not keyed or key is None:
        return StepWork(work.shape, work.group_count, group_fn, tile_fn, None)

    top = top_slots(work.shape)

    def tile_key(g: int, t: int) -> tuple:
        return key(g, t), _signature(work.tile_fn(g, t, top), res)

    return StepWork(work.shape, work.group_count, group_fn, tile_fn, tile_key)


def _signature(tile: TileWork, res: Sequence[Resident]) -> tuple:
    """How each DMA of the tile meets the residents: which one it hits (-1: none), whether
    its SRAM side is its `ext` side translated, and (stores) whether DRAM keeps a copy."""
    out = []
    for dmas in (tile.loads, tile.stores):
        for ins in dmas:
            r = _hit(ins, res)
            if r is None:
                out.append(-1)
                continue
            ext = accesses(ins)[0]
            out.append((res.index(r), _translated(ins),
                        any(ext.lo < k1 and k0 < ext.hi for k0, k1 in r.keep)))
    return tuple(out)


def sram_top(instrs: Iterable[Instruction]) -> int:
    """One past the highest SRAM byte the instructions touch, or -1 if none. Of a step's
    `all_instructions` (the highest slot of each ring): the residency planner's floor of the
    step (its working set) and, for a step without residents, the prefetch planner's hull; a
    function of the step's unit, mapping and the NPU's SRAM layout fields alone (SRAM
    addresses never read the DRAM placement), so the schedule stage shares it across design
    points (schedule/plan.py `_placed`)."""
    top = -1
    for ins in instrs:
        for a in accesses(ins):
            if a.space is Space.SRAM and a.hi > top:
                top = a.hi
    return top


def all_instructions(work: StepWork) -> list[Instruction]:
    """Every instruction of the step, with the highest slot of each ring (working set)."""
    sh = work.shape
    s = top_slots(sh)
    out = []
    for g in range(work.group_count):
        group = work.group_fn(g, sh.group_depth - 1)
        out += group.weight_loads + group.param_loads + group.vector_setup
        for t in range(group.tile_count):
            tile = work.tile_fn(g, t, s)
            out += tile.loads + tile.matrix + tile.vector + tile.stores
    return out
