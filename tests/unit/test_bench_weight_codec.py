"""benchmarks.bench_weight_codec's measurement on synthetic layers: stored bytes never above
raw, raw layers counted, int4 packing and the entropy figure checked against hand computations."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.bench_weight_codec import entropy_bytes, measure, pack_int4  # noqa: E402


def test_pack_int4_low_nibble_first() -> None:
    assert pack_int4(np.array([1, -1, -8, 7, 3], np.int8)) == bytes([0xF1, 0x78, 0x03])


def test_entropy_of_two_equiprobable_bytes() -> None:
    assert entropy_bytes([bytes([0, 5] * 400)], nibbles=False) == 100.0  # 800 bits


def test_measure_random_stays_raw_gaussian_shrinks() -> None:
    rng = np.random.default_rng(0)
    rnd = rng.integers(0, 256, 20000, dtype=np.uint8).tobytes()
    gauss = np.clip(np.round(rng.normal(0, 8, 20000)), -127, 127).astype(np.int8).tobytes()
    s = measure([rnd, gauss], nibbles=False)
    assert s.raw == 40000 and s.raw_layers == 1 and s.layers == 2
    assert 20000 < s.stream < 20000 + 0.8 * 20000
    assert s.stream < 1.1 * s.zstd
    g = measure([gauss], nibbles=False)  # one layer: its order-0 entropy bounds any such coder
    assert g.entropy < g.stream == s.stream - 20000
