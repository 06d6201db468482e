"""qconv2d constant blobs: the weights pre-tiled in read order, one block per CONV / DWCONV
instruction (int4 packed two per byte, 2:4 sparse as values and indices: tessel.ops.conv_geometry),
and the per-channel requantisation parameters (bias, q31, shift: 12 bytes per channel; 16 with
the int64 bias of an int16 input).
"""

from __future__ import annotations

import numpy as np

from tessel.ir import Node
from tessel.isa.instrs.vector import requant_params
from tessel.isa.sparse24 import encode, pack_nibbles
from tessel.ops.context import CodegenContext
from tessel.ops.conv_geometry import ConvGeometry, per_conv, sub_convs


def blobs(node: Node, g: ConvGeometry, chunks: list[tuple[int, int]], ctx: CodegenContext
          ) -> list[bytes]:
    """Weights pre-tiled + parameters, chunk by chunk: one blob per chunk."""
    w = ctx.const(node.inputs[1]).astype(np.int8)  # OHWI
    params = _params(node, g, ctx)
    return [_chunk_weights(w, g, c0, cn) + params(c0, cn) for c0, cn in chunks]


def blobs_all(node: Node, g: ConvGeometry, chunks: list[tuple[int, int]], ctx: CodegenContext
              ) -> tuple[bytes, bytes]:
    """The input-resident orders: every chunk's weights back to back, then the parameter
    table chunk by chunk; (weights, table)."""
    w = ctx.const(node.inputs[1]).astype(np.int8)  # OHWI
    params = _params(node, g, ctx)
    return (b"".join(_chunk_weights(w, g, c0, cn) for c0, cn in chunks),
            b"".join(params(c0, cn) for c0, cn in chunks))


def _params(node: Node, g: ConvGeometry, ctx: CodegenContext):
    """(c0, cn) -> the chunk's parameters as bytes: bias, q31, shift (int32 each; the bias
    int64 for an int16 input, REQUANT acc_width WIDE)."""
    bias, mult, shift = (ctx.const(n) for n in node.inputs[2:5])
    return lambda c0, cn: requant_params(bias, mult, shift, g.acc_width, [(c0, cn)])


def _chunk_weights(w: np.ndarray, g: ConvGeometry, c0: int, cn: int) -> bytes:
    """Output channels [c0, c0 + cn) of the OHWI weights `w`, pre-tiled in read order: one
    block per CONV / DWCONV instruction (`weight_blocks`), int4 packed per block."""
    if g.depthwise:
        parts = [w[c0:c0 + cn, :, :, 0].reshape(cn, g.kh * g.kw).T]  # [kh*kw, cn]
    else:
        cg = per_conv(g, cn)
        parts = []
        for sc in sub_convs(g):  # per sub-conv, per CONV: [bh*bw*cin_g, cg]
            taps = w[:, sc.py::sc.fy, sc.px::sc.fx][:, sc.y0:sc.y0 + sc.bh,
                                                     sc.x0:sc.x0 + sc.bw]
            parts += [taps[o0:o0 + cg].reshape(cg, -1).T for o0 in range(c0, c0 + cn, cg)]
    if g.sparse:
        return b"".join(_sparse_block(p, g) for p in parts)
    flat = [np.ascontiguousarray(p).reshape(-1) for p in parts]
    if g.wbits == 4:
        return b"".join(pack_int4(f) for f in flat)
    return np.concatenate(flat).tobytes()


def _sparse_block(block: np.ndarray, g: ConvGeometry) -> bytes:
    """One CONV's [taps * cin_g, cg] weights as 2:4 values (int8, or int4 packed) and
    indices."""
    values, nibbles = encode(block.reshape(-1, g.cin_g, block.shape[1]))
    raw = pack_int4(values.reshape(-1)) if g.wbits == 4 else values.tobytes()
    return raw + pack_nibbles(nibbles)


def pack_int4(values: np.ndarray) -> bytes:
    """Signed 4-bit `values` two per byte, the even element in the low half (a zero half
    after an odd count)."""
    v = np.asarray(values, np.int64).reshape(-1)
    if v.size % 2:
        v = np.append(v, 0)
    return ((v[0::2] & 0xF) | ((v[1::2] & 0xF) << 4)).astype(np.uint8).tobytes()
