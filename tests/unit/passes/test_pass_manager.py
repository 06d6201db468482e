"""The pass manager: registry, default pipeline, verification after each pass, IR dumps."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import ClassVar

import pytest
from pass_graphs import assert_same_function, attention_block, mobilenet_like

from tessel.errors import TesselConfigError, TesselVerifyError
from tessel.ir import Graph, Layout, Op, print_graph, verify
from tessel.passes import (
    PASSES,
    Pass,
    PassManager,
    PipelineOptions,
    check_dump_after,
    default_pipeline,
    run_pipeline,
)


def test_registry_holds_frozen_named_passes() -> None:
    assert set(PASSES) == {"canonicalize_activations", "fold_batch_norm", "fold_constants",
                           "cse", "dce", "decompose_attention", "to_nhwc"}
    for name, cls in PASSES.items():
        assert cls.name == name
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen


def test_default_pipeline_order() -> None:
    names = [p.name for p in default_pipeline()]
    assert names == ["canonicalize_activations", "fold_batch_norm", "fold_constants", "cse",
                     "dce", "to_nhwc"]
    opts = PipelineOptions(decompose_attention=True, layout_nhwc=False)
    names = [p.name for p in default_pipeline(opts)]
    assert "to_nhwc" not in names and names[1] == "decompose_attention"


def test_unknown_pass_and_dump_names_are_config_errors() -> None:
    with pytest.raises(TesselConfigError,
                       match=r"unknown pass 'fold_bn' \(known: .*fold_batch_norm"):
        PassManager(["fold_bn"])
    with pytest.raises(TesselConfigError, match=r"--dump-after: unknown pass\(es\) nope .*known: "
                                                r"canonicalize_activations"):
        check_dump_after({"nope", "dce"})
    assert check_dump_after(["all"]) == {"all"}


def test_default_pipeline_on_a_cnn() -> None:
    g = mobilenet_like()
    out = run_pipeline(g)
    ops = [n.op for n in out.nodes]
    assert Op.BATCH_NORM not in ops
    assert ops.count(Op.TRANSPOSE) == 1  # only the graph input's; the head's flatten reads NHWC
    assert all(n.attr("layout") is Layout.NHWC for n in out.nodes if n.op is Op.CONV2D)
    assert len(out.nodes) < len(g.nodes) * 0.6
    assert_same_function(g, out)
    assert print_graph(run_pipeline(out)) == print_graph(out), "pipeline is not idempotent"


def test_default_pipeline_with_attention() -> None:
    g = attention_block()
    out = run_pipeline(g, default_pipeline(PipelineOptions(decompose_attention=True)))
    ops = [n.op for n in out.nodes]
    assert Op.SDPA not in ops and ops.count(Op.SOFTMAX) == 1
    # the patch embedding's reshape + token transpose run on NHWC data: no transpose is needed
    assert not any(n.op is Op.TRANSPOSE and n.inputs[0] == "patch" for n in out.nodes)
    assert_same_function(g, out)


def test_input_is_never_mutated() -> None:
    g = mobilenet_like(blocks=2)
    text = print_graph(g)
    for name in PASSES:
        run_pipeline(g, [name])
    assert print_graph(g) == text


@dataclass(frozen=True)
class _Breaks(Pass):
    name: ClassVar[str] = "breaks"

    def apply(self, graph: Graph) -> Graph:
        return graph.with_nodes(graph.nodes[1:])  # drops a definition that is still used


def test_verify_each_names_the_failing_pass() -> None:
    g = mobilenet_like(blocks=1)
    with pytest.raises(TesselVerifyError,
                       match=r"(?s)after pass 'breaks' \(#2 of 2\): .*used before"):
        run_pipeline(g, ["dce", _Breaks()])
    run_pipeline(g, [_Breaks()], verify_each=False)  # the caller asked not to check


def test_invalid_input_is_reported_before_any_pass() -> None:
    g = mobilenet_like(blocks=1)
    bad = g.with_nodes(g.nodes[1:])
    with pytest.raises(TesselVerifyError, match="invalid input to the pass pipeline"):
        run_pipeline(bad, ["dce"])


def test_dump_after_named_passes() -> None:
    dumps: list[str] = []
    g = mobilenet_like(blocks=1)
    run_pipeline(g, ["fold_batch_norm", "dce", "to_nhwc"], dump_after={"dce", "to_nhwc"},
                 dump=dumps.append)
    assert [d.splitlines()[0] for d in dumps] == ["// ----- IR after dce -----",
                                                  "// ----- IR after to_nhwc -----"]
    assert "dense_elided<" in dumps[0] and "resources {" not in dumps[0]
    assert "layout = nhwc" in dumps[1] and "layout = nhwc" not in dumps[0]
    dumps.clear()
    run_pipeline(g, ["dce", "cse"], dump_after={"all"}, dump=dumps.append)
    assert len(dumps) == 2


def test_verify_is_cheap_on_a_150_node_graph() -> None:
    g = mobilenet_like(blocks=6)
    assert 140 <= len(g.nodes) <= 170
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        verify(g)
        runs.append(time.perf_counter() - t0)
    median = sorted(runs)[2]
    print(f"verify on {len(g.nodes)} nodes: {median * 1e3:.2f} ms (median of 5)")
    assert median < 0.1
