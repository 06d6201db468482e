"""Field groups that several instructions share: addresses, extents, strided views, the
requantisation multiplier, the clamp, the NHWC input tile, the accumulator output, the token
pair and the DMA transfer. The window group of CONV / DWCONV / POOL is ``tessel.isa.window``.

Units: SRAM / off-chip addresses and strides are in bytes; accumulator addresses and strides
in int32 entries.
"""

from __future__ import annotations

from tessel.isa.fields import (
    AccMode,
    DType,
    Engine,
    Field,
    enum_field,
    signed_field,
    unsigned_field,
)
from tessel.isa.fixedpoint import MAX_SHIFT, MIN_SHIFT

ADDRESS_BITS = 32  # SRAM and off-chip byte addresses
EXTENT_BITS = 16  # loop extents, channel counts, GEMM sizes
TILE_BITS = 12  # the height and width of a CONV / DWCONV / POOL tile
STRIDE_BITS = 24  # SRAM strides (signed)


def address(name: str, doc: str) -> Field:
    return unsigned_field(name, ADDRESS_BITS, doc, hex=True)


def extent(name: str, doc: str, bits: int = EXTENT_BITS) -> Field:
    """A size: at least 1, 1 when not given."""
    return unsigned_field(name, bits, doc, lo=1, default=1)


def sram_stride(name: str, doc: str) -> Field:
    return signed_field(name, STRIDE_BITS, doc, default=0)


def strided_view(prefix: str, what: str, dims: int) -> tuple[Field, ...]:
    """Base address and one byte stride per dimension of an SRAM operand."""
    return (address(f"{prefix}_addr", f"SRAM byte address of {what}[0, ...]"),) + tuple(
        sram_stride(f"{prefix}_s{i}", f"{what}: bytes between consecutive i{i}")
        for i in range(dims))


def extents(n: int, doc: str) -> tuple[Field, ...]:
    """``d0`` .. ``d{n-1}``: the extents of an n-dimensional loop (d0 innermost)."""
    return tuple(extent(f"d{i}", f"{doc} extent of dimension {i} (0 = innermost)")
                 for i in range(n))


def clamp() -> tuple[Field, ...]:
    return (
        signed_field("act_min", 32, "saturating clamp: lowest output value (within the output type)"),
        signed_field("act_max", 32, "saturating clamp: highest output value (within the output type)"),
    )


def multiplier(prefix: str, what: str) -> tuple[Field, ...]:
    """A Q31 multiplier and its shift (``tessel.isa.fixedpoint``'s range of shifts)."""
    return (
        unsigned_field(f"{prefix}_mult", 31, f"Q31 multiplier of {what} (0 .. 2^31-1)", default=0),
        signed_field(f"{prefix}_shift", 6, f"shift of {what} (> 0 left, < 0 right)",
                     lo=MIN_SHIFT, hi=MAX_SHIFT, default=0),
    )


def nhwc_input() -> tuple[Field, ...]:
    """The input tile of CONV / DWCONV / POOL: channels contiguous, rows and pixels strided."""
    return (
        address("in_addr", "SRAM byte address of input pixel (0, 0), channel 0"),
        extent("in_h", "input tile height (rows outside [0, in_h) are padding)", TILE_BITS),
        extent("in_w", "input tile width (columns outside [0, in_w) are padding)", TILE_BITS),
        sram_stride("in_stride_h", "bytes between input rows"),
        sram_stride("in_stride_w", "bytes between input pixels (channels are contiguous)"),
    )


def acc_output() -> tuple[Field, ...]:
    """Where a matrix instruction writes (or adds to) its int32 results."""
    return (
        unsigned_field("acc_addr", 24, "accumulator entry of output (0, 0), channel 0", hex=True),
        unsigned_field("acc_stride", EXTENT_BITS,
                       "accumulator entries between consecutive output pixels / rows", lo=1),
        enum_field("mode", AccMode, 1, "OVERWRITE or ACCUMULATE", default=AccMode.OVERWRITE),
    )


DMA_W = (
    unsigned_field("mem", 3, "off-chip memory index (position in the preset's [[offchip]] list)"),
    address("ext_addr", "off-chip byte address of the weight stream"),
    unsigned_field("ext_bytes", ADDRESS_BITS, "bytes of the weight stream (its header included)",
                   lo=1),
    address("sram_addr", "SRAM byte address of the first decoded byte"),
    unsigned_field("out_bytes", ADDRESS_BITS, "bytes the stream decodes to", lo=1),
)

TOKEN = (
    enum_field("engine", Engine, 2, "peer engine (the consumer for SIGNAL, the producer for WAIT)"),
    unsigned_field("token", 4, "token id (semaphore index) of the (producer, consumer) pair"),
)

DMA = (
    unsigned_field("mem", 3, "off-chip memory index (position in the preset's [[offchip]] list)"),
    enum_field("dtype", DType, 2, "element type: every element moves as 1, 2 or 4 bytes"),
    *extents(4, "element loop:"),
    address("ext_addr", "off-chip byte address of element (0, 0, 0, 0)"),
    *(signed_field(f"ext_s{i}", 32, f"off-chip bytes between consecutive i{i}", default=0)
      for i in range(4)),
    address("sram_addr", "SRAM byte address of element (0, 0, 0, 0)"),
    *(sram_stride(f"sram_s{i}", f"SRAM bytes between consecutive i{i}") for i in range(4)),
)
