"""Permutation helpers of the layout pass: composing perms, mapping types and reshapes.

A value stored "under perm p" holds `logical.transpose(p)`: physical dim j is logical dim p[j].
NHWC storage of an NCHW tensor is perm (0, 2, 3, 1).
"""

from __future__ import annotations

from collections.abc import Sequence

from tessel.ir.types import Layout, QuantParams, TensorType

Perm = tuple[int, ...]
NHWC: Perm = (0, 2, 3, 1)


def identity(rank: int) -> Perm:
    return tuple(range(rank))


def is_identity(p: Perm) -> bool:
    return p == identity(len(p))


def relative(have: Perm, want: Perm) -> Perm:
    """The transpose turning a value stored under `have` into one stored under `want`."""
    return tuple(have.index(w) for w in want)


def permute(shape: Sequence[int], p: Perm) -> tuple[int, ...]:
    return tuple(shape[i] for i in p)


def permuted_type(t: TensorType, p: Perm) -> TensorType:
    """The type of a value of logical type `t` stored under perm `p`."""
    if is_identity(p):
        return t
    layout = Layout.NHWC if (p == NHWC and t.layout is Layout.NCHW) else Layout.ANY
    quant = t.quant
    if quant is not None and quant.axis is not None:
        quant = QuantParams(quant.scale, quant.zero_point, p.index(quant.axis))
    return TensorType(permute(t.shape, p), t.dtype, layout, quant)


def order_preserved(shape: Sequence[int], p: Perm) -> bool:
    """True if storing under `p` keeps the element order (it only moves size-1 dims)."""
    big = [d for d in p if shape[d] != 1]
    return big == sorted(big)


def reshape_groups(a: Sequence[int], b: Sequence[int]) -> list[tuple[list[int], list[int]]] | None:
    """Split reshape a -> b into groups (dims of a, dims of b) with equal products, or None."""
    if 0 in a or 0 in b or not a or not b:
        return None
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        gi, gj, pa, pb = [i], [j], a[i], b[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb and i < len(a):
                gi.append(i)
                pa, i = pa * a[i], i + 1
            elif pb < pa and j < len(b):
                gj.append(j)
                pb, j = pb * b[j], j + 1
            else:
                return None
        groups.append((gi, gj))
    groups[-1][0].extend(range(i, len(a)))  # trailing size-1 dims join the last group
    groups[-1][1].extend(range(j, len(b)))
    return groups


def reshape_under_perm(in_shape: Sequence[int], out_shape: Sequence[int], p: Perm) -> Perm | None:
    """If reshaping a value stored under `p` can be done on the stored data directly (each
    group of merged/split dims is contiguous and in order in storage), the perm the result is
    stored under; else None."""
    groups = reshape_groups(in_shape, out_shape)
    if groups is None:
        return None
    group_of = {d: g for g, (dims, _) in enumerate(groups) for d in dims}
    order: list[int] = []
    for d in p:
        g = group_of[d]
        if order and order[-1] == g:
            continue
        if g in order:
            return None
        order.append(g)
    for dims, _ in groups:
        stored = [d for d in p if d in dims]
        if stored != sorted(stored):
            return None
    return tuple(o for g in order for o in groups[g][1])
