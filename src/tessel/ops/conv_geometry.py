"""qconv2d geometry: its window and tensors (`ConvGeometry`), the NPU's shape rules
(`refusal`), the split of a kernel or stride beyond the CONV fields into sub-convs
(`sub_convs`), and the bytes of its stored weights (instruction blocks, int4 and 2:4 sparse).

int4 weights (an I4 weight tensor) are stored two per byte (CONV / DWCONV ``w_type`` I4), the
even element in the low half; each instruction's block of weights starts on a byte (a block
of an odd count ends with a zero half), so the pre-tiled order and the strides (counted in
elements either way) are those of int8 weights.

2:4 sparse weights (tessel.isa.sparse24; on a target with ``sparse.enabled``): a conv whose
weights have at most two non-zeros in every four input channels of each output channel and tap
(``tessel.prune_2_4`` makes them) stores each instruction's block as its values ``[taps,
cin/2, cg]`` (int8, or int4 packed) followed by the indices, CONV ``w_type`` I8_2_4 / I4_2_4,
when that costs no more cycles than dense on a tile of the layer (`_sparse_pays`; it always
has fewer bytes). Depthwise convs, convs whose input channels per group are not a multiple of
four and fused chains' convs stay dense.

int16 input (symmetric, int64 bias; docs/numerics.md): CONV ``in_type`` I16, two bytes per input
element in SRAM, each result a wide accumulator entry (two entries) and a 16-byte parameter
entry per channel (int64 bias, q31, shift) for REQUANT ``acc_width`` WIDE. Ordinary and grouped
convs only (DWCONV takes int8 input), dense weights.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

from tessel.errors import TesselCompileError
from tessel.ir import DType, Layout, Node
from tessel.isa import Instruction, Opcode
from tessel.isa.costs import instruction_cost
from tessel.isa.fields import AccWidth, InType
from tessel.isa.instrs.matrix import WeightType
from tessel.isa.instrs.vector import requant_param_bytes
from tessel.isa.limits import MAX_DILATION, MAX_KERNEL, MAX_PAD, MAX_STRIDE
from tessel.isa.sparse24 import index_bytes, is_2_4
from tessel.isa.window import Window
from tessel.ops.context import CodegenContext, require_int4


@dataclass(frozen=True)
class ConvGeometry(Window):
    """A conv's window and its tensors: input n x h x w x c (NHWC), cout output channels in
    `groups` groups."""

    h: int
    w: int
    c: int
    cout: int
    groups: int
    n: int = 1  # batch: images are independent, each tile belongs to one
    wbits: int = 8  # bits of a stored weight: 8, or 4 (int4, two per byte)
    sparse: bool = False  # 2:4 sparse: values and indices (module docstring)
    in_type: InType = InType.I8  # the input's type (I16: the wide path, module docstring)
    # derived once (the mapping search and its bounds read them hundreds of thousands of times)
    depthwise: bool = field(init=False, repr=False, compare=False)
    _weights_per_channel: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        dw = self.groups > 1 and self.groups == self.c == self.cout
        object.__setattr__(self, "depthwise", dw)
        object.__setattr__(self, "_weights_per_channel",
                           self.kh * self.kw * (1 if dw else self.c // self.groups))

    @property
    def cin_g(self) -> int:
        return self.c // self.groups

    @property
    def xb(self) -> int:
        """Bytes of an input element."""
        return self.in_type.nbytes

    @property
    def entries(self) -> int:
        """Accumulator entries of one result (a wide one: two)."""
        return self.in_type.entries

    @property
    def param_bytes(self) -> int:
        """Bytes of one channel's requant parameters."""
        return requant_param_bytes(self.in_type.acc_width)

    @property
    def acc_width(self) -> AccWidth:
        return self.in_type.acc_width

    @property
    def cout_g(self) -> int:
        return self.cout // self.groups

    def in_rows(self, oy0: int, rows: int) -> tuple[int, int, int]:
        """(first input row, row count, tile pad_top) of output rows [oy0, oy0 + rows)."""
        return self.rows_for(oy0, rows, self.h)

    @property
    def w_type(self) -> WeightType:
        return (WeightType.I4 if self.wbits == 4 else WeightType.I8).with_sparsity(self.sparse)

    def weight_bytes(self, chunk: int) -> int:
        """Bytes of the pre-tiled weights of `chunk` output channels."""
        if self.wbits == 8 and not self.sparse:
            return self._weights_per_channel * chunk
        return _packed_bytes(self, chunk)

    def block_bytes(self, taps: int, cout: int) -> int:
        """Bytes of one CONV / DWCONV instruction's block of `taps` x cin_g (depthwise: one)
        x `cout` weights (a block starts on a byte)."""
        cin = 1 if self.depthwise else self.cin_g
        if not self.sparse:
            return block_bytes(taps * cin * cout, self.wbits)
        return block_bytes(taps * cin // 2 * cout, self.wbits) + index_bytes(taps, cin, cout)

    def w_fields(self, cin: int, cout: int) -> dict[str, int | WeightType]:
        """A CONV's weight fields for a dense HWIO block of `cin` x `cout` per tap (2:4
        sparse: of its values, `cin / 2` rows)."""
        rows = cin // 2 if self.sparse else cin
        return dict(w_stride_k=rows * cout, w_stride_ci=cout, w_stride_co=1, w_zp=0,
                    w_type=self.w_type)

    def k_run(self, k: int) -> int:
        """The reduction of `k` weights the array runs (2:4 sparse: the kept half)."""
        return k // 2 if self.sparse else k

    def chunk_offset(self, c0: int, chunk: int) -> int:
        """Where the weights of the chunk starting at channel `c0` begin among those of every
        chunk packed back to back (each but the last `chunk` wide)."""
        return c0 // chunk * self.weight_bytes(chunk)


def block_bytes(elements: int, wbits: int) -> int:
    """Bytes of one instruction's block of `elements` weights (a block starts on a byte)."""
    return (elements * wbits + 7) // 8


def weight_blocks(g: ConvGeometry, chunk: int) -> list[tuple[int, int]]:
    """(taps, output channels) of each CONV / DWCONV instruction's block of a chunk, in
    pre-tiled order."""
    if g.depthwise:
        return [(g.kh * g.kw, chunk)]
    cg = per_conv(g, chunk)
    return [(sc.bh * sc.bw, cg) for sc in sub_convs(g) for _ in range(chunk // cg)]


@functools.lru_cache(maxsize=4096)
def _packed_bytes(g: ConvGeometry, chunk: int) -> int:
    return sum(g.block_bytes(t, n) for t, n in weight_blocks(g, chunk))


def refusal(node: Node, graph) -> str | None:
    """Why the NPU cannot run this qconv2d (its shape rules), or None. Asked before
    partitioning (`registry.npu_refusal`) and by `geometry`, so both agree."""
    a = node.attr_map
    if a["layout"] is not Layout.NHWC:
        return "the NPU needs NHWC convolutions (run the to_nhwc pass)"
    if graph is not None and graph.type_of(node.inputs[0]).dtype is DType.I16:
        c = graph.type_of(node.inputs[0]).shape[3]
        if a["groups"] > 1 and a["groups"] == c:
            return ("int16 input to a depthwise conv (DWCONV takes int8 input; the wide "
                    "accumulator is CONV's and MATMUL's)")
        if a["in_zp"] != 0:
            return f"int16 input with zero point {a['in_zp']} (the wide path is symmetric)"
    if max(a["dilation"]) > MAX_DILATION:
        return f"dilation {max(a['dilation'])} is beyond the CONV instruction (max {MAX_DILATION})"
    # the padding rule last: padding alone the legaliser splits off (pad + conv), so a conv
    # over-padded and refused for another reason names that reason
    if graph is not None and _big_refused(node, graph):
        return (f"kernels beyond {MAX_KERNEL} or strides beyond {MAX_STRIDE} are supported for "
                f"ordinary convs only (strides > {MAX_STRIDE} also need no padding and "
                "dilation 1)")
    if max(a["padding"][:2]) > MAX_PAD:
        return (f"top / left padding {max(a['padding'][:2])} is beyond the CONV / DWCONV "
                f"instructions (max {MAX_PAD})")
    return None


def _big_refused(node: Node, graph) -> bool:
    """A kernel or stride past the fields on a conv that cannot be split into ordinary ones."""
    a = node.attr_map
    c = graph.type_of(node.inputs[0]).shape[3]
    _, kh, kw, _ = graph.type_of(node.inputs[1]).shape  # OHWI
    depthwise = a["groups"] > 1 and a["groups"] == c
    big = max(kh, kw) > MAX_KERNEL or max(a["stride"]) > MAX_STRIDE
    return big and (depthwise or a["dilation"] != (1, 1) or (
        max(a["stride"]) > MAX_STRIDE and any(a["padding"])))


def geometry(node: Node, ctx: CodegenContext, sparse: bool = True) -> ConvGeometry:
    """The conv's geometry; its weights 2:4 sparse where the target runs them, they are and
    it pays (`sparse` false: dense, for the fused chains)."""
    a = node.attr_map
    why = refusal(node, ctx.graph)
    if why is not None:
        raise TesselCompileError(f"{node} at {node.loc}: {why}")
    n, h, w, c = ctx.graph.type_of(node.inputs[0]).shape
    _, oh, ow, cout = node.type.shape
    _, kh, kw, _ = ctx.graph.type_of(node.inputs[1]).shape  # OHWI
    (sh, sw), (dh, dw) = a["stride"], a["dilation"]
    wbits = 4 if ctx.graph.type_of(node.inputs[1]).dtype is DType.I4 else 8
    if wbits == 4:
        require_int4(node, ctx)
    wide = ctx.graph.type_of(node.inputs[0]).dtype is DType.I16
    g = ConvGeometry(kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw, pt=a["padding"][0],
                     pl=a["padding"][1], oh=oh, ow=ow, h=h, w=w, c=c, cout=cout,
                     groups=a["groups"], n=n, wbits=wbits,
                     in_type=InType.I16 if wide else InType.I8)
    if sparse and ctx.arch.sparse.enabled and not g.depthwise and g.cin_g % 4 == 0 and not wide:
        if ctx.memo(("conv 2:4", node.name), lambda: _sparse_pays(node, g, ctx)):
            return replace(g, sparse=True)
    return g


PAYS_ROWS = 16  # output rows of the tile `_sparse_pays` costs both ways


def _sparse_pays(node: Node, g: ConvGeometry, ctx: CodegenContext) -> bool:
    """Whether the conv's weights are exactly 2:4 along input channels and a tile of the layer
    (up to `PAYS_ROWS` output rows, every output channel of a conv group) costs no more cycles
    sparse than dense."""
    w = ctx.const(node.inputs[1])  # OHWI
    o, kh, kw, ci = w.shape
    if not is_2_4(w.reshape(o, kh * kw, ci).transpose(1, 2, 0)):
        return False
    cg = per_conv(g, g.cout)
    rows = min(g.oh, PAYS_ROWS)
    in_rows = min(g.h, (rows - 1) * g.sh + (g.kh - 1) * g.dh + 1)

    def cycles(geo: ConvGeometry) -> int:
        return sum(instruction_cost(Instruction.make(
            Opcode.CONV, in_addr=0, in_h=in_rows, in_w=g.w, in_stride_h=g.w * g.c,
            in_stride_w=g.c, cin=g.cin_g, kh=sc.bh, kw=sc.bw, out_h=rows, out_w=g.ow, cout=cg,
            w_addr=0, acc_addr=0, acc_stride=cg, **geo.w_fields(g.cin_g, cg)), ctx.arch).cycles
            for sc in sub_convs(g))

    return cycles(replace(g, sparse=True)) <= cycles(g)


def _split(k: int) -> list[tuple[int, int]]:
    """(first tap, taps) blocks of at most MAX_KERNEL taps covering k taps."""
    n = -(-k // MAX_KERNEL)
    sizes = [k // n + (1 if i < k % n else 0) for i in range(n)]
    return [(sum(sizes[:i]), sizes[i]) for i in range(n)]


def _phase_factor(stride: int) -> int:
    """Smallest f dividing `stride` with stride / f <= MAX_STRIDE (1 when it already fits)."""
    return next(f for f in range(1, stride + 1) if stride % f == 0 and stride // f <= MAX_STRIDE)


@dataclass(frozen=True)
class SubConv:
    """One CONV's share of the kernel: taps ky = py + fy * (y0 + i) for i < bh (same for x).

    Kernels over MAX_KERNEL taps split into accumulating blocks; strides over MAX_STRIDE use
    the polyphase identity: with f | stride, a stride-s conv is the sum over phases (py, px)
    of stride-s/f convs on the input subsampled by f from offset (py, px) (needs no padding,
    dilation 1)."""

    py: int
    px: int
    fy: int
    fx: int
    y0: int
    bh: int
    x0: int
    bw: int


def sub_convs(g: ConvGeometry) -> list[SubConv]:
    fy, fx = _phase_factor(g.sh), _phase_factor(g.sw)
    out = []
    for py in range(fy):
        for px in range(fx):
            th, tw = len(range(py, g.kh, fy)), len(range(px, g.kw, fx))
            out += [SubConv(py, px, fy, fx, y0, bh, x0, bw)
                    for y0, bh in _split(th) for x0, bw in _split(tw)]
    return out


def per_conv(g: ConvGeometry, chunk: int) -> int:
    """Output channels one CONV instruction produces: the whole chunk for an ordinary conv,
    one conv group for a grouped one."""
    return chunk if g.groups == 1 else g.cout_g
