"""tessel.sim.jit: kernels compile lazily, compute what their Python source computes, and the
environment switch turns them off."""

import numpy as np
import pytest

from tessel.sim import jit


@jit.kernel
def _rounding_shift(acc, mult, shift, out):
    for i in range(acc.shape[0]):
        v = np.int64(acc[i]) * mult
        out[i] = (v + (np.int64(1) << (shift - 1))) >> shift


def test_a_kernel_computes_what_its_python_source_computes():
    rng = np.random.default_rng(0)
    acc = rng.integers(-2**31, 2**31, 4096, dtype=np.int64).astype(np.int32)
    want = np.empty(acc.shape, np.int64)
    got = np.empty(acc.shape, np.int64)
    _rounding_shift.py(acc, np.int64(1 << 30), np.int64(31), want)
    _rounding_shift(acc, np.int64(1 << 30), np.int64(31), got)
    np.testing.assert_array_equal(got, want)
    exact = (acc.astype(object) * (1 << 30) + (1 << 30)) >> 31  # Python ints: no wrap-around
    np.testing.assert_array_equal(got, exact.astype(np.int64))


@jit.helper
def _halve(v):
    return v >> 1


@jit.kernel
def _halves(x, out):
    for i in range(x.shape[0]):
        out[i] = _halve(x[i])


def test_a_kernel_calls_its_helpers_compiled_and_uncompiled():
    x = np.arange(-5, 6, dtype=np.int64)
    want, got = np.empty_like(x), np.empty_like(x)
    _halves.py(x, want)
    _halves(x, got)
    np.testing.assert_array_equal(want, x >> 1)
    np.testing.assert_array_equal(got, x >> 1)
    assert _halve(np.int64(7)) == 3  # still the plain function


def test_kernels_are_compiled_once_and_lazily():
    k = jit.kernel(_rounding_shift.py)
    assert k._compiled is None
    assert k.compiled is k.compiled


@pytest.mark.parametrize("value", ["0", "off", "False"])
def test_the_environment_switch_turns_kernels_off(monkeypatch, value):
    monkeypatch.setenv(jit.ENV, value)
    assert not jit.enabled()
    monkeypatch.setenv(jit.ENV, "1")
    assert jit.enabled()


@pytest.mark.parametrize("dtype", [np.int8, np.int32])
def test_a_bound_kernel_runs_the_machine_code_of_its_argument_types(dtype):
    """``jit.bound``: the call of no arguments goes to the compiled code of exactly these
    types (compiled now for a type not seen yet), not through numba's dispatch, and computes
    what the dispatched call computes."""
    x = np.arange(-50, 50, dtype=dtype)
    want, got = np.empty(x.shape, np.int64), np.empty(x.shape, np.int64)
    kernel = _halves.compiled
    call = jit.bound(kernel, x, got)
    assert call.func is not kernel  # the entry point itself
    call()
    kernel(x, want)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, x.astype(np.int64) >> 1)


def test_bound_calls_a_plain_function_as_it_is():
    out = []
    call = jit.bound(lambda a, b: out.append(a + b), 2, 3)
    call()
    assert out == [5]
