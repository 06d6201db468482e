"""The 2:4 sparse weight format of CONV (``w_type`` I8_2_4 / I4_2_4; docs/isa.md).

A CONV's dense weights are a ``[taps, cin, cout]`` array (tap ``ky * kw + kx``); along ``cin``
every group of four holds at most two non-zeros. Stored sparse, they are
* the values: ``[taps, cin / 2, cout]``, value ``2 g`` and ``2 g + 1`` of group ``g`` being its
  first and second kept weight, addressed like dense weights with ``cin / 2`` rows (bytes, or
  nibbles for int4 values, from ``w_addr``, strides ``w_stride_k``, ``w_stride_ci``,
  ``w_stride_co``);
* the indices: from the byte after the values' last on, one nibble per group in ``[taps,
  cin / 4, cout]`` order (the even one in the low half of a byte), bits 0-1 the position of the
  first kept weight in its group, bits 2-3 that of the second, the first below the second.

docs/binary-format.md (6.8) gives the bytes. A weight stream (tessel.isa.weight_codec, mode 3)
stores the indices of such blocks as ranks of the six legal nibbles, three per byte
(`pack_ranks`), the weight decoder expanding them back to nibbles. The format is NVIDIA
Ampere's (2-bit indices, two of four kept) and Arm Ethos-U85's 2:4 weights; the encoder here
(``encode``) is code generation's, ``decode`` the simulator's.
"""

from __future__ import annotations

import numpy as np

GROUP = 4  # weights per group along the reduction axis (input channels)
KEPT = 2  # non-zeros stored per group
# the legal index nibbles (first position below the second), in the order of their rank:
# (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
PATTERNS = np.array([a | b << 2 for a in range(GROUP) for b in range(a + 1, GROUP)], np.uint8)
RANK = np.full(16, len(PATTERNS), np.uint8)  # nibble -> rank; len(PATTERNS) for an illegal one
RANK[PATTERNS] = np.arange(len(PATTERNS), dtype=np.uint8)
PER_BYTE = 3  # ranks per byte when packed in base 6 (6**3 = 216 <= 256)


def index_bytes(taps: int, cin: int, cout: int) -> int:
    """Bytes of the indices of ``[taps, cin, cout]`` weights (one nibble per group)."""
    return -(-(taps * (cin // GROUP) * cout) // 2)


def is_2_4(w: np.ndarray) -> bool:
    """Whether ``[taps, cin, cout]`` weights have at most two non-zeros in every group of four
    input channels (``cin`` a multiple of four)."""
    t, cin, cout = w.shape
    if cin % GROUP or cin == 0:
        return False
    nz = (w.reshape(t, cin // GROUP, GROUP, cout) != 0).sum(axis=2)
    return bool((nz <= KEPT).all())


def encode(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values ``[taps, cin/2, cout]``, index nibbles ``[taps, cin/4, cout]`` as uint8) of 2:4
    weights ``w`` (``is_2_4``). A group with fewer than two non-zeros keeps its zeros at the
    lowest free positions."""
    t, cin, cout = w.shape
    g = w.reshape(t, cin // GROUP, GROUP, cout)
    # sort key: non-zeros first, then by position; the first two positions are kept, ascending
    key = (g == 0).astype(np.int64) * GROUP + np.arange(GROUP)[None, None, :, None]
    kept = np.sort(np.argsort(key, axis=2, kind="stable")[:, :, :KEPT, :], axis=2)
    values = np.take_along_axis(g, kept, axis=2).reshape(t, cin // 2, cout)
    nibbles = (kept[:, :, 0, :] | (kept[:, :, 1, :] << 2)).astype(np.uint8)
    return values.astype(w.dtype), nibbles


def decode(values: np.ndarray, nibbles: np.ndarray) -> np.ndarray:
    """The dense ``[taps, cin, cout]`` int8 weights of 2:4 ``values`` and index ``nibbles``;
    ValueError when a group's first index is not below its second."""
    t, half, cout = values.shape
    first, second = nibbles & 3, (nibbles >> 2) & 3
    if (first >= second).any():
        bad = np.argwhere(first >= second)[0]
        raise ValueError(f"2:4 indices of group (tap {bad[0]}, group {bad[1]}, cout {bad[2]}) "
                         f"are {int(first[tuple(bad)])}, {int(second[tuple(bad)])}: the first "
                         "must be below the second")
    dense = np.zeros((t, half // KEPT, GROUP, cout), np.int8)
    v = values.reshape(t, half // KEPT, KEPT, cout)
    np.put_along_axis(dense, first[:, :, None, :].astype(np.int64), v[:, :, :1, :], axis=2)
    np.put_along_axis(dense, second[:, :, None, :].astype(np.int64), v[:, :, 1:, :], axis=2)
    return dense.reshape(t, half * 2, cout)


def pack_nibbles(nibbles: np.ndarray) -> bytes:
    """Index nibbles in order, two per byte, the even one in the low half."""
    flat = nibbles.reshape(-1).astype(np.uint8)
    if len(flat) % 2:
        flat = np.concatenate([flat, np.zeros(1, np.uint8)])
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8).tobytes()


def pack_ranks(nibbles: np.ndarray) -> bytes | None:
    """Legal index nibbles as their ranks (`PATTERNS`), three per byte in base 6 (``r0 + 6 r1 +
    36 r2``, a short last byte's missing ranks zero); None when a nibble is not legal."""
    ranks = RANK[np.asarray(nibbles, np.uint8).reshape(-1)]
    if ranks.size and int(ranks.max()) >= len(PATTERNS):
        return None
    pad = -ranks.size % PER_BYTE
    r = np.concatenate([ranks, np.zeros(pad, np.uint8)]).reshape(-1, PER_BYTE).astype(np.uint16)
    return (r[:, 0] + 6 * r[:, 1] + 36 * r[:, 2]).astype(np.uint8).tobytes()


def unpack_ranks(data: bytes, count: int) -> np.ndarray:
    """The `count` index nibbles `pack_ranks` packed into `data`; ValueError when `data` is not
    exactly their bytes, a byte is 216 or more or a missing rank is not zero."""
    b = np.frombuffer(bytes(data), np.uint8).astype(np.int64)
    if b.size != -(-count // PER_BYTE):
        raise ValueError(f"{b.size} bytes of 2:4 ranks, not {-(-count // PER_BYTE)} for {count}")
    if b.size and int(b.max()) >= len(PATTERNS) ** PER_BYTE:
        raise ValueError(f"2:4 rank byte {int(b.max())} >= {len(PATTERNS) ** PER_BYTE}")
    ranks = np.stack([b % 6, b // 6 % 6, b // 36], axis=1).reshape(-1)
    if ranks[count:].any():
        raise ValueError("2:4 ranks: non-zero padding after the last one")
    return PATTERNS[ranks[:count]]
