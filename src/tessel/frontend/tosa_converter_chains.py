"""`tosa-converter-for-tflite`'s int8 and int16 softmax chains: the one template per chain that
the importer (`tosa_softmax`) checks a file against and the exporter writes `qsoftmax_tosa` /
`qsoftmax16_tosa` back as (tessel.ops.softmax_tosa computes them).

A chain is a list of steps `(TOSA operator, operands)` from the REDUCE_MAX to the RESCALE that
closes it; an operand is an earlier step's result (its index), `X` (the input RESCALEd to int32
in front of the REDUCE_MAX), `("c", v)` a constant `v`, `("t", k)` the k-th int16 table,
`("p", name)` a value of the op's attributes (the input scale's multiplier and shift) and
`("zp", 0)` the output zero point.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from tessel.frontend.tosa_build import DOUBLE_ROUND as EXT_DOUBLE_ROUND
from tessel.frontend.tosa_build import Builder, centred_at, loc_of, numpy_dtype, refuse
from tessel.frontend.tosa_schema import DType as T
from tessel.frontend.tosa_schema import RoundingMode, TosaOp
from tessel.ir import Node
from tessel.isa.fixedpoint import Rounding
from tessel.ops import softmax_tosa as st

X = "x"
Step = tuple[TosaOp, tuple[object, ...]]
TABLE_SHIFTS = (17, 9, 1, 7)  # the int8 chain's four exp-table bytes into e
_ONE_Q30, _SHIFT_TO_I16, _SHIFT_ONE = 1 << 30, 23, 30  # TOSA RESCALE shifts: d * 128, x * 1
_ARS, _LLS = TosaOp.ARITHMETIC_RIGHT_SHIFT, TosaOp.LOGICAL_LEFT_SHIFT


@dataclass(frozen=True)
class ConverterChain:
    """One softmax legalisation: its steps and each step's result type."""

    steps: tuple[Step, ...]
    dtypes: tuple[T, ...]


def _c(v: int) -> tuple[str, int]:
    return ("c", v)


def _int8_chain() -> ConverterChain:
    s: list[Step] = [
        (TosaOp.REDUCE_MAX, (X,)),
        (TosaOp.SUB, (X, 0)),
        (TosaOp.RESCALE, (1, _c(_ONE_Q30), _c(_SHIFT_TO_I16), _c(0), _c(0))),  # d * 128
        *[(TosaOp.TABLE, (2, ("t", k))) for k in range(4)],
        *[(_LLS, (3 + k, _c(TABLE_SHIFTS[k]))) for k in range(3)],
        (_ARS, (6, _c(TABLE_SHIFTS[3]))),
        (TosaOp.ADD, (7, 8)), (TosaOp.ADD, (11, 9)), (TosaOp.ADD, (12, 10)),  # 13: e
        (_ARS, (13, _c(st.SUM_SHIFT))),
        (TosaOp.REDUCE_SUM, (14,)),  # 15: s
        (TosaOp.CLZ, (15,)), (TosaOp.SUB, (16, _c(1))),
        (_LLS, (15, 17)),  # 18: s normalised
        (TosaOp.MUL, (18, _c(st.NR_B), _c(31))), (TosaOp.ADD, (19, _c(st.NR_A))),
    ]
    r = 20
    for _ in range(st.NR_STEPS):
        k = len(s)
        s += [(TosaOp.MUL, (r, 18, _c(31))), (TosaOp.SUB, (_c(st.ONE_S2_29), k)),
              (TosaOp.MUL, (r, k + 1, _c(31))), (TosaOp.MUL, (k + 2, _c(4), _c(0))),
              (TosaOp.ADD, (r, k + 3))]
        r = k + 4
    k = len(s)
    s += [(TosaOp.MUL, (13, r, _c(30))), (TosaOp.SUB, (_c(st.OUT_SHIFT_BASE), 16)),
          (_ARS, (k, k + 1)),
          (TosaOp.RESCALE, (k + 2, _c(_ONE_Q30), _c(_SHIFT_ONE), _c(0), ("zp", 0)))]
    dtypes = [T.INT32] * len(s)
    dtypes[2], dtypes[-1] = T.INT16, T.INT8
    return ConverterChain(tuple(s), tuple(dtypes))


def _int16_chain() -> ConverterChain:
    rnd = st.TABLE_ROUND
    s: list[Step] = [
        (TosaOp.REDUCE_MAX, (X,)),
        (TosaOp.SUB, (X, 0)),  # 1: d
        (TosaOp.RESCALE, (1, ("p", "d_multiplier"), ("p", "d_shift"), _c(0), _c(0))),
        (TosaOp.ADD, (2, _c(st.I16_BIAS))), (TosaOp.CAST, (3,)),
        (TosaOp.TABLE, (4, ("t", 0))), (_ARS, (5, _c(rnd))),  # 6: e
        (TosaOp.REDUCE_SUM, (6,)),  # 7: s
        (TosaOp.CLZ, (7,)), (TosaOp.SUB, (8, _c(1))), (_LLS, (7, 9)),
        (TosaOp.SUB, (10, _c(2 * st.ONE_S2_29))), (_ARS, (11, _c(st.RECIP_SHIFT))),
        (TosaOp.SUB, (12, _c(st.RECIP_OFFSET))), (TosaOp.CAST, (13,)),
        (TosaOp.TABLE, (14, ("t", 1))), (_ARS, (15, _c(rnd))),  # 16: r
        (TosaOp.MUL, (16, 6, _c(0))), (TosaOp.SUB, (_c(st.OUT16_SHIFT_BASE), 8)),
        (_ARS, (17, 18)),
        (TosaOp.RESCALE, (19, _c(_ONE_Q30), _c(_SHIFT_ONE), _c(0), ("zp", 0))),
    ]
    dtypes = [T.INT32] * len(s)
    dtypes[4] = dtypes[14] = dtypes[-1] = T.INT16
    return ConverterChain(tuple(s), tuple(dtypes))


INT8_SOFTMAX = _int8_chain()
INT16_SOFTMAX = _int16_chain()


def qsoftmax_tosa(b: Builder, node: Node) -> None:
    """`qsoftmax_tosa` as the converter's int8 chain: the op's int32 exp table split into the
    four int16 TABLEs (`st.exp_tables`), the output zero point on the last RESCALE."""
    _chain_form(node, -128, 127)
    e = b.graph.constant_value(node.inputs[1])
    if e is None or np.min(e) < 0:
        raise refuse(node, "the exp table must be a constant of non-negative int32 values")
    write(b, node, INT8_SOFTMAX, st.exp_tables(np.asarray(e, np.int64)), {})


def qsoftmax16_tosa(b: Builder, node: Node) -> None:
    """`qsoftmax16_tosa` as the converter's int16 chain: its exp and reciprocal TABLEs, the
    input scale's RESCALE (rounding as the op's `d_rounding`)."""
    _chain_form(node, -32768, 32767)
    tables = [b.graph.constant_value(n) for n in node.inputs[1:]]
    if any(t is None for t in tables):
        raise refuse(node, "the tables must be constants")
    write(b, node, INT16_SOFTMAX, [np.asarray(t, np.int16) for t in tables], node.attr_map)


def _chain_form(node: Node, lo: int, hi: int) -> None:
    a = node.attr_map
    rank = len(node.type.shape)
    if a["axis"] % rank != rank - 1:
        raise refuse(node, f"a softmax over axis {a['axis']} (the converter's chain reduces the "
                           "last axis; transpose the input first)")
    if (a["act_min"], a["act_max"]) != (lo, hi):
        raise refuse(node, f"an output clamp to [{a['act_min']}, {a['act_max']}] (the chain's "
                           "last RESCALE saturates to its type only)")


def write(b: Builder, node: Node, chain: ConverterChain, tables: list[np.ndarray],
          params: Mapping[str, object]) -> None:
    """The chain's operators, step by step, on the node's input (centred to int32 by a RESCALE
    of one), every operator located at the node."""
    a = node.attr_map
    shape = tuple(b.get(node.inputs[0]).shape)
    rank = len(shape)
    loc = loc_of(node)
    xc = centred_at(b, node.inputs[0], 0, 0, node.name, loc)
    results: list[str] = []
    for i, (op, operands) in enumerate(chain.steps):
        names, shapes = [], []
        for pos, want in enumerate(operands):
            if isinstance(want, int) or want == X:
                names.append(xc if want == X else results[want])  # type: ignore[index]
                shapes.append(b.get(names[-1]).shape)
                continue
            kind, v = cast(tuple[str, Any], want)
            if kind == "t":
                names.append(b.const(f"{node.name}_table{v}", tables[v], T.INT16))
                continue
            value = a["out_zp"] if kind == "zp" else params[v] if kind == "p" else v
            dtype, cshape = _const_type(op, pos, chain.dtypes[i], rank)
            names.append(b.const(f"{node.name}_c", np.full(cshape, value, numpy_dtype(dtype)),
                                 dtype))
        reduce = op in (TosaOp.REDUCE_MAX, TosaOp.REDUCE_SUM)
        out_shape = (*shape[:-1], 1) if reduce else np.broadcast_shapes(*shapes)
        out = node.name if i == len(chain.steps) - 1 else b.fresh(f"{node.name}_s{i}")
        attrs = _attrs(b, op, operands, rank, params)
        results.append(b.op(op, names, out, out_shape, chain.dtypes[i], loc, **attrs))


def _const_type(op: TosaOp, pos: int, out_t: T, rank: int) -> tuple[T, tuple[int, ...]]:
    """RESCALE's multiplier, shift and zero points and MUL's shift have TOSA's own types; the
    other constants are int32 of the input's rank."""
    if op is TosaOp.RESCALE:
        return (T.INT32, T.INT8, T.INT32, out_t)[pos - 1], (1,)
    if op is TosaOp.MUL and pos == 2:
        return T.INT8, (1,)
    return T.INT32, (1,) * rank


def _attrs(b: Builder, op: TosaOp, operands: tuple[object, ...], rank: int,
           params: Mapping[str, object]) -> dict[str, object]:
    if op is TosaOp.REDUCE_MAX:
        return {"axis": rank - 1, "nan_mode": 1}
    if op is TosaOp.REDUCE_SUM:
        return {"axis": rank - 1}
    if op is _ARS:
        return {"round": True}
    if op is not TosaOp.RESCALE:
        return {}
    mode = RoundingMode.SINGLE_ROUND
    if any(isinstance(w, tuple) and w[0] == "p" for w in operands) and \
            Rounding(cast(int, params["d_rounding"])) is Rounding.DOUBLE:
        mode = RoundingMode.DOUBLE_ROUND
        if cast(int, params["d_shift"]) > 31:
            b.extensions.add(EXT_DOUBLE_ROUND)
    return {"scale32": True, "rounding_mode": mode, "per_channel": False,
            "input_unsigned": False, "output_unsigned": False}
