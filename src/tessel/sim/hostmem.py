"""Host memory the instructions' steps share: views of the simulated memories, pooled buffers,
kept packed operands.

Every step (``tessel.sim.instr``) reads and writes the simulated memories through numpy views
with a leading axis of samples: 1 for a ``MachineState`` (its memories are 1-D), n for a
``BatchState`` (``(n, size)``), so the one implementation of an instruction runs one sample and
a batch alike. Building a view costs about a microsecond, so views are kept:

* ``memory_view`` / ``flat_rows``: per state and key, shared by every step reading the same
  operand (a loop's tiles alternate between a few buffers);
* ``Views``: the views and buffers of one step, while the state's SRAM and pool stay the same
  objects (``NpuSession(reuse=True)`` keeps one state per program across runs);
* ``PoolKept``: the part of a step's views made from its pool alone;
* ``bindable``: a step that can also bind its kept views into one call of no arguments
  (``functools.partial`` of its kernel, mostly), which the functional simulator's bound plans
  run for a one-sample state without the step's own frame and view look-up.

``Pool`` holds scratch buffers keyed by role and shape (per thread and prepared program:
``pool_for``), ``PackCache`` operands a step packed from memory bytes (a layer's weights),
kept with a copy of those bytes and used again only while the bytes are the same.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tessel.sim.prepare import PreparedProgram
from tessel.sim.state import MachineState

Step = Callable[[MachineState], None]
Bind = Callable[[MachineState], Callable[[], object] | None]
BIND = "bind"  # the attribute ``bindable`` sets on a step
I8 = np.dtype("<i1")
I32 = np.dtype("<i4")
F32 = np.dtype(np.float32)
I64 = np.int64
BATCH_POOL_BYTES = 512 << 20  # a batch's host buffers (per session) above this: dropped
PACK_CACHE_BYTES = 64 << 20  # per pool (one thread running one prepared program)
PACK_MIN_VALUES = 32_768  # operands of this many values and more are packed once and kept


class Pool:
    """Host buffers reused between instructions and runs, keyed by (role, shape, dtype).
    ``limit``: when a new buffer would take the pool above this many bytes, every buffer is
    dropped first (a batch's buffers are n times larger; a dropped buffer is made again with
    its fill)."""

    def __init__(self, limit: int | None = None) -> None:
        self.bufs: dict[tuple, np.ndarray] = {}
        self.limit, self.nbytes = limit, 0
        self.packs = PackCache()

    def get(self, key: tuple, shape: tuple[int, ...], dtype: Any, fill: float = 0) -> np.ndarray:
        buf = self.bufs.get(key)
        if buf is None:
            buf = np.full(shape, fill, dtype)
            if self.limit is not None:
                if self.nbytes + buf.nbytes > self.limit:
                    self.bufs.clear()
                    self.nbytes = 0
                self.nbytes += buf.nbytes
            self.bufs[key] = buf
        return buf


class PackCache:
    """Operands a step packed from memory bytes, kept with a copy of those bytes and reused
    while they are the same: a layer's weights serve every row tile, a resident input every
    output-channel chunk. An entry is ``(the source bytes, ...)``, keyed by everything else
    its packing reads (the instruction's geometry); a caller compares the bytes it would read
    now with the entry's before using it and packs again on any difference, so a reuse is
    exact by construction. Least-recently-used entries go past ``limit`` bytes."""

    __slots__ = ("entries", "limit", "nbytes")

    def __init__(self, limit: int = PACK_CACHE_BYTES) -> None:
        self.entries: OrderedDict[tuple, tuple] = OrderedDict()
        self.limit, self.nbytes = limit, 0

    def get(self, key: tuple) -> tuple | None:
        entry = self.entries.get(key)
        if entry is not None:
            self.entries.move_to_end(key)
        return entry

    def put(self, key: tuple, entry: tuple) -> tuple:
        """Keep ``entry`` for ``key`` (replacing its old one); returns it."""
        entries = self.entries
        old = entries.pop(key, None)
        if old is not None:
            self.nbytes -= entry_bytes(old)
        entries[key] = entry
        self.nbytes += entry_bytes(entry)
        while self.nbytes > self.limit and len(entries) > 1:
            self.nbytes -= entry_bytes(entries.popitem(last=False)[1])
        return entry


def entry_bytes(entry: tuple) -> int:
    """The bytes a ``PackCache`` entry holds (arrays viewing another array not counted)."""
    return sum(v.nbytes if isinstance(v, np.ndarray) and v.base is None
               else len(v) if isinstance(v, bytes) else 0 for v in entry)


def pool_for(prep: PreparedProgram) -> Pool:
    """The calling thread's buffer pool for ``prep`` (kept in its cache: a thread id is only
    reused after its thread has ended, so no two running threads share a pool)."""
    pools = prep.cache.setdefault("pools", {})
    tid = threading.get_ident()
    pool = pools.get(tid)
    if pool is None:
        pool = pools[tid] = Pool()
    return pool


class Views:
    """A step's operand views and pooled buffers, made once per (one-sample state, pool):
    ``make(state)`` builds them; ``get(state)`` returns the kept ones while the state's SRAM
    and pool are the same objects. A batch's are made on every call (its memories are per
    session, and large)."""

    __slots__ = ("make", "kept")

    def __init__(self, make: Callable[[MachineState], Any]) -> None:
        self.make = make
        # (sram, pool, views) in one attribute: threads running the same program on their
        # own states read and replace it whole (no torn reads between the three)
        self.kept: tuple[Any, Any, Any] = (None, None, None)

    def get(self, state: MachineState) -> Any:
        sram, pool, val = self.kept
        if state.sram is sram and state.pool is pool:
            return val
        val = self.make(state)
        if state.batch is None:
            self.kept = (state.sram, state.pool, val)
        return val


def bindable(step: Step, bind: Bind) -> Step:
    """Mark ``step`` as bindable: ``bind(state)`` (a one-sample state, its views kept by
    ``Views``) returns a call of no arguments doing exactly what ``step(state)`` does while the
    state's memories and pool stay the same objects, or None where it cannot (the step then
    runs as it is). Returns ``step``."""
    setattr(step, BIND, bind)
    return step


def bound(step: Step, state: MachineState) -> Callable[[], object]:
    """The call of no arguments that runs ``step`` on ``state`` (a one-sample state): its
    ``bindable`` binding where it has one, else ``step`` applied to ``state``."""
    bind = getattr(step, BIND, None)
    try:
        call = None if bind is None else bind(state)
    except Exception:  # a trap, say: the step raises it when the instruction runs
        call = None
    return functools.partial(step, state) if call is None else call


def assign(dst: np.ndarray, src: np.ndarray) -> Callable[[], object]:
    """The call of no arguments ``dst[...] = src`` (a bound copy between kept views)."""
    return functools.partial(dst.__setitem__, Ellipsis, src)


class PoolKept:
    """The part of a step's ``Views`` made from the pool alone (pooled buffers, their
    reshapes and torch wrappers), made once per pool: ``simulate`` builds a new state on every
    call but reuses the prepared program's pool. Kept only for a pool that never drops its
    buffers (``limit`` None: one sample's pools); a batch's pool makes them on every call."""

    __slots__ = ("make", "kept")

    def __init__(self, make: Callable[[Pool], Any]) -> None:
        self.make = make
        self.kept: tuple[Any, Any] = (None, None)  # (pool, made): replaced whole

    def get(self, pool: Pool) -> Any:
        kept_pool, val = self.kept
        if pool is kept_pool:
            return val
        val = self.make(pool)
        if pool.limit is None:
            self.kept = (pool, val)
        return val


# ---- views of the simulated memories ----------------------------------------------------------
def view(buf: np.ndarray, offset: int, shape: Sequence[int], strides: Sequence[int],
         dtype: np.dtype) -> np.ndarray:
    """A view ``(samples, *shape)`` of a memory ``buf`` (1-D: one sample, the leading axis 1;
    2-D ``(n, size)``: its rows), element ``idx`` at byte ``offset + sum(idx * strides)``
    (strides in bytes, outermost first; the caller has checked the extent)."""
    if buf.ndim == 1:
        return np.ndarray((1, *shape), dtype, buffer=buf, offset=offset,
                          strides=(0, *strides))
    return np.ndarray((buf.shape[0], *shape), dtype, buffer=buf, offset=offset,
                      strides=(buf.strides[0], *strides))


def memory_view(state: MachineState, key: tuple) -> np.ndarray:
    """``view(getattr(state, memory), offset, shape, strides, dtype)`` for ``key`` = those
    five, made once per state and key (shared by every step reading the same operand: callers
    never change a view's shape in place)."""
    memo = state.views
    if memo is None:
        memo = state.views = {}
    v = memo.get(key)
    if v is None:
        v = memo[key] = view(getattr(state, key[0]), *key[1:])
    return v


def memory_tensor(state: MachineState, key: tuple) -> Any:
    """``torch.from_numpy`` of one sample's ``memory_view(state, key)`` (no leading axis),
    kept the same way. A dimension of length 1 gets the stride of a dense layout: it never
    addresses anything, but ``torch._int_mm`` reads a 1 x k operand whose row stride is 1 as
    column-major (wrong sums)."""
    tkey = ("torch", key)
    memo = state.views
    tensor = None if memo is None else memo.get(tkey)
    if tensor is None:
        import torch

        v = memory_view(state, key)[0]
        if 1 in v.shape:
            v = np.lib.stride_tricks.as_strided(v, strides=dense_strides(v.shape, v.strides,
                                                                         v.itemsize))
        tensor = state.views[tkey] = torch.from_numpy(v)  # type: ignore[index]
    return tensor


def dense_strides(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> tuple:
    """``strides`` with every length-1 dimension's replaced by a dense layout's."""
    out, dense = list(strides), itemsize
    for k in range(len(shape) - 1, -1, -1):
        if shape[k] == 1:
            out[k] = dense
        dense *= shape[k]
    return tuple(out)


def flat_rows(state: MachineState, mem: str, dtype: np.dtype, offset: int = 0) -> np.ndarray:
    """Memory ``mem`` of every sample as ``(samples, count)`` elements of ``dtype``, element
    ``j`` at byte ``offset + j * itemsize`` (``offset`` below the item size); kept per
    state. The steps whose kernels address a memory by element index read it so."""
    key = ("flat", mem, dtype.str, offset)
    memo = state.views
    if memo is None:
        memo = state.views = {}
    v = memo.get(key)
    if v is None:
        buf = getattr(state, mem)
        rows = buf.reshape(1, -1) if buf.ndim == 1 else buf
        n = (rows.shape[1] - offset) // dtype.itemsize
        v = memo[key] = rows[:, offset:offset + n * dtype.itemsize].view(dtype)
    return v


def contiguous(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> bool:
    """True if a view of ``shape`` / ``strides`` (outermost first) is C-contiguous."""
    expect = itemsize
    for n, s in zip(reversed(shape), reversed(strides), strict=True):
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


def uniform(x: np.ndarray) -> bool:
    """True if every sample (leading axis) of an operand holds the same values."""
    return x.shape[0] <= 1 or bool((x[1:] == x[:1]).all())


def bytes_uniform(buf: np.ndarray, lo: int, hi: int) -> bool:
    """``uniform`` of the bytes [lo, hi) of every sample's memory ``buf``, the 8-aligned
    middle compared as 64-bit words."""
    if buf.ndim == 1 or buf.shape[0] <= 1:
        return True
    a, b = -(-lo // 8) * 8, hi // 8 * 8
    if b - a < 64:
        return uniform(buf[:, lo:hi])
    return (uniform(buf[:, a:b].view(np.uint64)) and uniform(buf[:, lo:a])
            and uniform(buf[:, b:hi]))


def disjoint(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two byte ranges [lo, hi) share no byte."""
    return a[1] <= b[0] or b[1] <= a[0]
