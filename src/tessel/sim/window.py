"""The implicit convolution / pooling window of CONV, DWCONV and POOL, as numpy views.

The hardware generates window addresses on the fly (no im2col in simulated memory). Here the
input tile is copied once into a host-side array with the implicit padding around it, and the
window is a strided view ``(out_h, out_w, kh, kw, C)`` of that array: no loop over elements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tessel.isa.footprint import WINDOW_FACTOR
from tessel.sim.state import MachineState, Trap, nd


@dataclass(frozen=True, slots=True)
class Geometry:
    """Window fields shared by CONV, DWCONV and POOL."""

    in_h: int
    in_w: int
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
    def of(cls, f: dict[str, Any]) -> Geometry:
        return cls(f["in_h"], f["in_w"], f["kh"], f["kw"], f["stride_h"], f["stride_w"],
                   f["dil_h"], f["dil_w"], f["pad_top"], f["pad_left"], f["out_h"], f["out_w"])

    def needed(self) -> tuple[int, int]:
        """Rows and columns of the padded frame the windows span (from -pad_top, -pad_left)."""
        return ((self.oh - 1) * self.sh + (self.kh - 1) * self.dh + 1,
                (self.ow - 1) * self.sw + (self.kw - 1) * self.dw + 1)

    def valid_counts(self) -> tuple[np.ndarray, np.ndarray]:
        """Per output row / column: how many kernel rows / columns fall inside the tile."""
        iy = (np.arange(self.oh)[:, None] * self.sh - self.pt + np.arange(self.kh)[None] * self.dh)
        ix = (np.arange(self.ow)[:, None] * self.sw - self.pl + np.arange(self.kw)[None] * self.dw)
        rows = ((iy >= 0) & (iy < self.in_h)).sum(axis=1)
        cols = ((ix >= 0) & (ix < self.in_w)).sum(axis=1)
        return rows, cols


def input_tile(state: MachineState, f: dict[str, Any], ch: int, dtype: np.dtype) -> np.ndarray:
    """The ``(in_h, in_w, ch)`` input tile; channels contiguous (``dtype.itemsize`` apart).

    Traps before ``windows`` allocates a frame beyond the static resource bound (docs/isa.md
    static rule 5; prepare has already refused such instructions, this guards direct calls).
    """
    rows, cols = Geometry.of(f).needed()
    if rows * cols * ch > WINDOW_FACTOR * state.sram.shape[-1]:
        raise Trap(f"window frame of {rows}x{cols}x{ch} elements exceeds {WINDOW_FACTOR} x SRAM")
    return nd(state.sram, f["in_addr"], (f["in_h"], f["in_w"], ch),
              (f["in_stride_h"], f["in_stride_w"], dtype.itemsize), dtype)


def windows(tile: np.ndarray, g: Geometry, dtype: Any, fill: float | int = 0,
            offset: int = 0) -> np.ndarray:
    """View ``(oh, ow, kh, kw, C)`` of ``tile - offset`` in ``dtype``, padding = ``fill``."""
    return window_view(padded_frame(tile, g, dtype, fill, offset), g)


def padded_frame(tile: np.ndarray, g: Geometry, dtype: Any, fill: float | int = 0,
                 offset: int = 0) -> np.ndarray:
    """The ``(rows, cols, C)`` frame the windows span: ``tile - offset`` inside, ``fill`` around."""
    rows, cols = g.needed()
    lead, ch = tile.shape[:-3], tile.shape[-1]  # lead: () or (batch,)
    frame = np.full((*lead, rows, cols, ch), fill, dtype=dtype)
    r0, r1 = max(0, -g.pt), min(g.in_h, rows - g.pt)  # tile rows inside the frame
    c0, c1 = max(0, -g.pl), min(g.in_w, cols - g.pl)
    if r1 > r0 and c1 > c0:
        dst = frame[..., g.pt + r0:g.pt + r1, g.pl + c0:g.pl + c1, :]
        dst[...] = tile[..., r0:r1, c0:c1, :]
        if offset:
            dst -= offset
    return frame


def window_view(frame: np.ndarray, g: Geometry) -> np.ndarray:
    """The read-only ``(oh, ow, kh, kw, C)`` window view of a ``padded_frame`` (with the
    frame's leading batch axis, if any)."""
    lead, lead_s = frame.shape[:-3], frame.strides[:-3]
    s0, s1, s2 = frame.strides[-3:]
    view = np.ndarray((*lead, g.oh, g.ow, g.kh, g.kw, frame.shape[-1]), frame.dtype,
                      buffer=frame,
                      strides=(*lead_s, g.sh * s0, g.sw * s1, g.dh * s0, g.dw * s1, s2))
    view.flags.writeable = False  # overlapping windows: never written through
    return view


def check_nonempty(g: Geometry, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Trap if some output's window lies wholly in the padding; return the valid counts."""
    rows, cols = g.valid_counts()
    if not rows.all() or not cols.all():
        oy = int(np.argmin(rows)) if not rows.all() else 0
        ox = int(np.argmin(cols)) if not cols.all() else 0
        raise Trap(f"{what}: the window of output ({oy}, {ox}) has no position inside the "
                   f"{g.in_h}x{g.in_w} input tile")
    return rows, cols


@dataclass(frozen=True, slots=True)
class PhaseLayout:
    """The padded frame of a window split by output column stride into ``sw`` phases (phase
    ``p``: frame columns ``p, p + sw, ...``), each ``(rows, pc, C)`` and followed by a tail, in
    one flat buffer: kernel position ``(ky, kx)`` then reads, for every output row, ``pc * C``
    contiguous elements of one phase (``tap_offsets``), output column ``x`` at element
    ``x * C`` (columns ``ow..pc-1`` of such a "wide" row are discarded). Every view stays
    inside the buffer (the tail covers the last row's overrun)."""

    sw: int
    rows: int
    pc: int  # columns per phase
    ch: int
    phase_len: int  # elements per phase, tail included
    writes: tuple[tuple[int, slice, slice], ...]  # (phase, tile columns, phase columns)
    tap_offsets: tuple[int, ...]  # per kernel position (ky outer): element offset of its view

    @classmethod
    def of(cls, g: Geometry, ch: int, dc: slice, tc: slice) -> PhaseLayout:
        """``dc`` / ``tc``: the frame / tile columns of the tile's interior (``_frame_parts``)."""
        rows, cols = g.needed()
        s = g.sw
        pc = -(-cols // s)
        tail = ((g.kw - 1) * g.dw // s + 1) * ch
        phase_len = rows * pc * ch + tail
        writes = []
        for p in range(s):
            j0 = dc.start + (p - dc.start) % s  # the first interior frame column of phase p
            if j0 < dc.stop:
                n = len(range(j0, dc.stop, s))
                c0 = tc.start + j0 - dc.start
                writes.append((p, slice(c0, c0 + (n - 1) * s + 1, s), slice(j0 // s, j0 // s + n)))
        offsets = tuple((kx * g.dw) % s * phase_len + (ky * g.dh * pc + kx * g.dw // s) * ch
                        for ky in range(g.kh) for kx in range(g.kw))
        return cls(s, rows, pc, ch, phase_len, tuple(writes), offsets)

    @property
    def size(self) -> int:
        return self.sw * self.phase_len

    def phase(self, buf: np.ndarray, p: int) -> np.ndarray:
        """Phase ``p`` of the flat buffer as ``(rows, pc, C)``."""
        lo = p * self.phase_len
        return buf[lo:lo + self.rows * self.pc * self.ch].reshape(self.rows, self.pc, self.ch)

    def groups(self, g: Geometry) -> tuple[int, int] | None:
        """``(groups, per_group)`` of ``grouped``, or None when the kernel columns of a phase
        are not evenly spaced in it (a column stride and a dilation both above 1)."""
        if self.sw == 1:
            return 1, g.kw
        if g.dw == 1:
            return self.sw, -(-g.kw // self.sw)
        return None

    def grouped(self, buf: np.ndarray, g: Geometry) -> np.ndarray:
        """Every kernel position's ``(oh, pc * C)`` wide rows of the flat buffer as one view
        ``(groups, kh, per_group, oh, pc * C)`` (``groups``): group ``r``, entry ``j`` is
        kernel column ``kx = r + j sw`` (dilation 1, phase ``r``, element offset ``j C`` in it)
        or, for a column stride of 1, ``kx = j`` (offset ``j dw C``). Entries with ``kx >= kw``
        (``sw`` not dividing ``kw``) are views that the caller weights by 0: they stay inside
        the buffer, since ``(per_group - 1) C <= (kw - 1) // sw * C``, the tail less ``C``."""
        n = self.groups(g)
        assert n is not None
        it, wide = buf.itemsize, self.pc * self.ch
        step = g.dw * self.ch if self.sw == 1 else self.ch
        return np.ndarray((n[0], g.kh, n[1], g.oh, wide), buf.dtype, buffer=buf, strides=(
            self.phase_len * it, g.dh * wide * it, step * it, g.sh * wide * it, it))

    def tap(self, buf: np.ndarray, k: int, oh: int, sh: int) -> np.ndarray:
        """Kernel position ``k``'s ``(oh, pc * C)`` wide rows of the flat buffer."""
        it = buf.itemsize
        return np.ndarray((oh, self.pc * self.ch), buf.dtype, buffer=buf,
                          offset=self.tap_offsets[k] * it,
                          strides=(sh * self.pc * self.ch * it, it))
