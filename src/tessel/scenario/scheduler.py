"""The NPU's schedule over time: which model's job runs when, in integer cycles.

Each task (one model of a scenario) releases a job per period; a job is its model's program,
a sequence of steps with cycle durations (the schedule stage's estimates). The NPU runs one
step at a time. At every step boundary the scheduler picks the most urgent eligible job:

* ``Policy.FIXED``: the smallest priority number (given, else rate monotonic), ties by
  arrival, then task order;
* ``Policy.EDF``: the earliest absolute deadline, ties by priority, arrival, task order.

A step is never interrupted (preemption only at step boundaries); with ``preemptive=False`` a
started job runs to its end. A task's jobs run in order (job k+1 waits for job k). A job of a
task with ``after`` dependencies is released when its predecessors' jobs of the same frame
have finished (and not before its own release). Release jitter delays each release by a
seeded, deterministic draw in [0, jitter]. A preempted job pays its task's ``save`` cycles at
the boundary where it is preempted and ``restore`` cycles when it resumes (its live on-chip
state written out and read back; tessel.scenario.profile).

Times are cycles from 0; jobs are released for arrivals in [0, window) and run to completion,
so the timeline may end after the window when the NPU is overloaded.
"""

from __future__ import annotations

import enum
import heapq
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np


class Policy(enum.Enum):
    FIXED = "rm"  # fixed priority: given priorities, else rate monotonic
    EDF = "edf"  # earliest deadline first


class SliceKind(enum.Enum):
    STEP = "step"  # one step of the job's program
    SAVE = "save"  # the preempted job's live on-chip state written out
    RESTORE = "restore"  # ... and read back when it resumes


@dataclass(frozen=True)
class Task:
    """One periodic model. Times in cycles; ``period`` may be fractional (a 60 Hz period at
    1 GHz), arrivals are ``offset + floor(k * period)``. ``save[b]`` / ``restore[b]``: the
    cost of preempting at the boundary after step b (empty: free)."""

    name: str
    period: Fraction
    deadline: int  # relative to each arrival
    priority: int  # 1 = most urgent
    steps: tuple[int, ...]
    offset: int = 0
    jitter: int = 0
    after: tuple[str, ...] = ()
    save: tuple[int, ...] = ()
    restore: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.steps or min(self.steps) < 0:
            raise ValueError(f"task {self.name}: needs steps of >= 0 cycles, got {self.steps}")
        if self.period <= 0 or self.deadline <= 0:
            raise ValueError(f"task {self.name}: period and deadline must be > 0")

    @property
    def cycles(self) -> int:
        return sum(self.steps)

    def arrivals(self, window: int) -> list[int]:
        """Nominal release times in [0, window)."""
        out, k = [], 0
        while (a := self.offset + math.floor(k * self.period)) < window:
            out.append(a)
            k += 1
        return out

    def switch(self, costs: tuple[int, ...], boundary: int) -> int:
        return costs[boundary] if boundary < len(costs) else 0


@dataclass(frozen=True)
class Slice:
    """The NPU busy with ``task``'s job of ``frame`` over [start, end)."""

    task: str
    frame: int
    kind: SliceKind
    step: int  # the step (STEP), or the boundary after that step (SAVE / RESTORE)
    start: int
    end: int


@dataclass(frozen=True)
class Job:
    """One job as it ran: arrival is the nominal frame time; release when it became ready
    (jitter, dependencies); response and deadline count from the arrival."""

    task: str
    frame: int
    arrival: int
    release: int
    start: int
    finish: int
    deadline: int  # absolute
    preemptions: int

    @property
    def response(self) -> int:
        return self.finish - self.arrival

    @property
    def missed(self) -> bool:
        return self.finish > self.deadline


@dataclass(frozen=True)
class Timeline:
    window: int
    slices: tuple[Slice, ...]
    jobs: tuple[Job, ...]

    @property
    def end(self) -> int:
        return max([self.window] + [s.end for s in self.slices])

    def busy(self, kind: SliceKind | None = None) -> int:
        """Cycles the NPU is busy (with slices of ``kind``)."""
        return sum(s.end - s.start for s in self.slices if kind is None or s.kind is kind)

    def task_jobs(self, name: str) -> list[Job]:
        return [j for j in self.jobs if j.task == name]


@dataclass
class _Active:
    task: int
    frame: int
    arrival: int
    release: int
    deadline: int
    next_step: int = 0
    start: int = -1
    preemptions: int = 0
    saved_at: int = -1  # the boundary it was preempted at (-1: not preempted)


def jitters(task: Task, index: int, frames: int, seed: int) -> list[int]:
    """The release delays of ``task`` (``index`` in its scenario) for ``frames`` frames: one
    generator per (seed, task), so one task's jitter does not change another's."""
    if task.jitter == 0:
        return [0] * frames
    rng = np.random.default_rng([seed, index])
    return [int(x) for x in rng.integers(0, task.jitter + 1, size=frames)]


def simulate(tasks: list[Task] | tuple[Task, ...], window: int, policy: Policy = Policy.FIXED,
             *, preemptive: bool = True, seed: int = 0) -> Timeline:
    """The timeline of ``tasks`` released over [0, window) (see the module docstring)."""
    return _Run(tuple(tasks), window, policy, preemptive, seed).run()


class _Run:
    def __init__(self, tasks: tuple[Task, ...], window: int, policy: Policy, preemptive: bool,
                 seed: int) -> None:
        names = [t.name for t in tasks]
        if len(set(names)) != len(names):
            raise ValueError(f"task names must be unique: {names}")
        self.tasks, self.policy, self.preemptive, self.window = tasks, policy, preemptive, window
        self.index = {n: i for i, n in enumerate(names)}
        self.dependents: dict[int, list[int]] = {i: [] for i in range(len(tasks))}
        for i, t in enumerate(tasks):
            for d in t.after:
                self.dependents[self.index[d]].append(i)
        self.jobs: dict[tuple[int, int], _Active] = {}
        self.waiting: dict[tuple[int, int], int] = {}  # (task, frame) -> predecessors left
        self.future: list[tuple[int, int, int]] = []  # (release, task, frame)
        arrivals = [t.arrivals(window) for t in tasks]
        for i, t in enumerate(tasks):
            for k, (a, j) in enumerate(zip(arrivals[i], jitters(t, i, len(arrivals[i]), seed),
                                           strict=True)):
                job = _Active(i, k, a, a + j, a + t.deadline)
                self.jobs[(i, k)] = job
                # a predecessor without a frame k (its offset put it past the window) is waived
                left = sum(1 for d in t.after if k < len(arrivals[self.index[d]]))
                if left:
                    self.waiting[(i, k)] = left
                else:
                    heapq.heappush(self.future, (job.release, i, k))
        self.frames = [len(a) for a in arrivals]
        self.next_frame = [0] * len(tasks)  # a task's jobs run in frame order
        self.released: set[tuple[int, int]] = set()
        self.slices: list[Slice] = []
        self.done: list[Job] = []

    def urgency(self, job: _Active) -> tuple:
        prio = self.tasks[job.task].priority
        if self.policy is Policy.EDF:
            return (job.deadline, prio, job.arrival, job.task)
        return (prio, job.arrival, job.task)

    def run(self) -> Timeline:
        t, current = 0, None
        while self.future or self.released:
            while self.future and self.future[0][0] <= t:
                _, i, k = heapq.heappop(self.future)
                self.released.add((i, k))
            heads = [self.jobs[(i, k)] for i, k in enumerate(self.next_frame)
                     if (i, k) in self.released]
            if not heads:
                assert self.future, "released jobs wait for a frame that is never released"
                t = self.future[0][0]
                continue
            if current is not None and not self.preemptive:
                pick = current
            else:
                pick = min(heads, key=self.urgency)
            if current is not None and pick is not current:
                t = self.preempt(current, t)
            t = self.step(pick, t)
            current = pick if pick.next_step < len(self.tasks[pick.task].steps) else None
        order = sorted(self.done, key=lambda j: (self.index[j.task], j.frame))
        return Timeline(self.window, tuple(self.slices), tuple(order))

    def preempt(self, job: _Active, t: int) -> int:
        task = self.tasks[job.task]
        job.preemptions += 1
        job.saved_at = job.next_step - 1
        return self.add(job, SliceKind.SAVE, job.saved_at, t, task.switch(task.save,
                                                                          job.saved_at))

    def step(self, job: _Active, t: int) -> int:
        task = self.tasks[job.task]
        if job.saved_at >= 0:
            t = self.add(job, SliceKind.RESTORE, job.saved_at, t,
                         task.switch(task.restore, job.saved_at))
            job.saved_at = -1
        if job.start < 0:
            job.start = t
        t = self.add(job, SliceKind.STEP, job.next_step, t, task.steps[job.next_step])
        job.next_step += 1
        if job.next_step == len(task.steps):
            self.finish(job, t)
        return t

    def add(self, job: _Active, kind: SliceKind, step: int, t: int, cycles: int) -> int:
        if cycles > 0 or kind is SliceKind.STEP:
            self.slices.append(Slice(self.tasks[job.task].name, job.frame, kind, step, t,
                                     t + cycles))
        return t + cycles

    def finish(self, job: _Active, t: int) -> None:
        self.released.remove((job.task, job.frame))
        self.next_frame[job.task] += 1
        self.done.append(Job(self.tasks[job.task].name, job.frame, job.arrival, job.release,
                             job.start, t, job.deadline, job.preemptions))
        for d in self.dependents[job.task]:
            key = (d, job.frame)
            if key in self.waiting:
                self.waiting[key] -= 1
                if self.waiting[key] == 0:
                    del self.waiting[key]
                    dep = self.jobs[key]
                    dep.release = max(dep.release, t)
                    heapq.heappush(self.future, (dep.release, d, job.frame))
