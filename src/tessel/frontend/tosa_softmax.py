"""The TOSA importer's reading of `tosa-converter-for-tflite`'s int8 softmax: the forty-odd int32
operators from REDUCE_MAX to the RESCALE to int8 (tessel.ops.softmax_tosa describes them) import
as one `qsoftmax_tosa`.

The chain is matched operator by operator against `TEMPLATE` (constants skipped): the same
operators in the same order, each operand the template's (an earlier step's result, the
centred int8 input, or a constant of the expected value); the four TABLEs' 513-entry tables are
read from the file and evaluated into the op's int32 exponential table, and the output RESCALE's
zero point becomes the op's. A difference anywhere, or an intermediate read outside the chain, is
a TesselFormatError naming the operator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from tessel.errors import TesselFormatError
from tessel.frontend.tosa_chains import SOFTMAX_TOSA_CHAIN as TEMPLATE
from tessel.frontend.tosa_chains import SOFTMAX_TOSA_TABLE_SHIFTS as _TABLE_SHIFTS
from tessel.frontend.tosa_chains import SOFTMAX_TOSA_X as X
from tessel.frontend.tosa_patterns import _Centred
from tessel.frontend.tosa_planned import refuse_leaks
from tessel.frontend.tosa_schema import DType as T
from tessel.frontend.tosa_schema import Operator, RoundingMode, TosaOp
from tessel.ir import DType, Op
from tessel.ir.builder import sanitize_name
from tessel.isa.fields import LutMode
from tessel.ops import softmax_tosa as st

if TYPE_CHECKING:
    from tessel.frontend.tosa_import import _Importer

_CONSTS = (TosaOp.CONST, TosaOp.CONST_SHAPE)


def import_softmax(im: _Importer, first: Operator, k: int) -> None:
    """The chain from the REDUCE_MAX at `k` as one `qsoftmax_tosa` (the REDUCE_MAX must read
    an int8 value centred to int32: the chain's first step)."""
    what = f"REDUCE_MAX %{first.outputs[0]}"
    x_name = first.inputs[0]
    c = im.values.get(x_name)
    if not (isinstance(c, _Centred) and not c.ls and im.b.type_of(c.src).dtype is DType.I8):
        raise TesselFormatError(f"TOSA {what}: imported as the converter's int8 softmax only "
                                "(REDUCE_MAX of an int8 tensor rescaled to int32)")
    run = _run(im.g.operators, k, len(TEMPLATE), what)
    located = [im.g.operators[j] for j in run]
    tables, out_zp = _match(im, located, x_name, what)
    out = located[-1].outputs[0]
    rank = len(im.b.type_of(c.src).shape)
    out_t = im.g.tensors.get(out)
    axes = {first.attrs.get("axis"), located[15].attrs.get("axis")}  # REDUCE_MAX, REDUCE_SUM
    if axes != {rank - 1} or out_t is None or out_t.dtype is not T.INT8:
        raise TesselFormatError(f"TOSA {what}: a softmax over the last axis to int8 only")
    refuse_leaks(im, located, out, what, "softmax")
    e = st.exp_table(tables, _TABLE_SHIFTS)
    if e.min() < 0 or e.max() > np.iinfo(np.int32).max:
        raise TesselFormatError(f"TOSA {what}: the softmax's exponentials leave int32")
    table = im.b.constant(e.astype(np.int32), sanitize_name(f"{out}_exp"))
    im.add(located[-1], Op.QSOFTMAX_TOSA, [c.src, table],
           {"axis": rank - 1, "dtype": DType.I8, "out_zp": out_zp, "act_min": -128,
            "act_max": 127})
    im.skip.update(run)


def _run(ops: Sequence[Operator], k: int, n: int, what: str) -> list[int]:
    run = [j for j in range(k, len(ops)) if ops[j].op not in _CONSTS][:n]
    if len(run) != n:
        raise TesselFormatError(f"TOSA {what}: the graph ends inside the softmax chain")
    return run


def _match(im: _Importer, located: Sequence[Operator], x: str, what: str
           ) -> tuple[list[np.ndarray], int]:
    """The file's four exp tables and output zero point, once every step matches."""
    results: list[str] = []
    tables: list[np.ndarray] = []
    out_zp = 0
    for i, ((op, operands), f) in enumerate(zip(TEMPLATE, located, strict=True)):
        where = f"TOSA {what}: softmax step {i} ({f.op.name} %{f.outputs[0]})"
        if f.op is not op or len(f.inputs) != len(operands) or not _attrs_ok(f):
            raise TesselFormatError(f"{where}: not the converter's softmax (expected {op.name})")
        for want, got in zip(operands, f.inputs, strict=True):
            if isinstance(want, int) or want == X:
                if got != (x if want == X else results[want]):  # type: ignore[index]
                    raise TesselFormatError(f"{where}: reads %{got} where the chain does not")
                continue
            kind, v = want  # type: ignore[misc]
            arr = im.const(got, where)
            if kind == "t":
                n = LutMode.I16_513.entries  # TOSA's int16 TABLE has the shape of this LUT mode
                if arr.shape != (n,) or im.g.tensors[got].dtype is not T.INT16:
                    raise TesselFormatError(f"{where}: an int16 table of {n} entries expected")
                tables.append(arr.astype(np.int64))
            elif arr.size != 1 or (kind == "c" and int(arr.reshape(-1)[0]) != v):
                raise TesselFormatError(f"{where}: constant %{got} is not the chain's {v}")
            elif kind == "zp":
                out_zp = int(arr.reshape(-1)[0])
        results.append(f.outputs[0])
    return tables, out_zp


def _attrs_ok(f: Operator) -> bool:
    if f.op is TosaOp.ARITHMETIC_RIGHT_SHIFT:
        return bool(f.attrs.get("round"))
    if f.op is TosaOp.RESCALE:
        a = f.attrs
        return (a.get("rounding_mode") in (RoundingMode.SINGLE_ROUND, RoundingMode.DOUBLE_ROUND)
                and a.get("scale32", True)
                and not a.get("per_channel") and not a.get("input_unsigned")
                and not a.get("output_unsigned"))
    return True
