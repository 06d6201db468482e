"""`CompiledModel.run_batch` equals `run` on each sample, bit for bit (host prologue /
epilogue, several NPU regions, shared or copied constants, chunks), and `run` / `run_batch`
check their inputs (TesselConfigError naming the input)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tessel.sim.api as sim_api
from tessel.errors import TesselConfigError
from tessel.runtime.compiled import load
from tessel.runtime.inputs import input_specs

CORPUS = Path(__file__).resolve().parents[2] / "fuzz" / "corpus"
BINARIES = ["tiny_regions.tsl", "tiny_cnn.tsl", "tiny_mlp.tsl"]


def _batch(cm, n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for s in input_specs(cm):
        if s.dtype.kind == "f":
            out.append((2 * rng.standard_normal((n, *s.shape))).astype(s.dtype))
        else:
            out.append(rng.integers(0, 100, (n, *s.shape)).astype(s.dtype))
    return out


def _assert_equal_to_singles(cm, xs, outs) -> None:
    n = xs[0].shape[0]
    for k in range(n):
        single = cm.run(*[x[k] for x in xs])
        assert len(single) == len(outs)
        for got, want in zip(outs, single, strict=True):
            assert got.shape == (n, *want.shape) and got.dtype == want.dtype
            assert np.array_equal(got[k], want, equal_nan=True)


@pytest.mark.parametrize("name", BINARIES)
def test_run_batch_equals_each_sample(name):
    cm = load(CORPUS / name)
    xs = _batch(cm, 5)
    _assert_equal_to_singles(cm, xs, cm.run_batch(*xs))


def test_several_regions_with_host_parts_between():
    cm = load(CORPUS / "tiny_regions.tsl")
    assert len(cm.regions) >= 2 and all(h is not None for h in cm.host_parts)


def test_run_batch_chunks_and_copied_constants(monkeypatch):
    cm = load(CORPUS / "tiny_regions.tsl")
    xs = _batch(cm, 5, seed=1)
    want = cm.run_batch(*xs)
    chunked = cm.run_batch(*xs, max_batch=2)
    layout = sim_api.batch_layout
    monkeypatch.setattr(sim_api, "batch_layout", lambda prep: (layout(prep)[0], None))
    copied = cm.run_batch(*xs)
    for a, b, c in zip(want, chunked, copied, strict=True):
        assert np.array_equal(a, b) and np.array_equal(a, c)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_run_checks_inputs():
    cm = load(CORPUS / "tiny_cnn.tsl")
    spec = input_specs(cm)[0]
    x = _batch(cm, 1)[0][0]
    with pytest.raises(TesselConfigError, match="takes 1 input"):
        cm.run(x, x)
    with pytest.raises(TesselConfigError, match=rf"input 1 \({spec.name}\) has shape"):
        cm.run(x[None])
    bad = x.copy()
    bad.reshape(-1)[3] = np.nan
    with pytest.raises(TesselConfigError, match=rf"input 1 \({spec.name}\) has 1 NaN"):
        cm.run(bad)
    cm.run(bad, allow_nonfinite=True)  # runs
    with pytest.raises(TesselConfigError, match="a batch of it must be"):
        cm.run_batch(x)
    with pytest.raises(TesselConfigError, match="1 NaN"):
        cm.run_batch(np.stack([x, bad]))
    with pytest.raises(TesselConfigError, match="empty"):
        cm.run_batch(x[None][:0])
