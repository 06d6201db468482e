"""Cascading: chains around a depthwise conv (conv -> dw, conv -> dw -> project [-> residual
add], dw -> project [-> add]) run as one step in row stripes; every mapping the search may pick
is bit-exact vs the golden model and its estimate follows the simulator, the search picks the
fused step when it is faster, chains are found only where the intermediates have no other
reader, and the intermediates never go to DRAM (no arena space, no stores)."""

from __future__ import annotations

import numpy as np
import pytest
from conv_constants import conv_constants

from compile_region import compile_region, simulated_layer_cycles
from tessel.arch import load_preset
from tessel.ir import DType, GraphBuilder, Layout, Op, QuantParams, TensorType, verify
from tessel.isa import Engine, Opcode
from tessel.isa import fixedpoint as fp
from tessel.ops import fused_emit, fused_geometry
from tessel.ops.context import CodegenContext, ConstPool
from tessel.quant.golden import run_golden
from tessel.schedule import fusion, prerank, search
from tessel.schedule.estimate import estimate_step
from tessel.schedule.plan import estimation_context, plan_dram, plan_units
from tessel.sim import simulate


def q31(x):
    m, s = fp.quantize_multipliers(np.array([x]))
    return int(m[0]), int(s[0])


def block(rng, h, w, c1, c2, k, s, *, expand=1, project=None, residual=False, extra_use=None,
          stem_stride=1):
    """x -> [conv expand x expand, c2] -> depthwise k x k stride s -> [1x1 project to
    `project` channels] -> [qadd with x]. `extra_use`: also output the result of this member
    ("conv", "dw", "project": a second reader of an intermediate)."""
    b = GraphBuilder("block")
    x = b.input("x", TensorType((1, h, w, c1), DType.I8, Layout.NHWC, QuantParams((0.05,), (3,))))

    def consts(cout, shape, fan):
        return conv_constants(b, rng, cout, shape, fan)

    members = {}
    y, c = x, c1
    if expand:
        p = expand // 2
        y = members["conv"] = b.add(Op.QCONV2D, [x, *consts(c2, (c2, expand, expand, c1),
                                                           c1 * expand * expand)], dict(
            stride=(stem_stride, stem_stride), padding=(p, p, p, p), layout=Layout.NHWC,
            in_zp=3, out_zp=-7, act_min=-7, act_max=120, dtype=DType.I8))
        c = c2
    p = k // 2
    y = members["dw"] = b.add(Op.QCONV2D, [y, *consts(c, (c, k, k, 1), k * k)], dict(
        stride=(s, s), padding=(p, p, p, p), groups=c, layout=Layout.NHWC,
        in_zp=-7 if expand else 3, out_zp=2, act_min=-128, act_max=127, dtype=DType.I8))
    if project:
        y = members["project"] = b.add(Op.QCONV2D, [y, *consts(project, (project, 1, 1, c), c)],
                                       dict(layout=Layout.NHWC, in_zp=2, out_zp=-1,
                                            act_min=-128, act_max=127, dtype=DType.I8))
    if residual:  # "first": qadd(x, project), else qadd(project, x)
        ls = 20
        (am, ash), (bm, bsh), (om, osh) = q31(0.4), q31(0.3), q31(2.5 / (1 << ls))
        ops, zps = ([x, y], (3, -1)) if residual == "first" else ([y, x], (-1, 3))
        y = b.add(Op.QADD, ops, dict(
            a_zp=zps[0], b_zp=zps[1], left_shift=ls, a_multiplier=am, a_shift=ash,
            b_multiplier=bm, b_shift=bsh, out_multiplier=om, out_shift=osh, out_zp=-5,
            act_min=-125, act_max=127, dtype=DType.I8))
    outs = [y] + ([members[extra_use]] if extra_use else [])
    return verify(b.build(outs))


def npu_nodes(g):
    return [n for n in g.nodes if n.op in (Op.QCONV2D, Op.QADD, Op.MAX_POOL2D)]


def context(arch, g):
    """What compile_region gives the search: constants in the weights memory."""
    amem = arch.memory_index(arch.activations_memory)
    return CodegenContext(arch, g, {}, ConstPool(arch.memory_index(arch.weights_memory)), amem)


def check_mappings(g, chain, preset, rng, every=6):
    arch = load_preset(preset)
    nodes = npu_nodes(g)
    ctx = context(arch, g)
    mappings = fused_emit.candidates(chain, ctx)
    assert mappings
    xshape = g.type_of("x").shape
    x = rng.integers(-128, 128, xshape).astype(np.int8)
    want = run_golden(g, {"x": x})[0]
    est_ctx = estimation_context(ctx)
    out = chain.last.name
    for m in mappings[:: max(1, len(mappings) // every)]:
        est = estimate_step(fused_emit.step(chain, m, est_ctx), arch)
        rp = compile_region(g, nodes, ["x"], [out], arch, {}, units=[(chain, m, est)])
        res = simulate(rp.program, arch, {"x": x})
        np.testing.assert_array_equal(res.outputs[out], want, err_msg=str(m))
        # the estimate follows the program: the step's simulated cycles exactly
        assert (est.cycles,) == simulated_layer_cycles(rp, arch), m
        # intermediates: never stored (only the last member's rows are)
        stored = sum(i.d0 * i.d1 * i.d2 * i.d3 for i in rp.program.streams[Engine.DMA_OUT]
                     if i.opcode is Opcode.DMA_STORE)
        assert stored == chain.last.type.nbytes
    return mappings


# (h, w, c1, c2, k, s)
SHAPES = [(8, 8, 4, 16, 3, 1), (9, 7, 8, 48, 3, 2), (16, 16, 16, 96, 3, 2),
          (14, 14, 24, 144, 5, 1)]


@pytest.mark.parametrize("preset", ["tnpu-s", "u65-512", "tnpu-xs"])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_pair_mapping_is_bit_exact(shape, preset):
    rng = np.random.default_rng(sum(shape))
    g = block(rng, *shape)
    chains = fusion.fusible_chain(g, npu_nodes(g), 0)
    assert [len(c.nodes) for c in chains] == [2]
    check_mappings(g, chains[0], preset, rng)


# (h, w, c1, c2, k, s, expand kernel, project channels, residual, stem stride)
CHAINS = [
    (8, 8, 8, 32, 3, 1, 1, 8, "second", 1),  # inverted residual, qadd(project, x)
    (10, 9, 8, 48, 3, 1, 1, 8, "first", 1),  # qadd(x, project), odd sizes
    (9, 7, 8, 48, 3, 2, 1, 16, False, 1),  # stride-2 block, no residual
    (14, 14, 24, 144, 5, 1, 1, 40, False, 1),  # 5x5 depthwise
    (16, 16, 3, 16, 3, 1, 3, 8, False, 2),  # stem 3x3 stride-2 conv -> dw -> project
    (12, 12, 16, 0, 3, 1, 0, 8, False, 1),  # dw -> project (no expand)
    (12, 12, 16, 0, 3, 1, 0, 16, "second", 1),  # dw -> project -> add
    (11, 11, 16, 0, 3, 2, 0, 24, False, 1),  # dw stride 2 -> project
]


@pytest.mark.parametrize("preset", ["tnpu-s", "u65-512", "tnpu-xs", "u55-256"])
@pytest.mark.parametrize("spec", CHAINS, ids=lambda s: "x".join(map(str, s)))
def test_every_chain_mapping_is_bit_exact(spec, preset):
    h, w, c1, c2, k, s, e, proj, res, ss = spec
    rng = np.random.default_rng(sum(spec[:6]))
    g = block(rng, h, w, c1, c2, k, s, expand=e, project=proj, residual=res, stem_stride=ss)
    chains = fusion.fusible_chain(g, npu_nodes(g), 0)
    want_len = (1 if e else 0) + 2 + (1 if res else 0)
    assert len(chains[0].nodes) == want_len and chains[0].last is g.nodes[-1]
    arch = load_preset(preset)
    assert fused_emit.candidates(chains[0], context(arch, g)), f"no cascade of {spec} fits {preset}"
    check_mappings(g, chains[0], preset, rng)


def test_chain_detection():
    rng = np.random.default_rng(5)
    full = block(rng, 8, 8, 8, 32, 3, 1, project=8, residual="second")
    chains = fusion.fusible_chain(full, npu_nodes(full), 0)
    assert [[n.op for n in c.nodes] for c in chains] == [
        [Op.QCONV2D, Op.QCONV2D, Op.QCONV2D, Op.QADD], [Op.QCONV2D] * 3, [Op.QCONV2D] * 2]
    assert chains[0].residual == "x"
    # starting at the depthwise conv: dw -> project [-> add]
    assert [len(c.nodes) for c in fusion.fusible_chain(full, npu_nodes(full), 1)] == [3, 2]
    assert fusion.fusible_chain(full, npu_nodes(full), 2) == []  # a 1x1 conv and a qadd
    # an intermediate with a second reader (here: also a graph output) ends the chain before it
    for member, lengths in (("conv", []), ("dw", [2]), ("project", [3, 2])):
        g = block(rng, 8, 8, 8, 32, 3, 1, project=8, residual="second", extra_use=member)
        assert [len(c.nodes) for c in fusion.fusible_chain(g, npu_nodes(g), 0)] == lengths
    # a project that is not 1x1 is not fused; a stride-2 block has no residual add
    g = block(rng, 8, 8, 8, 32, 3, 2, project=8)
    assert [len(c.nodes) for c in fusion.fusible_chain(g, npu_nodes(g), 0)] == [3, 2]


def test_intermediates_get_no_arena_space():
    rng = np.random.default_rng(2)
    arch = load_preset("tnpu-s")
    g = block(rng, 16, 16, 16, 96, 3, 1, project=16, residual="second")
    nodes = npu_nodes(g)
    ctx = CodegenContext(arch, g, {}, ConstPool(0), 0)
    chain = fusion.fusible_chain(g, nodes, 0)[0]
    m = fused_emit.candidates(chain, ctx)[0]
    arena = plan_dram(g, nodes, ["x"], [chain.last.name], arch, [(chain, m, None)], 0)
    assert set(arena.tensors) == {"x", chain.last.name}
    assert arena.peak_bytes == 2 * 16 * 16 * 16  # input and output only


def test_search_fuses_mobilenet_block_and_skips_the_dram_round_trip():
    rng = np.random.default_rng(0)
    arch = load_preset("tnpu-s")
    g = block(rng, 56, 56, 24, 144, 3, 2)
    first, second = npu_nodes(g)
    ctx = CodegenContext(arch, g, {}, ConstPool(0), 0)
    units = plan_units(g, [first, second], ctx)
    assert len(units) == 1 and isinstance(units[0][0], fused_geometry.FusedChain)
    rp = compile_region(g, [first, second], ["x"], [second.name], arch, {})
    res = simulate(rp.program, arch, {"x": rng.integers(-128, 128, (1, 56, 56, 24), np.int8)})
    expanded = 56 * 56 * 144
    assert res.stats.memory_traffic["lpddr"].write_bytes < expanded  # only the dw output


@pytest.mark.parametrize("preset", ["tnpu-s", "u65-512"])
def test_search_fuses_inverted_residual_into_one_step(preset):
    rng = np.random.default_rng(3)
    arch = load_preset(preset)
    g = block(rng, 28, 28, 32, 192, 3, 1, project=32, residual="second")
    nodes = npu_nodes(g)
    units = plan_units(g, nodes, context(arch, g))
    assert len(units) == 1 and units[0][0].nodes == tuple(nodes)
    rp = compile_region(g, nodes, ["x"], [nodes[-1].name], arch, {})
    x = rng.integers(-128, 128, (1, 28, 28, 32), np.int8)
    res = simulate(rp.program, arch, {"x": x})
    np.testing.assert_array_equal(res.outputs[nodes[-1].name], run_golden(g, {"x": x})[0])
    written = res.stats.memory_traffic[arch.activations_memory].write_bytes
    assert written == 28 * 28 * 32  # the block output only


@pytest.mark.parametrize("depth", [2, 3])
@pytest.mark.parametrize("engine", [Engine.MATRIX, Engine.VECTOR])
@pytest.mark.parametrize("line", [0, 1, 4])
@pytest.mark.parametrize("rows", [1, 3])
def test_line_buffer_rebases_are_bit_exact(engine, line, rows, depth):
    """A tall map: the line buffer fills and rebases (COPY of the rows still needed) several
    times; every short / long line buffer, both depthwise engines and both accumulator ring
    depths give the golden result."""
    rng = np.random.default_rng(rows * 10 + line)
    arch = load_preset("tnpu-s")
    g = block(rng, 30, 6, 8, 32, 3, 1, project=8, residual="second")
    nodes = npu_nodes(g)
    chain = fusion.fusible_chain(g, nodes, 0)[0]
    ctx = context(arch, g)
    m = fused_geometry.FusedMapping(rows, 16, engine, line, depth)
    geo = fused_geometry.ChainGeometry(chain, m, ctx)
    assert sum(s.moved >= 0 for s in geo.stripes) >= (2 if line < 4 else 1)
    est_ctx = estimation_context(ctx)
    est = estimate_step(fused_emit.step(chain, m, est_ctx), arch)
    rp = compile_region(g, nodes, ["x"], [chain.last.name], arch, {}, units=[(chain, m, est)])
    x = rng.integers(-128, 128, (1, 30, 6, 8)).astype(np.int8)
    res = simulate(rp.program, arch, {"x": x})
    np.testing.assert_array_equal(res.outputs[chain.last.name], run_golden(g, {"x": x})[0])
    assert (est.cycles,) == simulated_layer_cycles(rp, arch)


def test_chain_compiles_deterministically():
    """Same graph and arch -> byte-identical program (the cached tile order included)."""
    rng = np.random.default_rng(4)
    arch = load_preset("u65-512")
    g = block(rng, 20, 12, 16, 64, 3, 1, project=16, residual="second")
    nodes = npu_nodes(g)
    a = compile_region(g, nodes, ["x"], [nodes[-1].name], arch, {})
    b = compile_region(g, nodes, ["x"], [nodes[-1].name], arch, {})
    assert len(a.layers) == 1 and a.layers[0].nodes == tuple(n.name for n in nodes)
    assert a.program.streams == b.program.streams and a.program.constants == b.program.constants


@pytest.mark.parametrize("preset", ["tnpu-s", "u65-512", "tnpu-xs", "u55-256"])
def test_accumulator_floor_only_skips_mappings_that_do_not_fit(preset, monkeypatch):
    """candidates() skips mappings whose accumulator floor exceeds the accumulator without
    building them: the list equals the one built by trying every mapping's layout."""
    arch = load_preset(preset)
    graphs = [block(np.random.default_rng(1), *spec[:6], expand=spec[6], project=spec[7],
                    residual=spec[8], stem_stride=spec[9])
              for spec in CHAINS + [(*s, 1, 0, False, 1) for s in SHAPES]]
    graphs += [pool_block(np.random.default_rng(1), *spec) for spec in POOLS]
    graphs += [conv_conv_block(np.random.default_rng(1), *spec) for spec in HALOS]
    for g in graphs:
        for chain in fusion.fusible_chain(g, npu_nodes(g), 0):
            ctx = context(arch, g)
            got = fused_emit.candidates(chain, ctx)
            with monkeypatch.context() as mp:
                mp.setattr(fused_emit, "_acc_floor", lambda *a: 0)
                assert got == fused_emit.candidates(chain, ctx), chain.name


def pool_block(rng, h, w, c1, c2, k, s, pk, ps, pp, ceil=False):
    """x -> conv k x k stride s (padding k // 2) to c2 -> max pool pk x pk stride ps pad pp."""
    b = GraphBuilder("stem")
    x = b.input("x", TensorType((1, h, w, c1), DType.I8, Layout.NHWC, QuantParams((0.05,), (3,))))
    p = k // 2
    y = b.add(Op.QCONV2D, [x, *conv_constants(b, rng, c2, (c2, k, k, c1), c1 * k * k)], dict(
        stride=(s, s), padding=(p, p, p, p), layout=Layout.NHWC, in_zp=3, out_zp=-7,
        act_min=-7, act_max=120, dtype=DType.I8))
    y = b.add(Op.MAX_POOL2D, [y], dict(kernel=(pk, pk), stride=(ps, ps),
                                       padding=(pp, pp, pp, pp), ceil_mode=ceil,
                                       dilation=(1, 1), layout=Layout.NHWC))
    return verify(b.build([y]))


# (h, w, c1, c2, conv k, conv s, pool k, pool s, pool pad, ceil)
POOLS = [
    (32, 32, 3, 16, 7, 2, 3, 2, 1, False),  # ResNet's stem, scaled down
    (15, 13, 4, 24, 3, 1, 3, 2, 1, True),  # odd sizes, ceil mode
    (12, 12, 8, 40, 3, 1, 2, 2, 0, False),  # 2 x 2 / 2, no padding
    (10, 9, 8, 8, 1, 1, 3, 1, 1, False),  # 1 x 1 conv, stride-1 pool (halo rows kept)
]


@pytest.mark.parametrize("preset", ["tnpu-s", "u65-512", "tnpu-xs", "u55-256"])
@pytest.mark.parametrize("spec", POOLS, ids=lambda s: "x".join(map(str, s)))
def test_every_conv_pool_mapping_is_bit_exact(spec, preset):
    rng = np.random.default_rng(sum(spec[:6]))
    g = pool_block(rng, *spec)
    chain = _only_chain(g, spec, preset, "pooled")
    ms = check_mappings(g, chain, preset, rng, every=12)
    assert all(m.dw_engine is Engine.VECTOR for m in ms)


def _only_chain(g, spec, preset: str, kind: str) -> fused_geometry.FusedChain:
    """The graph's one chain (of the kind: a FusedChain flag), with a mapping on the preset."""
    chains = fusion.fusible_chain(g, npu_nodes(g), 0)
    assert len(chains) == 1 and getattr(chains[0], kind) and chains[0].last is g.nodes[-1]
    assert fused_emit.candidates(chains[0], context(load_preset(preset), g)), \
        f"no cascade of {spec} fits {preset}"
    return chains[0]


@pytest.mark.parametrize("preset", ["tnpu-s", "u65-512", "tnpu-xs", "u55-256"])
def test_chain_bounds_below_every_estimate(preset):
    """prerank.chain_bound <= the sampled and the full estimate of every candidate of every
    chain kind (the search prunes on it, so it is exact only if this holds)."""
    arch = load_preset(preset)
    graphs = [pool_block(np.random.default_rng(2), *spec) for spec in POOLS]
    graphs += [block(np.random.default_rng(3), *spec[:6], expand=spec[6], project=spec[7],
                     residual=spec[8], stem_stride=spec[9]) for spec in CHAINS]
    graphs += [block(np.random.default_rng(4), *shape) for shape in SHAPES]
    graphs += [conv_conv_block(np.random.default_rng(5), *spec) for spec in HALOS]
    ratios = []
    for g in graphs:
        ctx = context(arch, g)
        est_ctx = estimation_context(ctx)
        for chain in fusion.fusible_chain(g, npu_nodes(g), 0):
            for m in fused_emit.candidates(chain, est_ctx):
                for sample in (search.SAMPLE_TILES, None):
                    est = estimate_step(fused_emit.step(chain, m, est_ctx), arch,
                                        sample=sample).cycles
                    low = prerank.chain_bound(chain, m, est_ctx, sample)
                    assert low <= est, (chain.name, str(m), sample, low, est)
                    ratios.append(low / est)
    assert len(ratios) > 100 and sum(ratios) / len(ratios) > 0.3


def conv_conv_block(rng, h, w, c1, c2, c3, k1, s1, k2, s2):
    """x -> conv k1 x k1 stride s1 to c2 -> conv k2 x k2 stride s2 to c3 (paddings k // 2)."""
    b = GraphBuilder("basic")
    x = b.input("x", TensorType((1, h, w, c1), DType.I8, Layout.NHWC, QuantParams((0.05,), (3,))))
    y, c, zp = x, c1, 3
    for k, s, cout, ozp in ((k1, s1, c2, -7), (k2, s2, c3, 4)):
        p = k // 2
        y = b.add(Op.QCONV2D, [y, *conv_constants(b, rng, cout, (cout, k, k, c), c * k * k)],
                  dict(stride=(s, s), padding=(p, p, p, p), layout=Layout.NHWC, in_zp=zp,
                       out_zp=ozp, act_min=ozp, act_max=120, dtype=DType.I8))
        c, zp = cout, ozp
    return verify(b.build([y]))


# (h, w, c1, c2, c3, k1, s1, k2, s2)
HALOS = [
    (14, 14, 16, 16, 16, 3, 1, 3, 1),  # a ResNet basic block's two 3x3 convs, scaled down
    (15, 13, 8, 24, 32, 3, 2, 3, 1),  # stride-2 first conv, odd sizes
    (12, 11, 8, 16, 8, 1, 1, 5, 2),  # 1x1 -> 5x5 stride 2
]


@pytest.mark.parametrize("preset", ["tnpu-s", "u65-512", "tnpu-xs", "u55-256"])
@pytest.mark.parametrize("spec", HALOS, ids=lambda s: "x".join(map(str, s)))
def test_every_conv_conv_mapping_is_bit_exact(spec, preset):
    rng = np.random.default_rng(sum(spec))
    g = conv_conv_block(rng, *spec)
    ms = check_mappings(g, _only_chain(g, spec, preset, "halo_conv"), preset, rng, every=12)
    assert all(m.dw_engine is Engine.MATRIX and m.chunk == spec[3] for m in ms)
