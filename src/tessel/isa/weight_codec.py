"""The lossless weight stream: what the NPU's weight decoder reads off chip (docs/binary-format.md,
"Compressed weight streams").

A layer's weight bytes (int8, or int4 packed two per byte) are coded as one stream:

    byte 0      mode: 0 raw, 1 byte symbols, 2 nibble symbols, 3 2:4 blocks (`StreamMode`)
    bytes 1..4  n, the decoded length in bytes (u32, little-endian)
    raw:        the n bytes; the stream is exactly 5 + n bytes
    coded:      bytes 5..8  U, the unary section's length in bits (u32); then one bit string,
                least significant bit of each byte first, zero-padded to a whole byte:
                  k section   3 bits per block of BLOCK symbols: that block's Rice parameter k
                  unary       per symbol u ones then a zero, u = min(v >> k, ESCAPE)
                  remainders  per symbol the low k bits of v (u < ESCAPE), or all S bits of v
                              (u == ESCAPE, an escape), least significant bit first

A symbol v is the zig-zag of a signed value (0, -1, 1, -2, ... -> 0, 1, 2, 3, ...): an int8 byte
gives one 8-bit symbol (S = 8, mode 1), a packed int4 byte gives two 4-bit symbols, low nibble
first (S = 4, mode 2).

Mode 3 codes a run of 2:4 sparse blocks (tessel.isa.sparse24: per CONV, its values then one
index nibble per group), then a tail: bytes 5..20 are vb, G, B and L (u32 each: value bytes
and groups per block, blocks, the values stream's length), then a stream of mode 0-2 of every
block's values followed by the tail (L bytes), then the B * G indices as their ranks among the
six legal patterns, three per byte in base 6 (`sparse24.pack_ranks`: 2.67 bits per group, not
4). The encoder (asked with ``sparse``, on a target with 2:4 sparsity) finds the block shape
that covers the most index bytes from the range's start and keeps it when it is the shortest.
Splitting the unary codes from the remainders lets a decoder (and numpy)
find every symbol's boundaries from the unary section alone, then read the remainders at offsets
known in advance. The encoder chooses each block's k to minimise its bits, and the stream's mode
as the smallest of the three: a stream is never longer than 5 + n bytes (raw).

Decoding never trusts its input: a wrong length, an unknown mode, k >= S, a unary section
without exactly one zero per symbol, a symbol above 2**S - 1, non-zero padding or a missing
bit, and in mode 3 blocks that do not fit n, a rank byte of 216 or more or values of the
wrong length, raises `TesselFormatError`. The work is bounded by the stream's length (each symbol costs at
least one unary bit), so a malformed stream cannot make the decoder hang or allocate more than
a few times its own size.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from tessel.errors import TesselFormatError
from tessel.isa.sparse24 import PATTERNS, RANK, pack_ranks, unpack_ranks

BLOCK = 64  # symbols per Rice parameter
K_BITS = 3  # bits of a block's k
ESCAPE = 8  # a unary code of ESCAPE ones is followed by the whole symbol
HEADER = 5  # mode + n
CODED_HEADER = 9  # mode + n + U
SPARSE_HEADER = 21  # mode + n + value bytes and groups per block + blocks + values stream bytes


class StreamMode(enum.IntEnum):
    RAW = 0
    BYTES = 1  # int8 bytes: one 8-bit symbol each
    NIBBLES = 2  # int4 packed bytes: two 4-bit symbols each, low nibble first
    SPARSE24 = 3  # 2:4 sparse blocks: their values as a stream, their indices as base-6 ranks


SYMBOL_BITS = {StreamMode.BYTES: 8, StreamMode.NIBBLES: 4}


@dataclass(frozen=True)
class StreamInfo:
    """A stream's header: its mode, decoded bytes and coded bytes."""

    mode: StreamMode
    decoded: int
    encoded: int


def _symbols(data: np.ndarray, mode: StreamMode) -> np.ndarray:
    """The zig-zag symbols of the bytes `data` (uint8) in `mode`."""
    if mode is StreamMode.BYTES:
        s = data.view(np.int8).astype(np.int16)
        return ((s << 1) ^ (s >> 7)).astype(np.uint8)
    nib = np.stack([data & 0xF, data >> 4], axis=1).reshape(-1).astype(np.int16)
    s = np.where(nib >= 8, nib - 16, nib)
    return ((s << 1) ^ (s >> 3)).astype(np.uint8)


def _bytes_of(sym: np.ndarray, mode: StreamMode) -> bytes:
    """Inverse of `_symbols`."""
    s = (sym >> 1).astype(np.int16) ^ -(sym & 1).astype(np.int16)
    if mode is StreamMode.BYTES:
        return s.astype(np.int8).tobytes()
    nib = (s & 0xF).astype(np.uint8).reshape(-1, 2)
    return (nib[:, 0] | (nib[:, 1] << 4)).astype(np.uint8).tobytes()


def _block_costs(sym: np.ndarray, nbits: int) -> np.ndarray:
    """(blocks, nbits): the bits of each block's unary codes and remainders coded with each k
    (a histogram of each block's symbols times each symbol's bits under each k)."""
    nblocks = -(-sym.size // BLOCK)
    width = 1 << nbits
    hist = np.bincount(np.arange(sym.size) // BLOCK * width + sym,
                       minlength=nblocks * width).reshape(nblocks, width)
    v, k = np.arange(width)[:, None], np.arange(nbits)[None, :]
    u = np.minimum(v >> k, ESCAPE)
    bits = u + 1 + np.where(u == ESCAPE, nbits, k)
    return hist @ bits  # int64 (no BLAS: small products, no threads to start)


def _choose_k(sym: np.ndarray, nbits: int) -> np.ndarray:
    """Each block's k (the one of 0..nbits-1 coding it in the fewest bits, the smallest of
    equals)."""
    return np.argmin(_block_costs(sym, nbits), axis=1).astype(np.uint8)


def stream_size(data: bytes, *, nibbles: bool = False, sparse: bool = False) -> int:
    """``len(encode(data, nibbles=nibbles, sparse=sparse))``, without writing the stream."""
    raw = np.frombuffer(bytes(data), np.uint8)
    best = HEADER + raw.size
    modes = (StreamMode.BYTES, StreamMode.NIBBLES) if nibbles else (StreamMode.BYTES,)
    for mode in modes if raw.size else ():
        sym = _symbols(raw, mode)
        bits = -(-sym.size // BLOCK) * K_BITS + int(_block_costs(sym, SYMBOL_BITS[mode])
                                                    .min(axis=1).sum())
        best = min(best, CODED_HEADER + -(-bits // 8))
    for layout in _sparse_layouts(raw) if sparse else ():
        best = min(best, SPARSE_HEADER + stream_size(layout.values, nibbles=nibbles)
                   + len(layout.ranks))
    return best


@dataclass(frozen=True)
class _SparseLayout:
    """A run of bytes read as `count` equal 2:4 blocks (`sparse24`: each `vb` bytes of values,
    then the index nibbles of `groups` groups) and a tail: all values then the tail in
    `values`, all indices as packed ranks in `ranks`."""

    vb: int
    groups: int
    count: int
    values: bytes
    ranks: bytes


MIN_GROUPS = 16  # the encoder looks for blocks of at least this many groups


def _legal(raw: np.ndarray) -> np.ndarray:
    """Per byte, whether both its nibbles are legal 2:4 indices."""
    ok = RANK < len(PATTERNS)
    return ok[raw & 0xF] & ok[raw >> 4]


def _block_shapes(raw: np.ndarray) -> list[tuple[int, int]]:
    """(value bytes, groups) of the blocks, of int4 (one byte of values per group) or int8
    values (two), whose first block's whole index bytes are legal."""
    bad = np.concatenate([[0], np.cumsum(~_legal(raw))])
    out = []
    for per in (1, 2):
        g = np.arange(MIN_GROUPS, 2 * raw.size // (2 * per + 1) + 1)
        ok = bad[per * g + g // 2] == bad[per * g]
        out += [(per * int(x), int(x)) for x in g[ok]]
    return out


def _leading_blocks(raw: np.ndarray, bad: np.ndarray, vb: int, groups: int) -> int:
    """How many blocks of the shape from the start of `raw` have legal indices (`bad`: the
    prefix count of bytes with an illegal nibble)."""
    size = vb + -(-groups // 2)
    at = np.arange(raw.size // size) * size + vb
    legal = bad[at + groups // 2] == bad[at]
    if groups % 2:  # the last index byte: a legal low nibble, a zero high one
        last = raw[at + groups // 2]
        legal &= (RANK[last & 0xF] < len(PATTERNS)) & (last >> 4 == 0)
    return int(np.argmin(legal)) if not legal.all() else legal.size


def _sparse_layouts(raw: np.ndarray) -> list[_SparseLayout]:
    """The way `raw` starts with the most index bytes of 2:4 blocks of one shape whose index
    nibbles are legal (the padding nibble of an odd count zero), the rest a tail; [] when
    there is none."""
    bad = np.concatenate([[0], np.cumsum(~_legal(raw))])
    best, most = None, 0
    for vb, groups in _block_shapes(raw):
        count = _leading_blocks(raw, bad, vb, groups)
        if count * groups > most:
            best, most = (vb, groups, count), count * groups
    if best is None:
        return []
    vb, groups, count = best
    size = vb + -(-groups // 2)
    blocks = raw[:count * size].reshape(count, size)
    nib = np.stack([blocks[:, vb:] & 0xF, blocks[:, vb:] >> 4], axis=2).reshape(count, -1)
    values = blocks[:, :vb].tobytes() + raw[count * size:].tobytes()
    return [_SparseLayout(vb, groups, count, values, pack_ranks(nib[:, :groups]))]


def _pack_fields(values: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """The bits of each value's low `width` bits, least significant first, concatenated."""
    if values.size == 0:
        return np.zeros(0, np.uint8)
    top = int(widths.max(initial=0))
    j = np.arange(top)
    bits = ((values[:, None].astype(np.int64) >> j) & 1).astype(np.uint8)
    return bits[j[None, :] < widths[:, None]]


def _coded(sym: np.ndarray, n: int, mode: StreamMode) -> bytes:
    nbits = SYMBOL_BITS[mode]
    ks = _choose_k(sym, nbits)
    k = np.repeat(ks, BLOCK)[:sym.size].astype(np.int64)
    v = sym.astype(np.int64)
    u = np.minimum(v >> k, ESCAPE)
    unary = np.ones(int((u + 1).sum()), np.uint8)
    unary[np.cumsum(u + 1) - 1] = 0
    esc = u == ESCAPE
    rem = np.where(esc, v, v & ((1 << k) - 1))
    widths = np.where(esc, nbits, k)
    bits = np.concatenate([_pack_fields(ks, np.full(ks.size, K_BITS)), unary,
                           _pack_fields(rem, widths)])
    head = bytes([mode]) + n.to_bytes(4, "little") + unary.size.to_bytes(4, "little")
    return head + np.packbits(bits, bitorder="little").tobytes()


def encode(data: bytes, *, nibbles: bool = False, sparse: bool = False) -> bytes:
    """The shortest stream of `data`: raw, or Rice-coded byte symbols, or (`nibbles`, for int4
    packed weights) nibble symbols, or (`sparse`, on a target with 2:4 sparsity) 2:4 blocks."""
    raw = np.frombuffer(bytes(data), np.uint8)
    n = raw.size
    if n >= 1 << 32:
        raise ValueError(f"a weight stream holds at most 2**32 - 1 bytes, not {n}")
    best = bytes([StreamMode.RAW]) + n.to_bytes(4, "little") + bytes(data)
    modes = (StreamMode.BYTES, StreamMode.NIBBLES) if nibbles else (StreamMode.BYTES,)
    for mode in modes if n else ():
        coded = _coded(_symbols(raw, mode), n, mode)
        if len(coded) < len(best):
            best = coded
    for layout in _sparse_layouts(raw) if sparse else ():
        values = encode(layout.values, nibbles=nibbles)
        head = b"".join(x.to_bytes(4, "little") for x in (n, layout.vb, layout.groups,
                                                           layout.count, len(values)))
        coded = bytes([StreamMode.SPARSE24]) + head + values + layout.ranks
        if len(coded) < len(best):
            best = coded
    return best


def info(stream: bytes) -> StreamInfo:
    """The header of a stream (checked: mode and length)."""
    if len(stream) < HEADER:
        raise TesselFormatError(f"weight stream of {len(stream)} bytes: shorter than its header")
    try:
        mode = StreamMode(stream[0])
    except ValueError:
        raise TesselFormatError(f"weight stream: unknown mode {stream[0]} at offset 0") from None
    n = int.from_bytes(stream[1:5], "little")
    if mode is StreamMode.RAW and len(stream) != HEADER + n:
        raise TesselFormatError(f"raw weight stream of {n} bytes is {len(stream)} bytes long, "
                                f"not {HEADER + n}")
    if mode is not StreamMode.RAW and len(stream) < CODED_HEADER:
        raise TesselFormatError("coded weight stream shorter than its header")
    if mode is StreamMode.SPARSE24 and len(stream) < SPARSE_HEADER:
        raise TesselFormatError("2:4 weight stream shorter than its header")
    return StreamInfo(mode, n, len(stream))


def decode(stream: bytes) -> bytes:
    """The bytes a stream codes; `TesselFormatError` for a malformed stream."""
    head = info(stream)
    if head.mode is StreamMode.RAW:
        return bytes(stream[HEADER:])
    if head.mode is StreamMode.SPARSE24:
        return _decode_sparse(bytes(stream), head.decoded)
    nbits = SYMBOL_BITS[head.mode]
    count = head.decoded * (8 // nbits)
    ubits = int.from_bytes(stream[5:9], "little")
    bits = np.unpackbits(np.frombuffer(bytes(stream), np.uint8)[CODED_HEADER:], bitorder="little")
    if count > bits.size:  # every symbol takes at least one bit: bounds the work below
        raise TesselFormatError(f"weight stream of {head.decoded} bytes has only {bits.size} bits")
    nblocks = -(-count // BLOCK)
    kbits = nblocks * K_BITS
    if kbits + ubits > bits.size:
        raise TesselFormatError("weight stream: unary section runs past the stream's end")
    ks = bits[:kbits].reshape(nblocks, K_BITS) @ (1 << np.arange(K_BITS))
    if ks.size and int(ks.max()) >= nbits:
        raise TesselFormatError(f"weight stream: Rice parameter {int(ks.max())} >= {nbits}")
    unary = bits[kbits:kbits + ubits]
    ends = np.flatnonzero(unary == 0)
    if ends.size != count or (ubits and unary[-1] != 0):
        raise TesselFormatError(f"weight stream: unary section codes {ends.size} symbols, "
                                f"not {count}")
    u = np.diff(ends, prepend=-1) - 1
    if u.size and int(u.max()) > ESCAPE:
        raise TesselFormatError(f"weight stream: unary code {int(u.max())} > {ESCAPE}")
    sym = _remainders(bits[kbits + ubits:], u, np.repeat(ks, BLOCK)[:count], nbits)
    return _bytes_of(sym, head.mode)


def _decode_sparse(stream: bytes, n: int) -> bytes:
    """The bytes of a 2:4 stream (mode 3) decoding to `n` bytes."""
    vb, groups, count, length = (int.from_bytes(stream[at:at + 4], "little")
                                 for at in (5, 9, 13, 17))
    block = vb + -(-groups // 2)
    if vb == 0 or groups == 0 or count == 0 or count * block > n:
        raise TesselFormatError(f"2:4 weight stream: {count} blocks of {vb} value bytes and "
                                f"{groups} groups in {n} bytes")
    end = SPARSE_HEADER + length
    if end > len(stream):
        raise TesselFormatError("2:4 weight stream: its values run past the stream's end")
    try:  # checks the index section's length before it allocates anything
        nib = unpack_ranks(stream[end:], count * groups).reshape(count, groups)
    except ValueError as e:
        raise TesselFormatError(f"2:4 weight stream: {e}") from None
    inner = stream[SPARSE_HEADER:end]
    if info(inner).mode is StreamMode.SPARSE24:
        raise TesselFormatError("2:4 weight stream: its values are a 2:4 stream")
    values = np.frombuffer(decode(inner), np.uint8)
    tail = n - count * block
    if values.size != count * vb + tail:
        raise TesselFormatError(f"2:4 weight stream: {values.size} value and tail bytes, not "
                                f"{count * vb + tail}")
    nib = np.concatenate([nib, np.zeros((count, groups % 2), np.uint8)], axis=1)
    idx = nib[:, 0::2] | (nib[:, 1::2] << 4)
    blocks = np.concatenate([values[:count * vb].reshape(count, vb), idx], axis=1)
    return blocks.tobytes() + values[count * vb:].tobytes()


def _remainders(bits: np.ndarray, u: np.ndarray, k: np.ndarray, nbits: int) -> np.ndarray:
    """The symbols from their unary codes `u`, Rice parameters `k` and the remainder bits."""
    esc = u == ESCAPE
    widths = np.where(esc, nbits, k).astype(np.int64)
    total = int(widths.sum())
    if total > bits.size or bits.size - total >= 8 or bits[total:].any():
        raise TesselFormatError(f"weight stream: {bits.size} remainder bits, {total} expected "
                                "(then zero padding to a byte)")
    starts = np.cumsum(widths) - widths
    rem = np.zeros(u.size, np.int64)
    for j in range(nbits):
        take = j < widths
        rem[take] |= bits[starts[take] + j].astype(np.int64) << j
    sym = np.where(esc, rem, (u.astype(np.int64) << k) | rem)
    if sym.size and int(sym.max()) >= 1 << nbits:
        raise TesselFormatError(f"weight stream: symbol {int(sym.max())} >= {1 << nbits}")
    return sym.astype(np.uint8)
