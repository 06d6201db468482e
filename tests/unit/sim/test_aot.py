"""tessel.sim.aot: a kernel with a signature is built ahead of time into the kernel cache once,
loaded from it by later processes without importing numba, computes what its Python source
computes, is built again when its module is damaged, and falls back to numba's just-in-time
compile when it cannot be built or the cache is off."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tessel.sim import aot, jit


@jit.helper
def _twice(v):
    return v * 2


def _sum_twice(x, k, out):
    """out[0] = sum of 2 * x[i] + k."""
    s = 0
    for i in range(x.shape[0]):
        s += _twice(x[i]) + k
    out[0] = s


SIGNATURE = "void(i8[:], i8, i8[:])"


def _check(kernel: jit.Kernel) -> None:
    x = np.arange(-7, 50, dtype=np.int64)
    want, got = np.zeros(1, np.int64), np.zeros(1, np.int64)
    kernel.py(x, 3, want)
    kernel.compiled(x, 3, got)
    assert got[0] == want[0] == int((2 * x + 3).sum())


@pytest.mark.xdist_group("aot_build")
def test_built_once_loaded_after_and_built_again_when_damaged(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(aot.ENV, str(tmp_path))
    first = jit.Kernel(_sum_twice, SIGNATURE)
    assert not aot.built(first)
    with caplog.at_level(logging.INFO, logger=aot.LOGGER.name):
        _check(first)
    assert aot.built(first) and aot.built(jit.Kernel(_sum_twice, SIGNATURE))
    assert not aot.built(jit.Kernel(_sum_twice))  # (no signature: never built ahead of time)
    assert first.form is jit.Form.AHEAD_OF_TIME
    assert "building kernel _sum_twice ahead of time" in caplog.text  # (said, once per machine)
    caplog.clear()
    [built] = list(tmp_path.glob(f"*/{aot.module_name(first)}*"))
    assert built.parent.name == aot.key(first)
    assert [p.name for p in tmp_path.iterdir()] == [aot.key(first)]  # (no temporary folder)

    # a second kernel object of the same source: loaded from the cache, not built
    def no_build(*_a):
        raise AssertionError("built again")
    with monkeypatch.context() as mp:
        mp.setattr(aot, "_build", no_build)
        second = jit.Kernel(_sum_twice, SIGNATURE)
        _check(second)
        assert second.form is jit.Form.AHEAD_OF_TIME

    # damaged (in another cache folder: this process holds the first module mapped, and
    # loads a module once per path): built again, with a warning
    other = tmp_path / "other"
    damaged = other / built.relative_to(tmp_path)
    damaged.parent.mkdir(parents=True)
    damaged.write_bytes(b"not an extension module")
    monkeypatch.setenv(aot.ENV, str(other))
    with caplog.at_level(logging.WARNING, logger=aot.LOGGER.name):
        third = jit.Kernel(_sum_twice, SIGNATURE)
        _check(third)
    assert third.form is jit.Form.AHEAD_OF_TIME
    assert "does not load" in caplog.text and "building it again" in caplog.text
    assert damaged.read_bytes()[:4] == b"\x7fELF"


def test_cache_off_or_a_failed_build_leaves_the_kernel_to_numba(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(aot.ENV, "off")
    off = jit.Kernel(_sum_twice, SIGNATURE)
    _check(off)
    assert not aot.built(off)
    assert off.form is jit.Form.JUST_IN_TIME

    monkeypatch.setenv(aot.ENV, str(tmp_path))
    monkeypatch.setitem(sys.modules, "numba.pycc", None)  # (numba without pycc)
    with caplog.at_level(logging.INFO, logger=aot.LOGGER.name):
        failed = jit.Kernel(_sum_twice, SIGNATURE)
        _check(failed)
    assert failed.form is jit.Form.JUST_IN_TIME
    assert "no ahead-of-time build" in caplog.text and "numba.pycc" in caplog.text
    assert list(tmp_path.iterdir()) == []  # (nothing half-built left)


def test_the_key_changes_with_the_signature():
    a = jit.Kernel(_sum_twice, SIGNATURE)
    b = jit.Kernel(_sum_twice, "void(i8[::1], i8, i8[::1])")
    assert aot.key(a) != aot.key(b) and aot.key(a) == aot.key(jit.Kernel(_sum_twice, SIGNATURE))


def test_a_process_times_with_the_timing_rules_without_importing_numba():
    """The timing rules' compiled form (tessel.sim.clock, built ahead of time in the user's
    kernel cache by this process first, if not there) is loaded and run by a new process that
    never imports numba."""
    from tessel.sim import clock

    assert (clock.run_arrays.compiled is not None
            and clock.run_arrays.form is jit.Form.AHEAD_OF_TIME)
    code = textwrap.dedent("""
        import sys
        import numpy as np
        from tessel.sim import clock, jit
        # one WORK row (term 0: 5 cycles) on MATRIX, nothing else
        rows = np.array([clock.ROW_WORK, 0, 0, 0, 0, 0, 0, 0], np.int64)
        out, _, _ = clock.time_rows(rows, np.array([0, 0, 1, 1, 1], np.int64),
                                    np.zeros(1, np.int64), [5], [0], 2, compiled=True)
        assert clock.run_arrays.form is jit.Form.AHEAD_OF_TIME, clock.run_arrays.form
        assert "numba" not in sys.modules
        print(int(out[clock.OUT_TOP] - out[clock.OUT_FIRST]),
              int(out[clock.OUT_BUSY + clock.MATRIX]))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["5", "5"]


@pytest.mark.xdist_group("aot_build")
def test_concurrent_builds_leave_one_module_and_a_killed_build_leaves_nothing(tmp_path):
    """Two processes building the same kernel into an empty cache at once: both get it, one
    module is left and no temporary folder; the temporary folder of a build whose process is
    gone is removed by the next build."""
    kernel = jit.Kernel(_sum_twice, SIGNATURE)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    orphan = tmp_path / f".{aot.key(kernel)}.{dead}.abc123"
    orphan.mkdir()
    (orphan / "half.o").write_bytes(b"\0")
    code = textwrap.dedent("""
        import sys
        import numpy as np
        sys.path.insert(0, sys.argv[1])
        from test_aot import SIGNATURE, _sum_twice
        from tessel.sim import jit
        k = jit.Kernel(_sum_twice, SIGNATURE)
        out = np.zeros(1, np.int64)
        k.compiled(np.arange(4, dtype=np.int64), 1, out)
        print(k.form.name, int(out[0]))
    """)
    env = {**os.environ, aot.ENV: str(tmp_path)}
    here = str(Path(__file__).parent)
    procs = [subprocess.Popen([sys.executable, "-c", code, here], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert out.split() == ["AHEAD_OF_TIME", str(2 * 6 + 4)]
    assert [p.name for p in tmp_path.iterdir()] == [aot.key(kernel)]
    assert len(list((tmp_path / aot.key(kernel)).iterdir())) == 1


def test_no_home_folder_leaves_the_kernel_to_numba(monkeypatch, caplog):
    monkeypatch.delenv(aot.ENV, raising=False)

    def no_home():
        raise RuntimeError("Could not determine home directory.")
    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    with caplog.at_level(logging.INFO, logger=aot.LOGGER.name):
        k = jit.Kernel(_sum_twice, SIGNATURE)
        _check(k)
    assert k.form is jit.Form.JUST_IN_TIME and "no kernel cache" in caplog.text
