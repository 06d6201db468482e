"""The mapping search's closed-form pruning (schedule/prerank.py) and its cache across steps and
design points (schedule/search.py): every figure equals the reference search's (no
pruning, no cache) on random design points; the bounds are below every candidate's estimate."""

from __future__ import annotations

import random

import pytest

from tessel.analysis.estimate import estimate_graph
from tessel.analysis.explore import quantised_graphs
from tessel.analysis.explore_run import evaluate_point
from tessel.analysis.explore_space import build_arch
from tessel.arch import load_target
from tessel.errors import TesselCompileError, TesselConfigError
from tessel.ops.context import CodegenContext
from tessel.ops.fused_geometry import FusedChain
from tessel.schedule import plan as program
from tessel.schedule import prerank, search
from tessel.schedule.estimate import estimate_step

CHOICES = {
    "matrix.rows": [4, 8, 16, 32], "matrix.cols": [4, 8, 16, 32],
    "matrix.dataflow": ["WEIGHT_STATIONARY", "OUTPUT_STATIONARY"],
    "vector.lanes": [8, 16, 32, 64, 128], "onchip.sram_bytes": [65536, 131072, 524288],
    "onchip.acc_bytes": [16384, 65536], "dram_bytes_per_cycle": [4, 8, 16, 32],
    "clock_hz": [250_000_000, 1_000_000_000],
}


class _Graphs(dict):
    """Zoo graphs quantised on first use (2 calibration samples: costs depend on shapes)."""

    def __missing__(self, name):
        self[name] = quantised_graphs([name], 2, None)[name]
        return self[name]


@pytest.fixture(scope="module")
def graphs():
    return _Graphs()


def _points(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        keys = rng.sample(sorted(CHOICES), rng.randint(2, 5))
        out.append({k: rng.choice(CHOICES[k]) for k in sorted(keys)})
    return out


def _reference(graph, arch):
    """The unpruned search without a cache (what `_choose` did before pruning)."""
    with search.pruning(False), search.use(None):
        return _outcome(lambda: estimate_graph(graph, arch))


def _outcome(fn):
    try:
        return fn()
    except (TesselCompileError, TesselConfigError) as exc:
        return f"{type(exc).__name__}: {exc}"


@pytest.mark.parametrize("model,n,seed", [
    ("ds_cnn", 24, 1), pytest.param("mobilenet_v2", 4, 2, marks=pytest.mark.slow)])
def test_cached_pruned_estimates_equal_reference(graphs, model, n, seed):
    """Random design points around tnpu-s, one cache shared by all of them (so points reuse
    each other's steps): every report equal, field by field, to the reference search's."""
    base = load_target("tnpu-s")
    cache = search.SearchCache()
    graph = graphs[model]
    compared = 0
    for point in _points(n, seed):
        try:
            arch = build_arch(base, point)
        except TesselConfigError:
            continue
        ref = _reference(graph, arch)
        with search.use(cache):
            got = _outcome(lambda a=arch: estimate_graph(graph, a))
        assert got == ref, point
        if not isinstance(ref, str):
            with search.use(cache):
                fast = estimate_graph(graph, arch, timing_only=True)
            assert (fast.cycles, fast.layers) == (ref.cycles, ref.layers)
            assert fast.energy_pj == {} and fast.bytes_read == {}
        compared += 1
    assert compared >= n // 2
    assert cache.hits > 0  # the points did share steps


def test_evaluate_point_same_with_and_without_cache(graphs):
    base = load_target("tnpu-s")
    two = {"ds_cnn": graphs["ds_cnn"]}
    for point in _points(6, 3):
        with search.pruning(False):
            ref = evaluate_point(point, two, base, cache=False)
        got = evaluate_point(point, two, base, cache=True)
        assert (got.feasible, got.reason, got.area_mm2, got.per_model) == (
            ref.feasible, ref.reason, ref.area_mm2, ref.per_model), point


@pytest.mark.parametrize("target", ["tnpu-s", "u55-256", "u65-512", "tnpu-xs"])
def test_bounds_below_every_candidate_estimate(graphs, target, monkeypatch):
    """For every qconv2d / cascaded-chain candidate the search meets: bound <= sampled
    estimate and full bound <= full estimate (pruning is exact only if this holds)."""
    checked = _check_bounds(graphs["ds_cnn"], load_target(target), monkeypatch)
    assert len(checked) > 20
    assert sum(checked) / len(checked) > 0.3  # the bounds are not trivially 0


@pytest.mark.parametrize("target", [
    "tnpu-s", pytest.param("u65-512", marks=pytest.mark.slow),
    pytest.param("tnpu-xs", marks=pytest.mark.slow)])
def test_chain_bounds_below_every_candidate_estimate(graphs, target, monkeypatch):
    """The same for MobileNetV2's chains (conv -> depthwise pairs, inverted residuals with and
    without the add; depthwise-first chains: ds_cnn's, the test below), every candidate of
    every chain the plan asks about."""
    kinds: set[tuple[bool, bool, bool]] = set()
    checked = _check_bounds(graphs["mobilenet_v2"], load_target(target), monkeypatch,
                            chains_only=True, kinds=kinds)
    assert len(checked) > 100
    assert sum(checked) / len(checked) > 0.3
    # tnpu-s asks about pairs and inverted residuals with and without the add; the other
    # presets' plans ask about other sets (e.g. depthwise-first chains where a pair lost)
    assert len(kinds) >= 2
    if target == "tnpu-s":
        assert kinds == {(True, False, False), (True, True, False), (True, True, True)}


def test_chain_bounds_on_random_design_points(graphs, monkeypatch):
    """Chain bounds on design points around tnpu-s (small arrays, few lanes, little SRAM)."""
    base = load_target("tnpu-s")
    checked: list[float] = []
    kinds: set[tuple[bool, bool, bool]] = set()
    for point in _points(6, 7):
        try:
            arch = build_arch(base, point)
        except TesselConfigError:
            continue
        checked += _check_bounds(graphs["ds_cnn"], arch, monkeypatch, chains_only=True,
                                 kinds=kinds)
    assert len(checked) > 50
    assert (False, True, False) in kinds  # depthwise -> project


def _check_bounds(graph, arch, monkeypatch, chains_only=False, kinds=None) -> list[float]:
    checked = []
    real = program._choose

    def spy(node, ctx, *, required=True, cost_model=None, input_resident_orders=True):
        em = program._emitter(node)
        est_ctx = program.estimation_context(ctx)
        bounds = prerank.Bounds(node, est_ctx)
        chain = isinstance(node, FusedChain)
        if chain and kinds is not None:
            kinds.add((node.conv is not None, node.project is not None, node.add is not None))
        if bounds.available and (chain or not chains_only):
            for m in em.candidates(node, est_ctx):
                s = estimate_step(em.step(node, m, est_ctx), ctx.arch,
                                  sample=search.SAMPLE_TILES).cycles
                f = estimate_step(em.step(node, m, est_ctx), ctx.arch).cycles
                lo_s, lo_f = bounds(m, search.SAMPLE_TILES), bounds(m, None)
                assert lo_s <= s and lo_f <= f, (str(node), str(m), lo_s, s, lo_f, f)
                checked.append(lo_s / max(s, 1))
        return real(node, ctx, required=required, cost_model=cost_model,
                    input_resident_orders=input_resident_orders)

    with monkeypatch.context() as mp:
        mp.setattr(program, "_choose", spy)
        _outcome(lambda: estimate_graph(graph, arch))
    return checked


def test_signature_ignores_names_and_zero_points_not_shapes(graphs):
    """Two MobileNetV2 blocks of the same shape share their steps' signatures; steps of other
    shapes do not; the timing key ignores the clock and energy, not the array."""
    graph = graphs["mobilenet_v2"]
    arch = load_target("tnpu-s")
    ctx = CodegenContext(arch, graph, {}, None, 0)
    convs = [n for n in graph.nodes if n.op.name == "QCONV2D"]
    sigs = {}
    for n in convs:
        sigs.setdefault(search.unit_signature(n, ctx), []).append(n.name)
    assert len(sigs) < len(convs)  # repeated blocks share
    assert len(sigs) > 10  # but shapes differ
    fast = arch.with_params({"clock_hz": 2 * arch.clock_hz})
    assert search.timing_key(fast) == search.timing_key(arch)
    wide = arch.with_params({"matrix.cols": 2 * arch.matrix.cols})
    assert search.timing_key(wide) != search.timing_key(arch)


def test_vector_only_emitters_never_read_the_matrix_fields():
    """The matrix-free timing key of their steps is exact only if this holds."""
    import inspect

    from tessel.ops import DEFINITIONS
    emitters = {d.npu.emitter for d in DEFINITIONS.values()
                if d.npu is not None and not d.npu.matrix and d.npu.emitter is not None}
    assert {e.__name__.rsplit(".", 1)[1] for e in emitters} == {
        "eltwise_emit", "pool_emit", "movement_emit", "norm_emit"}
    for emitter in emitters:
        src = inspect.getsource(emitter)
        assert ".matrix" not in src and "uses_matrix=True" not in src, emitter.__name__


def test_values_without_canonical_form_are_not_cached():
    import numpy as np
    with pytest.raises(search.Uncacheable):
        search._canon(object())
    a, b = np.zeros((2, 3), np.int8), np.zeros((3, 2), np.int8)
    assert search._canon(a) != search._canon(b)  # shape is part of the form
    assert search._canon(a) == search._canon(a.copy())


def test_weight_stationary_search_reuses_a_full_search_without_input_resident_orders(
        graphs, monkeypatch):
    """The conservative plan's weight-stationary-only search of a conv is the full search's
    choice when no candidate took an input-resident order (the same candidates): served from
    the cache, never searched again; convs that had such orders are searched again, starting
    from the full search's estimates (each the estimate of that mapping)."""
    runs = []
    real = search._search

    def spy(node, ctx, em, est_ctx, prune, model, weight_stationary=False, estimates=None,
            shared=None, programs=None):
        known = dict(estimates or {})
        out = real(node, ctx, em, est_ctx, prune, model, weight_stationary, estimates, shared,
                   programs)
        runs.append((getattr(node, "name", None), weight_stationary, out[1]))
        if weight_stationary:
            assert known, "the weight-stationary search got no estimates of the full one"
            for (m, sample), est in known.items():
                assert est == estimate_step(em.step(node, m, est_ctx), ctx.arch, sample=sample)
        return out

    monkeypatch.setattr(search, "_search", spy)
    graph = graphs["mobilenet_v2"]
    with search.use(search.SearchCache()):
        estimate_graph(graph, load_target("tnpu-s"), timing_only=True)
    full = {name: ir for name, ws, ir in runs if not ws}
    again = [name for name, ws, _ in runs if ws]
    assert again, "the conservative plan searched no conv again (the test needs some)"
    assert all(full[name] for name in again)  # only convs that had input-resident orders


@pytest.mark.parametrize("model,ops", [
    ("mobilenet_v2", {"QADD"}), ("vit_small", {"QADD", "REQUANTIZE", "QMUL"})])
def test_eltwise_zero_points_and_multipliers_leave_the_signature_and_every_estimate(
        graphs, monkeypatch, model, ops):
    """Steps of the ELTWISE ops (`QUANT_FREE`: MobileNetV2's residual adds alone and as a
    chain's epilogue, ViT's adds, requantizes and multiplies) share their signature with steps
    of the same shape whose zero points, multipliers and shifts differ; and every candidate of
    the steps sharing a signature has the same estimate, sampled and in full, for each of them
    (the search reads nothing the signature leaves out). (qsub has qadd's fields; only MiniLM
    has one.)"""
    seen: dict[tuple, list] = {}
    real = program._choose

    def spy(node, ctx, **kw):
        elt = [n for n in (node.nodes if isinstance(node, FusedChain) else (node,))
               if n.op.name in ops]
        if elt:
            est_ctx = program.estimation_context(ctx)
            seen.setdefault(search.unit_signature(node, est_ctx), []).append(
                (node, est_ctx, elt[0]))
        return real(node, ctx, **kw)

    with monkeypatch.context() as mp:
        mp.setattr(program, "_choose", spy)
        with search.use(None):
            estimate_graph(graphs[model], load_target("tnpu-s"), timing_only=True)
    shared = [units for units in seen.values()
              if len({repr(sorted(n.attr_map.items())) for _, _, n in units}) > 1]
    # every op kind has steps of one shape and different quantisation
    assert {units[0][2].op.name for units in shared} == ops
    if model == "mobilenet_v2":  # adds alone and in chains
        assert {isinstance(units[0][0], FusedChain) for units in shared} == {True, False}
    for units in shared:
        figures = []
        for node, est_ctx, _ in units:
            em = program._emitter(node)
            cands = list(em.candidates(node, est_ctx))
            figures.append([(m, estimate_step(em.step(node, m, est_ctx), est_ctx.arch,
                                              sample=sample))
                            for m in cands for sample in (search.SAMPLE_TILES, None)])
        assert all(f == figures[0] for f in figures[1:]), str(units[0][0])
