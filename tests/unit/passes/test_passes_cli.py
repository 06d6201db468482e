"""`tessel opt` through its own register() (the lead wires it into the main CLI)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tessel.cli.opt import register
from tessel.errors import TesselConfigError, TesselParseError
from tessel.ir import Op, parse_graph

GOLDEN = Path(__file__).resolve().parents[2] / "golden"


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="tessel")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_opt_runs_passes_and_dumps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.tir"
    src = GOLDEN / "fold_batch_norm" / "conv_no_bias.tir"
    code = _run(["opt", str(src), "--passes", "fold_batch_norm,to_nhwc", "--dump-after",
                 "fold_batch_norm", "-o", str(out)])
    assert code == 0
    g = parse_graph(out.read_text())
    assert Op.BATCH_NORM not in list(g.ops()) and Op.TRANSPOSE in list(g.ops())
    err = capsys.readouterr().err
    assert err.startswith("// ----- IR after fold_batch_norm -----") and "nhwc" not in err


def test_opt_default_pipeline_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["opt", str(GOLDEN / "pipeline" / "conv_bn_relu6.tir")]) == 0
    assert "layout = nhwc" in capsys.readouterr().out


def test_opt_bad_arguments(tmp_path: Path) -> None:
    src = str(GOLDEN / "dce" / "all_live.tir")
    with pytest.raises(TesselConfigError, match="unknown pass 'fold'"):
        _run(["opt", src, "--passes", "fold"])
    with pytest.raises(TesselConfigError, match="--dump-after: unknown pass"):
        _run(["opt", src, "--dump-after", "nope"])
    with pytest.raises(TesselConfigError, match="cannot read IR file"):
        _run(["opt", str(tmp_path / "missing.tir")])
    bad = tmp_path / "bad.tir"
    bad.write_text("graph @g(%x: tensor<4xf32>) {\n"
                   "  %y = nope(%x) : tensor<4xf32>\n  return %y\n}\n")
    with pytest.raises(TesselParseError, match=r"bad.tir:2:8: unknown op 'nope'"):
        _run(["opt", str(bad)])
