"""Kernels built ahead of time: a kernel declared with a signature (``jit.kernel(signature=...)``)
is compiled once per machine by numba's ahead-of-time compiler (``numba.pycc``) into a C
extension module kept in the kernel cache folder, which a later process loads in about a
millisecond without importing numba.

Why: numba's start in a process (its import, then, on a kernel's first call, its target's
registries and the cached machine code's load) would otherwise be paid by every design-space
exploration worker for the timing rules (tessel.sim.clock), a large part of what a second
worker adds to a sweep over one. The extension module needs only numpy.

A module is named ``tessel_aot_<kernel's module>_<kernel>``; its folder by a hash of what it is
built from: the kernel's module source and the values of its module's numeric constants (one
imported from the ISA, such as the engine count, is compiled in too), tessel/sim/jit.py and
this file, the signature,
numba's version file, the Python ABI (extension suffix) and the machine type. Code is
generated for the machine type's generic CPU, not the host's: a cache folder shared by several
hosts must not hold code one of them cannot run (the step loop is scalar code: measured as fast
as numba's host-tuned compile).

A build runs in a new temporary folder of the cache and is renamed into place (when another
process's build got there first, this one is discarded), so a folder in place is complete;
the temporary folder of a build killed midway is removed by the next build of the module.
Anything that stops a build or a load (no C compiler, a numba without pycc, a cache that cannot
be written, a damaged module) leaves the kernel to numba's just-in-time compiler, as kernels
without a signature are (``jit.Kernel.compiled``), and says why in one log line; a module
that does not load is built again once.

Folder: ``$TESSEL_KERNEL_CACHE`` (``off``: no ahead-of-time build), else
``~/.cache/tessel/kernels``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import platform
import shutil
import sys
import sysconfig
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tessel.sim.jit import Kernel

ENV = "TESSEL_KERNEL_CACHE"
LOGGER = logging.getLogger("tessel.sim.aot")


def folder() -> Path | None:
    """The kernel cache folder, or None when ahead-of-time kernels are off."""
    from tessel.fileio import cache_folder

    return cache_folder(ENV, "kernels")


def module_name(kernel: Kernel) -> str:
    return f"tessel_aot_{kernel.py.__module__.replace('.', '_')}_{kernel.__name__}"


def key(kernel: Kernel) -> str:
    """The hash naming the kernel's module folder (the module docstring: what it is built from)."""
    h = hashlib.sha256()
    numba = importlib.util.find_spec("numba")
    numba_version = Path(numba.origin).parent / "_version.py" if numba and numba.origin else None
    sources = [Path(kernel.py.__code__.co_filename), Path(__file__),
               Path(__file__).with_name("jit.py")]
    if numba_version is not None:
        sources.append(numba_version)
    for path in sources:
        with contextlib.suppress(OSError):
            h.update(path.read_bytes())
        h.update(b"\0")
    module = sys.modules.get(kernel.py.__module__)
    constants = sorted((k, v) for k, v in vars(module).items()
                       if type(v) in (int, float, bool)) if module else []
    h.update(repr(constants).encode() + b"\0")
    for part in (kernel.signature or "", sysconfig.get_config_var("EXT_SUFFIX") or "",
                 sys.implementation.cache_tag or "", platform.machine()):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:24]


def load(kernel: Kernel) -> Callable[..., Any] | None:
    """The kernel's ahead-of-time compiled function (built first if it is not in the cache), or
    None (the reason logged) when there is none."""
    try:
        root = folder()
    except RuntimeError as exc:  # (no home folder to find)
        LOGGER.info("kernel %s: no kernel cache (%s); numba compiles it just in time",
                    kernel.__name__, exc)
        return None
    if root is None or not kernel.signature:
        return None
    name = module_name(kernel)
    here = root / key(kernel)
    path = _module_path(here, name)
    for attempt in (0, 1):
        if not path.exists():
            LOGGER.info("building kernel %s ahead of time into %s (once per machine, a few "
                        "seconds)", kernel.__name__, here)
            try:
                _build(kernel, name, here)
            except Exception as exc:  # noqa: BLE001 - any failure: numba's JIT instead
                LOGGER.info("kernel %s: no ahead-of-time build (%s: %s); numba compiles it "
                            "just in time", kernel.__name__, type(exc).__name__, exc)
                return None
        try:
            return getattr(_import(name, path), kernel.__name__)
        except (ImportError, OSError, AttributeError) as exc:
            LOGGER.warning("kernel %s: %s does not load (%s)%s", kernel.__name__, path, exc,
                           "; building it again" if not attempt else "")
            shutil.rmtree(here, ignore_errors=True)
    return None


def built(kernel: Kernel) -> bool:
    """Whether the kernel's ahead-of-time module is already in the cache (`load` would load it,
    not build it)."""
    try:
        root = folder()
    except RuntimeError:
        return False
    if root is None or not kernel.signature:
        return False
    return _module_path(root / key(kernel), module_name(kernel)).exists()


def _module_path(here: Path, name: str) -> Path:
    return here / (name + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))


def _import(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"not an extension module: {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build(kernel: Kernel, name: str, here: Path) -> None:
    """Compile the kernel (and the helpers its module declares) into `here`/<name><suffix>."""
    here.parent.mkdir(parents=True, exist_ok=True)
    _remove_orphans(here)
    tmp = Path(tempfile.mkdtemp(prefix=f".{here.name}.{os.getpid()}.", dir=here.parent))
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*'pycc' module is pending deprecation")
            from numba.pycc import CC

            kernel.register_helpers()
            cc = CC(name)
            cc.output_dir = str(tmp)
            cc.target_cpu = ""  # the generic CPU (the module docstring)
            cc.verbose = False
            cc.export(kernel.__name__, kernel.signature)(kernel.py)
            cc.compile()
        try:
            os.rename(tmp, here)
        except OSError:
            if not here.exists():  # (else another process's build is in place: use that)
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _remove_orphans(here: Path) -> None:
    """Remove the temporary folders of builds of `here` whose process is gone (killed mid-build:
    no cleanup ran); their name holds the builder's pid."""
    from tessel.fileio import process_alive

    for tmp in here.parent.glob(f".{here.name}.*.*"):
        pid = tmp.name[len(here.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)
