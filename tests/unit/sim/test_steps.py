"""What the instructions' steps keep between runs (views, pooled buffers, packed operands,
parameter and value tables) follows the memories: a state run again with new contents, fresh
states on one program, threads sharing a program and batches all equal a run on a fresh
program; and the int8 GEMM is only used where its self-test proves it exact."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from simkit import ARCH, I, program
from test_sim_batch import CASES

from tessel.isa import DType, Engine, Opcode
from tessel.isa.fields import AccMode
from tessel.sim import gemm
from tessel.sim.functional import run_functional
from tessel.sim.hostmem import (
    PackCache,
    Pool,
    PoolKept,
    bytes_uniform,
    memory_tensor,
    memory_view,
)
from tessel.sim.prepare import prepare
from tessel.sim.state import MachineState

MX, V, DI, DO = Engine.MATRIX, Engine.VECTOR, Engine.DMA_IN, Engine.DMA_OUT
_STRIDED = dict(dtype=DType.I16, d0=10, d1=7, ext_s0=2, ext_s1=40, sram_s0=2, sram_s1=20)
_MORE = {
    "dma_strided": {DI: [I(Opcode.DMA_LOAD, mem=0, ext_addr=100, sram_addr=40_000, **_STRIDED)],
                    DO: [I(Opcode.DMA_STORE, mem=0, ext_addr=200_000, sram_addr=300,
                           **_STRIDED)]},
    "matmul_big": {MX: [I(Opcode.MATMUL, m=37, n=13, k=300, a_addr=0, a_stride_m=300, a_zp=5,
                          b_zp=-3, b_addr=20_000, b_stride_k=13, acc_addr=0, acc_stride=13)]},
    "conv_big": {MX: [I(Opcode.CONV, in_addr=0, in_h=16, in_w=16, in_stride_h=16 * 32,
                        in_stride_w=32, cin=32, in_zp=-128, kh=3, kw=3, pad_top=1,
                        pad_left=1, out_h=16, out_w=16, cout=64, w_addr=30_000,
                        w_stride_k=32 * 64, w_stride_ci=64, w_stride_co=1, acc_addr=0,
                        acc_stride=64, mode=AccMode.ACCUMULATE)]},
}
ALL = {**CASES, **_MORE}


def _state(seed: int) -> MachineState:
    st = MachineState(ARCH)
    rng = np.random.default_rng(seed)
    st.sram[:65536] = rng.integers(0, 256, 65536, dtype=np.uint8)
    params = np.stack([rng.integers(-(2**20), 2**20, 64), rng.integers(2**30, 2**31, 64),
                       rng.integers(-31, 5, 64)]).astype(np.int32)
    st.sram[2000:2000 + params.nbytes] = params.view(np.uint8).reshape(-1)
    st.acc_bytes[:] = rng.integers(0, 256, st.acc_bytes.size, dtype=np.uint8)
    st.lut_bytes[:] = rng.integers(0, 256, st.lut_bytes.size, dtype=np.uint8)
    st.offchip[0][:1 << 20] = rng.integers(0, 256, 1 << 20, dtype=np.uint8)
    return st


def _memories(st: MachineState) -> tuple[bytes, ...]:
    return (st.sram.tobytes(), st.acc_bytes.tobytes(), st.lut_bytes.tobytes(),
            st.offchip[0][:1 << 20].tobytes())


def _fresh(streams: dict, seed: int) -> tuple[bytes, ...]:
    """The memories after a run on a fresh program (nothing kept from any run before)."""
    st = _state(seed)
    run_functional(prepare(program(streams), ARCH), st)
    return _memories(st)


def _refill(dst: MachineState, seed: int) -> None:
    src = _state(seed)
    for name in ("sram", "acc_bytes", "lut_bytes"):
        getattr(dst, name)[...] = getattr(src, name)
    dst.offchip[0][:1 << 20] = src.offchip[0][:1 << 20]


@pytest.mark.parametrize("case", sorted(ALL))
def test_one_state_run_again_with_new_contents(case):
    """One state run again and again with other contents (``NpuSession(reuse=True)``), fresh
    states alternating with it on the same program (``simulate``): each equals a fresh
    program's run."""
    prep = prepare(program(ALL[case]), ARCH)
    reused = MachineState(ARCH)
    for seed in (3, 4, 5, 6):
        if seed % 2:
            _refill(reused, seed)
            st = reused
        else:
            st = _state(seed)
        run_functional(prep, st)
        assert _memories(st) == _fresh(ALL[case], seed), seed


def test_threads_sharing_a_program_keep_their_own_views():
    """Threads running one prepared program on their own states (each reused run after run)
    equal a fresh program's run."""
    streams = {MX: CASES["conv"][MX] + _MORE["matmul_big"][MX],
               V: CASES["requant"][V] + CASES["dwconv"][V] + CASES["lut16"][V],
               DI: _MORE["dma_strided"][DI], DO: _MORE["dma_strided"][DO]}
    prep = prepare(program(streams), ARCH)
    want = {seed: _fresh(streams, seed) for seed in range(4)}
    bad: list = []

    def worker(seed: int) -> None:
        st = MachineState(ARCH)
        for _ in range(10):
            _refill(st, seed)
            run_functional(prep, st)
            if _memories(st) != want[seed]:
                bad.append(seed)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_pool_kept_once_per_pool_that_keeps_its_buffers():
    """``PoolKept``: made once per pool without a limit (a new state on the same pool reuses
    it), made on every call for a pool that may drop its buffers (a batch's)."""
    calls: list = []
    kept = PoolKept(lambda pool: calls.append(pool) or len(calls))
    one, other, limited = Pool(), Pool(), Pool(limit=1 << 20)
    assert [kept.get(one), kept.get(one), kept.get(other), kept.get(one)] == [1, 1, 2, 3]
    assert [kept.get(limited), kept.get(limited)] == [4, 5]
    assert kept.get(one) == 3  # a limited pool's calls left the kept one in place


def test_pack_cache_drops_least_recently_used_entries_past_its_limit():
    """``PackCache`` counts an entry's bytes and arrays (a view of another of its arrays
    once) and, past its limit, drops the entries used longest ago, never the newest."""
    def entry(n: int) -> tuple:
        buf = np.zeros(n, np.float32)
        return (bytes(n), buf.reshape(n, 1), buf)  # 5n bytes: the view is not counted

    packs = PackCache(limit=1000)
    for key in "abc":
        packs.put(key, entry(60))
    assert packs.nbytes == 900 and list(packs.entries) == ["a", "b", "c"]
    assert packs.get("a") is not None  # now the most recent
    packs.put("d", entry(60))  # 1200 > 1000: "b" goes
    assert list(packs.entries) == ["c", "a", "d"] and packs.nbytes == 900
    packs.put("c", entry(20))  # a replacement is counted once
    assert packs.nbytes == 700 and packs.get("b") is None
    packs.put("e", entry(400))  # larger than the limit alone: kept, all others dropped
    assert list(packs.entries) == ["e"] and packs.nbytes == 2000


def test_memory_views_are_one_per_state_and_key():
    """``memory_view`` / ``memory_tensor``: one object per (state, key), another state's own,
    both reading the memory as it is now; a tensor of a 1 x k operand gets dense strides."""
    one, two = MachineState(ARCH), MachineState(ARCH)
    key = ("sram", 64, (3, 5), (7, 1), np.dtype(np.int8))
    assert memory_view(one, key) is memory_view(one, key)
    assert memory_view(two, key) is not memory_view(one, key)
    assert memory_tensor(one, key) is memory_tensor(one, key)
    one.sram[64 + 7 * 2 + 4] = 0xFF
    assert memory_view(one, key)[0, 2, 4] == -1 and int(memory_tensor(one, key)[2, 4]) == -1
    assert memory_view(two, key)[0, 2, 4] == 0
    row = ("sram", 64, (1, 5), (1, 1), np.dtype(np.int8))
    assert memory_tensor(one, row).stride() == (5, 1)


@pytest.mark.parametrize("where", [0, 1, 7, 8, 300, 646, 647])
def test_bytes_uniform_sees_one_differing_byte(where):
    buf = np.zeros((3, 30_000), np.uint8)
    buf[:, 20_000:20_648] = np.arange(648, dtype=np.uint8)
    assert bytes_uniform(buf, 20_000, 20_648)
    buf[2, 20_000 + where] ^= 0x5A
    assert not bytes_uniform(buf, 20_000, 20_648)
    assert bytes_uniform(buf, 20_000, 20_000 + where) and bytes_uniform(buf[:2], 20_000, 20_648)


def test_int_mm_self_test_refuses_a_wrong_kernel(monkeypatch):
    """A kernel that saturates like AVX2's 16-bit pair sums is refused by the self-test."""
    import torch

    def saturating(a, b, out=None):
        r = torch.clamp(torch.mm(a.to(torch.int64), b.to(torch.int64)), -2**20,
                        2**20).to(torch.int32)
        if out is not None:
            out.copy_(r)
        return r

    for name in ("_INT_MM", "_INT_MM_OUT", "_INT_MM_FAST"):
        monkeypatch.setattr(gemm, name, [])
    monkeypatch.setattr(torch, "_int_mm", saturating)
    assert gemm.exact_int_mm() is None and gemm.int_mm() is None


def test_int_mm_exact_but_slower_than_float32_is_not_used(monkeypatch):
    """An exact int8 GEMM slower than the float32 one here (AVX2 hosts: ~1 vs 30-80 GMAC/s)
    passes the self-test but the float32 GEMMs are kept; tests can force it."""
    import time

    import torch

    def exact_but_slow(a, b, out=None):
        time.sleep(0.005)  # a 256x576x64 float32 GEMM takes well under 5 ms on any host
        r = torch.mm(a.to(torch.int64), b.to(torch.int64)).to(torch.int32)
        if out is not None:
            out.copy_(r)
        return r

    for name in ("_INT_MM", "_INT_MM_OUT", "_INT_MM_FAST"):
        monkeypatch.setattr(gemm, name, [])
    monkeypatch.setattr(torch, "_int_mm", exact_but_slow)
    assert gemm.exact_int_mm() is exact_but_slow and gemm.int_mm_out() is exact_but_slow
    assert not gemm.int_mm_fast()
    assert gemm.int_mm() is None
    monkeypatch.setattr(gemm, "FORCE_INT_MM", True)
    assert gemm.int_mm() is exact_but_slow
