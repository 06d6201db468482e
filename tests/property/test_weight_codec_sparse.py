"""Weight streams of 2:4 sparse blocks (mode 3, tessel.isa.weight_codec with ``sparse``):
decode(encode(x)) == x for any bytes and for runs of real 2:4 blocks with a tail, the index
section a third smaller, the mode only where the encoder is asked for it, and a malformed 2:4
stream always a TesselFormatError."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stream_faults import corrupt, decode_or_format_error

from tessel.errors import TesselFormatError
from tessel.isa import sparse24
from tessel.isa.weight_codec import (
    HEADER,
    SPARSE_HEADER,
    StreamMode,
    decode,
    encode,
    info,
    stream_size,
)
from tessel.ops.conv_weights import pack_int4

FAST = settings(max_examples=150, deadline=None, derandomize=True)


def _blocks(seed: int, count: int, taps: int, cin: int, cout: int, int4: bool,
            tail: int = 0) -> bytes:
    """`count` CONV blocks of 2:4 weights as code generation stores them, then `tail` bytes."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        w = rng.integers(-7 if int4 else -127, 8 if int4 else 128, (taps, cin // 4, 4, cout))
        drop = np.argsort(rng.random(w.shape), axis=2) < 2  # two of every four zeroed
        w = np.where(drop, 0, w).reshape(taps, cin, cout).astype(np.int8)
        values, nibbles = sparse24.encode(w)
        raw = pack_int4(values.reshape(-1)) if int4 else values.tobytes()
        out.append(raw + sparse24.pack_nibbles(nibbles))
    return b"".join(out) + rng.integers(0, 256, tail, dtype=np.uint8).tobytes()


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.sampled_from([1, 3, 9]),
       st.sampled_from([4, 8, 16, 32]), st.integers(1, 9), st.booleans(), st.integers(0, 200))
def test_blocks_roundtrip_and_shrink(seed: int, count: int, taps: int, cin: int, cout: int,
                                     int4: bool, tail: int) -> None:
    data = _blocks(seed, count, taps, cin, cout, int4, tail)
    stream = encode(data, nibbles=int4, sparse=True)
    assert decode(stream) == data
    assert stream_size(data, nibbles=int4, sparse=True) == len(stream)
    assert len(stream) <= len(encode(data, nibbles=int4)) <= HEADER + len(data)
    groups = count * taps * cin // 4 * cout
    if groups >= 256 and cout % 2 == 0:  # big enough for the header to be paid back
        assert info(stream).mode is StreamMode.SPARSE24
        index = groups // 2
        # the indices take a third less; the values and tail are stored at most raw (+ header)
        assert len(stream) <= len(data) - index + -(-groups // 3) + SPARSE_HEADER + HEADER


@FAST
@given(st.binary(max_size=3000), st.booleans())
def test_any_bytes_roundtrip(data: bytes, nibbles: bool) -> None:
    stream = encode(data, nibbles=nibbles, sparse=True)
    assert decode(stream) == data
    assert stream_size(data, nibbles=nibbles, sparse=True) == len(stream)
    assert len(stream) <= HEADER + len(data)


def test_only_when_asked() -> None:
    data = _blocks(0, 4, 9, 16, 8, True)
    assert info(encode(data, nibbles=True)).mode is not StreamMode.SPARSE24
    assert info(encode(data, nibbles=True, sparse=True)).mode is StreamMode.SPARSE24


def test_odd_groups_keep_their_zero_padding_nibble() -> None:
    data = _blocks(1, 20, 3, 4, 17, False)  # 51 groups a block: a padding nibble each
    stream = encode(data, sparse=True)
    assert info(stream).mode is StreamMode.SPARSE24 and decode(stream) == data
    bad = bytearray(data)
    bad[2 * 51 + 25] |= 0x40  # the first block's padding nibble set: no longer the format
    assert decode(encode(bytes(bad), sparse=True)) == bytes(bad)


def test_ranks_pack_three_per_byte() -> None:
    nib = sparse24.PATTERNS[np.arange(20) % 6]
    packed = sparse24.pack_ranks(nib)
    assert packed is not None and len(packed) == 7
    assert (sparse24.unpack_ranks(packed, 20) == nib).all()
    assert sparse24.pack_ranks(np.array([4, 0], np.uint8)) is None  # 0: first == second
    for bad, count in ((bytes([216]), 3), (packed, 19), (packed[:-1], 20), (bytes([6 * 1]), 1)):
        with pytest.raises(ValueError):
            sparse24.unpack_ranks(bad, count)


@FAST
@given(st.integers(0, 2**32 - 1), st.data())
def test_corrupted_stream_is_a_format_error(seed: int, data: st.DataObject) -> None:
    stream = encode(_blocks(seed, 2, 9, 8, 8, True, 24), nibbles=True, sparse=True)
    assert stream[0] == StreamMode.SPARSE24
    decode_or_format_error(corrupt(stream, data, fields=[1, 5, 9, 13, 17]))


def test_specific_malformations() -> None:
    good = encode(_blocks(3, 2, 9, 8, 8, True, 12), nibbles=True, sparse=True)
    assert decode(good) and info(good).mode is StreamMode.SPARSE24

    def field(at: int, value: int) -> bytes:
        return good[:at] + value.to_bytes(4, "little") + good[at + 4:]

    inner = bytes([StreamMode.SPARSE24]) + good[1:]
    nested = good[:SPARSE_HEADER] + inner  # values given as a 2:4 stream
    bad = [good[:SPARSE_HEADER - 1], good[:-1], good + b"\x00", field(5, 0), field(9, 0),
           field(13, 0), field(13, 3), field(17, 10**6), field(1, 7), nested,
           good[:-1] + bytes([255])]
    for stream in bad:
        with pytest.raises(TesselFormatError):
            decode(stream)
