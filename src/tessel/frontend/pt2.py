"""Loading a saved ExportedProgram (`.pt2`, written by torch.export.save) without running code
from the file.

torch.export.load unpickles several parts of the archive: the sample inputs and pickled weights
or constants (`torch.load`, retried with `weights_only=False` when a weights-only load fails),
opaque constants (`pickle.loads`) and TorchBind objects. A pickle can call any Python function
(`os.system`) while it loads. `load_pt2` runs torch's loader with every one of those restricted
to weights-only deserialisation (tensors, containers, numbers: torch's `weights_only=True`
unpickler) in the calling thread; a file that needs more is refused with the reason, and no
code from it has run. The archive's size is checked first (`MAX_PT2_MEMBERS` files,
`MAX_PT2_BYTES` uncompressed) so a small file cannot inflate past the bound while loading.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import threading
import types
import typing
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from tessel.errors import TesselConfigError

MAX_PT2_BYTES = 2 << 30  # uncompressed size of all members of a .pt2 archive
MAX_PT2_MEMBERS = 100_000

_LOCK = threading.Lock()  # one guarded load at a time (the guards are process-wide attributes)
_GUARDED = threading.local()  # .refusals: list of reasons while this thread loads a .pt2


class _Refused(pickle.UnpicklingError):
    """Raised inside torch's loader when the archive wants more than weights-only loading."""


def load_pt2(path: str | Path) -> torch.export.ExportedProgram:
    """The ExportedProgram saved in `path`, loaded weights-only; TesselConfigError if the file
    is missing, not an archive, too large, not a loadable program, or needs code to load."""
    path = Path(path)
    if not path.is_file():
        raise TesselConfigError(f"model file not found: {path}")
    _check_archive(path)
    refusals: list[str] = []
    try:
        with _quiet_torch_logs(), _weights_only(refusals):
            program = torch.export.load(path)
    except Exception as e:  # noqa: BLE001 - torch raises many kinds for a bad archive
        if refusals:
            raise _refusal(path, refusals) from None
        raise TesselConfigError(f"{path}: not a loadable torch.export program "
                                f"({type(e).__name__}: {_first_line(e)})") from None
    if refusals:  # refused inside torch, which went on without that part: refuse the file
        raise _refusal(path, refusals)
    return program


def _refusal(path: Path, refusals: list[str]) -> TesselConfigError:
    return TesselConfigError(
        f"{path}: refused: the archive holds {refusals[0]}, which only a full unpickler (one "
        "that can run code from the file) loads; Tessel loads .pt2 files weights-only "
        "(tensors, containers, numbers). Re-save the program with torch.export.save from "
        "plain tensors")


def _check_archive(path: Path) -> None:
    """A zip of at most MAX_PT2_MEMBERS members and MAX_PT2_BYTES uncompressed."""
    try:
        if not zipfile.is_zipfile(path):  # checked here: torch logs a traceback, then fails
            raise TesselConfigError(f"{path}: not a torch.export archive (not a zip file; "
                                    "write one with torch.export.save)")
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError) as e:
        # (NotImplementedError: a zip version or feature the zipfile module does not read)
        raise TesselConfigError(f"{path}: not a readable zip archive ({e})") from None
    if len(infos) > MAX_PT2_MEMBERS:
        raise TesselConfigError(f"{path}: {len(infos)} archive members, more than the "
                                f"{MAX_PT2_MEMBERS} a .pt2 may hold")
    total = sum(i.file_size for i in infos)
    if total > MAX_PT2_BYTES:
        raise TesselConfigError(f"{path}: the archive inflates to {total} bytes, more than the "
                                f"{MAX_PT2_BYTES} bytes ({MAX_PT2_BYTES >> 30} GiB) a .pt2 may "
                                "hold")


def _first_line(e: BaseException) -> str:
    lines = [s for s in str(e).splitlines() if s.strip()]
    return lines[0][:200] if lines else type(e).__name__


@contextlib.contextmanager
def _quiet_torch_logs() -> Iterator[None]:
    """torch logs a bad archive's traceback as a warning (and one of its messages has a format
    error that prints '--- Logging error ---'): held at ERROR during the load."""
    loggers = [logging.getLogger(n) for n in ("torch.export", "torch._export")]
    levels = [g.level for g in loggers]
    for g in loggers:
        g.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for g, level in zip(loggers, levels, strict=True):
            g.setLevel(level)


class _PickleWithoutLoads:
    """The `pickle` module as torch's archive loader sees it during a guarded load: loading an
    opaque Python object is refused in the guarded thread."""

    def __getattr__(self, name: str) -> Any:
        if name in ("loads", "load", "Unpickler") and _guarded():
            return _refuse_pickle
        return getattr(pickle, name)


def _guarded() -> bool:
    return getattr(_GUARDED, "refusals", None) is not None


def _refuse(reason: str) -> _Refused:
    _GUARDED.refusals.append(reason)
    return _Refused(reason)


def _refuse_pickle(*args: Any, **kwargs: Any) -> Any:
    raise _refuse("an opaque Python object (a plain pickle)")


@contextlib.contextmanager
def _weights_only(refusals: list[str]) -> Iterator[None]:
    """Within the block, in this thread: every `torch.load` is weights-only, and `pickle`
    loads and TorchBind object loads in torch's archive loader are refused; each refusal's
    reason is appended to `refusals`. Other threads see torch unchanged."""
    from torch._export.serde import serialize as serde
    from torch.export.pt2_archive import _package as package

    with _LOCK:
        saved = torch.load, torch._C._pickle_load_obj, package.pickle, serde.typing
        torch.load = _guarded_load(saved[0])
        torch._C._pickle_load_obj = _guarded_call(saved[1], "a TorchBind object")
        package.pickle = _PickleWithoutLoads()
        serde.typing = _typing_with_cached_hints(vars(serde.schema))
        _GUARDED.refusals = refusals
        try:
            yield
        finally:
            _GUARDED.refusals = None
            torch.load, torch._C._pickle_load_obj, package.pickle, serde.typing = saved


_SCHEMA_HINTS: dict[type, dict[str, Any]] = {}


def _typing_with_cached_hints(schema_namespace: dict[str, Any]) -> types.ModuleType:
    """The `typing` module as torch's program deserialiser sees it during a load:
    `get_type_hints` of a schema dataclass is computed once per process. The deserialiser asks
    for it again for every object of the program's JSON (a third of the time of loading a
    small program); the schema's classes do not change, so the hints are the same every time."""

    def get_type_hints(obj: Any, globalns: Any = None, localns: Any = None,
                       include_extras: bool = False) -> dict[str, Any]:
        if globalns is not schema_namespace or localns is not None or include_extras:
            return typing.get_type_hints(obj, globalns, localns, include_extras)
        hints = _SCHEMA_HINTS.get(obj)
        if hints is None:
            hints = _SCHEMA_HINTS[obj] = typing.get_type_hints(obj, globalns)
        return hints

    module = types.ModuleType("typing")
    module.__dict__.update(vars(typing))
    module.get_type_hints = get_type_hints
    return module


def _guarded_load(load: Any) -> Any:
    def guarded(f: Any, *args: Any, **kwargs: Any) -> Any:
        if not _guarded():
            return load(f, *args, **kwargs)
        kwargs["weights_only"] = True
        try:
            return load(f, *args, **kwargs)
        except pickle.UnpicklingError as e:
            raise _refuse(_unpickling_reason(e)) from None
    return guarded


def _guarded_call(fn: Any, what: str) -> Any:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if not _guarded():
            return fn(*args, **kwargs)
        raise _refuse(what)
    return guarded


def _unpickling_reason(e: BaseException) -> str:
    """What the weights-only unpickler refused: torch's line naming the global, if any."""
    for line in str(e).splitlines():
        if "Unsupported" in line or "GLOBAL" in line:
            return f"a pickle that needs more than tensors ({line.strip()[:160]})"
    return f"a pickle that needs more than tensors ({_first_line(e)})"
