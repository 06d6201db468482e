"""Graph-to-graph passes of the float stage and the pass manager that runs them."""

from tessel.passes.base import Pass
from tessel.passes.canonicalize_activations import CanonicalizeActivations
from tessel.passes.cse import CommonSubexpressionElimination
from tessel.passes.dce import DeadCodeElimination
from tessel.passes.decompose_attention import DecomposeAttention
from tessel.passes.fold_batch_norm import FoldBatchNorm
from tessel.passes.fold_constants import FoldConstants
from tessel.passes.manager import (
    PASSES,
    PassManager,
    PipelineOptions,
    check_dump_after,
    default_pipeline,
    make_passes,
    run_pipeline,
)
from tessel.passes.to_nhwc import ToNHWC

__all__ = [
    "PASSES", "CanonicalizeActivations", "CommonSubexpressionElimination", "DeadCodeElimination",
    "DecomposeAttention", "FoldBatchNorm", "FoldConstants", "Pass", "PassManager",
    "PipelineOptions", "ToNHWC", "check_dump_after", "default_pipeline", "make_passes",
    "run_pipeline",
]
