"""A model torch.export cannot trace (a shape that depends on tensor values, as in NMS): the
error names the step by its source line and suggests the split, naming the submodules of the
module whose forward holds it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tessel.errors import TesselExportError
from tessel.frontend import import_model


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


class Detector(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = Backbone()
        self.head = nn.Conv2d(4, 2, 1)

    def forward(self, x):
        scores = self.head(self.backbone(x)).flatten()
        kept = int((scores > 0).sum())  # data-dependent: how many boxes survive
        return scores[:kept]


def test_data_dependent_step_is_named_with_the_split():
    with pytest.raises(TesselExportError) as info:
        import_model(Detector().eval(), (torch.randn(1, 3, 8, 8),))
    text = str(info.value)
    assert "test_export_errors.py:32" in text and "`kept = int((scores > 0).sum())" in text
    assert "split the model before this step" in text
    assert "compile backbone, head on its own" in text
