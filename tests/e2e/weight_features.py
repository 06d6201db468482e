"""The weight features the random model families draw when asked (`weights=True`): exact 2:4
masks on a layer's weights, targets with the weight decoder and / or 2:4 sparsity, quantiser
configs with int4 weights and int16 activations per layer; and the census of what a compiled
binary holds of them (sparse and int4 CONVs, DMA_LOAD_W streams by mode, int16 element-wise
instructions, 2:4 linear layers run as 1x1 convs), so a test can assert the feature it meant
to cover is really in the binary.

Every draw takes a random stream of its own (`np.random.default_rng([seed, tag])`): a model
without the weight features is the one its generator built before they existed.
"""

from __future__ import annotations

import numpy as np

from tessel.arch.types import NpuArch
from tessel.ir import DType, Graph, Op
from tessel.isa import Opcode
from tessel.isa.instrs.matrix import WeightType
from tessel.isa.weight_codec import StreamMode
from tessel.lower.legalize import legalize
from tessel.quant.config import (
    ActDtype,
    Int4Rounding,
    LayerOverride,
    OpKind,
    QuantConfig,
    WeightDtype,
)

MASK, TARGET, CONFIG, WIDE, MAC16 = 24, 25, 26, 16, 27  # the streams' tags


def stream(seed: int, tag: int) -> np.random.Generator:
    return np.random.default_rng([seed, tag])


def mask_2_4(rng: np.random.Generator, w: np.ndarray, axis: int = -1) -> np.ndarray:
    """`w` with an exact 2:4 pattern along `axis` (its length a multiple of four): in every
    group of four, two kept at random positions, and now and then one or none (a group of
    zeros is 2:4 too)."""
    v = np.moveaxis(w, axis, -1).copy()
    groups = v.reshape(-1, 4)
    order = np.argsort(rng.random(groups.shape), axis=1)
    kept = np.where(rng.random(len(groups)) < 0.1, rng.integers(0, 2, len(groups)), 2)
    drop = np.arange(4)[None, :] >= kept[:, None]  # ranks past `kept` are zeroed
    np.put_along_axis(groups, order, np.where(drop, 0, np.take_along_axis(groups, order, 1)), 1)
    return np.moveaxis(groups.reshape(v.shape), -1, axis)


def random_target(seed: int, arch: NpuArch) -> NpuArch:
    """`arch` with the weight decoder and 2:4 sparsity each on in about two seeds of three,
    and (one in three) a decoder or index decoder of another speed: the costs that decide which
    layers are stored compressed or sparse."""
    r = stream(seed, TARGET)
    sparse, wdecoder = bool(r.random() < 0.65), bool(r.random() < 0.65)
    params: dict[str, object] = {"sparse.enabled": sparse, "wdecoder.enabled": wdecoder}
    if r.random() < 1 / 3:
        params["wdecoder.bytes_per_cycle"] = int(r.choice([1, 4, 64]))
        params["sparse.index_decode_per_cycle"] = int(r.choice([4, 16, 256]))
    return arch.with_params(params)


_INT16_OPS = (OpKind.ADD, OpKind.MUL, OpKind.SUB, OpKind.CAT, OpKind.RELU, OpKind.CLAMP,
              OpKind.GELU, OpKind.MEAN)


def random_quant_config(seed: int, layers: int) -> QuantConfig:
    """A QuantConfig for a model whose modules are `layers.0` .. `layers.{layers - 1}`: int8 or
    int4 weights by default, some layers the other type, int4 rounding of any kind; int16
    inputs / outputs of some element-wise op types (the config's sets, or overrides by op type
    or by module); now and then an op type or a layer left in float."""
    r = stream(seed, CONFIG)
    default = WeightDtype.INT4 if r.random() < 0.4 else WeightDtype.INT8
    other = WeightDtype.INT8 if default is WeightDtype.INT4 else WeightDtype.INT4
    overrides = [LayerOverride(module=f"layers.{k}", weights=other)
                 for k in range(layers) if r.random() < 0.3]
    ins, outs = {OpKind.SOFTMAX, OpKind.LAYER_NORM}, {OpKind.SOFTMAX}
    for kind in _INT16_OPS:
        draw = r.random()
        if draw < 0.15:
            ins.add(kind)
            outs.add(kind)
        elif draw < 0.22:
            (ins if r.random() < 0.5 else outs).add(kind)
        elif draw < 0.3:
            overrides.append(LayerOverride(op=kind, dtype=ActDtype.INT16))
        if r.random() < 0.03:  # left in float: a host op between NPU regions
            overrides.append(LayerOverride(module="*", op=kind, quantize=False))
    for k in range(layers):  # a module's ops int16 (its MACs read int8 all the same)
        draw = r.random()
        if draw < 0.05:
            overrides.append(LayerOverride(module=f"layers.{k}", dtype=ActDtype.INT16))
        elif draw < 0.08:
            overrides.append(LayerOverride(module=f"layers.{k}", quantize=False))
    r.shuffle(overrides)
    return QuantConfig(weights=default, int16_inputs=frozenset(ins),
                       int16_outputs=frozenset(outs), overrides=tuple(overrides),
                       int4_rounding=Int4Rounding(str(r.choice([m.value for m in Int4Rounding]))))


def _instrs(cm):
    return [i for q in cm.program.streams.values() for i in q]


def census(cm, graph: Graph | None = None) -> set[str]:
    """The weight features compiled model `cm` holds: 'CONV <w_type>', 'MATMUL <w_type>',
    'DMA_LOAD_W mode <m>', 'int16 ELTWISE'; and with its integer `graph`, '2:4 linear as conv'
    (a qlinear the target's legalisation turns into a 1x1 conv) and 'int16 <op> on the NPU'
    per op type with an int16 output the NPU computes."""
    out: set[str] = set()
    blob = cm.program.constants
    for i in _instrs(cm):
        if i.opcode in (Opcode.CONV, Opcode.MATMUL) and hasattr(i, "w_type"):
            out.add(f"{i.opcode.name} {WeightType(i.w_type).name}")
        elif i.opcode is Opcode.DMA_LOAD_W:
            out.add(f"DMA_LOAD_W mode {StreamMode(blob[i.ext_addr]).value}")
        elif i.opcode is Opcode.ELTWISE and "I16" in (i.a_dtype.name, i.b_dtype.name,
                                                      i.out_dtype.name):
            out.add("int16 ELTWISE")
    if graph is not None:
        legal = legalize(graph, cm.arch)
        linears = sum(n.op is Op.QLINEAR for n in graph.nodes)
        if sum(n.op is Op.QLINEAR for n in legal.nodes) < linears:
            out.add("2:4 linear as conv")
        host = {n.name for p in cm.host_parts if p is not None for n in p.nodes}
        out.update(f"int16 {n.op.value} on the NPU" for n in graph.nodes
                   if n.type is not None and n.type.dtype is DType.I16 and not n.is_constant
                   and n.name not in host)
    return out
