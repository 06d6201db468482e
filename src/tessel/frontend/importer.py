"""The importer: walk an ExportedProgram once and build the float Graph IR.

Placeholders become graph inputs (user inputs, named after forward's arguments) or constants
(parameters, buffers, lifted constants, named after their FQN). Each call node goes through the
converter registered for its ATen overload (see `context.CONVERTERS`). Every unsupported node is
collected on the way; at the end they are raised together as one TesselUnsupportedOpError, or,
with host fallback, imported as `host` ops instead.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from tessel.errors import TesselError, TesselUnsupportedOpError

# the converter modules register themselves in CONVERTERS on import
from tessel.frontend import (  # noqa: F401
    convert_elementwise,
    convert_nn,
    convert_pool,
    convert_quant,
    convert_shape,
)
from tessel.frontend.context import CONVERTERS, ImportContext, Unsupported, bind_args, ir_dtype
from tessel.frontend.host_ops import host_op
from tessel.frontend.locations import source_loc
from tessel.ir import Graph, GraphBuilder, SourceLoc, TensorType

_POISON = object()  # value of a node that could not be imported (its users are skipped)
_DROPPED_PREFIXES = ("aten._assert", "aten.sym_constrain_range", "aten._functional_assert")


def import_program(program: ExportedProgram, name: str, *, allow_host_ops: bool = False,
                   cwd: str | None = None) -> Graph:
    """The Graph IR of `program` (outputs = its user outputs, flattened)."""
    walk = _Walk(program, GraphBuilder(name), allow_host_ops, cwd or os.getcwd())
    outputs = walk.run()
    if walk.unsupported:
        raise TesselUnsupportedOpError(walk.unsupported)
    return drop_dead(walk.ctx.builder.build(outputs))


def drop_dead(graph: Graph) -> Graph:
    """The graph without nodes that no output depends on (import leftovers such as folded views)."""
    live = set(graph.outputs)
    keep = []
    for node in reversed(graph.nodes):
        if node.name in live:
            keep.append(node)
            live.update(node.inputs)
    return graph.with_nodes(reversed(keep))


class _Walk:
    """One pass over the program's nodes."""

    def __init__(self, program: ExportedProgram, builder: GraphBuilder, allow_host: bool, cwd: str):
        self.program, self.allow_host, self.cwd = program, allow_host, cwd
        self.ctx = ImportContext(builder)
        self.unsupported: list[tuple[str, str]] = []
        self.kinds = {s.arg.name: s for s in program.graph_signature.input_specs}

    def run(self) -> list[str]:
        outputs: list[str] = []
        for node in self.program.graph.nodes:
            if node.op == "placeholder":
                self.placeholder(node)
            elif node.op == "call_function":
                self.call(node)
            elif node.op == "output":
                outputs = self.outputs(node)
            else:
                raise TesselError(f"unexpected fx node kind '{node.op}' ({node.name})")
        return outputs

    # ------------------------------------------------------------ placeholders
    def placeholder(self, node: torch.fx.Node) -> None:
        spec = self.kinds.get(node.name)
        val = node.meta.get("val")
        if spec is None or spec.kind is InputKind.USER_INPUT:
            if not isinstance(val, torch.Tensor):
                self.ctx.env[node] = val  # a specialised Python value
                return
            self.ctx.env[node] = self.ctx.builder.input(node.name, self._input_type(node, val))
            return
        if not node.users or spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER,
                                               InputKind.CONSTANT_TENSOR):
            return
        tensor = self._lifted(spec.target)
        fqn = spec.target
        try:
            array = tensor.detach().cpu().numpy().astype(ir_dtype(tensor.dtype).numpy)
        except Unsupported as exc:
            raise TesselError(f"{spec.kind.name.lower()} '{fqn}': {exc}") from exc
        module = fqn.rsplit(".", 1)[0] if "." in fqn else ""
        self.ctx.env[node] = self.ctx.const(array, hint=fqn, loc=SourceLoc(module=module))

    def _lifted(self, target: str) -> torch.Tensor:
        if target in self.program.state_dict:
            return self.program.state_dict[target]
        if target in self.program.constants:
            return self.program.constants[target]
        raise TesselError(f"exported program has no tensor for '{target}'")

    @staticmethod
    def _input_type(node: torch.fx.Node, val: torch.Tensor) -> TensorType:
        try:
            return TensorType(tuple(int(d) for d in val.shape), ir_dtype(val.dtype))
        except (Unsupported, TypeError) as exc:
            raise TesselError(f"model input '{node.name}' ({val.dtype}, shape {list(val.shape)}) "
                              f"cannot be imported: {exc}") from exc

    # ------------------------------------------------------------ calls
    def call(self, node: torch.fx.Node) -> None:
        target = node.target
        if self._dropped(node):
            return
        ctx = self.ctx
        ctx.loc, ctx.hint = source_loc(node, self.cwd), node.name
        converter = CONVERTERS.get(target)
        inputs = node.all_input_nodes
        if converter is not None and any(ctx.env.get(i) is _POISON for i in inputs):
            ctx.env[node] = _POISON  # a producer was unsupported and is reported already
            return
        try:
            if converter is None:
                raise Unsupported("")
            ctx.env[node] = converter(ctx, node, self._scalars_resolved(bind_args(node)))
        except Unsupported as exc:
            self.fallback(node, str(exc))

    def _scalars_resolved(self, args: dict[str, Any]) -> dict[str, Any]:
        """Arguments with nodes that computed a concrete Python scalar replaced by that scalar."""
        def resolve(value: Any) -> Any:
            if isinstance(value, (list, tuple)):
                return type(value)(resolve(v) for v in value)
            if isinstance(value, torch.fx.Node):
                known = self.ctx.env.get(value)
                return known if isinstance(known, (int, float, bool)) else value
            return value
        return {k: resolve(v) for k, v in args.items()}

    def _dropped(self, node: torch.fx.Node) -> bool:
        """Asserts and (symbolic) scalar bookkeeping vanish; concrete scalars stay as values."""
        if str(node.target).startswith(_DROPPED_PREFIXES):
            return True
        val = node.meta.get("val")
        if isinstance(val, (int, float, bool)):
            self.ctx.env[node] = val
            return True
        return isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool))

    def fallback(self, node: torch.fx.Node, reason: str) -> None:
        """Record `node` as unsupported, or import it as a host op when that is allowed."""
        if self.allow_host and not any(self.ctx.env.get(i) is _POISON
                                       for i in node.all_input_nodes):
            try:
                self.ctx.env[node] = host_op(self.ctx, node)
                return
            except Unsupported as exc:
                reason = f"{reason}; {exc}" if reason else str(exc)
        self.ctx.env[node] = _POISON
        op = op_name(node)
        self.unsupported.append((f"{op} ({reason})" if reason else op, str(self.ctx.loc)))

    # ------------------------------------------------------------ outputs
    def outputs(self, node: torch.fx.Node) -> list[str]:
        specs = self.program.graph_signature.output_specs
        results = node.args[0] if isinstance(node.args[0], (tuple, list)) else (node.args[0],)
        names = []
        for spec, arg in zip(specs, results, strict=True):
            if spec.kind is not OutputKind.USER_OUTPUT or not isinstance(arg, torch.fx.Node):
                continue
            value = self.ctx.env.get(arg)
            if isinstance(value, str):
                names.append(value)
            elif value is not _POISON and isinstance(arg.meta.get("val"), torch.Tensor):
                raise TesselError(f"output {arg.name} was not imported")
        if not names and not self.unsupported:
            raise TesselError("the model has no tensor outputs")
        return names


def op_name(node: torch.fx.Node) -> str:
    """Display name of an fx call target ('aten.cumsum.default', 'operator.getitem')."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    module = getattr(target, "__module__", None) or ""
    return f"{module.replace('_operator', 'operator')}.{getattr(target, '__name__', target)}"


