"""The TOSA importer's reading of `tosa-converter-for-tflite`'s softmax: the int32 operators from
REDUCE_MAX to the closing RESCALE import as one `qsoftmax_tosa` (int8: forty-odd operators,
CLZ and Newton-Raphson steps) or `qsoftmax16_tosa` (int16: an exp and a reciprocal TABLE);
tessel.ops.softmax_tosa describes and computes both.

The chain is matched operator by operator against its template (`tosa_converter_chains`, which
the exporter writes too): the same operators in the same order, each result of the template's
type, each operand the template's (an earlier step's result, the centred input, or a constant
of the expected value); the int16 tables are read from the file (the int8 chain's four evaluated
into the op's int32 exponential table), and the input scale's RESCALE (int16) and the output
zero point become the op's attributes. A difference anywhere, or an intermediate read outside
the chain, is a TesselFormatError naming the operator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from tessel.errors import TesselFormatError
from tessel.frontend.tosa_converter_chains import (
    INT8_SOFTMAX,
    INT16_SOFTMAX,
    TABLE_SHIFTS,
    ConverterChain,
    X,
)
from tessel.frontend.tosa_patterns import _Centred
from tessel.frontend.tosa_planned import refuse_leaks
from tessel.frontend.tosa_schema import DType as T
from tessel.frontend.tosa_schema import Operator, RoundingMode, TosaOp
from tessel.ir import DType, Op
from tessel.ir.builder import sanitize_name
from tessel.isa.fields import LutMode
from tessel.isa.fixedpoint import Rounding
from tessel.ops import softmax_tosa as st

if TYPE_CHECKING:
    from tessel.frontend.tosa_import import _Importer

_CONSTS = (TosaOp.CONST, TosaOp.CONST_SHAPE)
TEMPLATE = INT8_SOFTMAX.steps


def import_softmax(im: _Importer, first: Operator, k: int) -> None:
    """The chain from the REDUCE_MAX at `k` as one `qsoftmax_tosa` / `qsoftmax16_tosa` (the
    REDUCE_MAX must read an int8 / int16 value centred to int32: the chain's first step)."""
    what = f"REDUCE_MAX %{first.outputs[0]}"
    x_name = first.inputs[0]
    c = im.values.get(x_name)
    if not (isinstance(c, _Centred) and not c.ls
            and im.b.type_of(c.src).dtype in (DType.I8, DType.I16)):
        raise TesselFormatError(f"TOSA {what}: a REDUCE_MAX is imported as the start of the "
                                "converter's int8 or int16 softmax only (REDUCE_MAX of an int8 "
                                "or int16 tensor rescaled to int32); compile the model this "
                                "TOSA graph was legalised from instead")
    dtype = im.b.type_of(c.src).dtype
    chain = INT8_SOFTMAX if dtype is DType.I8 else INT16_SOFTMAX
    run = _run(im.g.operators, k, len(chain.steps), what)
    located = [im.g.operators[j] for j in run]
    tables, params = _match(im, chain, located, x_name, what)
    out = located[-1].outputs[0]
    rank = len(im.b.type_of(c.src).shape)
    reduce_sum = next(f for f, (op, _) in zip(located, chain.steps, strict=True)
                      if op is TosaOp.REDUCE_SUM)
    if {first.attrs.get("axis"), reduce_sum.attrs.get("axis")} != {rank - 1}:
        raise TesselFormatError(f"TOSA {what}: a softmax over the last axis only")
    refuse_leaks(im, located, out, what, "softmax")
    lo, hi = dtype.bounds
    attrs = {"axis": rank - 1, "dtype": dtype, "out_zp": params.pop("zp"), "act_min": lo,
             "act_max": hi}
    if dtype is DType.I8:
        kind, ins = Op.QSOFTMAX_TOSA, [_exp_table(im, tables, out, what)]
    else:
        kind, ins = Op.QSOFTMAX16_TOSA, _int16_tables(im, tables, params, out, what)
        attrs.update(params)
    im.add(located[-1], kind, [c.src, *ins], attrs)
    im.skip.update(run)


def _exp_table(im: _Importer, tables: list[np.ndarray], out: str, what: str) -> str:
    """The int8 chain's four int16 TABLEs as `qsoftmax_tosa`'s int32 exp table."""
    e = st.exp_table(tables, TABLE_SHIFTS)
    if e.min() < 0 or e.max() > np.iinfo(np.int32).max:
        raise TesselFormatError(f"TOSA {what}: the softmax's exponentials leave int32")
    return im.b.constant(e.astype(np.int32), sanitize_name(f"{out}_exp"))


def _int16_tables(im: _Importer, tables: list[np.ndarray], params: dict[str, int], out: str,
                  what: str) -> list[str]:
    """The int16 chain's exp and reciprocal tables, once its input RESCALE is one TOSA allows."""
    if not 2 <= params["d_shift"] <= 62 or params["d_multiplier"] < 0:
        raise TesselFormatError(f"TOSA {what}: the softmax's input RESCALE has multiplier "
                                f"{params['d_multiplier']}, shift {params['d_shift']}")
    return [im.b.constant(t.astype(np.int16), sanitize_name(f"{out}_{name}"))
            for t, name in zip(tables, ("exp", "recip"), strict=True)]


def _run(ops: Sequence[Operator], k: int, n: int, what: str) -> list[int]:
    run = [j for j in range(k, len(ops)) if ops[j].op not in _CONSTS][:n]
    if len(run) != n:
        raise TesselFormatError(f"TOSA {what}: the graph ends inside the softmax chain")
    return run


def _match(im: _Importer, chain: ConverterChain, located: Sequence[Operator], x: str,
           what: str) -> tuple[list[np.ndarray], dict[str, int]]:
    """The file's int16 tables and the op's parameters (output zero point, the input scale's
    multiplier, shift and rounding), once every step matches."""
    results: list[str] = []
    tables: list[np.ndarray] = []
    params: dict[str, int] = {"zp": 0}
    for i, ((op, operands), f) in enumerate(zip(chain.steps, located, strict=True)):
        where = f"TOSA {what}: softmax step {i} ({f.op.name} %{f.outputs[0]})"
        out_t = im.g.tensors.get(f.outputs[0])
        if f.op is not op or len(f.inputs) != len(operands) or not _attrs_ok(f):
            raise TesselFormatError(f"{where}: not the converter's softmax (expected {op.name})")
        if out_t is None or out_t.dtype is not chain.dtypes[i]:
            raise TesselFormatError(f"{where}: not the converter's softmax (expected a "
                                    f"{chain.dtypes[i].name} result)")
        for want, got in zip(operands, f.inputs, strict=True):
            if isinstance(want, int) or want == X:
                if got != (x if want == X else results[want]):  # type: ignore[index]
                    raise TesselFormatError(f"{where}: reads %{got} where the chain does not")
                continue
            _operand(im, want, got, where, tables, params)
        if any(isinstance(w, tuple) and w[0] == "p" for w in operands):
            params["d_rounding"] = int(Rounding.DOUBLE if f.attrs["rounding_mode"]
                                       == RoundingMode.DOUBLE_ROUND else Rounding.SINGLE)
        results.append(f.outputs[0])
    return tables, params


def _operand(im: _Importer, want: object, got: str, where: str, tables: list[np.ndarray],
             params: dict[str, int]) -> None:
    kind, v = cast(tuple[str, Any], want)
    arr = im.const(got, where)
    if kind == "t":
        n = LutMode.I16_513.entries  # TOSA's int16 TABLE has the shape of this LUT mode
        if arr.shape != (n,) or im.g.tensors[got].dtype is not T.INT16:
            raise TesselFormatError(f"{where}: an int16 table of {n} entries expected")
        tables.append(arr.astype(np.int64))
    elif arr.size != 1 or (kind == "c" and int(arr.reshape(-1)[0]) != v):
        raise TesselFormatError(f"{where}: constant %{got} is not the chain's {v}")
    elif kind in ("zp", "p"):
        params["zp" if kind == "zp" else v] = int(arr.reshape(-1)[0])


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
