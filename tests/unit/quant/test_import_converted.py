"""A converted pt2e module is imported as it is (tessel.frontend.importer.import_graph_module),
without exporting and decomposing it again, and gives the same Graph IR as that export would:
same ops, constants, quantisation parameters, value names, source locations and order."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

from tessel.frontend.export import decomposition_table
from tessel.frontend.importer import import_graph_module, import_program, imports_directly
from tessel.frontend.qdq import import_qdq
from tessel.ir import verify
from tessel.ir.printer import print_graph
from tessel.passes.to_nhwc import to_nhwc
from tessel.quant.lower import lower_qdq
from tessel.quant.pt2e import calibrate, export_for_quant
from tessel.quant.quantizer import TesselQuantizer


class Mixed(nn.Module):
    """Ops that a converted module keeps whole but a decomposing export rewrites (flatten,
    dropout, max_pool2d, reshape of a permuted tensor, transpose, unbind, expand_as, rsub,
    clamp_min, to) next to ones it keeps (conv, linear, softmax)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.drop = nn.Dropout(0.1)
        self.fc = nn.Linear(8 * 4 * 4, 24)
        self.head = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.max_pool2d(torch.relu(self.conv(x)), 2)  # [1, 8, 4, 4]
        y = self.fc(self.drop(torch.flatten(y, 1)))  # [1, 24]
        q, k, v = y.reshape(1, 3, 8).transpose(0, 1).unbind(0)  # three [1, 8]
        a = torch.softmax(q.transpose(0, 1) @ k, dim=-1)  # [8, 8]
        z = self.head(v @ a)
        z = (1.0 - z).clamp_min(-2.0) + z.expand_as(z).to(torch.float32)
        t = z.reshape(2, 4).transpose(0, 1).reshape(1, 8)  # a copy, then a view
        return t * 0.5


class Plain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x)).mean((2, 3))


def _converted(model: nn.Module, example: tuple[torch.Tensor, ...]) -> torch.fx.GraphModule:
    g = torch.Generator().manual_seed(3)
    data = [tuple(torch.randn(x.shape, generator=g) for x in example) for _ in range(4)]
    prepared = prepare_pt2e(export_for_quant(model.eval(), example), TesselQuantizer())
    calibrate(prepared, data, example)
    return convert_pt2e(prepared)


def _reexported(converted: torch.fx.GraphModule, example: tuple[torch.Tensor, ...], name: str):
    for module in converted.modules():
        module.training = False
    with torch.no_grad():
        program = torch.export.export(converted, example, strict=False)
        program = program.run_decompositions(decomposition_table())
    return verify(import_program(program, name, allow_host_ops=True))


def test_direct_import_equals_the_reexport():
    torch.manual_seed(0)
    example = (torch.randn(1, 3, 8, 8),)
    converted = _converted(Mixed(), example)
    targets = {str(n.target) for n in converted.graph.nodes if n.op == "call_function"}
    for op in ("aten.flatten.using_ints", "aten.dropout.default", "aten.max_pool2d.default",
               "aten.unbind.int", "aten.transpose.int", "aten.reshape.default",
               "aten.expand_as.default", "aten.rsub.Scalar", "aten.clamp_min.default"):
        assert op in targets, op  # the module really holds the ops the test is about
    assert imports_directly(converted)
    direct = verify(import_graph_module(converted, "mixed", allow_host_ops=True))
    again = _reexported(converted, example, "mixed")
    assert print_graph(direct) == print_graph(again)
    assert not [n for n in direct.nodes if n.op.value == "host"]
    assert print_graph(to_nhwc(lower_qdq(direct))) == print_graph(to_nhwc(lower_qdq(again)))


def test_import_qdq_reads_the_converted_module_without_exporting(monkeypatch):
    example = (torch.randn(1, 3, 6, 6),)
    converted = _converted(Plain(), example)
    want = print_graph(_reexported(converted, example, "plain"))

    def refuse(*args, **kwargs):
        raise AssertionError("torch.export called")

    monkeypatch.setattr(torch.export, "export", refuse)
    assert print_graph(import_qdq(converted, example, "plain")) == want


def test_ops_the_importer_cannot_reproduce_go_through_the_export():
    example = (torch.randn(1, 3, 6, 6),)
    converted = _converted(Plain(), example)
    assert imports_directly(converted)
    graph = converted.graph
    out = next(n for n in graph.nodes if n.op == "output")
    last = out.args[0][0]
    with graph.inserting_before(out):  # a composite op the importer does not decompose
        extra = graph.call_function(torch.ops.aten.contiguous.default, (last,))
    extra.meta["val"] = last.meta.get("val")
    out.args = ((extra,),)
    converted.recompile()
    assert not imports_directly(converted)
    with graph.inserting_before(extra):  # an in-place op
        graph.call_function(torch.ops.aten.relu_.default, (last,))
    assert not imports_directly(converted)
    # the fallback (export and decompose again) still imports it
    assert import_qdq(converted, example, "plain").outputs
