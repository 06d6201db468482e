"""Checking the inputs given to a compiled model before it runs (`tessel run --input`):
count, shape, dtype and finite values, each failure one TesselConfigError naming the input.

The model's inputs are the host prologue's inputs (float tensors the prologue quantises) or,
without a prologue, the NPU program's input descriptors (already integer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tessel.errors import TesselConfigError, TesselFormatError

if TYPE_CHECKING:
    from tessel.runtime.compiled import CompiledModel

_BINARY_NUMPY = {"INT8": np.int8, "UINT8": np.uint8, "INT16": np.int16, "INT32": np.int32,
                 "FLOAT16": np.float16, "FLOAT32": np.float32}


@dataclass(frozen=True)
class InputSpec:
    """What one model input must be."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    def __str__(self) -> str:
        return f"{self.name}: {list(self.shape)} {self.dtype}"


def input_specs(cm: CompiledModel) -> list[InputSpec]:
    """The model's inputs in order, from the prologue graph or the program's descriptors."""
    prologue = {v.name: v.type for v in cm.prologue.inputs} if cm.prologue is not None else {}
    descs = {d.name: d for d in cm.program.inputs}
    specs = []
    for name in cm.input_names:
        if name in prologue:
            t = prologue[name]
            specs.append(InputSpec(name, tuple(t.shape), np.dtype(t.dtype.numpy)))
        elif name in descs:
            d = descs[name]
            specs.append(InputSpec(name, tuple(d.shape), np.dtype(_BINARY_NUMPY[d.dtype.name])))
        else:
            raise TesselFormatError(f"metadata names model input {name!r} but neither the host "
                                    "prologue nor the NPU program has it")
    return specs


def check_inputs(cm: CompiledModel, arrays: list[np.ndarray], *,
                 allow_nonfinite: bool = False, batch: bool = False) -> list[np.ndarray]:
    """The arrays cast to the model's input dtypes; raises TesselConfigError naming the input
    whose count, shape, dtype or values (NaN / inf, integer range) are wrong. ``batch``: every
    array has one more leading axis, the same number of samples in each."""
    specs = input_specs(cm)
    if len(arrays) != len(specs):
        raise TesselConfigError(f"the model takes {len(specs)} input(s) "
                                f"({'; '.join(map(str, specs))}), got {len(arrays)}")
    arrays = [np.asarray(a) for a in arrays]
    lead: tuple[int, ...] = ()
    if batch:
        for i, (spec, a) in enumerate(zip(specs, arrays, strict=True)):
            if a.ndim != len(spec.shape) + 1:
                raise TesselConfigError(
                    f"input {i + 1} ({spec.name}) has shape {list(a.shape)}; a batch of it "
                    f"must be [N, {', '.join(map(str, spec.shape))}]")
        lead = (arrays[0].shape[0],) if arrays else ()
    return [_check_one(spec, a, i, allow_nonfinite, lead)
            for i, (spec, a) in enumerate(zip(specs, arrays, strict=True))]


def _check_one(spec: InputSpec, a: np.ndarray, index: int, allow_nonfinite: bool,
               lead: tuple[int, ...] = ()) -> np.ndarray:
    where = f"input {index + 1} ({spec.name})"
    if tuple(a.shape) != lead + spec.shape:
        raise TesselConfigError(f"{where} has shape {list(a.shape)}, the model expects "
                                f"{list(lead + spec.shape)}"
                                + (" (N samples, as the first input has)" if lead else ""))
    if a.dtype.kind not in "biuf" or (spec.dtype.kind in "iu" and a.dtype.kind == "f"):
        raise TesselConfigError(f"{where} has dtype {a.dtype}, the model expects {spec.dtype}")
    if a.dtype.kind == "f" and not allow_nonfinite:
        bad = ~np.isfinite(a)
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            raise TesselConfigError(
                f"{where} has {int(np.isnan(a).sum())} NaN and {int(np.isinf(a).sum())} "
                f"infinite value(s) (first at index {list(first)}); quantised int8 cannot "
                "represent them (--allow-nonfinite runs them anyway)")
        if spec.dtype.kind == "f" and a.dtype.itemsize > spec.dtype.itemsize and a.size:
            top = float(np.finfo(spec.dtype).max)
            over = np.abs(a) > top
            if over.any():  # finite here, infinite once cast to the model's dtype
                first = tuple(int(i) for i in np.argwhere(over)[0])
                raise TesselConfigError(
                    f"{where} has {int(over.sum())} value(s) beyond the {spec.dtype} range "
                    f"+-{top:.4g} (first at index {list(first)}): they would become infinite")
    if spec.dtype.kind in "iu":
        info = np.iinfo(spec.dtype)
        if a.size and (a.min() < info.min or a.max() > info.max):
            raise TesselConfigError(f"{where} has values outside the {spec.dtype} range "
                                    f"[{info.min}, {info.max}]")
    with np.errstate(over="ignore"):  # allow_nonfinite: beyond the dtype's range is +-inf
        return a.astype(spec.dtype, copy=False)
