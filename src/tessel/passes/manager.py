"""The pass manager: runs passes in order, verifies after each, dumps IR after named passes.

    graph = run_pipeline(graph)                                    # the default float pipeline
    graph = run_pipeline(graph, ["fold_batch_norm", "dce"], dump_after={"dce"})
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from tessel.errors import TesselConfigError, TesselVerifyError
from tessel.ir.graph import Graph
from tessel.ir.printer import print_graph
from tessel.ir.verifier import verify
from tessel.passes.base import Pass
from tessel.passes.canonicalize_activations import CanonicalizeActivations
from tessel.passes.cse import CommonSubexpressionElimination
from tessel.passes.dce import DeadCodeElimination
from tessel.passes.decompose_attention import DecomposeAttention
from tessel.passes.fold_batch_norm import FoldBatchNorm
from tessel.passes.fold_constants import FoldConstants
from tessel.passes.to_nhwc import ToNHWC

PASSES: dict[str, type[Pass]] = {p.name: p for p in (
    CanonicalizeActivations, FoldBatchNorm, FoldConstants, CommonSubexpressionElimination,
    DeadCodeElimination, DecomposeAttention, ToNHWC)}

DUMP_ALL = "all"


@dataclass(frozen=True)
class PipelineOptions:
    """What the float pipeline does. `CompileOptions` may be passed instead: any object with
    these attribute names is read (missing ones take these defaults)."""

    decompose_attention: bool = False
    layout_nhwc: bool = True


def default_pipeline(options: object | None = None) -> list[Pass]:
    """The float stage: canonicalise, fold BN, fold constants, CSE, DCE, then NHWC layout."""
    opts = options if options is not None else PipelineOptions()
    passes: list[Pass] = [CanonicalizeActivations(), FoldBatchNorm(), FoldConstants(),
                          CommonSubexpressionElimination(), DeadCodeElimination()]
    if getattr(opts, "decompose_attention", False):
        passes.insert(1, DecomposeAttention())
    if getattr(opts, "layout_nhwc", True):
        passes.append(ToNHWC())
    return passes


def make_passes(names: Iterable[str | Pass]) -> list[Pass]:
    """Pass objects from names (or pass objects, kept); unknown names -> TesselConfigError."""
    out = []
    for item in names:
        if isinstance(item, Pass):
            out.append(item)
        elif item in PASSES:
            out.append(PASSES[item]())
        else:
            raise TesselConfigError(f"unknown pass '{item}' (known: {', '.join(sorted(PASSES))})")
    return out


def check_dump_after(names: Iterable[str] | None) -> frozenset[str]:
    """Validate `--dump-after` names: each a known pass, or 'all'."""
    names = frozenset(names or ())
    unknown = sorted(n for n in names if n not in PASSES and n != DUMP_ALL)
    if unknown:
        raise TesselConfigError(f"--dump-after: unknown pass(es) {', '.join(unknown)} "
                                f"(known: {', '.join(sorted(PASSES))}, or '{DUMP_ALL}')")
    return names


def _stderr_dump(text: str) -> None:
    sys.stderr.write(text)


class PassManager:
    """Runs `passes` in order. verify_each: run the verifier on the input and after every pass
    (a failure names the pass). dump_after: pass names (or 'all') whose output IR is given to
    `dump` as text, with a `// ----- IR after NAME -----` header."""

    def __init__(self, passes: Sequence[Pass | str], verify_each: bool = True,
                 dump_after: Iterable[str] | None = None,
                 dump: Callable[[str], None] = _stderr_dump):
        self.passes = tuple(make_passes(passes))
        self.verify_each = verify_each
        self.dump_after = check_dump_after(dump_after)
        self.dump = dump

    def run(self, graph: Graph) -> Graph:
        if self.verify_each:
            _verify(graph, "invalid input to the pass pipeline")
        for index, p in enumerate(self.passes):
            graph = p.apply(graph)
            if self.verify_each:
                _verify(graph, f"after pass '{p.name}' (#{index + 1} of {len(self.passes)})")
            if p.name in self.dump_after or DUMP_ALL in self.dump_after:
                self.dump(f"// ----- IR after {p.name} -----\n"
                          + print_graph(graph, elide_constants=True))
        return graph


def _verify(graph: Graph, where: str) -> None:
    try:
        verify(graph)
    except TesselVerifyError as exc:
        raise TesselVerifyError(f"{where}: {exc}") from exc


def run_pipeline(graph: Graph, passes: Sequence[Pass | str] | None = None, *,
                 dump_after: Iterable[str] | None = None, verify_each: bool = True,
                 dump: Callable[[str], None] = _stderr_dump) -> Graph:
    """Run `passes` (default: `default_pipeline()`) on `graph`; returns the new graph."""
    chosen = default_pipeline() if passes is None else passes
    return PassManager(chosen, verify_each, dump_after, dump).run(graph)
