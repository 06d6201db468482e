"""Corrupted weight streams for the codec property tests: one fault drawn per stream (a bit
flipped, the stream cut short, bytes appended, or a 4-byte header field overwritten), and the
check that decoding one either succeeds or raises TesselFormatError (nothing else)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st

from tessel.errors import TesselFormatError
from tessel.isa.weight_codec import decode


def corrupt(stream: bytes, data: st.DataObject, fields: Sequence[int]) -> bytes:
    """``stream`` with one drawn fault; ``fields``: offsets of its 4-byte header fields."""
    out = bytearray(stream)
    how = data.draw(st.sampled_from(["flip", "cut", "grow", "field"]))
    if how == "flip":
        at = data.draw(st.integers(0, len(out) - 1))
        out[at] ^= 1 << data.draw(st.integers(0, 7))
    elif how == "cut":
        del out[data.draw(st.integers(0, len(out) - 1)):]
    elif how == "grow":
        out += data.draw(st.binary(min_size=1, max_size=9))
    else:
        at = data.draw(st.sampled_from(list(fields)))
        out[at:at + 4] = data.draw(st.integers(0, 2**32 - 1)).to_bytes(4, "little")
    return bytes(out)


def decode_or_format_error(stream: bytes) -> None:
    try:
        decode(stream)
    except TesselFormatError:
        pass
