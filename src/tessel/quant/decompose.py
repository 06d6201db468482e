"""Graph rewrites run before annotation so that compound ops become ones the NPU quantises.

``scaled_dot_product_attention(q, k, v, mask)`` becomes
``softmax(matmul(q, k^T) * scale + mask) @ v`` (two int8 matmuls and an int16 softmax) instead of
one float host op. A boolean mask (True = attend) becomes the additive bias
``where(mask, 0, MASKED_BIAS)``: the `where` runs on the host on the mask alone, the sum on the
NPU, where the softmax input's observer saturates the masked logits at its lowest code (see
``tessel.quant.qspecs.SoftmaxInputObserver``). Causal, dropout and grouped-query attention stay
as they are.
"""

from __future__ import annotations

import math

import torch
from torch.fx import GraphModule, Node

aten = torch.ops.aten
_SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
                "enable_gqa")
# exp(-1e4) is 0 in float32, as exp(-inf) is; a finite bias keeps the sum finite for its observer
MASKED_BIAS = -1.0e4
_SDPA_DEFAULTS = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None,
                  "enable_gqa": False}


def _sdpa_args(node: Node) -> dict[str, object]:
    args = dict(_SDPA_DEFAULTS)
    args.update(zip(_SDPA_PARAMS, node.args, strict=False))
    args.update(node.kwargs)
    return args


def _fake_val(target, args: tuple) -> torch.Tensor:
    """Run ``target`` on the fake values of its node arguments (shape / dtype propagation)."""
    def val(a):
        if isinstance(a, (list, tuple)):
            return type(a)(val(b) for b in a)
        return a.meta["val"] if isinstance(a, Node) else a

    vals = tuple(val(a) for a in args)
    tensors = [v for v in torch.utils._pytree.tree_leaves(vals) if isinstance(v, torch.Tensor)]
    fake_mode = tensors[0].fake_mode
    with fake_mode:
        return target(*vals)


def _emit(gm: GraphModule, like: Node, target, args: tuple) -> Node:
    node = gm.graph.call_function(target, args)
    node.meta["val"] = _fake_val(target, args)
    for key in ("nn_module_stack", "stack_trace", "source_fn_stack"):
        if key in like.meta:
            node.meta[key] = like.meta[key]
    return node


def _decomposable(a: dict[str, object]) -> bool:
    mask = a["attn_mask"]
    if a["is_causal"] or a["dropout_p"] or a["enable_gqa"]:
        return False
    if isinstance(mask, Node) and not (mask.meta["val"].is_floating_point()
                                       or mask.meta["val"].dtype is torch.bool):
        return False
    return mask is None or isinstance(mask, Node)


def decompose_sdpa(gm: GraphModule) -> int:
    """Rewrite every decomposable attention node in place; returns how many were rewritten."""
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target != aten.scaled_dot_product_attention.default:
            continue
        a = _sdpa_args(node)
        if not _decomposable(a):
            continue
        q, k, v, mask = a["query"], a["key"], a["value"], a["attn_mask"]
        scale = a["scale"] if a["scale"] is not None else 1.0 / math.sqrt(q.meta["val"].shape[-1])
        with gm.graph.inserting_before(node):
            kt = _emit(gm, node, aten.transpose.int, (k, -2, -1))
            logits = _emit(gm, node, aten.matmul.default, (q, kt))
            logits = _emit(gm, node, aten.mul.Tensor, (logits, float(scale)))
            if mask is not None and mask.meta["val"].dtype is torch.bool:
                mask = _emit(gm, node, aten.where.Scalar, (mask, 0.0, MASKED_BIAS))
            if mask is not None:
                logits = _emit(gm, node, aten.add.Tensor, (logits, mask))
            probs = _emit(gm, node, aten.softmax.int, (logits, -1))
            out = _emit(gm, node, aten.matmul.default, (probs, v))
        _replace(gm, node, out)
        count += 1
    return _recompiled(gm, count)


MAX_FLIP_SLICES = 256  # a longer reversal stays one host op rather than that many slices


def decompose_flip(gm: GraphModule) -> int:
    """Rewrite ``flip(x, [d])`` of a float tensor (a bidirectional recurrent layer reverses its
    sequence so) as the concatenation of ``x``'s slices along ``d`` in reverse order: data
    movement the quantiser keeps at ``x``'s scale, instead of a host op. Returns the count."""
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target != aten.flip.default:
            continue
        x, dims = node.args[0], node.args[1]
        val = x.meta["val"] if isinstance(x, Node) else None
        if val is None or not val.is_floating_point() or len(dims) != 1:
            continue
        d = dims[0] % val.dim()
        if not 1 < val.shape[d] <= MAX_FLIP_SLICES:
            continue
        with gm.graph.inserting_before(node):
            parts = [_emit(gm, node, aten.slice.Tensor, (x, d, k, k + 1))
                     for k in range(val.shape[d] - 1, -1, -1)]
            out = _emit(gm, node, aten.cat.default, (parts, d))
        _replace(gm, node, out)
        count += 1
    return _recompiled(gm, count)


def decompose_square(gm: GraphModule) -> int:
    """Rewrite ``pow(x, 2)`` of a float tensor (RMS norm's mean of squares) as ``mul(x, x)``,
    a product the quantiser puts on the NPU. Returns the count."""
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target != aten.pow.Tensor_Scalar:
            continue
        x, exponent = node.args[0], node.args[1]
        if exponent != 2 or not isinstance(x, Node) or not x.meta["val"].is_floating_point():
            continue
        with gm.graph.inserting_before(node):
            out = _emit(gm, node, aten.mul.Tensor, (x, x))
        _replace(gm, node, out)
        count += 1
    return _recompiled(gm, count)


def _replace(gm: GraphModule, node: Node, out: Node) -> None:
    node.replace_all_uses_with(out)
    gm.graph.erase_node(node)


def _recompiled(gm: GraphModule, count: int) -> int:
    """``count``, after checking and recompiling ``gm`` if it was rewritten."""
    if count:
        gm.graph.lint()
        gm.recompile()
    return count
