"""ops_fused._schedule (the cascaded step's greedy list schedule) equals its definition: at
each position the first of the next 64 unplaced jobs, in program order, whose dependencies are
all placed at least their distance back, else an empty tile. The definition is written here
the direct way (every dependency re-checked at every position); the module caches each job's
earliest position."""

from __future__ import annotations

import random

import pytest

from tessel.codegen import ops_fused as F


def _by_definition(jobs, deps, pos0):
    at, left, out, pos = [-1] * len(jobs), list(range(len(jobs))), [], pos0
    while left:
        pick = next((k for k, job in enumerate(left[:64])
                     if all(at[d] >= 0 and pos - at[d] >= dist for d, dist in deps[job])), None)
        if pick is None:
            out.append(F._Tile(F._Kind.EMPTY, 0, 0, pos))
        else:
            job = left.pop(pick)
            at[job] = pos
            out.append(F._Tile(*jobs[job], pos))
        pos += 1
    return out


@pytest.mark.parametrize("seed", range(4))
def test_schedule_follows_its_definition(seed):
    rng = random.Random(seed)
    kinds = [F._Kind.CONV, F._Kind.DW, F._Kind.P, F._Kind.CONV_DW]
    for _ in range(400):
        n = rng.randint(1, 150)
        jobs = [(rng.choice(kinds), k, rng.randint(0, 3)) for k in range(n)]
        deps = [[(d, rng.randint(0, 4)) for d in rng.sample(range(k), min(k, rng.randint(0, 3)))]
                for k in range(n)]
        pos0 = rng.randint(0, 6)
        assert F._schedule(jobs, deps, pos0) == _by_definition(jobs, deps, pos0)
