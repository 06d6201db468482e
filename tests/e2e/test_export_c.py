"""`tessel export c`: the exported DS-CNN project builds at -std=c99 -Wall -Wextra -Werror with gcc
and clang (each one installed) through its Makefile, and with CMake; the program prints the
outputs `tessel run` prints, bit for bit."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest
from c_printed import read_outputs

from tessel.cli import main
from tessel.runtime.cengine import available
from tessel.runtime.compiled import load

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))
COMPILERS = [cc for cc in ("gcc", "clang") if shutil.which(cc)]


@pytest.mark.slow
def test_exported_ds_cnn_builds_and_prints_the_run_outputs(tmp_path, capsys):
    binary = tmp_path / "ds_cnn.tsl"
    assert main(["compile", "ds_cnn", "-o", str(binary), "--calibration", "2"]) == 0
    project = tmp_path / "ds_cnn_c"
    assert main(["export", "c", str(binary), "-o", str(project)]) == 0
    assert "ds_cnn_example.h (its example inputs)" in capsys.readouterr().out
    assert main(["export", "c", str(binary), "-o", str(project), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["name"] == "ds_cnn" and listed["example_inputs"] is True
    assert str(project / "main.c") in listed["files"]
    header = (project / "ds_cnn_model.h").read_text()
    cm = load(binary)
    assert f"#define DS_CNN_ARENA_SIZE {cm.c_engine.arena_size}u" in header
    assert '{"x", TSL_FLOAT32, 4, {1u, 1u, 49u, 10u, 0u, 0u, 0u, 0u}, 1960u' in header

    assert main(["run", str(binary)]) == 0  # the CLI's outputs on the stored example inputs
    run_text = capsys.readouterr().out
    from tessel.runtime.reference import stored_reference
    want = cm.run(*stored_reference(cm.program.metadata).inputs)
    assert COMPILERS, "no C compiler"
    for cc in COMPILERS:
        subprocess.run(["make", "-C", str(project), f"CC={cc}", "clean", "ds_cnn_demo"],
                       check=True, capture_output=True, text=True)
        printed = subprocess.run([str(project / "ds_cnn_demo")], check=True, capture_output=True,
                                 text=True).stdout
        got = read_outputs(printed)
        assert list(got) == cm.output_names
        for name, w in zip(cm.output_names, want, strict=True):
            np.testing.assert_array_equal(got[name].astype(np.float32), w.reshape(-1))
            first = np.round(w.reshape(-1)[:6], 4)
            assert f"{name}: shape {list(w.shape)} float32, first values {first}" in run_text
            assert np.array_equal(np.round(got[name][:6].astype(np.float32), 4), first)
    if shutil.which("cmake"):
        exe = _cmake_built(project, tmp_path / "cmake-build", "ds_cnn_demo")
        printed = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
        assert read_outputs(printed).keys() == got.keys()
        for name in got:
            np.testing.assert_array_equal(read_outputs(printed)[name], got[name])


def _cmake_built(project, build, target: str):
    """The exported project configured and built with CMake in `build`; the program's path."""
    subprocess.run(["cmake", "-S", str(project), "-B", str(build)], check=True,
                   capture_output=True, text=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True,
                   text=True)
    return build / target


def test_export_names_are_c_identifiers():
    from tessel.runtime.export_c import c_name

    assert c_name("ds-cnn.v2") == "ds_cnn_v2"
    assert c_name("3net") == "m_3net"
    assert c_name("--") == "model"


def test_exported_project_decodes_weight_streams(tmp_path, capsys):
    """A binary compiled with the weight decoder (`--set wdecoder.enabled=true`): the exported
    project (CMake where installed, else its Makefile) decodes the DMA_LOAD_W streams and prints
    the outputs the Python simulator computes."""
    from tessel.isa import Opcode
    from tessel.runtime.reference import stored_reference

    binary = tmp_path / "digits_cnn.tsl"
    assert main(["compile", "digits_cnn", "-o", str(binary), "--calibration", "2",
                 "--set", "wdecoder.enabled=true"]) == 0
    cm = load(binary)
    assert cm.arch.wdecoder.enabled
    assert any(i.opcode is Opcode.DMA_LOAD_W for q in cm.program.streams.values() for i in q)
    project = tmp_path / "digits_c"
    assert main(["export", "c", str(binary), "-o", str(project)]) == 0
    capsys.readouterr()
    assert "#define DIGITS_CNN_NPU_WDECODER 1u" in (project / "digits_cnn_model.h").read_text()
    want = cm.run(*stored_reference(cm.program.metadata).inputs)
    if shutil.which("cmake"):
        exe = _cmake_built(project, tmp_path / "cmake-build", "digits_cnn_demo")
    else:
        subprocess.run(["make", "-C", str(project), "digits_cnn_demo"], check=True,
                       capture_output=True, text=True)
        exe = project / "digits_cnn_demo"
    got = read_outputs(subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout)
    assert list(got) == cm.output_names
    for name, w in zip(cm.output_names, want, strict=True):
        np.testing.assert_array_equal(got[name].astype(np.float32), w.reshape(-1))
