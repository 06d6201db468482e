"""The Ray path (a local Ray with 2 CPUs) gives the same Pareto set as local processes."""

from __future__ import annotations

import pytest
import torch

from tessel.analysis.explore import explore
from tessel.analysis.explore_space import LatencyAgg
from tessel.models.digits import DigitsCNN
from tessel.quant.api import quantize

ray = pytest.importorskip("ray", reason="the 'ray' package is not installed")

SPACE = {"matrix": {"rows": [8, 16], "cols": [8, 16, 32]}}


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_front_equals_local_front(local_ray, tmp_path):
    torch.manual_seed(0)
    calib = [(torch.rand(1, 1, 8, 8),) for _ in range(2)]
    graphs = {"digits_cnn": quantize(DigitsCNN().eval(), calib[0], calibration_data=calib,
                                     calibration_samples=2).graph}
    local = explore(graphs, SPACE, out=tmp_path / "local", workers=2)
    on_ray = explore(graphs, SPACE, out=tmp_path / "ray", ray="auto")
    assert on_ray.evaluated == 6 and ray.is_initialized()  # the test's Ray was reused
    assert [p.key for p in on_ray.front] == [p.key for p in local.front]
    assert [p.objectives(LatencyAgg.SUM) for p in on_ray.front] == \
        [p.objectives(LatencyAgg.SUM) for p in local.front]
