"""A plain-integer model of every Tessel NPU instruction, written from docs/isa.md alone.

The test oracle of the simulator at instruction level: each ``ref_*`` function follows the
pseudocode of its instruction in docs/isa.md section 4 line by line, on Python integers (no
numpy arithmetic, no code of ``tessel.sim``), so a disagreement is either a simulator bug or
a gap in the document. Memories are ``bytes`` snapshots (every input is read before any output
is written, docs/isa.md "Execution of one instruction"); outputs are collected in a
``Writes`` and applied afterwards, which also detects a destination byte written twice (static
rule 6). The operand boxes of static rule 1 and the clamp / stride rules 2-4 are written out
here too (``static_trap``), from the text of section 3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
NBYTES = {0: 1, 1: 2, 2: 4}  # DType value -> bytes (I8, I16, I32)
TYPE_RANGE = {0: (-128, 127), 1: (-32768, 32767), 2: (INT32_MIN, INT32_MAX)}


# ---- the functions of docs/isa.md section 1 ---------------------------------------------------
def sat32(v: int) -> int:
    return max(INT32_MIN, min(INT32_MAX, v))


def wrap(v: int, bits: int) -> int:
    """``v`` modulo 2^bits into the signed range (wrap32 / wrap16 / wrap8)."""
    m = 1 << bits
    return (v + (m >> 1)) % m - (m >> 1)


def clamp(v: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, v))


def srdhm(a: int, b: int) -> int:
    """round(a*b / 2^31), halves up; INT32_MIN * INT32_MIN -> INT32_MAX."""
    if a == b == INT32_MIN:
        return INT32_MAX
    return (a * b + 2**30) >> 31  # floor(a*b / 2^31 + 1/2)


def rdbpot(x: int, e: int) -> int:
    """x / 2^e rounded half away from zero."""
    if e == 0:
        return x
    mag = (abs(x) + (1 << (e - 1))) >> e
    return -mag if x < 0 else mag


def mbqm(x: int, q31: int, shift: int) -> int:
    return rdbpot(srdhm(sat32(x * 2 ** max(shift, 0)), q31), max(-shift, 0))


def single_round(x: int, q31: int, shift: int) -> int:
    """floor((x q31 + 2^(s-1)) / 2^s), s = 31 - shift: one rounding, halves up."""
    s = 31 - shift
    return (x * q31 + 2 ** (s - 1)) // 2**s


def requantize(acc: int, bias: int, q31: int, shift: int, zp: int, lo: int, hi: int,
               single: bool = False) -> int:
    scale = single_round if single else mbqm
    return clamp(scale(sat32(acc + bias), q31, shift) + zp, lo, hi)


def rounding_div(x: int, n: int) -> int:
    """round(x / n), halves away from zero (n >= 1)."""
    mag = (2 * abs(x) + n) // (2 * n)
    return -mag if x < 0 else mag


# ---- memories --------------------------------------------------------------------------------
@dataclass
class Machine:
    """The memories as byte strings: SRAM, accumulator (int32 entries, little-endian), LUT
    memory (int16 entries) and the off-chip memories."""

    sram: bytes
    acc: bytes
    lut: bytes
    ext: list[bytes]


def rd(mem: bytes, addr: int, w: int) -> int:
    """A little-endian two's complement value of ``w`` bytes at ``addr``."""
    assert 0 <= addr and addr + w <= len(mem), (addr, w, len(mem))
    return int.from_bytes(mem[addr:addr + w], "little", signed=True)


def wt(mem: bytes, base: int, offset: int, w_type: int) -> int:
    """A weight (docs/isa.md, CONV): int8 at ``base + offset`` (w_type 0), or the signed 4-bit
    element at nibble ``2 * base + offset`` (w_type 1: the low half of its byte when even)."""
    if w_type == 0:
        return rd(mem, base + offset, 1)
    n = 2 * base + offset
    assert 0 <= n and (n >> 1) < len(mem), (n, len(mem))
    v = (mem[n >> 1] >> (4 * (n & 1))) & 0xF
    return v - 16 if v >= 8 else v


@dataclass
class Writes:
    """The bytes an instruction writes, by (space, memory index); ``twice``: some byte was
    written by two iterations (static rule 6)."""

    bytes_: dict[tuple[str, int], dict[int, int]] = field(default_factory=dict)
    twice: bool = False
    trap: str | None = None  # a data-dependent trap (its reason); the writes still listed

    def put(self, space: str, addr: int, w: int, value: int, mem: int = 0) -> None:
        """Write ``value`` (within the w-byte type's range) as ``w`` bytes at ``addr``."""
        assert -(1 << (8 * w - 1)) <= value < (1 << (8 * w - 1)), (value, w)
        out = self.bytes_.setdefault((space, mem), {})
        for j, byte in enumerate((value & ((1 << (8 * w)) - 1)).to_bytes(w, "little")):
            if addr + j in out:
                self.twice = True
            out[addr + j] = byte

    def apply(self, m: Machine) -> Machine:
        """The machine after the writes (a new one)."""
        mems = {("SRAM", 0): bytearray(m.sram), ("ACC", 0): bytearray(m.acc),
                ("LUT", 0): bytearray(m.lut)}
        for k, e in enumerate(m.ext):
            mems[("EXT", k)] = bytearray(e)
        for key, writes in self.bytes_.items():
            buf = mems[key]
            for addr, byte in writes.items():
                buf[addr] = byte
        return Machine(bytes(mems[("SRAM", 0)]), bytes(mems[("ACC", 0)]),
                       bytes(mems[("LUT", 0)]),
                       [bytes(mems[("EXT", k)]) for k in range(len(m.ext))])


def loops(*dims: int):
    """Index tuples (i0, i1, ...) in loop order: the last dimension outermost."""
    return [tuple(reversed(idx)) for idx in _product(list(reversed(dims)))]


def _product(dims: list[int]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for n in dims:
        out = [t + (i,) for t in out for i in range(n)]
    return out


def addr(base: int, idx: tuple[int, ...], strides: list[int]) -> int:
    return base + sum(i * s for i, s in zip(idx, strides, strict=True))


def strides(f: dict, pre: str, n: int) -> list[int]:
    return [f[f"{pre}_s{k}"] for k in range(n)]


def dims(f: dict, n: int) -> list[int]:
    return [f[f"d{k}"] for k in range(n)]


# ---- static rules (docs/isa.md section 3) ----------------------------------------------------
def box(base: int, ns: list[int], ss: list[int], w: int) -> tuple[int, int]:
    lo = base + sum(min(0, s * (n - 1)) for n, s in zip(ns, ss, strict=True))
    hi = base + sum(max(0, s * (n - 1)) for n, s in zip(ns, ss, strict=True)) + w
    return lo, hi


def boxes(op: str, f: dict) -> list[tuple[str, int, int]]:
    """(space, lo, hi) of every operand box of rule 1 (space "EXT" for off-chip memory)."""
    out = []

    def add(space: str, base: int, ns: list[int], ss: list[int], w: int) -> None:
        out.append((space, *box(base, ns, ss, w)))
    if op in ("DMA_LOAD", "DMA_STORE"):
        w = NBYTES[f["dtype"]]
        add("EXT", f["ext_addr"], dims(f, 4), strides(f, "ext", 4), w)
        add("SRAM", f["sram_addr"], dims(f, 4), strides(f, "sram", 4), w)
    elif op in ("CONV", "DWCONV"):
        c = f["cin"] if op == "CONV" else f["ch"]
        add("SRAM", f["in_addr"], [f["in_h"], f["in_w"], c],
            [f["in_stride_h"], f["in_stride_w"], 1], 1)
        kk = f["kh"] * f["kw"]
        if op == "CONV" and f["w_type"] == 1:  # a box of nibbles: the bytes holding them
            lo, hi = box(2 * f["w_addr"], [kk, c, f["cout"]],
                         [f["w_stride_k"], f["w_stride_ci"], f["w_stride_co"]], 1)
            out.append(("SRAM", lo // 2, (hi + 1) // 2))
        elif op == "CONV":
            add("SRAM", f["w_addr"], [kk, c, f["cout"]],
                [f["w_stride_k"], f["w_stride_ci"], f["w_stride_co"]], 1)
        elif f["w_type"] == 1:
            lo, hi = box(2 * f["w_addr"], [kk, c], [f["w_stride_k"], 1], 1)
            out.append(("SRAM", lo // 2, (hi + 1) // 2))
        else:
            add("SRAM", f["w_addr"], [kk, c], [f["w_stride_k"], 1], 1)
        add("ACC", f["acc_addr"], [f["out_h"] * f["out_w"], f["cout"] if op == "CONV" else c],
            [f["acc_stride"], 1], 1)
    elif op == "MATMUL":
        add("SRAM", f["a_addr"], [f["m"], f["k"]], [f["a_stride_m"], f["a_stride_k"]], 1)
        if f["b_type"] == 1:  # int4 B: a box of nibbles, the bytes holding them
            lo, hi = box(2 * f["b_addr"], [f["k"], f["n"]], [f["b_stride_k"], f["b_stride_n"]], 1)
            out.append(("SRAM", lo // 2, (hi + 1) // 2))
        else:
            add("SRAM", f["b_addr"], [f["k"], f["n"]], [f["b_stride_k"], f["b_stride_n"]], 1)
        add("ACC", f["acc_addr"], [f["m"], f["n"]], [f["acc_stride"], 1], 1)
    elif op == "REQUANT":
        p = f["ch"] if f["param_mode"] == 0 else 1
        if f["src"] == 0:
            add("ACC", f["src_addr"], [f["rows"], f["ch"]], [f["src_stride"], 1], 1)
        else:
            add("SRAM", f["src_addr"], [f["rows"], f["ch"]], [f["src_stride"], 4], 4)
        out.append(("SRAM", f["param_addr"], f["param_addr"] + 12 * p))
        w = NBYTES[f["out_dtype"]]
        add("SRAM", f["dst_addr"], [f["rows"], f["ch"]], [f["dst_stride"], w], w)
    elif op == "ELTWISE":
        for p in ("a", "b", "out"):
            add("SRAM", f[f"{p}_addr"], dims(f, 3), strides(f, p, 3), NBYTES[f[f"{p}_dtype"]])
    elif op == "LUT":
        w = 1 if f["lut_mode"] == 0 else 2
        for p in ("src", "dst"):
            add("SRAM", f[f"{p}_addr"], dims(f, 3), strides(f, p, 3), w)
        out.append(("LUT", f["lut_base"], f["lut_base"] + (256 if w == 1 else 513)))
    elif op == "LUT_LOAD":
        out.append(("SRAM", f["src_addr"], f["src_addr"] + 2 * f["count"]))
        out.append(("LUT", f["lut_base"], f["lut_base"] + f["count"]))
    elif op == "POOL":
        w = NBYTES[f["dtype"]]
        add("SRAM", f["in_addr"], [f["in_h"], f["in_w"], f["ch"]],
            [f["in_stride_h"], f["in_stride_w"], w], w)
        add("SRAM", f["out_addr"], [f["out_h"], f["out_w"], f["ch"]],
            [f["out_stride_h"], f["out_stride_w"], w], w)
    elif op == "REDUCE":
        add("SRAM", f["src_addr"], dims(f, 3), strides(f, "src", 3), NBYTES[f["dtype"]])
        ds = dims(f, 3)
        lo, hi = [k for k in range(3) if k != f["axis"]]
        w = 4 if f["op"] in (0, 1) else NBYTES[f["dtype"]]
        add("SRAM", f["dst_addr"], [ds[lo], ds[hi]], [f["dst_s0"], f["dst_s1"]], w)
    elif op == "COPY":
        w = NBYTES[f["dtype"]]
        for p in ("src", "dst"):
            add("SRAM", f[f"{p}_addr"], dims(f, 4), strides(f, p, 4), w)
    elif op == "UNARY":
        for p in ("src", "dst"):
            add("SRAM", f[f"{p}_addr"], dims(f, 3), strides(f, p, 3), 4)
    return out


def static_trap(op: str, f: dict, sizes: dict[str, int]) -> str | None:
    """Why rules 1-4 refuse the instruction (a short reason), or None. ``sizes``: bytes of
    SRAM / EXT, entries of ACC / LUT."""
    if op in ("DMA_LOAD", "DMA_STORE") and f["mem"] >= sizes["EXT_COUNT"]:
        return "mem"
    for space, lo, hi in boxes(op, f):
        if lo < 0 or hi > sizes[space]:
            return f"box {space}"
    width = {"CONV": "cout", "MATMUL": "n", "DWCONV": "ch"}.get(op)
    if width is not None and f["acc_stride"] < f[width]:
        return "acc_stride"
    out_type = {"REQUANT": "out_dtype", "ELTWISE": "out_dtype", "POOL": "dtype"}.get(op)
    if out_type is not None:
        if op == "POOL" and f["dtype"] not in (0, 1):
            return "dtype"
        t_lo, t_hi = TYPE_RANGE[f[out_type]]
        if not t_lo <= f["act_min"] <= f["act_max"] <= t_hi:
            return "clamp"
    return None


# ---- instructions (docs/isa.md section 4) ----------------------------------------------------
def ref_dma(m: Machine, f: dict, load: bool) -> Writes:
    out = Writes()
    w = NBYTES[f["dtype"]]
    ext = m.ext[f["mem"]]
    for idx in loops(*dims(f, 4)):
        e = addr(f["ext_addr"], idx, strides(f, "ext", 4))
        s = addr(f["sram_addr"], idx, strides(f, "sram", 4))
        if load:
            out.put("SRAM", s, w, rd(ext, e, w))
        else:
            out.put("EXT", e, w, rd(m.sram, s, w), f["mem"])
    return out


def _acc_store(m: Machine, out: Writes, a: int, s: int, accumulate: bool) -> None:
    out.put("ACC", 4 * a, 4, wrap(s, 32) if not accumulate else wrap(rd(m.acc, 4 * a, 4) + s, 32))


def ref_conv(m: Machine, f: dict) -> Writes:
    out = Writes()
    for oy in range(f["out_h"]):
        for ox in range(f["out_w"]):
            for co in range(f["cout"]):
                s = 0
                for ky in range(f["kh"]):
                    for kx in range(f["kw"]):
                        iy = oy * f["stride_h"] - f["pad_top"] + ky * f["dil_h"]
                        ix = ox * f["stride_w"] - f["pad_left"] + kx * f["dil_w"]
                        if 0 <= iy < f["in_h"] and 0 <= ix < f["in_w"]:
                            for ci in range(f["cin"]):
                                x = rd(m.sram, f["in_addr"] + iy * f["in_stride_h"]
                                       + ix * f["in_stride_w"] + ci, 1)
                                k = wt(m.sram, f["w_addr"], (ky * f["kw"] + kx) * f["w_stride_k"]
                                       + ci * f["w_stride_ci"] + co * f["w_stride_co"],
                                       f["w_type"])
                                s += (x - f["in_zp"]) * (k - f["w_zp"])
                a = f["acc_addr"] + (oy * f["out_w"] + ox) * f["acc_stride"] + co
                _acc_store(m, out, a, s, f["mode"] == 1)
    return out


def ref_matmul(m: Machine, f: dict) -> Writes:
    out = Writes()
    for i in range(f["m"]):
        for j in range(f["n"]):
            s = sum((rd(m.sram, f["a_addr"] + i * f["a_stride_m"] + t * f["a_stride_k"], 1)
                     - f["a_zp"])
                    * (wt(m.sram, f["b_addr"], t * f["b_stride_k"] + j * f["b_stride_n"],
                          f["b_type"]) - f["b_zp"]) for t in range(f["k"]))
            _acc_store(m, out, f["acc_addr"] + i * f["acc_stride"] + j, s, f["mode"] == 1)
    return out


def ref_dwconv(m: Machine, f: dict) -> Writes:
    out = Writes()
    for oy in range(f["out_h"]):
        for ox in range(f["out_w"]):
            for c in range(f["ch"]):
                s = 0
                for ky in range(f["kh"]):
                    for kx in range(f["kw"]):
                        iy = oy * f["stride_h"] - f["pad_top"] + ky * f["dil_h"]
                        ix = ox * f["stride_w"] - f["pad_left"] + kx * f["dil_w"]
                        if 0 <= iy < f["in_h"] and 0 <= ix < f["in_w"]:
                            x = rd(m.sram, f["in_addr"] + iy * f["in_stride_h"]
                                   + ix * f["in_stride_w"] + c, 1)
                            k = wt(m.sram, f["w_addr"], (ky * f["kw"] + kx) * f["w_stride_k"]
                                   + c, f["w_type"])
                            s += (x - f["in_zp"]) * k
                a = f["acc_addr"] + (oy * f["out_w"] + ox) * f["acc_stride"] + c
                _acc_store(m, out, a, s, f["mode"] == 1)
    return out


def ref_requant(m: Machine, f: dict) -> Writes:
    out = Writes()
    per_channel = f["param_mode"] == 0
    p_count = f["ch"] if per_channel else 1
    w = NBYTES[f["out_dtype"]]
    pa = f["param_addr"]
    for p in range(p_count):  # every entry is used (PER_TENSOR: entry 0 only)
        q31, shift = rd(m.sram, pa + 4 * p_count + 4 * p, 4), rd(m.sram, pa + 8 * p_count + 4 * p, 4)
        if q31 < 0 or not -31 <= shift <= 30:
            out.trap = f"parameter entry {p}"
            break
    for r in range(f["rows"]):
        for c in range(f["ch"]):
            p = c if per_channel else 0
            bias = rd(m.sram, pa + 4 * p, 4)
            q31 = rd(m.sram, pa + 4 * p_count + 4 * p, 4)
            shift = rd(m.sram, pa + 8 * p_count + 4 * p, 4)
            if f["src"] == 0:
                x = rd(m.acc, 4 * (f["src_addr"] + r * f["src_stride"] + c), 4)
            else:
                x = rd(m.sram, f["src_addr"] + r * f["src_stride"] + 4 * c, 4)
            y = 0 if out.trap else requantize(x, bias, q31, shift, f["out_zp"], f["act_min"],
                                              f["act_max"], f.get("rounding", 0) == 1)
            out.put("SRAM", f["dst_addr"] + r * f["dst_stride"] + c * w, w, y)
    return out


def ref_eltwise(m: Machine, f: dict) -> Writes:
    out = Writes()
    wa, wb, wo = NBYTES[f["a_dtype"]], NBYTES[f["b_dtype"]], NBYTES[f["out_dtype"]]
    op = f["op"]  # ADD=0, SUB=1, MUL=2, MAX=3, MIN=4
    single = f.get("rounding", 0) == 1
    scale = (lambda x, q, s: sat32(single_round(x, q, s))) if single else mbqm  # noqa: E731
    for idx in loops(*dims(f, 3)):
        a = rd(m.sram, addr(f["a_addr"], idx, strides(f, "a", 3)), wa)
        b = rd(m.sram, addr(f["b_addr"], idx, strides(f, "b", 3)), wb)
        if op == 2:
            r = sat32((a - f["a_zp"]) * (b - f["b_zp"]))
        else:
            ra = scale(sat32((a - f["a_zp"]) * 2 ** f["left_shift"]), f["a_mult"], f["a_shift"])
            rb = scale(sat32((b - f["b_zp"]) * 2 ** f["left_shift"]), f["b_mult"], f["b_shift"])
            r = sat32({0: ra + rb, 1: ra - rb, 3: max(ra, rb), 4: min(ra, rb)}[op])
        y = clamp(scale(r, f["out_mult"], f["out_shift"]) + f["out_zp"], f["act_min"],
                  f["act_max"])
        out.put("SRAM", addr(f["out_addr"], idx, strides(f, "out", 3)), wo, y)
    return out


def ref_lut_load(m: Machine, f: dict) -> Writes:
    out = Writes()
    for i in range(f["count"]):
        out.put("LUT", 2 * (f["lut_base"] + i), 2, rd(m.sram, f["src_addr"] + 2 * i, 2))
    return out


def ref_lut(m: Machine, f: dict) -> Writes:
    out = Writes()
    base = f["lut_base"]

    def lutmem(i: int) -> int:
        return rd(m.lut, 2 * i, 2)
    for idx in loops(*dims(f, 3)):
        s = addr(f["src_addr"], idx, strides(f, "src", 3))
        d = addr(f["dst_addr"], idx, strides(f, "dst", 3))
        if f["lut_mode"] == 0:
            x = rd(m.sram, s, 1)
            out.put("SRAM", d, 1, wrap(lutmem(base + x + 128), 8))
        else:
            x = rd(m.sram, s, 2)
            i = 256 + (x >> 7)
            off = x & 0x7F
            lo = lutmem(base + i)
            slope = wrap(lutmem(base + i + 1) - lo, 16)
            out.put("SRAM", d, 2, wrap(lo + ((slope * off + 64) >> 7), 16))
    return out


def ref_pool(m: Machine, f: dict) -> Writes:
    out = Writes()
    w = NBYTES[f["dtype"]]
    for oy in range(f["out_h"]):
        for ox in range(f["out_w"]):
            for c in range(f["ch"]):
                vals = []
                for ky in range(f["kh"]):
                    for kx in range(f["kw"]):
                        iy = oy * f["stride_h"] - f["pad_top"] + ky * f["dil_h"]
                        ix = ox * f["stride_w"] - f["pad_left"] + kx * f["dil_w"]
                        if 0 <= iy < f["in_h"] and 0 <= ix < f["in_w"]:
                            vals.append(rd(m.sram, f["in_addr"] + iy * f["in_stride_h"]
                                           + ix * f["in_stride_w"] + c * w, w))
                if not vals:
                    out.trap = out.trap or f"the window of output ({oy}, {ox})"
                    vals = [0]
                y = max(vals) if f["op"] == 0 else rounding_div(sum(vals), len(vals))
                out.put("SRAM", f["out_addr"] + oy * f["out_stride_h"] + ox * f["out_stride_w"]
                        + c * w, w, clamp(y, f["act_min"], f["act_max"]))
    return out


def pool_window_empty(f: dict, oy: int, ox: int) -> bool:
    """Whether output (oy, ox) of a POOL has no kernel position inside the input tile."""
    return not any(0 <= oy * f["stride_h"] - f["pad_top"] + ky * f["dil_h"] < f["in_h"]
                   and 0 <= ox * f["stride_w"] - f["pad_left"] + kx * f["dil_w"] < f["in_w"]
                   for ky in range(f["kh"]) for kx in range(f["kw"]))


def ref_reduce(m: Machine, f: dict) -> Writes:
    out = Writes()
    ds = dims(f, 3)
    axis = f["axis"]
    lo, hi = [k for k in range(3) if k != axis]
    w = NBYTES[f["dtype"]]
    op = f["op"]  # SUM=0, SUMSQ=1, MAX=2, MIN=3
    for j_hi in range(ds[hi]):
        for j_lo in range(ds[lo]):
            xs = []
            for t in range(ds[axis]):
                i = [0, 0, 0]
                i[axis], i[lo], i[hi] = t, j_lo, j_hi
                xs.append(rd(m.sram, addr(f["src_addr"], tuple(i), strides(f, "src", 3)), w))
            if op == 0:
                y, t_w = sat32(sum(x - f["in_zp"] for x in xs)), 4
            elif op == 1:
                y, t_w = sat32(sum((x - f["in_zp"]) ** 2 for x in xs)), 4
            else:
                y, t_w = (max(xs) if op == 2 else min(xs)), w
            out.put("SRAM", f["dst_addr"] + j_lo * f["dst_s0"] + j_hi * f["dst_s1"], t_w, y)
    return out


def ref_copy(m: Machine, f: dict) -> Writes:
    out = Writes()
    w = NBYTES[f["dtype"]]
    for idx in loops(*dims(f, 4)):
        v = rd(m.sram, addr(f["src_addr"], idx, strides(f, "src", 4)), w)
        out.put("SRAM", addr(f["dst_addr"], idx, strides(f, "dst", 4)), w, v)
    return out


def ref_unary(m: Machine, f: dict) -> Writes:
    out = Writes()
    fb = f["frac_bits"]
    for idx in loops(*dims(f, 3)):
        x = rd(m.sram, addr(f["src_addr"], idx, strides(f, "src", 3)), 4)
        if x <= 0:
            y = INT32_MAX
        elif f["op"] == 0:  # RECIP
            y = min(rounding_div(2**fb, x), INT32_MAX)
        else:  # RSQRT
            y = min(math.isqrt(2 ** (2 * fb) // x), INT32_MAX)
        out.put("SRAM", addr(f["dst_addr"], idx, strides(f, "dst", 3)), 4, y)
    return out


REFS = {
    "DMA_LOAD": lambda m, f: ref_dma(m, f, True),
    "DMA_STORE": lambda m, f: ref_dma(m, f, False),
    "CONV": ref_conv, "MATMUL": ref_matmul, "DWCONV": ref_dwconv, "REQUANT": ref_requant,
    "ELTWISE": ref_eltwise, "LUT": ref_lut, "LUT_LOAD": ref_lut_load, "POOL": ref_pool,
    "REDUCE": ref_reduce, "COPY": ref_copy, "UNARY": ref_unary,
}


def run(op: str, f: dict, m: Machine, sizes: dict[str, int]) -> tuple[str, Machine | str]:
    """("ok", the machine after the instruction) or ("trap", why): a static rule (1-4), a
    destination written twice (rule 6) or a data-dependent trap."""
    why = static_trap(op, f, sizes)
    if why is not None:
        return "trap", why
    writes = REFS[op](m, f)
    if writes.twice:
        return "trap", "twice"
    if writes.trap is not None:
        return "trap", writes.trap
    return "ok", writes.apply(m)
