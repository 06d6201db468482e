"""The zoo through TOSA: each CNN's, ViT's and XR model's export runs in the TOSA reference model
bit-exact with the golden model on the same inputs, and export -> import -> compile -> simulate
equals the golden model too; MiniLM's export is refused at its int64 token ids, which TOSA's
integer profile does not hold (docs/frontend.md, "TOSA")."""

from __future__ import annotations

import json
from functools import cache

import numpy as np
import pytest
import tosa_reference_model
from zoo_cache import CALIBRATION, quantized

from tessel.arch import load_preset
from tessel.driver import compile_graph
from tessel.errors import TesselExportError
from tessel.frontend.tosa_export import export_tosa
from tessel.frontend.tosa_import import import_tosa
from tessel.ir import run_graph
from tessel.models import resolve, xr
from tessel.passes.to_nhwc import to_nhwc
from tessel.quant.api import quantize
from tessel.quant.config import default_config
from tessel.quant.golden import GOLDEN_KERNELS, run_golden
from tessel.quant.lower import lower_qdq

EXPORTED = ["digits_cnn", "ds_cnn", "mobilenet_v2", "resnet18", "vit_small", *xr.NAMES]


@cache
def _quantized(name: str):
    """The zoo cache's model, or an XR model quantised the same way (several outputs)."""
    if name not in xr.NAMES:
        qm, inputs, _ = quantized(name)
        return qm, inputs
    spec = resolve(name)
    model, example = spec.factory()
    qm = quantize(model, example, calibration_data=spec.calibration_data(CALIBRATION),
                  quant_config=default_config(name), calibration_samples=CALIBRATION)
    return qm, tuple(x.numpy() for x in example)


def _grouped(*names):
    return [pytest.param(n, marks=pytest.mark.xdist_group(f"zoo-{n}")) for n in names]


def _reference_equals_golden(name, cut=False):
    """The export's TOSA bytes, its inputs and the golden model's int8 outputs, after
    checking that the reference model computes those outputs bit for bit."""
    qm, inputs = _quantized(name)
    graph = qm.graph
    exported = export_tosa(graph, cut=cut)
    data = exported.to_bytes()
    names = list(exported.inputs) + list(exported.outputs)
    values = run_graph(graph.with_nodes(graph.nodes, names), inputs, kernels=GOLDEN_KERNELS)
    tosa_in, golden_out = values[:len(exported.inputs)], values[len(exported.inputs):]
    assert all(v.dtype == np.int8 for v in golden_out)
    assert all(v.dtype == np.int8 for v in tosa_in) or cut

    ref, status = tosa_reference_model.run(data, [np.ascontiguousarray(x) for x in tosa_in])
    assert status == tosa_reference_model.GraphStatus.TOSA_VALID
    for r, g in zip(ref, golden_out, strict=True):
        np.testing.assert_array_equal(np.asarray(r).reshape(g.shape), g)
    return data, tosa_in, golden_out


@pytest.mark.slow
@pytest.mark.parametrize("name", _grouped(*EXPORTED))
def test_zoo_model_round_trips_through_tosa_bit_exact(name):
    _round_trip(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", _grouped("minilm"))
def test_minilm_integer_part_round_trips_and_the_whole_model_is_refused(name):
    """MiniLM's embedding lookup (int64 ids, a float table) and float pooling run on the host:
    the cut export holds the integer encoder between them, int16 embeddings and int8 masks in."""
    qm, _ = _quantized(name)
    with pytest.raises(TesselExportError, match=r"input_ids is i64"):
        export_tosa(qm.graph)
    _round_trip(name, cut=True)


def _round_trip(name, cut=False):
    data, tosa_in, golden_out = _reference_equals_golden(name, cut)
    imported = import_tosa(data, name=name)
    as_float = [x.astype(np.float32) for x in tosa_in]
    for y, g in zip(run_golden(imported, as_float), golden_out, strict=True):
        np.testing.assert_array_equal(y, g)
    cm = compile_graph(to_nhwc(lower_qdq(imported)), load_preset("tnpu-s"), name=name)
    assert not cm.program.metadata["fallback"]["host_ops"], cm.program.metadata["fallback"]
    for y, g in zip(cm.run(*as_float), golden_out, strict=True):
        np.testing.assert_array_equal(np.asarray(y), g)


def test_cli_exports_compiles_and_checks_a_tosa_file(tmp_path, capsys):
    from tessel.cli import main

    path, binary = tmp_path / "digits.tosa", tmp_path / "digits.tsl"
    assert main(["export", "tosa", "digits_cnn", "-o", str(path), "--calibration", "2",
                 "--json"]) == 0
    out = capsys.readouterr().out
    assert '"profile": "PRO-INT"' in out and "EXT-DOUBLEROUND" in out
    cut = tmp_path / "digits_cut.tosa"  # no host operators: the cut is the whole graph
    assert main(["export", "tosa", "digits_cnn", "-o", str(cut), "--calibration", "2",
                 "--cut"]) == 0
    assert cut.read_bytes() == path.read_bytes()
    capsys.readouterr()
    assert main(["compile", str(path), "-o", str(binary)]) == 0
    assert main(["run", str(binary), "--check"]) == 0
    out = capsys.readouterr().out
    # an integer model: no float reference to measure SQNR against (not "inf dB")
    assert "bit-exact" in out and "SQNR: none (an integer model" in out and " dB" not in out
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(0).uniform(0, 16, (1, 1, 8, 8)).astype(np.float32))
    assert main(["run", str(binary), "--input", str(x), "--check", "--json"]) == 0
    check = json.loads(capsys.readouterr().out)["check"]
    assert check["bit_exact"] and check["float_of"] == "none" and check["sqnr_db"] == {}
    assert main(["export", "tosa", "minilm", "-o", str(tmp_path / "minilm.tosa"),
                 "--calibration", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("tessel export: error:") and "input_ids" in err[-1]
    assert not (tmp_path / "minilm.tosa").exists()

