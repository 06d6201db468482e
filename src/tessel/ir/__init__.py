"""The Graph IR: typed values, ops, immutable graphs, builder, text format, verifier, interpreter."""

from tessel.ir.attrs import AttrKind, AttrSpec, ConstData
from tessel.ir.builder import GraphBuilder, sanitize_name
from tessel.ir.graph import UNKNOWN_LOC, Graph, Node, SourceLoc, Value, unique_name
from tessel.ir.interpreter import run_graph
from tessel.ir.ops import Op, OpSpec, spec
from tessel.ir.parser import parse_graph
from tessel.ir.printer import print_graph
from tessel.ir.types import DType, Layout, QuantParams, TensorType
from tessel.ir.verifier import verify

__all__ = [
    "UNKNOWN_LOC", "AttrKind", "AttrSpec", "ConstData", "DType", "Graph",
    "GraphBuilder", "Layout", "Node", "Op", "OpSpec", "QuantParams", "SourceLoc", "TensorType",
    "Value", "parse_graph", "print_graph", "run_graph", "sanitize_name", "spec", "unique_name",
    "verify",
]
