"""No code runs from a data file (docs/reliability.md "Data files are parsed, never run"): a
`.pt2` whose sample inputs, weights or constants hold a pickle that calls `os.system` is
refused, with the reason, and the payload never runs (through the API and `tessel compile`);
a `.npy` / `.npz` holding a pickled object is refused by `run --input`, `--inputs` and
`--calibration-data` without running it. A plain `.pt2` still loads and compiles."""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from tessel.cli import main
from tessel.errors import TesselConfigError
from tessel.frontend.pt2 import load_pt2


class Payload:
    """Unpickling it runs `touch <marker>`."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("pt2") / "good.pt2"
    torch.export.save(torch.export.export(Lin().eval(), (torch.randn(1, 4),)), path)
    return path


def _rewrite(good: Path, out: Path, edit) -> Path:
    """A copy of the archive `good` with edit(member name, bytes) -> bytes applied to each
    member (and extra members from edit(None, b'') -> {name: bytes})."""
    with zipfile.ZipFile(good) as zin, zipfile.ZipFile(out, "w") as zout:
        names = zin.namelist()
        for n in names:
            zout.writestr(n, edit(n, zin.read(n)))
        prefix = names[0].split("/")[0]
        for n, data in (edit(None, b"") or {}).items():
            zout.writestr(f"{prefix}/{n}", data)
    return out


def _saved(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _sample_inputs(marker, raw):
    payload = pickle.dumps(Payload(marker)) if raw else _saved((Payload(marker),))
    return lambda n, b: (None if n is None else payload if "sample_inputs" in n else b)


def _pickled_weight(marker):
    def edit(n, b):
        if n is None:
            return None
        if n.endswith("model_weights_config.json"):
            config = json.loads(b)
            config["config"]["fc.weight"]["use_pickle"] = True
            return json.dumps(config).encode()
        return _saved(Payload(marker)) if n.endswith("weights/weight_0") else b
    return edit


def _constant(marker, prefix):
    def edit(n, b):
        if n is None:
            return {f"data/constants/{prefix}0": pickle.dumps(Payload(marker))}
        if n.endswith("model_constants_config.json"):
            return json.dumps({"config": {"obj": {
                "path_name": f"{prefix}0", "is_param": False, "use_pickle": True,
                "tensor_meta": None}}}).encode()
        return b
    return edit


VARIANTS = {
    "sample inputs, torch.save format": lambda m: _sample_inputs(m, raw=False),
    "sample inputs, raw pickle": lambda m: _sample_inputs(m, raw=True),
    "a weight marked as pickled": _pickled_weight,
    "an opaque constant": lambda m: _constant(m, "opaque_obj_"),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_malicious_pt2_is_refused_and_nothing_runs(good, tmp_path, variant, capsys):
    marker = tmp_path / "PAYLOAD_RAN"
    evil = _rewrite(good, tmp_path / "evil.pt2", VARIANTS[variant](marker))
    with pytest.raises(TesselConfigError, match="refused") as info:
        load_pt2(evil)
    assert "weights-only" in str(info.value) and not marker.exists()
    out = tmp_path / "evil.tsl"
    assert main(["compile", str(evil), "-o", str(out), "--calibration", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "refused" in err[0], err  # one line, no logged traceback
    assert not marker.exists() and not out.exists()


def test_a_pickle_payload_anywhere_in_the_archive_names_what_it_calls(good, tmp_path):
    marker = tmp_path / "PAYLOAD_RAN"
    evil = _rewrite(good, tmp_path / "evil.pt2", _sample_inputs(marker, raw=False))
    with pytest.raises(TesselConfigError, match=r"posix\.system|os\.system"):
        load_pt2(evil)


def test_a_plain_pt2_loads_and_compiles(good, tmp_path):
    program = load_pt2(good)
    x = torch.randn(1, 4)
    assert torch.equal(program.module()(x), program.module()(x))
    assert torch.load is not None and torch.load.__module__ == "torch.serialization"  # restored
    assert main(["compile", str(good), "-o", str(tmp_path / "g.tsl"), "--calibration", "1"]) == 0


def test_oversized_archives_are_refused_before_loading(tmp_path, monkeypatch):
    import tessel.frontend.pt2 as pt2

    path = tmp_path / "big.pt2"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("m/data/weights/weight_0", bytes(1 << 20))  # 1 MiB of zeros, ~1 KiB stored
    monkeypatch.setattr(pt2, "MAX_PT2_BYTES", 1 << 19)
    with pytest.raises(TesselConfigError, match="inflates to 1048576 bytes"):
        load_pt2(path)


@pytest.fixture(scope="module")
def binary(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("npy")
    (d / "m.py").write_text(
        "import torch\n"
        "def make():\n"
        "    torch.manual_seed(0)\n"
        "    return torch.nn.Linear(4, 2).eval(), (torch.randn(1, 4),)\n")
    assert main(["compile", f"{d}/m.py:make", "-o", str(d / "m.tsl"), "--calibration", "1"]) == 0
    return d


def _object_array(marker: Path) -> np.ndarray:
    a = np.empty((1, 4), dtype=object)
    a[0, 0] = Payload(marker)
    return a


@pytest.mark.parametrize("how", ["run --input .npy", "compile --inputs .npz",
                                 "compile --calibration-data .npy"])
def test_malicious_npy_is_refused_and_nothing_runs(binary, tmp_path, how, capsys):
    marker = tmp_path / "PAYLOAD_RAN"
    evil = tmp_path / ("evil.npz" if how.endswith(".npz") else "evil.npy")
    if evil.suffix == ".npz":
        np.savez(evil, x=_object_array(marker))
    else:
        np.save(evil, _object_array(marker), allow_pickle=True)
    if how.startswith("run"):
        argv = ["run", str(binary / "m.tsl"), "--input", str(evil)]
    else:
        flag = how.split()[1]
        argv = ["compile", f"{binary}/m.py:make", "-o", str(tmp_path / "o.tsl"), flag, str(evil),
                "--calibration", "1"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error" in err[0], err
    assert not marker.exists()
