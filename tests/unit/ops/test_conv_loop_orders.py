"""qconv2d loop orders (conv_emit.ConvOrder): weight-stationary, input-resident with every chunk's
weights resident, and input-resident with the weights streamed per chunk inside each stripe.
Every order is bit-exact against an independent int64 reference on random convs (strided,
padded, dilated, grouped, 1x1, batched), its estimate follows the simulated program, the
input-resident orders read the input once, and the closed-form bounds stay below the
estimates (the pruned search is exact only then)."""

from __future__ import annotations

import numpy as np
import pytest
from conv_constants import conv_constants
from test_conv_codegen import conv_graph, reference

from compile_region import compile_region
from tessel.arch import load_preset
from tessel.errors import TesselCompileError
from tessel.ir import DType, GraphBuilder, Layout, Op, QuantParams, TensorType, verify
from tessel.isa import Engine, Opcode
from tessel.isa.footprint import accesses
from tessel.ops import conv_emit, conv_geometry
from tessel.ops.context import CodegenContext, ConstPool, DramTensor
from tessel.ops.step import Slots
from tessel.schedule import prerank
from tessel.schedule.estimate import estimate_step
from tessel.schedule.plan import estimation_context
from tessel.schedule.search import SAMPLE_TILES
from tessel.sim import simulate

ORDERS = list(conv_emit.ConvOrder)


def _contexts(g, arch):
    wmem, amem = (arch.memory_index(n) for n in (arch.weights_memory, arch.activations_memory))
    ctx = CodegenContext(arch, g, {}, ConstPool(wmem), amem)
    return ctx, estimation_context(ctx)


def _fitting(node, est_ctx, order, chunk, rows_options):
    """Mappings of `order` with channel chunk `chunk` that fit, one per row count."""
    g = conv_geometry.geometry(node, est_ctx)
    out = []
    for r in rows_options:
        for db in (True, False):
            m = conv_emit.ConvMapping(min(r, g.oh), chunk, db, Engine.MATRIX, order)
            try:
                conv_emit._layout(g, m, est_ctx, node)
            except TesselCompileError:
                continue
            out.append(m)
            break
    return list(dict.fromkeys(out))


def batched_conv_graph(rng, n=2, h=9, w=7, c=12, cout=40):
    b = GraphBuilder("t")
    x = b.input("x", TensorType((n, h, w, c), DType.I8, Layout.NHWC, QuantParams((0.05,), (3,))))
    consts = conv_constants(b, rng, cout, (cout, 3, 3, c), 9 * c)
    y = b.add(Op.QCONV2D, [x, *consts], dict(
        stride=(1, 2), padding=(1, 0, 1, 0), dilation=(1, 1), groups=1, layout=Layout.NHWC,
        in_zp=-2, out_zp=4, act_min=-128, act_max=127, dtype=DType.I8))
    return verify(b.build([y]))


CONVS = [
    {}, {"s": 2, "c": 16, "cout": 48}, {"groups": 2, "c": 8, "cout": 24},
    {"groups": 4, "c": 16, "cout": 32, "s": 2}, {"k": 1, "p": 0, "c": 32, "cout": 40},
    {"d": 2, "p": 2, "cout": 40}, {"h": 17, "w": 13, "k": 5, "p": 1, "s": 2, "c": 6,
                                    "cout": 36, "relu": True},
    {"h": 20, "w": 20, "k": 17, "s": 3, "p": 8, "c": 4, "cout": 24},  # split kernel blocks
]


@pytest.mark.parametrize("preset", ["tnpu-s", "u55-256"])
@pytest.mark.parametrize("kw", CONVS + ["batched"])
def test_every_order_bit_exact_and_estimate_follows(preset, kw):
    rng = np.random.default_rng(7 + len(str(kw)))
    arch = load_preset(preset)
    g = batched_conv_graph(rng) if kw == "batched" else conv_graph(rng, **kw)
    node = g.nodes[-1]
    _, est_ctx = _contexts(g, arch)
    geo = conv_geometry.geometry(node, est_ctx)
    unit = 1 if geo.groups == 1 else geo.cout_g
    chunk = max(unit, 16 // unit * unit)
    assert chunk < geo.cout  # more than one chunk: the orders differ
    x = rng.integers(-128, 128, g.inputs[0].type.shape).astype(np.int8)
    want = reference(g, x)
    for order in ORDERS:
        mappings = _fitting(node, est_ctx, order, chunk, (1, 3, 64))
        assert mappings, order
        for m in mappings:
            est = estimate_step(conv_emit.step(node, m, est_ctx), arch)
            rp = compile_region(g, [node], ["x"], [node.name], arch, {"model": "t"},
                                units=[(node, m, est)])
            res = simulate(rp.program, arch, {"x": x})
            np.testing.assert_array_equal(res.outputs[node.name], want, err_msg=str(m))
            sim = res.stats.total_cycles
            assert abs(est.cycles - sim) <= 0.01 * sim, (str(m), est.cycles, sim)


def _loaded_bytes(g, node, m, arch):
    """Bytes the step loads from the input tensor and from the constant pool (the tensors
    placed above the pool)."""
    wmem, amem = (arch.memory_index(n) for n in (arch.weights_memory, arch.activations_memory))
    dram = {name: DramTensor(amem, (k + 1) << 22, g.type_of(name).shape, g.type_of(name).dtype)
            for k, name in enumerate((node.inputs[0], node.name))}
    ctx = CodegenContext(arch, g, dram, ConstPool(wmem), amem)
    work = conv_emit.step(node, m, ctx, ctx.consts.place(conv_emit.constants(node, m, ctx)))
    x, pool = dram[node.inputs[0]], len(ctx.consts.blob)
    got = {"x": 0, "consts": 0}
    for gi in range(work.group_count):
        group = work.group_fn(gi, 0)
        loads = list(group.weight_loads + group.param_loads)
        for t in range(group.tile_count):
            loads += work.tile_fn(gi, t, Slots()).loads
        for ins in loads:
            assert ins.opcode is Opcode.DMA_LOAD
            n = ins.d0 * max(ins.d1, 1) * max(ins.d2, 1) * max(ins.d3, 1)
            ext = accesses(ins)[0]
            if ext.mem == x.memory and x.address <= ext.lo and ext.hi <= x.address + x.nbytes:
                got["x"] += n * x.itemsize
            else:
                assert ext.mem == wmem and ext.hi <= pool
                got["consts"] += n
    return got


def test_input_resident_reads_the_input_once():
    """A 1x1 conv (no halo): the input-resident orders load every input byte exactly once,
    weight-stationary once per channel chunk; INPUT loads the weights once, INPUT_STREAM once
    per stripe, weight-stationary once."""
    arch = load_preset("tnpu-s")
    rng = np.random.default_rng(3)
    g = conv_graph(rng, h=12, w=10, k=1, p=0, c=32, cout=64)
    node = g.nodes[-1]
    _, est_ctx = _contexts(g, arch)
    geo = conv_geometry.geometry(node, est_ctx)
    x_bytes = est_ctx.tensor(node.inputs[0]).nbytes
    consts = geo.weight_bytes(geo.cout) + 12 * geo.cout
    chunk, rows = 16, 3
    stripes, chunks = -(-geo.oh // rows), geo.cout // chunk
    by_order = {}
    for order in ORDERS:
        m = conv_emit.ConvMapping(rows, chunk, True, Engine.MATRIX, order)
        by_order[order] = _loaded_bytes(g, node, m, arch)
    W, IN, ST = (conv_emit.ConvOrder.WEIGHTS, conv_emit.ConvOrder.INPUT,
                 conv_emit.ConvOrder.INPUT_STREAM)
    assert by_order[IN] == {"x": x_bytes, "consts": consts}
    assert by_order[ST] == {"x": x_bytes,
                            "consts": stripes * geo.weight_bytes(geo.cout) + 12 * geo.cout}
    assert by_order[W] == {"x": chunks * x_bytes, "consts": consts}


def test_mapping_str_shows_the_order():
    m = conv_emit.ConvMapping(4, 32, order=conv_emit.ConvOrder.INPUT_STREAM)
    assert str(m) == "input-resident weights-streamed rows=4 cout_chunk=32"
    assert str(conv_emit.ConvMapping(2, 16, False)) == \
        "weight-stationary rows=2 cout_chunk=16 single-buffered"


@pytest.mark.parametrize("preset", ["tnpu-s", "u55-256", "u65-512", "tnpu-xs"])
def test_input_resident_bounds_below_estimates(preset):
    """conv_input_resident_bound <= the sampled and the full estimate of every fitting
    input-resident mapping, and not trivially small."""
    arch = load_preset(preset)
    ratios = []
    for kw in CONVS[:6] + [{"h": 28, "w": 28, "c": 64, "cout": 96, "s": 2}]:
        g = conv_graph(np.random.default_rng(5), **kw)
        node = g.nodes[-1]
        _, est_ctx = _contexts(g, arch)
        geo = conv_geometry.geometry(node, est_ctx)
        unit = 1 if geo.groups == 1 else geo.cout_g
        for chunk in {max(unit, 16 // unit * unit), max(unit, 32 // unit * unit)}:
            if chunk >= geo.cout:
                continue
            for order in ORDERS[1:]:
                for m in _fitting(node, est_ctx, order, chunk, (1, 2, 4, 8, 64)):
                    work = conv_emit.step(node, m, est_ctx)
                    for sample in (SAMPLE_TILES, None):
                        est = estimate_step(work, arch, sample=sample).cycles
                        low = prerank.conv_bound(node, m, est_ctx, sample)
                        assert low <= est, (kw, str(m), sample, low, est)
                        ratios.append(low / est)
    assert len(ratios) > 20
    assert sum(ratios) / len(ratios) > 0.5


def test_search_picks_input_resident_where_rereads_dominate():
    """A DRAM-bound conv on u55-256 (1 B/cycle weights flash, input re-read per chunk under
    weight-stationary): the search offers the input-resident orders and its choice is no
    slower than the best weight-stationary candidate."""
    arch = load_preset("u55-256")
    rng = np.random.default_rng(2)
    g = conv_graph(rng, h=28, w=28, c=64, cout=96, s=2)
    node = g.nodes[-1]
    _, est_ctx = _contexts(g, arch)
    cands = conv_emit.candidates(node, est_ctx)
    orders = {m.order for m in cands}
    assert conv_emit.ConvOrder.WEIGHTS in orders and len(orders) > 1
    full = {m: estimate_step(conv_emit.step(node, m, est_ctx), arch).cycles
            for m in cands}
    best_ws = min(c for m, c in full.items() if m.order is conv_emit.ConvOrder.WEIGHTS)
    best = min(full.values())
    assert best < best_ws  # reading the input once pays here


@pytest.mark.parametrize("depth", [2, 3])
@pytest.mark.parametrize("kw", [{"h": 7, "w": 7, "c": 64, "cout": 48},
                                {"h": 14, "w": 14, "c": 32, "cout": 40, "s": 2},
                                {"groups": 2, "c": 16, "cout": 48}])
def test_deep_weight_ring_bit_exact_and_estimate_follows(kw, depth):
    """INPUT_STREAM with a weight-chunk ring deeper than its stripe ring (and the half-width
    chunk): bit-exact, its estimate as close to the simulated cycles as the default
    buffering's (the same few cycles of region start and end apart), its SRAM holding
    `depth` chunk slots."""
    arch = load_preset("u55-256")
    rng = np.random.default_rng(depth + len(str(kw)))
    g = conv_graph(rng, **kw)
    node = g.nodes[-1]
    _, est_ctx = _contexts(g, arch)
    geo = conv_geometry.geometry(node, est_ctx)
    x = rng.integers(-128, 128, g.inputs[0].type.shape).astype(np.int8)
    want = reference(g, x)

    def run(m):
        est = estimate_step(conv_emit.step(node, m, est_ctx), arch)
        rp = compile_region(g, [node], ["x"], [node.name], arch, {"model": "t"},
                            units=[(node, m, est)])
        res = simulate(rp.program, arch, {"x": x})
        np.testing.assert_array_equal(res.outputs[node.name], want, err_msg=str(m))
        return est, res.stats.total_cycles

    chunks = (8, 16) if geo.groups == 1 else (geo.cout_g,)  # (a multiple of cout / groups)
    est, sim = run(conv_emit.ConvMapping(1, chunks[-1], False, Engine.MATRIX,
                                         conv_emit.ConvOrder.INPUT_STREAM))
    apart = est.cycles - sim
    assert 0 <= apart < 16
    for chunk in chunks:
        m = conv_emit.ConvMapping(geo.oh, chunk, False, Engine.MATRIX,
                                  conv_emit.ConvOrder.INPUT_STREAM, depth)
        lay = conv_emit._layout(geo, m, est_ctx, node)
        assert lay.out - lay.weights == depth * lay.weights_stride
        assert f"weight_buffers={depth}" in str(m)
        est, sim = run(m)
        assert est.cycles - sim == apart, (str(m), est.cycles, sim)
        low = prerank.conv_bound(node, m, est_ctx, None)
        assert low <= est.cycles


def test_flash_bound_conv_streams_weights_under_compute():
    """A conv whose weights come from u55-256's flash (1 B/cycle) and whose double-buffered
    full-width chunks do not fit SRAM with its input: the search finds a mapping whose weight
    ring holds two chunks, and it runs within 5 % of the flash floor (its weight bytes), where
    the single-buffered ring pays the matrix time on top of every chunk's load."""
    arch = load_preset("u55-256")
    rng = np.random.default_rng(3)
    g = conv_graph(rng, h=7, w=7, c=512, cout=128)
    node = g.nodes[-1]
    _, est_ctx = _contexts(g, arch)
    geo = conv_geometry.geometry(node, est_ctx)
    cands = conv_emit.candidates(node, est_ctx)
    full = {m: estimate_step(conv_emit.step(node, m, est_ctx), arch).cycles for m in cands}
    best = min(full, key=full.get)
    assert best.order is conv_emit.ConvOrder.INPUT_STREAM and best.weight_ring >= 2
    single = [c for m, c in full.items() if m.order is conv_emit.ConvOrder.INPUT_STREAM
              and m.weight_ring == 1]
    assert single and full[best] < 0.9 * min(single)
    floor = geo.weight_bytes(geo.cout)
    assert floor <= full[best] <= 1.05 * floor, (str(best), full[best], floor)
