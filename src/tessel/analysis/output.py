"""Writing report files: one place that turns an unwritable path into a clear TesselError."""

from __future__ import annotations

from pathlib import Path

from tessel.errors import TesselConfigError


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8, ``\\n`` line ends) to ``path``; returns the path."""
    p = Path(path)
    try:
        p.write_text(text, encoding="utf-8", newline="\n")
    except OSError as exc:
        raise TesselConfigError(f"cannot write {p}: {exc.strerror or exc}") from None
    return p
