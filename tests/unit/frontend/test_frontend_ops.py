"""Every mapped ATen op, on a small model: the IR's float interpreter matches torch eager."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from frontend_helpers import Fn, check, count
from torch import nn

from tessel.frontend import import_model
from tessel.frontend.context import CONVERTERS
from tessel.ir import Op, parse_graph, print_graph

torch.manual_seed(0)


def r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


X4 = r(2, 4, 9, 9)
X3 = r(2, 5, 8)
POS = r(2, 3, 6).abs() + 0.1

CASES = {
    # ------------------------------------------------------------ convolution / linear / matmul
    "conv2d": (Fn(lambda m, x: m.c(x), c=nn.Conv2d(4, 6, 3)), (X4,), (Op.CONV2D,)),
    "conv2d_stride_pad_dil": (Fn(lambda m, x: m.c(x), c=nn.Conv2d(4, 6, 3, 2, (1, 2), 2)), (X4,),
                              (Op.CONV2D,)),
    "conv2d_depthwise": (Fn(lambda m, x: m.c(x), c=nn.Conv2d(4, 4, 3, padding=1, groups=4)), (X4,),
                         (Op.CONV2D,)),
    "conv2d_groups_nobias": (Fn(lambda m, x: m.c(x), c=nn.Conv2d(4, 6, 1, groups=2, bias=False)),
                             (X4,), (Op.CONV2D,)),
    "conv2d_same": (Fn(lambda m, x: m.c(x), c=nn.Conv2d(4, 3, (4, 3), padding="same")), (X4,),
                    (Op.CONV2D,)),
    "conv_transpose2d": (Fn(lambda m, x: (m.a(x), m.b(x), m.c(x)),
                            a=nn.ConvTranspose2d(4, 6, 4, stride=2, padding=1),
                            b=nn.ConvTranspose2d(4, 3, (3, 2), stride=(2, 3), padding=(1, 0),
                                                 output_padding=(1, 2), dilation=(1, 2)),
                            c=nn.ConvTranspose2d(4, 8, 3, groups=2, bias=False)), (X4,),
                         (Op.CONV_TRANSPOSE2D,)),
    "conv1d": (Fn(lambda m, x: m.c(x), c=nn.Conv1d(5, 3, 3, stride=2, padding=1)), (X3,),
               (Op.CONV2D, Op.RESHAPE)),
    "linear_3d": (Fn(lambda m, x: m.l(x), l=nn.Linear(8, 3)), (X3,), (Op.LINEAR,)),
    "linear_nobias": (Fn(lambda m, x: m.l(x), l=nn.Linear(8, 3, bias=False)), (X3[0],),
                      (Op.LINEAR,)),
    "addmm_as_linear": (Fn(lambda m, x: torch.addmm(m.l.bias, x, m.l.weight.t()),
                           l=nn.Linear(8, 3)), (X3[0],), (Op.LINEAR,)),
    "addmm_scaled": (Fn(lambda m, a, b, c: torch.addmm(c, a, b, beta=0.5, alpha=2.0)),
                     (r(3, 4), r(4, 5), r(3, 5)), (Op.MATMUL, Op.ADD)),
    "mm_bmm": (Fn(lambda m, a, b: (torch.mm(a[0], b[0]), torch.bmm(a, b))),
               (r(2, 3, 4), r(2, 4, 5)), (Op.MATMUL,)),
    "matmul_broadcast": (Fn(lambda m, a, b: a @ b), (r(2, 3, 4, 5), r(3, 5, 2)), (Op.MATMUL,)),
    "matmul_vectors": (Fn(lambda m, a, b: (a @ b[:, 0], b[:, 0] @ a, a[0] @ a[0])),
                       (r(4, 4), r(4, 3)), (Op.MATMUL,)),
    # ------------------------------------------------------------ arithmetic
    "arith_tensor": (Fn(lambda m, a, b: (a + b, a - b, a * b, a / b)), (r(2, 3), r(3)),
                     (Op.ADD, Op.SUB, Op.MUL, Op.DIV)),
    "arith_scalar": (Fn(lambda m, a: (a + 2, 3 - a, a * 0.5, a / 4, 1 / a, torch.add(a, a, alpha=3),
                                      torch.sub(a, 2, alpha=2))), (POS,), (Op.ADD, Op.SUB)),
    "int_promotion": (Fn(lambda m, i, x: (i + 1, i * 2.5, i / 2, x + i)),
                      (torch.arange(6).reshape(2, 3), r(2, 3)), (Op.CAST,)),
    "pow_scalar": (Fn(lambda m, a: (a ** 2, torch.pow(a, 0.5), 2 ** a)), (POS,), (Op.POW,)),
    "max_min_abs": (Fn(lambda m, a, b: (torch.maximum(a, b), torch.minimum(a, b), a.abs())),
                    (r(2, 3), r(2, 3)), (Op.MAXIMUM, Op.MINIMUM, Op.ABS)),
    # ------------------------------------------------------------ activations
    "relu_relu6_hardtanh": (Fn(lambda m, a: (F.relu(a), F.relu6(a * 4), F.hardtanh(a, -0.5, 0.5),
                                             F.hardtanh(a))), (X4,), (Op.RELU, Op.CLAMP)),
    "clamp_forms": (Fn(lambda m, a, lo: (a.clamp(-0.3, 0.4), a.clamp_min(0.1), a.clamp_max(0.2),
                                         a.clamp(min=lo, max=lo + 1))), (r(2, 3), r(2, 3)),
                    (Op.CLAMP, Op.MAXIMUM, Op.MINIMUM)),
    "sigmoid_tanh": (Fn(lambda m, a: (torch.sigmoid(a), torch.tanh(a))), (X4,),
                     (Op.SIGMOID, Op.TANH)),
    "gelu": (Fn(lambda m, a: (F.gelu(a), F.gelu(a, approximate="tanh"))), (X4,), (Op.GELU,)),
    "hard_silu": (Fn(lambda m, a: (F.hardswish(a * 4), F.hardsigmoid(a * 4), F.silu(a))), (X4,),
                  (Op.HARDSWISH, Op.HARDSIGMOID, Op.SILU)),
    "exp_log_neg": (Fn(lambda m, a: (a.exp(), a.log(), -a)), (POS,), (Op.EXP, Op.LOG, Op.NEG)),
    "sqrt_rsqrt_recip": (Fn(lambda m, a: (a.sqrt(), a.rsqrt(), a.reciprocal())), (POS,),
                         (Op.SQRT, Op.RSQRT, Op.RECIPROCAL)),
    # ------------------------------------------------------------ norms / softmax / attention
    "batch_norm": (Fn(lambda m, x: m.bn(x), bn=nn.BatchNorm2d(4)), (X4,), (Op.BATCH_NORM,)),
    "batch_norm_1d_noaffine": (Fn(lambda m, x: m.bn(x), bn=nn.BatchNorm1d(5, affine=False)),
                               (X3,), (Op.BATCH_NORM,)),
    "layer_norm": (Fn(lambda m, x: (m.ln(x), F.layer_norm(x, (5, 8))), ln=nn.LayerNorm(8)), (X3,),
                   (Op.LAYER_NORM,)),
    "softmax": (Fn(lambda m, x: (x.softmax(-1), F.softmax(x, 1), F.log_softmax(x, -1))), (X3,),
                (Op.SOFTMAX, Op.LOG)),
    "sdpa": (Fn(lambda m, q, k, v: F.scaled_dot_product_attention(q, k, v)),
             (r(1, 2, 5, 8), r(1, 2, 6, 8), r(1, 2, 6, 4)), (Op.SDPA,)),
    "sdpa_masks_causal_scale": (
        Fn(lambda m, q, k, v, bias, keep: (
            F.scaled_dot_product_attention(q, k, v, attn_mask=bias),
            F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=0.3),
            F.scaled_dot_product_attention(q, k, v, is_causal=True))),
        (r(1, 2, 5, 8), r(1, 2, 5, 8), r(1, 2, 5, 4), r(5, 5),
         (torch.rand(5, 5) > 0.3) | torch.eye(5, dtype=torch.bool)),
        (Op.SDPA,)),
    # ------------------------------------------------------------ pooling / reductions
    "max_pool": (Fn(lambda m, x: (F.max_pool2d(x, 2), F.max_pool2d(x, 3, 2, 1),
                                  F.max_pool2d(x, 2, ceil_mode=True))), (X4,), (Op.MAX_POOL2D,)),
    "avg_pool": (Fn(lambda m, x: (F.avg_pool2d(x, 3), F.avg_pool2d(x, 3, 2, 1),
                                  F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
                                  F.avg_pool2d(x[..., :8, :8], 3, 2, 0, ceil_mode=True))), (X4,),
                 (Op.AVG_POOL2D,)),
    "adaptive_avg_pool": (Fn(lambda m, x: (F.adaptive_avg_pool2d(x, 1), F.adaptive_avg_pool2d(x, 3),
                                           F.adaptive_avg_pool2d(x, (1, 9)))), (X4,),
                          (Op.MEAN, Op.AVG_POOL2D)),
    "reductions": (Fn(lambda m, x: (x.mean((1, 2), keepdim=True), x.mean(), x.sum(-1),
                                    x.sum(), x.amax(1), x.max(dim=2).values)), (X3,),
                   (Op.MEAN, Op.SUM, Op.REDUCE_MAX)),
    "vector_norm": (Fn(lambda m, x: (F.normalize(x, dim=-1), x.norm(dim=1), x.norm(p=1, dim=2),
                                     torch.linalg.vector_norm(x, float("inf"), dim=-1))), (X3,),
                    (Op.SQRT, Op.SUM, Op.REDUCE_MAX)),
    "embedding": (Fn(lambda m, i: m.e(i), e=nn.Embedding(10, 4)),
                  (torch.tensor([[1, 2, 9], [0, 0, 3]]),), (Op.EMBEDDING,)),
    "upsample_nearest": (Fn(lambda m, x: (F.interpolate(x, scale_factor=2, mode="nearest"),
                                          F.interpolate(x, size=(18, 27), mode="nearest"),
                                          m.up(x)), up=nn.Upsample(scale_factor=3)), (X4,),
                         (Op.UPSAMPLE_NEAREST,)),
    # ------------------------------------------------------------ data movement
    "views": (Fn(lambda m, x: (x.view(2, 40), x.reshape(10, 8).flatten(), x.unsqueeze(1).squeeze(1),
                               x.flatten(1), x[None].squeeze())), (X3,), (Op.RESHAPE,)),
    "permutes": (Fn(lambda m, x: (x.permute(2, 0, 1), x.transpose(0, 2), x[0].t(), x.mT)), (X3,),
                 (Op.TRANSPOSE,)),
    "expand": (Fn(lambda m, x: (x[:, :1].expand(2, 5, 8), x[0, 0].expand(3, 8))), (X3,),
               (Op.EXPAND,)),
    "cat": (Fn(lambda m, a, b: (torch.cat([a, b], 1), torch.cat([a, a, b], -1))),
            (r(2, 3, 4), r(2, 3, 4)), (Op.CONCAT,)),
    "slicing": (Fn(lambda m, x: (x[:, 1:4], x[..., ::3], x[:, -2:], x[1], x[:, 2, 1:],
                                 x.narrow(2, 2, 3), x[:, 1:4:2, -1])), (X3,),
                (Op.SLICE, Op.RESHAPE)),
    "split_chunk_unbind": (Fn(lambda m, x: (*x.split(3, dim=2), *x.chunk(2, dim=1), *x.unbind(0))),
                           (X3,), (Op.SLICE,)),
    "pad": (Fn(lambda m, x: (F.pad(x, (1, 2)), F.pad(x, (1, 0, 2, 3), value=-1.5))), (X4,),
            (Op.PAD,)),
    "casts": (Fn(lambda m, x: (x.to(torch.int32), x.float(), x.to(torch.int64).to(torch.float32),
                               x.to(torch.bool).to(torch.float32))), (X3 * 5,), (Op.CAST,)),
    "constants": (Fn(lambda m, x: (x + torch.zeros(8), x * torch.ones(5, 8),
                                   x + torch.full((8,), 3.0), x + torch.arange(8),
                                   x + torch.tensor(2.5), torch.arange(2, 9, 3),
                                   x + torch.zeros_like(x) + torch.ones_like(x))), (X3,),
                  (Op.CONSTANT,)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_matches_torch(case: str) -> None:
    model, inputs, expect = CASES[case]
    check(model, inputs, expect, label=case)


def test_noise_is_dropped() -> None:
    """clone, dropout, contiguous, detach, alias and same-dtype casts leave no IR op behind."""
    model = Fn(lambda m, x: m.drop(F.dropout(x.clone().contiguous().detach(), 0.5,
                                             training=False)).float() + 1,
               drop=nn.Dropout(0.3))
    graph = check(model, (X3,), (Op.ADD,), label="noise")
    assert [n.op for n in graph.nodes if n.op is not Op.CONSTANT] == [Op.ADD]


def test_view_chain_folds_to_one_reshape() -> None:
    model = Fn(lambda m, x: x.view(10, 8).view(5, 16).reshape(80).unsqueeze(0).view(4, 20).relu())
    graph = check(model, (X3,), (Op.RESHAPE,), label="view chain")
    assert count(graph, Op.RESHAPE) == 1


def test_transpose_chain_composes() -> None:
    model = Fn(lambda m, x: (x.permute(1, 2, 0).transpose(0, 1).permute(0, 2, 1).exp(),
                             x.transpose(1, 2).transpose(1, 2).exp()))
    graph = check(model, (X3,), (Op.EXP,), label="transpose chain")
    assert count(graph, Op.TRANSPOSE) == 1


def test_inputs_outputs_named_and_flattened() -> None:
    model = Fn(lambda m, image, mask: {"a": image.relu(), "b": [mask * 2, (image + 1, image)]})

    class Named(nn.Module):
        def forward(self, image, mask):
            return model(image, mask)

    graph = check(Named(), (X4, r(3)), label="io")
    assert [v.name for v in graph.inputs] == ["image", "mask"]
    assert len(graph.outputs) == 4
    assert graph.outputs[3] == "image"


def test_parameters_become_named_constants() -> None:
    seq = nn.Sequential(nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4))
    graph = check(Fn(lambda m, x: m.body(x), body=seq), (X4,), (Op.CONV2D,), label="params")
    consts = {n.name: n for n in graph.nodes if n.op is Op.CONSTANT}
    assert {"body.0.weight", "body.0.bias", "body.1.running_mean"} <= set(consts)
    assert consts["body.0.weight"].type.shape == (4, 4, 1, 1)
    assert "body.1.num_batches_tracked" not in consts  # unused buffers are not imported


def test_import_is_deterministic() -> None:
    model = Fn(lambda m, x: m.body(x).softmax(1) * 2, body=nn.Sequential(nn.Conv2d(4, 4, 3),
                                                                        nn.Hardswish()))
    first = print_graph(import_model(model.eval(), (X4,)))
    assert first == print_graph(import_model(model.eval(), (X4,)))
    assert print_graph(parse_graph(first)) == first


def test_docs_list_every_converted_op() -> None:
    docs = (Path(__file__).parents[3] / "docs" / "frontend.md").read_text()
    packets = {str(t).rsplit(".", 1)[0] for t in CONVERTERS if str(t).startswith("aten.")}
    missing = sorted(p for p in packets if f"`{p}`" not in docs and f"`{p}(" not in docs)
    assert not missing, f"docs/frontend.md does not mention {missing}"
