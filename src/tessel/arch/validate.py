"""The checks of every NpuArch parameter, as declared (``Param.checks``, tessel.arch.checks);
messages name the TOML key (``matrix.rows``, ``offchip[1].name``).

Runs in ``NpuArch.__post_init__``, so an arch built in code or with ``dataclasses.replace``
(as design-space exploration does) is checked exactly like one read from a preset file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tessel.arch.checks import MAX_OFFCHIP_MEMORIES, MAX_OPERATING_POINTS, value_error
from tessel.errors import TesselConfigError

if TYPE_CHECKING:
    from tessel.arch.decl import Param
    from tessel.arch.types import NpuArch


def validate_arch(arch: NpuArch) -> None:
    """Raise TesselConfigError naming the first bad parameter of ``arch``."""
    from tessel.arch.operating import check_points
    from tessel.arch.params import FIELDS, OFFCHIP, value_of
    from tessel.arch.types import POINTS

    mems = arch.offchip
    if not isinstance(mems, tuple) or not 1 <= len(mems) <= MAX_OFFCHIP_MEMORIES:
        n = len(mems) if isinstance(mems, tuple) else mems
        _fail(OFFCHIP, f"must list 1 to {MAX_OFFCHIP_MEMORIES} memories", n)
    points = arch.operating_point
    if not isinstance(points, tuple) or len(points) > MAX_OPERATING_POINTS:
        n = len(points) if isinstance(points, tuple) else points
        _fail(POINTS, f"must list at most {MAX_OPERATING_POINTS} operating points", n)
    for p in FIELDS:
        if p.per_entry:
            for i, entry in enumerate(getattr(arch, p.entries)):
                check_value(p, f"{p.entries}[{i}].{p.field}", getattr(entry, p.field), arch, i)
        else:
            check_value(p, p.key, value_of(arch, p), arch)
    check_points(arch)


def check_value(p: Param, key: str, value: Any, arch: NpuArch | None,
                index: int | None = None) -> None:
    """Raise unless ``value`` has ``p``'s type and passes its checks (without ``arch``: those
    a value alone can pass)."""
    err = value_error(p.type, value)
    for check in p.checks:
        if err is not None:
            break
        if arch is not None or not check.reads_arch:
            err = check.error(value, arch, index)
    if err is not None:
        _fail(key, err, value)


def _fail(key: str, rule: str, value: object) -> None:
    raise TesselConfigError(f"{key} {rule}, got {value!r}")
