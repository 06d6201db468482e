"""DVFS policies over a feasibility callback, and the average power of a window at a point."""

from __future__ import annotations

import itertools

import pytest

from tessel.arch import load_preset
from tessel.arch.dvfs import DvfsPolicy, average_power_mw, choose_point
from tessel.arch.types import OperatingPoint
from tessel.errors import TesselConfigError

S = load_preset("tnpu-s")
POINTS = S.operating_points  # quarter, half, nominal


def _deadline_check(cycles: int, deadline_s: float, asked: list[str]):
    def feasible(p: OperatingPoint) -> bool:
        asked.append(p.name)
        return cycles / p.clock_hz <= deadline_s
    return feasible


@pytest.mark.parametrize("cycles", [10_000, 200_000, 300_000, 600_000, 2_000_000])
def test_slowest_is_the_slowest_point_meeting_the_deadline(cycles: int) -> None:
    deadline = 1e-3
    asked: list[str] = []
    choice = choose_point(POINTS, DvfsPolicy.SLOWEST, _deadline_check(cycles, deadline, asked))
    meeting = [p for p in POINTS if cycles / p.clock_hz <= deadline]  # brute force
    if meeting:
        assert choice.feasible and choice.point == min(meeting, key=lambda p: p.clock_hz)
    else:
        assert not choice.feasible and choice.point == POINTS[-1]
    # asked from the slowest up, stopping at the first feasible point
    assert asked == [p.name for p, _ in choice.tried]
    assert asked == [p.name for p in POINTS][:len(asked)]
    assert choice.idle_gated is False


def test_race_runs_the_fastest_point_and_gates_idle() -> None:
    asked: list[str] = []
    choice = choose_point(tuple(reversed(POINTS)), DvfsPolicy.RACE,
                          _deadline_check(2_000_000, 1e-3, asked))
    assert choice.point == S.point("nominal") and asked == ["nominal"]
    assert choice.feasible is False and choice.idle_gated


def test_slowest_does_not_assume_feasibility_grows_with_the_clock() -> None:
    choice = choose_point(POINTS, DvfsPolicy.SLOWEST, lambda p: p.name == "half")
    assert choice.point.name == "half" and [ok for _, ok in choice.tried] == [False, True]
    with pytest.raises(TesselConfigError, match="no operating points"):
        choose_point((), DvfsPolicy.RACE, lambda p: True)


def test_average_power_by_hand() -> None:
    e = S.energy
    work = {"mac": 1e6 * e.mac_int8_pj, "lpddr": 1e4 * e.lpddr_byte_pj, "static": 123.0}
    half = S.point("half")
    busy, window = 250_000, 1e-2  # 0.5 ms busy at 500 MHz in a 10 ms window
    dyn = (half.voltage_v / S.voltage_v) ** 2
    leak = e.static_power_mw * half.voltage_v / S.voltage_v
    expected_dyn_mw = (work["mac"] * dyn + work["lpddr"]) * 1e-9 / window
    gated = average_power_mw(work, busy, window, S, half, idle_gated=True)
    always = average_power_mw(work, busy, window, S, half, idle_gated=False)
    assert gated == pytest.approx(expected_dyn_mw + leak * 0.05)
    assert always == pytest.approx(expected_dyn_mw + leak)
    with pytest.raises(TesselConfigError, match="more than the"):
        average_power_mw(work, 10_000_000, window, S, half, idle_gated=True)
    with pytest.raises(TesselConfigError, match="window must be positive"):
        average_power_mw(work, busy, 0.0, S, half, idle_gated=True)


def test_slowest_beats_race_on_npu_bound_work_and_not_always() -> None:
    """Heavy on-chip work (100 mW of it) is cheaper at the lower voltage even though the slow
    point leaks through its idle time; with off-chip bytes only nothing scales, and race
    (power-gated when idle) leaks less. Light work: race wins too (leakage dominates)."""
    window = 1e-2
    for work, slowest_wins in (({"mac": 1e9}, True), ({"lpddr": 1e9}, False),
                               ({"mac": 1e7}, False)):
        cycles = 1_000_000
        race = average_power_mw(work, cycles, window, S, S.point("nominal"), idle_gated=True)
        slow = average_power_mw(work, cycles, window, S, S.point("half"), idle_gated=False)
        assert (slow < race) is slowest_wins, work
    # every point's power for the same work is computed, not assumed ordered
    powers = [average_power_mw({"mac": 1e7}, 1_000_000, window, S, p, g)
              for p, g in itertools.product(POINTS, (True, False))]
    assert len(set(powers)) == len(powers)
