"""Reading inputs and writing every output file Tessel produces (binaries, IR text, reports,
exploration results), under one contract:

* ``write_atomic``: the data goes to a uniquely named temporary file in the destination's
  folder (``.NAME.PID.XXXX.tmp``), is flushed and fsynced, then renamed over the destination.
  On any failure (a full disk, SIGINT/SIGTERM, an exception) the temporary file is removed and
  the destination is left as it was; a temporary file left by a writer killed with SIGKILL is
  removed by the next write of the same destination. The new file gets the mode ``open()``
  would give it (0666 minus the umask), not the 0600 of ``tempfile.mkstemp``.
* ``check_writable``: called by the CLI before any expensive work, so an unwritable
  destination (missing folder, a file's child, a read-only or pseudo file system) fails in
  well under a second instead of after a whole compile. It also refuses a destination that
  would destroy data: an existing file that is not a regular file (a device such as
  ``/dev/null``, a FIFO, a socket), or one that is the same file as an input of the command
  (the model's source file, an input or calibration array, the target file, the binary read;
  compared by inode after following links, so a symlink or hard link to it is refused too).
* Symbolic links are written through: writing ``link`` replaces the file it points to
  (atomically, in that file's folder) and leaves the link in place.
* ``read_text``: IR / program text; a missing file, a directory or a binary file given where
  text is expected is one ``TesselConfigError`` naming the path.
* ``cache_folder``: where a cache of Tessel's lives (an environment variable, or the user's
  cache folder).

Every OSError becomes a ``TesselConfigError`` saying what and where.
"""

from __future__ import annotations

import glob
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from tessel.errors import TesselConfigError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write `data` (text as UTF-8) to `path` via a temporary file in the same folder."""
    p = _through_links(Path(path))
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if p.is_dir():
        raise TesselConfigError(f"cannot write {p}: it is a directory")
    _remove_orphans(p)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.{os.getpid()}.", suffix=".tmp",
                                   dir=p.parent)
    except OSError as exc:
        raise TesselConfigError(f"cannot write {p}: {_why(exc)}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
            os.fchmod(f.fileno(), 0o666 & ~_umask())
        os.replace(tmp, p)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise TesselConfigError(f"cannot write {p}: {_why(exc)}") from None
    except BaseException:  # KeyboardInterrupt, SystemExit from a signal handler, ...
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


def _remove_orphans(p: Path) -> None:
    """Remove temporary files of `p` left by writers killed with SIGKILL (no cleanup runs
    then): their name holds the writer's pid, and that process no longer exists."""
    try:
        leftovers = list(p.parent.glob(f".{glob.escape(p.name)}.*.tmp"))
    except OSError:
        return
    for tmp in leftovers:
        pid = tmp.name[len(p.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and not process_alive(int(pid)):
            tmp.unlink(missing_ok=True)


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists (owned by anyone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def _through_links(p: Path) -> Path:
    """The file a symbolic link (chain) points to; other paths as they are."""
    return Path(os.path.realpath(p)) if p.is_symlink() else p


def check_writable(path: str | os.PathLike[str] | None, *, directory: bool = False,
                   inputs: Iterable[str | os.PathLike[str] | None] = ()) -> None:
    """Raise TesselConfigError now if `path` could not be written later (None: nothing to do)
    or writing it would destroy data.

    A file destination must not be a directory nor another non-regular file, nor the same file
    as one of `inputs` (the files the command reads); its folder must exist and accept a new
    file (tested by creating and removing one). A symbolic link is checked as the file it
    points to (what `write_atomic` writes). ``directory=True``: `path` is an output folder; it
    may not exist yet, but then its nearest existing ancestor must accept files."""
    if path is None:
        return
    p = _through_links(Path(path))
    if directory:
        if p.exists() and not p.is_dir():
            raise TesselConfigError(f"cannot write into {p}: it is not a directory")
        folder = p
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        _probe(folder, p)
        return
    if p.is_dir():
        raise TesselConfigError(f"cannot write {p}: it is a directory")
    if p.exists() and not p.is_file():
        raise TesselConfigError(f"refusing to write {path}: it is not a regular file (a device, "
                                "FIFO or socket would be replaced)")
    _check_not_an_input(Path(path), p, inputs)
    folder = p.parent
    if not folder.exists():
        raise TesselConfigError(f"cannot write {p}: folder {folder} does not exist")
    if not folder.is_dir():
        raise TesselConfigError(f"cannot write {p}: {folder} is not a directory")
    _probe(folder, p)


def _check_not_an_input(given: Path, p: Path, inputs: Iterable[str | os.PathLike[str] | None]
                        ) -> None:
    if not p.exists():
        return
    for i in inputs:
        if i is None:
            continue
        try:
            same = os.path.samefile(p, i)
        except OSError:  # a missing input: the command reports it
            continue
        if same:
            link = f" (through the link {given} -> {p})" if given.is_symlink() else ""
            raise TesselConfigError(f"refusing to write {given}: it is the input file {i}{link}; "
                                    "writing the output there would destroy it (choose another "
                                    "-o)")


def _probe(folder: Path, target: Path) -> None:
    if not folder.is_dir():
        raise TesselConfigError(f"cannot write {target}: {folder} is not a directory")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tessel-probe.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise TesselConfigError(f"cannot write {target}: {_why(exc)}") from None
    os.close(fd)
    Path(tmp).unlink(missing_ok=True)


def read_text(path: str | os.PathLike[str], what: str = "file") -> str:
    """The UTF-8 text of `path`; unreadable or non-text files raise TesselConfigError."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except IsADirectoryError:
        raise TesselConfigError(f"cannot read {what} {p}: it is a directory") from None
    except OSError as exc:
        raise TesselConfigError(f"cannot read {what} {p}: {_why(exc)}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        hint = " (a .tsl binary; `tessel disasm` prints it as text)" \
            if raw[:4] == b"TSL\0" else ""
        raise TesselConfigError(f"{p} is not a UTF-8 text {what}: byte {exc.start} is "
                                f"0x{raw[exc.start]:02x}{hint}") from None


def cache_folder(env: str, name: str) -> Path | None:
    """The folder ``$env`` names (``off``, ``0``, ``none`` or empty: None, the cache is off),
    else ``~/.cache/tessel/<name>``."""
    value = os.environ.get(env)
    if value is None:
        return Path.home() / ".cache" / "tessel" / name
    if value.strip().lower() in ("", "off", "0", "none"):
        return None
    return Path(value)
