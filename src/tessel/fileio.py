"""Writing output files (IR text, reports, program text): atomically, so nothing is left
half-written, and an unwritable path becomes one clear TesselConfigError naming it."""

from __future__ import annotations

from pathlib import Path

from tessel.errors import TesselConfigError


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Write `data` (text as UTF-8 with \\n line ends) to `path` via a temporary file."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    raw = data.encode("utf-8") if isinstance(data, str) else data
    try:
        tmp.write_bytes(raw)
        tmp.replace(p)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise TesselConfigError(f"cannot write {p}: {exc.strerror or exc}") from None
    return p
