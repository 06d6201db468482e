"""The CLI's error contract over a table of misuses (docs/cli.md): each gives exactly one
`tessel CMD: error: ...` line on stderr and exit code 1 (2 for a bad command line), never a
traceback and never an `internal error`."""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tessel.cli import main

MODEL = '''import torch
class Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)
    def forward(self, x):
        return self.fc(x)
class Loop(torch.nn.Module):
    def forward(self, x):
        for _ in range(int(x.sum().item())):
            x = x + 1
        return x
def good():
    torch.manual_seed(0)
    return Lin().eval(), (torch.randn(1, 8),)
def shape():
    return Lin().eval(), (torch.ones(1, 5),)
def loop():
    return Loop().eval(), (torch.ones(1, 4),)
'''
PROGRESS = re.compile(r"^\[\d\d:\d\d:\d\d\] ")


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A folder with a model file, its binary and IR text, inputs good and bad, a tiny target."""
    d = tmp_path_factory.mktemp("misuse")
    (d / "m.py").write_text(MODEL)
    assert main(["compile", f"{d}/m.py:good", "-o", str(d / "good.tsl"), "--calibration", "1"]) == 0
    assert main(["import", f"{d}/m.py:good", "-o", str(d / "good.tir")]) == 0
    np.save(d / "ok.npy", np.ones((1, 8), np.float32))
    np.save(d / "nan.npy", np.array([[0, 1, np.nan, 3, 4, 5, 6, 7]], np.float32))
    np.save(d / "inf.npy", np.full((1, 8), np.inf, np.float32))
    np.save(d / "shape.npy", np.ones((1, 7), np.float32))
    np.save(d / "text.npy", np.array([["a"] * 8]))
    np.savez(d / "arch.npz", x=np.ones((1, 8), np.float32))
    (d / "empty.npy").write_bytes(b"")
    (d / "cut.npy").write_bytes((d / "ok.npy").read_bytes()[:100])
    (d / "notes.txt").write_text("hello\n")
    preset = Path(__file__).parents[2] / "src/tessel/arch/presets/tnpu-s.toml"
    (d / "tiny.toml").write_text(preset.read_text().replace("size_bytes = 536_870_912",
                                                            "size_bytes = 16"))
    (d / "space.toml").write_text('[matrix]\nrows = [8, 16]\n')
    (d / "junk.pt2").write_bytes(b"not a zip archive" * 8)
    with zipfile.ZipFile(d / "zip.pt2", "w") as z:  # a zip, but no exported program in it
        z.writestr("archive/notes.txt", "hello")
    (d / "cut.onnx").write_bytes(b"\x08\x07\x12\x04te")  # a ModelProto cut after 6 bytes
    (d / "junk.tflite").write_bytes(bytes(range(64)))
    (d / "junk.tosa").write_bytes(bytes(range(64)))
    np.savez(d / "nocal.npz")
    (d / "nocal").mkdir()
    np.savez(d / "nancal.npz", a=np.ones((1, 8), np.float32), b=np.load(d / "nan.npy"))
    np.save(d / "huge.npy", np.full((1, 8), 1e300))  # float64: finite, infinite as float32
    for name in ("big.npy", "big.npz"):  # headers that declare 2 GiB over a few bytes of data
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False,
                                                      "shape": (1 << 29,)})
        if name.endswith(".npy"):
            (d / name).write_bytes(header.getvalue() + bytes(64))
        else:
            with zipfile.ZipFile(d / name, "w") as z:
                z.writestr("x.npy", header.getvalue() + bytes(64))
    return d


CASES = [  # (argv with {d} for the folder, exit code, a phrase of the message)
    ("verify {d}/good.tsl", 1, "not a UTF-8 text"),
    ("opt {d}/good.tsl", 1, "not a UTF-8 text"),
    ("asm {d}/good.tsl -o {d}/again.tsl", 1, "not a UTF-8 text"),
    ("verify {d}/missing.tir", 1, "No such file"),
    ("verify {d}", 1, "is a directory"),
    ("run {d}/missing.tsl", 1, "missing.tsl"),
    ("run {d}/good.tir", 1, ""),
    ("disasm {d}/notes.txt", 1, ""),
    ("compile {d}/m.py:good -o {d}/missing/x.tsl", 1, "does not exist"),
    ("compile {d}/m.py:good -o {d}/m.py/x.tsl", 1, "not a directory"),
    ("compile {d}/m.py:good -o /proc/x.tsl", 1, "cannot write /proc/x.tsl"),
    ("compile {d}/m.py:good -o {d}", 1, "is a directory"),
    ("import {d}/m.py:good -o {d}/missing/x.tir", 1, "does not exist"),
    ("opt {d}/good.tir -o {d}/missing/x.tir", 1, "does not exist"),
    ("disasm {d}/good.tsl -o {d}/missing/x.tasm", 1, "does not exist"),
    ("asm {d}/notes.txt -o /proc/x.tsl", 1, "cannot write"),
    ("profile {d}/good.tsl --html {d}/missing/r.html", 1, "does not exist"),
    ("explore {d}/m.py:good --space {d}/space.toml --out {d}/m.py", 1, "not a directory"),
    ("run {d}/good.tsl --input {d}/empty.npy", 1, "is empty"),
    ("run {d}/good.tsl --input {d}/cut.npy", 1, "not a readable .npy"),
    ("run {d}/good.tsl --input {d}/notes.txt", 1, "not a readable .npy"),
    ("run {d}/good.tsl --input {d}/arch.npz", 1, ".npz"),
    ("run {d}/good.tsl --input {d}/nan.npy", 1, "1 NaN"),
    ("run {d}/good.tsl --input {d}/inf.npy --check", 1, "8 infinite"),
    ("run {d}/good.tsl --input {d}/shape.npy", 1, "shape [1, 7]"),
    ("run {d}/good.tsl --input {d}/text.npy", 1, "dtype <U1"),
    ("run {d}/good.tsl --input {d}/ok.npy --input {d}/ok.npy", 1, "takes 1 input"),
    ("run {d}/good.tsl --input {d}/missing.npy", 1, "No such file"),
    ("compile {d}/m.py:shape -o {d}/x.tsl", 1, "example inputs"),
    ("compile {d}/m.py:loop -o {d}/x.tsl", 1, "data-dependent"),
    ("import {d}/m.py:loop", 1, "m.py:10: GuardOnDataDependentSymNode"),
    ("estimate {d}/m.py:shape", 1, "torch.export of Lin failed"),
    ("estimate {d}/m.py:good --target {d}/tiny.toml --calibration 1", 1, "constants need"),
    ("compile {d}/m.py:good --target {d}/tiny.toml -o {d}/x.tsl --calibration 1", 1,
     "constants need"),
    ("compile no_such_model -o {d}/x.tsl", 1, "unknown model"),
    ("compile {d}/m.py:nothing -o {d}/x.tsl", 1, "no function 'nothing'"),
    ("compile {d}/m.py:good -o {d}/x.tsl --calibration 0", 1, "--calibration"),
    ("compile", 2, "the following arguments are required: MODEL"),
    ("frobnicate", 2, "invalid choice"),
    ("run {d}/good.tsl --bogus", 2, "unrecognized arguments"),
    # the other model formats and data files
    ("compile {d}/junk.pt2 -o {d}/x.tsl", 1, "not a torch.export archive"),
    ("compile {d}/zip.pt2 -o {d}/x.tsl", 1, "not a loadable torch.export program"),
    ("compile {d}/cut.onnx -o {d}/x.tsl", 1, "not a readable ONNX model"),
    ("compile {d}/junk.tflite -o {d}/x.tsl", 1, "not a TFLite flatbuffer"),
    ("compile {d}/junk.tosa -o {d}/x.tsl", 1, "not a TOSA flatbuffer"),
    ("accuracy {d}/junk.tosa", 1, "no float model to compare with"),
    ("compile {d}/m.py:good -o {d}/x.tsl --calibration-data {d}/missing", 1, "not found"),
    ("compile {d}/m.py:good -o {d}/x.tsl --calibration-data {d}/nocal.npz", 1, "no arrays"),
    ("compile {d}/m.py:good -o {d}/x.tsl --calibration-data {d}/nocal", 1, "nocal"),
    ("compile {d}/m.py:good -o {d}/x.tsl --calibration-data {d}/shape.npy", 1, "shape (1, 7)"),
    ("compile {d}/m.py:good -o {d}/x.tsl --inputs {d}/shape.npy", 1, "shape (1, 7)"),
    ("compile {d}/m.py:good -o {d}/x.tsl --calibration-data {d}/nancal.npz", 1,
     "calibration sample 1, input 0 holds NaN"),
    ("compile {d}/m.py:good -o {d}/x.tsl --calibration-data {d}/big.npz", 1,
     "refused before reading"),
    ("compile {d}/m.py:good -o {d}/x.tsl --inputs {d}/big.npz", 1, "refused before reading"),
    ("run {d}/good.tsl --input {d}/big.npy", 1, "refused before reading"),
    ("run {d}/good.tsl --input {d}/huge.npy", 1, "beyond the float32 range"),
    # counts past their bounds, a boolean option given both ways
    ("compile {d}/m.py:good -o {d}/x.tsl --calibration 1000000000", 1,
     "--calibration must be between 1 and 10000"),
    ("compile {d}/m.py:good -o {d}/x.tsl --on-chip-residency --no-on-chip-residency", 2,
     "contradict"),
    ("explore {d}/m.py:good --space {d}/space.toml --workers 100000", 1,
     "--workers must be between 0 and 64"),
    ("explore {d}/m.py:good --space {d} --out {d}/ex", 1, "is a directory"),
    # per-layer activation types
    ("compile {d}/m.py:good -o {d}/x.tsl --layer-precision fc=int4", 1,
     "activation type 'int4' is not one of int8, int16"),
    ("accuracy {d}/m.py:good --layer-precision fc:conv3d=int16", 1, "op 'conv3d'"),
    ("accuracy {d}/m.py:good --per-layer --advise -1", 1, "--advise >= 0"),
]


@pytest.mark.parametrize(("argv", "code", "phrase"), CASES, ids=[c[0] for c in CASES])
def test_misuse_gives_one_line(work, capfd, argv, code, phrase):
    assert main(argv.format(d=work).split()) == code
    out, err = capfd.readouterr()
    assert "Traceback" not in err + out and "internal error" not in err
    assert phrase in err
    if code == 2:
        assert "usage: tessel" in err
        return
    lines = [ln for ln in err.splitlines() if ln.strip() and not PROGRESS.match(ln)]
    assert len(lines) == 1 and lines[0].startswith(f"tessel {argv.split()[0]}: error: "), err


def test_estimate_and_compile_refuse_with_the_same_reason(work, capfd):
    tiny = str(work / "tiny.toml")
    main(["estimate", f"{work}/m.py:good", "--target", tiny, "--calibration", "1"])
    estimate_err = capfd.readouterr().err.strip().splitlines()[-1]
    main(["compile", f"{work}/m.py:good", "--target", tiny, "-o", str(work / "x.tsl"),
          "--calibration", "1"])
    compile_err = capfd.readouterr().err.strip().splitlines()[-1]
    assert estimate_err.split("error: ", 1)[1] == compile_err.split("error: ", 1)[1]


def test_nonfinite_inputs_run_when_allowed(work, capfd):
    assert main(["run", str(work / "good.tsl"), "--input", str(work / "nan.npy"),
                 "--allow-nonfinite"]) == 0
    assert "output_0: shape" in capfd.readouterr().out  # outputs named after the model's


def test_debug_shows_the_traceback(work, capfd):
    from tessel.errors import TesselConfigError

    with pytest.raises(TesselConfigError, match="is empty"):
        main(["--debug", "run", str(work / "good.tsl"), "--input", str(work / "empty.npy")])
