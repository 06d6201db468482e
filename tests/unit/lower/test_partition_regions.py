"""Several NPU regions and values passed to wherever they are needed: a host op in the middle
(conv -> an op with no NPU lowering -> conv) gives two NPU regions in one binary, bit-exact
against the golden model after a save / load round trip; multi-output graphs whose outputs are
graph inputs or host results compile and run bit-exact; the fallback summary
and the --no-fallback list name each host op once with its reason."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from torch import nn

import tessel
from tessel.binary import read_tsl
from tessel.cli import main
from tessel.errors import TesselCompileError, TesselFormatError
from tessel.lower.fallback import HostReason, summarize
from tessel.lower.partition import partition
from tessel.runtime.compiled import CompiledModel

X = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))
CALIB = [(torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(i)),) for i in range(4)]


class ConvHostConv(nn.Module):
    """conv -> cumsum (no NPU lowering) -> conv -> relu -> sort (no lowering) -> conv."""

    def __init__(self, third: bool = False):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.c3 = nn.Conv2d(8, 4, 1) if third else None

    def forward(self, x):
        y = torch.cumsum(torch.relu(self.c1(x)), dim=-1)
        y = torch.relu(self.c2(y))
        if self.c3 is not None:
            y = self.c3(torch.sort(y, dim=1).values)
        return y


class LeakyAndConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return nn.functional.leaky_relu(x), self.c(x)


class ConvAndInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return self.c(x), x


class InputsOnlyHostOpsRead(nn.Module):
    """Input `y` is read only by a host op after an NPU region, `z` is returned as it is, `w` is
    not read at all: the caller still passes all four."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x, y, z, w):
        return torch.maximum(self.c(x), y), z


def _model(cls, *args):
    torch.manual_seed(0)
    return cls(*args).eval()


@pytest.mark.parametrize("third", [False, True])
def test_host_op_in_the_middle_gives_several_npu_regions(third):
    model = _model(ConvHostConv, third)
    qm = tessel.quantize(model, (X,), calibration_data=CALIB)
    part = partition(qm.graph)
    regions = 3 if third else 2
    assert len(part.regions) == regions and len(part.hosts) == regions + 1
    assert not part.moved_to_host  # nothing after the host op is sent to the host
    summary = summarize(qm.graph, part)
    assert summary.regions == regions and summary.npu_macs == summary.total_macs > 0
    host = summary.by_reason[HostReason.UNSUPPORTED_OP]
    assert "aten.cumsum.default" in host and (("aten.sort.default" in host) == third)
    cm = tessel.compile(model, (X,), calibration_data=CALIB)
    assert len(cm.program.metadata["npu_regions"]) == regions
    assert cm.binary[4:8] == b"\x01\x00\x01\x00"  # format 1.1: several regions
    again = CompiledModel.from_bytes(cm.binary)
    for x in (X, CALIB[1][0]):
        want = qm.run(x)
        assert all(np.array_equal(a, b) for a, b in zip(cm.run(x), want, strict=True))
        assert all(np.array_equal(a, b) for a, b in zip(again.run(x), want, strict=True))
    prof = again.profile
    assert prof.regions == regions and f"in {regions} regions" in prof.summary()
    assert prof.macs == summary.total_macs and prof.cycles > 0


@pytest.mark.parametrize("cls", [LeakyAndConv, ConvAndInput])
def test_multi_output_graphs_pass_values_through(cls):
    model = _model(cls)
    qm = tessel.quantize(model, (X,), calibration_data=CALIB)
    cm = tessel.compile(model, (X,), calibration_data=CALIB)
    got, want = cm.run(X), qm.run(X)
    assert len(got) == 2
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    with torch.no_grad():
        ref = model(X)
    for a, r in zip(got, ref, strict=True):
        assert np.abs(a - r.numpy()).max() < 0.1  # int8 accuracy of the float outputs


def test_single_region_files_stay_format_1_0():
    cm = tessel.compile(_model(LeakyAndConv), (X,), calibration_data=CALIB)
    assert "npu_regions" not in cm.program.metadata
    assert cm.binary[4:8] == b"\x01\x00\x00\x00"


def test_malformed_regions_are_format_errors():
    import dataclasses

    cm = tessel.compile(_model(ConvHostConv), (X,), calibration_data=CALIB)
    meta = dict(cm.program.metadata)
    bad = [dict(r) for r in meta["npu_regions"]]
    bad[0] = {**bad[0], "ends": {k: 10**6 for k in bad[0]["ends"]}}
    program = dataclasses.replace(read_tsl(cm.binary), metadata={**meta, "npu_regions": bad})
    with pytest.raises(TesselFormatError, match="npu_regions"):
        CompiledModel(program, cm.arch).run(X)


def test_no_fallback_lists_each_host_op_once_with_reason():
    qm = tessel.quantize(_model(ConvHostConv, True), (X,), calibration_data=CALIB)
    with pytest.raises(TesselCompileError) as info:
        partition(qm.graph, no_fallback=True)
    text = str(info.value)
    assert text.count("aten.cumsum.default") == 1 and text.count("aten.sort.default") == 1
    assert "unsupported op at" in text and "test_partition_regions.py" in text
    assert "compile without --no-fallback" in text


def test_compile_prints_the_fallback_summary(tmp_path, capsys):
    path = tmp_path / "m.py"
    path.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)\n"
        "        self.b = torch.nn.Conv2d(8, 8, 3, padding=1)\n"
        "    def forward(self, x):\n"
        "        return self.b(torch.cumsum(self.a(x), dim=-1))\n"
        "def make():\n"
        "    torch.manual_seed(0)\n"
        "    return M().eval(), (torch.randn(1, 3, 8, 8),)\n")
    out = tmp_path / "m.tsl"
    assert main(["compile", f"{path}:make", "-o", str(out), "--calibration", "1"]) == 0
    text = capsys.readouterr().out
    assert re.search(r"NPU: \d+ of \d+ ops, 100\.0 % of MACs, in 2 regions", text), text
    assert "unsupported op 1 (aten.cumsum.default)" in text
    assert main(["profile", str(out)]) == 0
    assert "in 2 regions" in capsys.readouterr().out
    assert main(["run", str(out), "--check", "--json"]) == 0
    assert '"bit_exact": true' in capsys.readouterr().out


def test_inputs_that_only_host_parts_read_are_model_inputs_of_the_binary():
    model = _model(InputsOnlyHostOpsRead)
    g = torch.Generator().manual_seed(3)
    xs = tuple(torch.randn(1, 3, 8, 8, generator=g) for _ in range(4))
    qm = tessel.quantize(model, xs, calibration_data=[xs])
    cm = CompiledModel.from_bytes(tessel.compile(model, xs, calibration_data=[xs]).binary)
    assert cm.input_names == ["x", "y", "z", "w"]
    prologue = [v.name for v in cm.prologue.inputs]
    assert {"y", "z", "w"} <= set(prologue)  # declared by the prologue, handed on
    got, want = cm.run(*xs), qm.run(*xs)
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    assert np.array_equal(got[1], xs[2].numpy())


class ConvThenConv3d(nn.Module):
    """conv (NPU) -> a 3-D conv over the channels (no NPU lowering: a host op with MACs)."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 8, 3, padding=1)
        self.c3 = nn.Conv3d(1, 2, 3, padding=1)

    def forward(self, x):
        return self.c3(self.c(x).unsqueeze(1))


def test_host_op_macs_count_and_every_host_op_says_why():
    model = _model(ConvThenConv3d)
    cm = tessel.compile(model, (X,), calibration_data=CALIB)
    fb = cm.program.metadata["fallback"]
    conv2d, conv3d = 8 * 3 * 9 * 64, 2 * 27 * 8 * 64  # MACs of each (8x8 outputs)
    assert fb["npu_macs"] == conv2d and fb["total_macs"] == conv2d + conv3d
    lines = cm.program.metadata["host_ops"]
    assert lines and all("(host: " in x or "(NPU: " in x for x in lines), lines
    assert any("no NPU lowering for aten.convolution" in x and "cut the model" in x
               for x in lines), lines
    first = cm.profile.summary().splitlines()[0]
    assert f"NPU only: {len(lines)} host (CPU) op" in first and "not included" in first
