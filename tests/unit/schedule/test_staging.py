"""Weight staging (schedule/staging.py): on a network whose first layers are compute-bound and
whose last is weight-bound, with weights in a slow memory (u55-256's flash, tnpu-xs's), earlier
steps copy part of the last layer's weights into the activation memory and it reads them from
there: bit-exact, every layer's estimate equal to its simulated cycles, faster than without
staging, the copies above the arena; with weights and activations in one memory nothing is
staged. The planner's pieces fit a tile's idle DMA_IN time and its free SRAM; of its two ways
of planning the copies (rings stored after or before a tile's outputs) the faster is kept."""

from __future__ import annotations

import numpy as np
import pytest

from tessel.arch import CompileOptions, load_preset
from tessel.driver import compile_graph
from tessel.ir import DType, GraphBuilder, Layout, Op, QuantParams, TensorType, verify
from tessel.isa import Engine, Opcode
from tessel.isa import fixedpoint as fp
from tessel.quant.golden import run_golden
from tessel.runtime.compiled import load
from tessel.schedule import staging


def staged_net(rng, side: int = 28, c: int = 64, wide: int = 256):
    """Two compute-bound 3x3 convs at `side` x `side` x `c`, then a stride-4 3x3 conv to `wide`
    channels: few MACs, many weight bytes."""
    b = GraphBuilder("net")
    x = b.input("x", TensorType((1, side, side, c), DType.F32, Layout.NHWC))
    q = b.add(Op.QUANTIZE, [x], dict(scale=0.05, zero_point=3, qmin=-128, qmax=127,
                                     dtype=DType.I8),
              type_=TensorType((1, side, side, c), DType.I8, Layout.NHWC,
                               QuantParams((0.05,), (3,))))

    def conv(inp, cin, cout, s, name):
        wt = rng.integers(-127, 128, (cout, 3, 3, cin)).astype(np.int8)
        mult, sh = fp.quantize_multipliers(rng.uniform(0.0005, 0.003, cout))
        ops = [b.constant(wt, name + "_w"),
               b.constant(rng.integers(-999, 999, cout).astype(np.int32), name + "_b"),
               b.constant(mult.astype(np.int32), name + "_m"),
               b.constant(sh.astype(np.int32), name + "_s")]
        return b.add(Op.QCONV2D, [inp, *ops], dict(
            stride=(s, s), padding=(1, 1, 1, 1), groups=1, layout=Layout.NHWC, in_zp=3,
            out_zp=3, act_min=3, act_max=127, dtype=DType.I8), name=name)

    y = conv(conv(conv(q, c, c, 1, "c1"), c, c, 1, "c2"), c, wide, 4, "c3")
    d = b.add(Op.DEQUANTIZE, [y], dict(scale=0.05, zero_point=3))
    return verify(b.build([d]))


def _compile(g, preset, on):
    return compile_graph(g, load_preset(preset), name="net",
                         options=CompileOptions(stage_weights=on))


def _copies(cm) -> tuple[int, int]:
    """(bytes DMA_IN loads from the weights memory, bytes DMA_OUT stores) of the program."""
    arch = cm.arch
    wmem = arch.memory_index(arch.weights_memory)
    loaded = sum(i.d0 * max(i.d1, 1) * max(i.d2, 1) * max(i.d3, 1)
                 for i in cm.program.streams[Engine.DMA_IN]
                 if i.opcode is Opcode.DMA_LOAD and i.mem == wmem)
    stored = sum(i.d0 * max(i.d1, 1) * max(i.d2, 1) * max(i.d3, 1)
                 for i in cm.program.streams[Engine.DMA_OUT] if i.opcode is Opcode.DMA_STORE)
    return loaded, stored


@pytest.mark.parametrize("preset", ["u55-256", "tnpu-xs"])
def test_staging_is_bit_exact_exactly_estimated_and_faster(preset, tmp_path):
    rng = np.random.default_rng(0)
    g = staged_net(rng)
    x = rng.standard_normal((1, 28, 28, 64)).astype(np.float32)
    gold = run_golden(g, [x])[0]
    off, on = _compile(g, preset, False), _compile(g, preset, True)
    for cm in (off, on):
        np.testing.assert_array_equal(cm.run(x)[0], gold)
        for layer in cm.profile.layers:
            assert layer.estimated_cycles == layer.cycles, layer.name
    (w_off, st_off), (w_on, st_on) = _copies(off), _copies(on)
    staged = st_on - st_off  # the copies' stores to the staging area
    assert staged > 0
    # the flash reads every constant byte as often (a staged one earlier, while it would idle)
    assert w_on == w_off
    wmem, amem = on.arch.weights_memory, on.arch.activations_memory  # (profiles key by name)
    assert on.profile.bytes_read[wmem] == off.profile.bytes_read[wmem]
    # and the staged bytes are written to and read back from the activation memory
    assert on.profile.bytes_written[amem] == off.profile.bytes_written[amem] + staged
    assert on.profile.bytes_read[amem] >= off.profile.bytes_read[amem] + staged
    assert on.profile.cycles < off.profile.cycles
    # the staging area lies above the arena, counted in it
    assert on.program.metadata["arena_peak_bytes"] >= off.program.metadata["arena_peak_bytes"] \
        + staged
    path = tmp_path / "net.tsl"
    on.save(path)  # the reader's token check: no deadlock, no token outstanding
    again = load(path)
    np.testing.assert_array_equal(again.run(x)[0], gold)
    assert _compile(g, preset, True).binary == on.binary  # deterministic


def test_nothing_is_staged_where_weights_share_the_activation_memory():
    rng = np.random.default_rng(1)
    g = staged_net(rng)
    on, off = _compile(g, "tnpu-s", True), _compile(g, "tnpu-s", False)
    assert on.binary == off.binary


def test_bounce_slots_take_the_largest_free_gap():
    assert staging._bounce(0, 1024, [], 2) == (0, 512)
    # busy [0, 100) and [600, 700): gaps [128, 600) (472 -> 2 x 192) and [704, 1024) (320)
    assert staging._bounce(0, 1024, [(600, 700), (0, 100)], 2) == (128, 192)
    assert staging._bounce(0, 1024, [(0, 1024)], 2)[1] == 0


def test_one_bounce_slot_takes_the_whole_gap():
    assert staging._bounce(0, 1024, [(600, 700), (0, 100)], 1) == (128, 448)


def test_each_copy_ring_plan_is_bit_exact_exactly_estimated_and_the_faster_is_kept(monkeypatch):
    rng = np.random.default_rng(0)
    g = staged_net(rng)
    x = rng.standard_normal((1, 28, 28, 64)).astype(np.float32)
    gold = run_golden(g, [x])[0]
    off = _compile(g, "u55-256", False).profile.cycles
    cycles = []
    for rings in staging.RINGS:  # copies stored after / before the tile's outputs
        monkeypatch.setattr(staging, "RINGS", (rings,))
        cm = _compile(g, "u55-256", True)
        np.testing.assert_array_equal(cm.run(x)[0], gold)
        for layer in cm.profile.layers:
            assert layer.estimated_cycles == layer.cycles, (rings, layer.name)
        assert _copies(cm)[1] > _copies(_compile(g, "u55-256", False))[1]
        assert cm.profile.cycles < off
        cycles.append(cm.profile.cycles)
    monkeypatch.undo()
    assert _compile(g, "u55-256", True).profile.cycles == min(cycles)
