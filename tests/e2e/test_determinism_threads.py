"""Byte-identical binaries whatever the thread count and PYTHONHASHSEED.

Each compile runs in a fresh interpreter: torch intra-op threads 1, 2 or the default, BLAS /
OpenMP thread variables set or not, and a different hash seed.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import sys, torch
threads = int(sys.argv[2])
if threads:
    torch.set_num_threads(threads)
import tessel
torch.manual_seed(0)
net = torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
    torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10)).eval()
with torch.no_grad():  # non-trivial batch-norm statistics
    net[1].running_mean.uniform_(-1, 1); net[1].running_var.uniform_(0.5, 2)
g = torch.Generator().manual_seed(1)
data = [(torch.randn(1, 3, 32, 32, generator=g),) for _ in range(8)]
cm = tessel.compile(net, data[0], target="tnpu-s", calibration_data=data,
                    options=tessel.arch.CompileOptions(calibration_samples=8), name="net")
cm.save(sys.argv[1])
"""


@pytest.mark.slow
def test_binary_identical_across_threads_and_hash_seeds(tmp_path: Path):
    runs = [("1", 1, {"OMP_NUM_THREADS": "1"}), ("2", 2, {}), ("default", 0, {}),
            ("default-seed", 0, {"OMP_NUM_THREADS": "2", "OPENBLAS_NUM_THREADS": "2"})]
    digests = {}
    for i, (label, threads, extra) in enumerate(runs):
        env = {k: v for k, v in os.environ.items()
               if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
        env.update(extra, PYTHONHASHSEED=str(1000 + 17 * i))
        out = tmp_path / f"{label}.tsl"
        subprocess.run([sys.executable, "-c", SCRIPT, str(out), str(threads)], env=env,
                       check=True, capture_output=True)
        digests[label] = hashlib.sha256(out.read_bytes()).hexdigest()
    assert len(set(digests.values())) == 1, digests


ZOO_SCRIPT = """
import hashlib, sys, torch
torch.set_num_threads(int(sys.argv[1]))
from tessel.models import resolve
spec = resolve("vit_small")
model, inputs = spec.factory()
h = hashlib.sha256()
for key, value in model.state_dict().items():
    h.update(key.encode()); h.update(value.detach().numpy().tobytes())
for sample in [inputs, *spec.calibration_data(2)]:
    for x in sample:
        h.update(x.numpy().tobytes())
assert torch.get_num_threads() == int(sys.argv[1])  # the caller's setting is restored
print(h.hexdigest())
"""


@pytest.mark.slow
def test_zoo_weights_and_data_identical_across_threads():
    """The zoo's synthetic weights, example inputs and calibration images are float
    computations: built on one thread whatever the caller's setting (they differed in the last
    bits between 1 and 2 threads before, and so did the binaries of MobileNetV2, ResNet-18 and
    ViT)."""
    digests = {subprocess.run([sys.executable, "-c", ZOO_SCRIPT, str(t)], check=True,
                              capture_output=True, text=True).stdout.split()[-1]
               for t in (1, 2)}
    assert len(digests) == 1, digests
