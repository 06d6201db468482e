"""The importer's reading of the exporter's planned chains (tessel.frontend.tosa_import): an
integer layer norm or softmax written as tens to hundreds of TOSA operators (`tosa_norm.chain`,
`tosa_chains.softmax_chain`) imports back as the one `qlayer_norm` / `qsoftmax` it came from.

Every operator of such a chain is located at its plan (`tosa_build.plan_location`: the node,
the op and the plan's integers). The importer takes the run of operators with that location,
writes the chain those integers give on the same input, and checks the run against it operator
by operator: the same operators in the same order with the same attributes, every constant
equal and every operand wired the same way; only the plan's tables (gamma and beta, the exp
table) are read from the file. Anything else, or an intermediate read outside the run, is a
TesselFormatError: the location selects what to compare, the operators decide.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tessel.errors import TesselConfigError, TesselFormatError
from tessel.frontend.tosa_build import Builder
from tessel.frontend.tosa_chains import softmax_chain
from tessel.frontend.tosa_norm import chain as layer_norm_chain
from tessel.frontend.tosa_schema import DType as T
from tessel.frontend.tosa_schema import Operator, TosaGraph, TosaOp, read_form
from tessel.ir import DType, Op
from tessel.ir.builder import sanitize_name
from tessel.ops.layer_norm import LayerNormPlan
from tessel.ops.lut import I16_ENTRIES
from tessel.ops.softmax import SoftmaxPlan

if TYPE_CHECKING:
    from tessel.frontend.tosa_import import _Importer

_OUT = {T.INT8: DType.I8, T.INT16: DType.I16}
_CONSTS = (TosaOp.CONST, TosaOp.CONST_SHAPE)


@dataclass(frozen=True)
class _Kind:
    """One planned chain: its plan from the location's integers and the tables, the chain's
    writer, the tables' placeholders and dtypes, and the Tessel op's attributes."""

    plan: Callable[[Sequence[int], Mapping[str, np.ndarray]], Any]
    write: Callable[[Builder, str, str, Any, Sequence[int], T], dict[str, str]]
    tables: Callable[[int], Mapping[str, np.ndarray]]  # placeholders, by the input's last dim
    extra: int  # integers before the plan's steps
    attrs: Callable[[Sequence[int]], dict[str, Any]]


KINDS: Mapping[str, tuple[Op, _Kind]] = {
    Op.QLAYER_NORM.value: (Op.QLAYER_NORM, _Kind(
        plan=lambda steps, t: LayerNormPlan.from_steps(steps, t["gamma"], t["beta"]),
        write=lambda b, x, name, plan, extra, out_t: layer_norm_chain(b, x, name, plan, out_t),
        tables=lambda n: {"gamma": np.zeros(n, np.int16), "beta": np.zeros(n, np.int32)},
        extra=0, attrs=lambda extra: {})),
    Op.QSOFTMAX.value: (Op.QSOFTMAX, _Kind(
        plan=lambda steps, t: SoftmaxPlan.from_steps(steps, t["exp_table"]),
        write=lambda b, x, name, plan, extra, out_t: softmax_chain(b, x, name, plan, extra[0],
                                                                   out_t),
        tables=lambda n: {"exp_table": np.zeros(I16_ENTRIES, np.int16)},
        extra=1, attrs=lambda extra: {"axis": extra[0]})),
}


def _parse(loc: str) -> tuple[str, str, list[int]] | None:
    """(node name, op tag, integers) of a planned chain's location."""
    if not loc.endswith(")"):
        return None
    for tag in KINDS:
        head, sep, tail = loc.rpartition(f" ({tag} ")
        if sep:
            try:
                return head, tag, [int(v) for v in tail[:-1].split(",")]
            except ValueError:
                return None
    return None


def is_planned(loc: str) -> bool:
    """Whether an operator's location names a planned chain."""
    return bool(loc) and _parse(loc) is not None


def import_planned(im: _Importer, first: Operator, k: int) -> None:
    """The run of operators from `k` located at one planned chain, checked against the chain
    its plan writes, as the one Tessel op."""
    ops = im.g.operators
    loc = ops[k].location
    name, tag, ints = _parse(loc) or ("", "", [])
    op, kind = KINDS[tag]
    run = [j for j in range(k, _run_end(ops, k, loc)) if ops[j].location == loc]
    located = [ops[j] for j in run]
    x, out = located[0].inputs[0], located[-1].outputs[0]
    what = f"{located[-1].op.name} %{out}"
    x_t, out_t = im.g.tensors.get(x), im.g.tensors.get(out)
    if x_t is None or out_t is None or out_t.dtype not in _OUT or not x_t.shape:
        raise TesselFormatError(f"TOSA {what}: a {tag} chain must read and write int8 / int16 "
                                "tensors")
    extra, steps = ints[:kind.extra], ints[kind.extra:]
    probe = _plan(kind, steps, kind.tables(x_t.shape[-1]), what)
    b = Builder(None)
    b.tensor(x, x_t.shape, x_t.dtype)
    tables = kind.write(b, x, name, probe, extra, out_t.dtype)
    template = TosaGraph([read_form(o) for o in b.ops], b.tensors, b.shapes, [x], [out])
    found = _match(im, template, located, x, set(tables.values()), what)
    plan = _plan(kind, steps, {key: found[t].reshape(-1) for key, t in tables.items()}, what)
    refuse_leaks(im, located, out, what, tag)
    consts = [im.b.constant(getattr(plan, f), sanitize_name(f"{out}_{key}"))
              for key, f in zip(tables, type(plan).ARRAYS, strict=True)]
    attrs = {**kind.attrs(extra), "dtype": _OUT[out_t.dtype], **plan.to_attrs()}
    if op is Op.QLAYER_NORM:
        attrs["normalized_shape"] = (plan.n,)
    im.add(located[-1], op, [im.value(x, what), *consts], attrs)
    im.skip.update(run)


def _plan(kind: _Kind, steps: Sequence[int], tables: Mapping[str, np.ndarray], what: str) -> Any:
    try:
        return kind.plan(steps, tables)
    except (TesselConfigError, ValueError, KeyError) as e:
        raise TesselFormatError(f"TOSA {what}: the chain's plan is not valid: {e}") from None


def _run_end(ops: Sequence[Operator], k: int, loc: str) -> int:
    """One past the last operator located at `loc` in the run from `k` (constants between)."""
    end = k
    for j in range(k, len(ops)):
        if ops[j].location == loc:
            end = j + 1
        elif ops[j].op not in _CONSTS:
            break
    return end


def refuse_leaks(im: _Importer, located: Sequence[Operator], out: str, what: str,
                 tag: str) -> None:
    """Refuses a chain (the operators ``located``, writing ``out``) one of whose intermediates
    is a graph output or is read by an operator outside the chain: importing the chain as one
    op would lose that value."""
    inside = {o for step in located for o in step.outputs} - {out}
    mine = {id(step) for step in located}
    leaks = sorted(v for v in inside if v in im.g.outputs
                   or any(id(u) not in mine for u in im.users.get(v, [])))
    if leaks:
        raise TesselFormatError(f"TOSA {what}: {tag} intermediate %{leaks[0]} is read outside "
                                "its chain")


def _match(im: _Importer, template: TosaGraph, located: Sequence[Operator], x: str,
           free: set[str], what: str) -> dict[str, np.ndarray]:
    """Check the file's run against the template (the same operators, attributes, constants
    and wiring); returns the file's values of the template's `free` constants."""
    steps = [op for op in template.operators if op.op not in _CONSTS]
    names = {x: x}
    found: dict[str, np.ndarray] = {}
    if len(steps) != len(located):
        raise TesselFormatError(f"TOSA {what}: {len(located)} operators where the chain's plan "
                                f"writes {len(steps)}")
    for i, (t, f) in enumerate(zip(steps, located, strict=True)):
        if t.op is not f.op or t.attrs != f.attrs or len(t.inputs) != len(f.inputs):
            raise TesselFormatError(f"TOSA {what}: operator {i} of the chain is {f.op.name} "
                                    f"where its plan writes {t.op.name} (or other attributes)")
        for tn, fn in zip(t.inputs, f.inputs, strict=True):
            if not _same_operand(im, template, names, tn, fn, free, found):
                raise TesselFormatError(f"TOSA {what}: operator {i} of the chain ({f.op.name}) "
                                        f"reads %{fn} where its plan reads another value")
        for tn, fn in zip(t.outputs, f.outputs, strict=True):
            tt, ft = template.tensors[tn], im.g.tensors.get(fn)
            if ft is None or ft.dtype is not tt.dtype or ft.shape != tt.shape:
                raise TesselFormatError(f"TOSA {what}: operator {i} of the chain writes %{fn} "
                                        "of another type than its plan's")
            names[tn] = fn
    return found


def _same_operand(im: _Importer, template: TosaGraph, names: dict[str, str], tn: str, fn: str,
                  free: set[str], found: dict[str, np.ndarray]) -> bool:
    if tn in names:
        return names[tn] == fn
    if tn in template.shapes:
        return im.g.shapes.get(fn) == template.shapes[tn]
    tt, ft = template.tensors[tn], im.g.tensors.get(fn)
    if ft is None or ft.data is None or ft.dtype is not tt.dtype or ft.shape != tt.shape:
        return False
    if tn in free:
        found[tn] = ft.array()
        return True
    return ft.data == tt.data
