"""The fast path of the functional simulator: each instruction precompiled once into a closure.

The reference handlers (``tessel.sim.functional.HANDLERS``) read their fields from a dict,
rebuild the window geometry, the chunk bounds and the operand views and allocate every host
buffer on each call. For a program run many times (``CompiledModel.run``) all of that depends
only on the instruction, so ``fast_steps`` turns every instruction of a prepared program into
a closure ``step(state)`` with its shapes, strides, offsets and constants bound, once per
prepared program (cached in ``PreparedProgram.cache``). The closures compute exactly what the
reference handlers compute (tests/unit/sim/test_fastpath.py runs every instruction kind both
ways, one sample and batches, and the zoo end-to-end tests check the whole path against the
golden model). Every closure works on a leading axis of samples (``_view``: 1 for a
``MachineState``, n for a ``BatchState``), so batches run the same closures:

* DMA / COPY between two contiguous patterns is one byte-slice copy;
* CONV / DWCONV / POOL write the padded input frame, the im2col matrix and the GEMM operands
  into host buffers kept between calls (``Pool``: per thread, keyed by shape; the padded
  border of a frame is written once and stays put because every user of a key writes the same
  interior); a 1x1 convolution without padding reads its input tile directly; a batch's CONV
  runs GEMMs of as many samples as keep the im2col matrix below ``BATCH_GEMM_BYTES``;
* CONV tiles of at least ``INT_MM_MIN_MACS`` products, MATMUL tiles of at least
  ``fastmatmul.INT_MM_MIN_MACS`` (and every tile of a batch) are int8 GEMMs
  (``torch._int_mm``, exact int32 sums, when a worst-case self-test passes on this host:
  ``int_mm``) with the zero points as wrapping int32 corrections; smaller ones are float32
  GEMMs of exact integers (``_exact_gemm``);
* with kernels on, one sample's CONV below those sizes (1x1: below
  ``kern_conv.KERNEL_MAX_MACS``) packs its operands and stores its results in compiled loops
  around one float32 GEMM (``kern_conv``);
* REQUANT, DWCONV and POOL are compiled loops (numba: ``kern_rq``, ``kern_dw``, ``kern_pool``)
  unless ``TESSEL_SIM_KERNELS=0``; their numpy forms: REQUANT keeps its checked parameter
  plans across runs (keyed by the parameter bytes, as in the reference handler, so a program
  that writes its parameters at run time stays exact; each closure also keeps its last bytes
  and plan; the kernel likewise) and runs pooled passes over the tile flattened against a
  plan tiled to the whole tile (``fastrq.TiledPlans``; ``fastfix``'s FLOAT form where its
  bound is proved, else the FUSED form's int64 passes), DWCONV for one sample one einsum over
  long rows of a frame split by the column stride (``fastdw._dw_wide``);
* for one sample, REQUANT, CONV and MATMUL (float32), DWCONV and ELTWISE (general)
  keep their numpy views and pooled buffers per (state, pool) (``Views``: the memories of
  ``NpuSession(reuse=True)`` persist between runs); REQUANT and MATMUL make a new state's
  views cheaply (``simulate`` builds one per call): their pooled part kept per pool
  (``PoolKept``), their memory views shared per state by every closure reading the same
  operand (``memory_view``, ``memory_tensor``);
* ELTWISE and LUT (``tessel.sim.fastvec``): ELTWISE reads int8 / int16 operands'
  contributions from tables of the reference steps over every value, the output too where
  one operand decides it or both are int8, and computes stride-0 operands on their distinct
  values only; LUT reads a table of the reference over every input value; REDUCE (exact
  float sums of int8 / int16) and UNARY (int64 passes) keep their views
  (``tessel.sim.fastreduce``).

A closure that raises re-runs the reference handler on the same state, so a trap carries the
reference handler's message (and a fast-path fault that the reference does not reproduce is
re-raised as a simulator fault). Operands that differ between the samples of a batch where
the closure assumes one copy (CONV weights, REQUANT parameters, LUT entries) run the
reference handler; LUT_LOAD and instructions with a static trap always do.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from tessel.isa.fields import AccMode, PoolOp
from tessel.isa.fixedpoint import rounding_div
from tessel.isa.footprint import WINDOW_FACTOR
from tessel.isa.table import Opcode
from tessel.sim.matrix import F32_EXACT, chunk_len, exec_conv
from tessel.sim.prepare import Op, PreparedProgram
from tessel.sim.state import I32, NP_DTYPE, MachineState, Trap, extent
from tessel.sim.window import Geometry
from tessel.threads import single_threaded

Step = Callable[[MachineState], None]
I8 = np.dtype("<i1")
F32 = np.dtype(np.float32)
I64 = np.int64
BATCH_GEMM_BYTES = 8 << 20  # a batch's CONV: samples per GEMM, by their im2col bytes
BATCH_POOL_BYTES = 512 << 20  # a batch's host buffers (per session) above this: dropped


class Pool:
    """Host buffers reused between instructions and runs, keyed by (role, shape, dtype).
    ``limit``: when a new buffer would take the pool above this many bytes, every buffer is
    dropped first (a batch's buffers are n times larger; a dropped frame is re-made zero)."""

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


PACK_CACHE_BYTES = 64 << 20  # per pool (one thread running one prepared program)
PACK_MIN_VALUES = 32_768  # operands of this many values and more are kept (kern_conv, kern_mm)


class PackCache:
    """Operands a closure packed from memory bytes (e.g. CONV's float32 im2col matrix and
    weights: ``kern_conv``), kept with a copy of those bytes and reused while they are the same:
    a layer's weights serve every row tile, a resident input every output-channel chunk. An
    entry is ``(the source bytes, ...)``, keyed by everything else its packing reads (the
    instruction's geometry fields); a caller compares the bytes it would read now with the
    entry's before using it, and packs again on any difference, so a reuse is exact by
    construction. Least-recently-used entries go once they hold more than ``limit`` bytes."""

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
            self.nbytes -= _entry_bytes(old)
        entries[key] = entry
        self.nbytes += _entry_bytes(entry)
        while self.nbytes > self.limit and len(entries) > 1:
            self.nbytes -= _entry_bytes(entries.popitem(last=False)[1])
        return entry


def _entry_bytes(entry: tuple) -> int:
    """The bytes an entry holds (arrays that view another of its arrays not counted)."""
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


def _contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    """True if a view of ``shape`` / ``strides`` (outermost first) is C-contiguous."""
    expect = itemsize
    for n, s in zip(reversed(shape), reversed(strides), strict=True):
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


def _view(buf: np.ndarray, offset: int, shape: tuple[int, ...], strides: tuple[int, ...],
          dtype: np.dtype) -> np.ndarray:
    """A view ``(samples, *shape)`` of a memory: a 1-D memory (one sample) gets a leading axis
    of 1, a batch's ``(n, size)`` memory its rows (the operand's extent inside one row is a
    static check of prepare, or checked by the caller)."""
    if buf.ndim == 1:
        return np.ndarray((1, *shape), dtype, buffer=buf, offset=offset, strides=(0, *strides))
    return np.ndarray((buf.shape[0], *shape), dtype, buffer=buf, offset=offset,
                      strides=(buf.strides[0], *strides))


def _bytes_uniform(buf: np.ndarray, lo: int, hi: int) -> bool:
    """``_uniform`` of the bytes [lo, hi) of every sample's memory ``buf`` (n, size), the
    8-aligned middle compared as 64-bit words (8x fewer elements), the ends as bytes."""
    if buf.ndim == 1 or buf.shape[0] <= 1:
        return True
    a, b = -(-lo // 8) * 8, hi // 8 * 8
    if b - a < 64:
        return _uniform(buf[:, lo:hi])
    return (_uniform(buf[:, a:b].view(np.uint64)) and _uniform(buf[:, lo:a])
            and _uniform(buf[:, b:hi]))


def _eview(buf: np.ndarray, offset: int, shape: tuple[int, ...], strides: tuple[int, ...],
           dtype: np.dtype) -> np.ndarray:
    """``_view`` without the leading axis of 1 for one sample, for the closures that do not
    care about the axes (elementwise): numpy's loops over a 3-D broadcast cost ~2 us more per
    REQUANT than over the tile's own 2-D shape."""
    if buf.ndim == 1:
        return np.ndarray(shape, dtype, buffer=buf, offset=offset, strides=strides)
    return np.ndarray((buf.shape[0], *shape), dtype, buffer=buf, offset=offset,
                      strides=(buf.strides[0], *strides))


def _uniform(x: np.ndarray) -> bool:
    """True if every sample (leading axis) of an operand holds the same values."""
    return x.shape[0] <= 1 or bool((x[1:] == x[:1]).all())


class Views:
    """A closure's operand views and pooled buffers, made once per (one-sample state, pool):
    ``make(state)`` builds them; ``get(state)`` returns the kept ones while the state's SRAM
    and pool are the same objects (``NpuSession(reuse=True)`` keeps one state per program
    across runs, so numpy view construction, ~1 us each, leaves the hot loop). A batch's
    views are made on every call (its memories are per session, and large)."""

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


def memory_view(state: MachineState, key: tuple) -> np.ndarray:
    """``_eview(getattr(state, memory), offset, shape, strides, dtype)`` for ``key`` = those
    five, made once per state and key: the closures reading the same operand (a loop's tiles
    alternate between a few buffers) share one view, so a fresh state (``simulate``) makes
    each distinct view once rather than once per instruction. Shared: callers never change a
    view's shape in place."""
    memo = state.views
    if memo is None:
        memo = state.views = {}
    view = memo.get(key)
    if view is None:
        view = memo[key] = _eview(getattr(state, key[0]), *key[1:])
    return view


def memory_tensor(state: MachineState, key: tuple) -> Any:
    """``torch.from_numpy(memory_view(state, key))``, kept the same way. A dimension of
    length 1 gets the stride of a dense layout (its stride never addresses anything, but
    ``torch._int_mm`` reads a 1 x k operand whose row stride is 1 as column-major: wrong
    sums)."""
    memo = state.views
    tkey = ("torch", key)
    tensor = None if memo is None else memo.get(tkey)
    if tensor is None:
        import torch

        view = memory_view(state, key)
        if 1 in view.shape:
            dense, strides = view.itemsize, list(view.strides)
            for k in range(view.ndim - 1, -1, -1):
                if view.shape[k] == 1:
                    strides[k] = dense
                dense *= view.shape[k]
            view = np.lib.stride_tricks.as_strided(view, strides=strides)
        tensor = state.views[tkey] = torch.from_numpy(view)  # type: ignore[index]
    return tensor


class PoolKept:
    """The part of a closure's ``Views`` made from the pool alone (pooled buffers, their
    reshapes and torch wrappers), made once per pool: ``simulate`` builds a new state on
    every call but reuses the prepared program's pool, so a fresh state remakes only its
    memory views. Kept only for a pool that never drops its buffers (``limit`` None: one
    sample's pools, ``pool_for``); a batch's pool makes them on every call."""

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


# ---- DMA -----------------------------------------------------------------------------------
def _build_dma(op: Op) -> Step | None:
    f, load = op.f, op.opcode is Opcode.DMA_LOAD
    dt = NP_DTYPE[f["dtype"]]
    shape = (f["d3"], f["d2"], f["d1"], f["d0"])
    ext_s = (f["ext_s3"], f["ext_s2"], f["ext_s1"], f["ext_s0"])
    sram_s = (f["sram_s3"], f["sram_s2"], f["sram_s1"], f["sram_s0"])
    mem, ea, sa = f["mem"], f["ext_addr"], f["sram_addr"]
    n = int(np.prod(shape)) * dt.itemsize
    if n == 0:
        return lambda state: None
    lo, hi = extent(ea, shape, ext_s, dt.itemsize)
    if _contiguous(shape, ext_s, dt.itemsize) and _contiguous(shape, sram_s, dt.itemsize):
        if load:
            def step(state: MachineState) -> None:
                src = state.ext_buffer(mem, ea, ea + n)  # a batch's shared constants: 1-D
                if ea + n > src.shape[-1]:
                    raise Trap("outside its memory")
                state.sram[..., sa:sa + n] = src[..., ea:ea + n]
        else:
            def step(state: MachineState) -> None:
                dst = state.offchip[mem]
                if ea + n > dst.shape[-1]:
                    raise Trap("outside its memory")
                dst[..., ea:ea + n] = state.sram[..., sa:sa + n]
        return step

    def make(state: MachineState) -> tuple[np.ndarray, np.ndarray]:
        buf = state.ext_buffer(mem, lo, hi) if load else state.offchip[mem]
        if lo < 0 or hi > buf.shape[-1]:
            raise Trap("outside its memory")
        return _eview(buf, ea, shape, ext_s, dt), _eview(state.sram, sa, shape, sram_s, dt)
    kept = Views(make)  # a trap is raised again on every call (nothing kept)

    def strided(state: MachineState) -> None:
        ext, sram = kept.get(state)
        if load:
            sram[...] = ext
        else:
            ext[...] = sram
    return strided


# ---- accumulator stores ------------------------------------------------------------------------
class AccStore:
    """Stores GEMM results (``rows * cols`` per sample, for the samples ``part`` of the state)
    into the accumulator (OVERWRITE: ACC = s; ACCUMULATE: ACC = wrap32(ACC + s)): float32
    exact integers, float64 ones (a chunked reduction, wrapped through int64 as in
    ``matrix._to_int32``) or int32 already wrapped (``int8_gemm``). ``view(state)``: the
    destination (samples, rows, cols), for closures that keep it (``Views``)."""

    __slots__ = ("offset", "shape", "strides", "accumulate")

    def __init__(self, f: dict[str, Any], rows: int, cols: int) -> None:
        self.offset, self.shape = 4 * f["acc_addr"], (rows, cols)
        self.strides = (4 * f["acc_stride"], 4)
        self.accumulate = f["mode"] == AccMode.ACCUMULATE

    def view(self, state: MachineState) -> np.ndarray:
        return _view(state.acc_bytes, self.offset, self.shape, self.strides, I32)

    def __call__(self, state: MachineState, s: np.ndarray, part: slice = slice(None)) -> None:
        _acc_write(self.view(state)[part], s, self.accumulate)


def _acc_write(view: np.ndarray, s: np.ndarray, accumulate: bool) -> None:
    """``AccStore``'s write of GEMM results ``s`` into the accumulator view ``view``."""
    s = s.reshape(view.shape)
    if s.dtype == F32 and not accumulate:
        np.copyto(view, s, casting="unsafe")  # exact integers below 2^24
        return
    if s.dtype == np.int32:  # the int8 GEMM: already wrapped
        v = s
    else:
        v = s.astype(np.int32) if s.dtype == F32 else s.astype(I64).astype(np.int32)
    if accumulate:
        view += v  # int32 addition wraps
    else:
        view[...] = v


def _row_l1_max(x: np.ndarray, pool: Pool) -> float:
    """``max_i sum_k |x[i, k]|`` of a float32 matrix of small exact integers (|x| <= 383).

    A float32 matrix-vector product with ones: every partial sum is an integer below
    ``k * 383``, exact in float32 (in any order) while that is below 2^24; else float64."""
    k = x.shape[-1]
    if k * 383 >= F32_EXACT:
        return float(np.abs(x).sum(axis=-1, dtype=np.float64).max(initial=0.0))
    ab = np.abs(x, out=pool.get(("abs", x.shape), x.shape, F32))
    ones = pool.get(("ones", k), (k,), F32, fill=1)
    return float((ab.reshape(-1, k) @ ones).max(initial=0.0))


def _minus_zp(src: np.ndarray, zp: int, out: np.ndarray) -> None:
    """``out[...] = src - zp`` as float32 (int8 ``src``, exact): a plain cast where ``zp`` is 0
    (symmetric weights), ~2x faster than the subtraction with its dtype conversion."""
    if zp:
        np.subtract(src, zp, out=out, dtype=F32)
    else:
        np.copyto(out, src)


def _exact_gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray, chunk: int,
                l1: Callable[[], float], bmax: Callable[[], float]) -> np.ndarray:
    """``matrix.exact_matmul``: one float32 GEMM written into ``out`` when every partial sum is
    an integer below 2^24 (exact in any summation order): ``k <= chunk``, or a bound on the
    rows' sums of ``|a|`` (``l1()``) times ``max |b|`` (``bmax()``) below 2^24; else K in
    chunks summed in float64. (torch.mm was faster on isolated tiles but slower inside a whole
    run: not used; large tiles use the int8 GEMM instead, ``int8_gemm``.)"""
    k = a.shape[-1]
    if k > chunk:
        bm = bmax()
        if bm != 0.0 and l1() * bm >= F32_EXACT:
            res = np.zeros((*a.shape[:-1], b.shape[-1]), np.float64)
            for lo in range(0, k, chunk):
                res += a[..., lo:lo + chunk] @ b[..., lo:lo + chunk, :]  # exact, float64 sum
            return res
    if a.ndim == 2 and b.ndim == 2:
        return np.dot(a, b, out=out)  # the same BLAS GEMM, ~0.5 us less per call than matmul
    return np.matmul(a, b, out=out)


def _int8_max_abs(x: np.ndarray, zp: int) -> float:
    """``max |x - zp|`` of an int8 array (0 when empty)."""
    if x.size == 0:
        return 0.0
    return float(max(abs(int(x.min()) - zp), abs(int(x.max()) - zp)))


# ---- int8 GEMM -----------------------------------------------------------------------------
INT_MM_MIN_MACS = 500_000  # smaller single-sample GEMMs: float32 (torch's per-call cost ~10 us)
INT_MM_K_MAX = (2**31 - 1) // (128 * 128)  # K int8 x int8 products cannot overflow int32
USE_INT_MM = True  # tests turn it off to check the float path; the self-test may too
FORCE_INT_MM = False  # tests turn it on to run the int8 GEMM path where it is exact but slow
_INT_MM: list = []  # [torch._int_mm or None]: exact on this host, decided once per process
_INT_MM_FAST: list = []  # [bool]: faster than the float32 GEMM here, decided once per process
SPEED_PROBE = (256, 576, 64)  # (m, k, n): a 3x3 conv tile of 64 input / output channels


def int_mm() -> Callable[[Any, Any], Any] | None:
    """The int8 GEMM the simulator runs: ``exact_int_mm()`` where it is also faster than the
    float32 GEMM of the same operands on this host (``int_mm_fast``), else None (the float32
    GEMMs of exact integers). Both give the same integers: the choice changes speed only.
    Hosts differ by 30-70x here: with AMX / AVX-512 VNNI ``torch._int_mm`` was 4-10x the
    float32 GEMM; on an AVX2-only host (no int8 dot-product instructions) it runs about
    1 GMAC/s against 30-80 GMAC/s for float32 (docs/architecture.md, "int8 GEMM")."""
    fn = exact_int_mm() if USE_INT_MM else None
    if fn is None or FORCE_INT_MM:
        return fn
    return fn if int_mm_fast() else None


def exact_int_mm() -> Callable[[Any, Any], Any] | None:
    """``torch._int_mm`` (int8 x int8 -> int32) if torch has it and it is exact on this host,
    else None. Exact means a self-test against int64 numpy on worst-case operands (every
    product +-2^14, sums near 2^31, odd shapes): a kernel that saturates a 16-bit pair sum
    (AVX2 ``pmaddubsw``) or an int32 accumulator fails it."""
    if not _INT_MM:
        fn = None
        try:
            import torch

            fn = torch._int_mm
            rng = np.random.default_rng(0)
            for m, k, n in ((1, 8, 1), (37, 4099, 19), (5, INT_MM_K_MAX, 3), (130, 577, 33),
                            (1, 4099, 7), (9, 4099, 1)):
                for a, b in (
                        (np.full((m, k), -128), np.full((k, n), -128)),
                        (np.full((m, k), 127), np.full((k, n), 127)),
                        (np.full((m, k), 127), np.full((k, n), -128)),
                        (rng.choice([-128, 127], (m, k)), rng.choice([-128, 127], (k, n))),
                        (rng.integers(-128, 128, (m, k)), rng.integers(-128, 128, (k, n)))):
                    a8, b8 = a.astype(np.int8), b.astype(np.int8)
                    got = fn(torch.from_numpy(a8), torch.from_numpy(b8)).numpy()
                    if got.dtype != np.int32 or not np.array_equal(
                            got, a8.astype(I64) @ b8.astype(I64)):
                        fn = None
                        break
                if fn is None:
                    break
        except Exception:  # no torch, no _int_mm, or a kernel that refuses a shape
            fn = None
        _INT_MM.append(fn)
    return _INT_MM[0]


def int_mm_fast() -> bool:
    """Whether ``exact_int_mm()`` beats the float32 GEMM (numpy's BLAS, the float path's) on
    a conv-sized tile (``SPEED_PROBE``) here: the best of three timed calls each, after a
    warm-up, measured once per process (about 10-30 ms), with one thread each, as the
    simulator runs them (``single_threaded``: a multi-threaded BLAS on a loaded machine can
    wait a whole time slice for its second thread and lose to anything)."""
    if not _INT_MM_FAST:
        fn = exact_int_mm()
        fast = False
        if fn is not None:
            import torch

            m, k, n = SPEED_PROBE
            rng = np.random.default_rng(1)
            a8 = rng.integers(-128, 128, (m, k)).astype(np.int8)
            b8 = rng.integers(-128, 128, (k, n)).astype(np.int8)
            ta, tb = torch.from_numpy(a8), torch.from_numpy(b8)
            af, bf = a8.astype(F32), b8.astype(F32)
            out = np.empty((m, n), F32)
            with single_threaded():
                fast = _best_of(lambda: fn(ta, tb)) < _best_of(
                    lambda: np.dot(af, bf, out=out))
        _INT_MM_FAST.append(fast)
    return _INT_MM_FAST[0]


def _best_of(call: Callable[[], Any], runs: int = 3) -> float:
    call()  # warm-up
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return best


def int8_gemm(fn: Callable[[Any, Any], Any], a8: np.ndarray, b8: np.ndarray, a_zp: int,
              b_zp: int, pool: Pool) -> np.ndarray:
    """``wrap32(sum_k (a - a_zp) (b - b_zp))`` of C-contiguous int8 ``a8 (m, k)`` and
    ``b8 (k, n)``: ``a8 @ b8`` exactly in int32 (``k <= INT_MM_K_MAX``), then the zero
    points' terms ``- a_zp colsum(b) - b_zp rowsum(a) + k a_zp b_zp`` in wrapping int32
    arithmetic (exact modulo 2^32, which is all the accumulator keeps). The sums are int8 GEMMs
    with a row / column of ones too (numpy's int8 axis sums cost more than the product)."""
    import torch

    k = a8.shape[1]
    ta, tb = torch.from_numpy(a8), torch.from_numpy(b8)
    p = fn(ta, tb).numpy()
    if a_zp:
        ones = torch.from_numpy(pool.get(("ones8", 1, k), (1, k), I8, fill=1))
        p -= (a_zp * fn(ones, tb).numpy().astype(I64)).astype(np.int32)  # int64 -> int32 wraps
    if b_zp:
        ones = torch.from_numpy(pool.get(("ones8", k, 1), (k, 1), I8, fill=1))
        corr = b_zp * fn(ta, ones).numpy().astype(I64) - k * a_zp * b_zp
        p -= corr.astype(np.int32)
    return p


def _by_size(step: Step, step_int: Step, macs: int) -> Step:
    """The int8 GEMM closure for a tile of at least INT_MM_MIN_MACS products, else the float32
    one for a single sample and the int8 one for a batch (its GEMM has every sample's rows)."""
    if macs >= INT_MM_MIN_MACS:
        return step_int

    def step_small(state: MachineState) -> None:
        (step if state.batch is None else step_int)(state)
    return step_small


def with_batches(kernel_step: Step, numpy_step: Callable[[], Step | None],
                 reference: Callable[[MachineState], None]) -> Step:
    """``kernel_step`` (a compiled kernel's closure, one sample) for one sample; a batch runs
    ``numpy_step()``, made on its first use (None: ``reference``, the reference handler)."""
    numpy: list = []

    def step_kernel(state: MachineState) -> None:
        if state.batch is not None:
            if not numpy:
                numpy.append(numpy_step() or reference)
            numpy[0](state)
            return
        kernel_step(state)
    return step_kernel


# ---- CONV ----------------------------------------------------------------------------------
def _frame_parts(g: Geometry) -> tuple[int, int, slice, slice, slice, slice] | None:
    """Rows / cols of the padded frame and the (frame, tile) slices of the tile's interior."""
    rows, cols = g.needed()
    r0, r1 = max(0, -g.pt), min(g.in_h, rows - g.pt)
    c0, c1 = max(0, -g.pl), min(g.in_w, cols - g.pl)
    if r1 <= r0 or c1 <= c0:
        return None
    return (rows, cols, slice(g.pt + r0, g.pt + r1), slice(g.pl + c0, g.pl + c1),
            slice(r0, r1), slice(c0, c1))


def _shifted_gemms(state: MachineState, g: Geometry, tile: np.ndarray, wb: np.ndarray,
                   in_zp: int, w_zp: int, w8: np.ndarray, store: AccStore,
                   parts: tuple[int, int, slice, slice, slice, slice], nb: int) -> None:
    """A batch's unit-stride KxK CONV without an im2col matrix. The samples' padded frames of
    ``x - in_zp`` (float32, 0 in the padding) are laid out row by row, each frame row holding
    the ``n`` samples' rows of ``cols`` pixels one after the other, plus one spare row: flat,
    pixel (r, s, c) is ``(r n + s) cols + c``. Output pixel (y, s, x) is the sum over kernel
    positions (i, j) of ``frame[y + i dh, s, x + j dw] @ W[i, j]``, i.e. the pixel
    ``i dh n cols + j dw`` further on, so each position is one GEMM of ``oh n cols``
    consecutive flat pixels (a slice, no copy) by its ``(cin, cout)`` weights, over whole
    frame rows: the columns from ``ow`` to ``cols`` are discarded (a kept pixel only reads
    pixels of its own row; the spare row is only read for discarded ones). 1.1-2.4x the
    im2col path on ResNet-18's tiles (no 9x float32 copy of the input; one GEMM of every
    sample per position).

    Exact: each GEMM's reduction (``cin <= chunk_len``) is exact by the static bound; the
    positions are added in float32 when ``kh kw max_pixel sum |x - zp| * max |w - w_zp|`` is
    below 2^24 (every partial sum an integer below 2^24), else in float64 (integers below
    2^53). ``wb``: the weights minus ``w_zp`` (kh kw, cin, cout) as float32."""
    rows, cols, dr, dc, tr, tc = parts
    ns, cin, cout = tile.shape[0], tile.shape[-1], wb.shape[-1]
    oh, ow = g.oh, g.ow
    pool = state.pool
    bm = _int8_max_abs(w8, w_zp)
    for lo in range(0, ns, nb):
        hi = min(ns, lo + nb)
        n = hi - lo
        key = ("shifted", rows, cols, cin, cout, oh, dr.start, dr.stop, dc.start, dc.stop, n)
        frame = pool.get((*key, "frame"), (rows + 1, n, cols, cin), F32)  # border: 0
        res = pool.get((*key, "res"), (oh * n * cols, cout), F32)
        tmp = pool.get((*key, "tmp"), (oh * n * cols, cout), F32)
        _minus_zp(tile[lo:hi, tr, tc].transpose(1, 0, 2, 3), in_zp, frame[dr, :, dc])
        flat = frame.reshape(-1, cin)
        wide = g.kh * g.kw * _row_l1_max(flat, pool) * bm >= F32_EXACT
        total = np.zeros(res.shape, np.float64) if wide else res
        first, span = True, oh * n * cols
        for i in range(g.kh):
            for j in range(g.kw):
                off = i * g.dh * n * cols + j * g.dw
                b = wb[i * g.kw + j]
                if first and not wide:
                    np.dot(flat[off:off + span], b, out=res)
                else:
                    np.dot(flat[off:off + span], b, out=tmp)
                    np.add(total, tmp, out=total)
                first = False
        view = store.view(state)[lo:hi].view()
        view.shape = (n, oh, ow, cout)  # (splits the pixel axis: never a copy)
        kept = total.reshape(oh, n, cols, cout)[:, :, :ow].transpose(1, 0, 2, 3)
        _acc_write(view, kept, store.accumulate)


def _build_conv(op: Op, sram_bytes: int) -> Step | None:
    f = op.f
    g = Geometry.of(f)
    cin, cout, kk = f["cin"], f["cout"], g.kh * g.kw
    rows, cols = g.needed()
    parts = _frame_parts(g)
    if rows * cols * cin > WINDOW_FACTOR * sram_bytes or parts is None or 0 in (g.oh, g.ow):
        return None  # traps, or an all-padding tile: the reference handler
    tile_shape, tile_s = (g.in_h, g.in_w, cin), (f["in_stride_h"], f["in_stride_w"], 1)
    in_addr, in_zp, w_zp = f["in_addr"], f["in_zp"], f["w_zp"]
    w_shape, w_s = (kk, cin, cout), (f["w_stride_k"], f["w_stride_ci"], f["w_stride_co"])
    w_addr = f["w_addr"]
    k = kk * cin
    m = g.oh * g.ow
    chunk = chunk_len(in_zp, w_zp)
    store = AccStore(f, m, cout)
    # a 1x1 kernel without padding whose strided samples stay inside the tile: no frame
    direct = (kk == 1 and g.pt == 0 and g.pl == 0 and (g.oh - 1) * g.sh < g.in_h
              and (g.ow - 1) * g.sw < g.in_w)
    fr_rows, fr_cols, dr, dc, tr, tc = parts
    frame_key = ("frame", rows, cols, cin, dr.start, dr.stop, dc.start, dc.stop)
    win_shape = (g.oh, g.ow, g.kh, g.kw, cin)
    per_sample = 4 * m * k  # bytes of one sample's im2col matrix
    # weights dense in SRAM: a batch checks that they agree between samples on their bytes
    w_dense = _contiguous(w_shape, w_s, 1)
    w_lo, w_hi = extent(w_addr, w_shape, w_s, 1)

    def same_weights(sram: np.ndarray, w8: np.ndarray) -> bool:
        return _bytes_uniform(sram, w_lo, w_hi) if w_dense else _uniform(w8)
    sub_h, sub_w = slice(None, (g.oh - 1) * g.sh + 1, g.sh), slice(None, (g.ow - 1) * g.sw + 1, g.sw)
    # a batch's unit-stride KxK tile with each kernel position's reduction exact by the static
    # bound: shifted GEMMs over the flat frame instead of an im2col matrix (_shifted_gemms)
    shifted = (not direct and kk > 1 and g.sh == 1 and g.sw == 1 and cin <= chunk)
    per_sample_shifted = 4 * ((rows + 1) * cols * cin + 2 * g.oh * cols * cout)  # bytes

    def step_any(state: MachineState) -> None:
        pool, sram = state.pool, state.sram
        w8 = _view(sram, w_addr, w_shape, w_s, I8)
        if not same_weights(sram, w8):  # a batch whose samples' weights differ: the reference
            exec_conv(state, f)
            return
        w8 = w8[0]
        wb = pool.get(("w", k, cout), (kk, cin, cout), F32)
        _minus_zp(w8, w_zp, wb)
        wf = wb.reshape(k, cout)
        tile = _view(sram, in_addr, tile_shape, tile_s, I8)
        ns = tile.shape[0]
        if shifted and ns > 1:
            _shifted_gemms(state, g, tile, wb, in_zp, w_zp, w8, store, parts,
                           max(1, min(ns, BATCH_GEMM_BYTES // per_sample_shifted)))
            return
        # a batch: as many samples per GEMM as keep its im2col matrix below BATCH_GEMM_BYTES
        nb = 1 if ns == 1 else max(1, min(ns, BATCH_GEMM_BYTES // per_sample))
        a_all = pool.get(("cols", nb, m, k), (nb * m, k), F32)
        out_all = pool.get(("out", nb, m, cout), (nb * m, cout), F32)
        frame_all = None if direct else pool.get((*frame_key, nb), (nb, rows, cols, cin), F32)
        bmax = lambda: _int8_max_abs(w8, w_zp)  # noqa: E731
        for lo in range(0, ns, nb):
            hi = min(ns, lo + nb)
            a = a_all[:(hi - lo) * m]
            if direct:
                np.subtract(tile[lo:hi, sub_h, sub_w], in_zp,
                            out=a.reshape(hi - lo, g.oh, g.ow, cin), dtype=F32)
                l1 = lambda a=a: _row_l1_max(a, pool)  # noqa: E731
            else:
                assert frame_all is not None  # not direct: a pooled frame
                frame = frame_all[:hi - lo]
                _minus_zp(tile[lo:hi, tr, tc], in_zp, frame[:, dr, dc])
                s0, s1, s2, s3 = frame.strides
                win = np.ndarray((hi - lo, *win_shape), F32, buffer=frame_all,
                                 strides=(s0, g.sh * s1, g.sw * s2, g.dh * s1, g.dw * s2, s3))
                np.copyto(a.reshape(hi - lo, *win_shape), win)
                # a window's sum of |x - zp| is at most kh * kw times the largest per-pixel sum
                l1 = lambda frame=frame: kk * _row_l1_max(frame.reshape(-1, cin), pool)  # noqa: E731
            store(state, _exact_gemm(a, wf, out_all[:(hi - lo) * m], chunk, l1, bmax),
                  slice(lo, hi))

    def make(state: MachineState) -> tuple:
        pool, sram = state.pool, state.sram
        w8 = _view(sram, w_addr, w_shape, w_s, I8)[0]
        wb = pool.get(("w", k, cout), (kk, cin, cout), F32)
        tile = _view(sram, in_addr, tile_shape, tile_s, I8)[0]
        a = pool.get(("cols", 1, m, k), (m, k), F32)
        out = pool.get(("out", 1, m, cout), (m, cout), F32)
        acc = store.view(state)[0]
        if direct:
            return (w8, wb, tile[sub_h, sub_w], a.reshape(g.oh, g.ow, cin), None, a, out, acc)
        frame = pool.get((*frame_key, 1), (1, rows, cols, cin), F32)
        s0, s1, s2, s3 = frame.strides
        win = np.ndarray(win_shape, F32, buffer=frame,
                         strides=(g.sh * s1, g.sw * s2, g.dh * s1, g.dw * s2, s3))
        return (w8, wb, tile[tr, tc], frame[0, dr, dc], (win, a.reshape(win_shape),
                                                         frame.reshape(-1, cin)), a, out, acc)
    views = Views(make)
    accumulate = store.accumulate
    # a reduction no longer than chunk is exact in one float32 GEMM, straight into an
    # overwritten accumulator (``_exact_gemm`` / ``_acc_write`` without their checks)
    plain = k <= chunk and not accumulate
    # the int8 GEMM: the padding must be representable (it is in_zp, contributing 0)
    mm = int_mm() if -128 <= in_zp <= 127 and k <= INT_MM_K_MAX else None
    batch_step: list = [step_any]  # step_int once defined: a batch's GEMM has every sample

    def step(state: MachineState) -> None:
        """``step`` for one sample, its views kept (``Views``)."""
        if state.batch is not None:
            batch_step[0](state)
            return
        w8, wb, src, dst, frame_parts, a, out, acc = views.get(state)
        _minus_zp(w8, w_zp, wb)
        _minus_zp(src, in_zp, dst)
        if frame_parts is not None:
            np.copyto(frame_parts[1], frame_parts[0])
        if plain:
            np.dot(a, wb.reshape(k, cout), out=out)
            np.copyto(acc, out, casting="unsafe")  # exact integers below 2^24
            return
        pool = state.pool
        if frame_parts is None:
            l1 = lambda: _row_l1_max(a, pool)  # noqa: E731
        else:
            l1 = lambda: kk * _row_l1_max(frame_parts[2], pool)  # noqa: E731
        _acc_write(acc, _exact_gemm(a, wb.reshape(k, cout), out, chunk, l1,
                                    lambda: _int8_max_abs(w8, w_zp)), accumulate)

    if mm is None:
        return step
    frame8_key = (*frame_key, "i8", in_zp)

    def step_int(state: MachineState) -> None:
        pool, sram = state.pool, state.sram
        w8 = _view(sram, w_addr, w_shape, w_s, I8)
        if not same_weights(sram, w8):
            exec_conv(state, f)
            return
        wc = pool.get(("w8", k, cout), (kk, cin, cout), I8)
        np.copyto(wc, w8[0])
        wc = wc.reshape(k, cout)
        tile = _view(sram, in_addr, tile_shape, tile_s, I8)
        ns = tile.shape[0]
        nb = 1 if ns == 1 else max(1, min(ns, BATCH_GEMM_BYTES // (m * k)))
        a_all = pool.get(("cols8", nb, m, k), (nb * m, k), I8)
        # the frame's border is in_zp, written once (every user of the key writes the interior)
        frame_all = None if direct else pool.get((*frame8_key, nb), (nb, rows, cols, cin), I8,
                                                 fill=in_zp)
        for lo in range(0, ns, nb):
            hi = min(ns, lo + nb)
            a = a_all[:(hi - lo) * m]
            if direct:
                np.copyto(a.reshape(hi - lo, g.oh, g.ow, cin), tile[lo:hi, sub_h, sub_w])
            else:
                assert frame_all is not None  # not direct: a pooled frame
                frame = frame_all[:hi - lo]
                np.copyto(frame[:, dr, dc], tile[lo:hi, tr, tc])
                s0, s1, s2, s3 = frame.strides
                win = np.ndarray((hi - lo, *win_shape), I8, buffer=frame_all,
                                 strides=(s0, g.sh * s1, g.sw * s2, g.dh * s1, g.dw * s2, s3))
                np.copyto(a.reshape(hi - lo, *win_shape), win)
            store(state, int8_gemm(mm, a, wc, in_zp, w_zp, pool), slice(lo, hi))
    batch_step[0] = step_int
    return step_int if m * k * cout >= INT_MM_MIN_MACS else step


# ---- POOL ----------------------------------------------------------------------------------
def _build_pool(op: Op, sram_bytes: int) -> Step | None:
    """POOL over a padded frame in the input's type (MAX: padding = the type's minimum, which
    never wins over the window's valid elements; AVG: int32 sums, exact for <= 225 int16) as
    one whole-tile operation per kernel position, then the reference's rounding division."""
    f = op.f
    g = Geometry.of(f)
    ch, dt = f["ch"], NP_DTYPE[f["dtype"]]
    rows, cols = g.needed()
    parts = _frame_parts(g)
    if rows * cols * ch > WINDOW_FACTOR * sram_bytes or parts is None or 0 in (g.oh, g.ow):
        return None
    vr, vc = g.valid_counts()
    if not vr.all() or not vc.all():
        return None  # some window lies in the padding: the reference traps
    in_addr, tile_shape = f["in_addr"], (g.in_h, g.in_w, ch)
    tile_s = (f["in_stride_h"], f["in_stride_w"], dt.itemsize)
    out_addr, out_shape = f["out_addr"], (g.oh, g.ow, ch)
    out_s = (f["out_stride_h"], f["out_stride_w"], dt.itemsize)
    is_max = f["op"] == PoolOp.MAX
    info = np.iinfo(dt)
    fill, acc_dt = (int(info.min), dt) if is_max else (0, np.dtype(np.int32))
    counts = (vr[:, None] * vc[None, :])[:, :, None].astype(I64)
    lo, hi = f["act_min"], f["act_max"]
    native = info.min <= lo <= info.max and info.min <= hi <= info.max  # clamp in the type
    _, _, dr, dc, tr, tc = parts
    frame_key = ("pframe", acc_dt.str, fill, rows, cols, ch, dr.start, dr.stop, dc.start,
                 dc.stop)
    positions = [(ky * g.dh, kx * g.dw) for ky in range(g.kh) for kx in range(g.kw)]
    combine = np.maximum if is_max else np.add

    def step(state: MachineState) -> None:
        pool = state.pool
        tile = _view(state.sram, in_addr, tile_shape, tile_s, dt)
        ns = tile.shape[0]
        frame = pool.get((*frame_key, ns), (ns, rows, cols, ch), acc_dt, fill=fill)
        np.copyto(frame[:, dr, dc], tile[:, tr, tc])
        s0, s1, s2, s3 = frame.strides
        res = pool.get(("pool", acc_dt.str, ns, *out_shape), (ns, *out_shape), acc_dt)
        for j, (oy, ox) in enumerate(positions):
            win = np.ndarray((ns, *out_shape), acc_dt, buffer=frame, offset=oy * s1 + ox * s2,
                             strides=(s0, g.sh * s1, g.sw * s2, s3))
            if j == 0:
                np.copyto(res, win)
            else:
                combine(res, win, out=res)
        y = res if is_max else rounding_div(res, counts)
        out = _view(state.sram, out_addr, out_shape, out_s, dt)
        if is_max and native:
            np.maximum(y, dt.type(lo), out=out)
            np.minimum(out, dt.type(hi), out=out)
        else:
            out[...] = np.clip(y.astype(I64), lo, hi)
    return step


# ---- COPY (ELTWISE, LUT: tessel.sim.fastvec; REDUCE, UNARY: tessel.sim.fastreduce) ------------


def _build_copy(op: Op) -> Step | None:
    f = op.f
    dt = NP_DTYPE[f["dtype"]]
    shape = tuple(f[f"d{k}"] for k in (3, 2, 1, 0))
    if 0 in shape:
        return None
    src_s = tuple(f[f"src_s{k}"] for k in (3, 2, 1, 0))
    dst_s = tuple(f[f"dst_s{k}"] for k in (3, 2, 1, 0))
    sa, da = f["src_addr"], f["dst_addr"]
    s_lo, s_hi = extent(sa, shape, src_s, dt.itemsize)
    d_lo, d_hi = extent(da, shape, dst_s, dt.itemsize)
    disjoint = s_hi <= d_lo or d_hi <= s_lo  # else every read first, as the reference
    n = int(np.prod(shape)) * dt.itemsize
    if disjoint and _contiguous(shape, src_s, dt.itemsize) and \
            _contiguous(shape, dst_s, dt.itemsize):
        def step_bytes(state: MachineState) -> None:
            state.sram[..., da:da + n] = state.sram[..., sa:sa + n]
        return step_bytes

    def step(state: MachineState) -> None:
        x = _eview(state.sram, sa, shape, src_s, dt)
        _eview(state.sram, da, shape, dst_s, dt)[...] = x if disjoint else x.copy()
    return step


# ---- the table -----------------------------------------------------------------------------
def _fastvec(name: str) -> Any:
    """``tessel.sim.fastvec`` (ELTWISE, LUT), ``fastmatmul`` (MATMUL), ``fastreduce``
    (REDUCE, UNARY), ``kern_conv`` (CONV), ``kern_dw`` (DWCONV), ``kern_rq`` (REQUANT) or
    ``kern_pool`` (POOL), imported when first used: they build on this module's helpers (the
    ``kern_*`` ones run compiled kernels, or ``_build_conv`` / ``fastdw`` / ``fastrq`` /
    ``_build_pool`` when kernels are off)."""
    return importlib.import_module(f"tessel.sim.{name}")


BUILDERS: dict[Opcode, Callable[[Op, PreparedProgram], Step | None]] = {
    Opcode.DMA_LOAD: lambda op, prep: _build_dma(op),
    Opcode.DMA_STORE: lambda op, prep: _build_dma(op),
    Opcode.CONV: lambda op, prep: _fastvec("kern_conv").build(op, prep.arch.onchip.sram_bytes),
    Opcode.DWCONV: lambda op, prep: _fastvec("kern_dw").build_dwconv(
        op, prep.arch.onchip.sram_bytes, prep.cache.setdefault("dw_weights", {})),
    Opcode.MATMUL: lambda op, prep: _fastvec("fastmatmul").build_matmul(op),
    Opcode.POOL: lambda op, prep: _fastvec("kern_pool").build_pool(op, prep),
    Opcode.LUT: lambda op, prep: _fastvec("fastvec").build_lut(
        op, prep.cache.setdefault("lut_tables", {})),
    Opcode.COPY: lambda op, prep: _build_copy(op),
    Opcode.REDUCE: lambda op, prep: _fastvec("fastreduce").build_reduce(op),
    Opcode.UNARY: lambda op, prep: _fastvec("fastreduce").build_unary(op),
    Opcode.ELTWISE: lambda op, prep: _fastvec("fastvec").build_eltwise(
        op, prep.cache.setdefault("elt_tables", {})),
    Opcode.REQUANT: lambda op, prep: _fastvec("kern_rq").build_requant(op, prep.cache),
}


def build_step(op: Op, prep: PreparedProgram) -> Step | None:
    """The closure of one instruction, or None: run the reference handler."""
    if op.error is not None:
        return None
    builder = BUILDERS.get(op.opcode)
    return None if builder is None else builder(op, prep)


def fast_steps(prep: PreparedProgram) -> tuple[tuple[Step | None, ...], ...]:
    """Per queue, per instruction: its closure (None for control and reference-handled
    instructions); built once per prepared program."""
    hit = prep.cache.get("fast_steps")
    if hit is None:
        hit = prep.cache["fast_steps"] = tuple(
            tuple(None if op.opcode in (Opcode.WAIT, Opcode.SIGNAL, Opcode.END)
                  else build_step(op, prep) for op in q)
            for q in prep.queues)
    return hit
