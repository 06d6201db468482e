"""The weight stream (tessel.isa.weight_codec): decode(encode(x)) == x for every byte string,
a stream never longer than raw, stream_size(x) == len(encode(x)), and a malformed stream always
a TesselFormatError."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stream_faults import corrupt, decode_or_format_error

from tessel.errors import TesselFormatError
from tessel.isa.weight_codec import HEADER, StreamMode, decode, encode, info, stream_size

FAST = settings(max_examples=300, deadline=None, derandomize=True)


def _weights(seed: int, n: int, sigma: float, lo: int, hi: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(np.round(rng.normal(0, sigma, n)), lo, hi).astype(np.int8)


def _packed(w: np.ndarray) -> bytes:
    w = np.concatenate([w, np.zeros(w.size % 2, np.int8)])
    return ((w[0::2] & 0xF) | ((w[1::2] & 0xF) << 4)).astype(np.uint8).tobytes()


@FAST
@given(st.binary(max_size=3000), st.booleans())
def test_roundtrip_any_bytes(data: bytes, nibbles: bool) -> None:
    stream = encode(data, nibbles=nibbles)
    assert decode(stream) == data
    assert len(stream) <= HEADER + len(data)
    assert info(stream).decoded == len(data)
    assert stream_size(data, nibbles=nibbles) == len(stream)


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(1, 5000), st.floats(0.3, 60.0), st.booleans())
def test_roundtrip_weight_like(seed: int, n: int, sigma: float, int4: bool) -> None:
    w = _weights(seed, n, sigma, -7 if int4 else -127, 7 if int4 else 127)
    data = _packed(w) if int4 else w.tobytes()
    stream = encode(data, nibbles=int4)
    assert decode(stream) == data
    assert stream_size(data, nibbles=int4) == len(stream)  # coded streams: the size sums


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00" * 10000, b"\x80" * 777, b"\x7f" * 65,
                                  bytes(range(256)) * 3])
def test_edge_cases(data: bytes) -> None:
    for nibbles in (False, True):
        assert decode(encode(data, nibbles=nibbles)) == data


def test_constant_and_gaussian_compress_random_does_not_grow() -> None:
    assert len(encode(b"\x00" * 4096)) < 4096 // 6
    gauss = _weights(0, 50000, 12.0, -127, 127).tobytes()
    assert len(encode(gauss)) < 0.85 * len(gauss)
    int4 = _packed(_weights(1, 50000, 2.0, -7, 7))
    assert info(encode(int4, nibbles=True)).mode is StreamMode.NIBBLES
    assert len(encode(int4, nibbles=True)) < len(encode(int4))
    rnd = np.random.default_rng(2).integers(0, 256, 50000, dtype=np.uint8).tobytes()
    stream = encode(rnd, nibbles=True)
    assert info(stream).mode is StreamMode.RAW and len(stream) == len(rnd) + HEADER


@FAST
@given(st.binary(max_size=400))
def test_garbage_is_a_format_error(stream: bytes) -> None:
    decode_or_format_error(stream)
    decode_or_format_error(bytes([1]) + stream)
    decode_or_format_error(bytes([2]) + stream)


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(1, 600), st.data())
def test_corrupted_stream_is_a_format_error(seed: int, n: int, data: st.DataObject) -> None:
    stream = encode(_weights(seed, n, 9.0, -127, 127).tobytes())
    decode_or_format_error(corrupt(stream, data, fields=[1]))


def test_specific_malformations() -> None:
    good = encode(_weights(3, 300, 9.0, -127, 127).tobytes())
    assert info(good).mode is StreamMode.BYTES
    bad = [b"", b"\x00\x01", bytes([9]) + good[1:], good[:-1], good + b"\x00",
           good[:1] + (10**6).to_bytes(4, "little") + good[5:],
           good[:5] + (2**32 - 1).to_bytes(4, "little") + good[9:],
           bytes([0]) + (5).to_bytes(4, "little") + b"abc"]
    for stream in bad:
        with pytest.raises(TesselFormatError):
            decode(stream)
