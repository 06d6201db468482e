"""The scheduler (tessel.scenario.scheduler) against oracles written here independently:

* a brute-force simulation that advances time one cycle at a time (RM and EDF, with
  preemption at step boundaries and without preemption, release jitter, dependencies and
  save / restore costs), equal to the scheduler's timeline cycle for cycle and job for job
  on small random task sets;
* response-time analysis for fixed priority with blocking (preemption only at step
  boundaries, so a lower-priority step that started one cycle before a release blocks for
  its length minus one cycle): every simulated response <= the bound, and equal to it at the
  critical instant where the analysis is exact.
"""

from __future__ import annotations

import math
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from tessel.scenario.scheduler import Policy, SliceKind, Task, jitters, simulate


# ---- brute force: one cycle at a time --------------------------------------------------------
def brute_force(tasks, window, edf, preemptive, seed=0):
    """(cycle -> (task, frame, kind, step), (task, frame) -> finish) by stepping cycle by
    cycle (release delays: the scheduler's seeded draws, `jitters`); a job preempted at a
    boundary pays its save cycles there and its restore cycles when it resumes."""
    jobs = []
    for i, t in enumerate(tasks):
        frames = 0
        while t.offset + math.floor(frames * t.period) < window:
            frames += 1
        delays = jitters(t, i, frames, seed)
        for k in range(frames):
            a = t.offset + math.floor(k * t.period)
            jobs.append({"task": i, "frame": k, "arrival": a, "ready": a + delays[k],
                         "deadline": a + t.deadline, "step": 0, "finish": None})
    by_key = {(j["task"], j["frame"]): j for j in jobs}
    names = [t.name for t in tasks]

    def ready(j, now):
        if j["finish"] is not None or j["ready"] > now:
            return False
        earlier = by_key.get((j["task"], j["frame"] - 1))
        if earlier is not None and earlier["finish"] is None:
            return False  # a task's jobs run in order
        for d in tasks[j["task"]].after:
            pred = by_key.get((names.index(d), j["frame"]))
            if pred is not None and (pred["finish"] is None or pred["finish"] > now):
                return False
        return True

    def urgency(j):
        prio = tasks[j["task"]].priority
        if edf:
            return (j["deadline"], prio, j["arrival"], j["task"])
        return (prio, j["arrival"], j["task"])

    busy, now, prev, phases = {}, 0, None, []  # phases: [job, kind, step, cycles left]
    while any(j["finish"] is None for j in jobs):
        if not phases:
            held = prev is not None and prev["finish"] is None
            candidates = [j for j in jobs if ready(j, now)]
            if held and not preemptive:
                pick = prev
            elif candidates:
                pick = min(candidates, key=urgency)
            else:
                now += 1
                continue
            task = tasks[pick["task"]]
            if held and pick is not prev:  # preempted at this boundary: save its state
                b = prev["step"] - 1
                prev["saved"] = b
                save = tasks[prev["task"]].save
                if b < len(save) and save[b]:
                    phases.append([prev, SliceKind.SAVE, b, save[b]])
            if pick.get("saved") is not None:  # resumed: restore it
                b = pick.pop("saved")
                if b < len(task.restore) and task.restore[b]:
                    phases.append([pick, SliceKind.RESTORE, b, task.restore[b]])
            phases.append([pick, SliceKind.STEP, pick["step"], task.steps[pick["step"]]])
            pick["step"] += 1
            prev = pick
        job, kind, step, _ = phase = phases[0]
        busy[now] = (job["task"], job["frame"], kind, step)
        now += 1
        phase[3] -= 1
        if phase[3] == 0:
            phases.pop(0)
            if kind is SliceKind.STEP and step == len(tasks[job["task"]].steps) - 1:
                job["finish"] = now
    return busy, {(j["task"], j["frame"]): j["finish"] for j in jobs}


def occupancy(timeline, tasks):
    index = {t.name: i for i, t in enumerate(tasks)}
    busy = {}
    for s in timeline.slices:
        for c in range(s.start, s.end):
            assert c not in busy, f"two slices at cycle {c}"
            busy[c] = (index[s.task], s.frame, s.kind, s.step)
    finish = {(index[j.task], j.frame): j.finish for j in timeline.jobs}
    return busy, finish


@st.composite
def task_sets(draw, chains=False):
    n = draw(st.integers(1, 4))
    tasks = []
    for i in range(n):
        period = draw(st.integers(4, 24))
        steps = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
        switch = st.lists(st.integers(0, 3), min_size=len(steps), max_size=len(steps))
        save, restore = (tuple(draw(switch)), tuple(draw(switch))) if draw(st.booleans()) \
            else ((), ())
        after = ()
        if chains and i > 0 and draw(st.booleans()):
            after = (tasks[i - 1].name,)
            period = int(tasks[i - 1].period)
        tasks.append(Task(f"t{i}", Fraction(period), draw(st.integers(1, period)), i + 1,
                          steps, offset=draw(st.integers(0, period - 1)),
                          jitter=draw(st.sampled_from([0, 0, 2, 5])), after=after,
                          save=save, restore=restore))
    # rate monotonic priorities (shorter period first, then order), as the spec assigns them
    order = sorted(range(n), key=lambda k: (tasks[k].period, k))
    prio = {k: r + 1 for r, k in enumerate(order)}
    return [Task(t.name, t.period, t.deadline, prio[k], t.steps, t.offset, t.jitter, t.after,
                 t.save, t.restore) for k, t in enumerate(tasks)]


@settings(max_examples=150, deadline=None)
@given(task_sets(chains=True), st.sampled_from([Policy.FIXED, Policy.EDF]), st.booleans(),
       st.integers(20, 90), st.integers(0, 3))
def test_timeline_equals_brute_force(tasks, policy, preemptive, window, seed):
    tl = simulate(tasks, window, policy, preemptive=preemptive, seed=seed)
    assert occupancy(tl, tasks) == brute_force(tasks, window, policy is Policy.EDF, preemptive,
                                               seed)


def test_brute_force_agrees_on_a_hand_checked_case():
    # b (lower priority) starts its 3-cycle step at 0; a arrives at 1 and waits for the
    # boundary at 3; with a fully preemptive b (1-cycle steps) a starts at 1
    a = Task("a", Fraction(10), 10, 1, (2,), offset=1)
    for steps, a_start in (((3, 3), 3), ((1,) * 6, 1)):
        b = Task("b", Fraction(20), 20, 2, steps)
        tl = simulate([a, b], 10, Policy.FIXED)
        assert tl.task_jobs("a")[0].start == a_start
        assert occupancy(tl, [a, b]) == brute_force([a, b], 10, False, True)


# ---- response-time analysis ------------------------------------------------------------------
def rta(tasks, i, preemptive=True):
    """Worst response of task i from its arrival: w = B + C + sum ceil((w + J_j) / T_j) C_j,
    R = J + w, B = the longest lower-priority non-preemptive piece minus one cycle. None when
    w passes the period (the analysis then does not apply)."""
    me = tasks[i]
    hp = [t for t in tasks if t.priority < me.priority]
    pieces = [max(t.steps) if preemptive else sum(t.steps) for t in tasks
              if t.priority > me.priority]
    blocking = max([p - 1 for p in pieces], default=0)
    w = blocking + me.cycles
    while True:
        nxt = blocking + me.cycles + sum(math.ceil((w + t.jitter) / t.period) * t.cycles
                                         for t in hp)
        if nxt > me.period:
            return None
        if nxt == w:
            return me.jitter + w
        w = nxt


@st.composite
def fp_sets(draw):
    n = draw(st.integers(1, 5))
    tasks = []
    for i in range(n):
        period = draw(st.integers(6, 40))
        steps = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
        tasks.append(Task(f"t{i}", Fraction(period), period, draw(st.integers(1, 1000)),
                          steps, offset=draw(st.integers(0, period - 1)),
                          jitter=draw(st.integers(0, 3))))
    prios = sorted({t.priority for t in tasks})
    if len(prios) < n:  # priorities must be unique: re-rank in order
        tasks = [Task(t.name, t.period, t.deadline, k + 1, t.steps, t.offset, t.jitter)
                 for k, t in enumerate(tasks)]
    return tasks


@settings(max_examples=200, deadline=None)
@given(fp_sets(), st.booleans(), st.integers(0, 5))
def test_every_response_within_the_rta_bound(tasks, preemptive, seed):
    window = 4 * max(int(t.period) for t in tasks)
    tl = simulate(tasks, window, Policy.FIXED, preemptive=preemptive, seed=seed)
    for i, t in enumerate(tasks):
        # the analysis holds when every task at least as urgent meets its period
        bounds = [rta(tasks, k, preemptive) for k, u in enumerate(tasks)
                  if u.priority <= t.priority]
        if any(b is None for b in bounds):
            continue
        bound = rta(tasks, i, preemptive)
        worst = max(j.response for j in tl.task_jobs(t.name))
        assert worst <= bound, (t.name, worst, bound)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(8, 40), st.integers(1, 4)), min_size=1, max_size=4),
       st.integers(1, 8))
def test_rta_is_reached_at_the_critical_instant(hp, long_step):
    """Every task but the lowest: fully preemptive (1-cycle steps), released together at
    cycle 1; the lowest runs one long step from cycle 0. The first job of each then takes
    exactly the analysis' bound."""
    tasks = [Task(f"t{i}", Fraction(p), p, i + 1, (1,) * c, offset=1)
             for i, (p, c) in enumerate(hp)]
    tasks.append(Task("low", Fraction(1000), 1000, len(hp) + 1, (long_step,)))
    tl = simulate(tasks, 1000, Policy.FIXED)  # the window covers every bound (<= 1000)
    for i, t in enumerate(tasks[:-1]):
        bound = rta(tasks, i)
        if bound is None or any(rta(tasks, k) is None for k in range(i)):
            continue
        first = tl.task_jobs(t.name)[0]
        assert first.response == bound, (t.name, first.response, bound)
    low = rta(tasks[:-1] + [Task("low", Fraction(1000), 1000, len(hp) + 1, (1,) * long_step)],
              len(hp))
    if low is not None:  # the lowest, made fully preemptive, released with the rest at 1
        again = [Task(t.name, t.period, t.deadline, t.priority, t.steps, 1) for t in tasks[:-1]]
        again.append(Task("low", Fraction(1000), 1000, len(hp) + 1, (1,) * long_step, 1))
        tl = simulate(again, 1000, Policy.FIXED)
        assert tl.task_jobs("low")[0].response == low


def test_rta_bounds_the_xr_models_with_their_real_steps():
    """The XR models' steps (the schedule stage's estimates on tnpu-xs, where the NPU is
    loaded), as independent tasks at their rates with random offsets: every response within
    the analysis' bound where it applies."""
    import numpy as np

    from tessel.arch import load_target
    from tessel.scenario import load_scenario
    from tessel.scenario.power import PowerModel
    from tessel.scenario.profile import profile_model

    arch = load_target("tnpu-xs")
    sc = load_scenario("xr_glasses")
    pm = PowerModel.of(arch)
    rng = np.random.default_rng(0)
    # keep the load below one: eye segmentation at a quarter of its rate
    rates = {m.name: m.rate_hz / (4 if m.name == "eye_seg" else 1) for m in sc.models}
    base = [(m, profile_model(m, arch).steps) for m in sc.models]
    checked = 0
    for _ in range(5):
        tasks = []
        for m, steps in base:
            period = pm.period_cycles(rates[m.name])
            tasks.append(Task(m.name, period, math.floor(period), m.priority, steps,
                              offset=int(rng.integers(0, int(period)))))
        tl = simulate(tasks, int(2 * max(t.period for t in tasks)), Policy.FIXED)
        for i, t in enumerate(tasks):
            if any(rta(tasks, k) is None for k, u in enumerate(tasks)
                   if u.priority <= t.priority):
                continue
            assert max(j.response for j in tl.task_jobs(t.name)) <= rta(tasks, i)
            checked += 1
    assert checked >= 10
