"""Never destroy user data (docs/cli.md "Output files"): an output (`-o`, `--html`, ...) that is
the model's source file, an input file, the binary read, or a non-regular file (a FIFO, a
device) is refused with one error line, exit 1, and the file is left byte for byte as it was,
whether named directly, through a symbolic link or through a hard link. A symbolic link to
an unrelated file is written through: the link stays, the file it points to gets the output."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tessel.cli import main

MODEL = '''import torch
def make():
    torch.manual_seed(0)
    return torch.nn.Linear(8, 4).eval(), (torch.randn(1, 8),)
'''


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("outputs")
    (d / "m.py").write_text(MODEL)
    assert main(["compile", f"{d}/m.py:make", "-o", str(d / "good.tsl"), "--calibration", "1"]) == 0
    assert main(["import", f"{d}/m.py:make", "-o", str(d / "good.tir")]) == 0
    assert main(["disasm", str(d / "good.tsl"), "-o", str(d / "good.tasm")]) == 0
    np.save(d / "x.npy", np.ones((1, 8), np.float32))
    (d / "cal").mkdir()
    np.save(d / "cal" / "a.npy", np.ones((1, 8), np.float32))
    preset = Path(__file__).parents[2] / "src/tessel/arch/presets/tnpu-s.toml"
    (d / "t.toml").write_text(preset.read_text())
    os.symlink(d / "m.py", d / "link.tsl")
    os.link(d / "m.py", d / "hard.tsl")
    os.mkfifo(d / "fifo.tsl")
    return d


CASES = [  # (argv with {d}, the file that must survive)
    ("compile {d}/m.py:make -o {d}/m.py", "m.py"),
    ("compile {d}/m.py:make -o {d}/link.tsl", "m.py"),
    ("compile {d}/m.py:make -o {d}/hard.tsl", "m.py"),
    ("compile {d}/m.py:make -o {d}/x.npy --inputs {d}/x.npy", "x.npy"),
    ("compile {d}/m.py:make -o {d}/cal/a.npy --calibration-data {d}/cal", "cal/a.npy"),
    ("compile {d}/m.py:make -o {d}/t.toml --target {d}/t.toml", "t.toml"),
    ("compile {d}/m.py:make -o {d}/fifo.tsl", None),
    ("import {d}/m.py:make -o {d}/m.py", "m.py"),
    ("opt {d}/good.tir -o {d}/good.tir", "good.tir"),
    ("disasm {d}/good.tsl -o {d}/good.tsl", "good.tsl"),
    ("asm {d}/good.tasm -o {d}/good.tasm", "good.tasm"),
    ("profile {d}/good.tsl --html {d}/good.tsl", "good.tsl"),
    ("profile {d}/good.tsl --csv {d}/fifo.tsl", None),
]


@pytest.mark.parametrize(("argv", "keep"), CASES, ids=[c[0] for c in CASES])
def test_outputs_never_destroy_inputs(work, capfd, argv, keep):
    before = (work / keep).read_bytes() if keep else None
    assert main(argv.format(d=work).split() + (["--calibration", "1"]
                                                if argv.startswith("compile") else [])) == 1
    err = [ln for ln in capfd.readouterr().err.splitlines() if "error" in ln]
    assert len(err) == 1 and "refusing to write" in err[0], err
    if keep:
        assert (work / keep).read_bytes() == before
    assert (work / "link.tsl").is_symlink() and (work / "fifo.tsl").is_fifo()


def test_a_module_beside_the_model_file_is_one_of_its_sources(tmp_path, capfd):
    (tmp_path / "beside_layers.py").write_text(
        "import torch\nclass Block(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.fc = torch.nn.Linear(8, 4)\n"
        "    def forward(self, x):\n        return self.fc(x)\n")
    (tmp_path / "net.py").write_text(
        "import torch\nfrom beside_layers import Block\n"  # the folder of net.py is importable
        "def make():\n    return Block().eval(), (torch.randn(1, 8),)\n")
    before = (tmp_path / "beside_layers.py").read_bytes()
    argv = ["compile", f"{tmp_path}/net.py:make", "--calibration", "1", "-o"]
    assert main(argv + [str(tmp_path / "beside_layers.py")]) == 1
    assert "refusing to write" in capfd.readouterr().err
    assert (tmp_path / "beside_layers.py").read_bytes() == before
    assert main(argv + [str(tmp_path / "net.tsl")]) == 0


def test_a_zoo_model_sources_are_its_modules():
    import tessel.models.ds_cnn as zoo_module  # defines the model class
    from tessel.cli.backend import model_sources
    from tessel.models import resolve

    model, _ = resolve("ds_cnn").factory()
    assert Path(zoo_module.__file__) in model_sources(model, "ds_cnn")


def test_symlink_to_another_file_is_written_through(work, tmp_path):
    target = tmp_path / "old.tsl"
    target.write_bytes(b"old")
    link = tmp_path / "out.tsl"
    os.symlink(target, link)
    assert main(["compile", f"{work}/m.py:make", "-o", str(link), "--calibration", "1"]) == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes()[:4] == b"TSL\0"
    assert target.read_bytes() == (work / "good.tsl").read_bytes()
