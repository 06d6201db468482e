"""The cost models of the mapping search (schedule/cost_model.py): the analytical estimate and
the simulator's timing model of the step emitted alone agree on every candidate mapping of
small random graphs (convs, depthwise convs, linears, matmuls, adds, a cascaded inverted
residual) on tnpu-s and u55-256; a search run on the simulated model picks the analytical
search's mappings; the analytical choice is the simulated best of the candidates; and the
search really asks the model it is given (a model that prefers the slowest mapping gets it)."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from tessel.arch import load_preset
from tessel.emit.simulated_cost import SimulatedCostModel, simulate_step
from tessel.ir import DType, GraphBuilder, Layout, Op, QuantParams, TensorType, verify
from tessel.isa import fixedpoint as fp
from tessel.ops import fused_emit
from tessel.ops.context import CodegenContext, ConstPool
from tessel.ops.fused_geometry import FusedChain
from tessel.ops.registry import emitter_for, is_view, npu_supported
from tessel.schedule import fusion, search
from tessel.schedule.cost_model import (
    AnalyticalCostModel,
    CostModel,
    CostModelKind,
)
from tessel.schedule.estimate import Estimate
from tessel.schedule.plan import estimation_context, plan

PRESETS = ["tnpu-s", "u55-256"]
Q = QuantParams((0.05,), (3,))


def _conv(b, rng, x, cin, cout, k=1, s=1, groups=1, relu=True):
    fan = k * k * cin // groups
    m, sh = fp.quantize_multipliers(rng.uniform(0.3 / (fan * 127), 3 / (fan * 127), cout))
    consts = [b.constant(rng.integers(-127, 128, (cout, k, k, cin // groups)).astype(np.int8),
                         "w"),
              b.constant(rng.integers(-999, 999, cout).astype(np.int32), "b"),
              b.constant(m.astype(np.int32), "m"), b.constant(sh.astype(np.int32), "s")]
    p = k // 2
    return b.add(Op.QCONV2D, [x, *consts], dict(
        stride=(s, s), padding=(p, p, p, p), dilation=(1, 1), groups=groups,
        layout=Layout.NHWC, in_zp=3, out_zp=-5, act_min=-5 if relu else -128, act_max=127,
        dtype=DType.I8))


def _q31(x):
    m, s = fp.quantize_multipliers(np.array([x]))
    return int(m[0]), int(s[0])


def _add(b, x, y):
    (am, ash), (bm, bsh), (om, osh) = _q31(0.4), _q31(0.3), _q31(2.5 / (1 << 20))
    return b.add(Op.QADD, [x, y], dict(
        a_zp=3, b_zp=-2, left_shift=20, a_multiplier=am, a_shift=ash, b_multiplier=bm,
        b_shift=bsh, out_multiplier=om, out_shift=osh, out_zp=-5, act_min=-125, act_max=127,
        dtype=DType.I8))


def conv_graph(rng):
    """A random stem conv, then an inverted residual (1x1 expand, 3x3 depthwise, 1x1
    project, residual add: a fusible chain) and a strided conv."""
    h, w = (int(v) for v in rng.integers(6, 17, 2))
    c, e = int(rng.choice([8, 16])), int(rng.choice([2, 4]))
    b = GraphBuilder("t")
    x = b.input("x", TensorType((1, h, w, 3), DType.I8, Layout.NHWC, Q))
    s = _conv(b, rng, x, 3, c, k=3)
    y = _conv(b, rng, s, c, c * e)
    y = _conv(b, rng, y, c * e, c * e, k=3, groups=c * e)
    y = _conv(b, rng, y, c * e, c, relu=False)
    y = _add(b, y, s)
    y = _conv(b, rng, y, c, int(rng.choice([16, 24, 32])), k=3, s=2)
    return verify(b.build([y]))


def dense_graph(rng):
    """A random linear, a matmul of its output with a second input, and an add."""
    m, k, n = (int(rng.choice(v)) for v in ([4, 12, 32], [16, 48, 96], [16, 40, 64]))
    b = GraphBuilder("t")
    x = b.input("x", TensorType((1, m, k), DType.I8, Layout.ANY, Q))
    wt = rng.integers(-127, 128, (n, k)).astype(np.int8)
    mult, sh = fp.quantize_multipliers(rng.uniform(0.0002, 0.003, n))
    consts = [b.constant(wt, "w"), b.constant(rng.integers(-999, 999, n).astype(np.int32), "b"),
              b.constant(mult.astype(np.int32), "m"), b.constant(sh.astype(np.int32), "s")]
    y = b.add(Op.QLINEAR, [x, *consts], dict(in_zp=3, out_zp=-5, act_min=-128, act_max=127,
                                             dtype=DType.I8))
    r = b.input("r", TensorType((1, n, m), DType.I8, Layout.ANY, Q))
    mm, ms = _q31(0.0015)
    z = b.add(Op.QMATMUL, [y, r], dict(a_zp=3, b_zp=-7, multiplier=mm, shift=ms, out_zp=2,
                                       act_min=-128, act_max=127, dtype=DType.I8))
    u = b.input("u", TensorType((1, m, m), DType.I8, Layout.ANY, Q))
    return verify(b.build([_add(b, z, u)]))


def _graphs():
    return [(f"conv{k}", conv_graph(np.random.default_rng(k))) for k in range(2)] + [
        (f"dense{k}", dense_graph(np.random.default_rng(10 + k))) for k in range(2)]


GRAPHS = _graphs()


def _contexts(g, arch):
    wmem, amem = (arch.memory_index(n) for n in (arch.weights_memory, arch.activations_memory))
    ctx = CodegenContext(arch, g, {}, ConstPool(wmem), amem)
    return ctx, estimation_context(ctx)


def _npu_nodes(g):
    return [n for n in g.nodes if n.op is not Op.CONSTANT and npu_supported(n, g)
            and not is_view(n)]


def _units(g):
    """Every step the search may consider: each node, and each fusible chain."""
    nodes = _npu_nodes(g)
    out = [(n, emitter_for(n)) for n in nodes]
    for k in range(len(nodes)):
        out += [(c, fused_emit) for c in fusion.fusible_chain(g, nodes, k)]
    return out


def _plan(g, arch, model=None, **kw):
    nodes = _npu_nodes(g)
    with search.use(None):
        return plan(g, nodes, [v.name for v in g.inputs], [g.outputs[0]], arch,
                    cost_model=model, **kw)


def test_both_models_satisfy_the_protocol():
    for model in (AnalyticalCostModel(), SimulatedCostModel()):
        assert isinstance(model, CostModel)
    assert AnalyticalCostModel.kind is not SimulatedCostModel.kind


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("name,g", GRAPHS, ids=[n for n, _ in GRAPHS])
def test_models_agree_on_every_candidate(name, g, preset):
    """The estimator claims exactness per step: on every candidate of every step (chains
    included), full and sampled, the analytical Estimate (cycles, bound, busy cycles) equals
    the simulated one."""
    arch = load_preset(preset)
    _, est_ctx = _contexts(g, arch)
    analytical, simulated = AnalyticalCostModel(), SimulatedCostModel()
    checked = 0
    for unit, em in _units(g):
        for mapping in em.candidates(unit, est_ctx):
            for sample in (None, search.SAMPLE_TILES):
                work = em.step(unit, mapping, est_ctx)
                a = analytical.estimate(work, arch, sample=sample)
                s = simulated.estimate(work, arch, sample=sample)
                assert a == s, (str(unit), str(mapping), sample, a, s)
                checked += 1
    assert simulated.runs == checked > 0


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("name,g", GRAPHS, ids=[n for n, _ in GRAPHS])
def test_simulated_search_picks_the_analytical_mappings(name, g, preset):
    """plan(cost_model=SimulatedCostModel()) searches every candidate on the simulator (no
    pruning) and gets the analytical plan's steps, mappings and estimates; each step's
    simulated cycles equal the analytical model's estimate of the same mapping."""
    arch = load_preset(preset)
    simulated = SimulatedCostModel()
    ref = _plan(g, arch, prefetch=False)
    got = _plan(g, arch, simulated, prefetch=False)
    assert simulated.runs > 0
    assert [(s.name, str(s.mapping), s.estimate) for s in got.steps] == [
        (s.name, str(s.mapping), s.estimate) for s in ref.steps]
    analytical = AnalyticalCostModel()
    for step in got.steps:
        cycles, _ = simulate_step(step.work, arch)
        assert cycles == analytical.estimate(step.work, arch).cycles == step.estimate.cycles


def _is_pair(unit):
    return isinstance(unit, FusedChain) and len(unit.nodes) == 2


@functools.cache
def _choices(name, preset):
    """Per step: whether it is a conv -> depthwise pair, the analytical search's choice, the
    simulated reference search's (every candidate ranked on its sampled simulated cycles,
    ties: candidate order, the best FINALISTS simulated in full, the fewest cycles wins) and
    every candidate's simulated cycles."""
    g, arch = dict(GRAPHS)[name], load_preset(preset)
    ctx, est_ctx = _contexts(g, arch)
    out = []
    for unit, em in _units(g):
        with search.use(None):
            best = search.choose(unit, ctx, em, est_ctx, required=False)
        if best is None:
            continue
        cands = list(em.candidates(unit, est_ctx))
        works = [em.step(unit, m, est_ctx) for m in cands]
        sampled = [SimulatedCostModel().estimate(w, arch, sample=search.SAMPLE_TILES)
                   for w in works]
        full = [simulate_step(w, arch)[0] for w in works]
        short = sorted(range(len(cands)), key=lambda k: (sampled[k].cycles, k))
        ref = min(short[:search.FINALISTS], key=lambda k: (full[k], k))
        out.append((_is_pair(unit), str(unit), best, full[ref], full))
    return out


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("name,g", GRAPHS, ids=[n for n, _ in GRAPHS])
def test_analytical_choice_is_the_simulated_best(name, g, preset):
    """Each step's analytical choice (sampled ranking, a few finalists, pruning, as compile
    runs it) is the simulated reference search's and, on every step but the conv ->
    depthwise pairs (next test), the simulated best of all its candidates."""
    for pair, unit, best, ref, full in _choices(name, preset):
        assert best[1].cycles == ref, (unit, str(best[0]), best[1].cycles, ref)
        if pair:
            continue
        if (name, preset, str(unit)) in RANKING_MISSES:  # still missed (else drop the entry)
            assert best[1].cycles > min(full), (unit, str(best[0]), sorted(full)[:3])
        else:
            assert best[1].cycles == min(full), (unit, str(best[0]), sorted(full)[:3])


# steps (graph, preset, unit) whose fastest candidate the sampled ranking leaves out of the
# finalists, beside the pairs: conv0's 1x1 conv on tnpu-s since the conv loop orders added
# candidates (1229 cycles chosen, 1225 the best: +0.3 %)
RANKING_MISSES = {("conv0", "tnpu-s", "%qconv2d_1 = qconv2d")}


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="the sampled ranking (3 tiles of the first 2 groups) "
                   "leaves the fastest cascaded conv -> depthwise stripe mapping out of the "
                   "finalists: +1.8 .. +2.8 % on these graphs")
@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("name,g", GRAPHS[:2], ids=[n for n, _ in GRAPHS[:2]])
def test_pair_choice_is_the_simulated_best(name, g, preset):
    pairs = [c for c in _choices(name, preset) if c[0]]
    assert pairs
    for _, unit, best, _, full in pairs:
        assert best[1].cycles == min(full), (unit, str(best[0]), sorted(full)[:3])


class _Slowest:
    """A cost model preferring the slowest mapping (analytical cycles negated, shifted)."""

    kind = CostModelKind.SIMULATED  # any kind but the analytical one's (the cache key)
    prunable = False

    def __init__(self) -> None:
        self.inner = AnalyticalCostModel()
        self.calls = 0

    def estimate(self, work, arch, *, sample=None, prefetched=False, prefetch=()) -> Estimate:
        self.calls += 1
        e = self.inner.estimate(work, arch, sample=sample, prefetched=prefetched,
                                prefetch=prefetch)
        return Estimate(10**12 - e.cycles, e.bound, e.busy)


@pytest.mark.parametrize("preset", PRESETS)
def test_the_search_asks_the_model_it_is_given(preset):
    """A search bypassing the cost model (calling estimate_step itself) fails here: the
    model's estimates and its (reversed) preference are what the search returns, through
    plan and through an active search cache holding the analytical choices."""
    arch = load_preset(preset)
    g = GRAPHS[0][1]
    node = _npu_nodes(g)[0]
    ctx, est_ctx = _contexts(g, arch)
    em = emitter_for(node)
    cands = list(em.candidates(node, est_ctx))
    full = [AnalyticalCostModel().estimate(em.step(node, m, est_ctx), arch).cycles
            for m in cands]
    assert max(full) > min(full)  # the preference can be told apart
    cache = search.SearchCache()
    with search.use(cache):
        fast = search.choose(node, ctx, em, est_ctx)
        slow_model = _Slowest()
        slow = search.choose(node, ctx, em, est_ctx, cost_model=slow_model)
    assert fast[1].cycles == min(full)
    # the slow model's choice: its own estimate of a mapping other than the fastest
    k = [str(m) for m in cands].index(str(slow[0]))
    assert slow_model.calls > 0 and slow[1].cycles == 10**12 - full[k] and full[k] > min(full)
    assert len(cache) == 2  # one entry per cost model kind
    slow_model = _Slowest()
    steps = _plan(g, arch, slow_model, prefetch=False).steps
    assert slow_model.calls > 0
    assert all(s.estimate.cycles > 10**11 for s in steps if not isinstance(s.unit, FusedChain))
