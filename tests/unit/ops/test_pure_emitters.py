"""Pure emitters (ops/registry.py): `constants(unit, mapping, ctx)` leaves the constant pool
untouched and gives the same blobs twice; `step(unit, mapping, ctx, placed)` reads exactly the
placed blobs (every load from the weights memory outside a DRAM tensor falls inside a placed
blob, and together the loads cover every byte of every blob); the estimation work
(`placed=None`) is the same program with each constant address 0 instead of its blob's.
One case per emitter kind, on a preset with one off-chip memory and one with two."""

from __future__ import annotations

import numpy as np
import pytest
from test_conv_codegen import conv_graph
from test_eltwise_codegen import binary_graph, lut_graph, requantize_graph
from test_fused_codegen import block, conv_conv_block, npu_nodes, pool_block
from test_matmul_codegen import linear_graph, matmul_graph
from test_norm_codegen import layer_norm_graph, softmax_graph
from test_pool_codegen import mean_attrs, pool_attrs

from tessel.arch import load_preset
from tessel.ir import DType, GraphBuilder, Op, TensorType, verify
from tessel.isa import Engine, Opcode
from tessel.isa.footprint import pattern_addresses
from tessel.ops import conv_emit, fused_emit
from tessel.ops.context import (
    CodegenContext,
    ConstPool,
    DramTensor,
    PlacedConstants,
    StepConstants,
    align,
)
from tessel.ops.fused_geometry import FusedChain
from tessel.ops.registry import emitter_for
from tessel.ops.step import Slots
from tessel.schedule import fusion
from tessel.schedule.plan import place_data_constants, plan

ACT_BASE = 1 << 26  # activations far above the pool when both share a memory
POOL_PAD = 40  # bytes already in the pool: the step's blobs are placed at non-zero addresses


def _single(g):
    """(graph, unit, emitter, mappings: None for a few of the emitter's candidates)."""
    node = g.nodes[-1]
    return g, node, emitter_for(node), None


def _chain(g, attr=None):
    chains = fusion.fusible_chain(g, npu_nodes(g), 0)
    chain = next(c for c in chains if attr is None or getattr(c, attr))
    return g, chain, fused_emit, None


def _conv_order(order):
    def build(rng):  # each loop order, whether or not the candidates would offer it
        g = conv_graph(rng, h=9, w=8, c=8, cout=40)
        return g, g.nodes[-1], conv_emit, [conv_emit.ConvMapping(3, 16, True, Engine.MATRIX, order)]
    return build


def _op_graph(op, shapes, attrs, dt=DType.I8, const=None):
    b = GraphBuilder("t")
    names = [b.input(f"x{i}", TensorType(s, dt)) for i, s in enumerate(shapes)]
    if const is not None:
        names.append(b.constant(const, "k"))
    return verify(b.build([b.add(op, names, attrs)]))


CASES = {
    "conv": lambda rng: _single(conv_graph(rng, cout=40)),
    "conv_grouped": lambda rng: _single(conv_graph(rng, c=16, cout=32, groups=4, s=2)),
    "conv_depthwise": lambda rng: _single(conv_graph(rng, c=24, cout=24, groups=24)),
    **{f"conv_{o.value}": _conv_order(o) for o in conv_emit.ConvOrder},
    "fused_conv_dw_project_add": lambda rng: _chain(
        block(rng, 8, 8, 8, 32, 3, 1, project=8, residual="second")),
    "fused_dw_project": lambda rng: _chain(
        block(rng, 12, 12, 16, 0, 3, 1, expand=0, project=8)),
    "fused_conv_pool": lambda rng: _chain(pool_block(rng, 15, 13, 4, 24, 3, 1, 3, 2, 1), "pooled"),
    "fused_conv_conv": lambda rng: _chain(conv_conv_block(rng, 14, 14, 16, 16, 16, 3, 1, 3, 1),
                                          "halo_conv"),
    "qlinear": lambda rng: _single(linear_graph(rng, (1, 20, 48), 40)),
    "qmatmul_const_b": lambda rng: _single(matmul_graph(
        (2, 12, 24), (24, 20), rng.integers(-128, 128, (24, 20)).astype(np.int8))),
    "qmatmul": lambda rng: _single(matmul_graph((2, 12, 24), (2, 24, 20))),
    "qadd_const": lambda rng: _single(binary_graph(rng, Op.QADD, (1, 6, 7, 16), (16,),
                                                   b_const=True)),
    "qmul_const_full": lambda rng: _single(binary_graph(rng, Op.QMUL, (3, 40), (3, 40),
                                                        b_const=True)),
    "qsub": lambda rng: _single(binary_graph(rng, Op.QSUB, (4, 33), (4, 33))),
    "lut_i16": lambda rng: _single(lut_graph(rng, (5, 70), DType.I16)),
    "requantize": lambda rng: _single(requantize_graph((3, 50), DType.I8, DType.I16)),
    "softmax": lambda rng: _single(softmax_graph((4, 30), DType.I16, DType.I8, 0.01, 0)[0]),
    "layer_norm": lambda rng: _single(layer_norm_graph(
        (6, 64), DType.I8, DType.I8, ((0.05, 3), (0.02, -1)))[0]),
    "max_pool": lambda rng: _single(_op_graph(Op.MAX_POOL2D, [(1, 9, 9, 5)],
                                              pool_attrs(3, 2, 1, dilation=(1, 1)))),
    "avg_pool": lambda rng: _single(_op_graph(Op.QAVG_POOL2D, [(1, 10, 11, 6)],
                                              pool_attrs(3, 1, 1, act_min=-128, act_max=127))),
    "mean": lambda rng: _single(_op_graph(Op.QMEAN, [(1, 7, 7, 32)],
                                          mean_attrs((1, 2), 49, True, DType.I8))),
    "transpose": lambda rng: _single(_op_graph(Op.TRANSPOSE, [(2, 3, 5, 7)],
                                               {"perm": (2, 0, 3, 1)})),
    "concat_const": lambda rng: _single(_op_graph(
        Op.CONCAT, [(1, 3, 16)], {"axis": 1},
        const=rng.integers(-128, 128, (1, 2, 16)).astype(np.int8))),
    "pad": lambda rng: _single(_op_graph(Op.PAD, [(1, 9, 7, 5)],
                                         {"pads": (0, 0, 1, 2, 2, 1, 0, 0), "value": -3.0})),
}


# steps that read nothing from the pool (a concat's constant operand is a data constant)
NO_CONSTANTS = {"qsub", "requantize", "max_pool", "avg_pool", "transpose",
                "concat_const", "pad"}


def _context(arch, g, unit):
    """Every tensor the unit reads or writes at its own DRAM address (data constants of
    data-movement ops in the pool, as the schedule stage places them; activations above
    ACT_BASE); a pool already holding POOL_PAD bytes."""
    wmem, amem = (arch.memory_index(n) for n in (arch.weights_memory, arch.activations_memory))
    pool = ConstPool(wmem)
    pool.add(bytes(range(POOL_PAD)))
    nodes = unit.nodes if isinstance(unit, FusedChain) else (unit,)
    dram = place_data_constants(g, list(nodes), pool)
    addr = ACT_BASE
    for name in [n for node in nodes for n in (*node.inputs, node.name)]:
        if name not in dram and g.constant_value(name) is None:
            t = g.type_of(name)
            dram[name] = DramTensor(amem, addr, t.shape, t.dtype)
            addr = align(addr + t.nbytes)
    return CodegenContext(arch, g, dram, pool, amem)


def _program(work):
    """Every instruction of the work, in emission order (default slots)."""
    out = []
    for gi in range(work.group_count):
        group = work.group_fn(gi, 0)
        out += group.weight_loads + group.param_loads + group.vector_setup
        for t in range(group.tile_count):
            tile = work.tile_fn(gi, t, Slots())
            out += tile.loads + tile.matrix + tile.vector + tile.stores
    return out


def _bytes_read(ins) -> np.ndarray:
    """Every off-chip byte address a DMA_LOAD reads."""
    dims = [max(getattr(ins, f"d{k}"), 1) for k in range(4)]
    strides = [getattr(ins, f"ext_s{k}") for k in range(4)]
    starts = pattern_addresses(ins.ext_addr, dims, strides).ravel()
    return (starts[:, None] + np.arange(ins.dtype.nbytes)).ravel()


def _mappings(unit, em, ctx, fixed):
    if fixed is not None:
        return fixed
    cands = em.candidates(unit, ctx)
    assert cands, unit
    return cands[:: max(1, len(cands) // 3)][:4]  # a few, from the first to the last


@pytest.mark.parametrize("preset", ["tnpu-s", "u55-256"])
@pytest.mark.parametrize("case", list(CASES))
def test_constants_are_pure_and_the_step_reads_exactly_the_placed_blobs(case, preset):
    rng = np.random.default_rng(len(case))
    arch = load_preset(preset)
    g, unit, em, fixed = CASES[case](rng)
    ctx = _context(arch, g, unit)
    for m in _mappings(unit, em, ctx, fixed):
        before = bytes(ctx.consts.blob)
        consts = em.constants(unit, m, ctx)
        assert isinstance(consts, StepConstants)
        assert all(isinstance(b, bytes) for b in consts.blobs)
        assert bool(consts.blobs) == (case not in NO_CONSTANTS), consts
        assert bytes(ctx.consts.blob) == before, "constants() changed the pool"
        assert em.constants(unit, m, ctx) == consts, "constants() is not deterministic"
        placed = ctx.consts.place(consts)
        assert isinstance(placed, PlacedConstants)
        assert len(placed.addresses) == len(consts.blobs)
        for a, b in zip(placed.addresses, consts.blobs, strict=True):
            assert a >= POOL_PAD and a % 16 == 0
            assert bytes(ctx.consts.blob[a:a + len(b)]) == b
        work = _program(em.step(unit, m, ctx, placed))
        est = _program(em.step(unit, m, ctx))
        _check_reads(work, est, ctx, placed, consts, str(m))
        del ctx.consts.blob[len(before):]  # the next mapping's blobs at the same addresses


def _check_reads(work, est, ctx, placed, consts, what):
    wmem = ctx.consts.memory
    tensors = list(ctx.dram.values())
    blobs = [(a, a + len(b)) for a, b in zip(placed.addresses, consts.blobs, strict=True)]
    read = []
    assert len(work) == len(est), what
    for p, e in zip(work, est, strict=True):
        if p.opcode is not Opcode.DMA_LOAD or p.mem != wmem or any(
                t.memory == p.mem and t.address <= p.ext_addr < t.address + max(t.nbytes, 1)
                for t in tensors):
            assert p == e, (what, str(p), str(e))  # not a constant read: same instruction
            continue
        got = _bytes_read(p)
        k = next((k for k, (lo, hi) in enumerate(blobs) if lo <= got.min() and got.max() < hi),
                 None)
        assert k is not None, (what, "a load outside every placed blob", str(p), blobs)
        # estimation: the same load at address 0 of the blob
        assert p.replace(ext_addr=p.ext_addr - placed.addresses[k]) == e, (what, str(p), str(e))
        read.append(got)
    want = np.concatenate([np.arange(lo, hi) for lo, hi in blobs]) if blobs else np.array([])
    got = np.unique(np.concatenate(read)) if read else np.array([])
    np.testing.assert_array_equal(got, want, err_msg=f"{what}: bytes read != placed blobs")


def test_placed_constants_must_match_the_step():
    rng = np.random.default_rng(0)
    g = conv_graph(rng, cout=40)
    node = g.nodes[-1]
    arch = load_preset("tnpu-s")
    ctx = _context(arch, g, node)
    m = conv_emit.ConvMapping(4, 16, True, Engine.MATRIX, conv_emit.ConvOrder.WEIGHTS)
    assert len(conv_emit.constants(node, m, ctx).blobs) == 3  # 40 channels in chunks of 16
    with pytest.raises(ValueError, match="2 placed constants for a step that reads 3"):
        conv_emit.step(node, m, ctx, PlacedConstants((0, 16)))


def test_the_schedule_places_each_steps_constants_in_program_order():
    """The pool of a planned schedule is its data constants, then each step's `constants`
    placed step after step: rebuilt here from the emitters alone."""
    rng = np.random.default_rng(3)
    g = block(rng, 8, 8, 8, 32, 3, 1, project=8, residual="second")
    arch = load_preset("tnpu-s")
    nodes = npu_nodes(g)
    sched = plan(g, nodes, ["x"], [g.nodes[-1].name], arch)
    assert len(sched.steps) >= 1
    pool = ConstPool(sched.constants.memory)
    place_data_constants(g, nodes, pool)
    ctx = CodegenContext(arch, g, {}, pool, arch.memory_index(arch.activations_memory))
    for s in sched.steps:
        em = fused_emit if isinstance(s.unit, FusedChain) else emitter_for(s.unit)
        pool.place(em.constants(s.unit, s.mapping, ctx))
    assert bytes(pool.blob) == sched.constants.blob
    weights = sum(g.type_of(n.inputs[1]).nbytes for n in nodes if n.op is Op.QCONV2D)
    assert len(pool.blob) > weights  # every conv's weights (and parameters) are in it
