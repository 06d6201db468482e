"""Data movement programs (transpose, concat, slice, pad, expand, upsample_nearest): the
simulated output equals numpy (and the golden model) bit for bit on every preset; the estimate
equals the simulated cycles; tiling kicks in when the tensor exceeds SRAM."""

from __future__ import annotations

import numpy as np
import pytest

from compile_region import assert_estimates_exact, compile_region
from tessel.arch import load_preset
from tessel.errors import TesselCompileError
from tessel.ir import DType, GraphBuilder, Layout, Op, TensorType, verify
from tessel.isa import Engine, Opcode
from tessel.ops import movement_emit as om
from tessel.ops.context import DramTensor
from tessel.quant.golden import GOLDEN_KERNELS
from tessel.sim import simulate

PRESETS = ["tnpu-s", "tnpu-xs", "u55-256", "u65-512", "tnpu-m"]
def numpy_ref(op: Op, a: dict, xs: list[np.ndarray]) -> np.ndarray:
    """Independent of the IR kernels: plain numpy indexing."""
    x = xs[0]
    if op is Op.TRANSPOSE:
        return x.transpose(a["perm"])
    if op is Op.CONCAT:
        return np.concatenate(xs, axis=a["axis"])
    if op is Op.SLICE:
        idx = [slice(None)] * x.ndim
        idx[a["axis"]] = slice(a["start"], a["end"], a["step"])
        return x[tuple(idx)]
    if op is Op.PAD:
        p = a["pads"]
        out = np.full([d + p[2 * i] + p[2 * i + 1] for i, d in enumerate(x.shape)],
                      int(a["value"]), x.dtype)
        out[tuple(slice(p[2 * i], p[2 * i] + d) for i, d in enumerate(x.shape))] = x
        return out
    if op is Op.EXPAND:
        return np.broadcast_to(x, a["shape"])
    fh, fw = a["scale"]
    h, w = (1, 2) if a["layout"] is Layout.NHWC else (2, 3)
    return x.repeat(fh, axis=h).repeat(fw, axis=w)


def run(op: Op, shapes, attrs, preset: str, dt: DType = DType.I8, seed: int = 0):
    rng = np.random.default_rng(seed)
    arch = load_preset(preset)
    b = GraphBuilder("t")
    names = [b.input(f"x{i}", TensorType(s, dt)) for i, s in enumerate(shapes)]
    g = verify(b.build([b.add(op, names, attrs)]))
    node = g.nodes[-1]
    rp = compile_region(g, [node], names, [node.name], arch, {"model": "t"})
    lo, hi = dt.bounds
    xs = {n: rng.integers(lo, hi + 1, s).astype(dt.numpy) for n, s in zip(names, shapes,
                                                                           strict=True)}
    res = simulate(rp.program, arch, xs)
    a = dict(node.attr_map)
    out = res.outputs[node.name]
    np.testing.assert_array_equal(out, numpy_ref(op, a, [xs[n] for n in names]))
    np.testing.assert_array_equal(out, GOLDEN_KERNELS[op](a, [xs[n] for n in names]))
    return rp, res


CASES = [
    (Op.TRANSPOSE, [(1, 24, 20, 40)], {"perm": (0, 3, 1, 2)}, DType.I8),  # NHWC -> NCHW
    (Op.TRANSPOSE, [(1, 40, 24, 20)], {"perm": (0, 2, 3, 1)}, DType.I8),  # NCHW -> NHWC
    (Op.TRANSPOSE, [(2, 3, 5, 7)], {"perm": (2, 0, 3, 1)}, DType.I8),
    (Op.TRANSPOSE, [(1, 64, 6, 32)], {"perm": (0, 2, 1, 3)}, DType.I16),  # head split
    (Op.TRANSPOSE, [(33, 17)], {"perm": (1, 0)}, DType.I8),
    (Op.CONCAT, [(1, 7, 9, 5), (1, 7, 9, 3), (1, 7, 9, 12)], {"axis": 3}, DType.I8),
    (Op.CONCAT, [(1, 3, 16), (1, 5, 16)], {"axis": 1}, DType.I16),
    (Op.SLICE, [(1, 17, 9, 12)], {"axis": 1, "start": 1, "end": 16, "step": 3}, DType.I8),
    (Op.SLICE, [(1, 10, 33)], {"axis": -1, "start": -20, "end": 100, "step": 1}, DType.I16),
    (Op.PAD, [(1, 9, 7, 5)], {"pads": (0, 0, 1, 2, 2, 1, 0, 0), "value": -3.0}, DType.I8),
    (Op.PAD, [(3, 40, 30)], {"pads": (1, 0, 0, 2, 3, 4), "value": 5.0}, DType.I16),
    (Op.EXPAND, [(1, 1, 40)], {"shape": (2, 30, 40)}, DType.I8),
    (Op.EXPAND, [(6, 1)], {"shape": (6, 9)}, DType.I16),
    (Op.UPSAMPLE_NEAREST, [(1, 14, 14, 32)], {"scale": (2, 2), "layout": Layout.NHWC},
     DType.I8),
    (Op.UPSAMPLE_NEAREST, [(1, 5, 7, 3)], {"scale": (3, 1), "layout": Layout.NHWC}, DType.I16),
]


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize(("op", "shapes", "attrs", "dt"), CASES,
                         ids=[f"{c[0].value}{k}" for k, c in enumerate(CASES)])
def test_movement_bit_exact_and_estimate_exact(preset, op, shapes, attrs, dt):
    # a 5-D upsample store is two 4-D DMAs whose boxes interleave: the simulator serialises
    # them (one more latency), and so does the estimate (estimate.hazard_groups)
    rp, _ = run(op, shapes, attrs, preset, dt)
    assert_estimates_exact(rp, load_preset(preset))


@pytest.mark.parametrize(("op", "shapes", "attrs"), [
    (Op.TRANSPOSE, [(1, 56, 56, 64)], {"perm": (0, 3, 1, 2)}),
    (Op.PAD, [(1, 70, 70, 32)], {"pads": (0, 0, 1, 1, 1, 1, 0, 0), "value": 0.0}),
    (Op.CONCAT, [(1, 100, 100, 8), (1, 100, 100, 8)], {"axis": 3}),
])
def test_tensors_larger_than_sram_are_tiled(op, shapes, attrs):
    rp, res = run(op, shapes, attrs, "tnpu-xs")  # 128 KiB SRAM
    loads = [i for i in rp.program.streams[Engine.DMA_IN] if i.opcode is Opcode.DMA_LOAD]
    assert len(loads) > len(shapes)  # more than one tile per input


def test_pad_value_is_the_attribute_in_the_integer_domain():
    rp, res = run(Op.PAD, [(2, 3)], {"pads": (1, 1, 0, 2), "value": 7.0}, "tnpu-s")
    out = res.outputs[rp.layers[0].name]
    assert (out[0] == 7).all() and (out[:, 3:] == 7).all()


def test_dma_only_steps_have_no_vector_work():
    rp, _ = run(Op.TRANSPOSE, [(4, 6, 8)], {"perm": (2, 1, 0)}, "tnpu-s")
    ops = {i.opcode for i in rp.program.streams[Engine.VECTOR]}
    assert ops <= {Opcode.WAIT, Opcode.SIGNAL, Opcode.END}


def test_transfers_split_dims_beyond_four_and_merge_contiguous():
    t = DramTensor(0, 0, (2, 3, 4, 5, 6), DType.I8)
    five = [(6, 1, 1), (5, 0, 6), (4, 6, 0), (3, 24, 30), (2, 200, 500)]
    ins = om.transfers(Opcode.DMA_STORE, t, 0, 0, five)
    assert len(ins) == 2  # the smallest outer dim (2) is looped
    merged = om.transfers(Opcode.DMA_LOAD, t, 0, 0, [(6, 1, 1), (5, 6, 6), (4, 30, 30)])
    assert len(merged) == 1 and merged[0].d0 == 120


def test_mismatched_dtypes_are_rejected():
    b = GraphBuilder("t")
    x = b.input("x", TensorType((1, 4), DType.I8))
    y = b.input("y", TensorType((1, 4), DType.I16))
    c = b.add(Op.CONCAT, [x, y], {"axis": 1}, type_=TensorType((1, 8), DType.I8))
    g = b.build([c])
    with pytest.raises(TesselCompileError, match="another dtype"):
        compile_region(g, [g.nodes[-1]], ["x", "y"], [c], load_preset("tnpu-s"), {})
