"""Compiled kernels (numba) for the simulator's instructions, and the switch that turns them off.

Why: an instruction of a tile is a few thousand elements, where numpy's per-call floor (about
1-2.5 us a pass) times the passes a requantisation or an ELTWISE needs costs more than the
work. One compiled loop does an instruction's arithmetic in one pass, for one call's floor,
written per element as docs/isa.md and docs/numerics.md write it: in int64, or (REQUANT,
ELTWISE: ``tessel.sim.instr.requant`` / ``eltwise``) in float64 steps that are each exact on
integers, since without AVX-512 int64 multiplies, shifts, min and max are emulated; never a
float shortcut with a data-dependent bound to prove.

A kernel is a plain Python function of numpy arrays and ints, module level, decorated with
``kernel``. It is compiled by numba (nopython, without the GIL, ``error_model="numpy"`` so an
integer division by zero does not raise, ``fastmath`` off) on its first use and cached on disk
by numba (beside the module, or in the user's cache directory when that is read-only), so a
later process loads it instead of compiling it. Nothing here imports numba until a step asks
for a kernel: ``import tessel`` and ``tessel --help`` do not pay numba's ~0.3 s.

A kernel may call ``helper`` functions (plain Python, module level): uncompiled they run as they
are, and a kernel's compilation compiles them into it (numba's ``register_jitable``), so a step
written once (a requantisation, say) serves several loops. (numba's disk cache of a kernel
checks only its own module's file: a helper lives in the module of the kernels calling it.)

A kernel declared with a signature (``kernel(signature="void(i8[:], i8)")``, numba's type
string) is built ahead of time instead, once per machine, into an extension module a process
loads without importing numba (``tessel.sim.aot``; numba's just-in-time compile when that build
is not possible).

``TESSEL_SIM_KERNELS=0`` (or numba not installed) turns compiling off: the simulator's steps then
run their kernels' Python source (``compiled``: the same semantics, hundreds of times slower;
``enabled`` is read when a program's steps are built, so a test can switch per program).
"""

from __future__ import annotations

import enum
import functools
import importlib.util
import os
from collections.abc import Callable
from typing import Any

ENV = "TESSEL_SIM_KERNELS"
_OFF = ("0", "off", "no", "false")


def enabled() -> bool:
    """Whether kernels should be compiled now (env switch, numba installed: found, not
    imported)."""
    if os.environ.get(ENV, "1").strip().lower() in _OFF:
        return False
    return _numba_installed()


@functools.cache
def _numba_installed() -> bool:
    return importlib.util.find_spec("numba") is not None


class Form(enum.Enum):
    """How a kernel was compiled (`Kernel.form`)."""

    AHEAD_OF_TIME = "ahead of time"  # tessel.sim.aot's extension module
    JUST_IN_TIME = "just in time"  # numba.njit


@functools.cache
def _numba() -> Any:
    try:
        import numba
        import numba.extending
    except ImportError:  # pragma: no cover - numba is a dependency; a broken install falls back
        return None
    return numba


class Kernel:
    """A kernel's Python source function (``py``: runs uncompiled, for tests and debugging) and
    its compiled form, made once on first request (``compiled``): built ahead of time when the
    kernel has a `signature` and that build is possible (tessel.sim.aot), else by numba's
    just-in-time compiler (`form` says which, once compiled)."""

    def __init__(self, fn: Callable[..., Any], signature: str | None = None):
        self.py = fn
        self.signature = signature
        self.__name__ = fn.__name__
        self.__doc__ = fn.__doc__
        self._compiled: Callable[..., Any] | None = None
        self.form: Form | None = None

    @property
    def compiled(self) -> Callable[..., Any]:
        if self._compiled is None:
            fn = None
            if self.signature:
                from tessel.sim import aot

                fn = aot.load(self)
            if fn is not None:
                self.form = Form.AHEAD_OF_TIME
            else:
                numba = self.register_helpers()
                fn = numba.njit(cache=True, nogil=True, fastmath=False,
                                error_model="numpy")(self.py)
                self.form = Form.JUST_IN_TIME
            self._compiled = fn
        return self._compiled

    def register_helpers(self) -> Any:
        """Register the ``helper`` functions of the kernel's module with numba (each once, by
        the first kernel compiled); returns numba."""
        numba = _numba()
        if numba is None:
            raise RuntimeError(f"kernel {self.__name__}: numba is not installed")
        for g in list(self.py.__globals__.values()):
            if getattr(g, HELPER, False) is True:
                setattr(g, HELPER, "registered")
                numba.extending.register_jitable(g)
        return numba

    def __call__(self, *args: Any) -> Any:
        """The compiled kernel (plans should hold ``compiled`` itself: one call less)."""
        return self.compiled(*args)

    def __repr__(self) -> str:
        return f"Kernel({self.__name__})"


def compiled(k: Kernel) -> Callable[..., Any]:
    """What a simulator step calls: ``k.compiled`` with kernels on (``enabled``, read now:
    when the step is built), else its Python source ``k.py`` (the same semantics, run by the
    interpreter: hundreds of times slower)."""
    return k.compiled if enabled() else k.py


def entry(fn: Callable[..., Any], *args: Any) -> Callable[..., Any]:
    """What to call ``fn`` with arguments of ``args``' types: ``fn`` is what ``compiled``
    returned; for a kernel numba compiles just in time, the machine code for exactly those
    types (compiled or loaded now if it is not yet), which skips the type dispatch numba does
    on every call (about 0.3 us, on steps of a few); anything else is ``fn`` itself. The
    caller passes arguments of those types only (the machine code does not check them)."""
    overloads = getattr(fn, "overloads", None)
    numba = _numba() if overloads is not None else None
    if numba is None:
        return fn
    from numba.core.typing.typeof import Purpose

    try:
        sig = tuple(numba.typeof(a, Purpose.argument) for a in args)
        hit = overloads.get(sig)
        return hit.entry_point if hit is not None else fn.compile(sig)
    except Exception:  # noqa: BLE001 - types numba cannot compile for: dispatch as usual
        return fn


def bound(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    """``fn(*args)`` as a call of no arguments (a step bound to its kept operands), through
    ``entry``."""
    return functools.partial(entry(fn, *args), *args)


HELPER = "_tessel_jit_helper"  # the mark ``helper`` sets on a function


def helper(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Declare `fn` callable from kernels of its module (see the module docstring); returns it
    unchanged."""
    setattr(fn, HELPER, True)
    return fn


def kernel(fn: Callable[..., Any] | None = None, *, signature: str | None = None
           ) -> Any:
    """Declare `fn` a compiled kernel (see the module docstring): ``@kernel``, or
    ``@kernel(signature=...)`` for one built ahead of time."""
    if fn is None:
        return lambda f: Kernel(f, signature)
    return Kernel(fn, signature)
