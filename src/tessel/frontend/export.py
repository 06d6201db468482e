"""torch.export front half: refuse training-mode models, export non-strict, decompose to core ATen.

The decomposition table is torch's default core-ATen table minus the ops Tessel imports whole
(`KEEP_WHOLE`), so convolutions, linear layers, norms, attention and the activations the NPU has
LUTs for reach the importer as one node each instead of a pile of primitive ops.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import sys
import traceback
from collections.abc import Iterator

import torch
from torch import nn

from tessel.errors import TesselError, TesselExportError
from tessel.frontend.model_input import as_module

_A = torch.ops.aten

KEEP_WHOLE: tuple[torch._ops.OpOverload, ...] = (
    _A.conv1d.default, _A.conv2d.default, _A.conv2d.padding, _A.conv_transpose2d.input,
    _A.linear.default,
    _A.matmul.default, _A.layer_norm.default, _A.scaled_dot_product_attention.default,
    _A.gelu.default, _A.hardswish.default, _A.hardsigmoid.default, _A.silu.default,
    _A.hardtanh.default, _A.upsample_nearest2d.default, _A.upsample_nearest2d.vec,
    _A.upsample_bilinear2d.default, _A.upsample_bilinear2d.vec,
    _A.adaptive_avg_pool2d.default, _A._adaptive_avg_pool2d.default, _A.avg_pool2d.default,
    _A.softmax.int, _A.log_softmax.int,
)
"""Ops left out of the default decomposition table (imported as one IR op each)."""


def decomposition_table() -> dict:
    """torch's default core-ATen decomposition table without the `KEEP_WHOLE` entries."""
    table = torch.export.default_decompositions()
    for op in KEEP_WHOLE:
        table.pop(op, None)
    return table


@functools.cache
def decomposed_ops() -> frozenset:
    """The ops `decomposition_table` rewrites (the keys of its table)."""
    return frozenset(decomposition_table().keys())


def export_program(model: nn.Module | torch.export.ExportedProgram, example_inputs: tuple
                   ) -> torch.export.ExportedProgram:
    """Export `model` (an nn.Module, ExportedProgram or exported GraphModule) non-strict on
    `example_inputs`; decompose to core ATen (whole ops kept)."""
    if not isinstance(example_inputs, tuple):
        raise TesselError(f"example_inputs must be a tuple, got {type(example_inputs).__name__}")
    model = as_module(model)
    with torch.no_grad(), exporting(model):
        program = torch.export.export(model, example_inputs, strict=False)
        return program.run_decompositions(decomposition_table())


@contextlib.contextmanager
def exporting(model: nn.Module, what: str = "torch.export") -> Iterator[None]:
    """Run a torch.export step quietly: torch's own error logging is muted (and what it prints
    to stderr is shown only if the export succeeds), and any exception other than a TesselError
    becomes one TesselExportError with torch's first useful line and the user's source line
    (instead of torch's 200-line report)."""
    loggers = [logging.getLogger(n) for n in list(logging.root.manager.loggerDict)
               if n == "torch" or n.startswith("torch.")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            yield
        sys.stderr.write(captured.getvalue())
    except TesselError:
        raise
    except Exception as exc:  # noqa: BLE001 (whatever torch raises, the user gets one line)
        raise TesselExportError(describe_export_error(exc, type(model).__name__, what, model)
                                ) from exc
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def describe_export_error(exc: BaseException, model: str, what: str = "torch.export",
                          module: nn.Module | None = None) -> str:
    """'torch.export of M failed at file.py:12: <first line> (<hint>)'; a data-dependent step
    is named by its source line, with the split that avoids it."""
    from tessel.frontend.locations import display_path, is_internal

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not is_internal(f.filename)]
    where = f" at {display_path(frames[-1].filename, '.')}:{frames[-1].lineno}" if frames else ""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    first = lines[0] if lines else type(exc).__name__
    if len(first) > 240:
        first = first[:240] + " ..."
    name = type(exc).__name__
    if "DataDependent" in name or "data-dependent" in first:
        step = f"`{frames[-1].line.strip()}`: " if frames and frames[-1].line else ""
        hint = (f"{step}the model's control flow or a shape depends on tensor values, which "
                "torch.export cannot trace; make loops and branches depend on shapes or "
                "constants only, or split the model before this step" + _split_hint(exc, module))
    else:
        hint = "check that the example inputs have the shapes and dtypes the model expects"
    return f"{what} of {model} failed{where}: {name}: {first} ({hint})"


def _split_hint(exc: BaseException, model: nn.Module | None) -> str:
    """': compile <parts> and run the rest in PyTorch', naming the submodules of the module
    whose forward holds the failing line ("" when it cannot be found)."""
    if model is None:
        return ""
    from tessel.frontend.locations import is_internal

    # torch clears the frames' locals: the module is found by its forward's code object
    codes = [tb.tb_frame.f_code for tb in _tracebacks(exc)
             if not is_internal(tb.tb_frame.f_code.co_filename)]
    owners = [(p, m) for p, m in model.named_modules()
              if getattr(type(m).forward, "__code__", None) in codes]
    if not owners:
        return ""
    base, owner = max(owners, key=lambda pm: codes.index(type(pm[1]).forward.__code__))
    children = [f"{base + '.' if base else ''}{name}" for name, _ in owner.named_children()]
    if not children:
        return ""
    return (f" (e.g. compile {', '.join(children[:4])} on its own and run the data-dependent "
            "part, such as NMS, in PyTorch: `tessel compile --until MODULE`, tessel.cut)")


def _tracebacks(exc: BaseException) -> list:
    out, tb = [], exc.__traceback__
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out
