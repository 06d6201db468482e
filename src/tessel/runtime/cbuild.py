"""Build the C runtime (libtessel + the C NPU model + the host wrapper, `tessel/runtime/c/`) into
a shared library the Python package loads with ctypes, with the system C compiler.

The library is named by a hash of its C sources and the compiler's identity, kept in the
kernel cache folder (``$TESSEL_KERNEL_CACHE``, default ``~/.cache/tessel/kernels``; ``off``: a
temporary folder for this process), built in a temporary file and renamed into place, so a
library in place is complete. An extension built by ``pip install`` (setup.py) is used
instead when it was built from the same sources. Without a C compiler, ``library()`` raises
one ``TesselConfigError`` saying what is missing; nothing else in Tessel needs a compiler.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.machinery
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

from tessel.errors import TesselConfigError

C_ROOT = Path(__file__).resolve().parent / "c"
CORE_SOURCES = ("src",)                 # libtessel: the firmware library
HOST_SOURCES = ("src", "npu", "host")   # + the C NPU model and the ctypes wrapper
FLAGS = ("-std=c99", "-O3", "-fPIC", "-shared", "-Wall", "-Wextra")  # -O3: vectorised MAC loops
COMPILERS = ("cc", "gcc", "clang")


def sources(folders: tuple[str, ...] = HOST_SOURCES) -> list[Path]:
    """The C files of `folders` (under tessel/runtime/c), sorted."""
    return sorted(p for d in folders for p in (C_ROOT / d).glob("*.c"))


def headers() -> list[Path]:
    return sorted(C_ROOT.rglob("*.h"))


def source_hash() -> str:
    """sha256 of every C source and header of the host library (names and contents)."""
    h = hashlib.sha256()
    for path in sources() + headers():
        h.update(str(path.relative_to(C_ROOT)).encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def compiler() -> str:
    """The C compiler: $CC, else the first of cc, gcc, clang on PATH."""
    cc = os.environ.get("CC")
    if cc and shutil.which(cc.split()[0]):
        return cc
    for name in COMPILERS:
        if shutil.which(name):
            return name
    raise TesselConfigError("the C engine needs a C compiler (cc, gcc or clang on PATH, or $CC); "
                            "none was found")


def _compiler_id(cc: str) -> str:
    try:
        out = subprocess.run([*cc.split(), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return cc
    return (out.stdout.splitlines() or [cc])[0]


def _installed() -> Path | None:
    """The extension pip built (setup.py), if it holds these sources."""
    here = Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = here / f"_ctessel{suffix}"
        if path.exists():
            return path
    return None


def _folder() -> Path:
    from tessel.fileio import cache_folder

    root = cache_folder("TESSEL_KERNEL_CACHE", "kernels")
    if root is None:
        tmp = Path(tempfile.mkdtemp(prefix="tessel-c-"))
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
        return tmp
    return root


def build(out: Path, cc: str, extra: tuple[str, ...] = ()) -> Path:
    """Compile the host library to `out` (through a temporary file renamed into place)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".libtessel.", suffix=".so", dir=out.parent)
    os.close(fd)
    cmd = [*cc.split(), *FLAGS, *extra, f"-I{C_ROOT / 'include'}",
           f'-DTSL_SOURCE_HASH="{source_hash()}"', *map(str, sources()), "-o", tmp, "-lm"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["no output"])[0]
            raise TesselConfigError(f"building the C runtime with {cc} failed: {first}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


@cache
def library() -> Path:
    """The path of a shared library built from the current C sources (built on first use)."""
    installed = _installed()
    if installed is not None and _hash_of(installed) == source_hash():
        return installed
    cc = compiler()
    key = hashlib.sha256(f"{source_hash()}\0{_compiler_id(cc)}\0{FLAGS}".encode()
                         ).hexdigest()[:20]
    path = _folder() / f"c-runtime-{key}" / "libtessel_host.so"
    if not path.exists():
        build(path, cc)
    return path


def _hash_of(path: Path) -> str | None:
    import ctypes

    try:
        lib = ctypes.CDLL(str(path))
        lib.tslh_source_hash.restype = ctypes.c_char_p
        return lib.tslh_source_hash().decode()
    except (OSError, AttributeError):
        return None


def main() -> int:
    """`python -m tessel.runtime.cbuild` (make test): build the library now, or say in one line
    why the C engine is unavailable (exit 0 either way: nothing else needs it)."""
    try:
        print(f"C runtime: {library()}")
    except TesselConfigError as exc:
        print(f"C runtime not available: {exc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
