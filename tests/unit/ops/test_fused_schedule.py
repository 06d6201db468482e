"""The cascaded step's tile order equals its definition.

* fused_order._schedule (the greedy list schedule): at each position the first of the next 64
  unplaced jobs, in program order, whose dependencies are all placed at least their distance
  back, else an empty tile. The definition is written here the direct way (every dependency
  re-checked at every position); the module caches each job's earliest position.
* fused_order._jobs: the dependencies of the module docstring, written here by job keys
  (kind, stripe, chunk) looked up in a dict; the module computes the indices.
* fused_order._tiles: a pair's groups are each chunk scheduled on its own, one after the other
  (the module schedules the first chunk and moves it on)."""

from __future__ import annotations

import dataclasses
import random

import pytest

from tessel.ops import fused_emit as E
from tessel.ops import fused_geometry as G
from tessel.ops import fused_order as F


def _by_definition(jobs, deps, pos0):
    at, left, out, pos = [-1] * len(jobs), list(range(len(jobs))), [], pos0
    while left:
        pick = next((k for k, job in enumerate(left[:64])
                     if all(at[d] >= 0 and pos - at[d] >= dist for d, dist in deps[job])), None)
        if pick is None:
            out.append(-1)
        else:
            job = left.pop(pick)
            at[job] = pos
            out.append(job)
        pos += 1
    return out


@pytest.mark.parametrize("seed", range(4))
def test_schedule_follows_its_definition(seed):
    rng = random.Random(seed)
    kinds = [F.TileKind.CONV, F.TileKind.DW, F.TileKind.P, F.TileKind.CONV_DW]
    for _ in range(400):
        n = rng.randint(1, 150)
        jobs = [(rng.choice(kinds), k, rng.randint(0, 3)) for k in range(n)]
        deps = [[(d, rng.randint(0, 4)) for d in rng.sample(range(k), min(k, rng.randint(0, 3)))]
                for k in range(n)]
        pos0 = rng.randint(0, 6)
        assert F._schedule(deps, pos0) == _by_definition(jobs, deps, pos0)


def _jobs_by_keys(geo, chunks):
    """The dependencies of the module docstring by (kind, stripe, chunk) keys; a dependency on
    a job not yet added (an earlier stripe that does not exist) is dropped."""
    K = F.TileKind
    jobs, deps, index = [], [], {}

    def add(kind, i, j, dep):
        index[(kind, i, j)] = len(jobs)
        jobs.append((kind, i, j))
        deps.append(tuple((index[key], d) for key, d in dep if key in index))

    d = geo.depth
    ckind = K.CONV if geo.dw_matrix else K.CONV_DW
    for i in range(len(geo.stripes)):
        for j in chunks:
            war_dw = [((K.P, i - 2, 0), 1)] if geo.project else []
            xin = [((ckind, i - 2, chunks[-1]), G.IN_DEPTH)] if geo.conv and j == chunks[0] else []
            if geo.conv and not geo.dw_matrix:
                add(K.CONV_DW, i, j, [((K.CONV_DW, i - 1, j), 1)] + war_dw + xin)
            elif geo.conv:
                rebase = [((K.DW, i - 1, j), 1)] if geo.stripes[i].off == 0 else []
                add(K.CONV, i, j, [((K.CONV, i - 1, j), 1)] + rebase + xin)
                add(K.DW, i, j, [((K.CONV, i, j), d)] + war_dw)
            else:
                add(K.DW, i, j, war_dw)
        if geo.project:
            kind = K.DW if not geo.conv or geo.dw_matrix else K.CONV_DW
            add(K.P, i, 0, [((kind, i, j), d) for j in chunks])
    return jobs, deps


def _random_plan(rng):
    stripes = tuple(G.Stripe(0, 1, 0, 1, 0, 0, 0, rng.choice([0, 1, 1]), rng.choice([0, 0, 1, 2]), -1)
                    for _ in range(rng.randint(1, 12)))
    return F.TilePlan(rng.random() < 0.5, rng.random() < 0.7, rng.choice(E.DEPTHS),
                   rng.random() < 0.5, stripes, rng.randint(1, 5))


@pytest.mark.parametrize("seed", range(4))
def test_jobs_follow_their_definition(seed):
    rng = random.Random(100 + seed)
    for _ in range(300):
        plan = _random_plan(rng)
        n = plan.nchunks
        assert F._jobs(plan, n) == _jobs_by_keys(plan, list(range(n)))


@pytest.mark.parametrize("seed", range(4))
def test_pair_groups_are_each_chunk_scheduled_alone(seed):
    rng = random.Random(200 + seed)
    for _ in range(200):
        plan = _random_plan(rng)
        if plan.project:
            continue
        groups, pos = [], 0
        for j in range(plan.nchunks):  # each chunk's own jobs, scheduled after the last group
            jobs, deps = _jobs_by_keys(plan, [j])
            order = _by_definition(jobs, deps, pos)
            groups.append([F.Tile(*jobs[k], pos + r) if k >= 0 else
                           F.Tile(F.TileKind.EMPTY, 0, 0, pos + r) for r, k in enumerate(order)])
            pos += len(order)
        assert list(F._tiles(plan)) == groups


def _hosts_by_definition(groups, plan):
    """Each stripe's conv rows (per chunk for a pair) loaded once, into the buffer of its
    parity, at the earliest tile two after the buffer's last reader and not after its own
    first reader: the readers found by walking every tile."""
    readers = {}
    for g in groups:
        for t in g:
            if t.kind in (F.TileKind.CONV, F.TileKind.CONV_DW) and plan.stripes[t.stripe].new:
                readers.setdefault((-1 if plan.project else t.chunk, t.stripe), []).append(t.pos)
    hosts, buffers, last, at = {}, {}, [-2, -2], 0
    for key, pos in sorted(readers.items(), key=lambda kv: min(kv[1])):
        b = (max(key[0], 0) * len(plan.stripes) + key[1]) % 2
        at = max(at, last[b] + G.IN_DEPTH)
        assert at <= min(pos)
        hosts.setdefault(at, []).append((key[1], b))
        buffers[key] = b
        last[b] = max(pos)
    return hosts, buffers


@pytest.mark.parametrize("seed", range(3))
def test_hosts_equal_their_definition(seed):
    rng = random.Random(300 + seed)
    for _ in range(200):
        plan = _random_plan(rng)
        if not plan.conv:
            continue
        groups = F._tiles(plan)
        try:
            want = _hosts_by_definition([list(g) for g in groups], plan)
        except AssertionError:  # rows that cannot be loaded in time: the module says so too
            with pytest.raises(AssertionError):
                F.Hosts(groups, plan).complete()
            continue
        assert F.Hosts(groups, plan).complete() == want
        # asked for lazily, group by group, or from the last group back (a group's rows may
        # be loaded in an earlier group's tiles): the same answers
        for gs in (range(len(groups)), range(len(groups) - 1, -1, -1)):
            lazy = F.Hosts(groups, plan)
            for gi in gs:
                for t in groups[gi]:
                    assert lazy.at(t.pos) == want[0].get(t.pos, [])
                    key = (-1 if plan.project else t.chunk, t.stripe)
                    if key in want[1]:
                        assert lazy.buffer(key) == want[1][key]
            assert lazy.complete() == want


@pytest.mark.parametrize("seed", range(3))
def test_project_groups_are_the_schedule_cut_after_each_project_tile(seed):
    rng = random.Random(400 + seed)
    for _ in range(200):
        plan = _random_plan(rng)
        if not plan.project:
            continue
        jobs, deps = _jobs_by_keys(plan, list(range(plan.nchunks)))
        groups, cur = [], []
        for pos, k in enumerate(_by_definition(jobs, deps, 0)):
            cur.append(F.Tile(*jobs[k], pos) if k >= 0 else F.Tile(F.TileKind.EMPTY, 0, 0, pos))
            if k >= 0 and jobs[k][0] is F.TileKind.P:
                groups.append(cur)
                cur = []
        if cur:
            groups.append(cur)
        got = F._tiles(plan)
        assert len(got) == len(groups)
        assert [got[k] for k in range(len(got))] == groups
        assert got[1:3] == groups[1:3] and got[-1] == groups[-1]


def test_orders_are_cached_by_what_they_read():
    """`order` caches a plan's tiles and hosts by the stripes' rebase / new-rows flags: a plan
    whose stripes differ otherwise (positions, sizes, other non-zero offsets) gets the same
    value, equal to its own tiles and hosts built afresh."""
    rng = random.Random(400)
    for _ in range(200):
        plan = _random_plan(rng)
        other = dataclasses.replace(plan, stripes=tuple(
            dataclasses.replace(s, oy0=rng.randint(0, 9), rows=rng.randint(1, 4),
                                n=rng.randint(1, 9), new=s.new and rng.randint(1, 3),
                                off=s.off and rng.randint(1, 3)) for s in plan.stripes))
        try:
            got = F.order(plan)
            want_hosts = F.Hosts(F._tiles(other), other).complete() if other.conv else None
        except AssertionError:  # rows that cannot be loaded in time
            continue
        assert F.order(other) is got
        assert list(got[0]) == list(F._tiles(other))
        if other.conv:
            assert got[1].complete() == want_hosts


@pytest.mark.parametrize("seed", range(4))
def test_program_cache_keys_what_jobs_read(seed):
    """Plans that differ only where _jobs does not read share a cached program: each plan's
    is its own jobs and their schedule."""
    rng = random.Random(300 + seed)
    F._PROGRAMS.clear()
    for _ in range(400):
        plan = _random_plan(rng)
        jobs, deps = F._jobs(plan, plan.nchunks if plan.project else 1)
        assert F._program(plan) == (jobs, F._schedule(deps, 0))
