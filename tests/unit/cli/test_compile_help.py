"""`tessel compile --help` names every input format the loader reads, the default target and
the default output name; -o is optional."""

from __future__ import annotations

from pathlib import Path

from tessel.cli import build_parser
from tessel.cli.backend import DEFAULT_TARGET, default_output
from tessel.models.loader import MODEL_FILES


def test_help_lists_every_input_format_and_the_defaults(capsys):
    parser = build_parser()
    try:
        parser.parse_args(["compile", "--help"])
    except SystemExit:
        pass
    text = " ".join(capsys.readouterr().out.split())
    for suffix in [*MODEL_FILES, ".pt2", ".py:factory"]:
        assert f"model{suffix}" in text or f"file{suffix}" in text, suffix
    assert "zoo name" in text and f"default {DEFAULT_TARGET}" in text
    assert "-o MODEL's name with .tsl" in text
    args = parser.parse_args(["compile", "resnet18"])
    assert args.output is None and args.target == DEFAULT_TARGET


def test_default_output_is_the_models_name_in_the_working_directory():
    assert default_output("resnet18") == Path("resnet18.tsl")
    assert default_output("models/net.py:make") == Path("net.tsl")
    assert default_output("/data/model.onnx") == Path("model.tsl")
    assert default_output("exported.pt2") == Path("exported.tsl")
