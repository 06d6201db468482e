"""The sliding window of CONV, DWCONV and POOL: its field group and the ``Window`` value.

Every window instruction has the same ten fields, in this order: kernel ``kh`` x ``kw``,
strides, dilations, the implicit padding above and left of the input tile, and the output
tile ``out_h`` x ``out_w`` (docs/isa.md). ``Window`` holds their values under the short names
the compiler and the simulator use (``sh`` for ``stride_h``, ...), with the frame the window
sweeps and the input rows a band of output rows reads. A tile's geometry (the op emitters'
``ConvGeometry`` / ``PoolGeometry``) is a ``Window`` plus the tensor's sizes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tessel.isa.fields import Field, unsigned_field
from tessel.isa.groups import TILE_BITS, extent

if TYPE_CHECKING:
    from tessel.isa.instruction import Instruction

# Window attribute -> the instruction field it holds, in the fields' order
FIELD_OF = {"kh": "kh", "kw": "kw", "sh": "stride_h", "sw": "stride_w", "dh": "dil_h",
            "dw": "dil_w", "pt": "pad_top", "pl": "pad_left", "oh": "out_h", "ow": "out_w"}


def window_fields(pad_bits: int = 4, kernel_bits: int = 4) -> tuple[Field, ...]:
    """The window group (CONV / DWCONV: 4-bit kernel and padding; POOL: 8-bit)."""
    return (
        extent("kh", "kernel height", kernel_bits),
        extent("kw", "kernel width", kernel_bits),
        extent("stride_h", "vertical stride", 4),
        extent("stride_w", "horizontal stride", 4),
        extent("dil_h", "vertical dilation", 4),
        extent("dil_w", "horizontal dilation", 4),
        unsigned_field("pad_top", pad_bits, "rows of implicit padding above the input tile",
                       default=0),
        unsigned_field("pad_left", pad_bits, "columns of implicit padding left of the input tile",
                       default=0),
        extent("out_h", "output tile height", TILE_BITS),
        extent("out_w", "output tile width", TILE_BITS),
    )


def frame_extent(out: int, stride: int, kernel: int, dilation: int) -> int:
    """Input rows (columns) that ``out`` output rows (columns) of a window sweep, padding
    included."""
    return (out - 1) * stride + (kernel - 1) * dilation + 1


@dataclass(frozen=True)
class Window:
    """A window's kernel, strides, dilations, top / left padding and output size."""

    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int
    oh: int
    ow: int

    @classmethod
    def of(cls, i: Instruction) -> Window:
        """The window of a CONV, DWCONV or POOL instruction."""
        return cls(*(getattr(i, name) for name in FIELD_OF.values()))

    @classmethod
    def from_fields(cls, f: Mapping[str, int]) -> Window:
        """The window of a field name -> value mapping (``Instruction.as_dict()``)."""
        return cls(*(f[name] for name in FIELD_OF.values()))

    def fields(self) -> dict[str, int]:
        """Field name -> value (for ``Instruction.make``)."""
        return {name: getattr(self, attr) for attr, name in FIELD_OF.items()}

    def window_attrs(self) -> dict[str, int]:
        """Attribute -> value of the window alone (a geometry built on it: its window)."""
        return {attr: getattr(self, attr) for attr in FIELD_OF}

    def frame(self) -> tuple[int, int]:
        """(rows, columns) of the padded frame the window sweeps, from (-pt, -pl)."""
        return (frame_extent(self.oh, self.sh, self.kh, self.dh),
                frame_extent(self.ow, self.sw, self.kw, self.dw))

    def rows_for(self, oy0: int, rows: int, h: int) -> tuple[int, int, int]:
        """(first input row, row count, tile pad_top) that output rows [oy0, oy0 + rows) read
        of an input ``h`` rows high; rows past the input are the bottom padding the
        instruction supplies."""
        lo = oy0 * self.sh - self.pt
        hi = lo + frame_extent(rows, self.sh, self.kh, self.dh) - 1
        r0, r1 = max(lo, 0), min(hi, h - 1)
        return r0, r1 - r0 + 1, r0 - lo

    def max_rows(self, rows: int, h: int) -> int:
        """The most input rows a band of ``rows`` output rows reads of an ``h``-row input."""
        return min(h, frame_extent(rows, self.sh, self.kh, self.dh))
