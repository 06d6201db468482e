"""Writes tests/data/convert_pt2e_golden.json: torchao's results that tests/unit/quant/
test_convert.py checks Tessel against and that take torchao long to produce (it traces its QAT
conv / batch-norm fold patterns for four conv kinds): convert_pt2e on the prepared, calibrated
cases named in the test's GOLDEN_CASES and on its trained QAT module (with the fold passes it
ran and their example inputs' shapes), and the conv1d fold pass alone on that QAT module. Each
entry holds the torch and torchao versions, a fingerprint of the module torchao was given, and
the resulting module's code, nodes, constants and outputs.

The tests fail, saying to run this again, when torch, torchao or that module (TesselQuantizer,
calibration, QAT preparation) differ from the ones recorded.
Run: ``PYTHONPATH=src python tests/data/make_convert_pt2e_golden.py``.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch.nn.functional as F
from torchao.quantization.pt2e import qat_utils
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "quant"))

from test_convert import (  # noqa: E402
    GOLDEN,
    GOLDEN_CASES,
    fingerprint,
    graph_record,
    prepared_case,
    qat_example,
    trained_qat,
    versions,
)

from tessel.quant.pt2e import _fold_example_inputs  # noqa: E402


def _entry(prepared, record: dict, **extra) -> dict:
    return {"versions": versions(), "prepared": fingerprint(prepared), "record": record, **extra}


def qat_convert_pt2e() -> dict:
    """convert_pt2e on the trained QAT module, recording each fold pass it runs."""
    example = qat_example()
    prepared = trained_qat(example)
    helper, passes = qat_utils._fold_conv_bn_qat_helper, []

    def recording_helper(m, conv_fn, example_inputs, is_cuda):
        passes.append([conv_fn.__name__, [list(t.shape) for t in example_inputs]])
        return helper(m, conv_fn, example_inputs, is_cuda=is_cuda)

    qat_utils._fold_conv_bn_qat_helper = recording_helper
    try:
        converted = convert_pt2e(copy.deepcopy(prepared))
    finally:
        qat_utils._fold_conv_bn_qat_helper = helper
    return _entry(prepared, graph_record(converted, example), passes=passes)


def qat_conv1d_fold_pass() -> dict:
    """torchao's conv1d fold pass alone on the trained QAT module (which has no conv1d)."""
    example = qat_example()
    prepared = trained_qat(example)
    folded = qat_utils._fold_conv_bn_qat_helper(copy.deepcopy(prepared), F.conv1d,
                                                _fold_example_inputs(1), is_cuda=False)
    return _entry(prepared, graph_record(folded, example))


def main() -> None:
    golden = {}
    for name in GOLDEN_CASES:
        prepared, example = prepared_case(name)
        golden[name] = _entry(prepared, graph_record(convert_pt2e(copy.deepcopy(prepared)), example))
    golden["qat"] = qat_convert_pt2e()
    golden["qat_conv1d_fold_pass"] = qat_conv1d_fold_pass()
    GOLDEN.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {GOLDEN} ({GOLDEN.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
