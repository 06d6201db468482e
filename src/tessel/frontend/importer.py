"""The importer: walk an ExportedProgram once and build the float Graph IR.

Placeholders become graph inputs (user inputs, named after forward's arguments) or constants
(parameters, buffers, lifted constants, named after their FQN). Each call node goes through the
converter registered for its ATen overload (see `context.CONVERTERS`). Every unsupported node is
collected on the way; at the end they are raised together as one TesselUnsupportedOpError, or,
with host fallback, imported as `host` ops instead.
"""

from __future__ import annotations

import operator
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
from tessel.frontend.contract import node_boundary
from tessel.frontend.host_ops import Opaque, host_op, untyped
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
        raise TesselUnsupportedOpError(walk.unsupported, allow_host_ops)
    return drop_dead(walk.ctx.builder.build(outputs))


def import_graph_module(module: torch.fx.GraphModule, name: str, *, allow_host_ops: bool = False,
                        cwd: str | None = None) -> Graph:
    """The Graph IR of an ATen-level GraphModule that is not wrapped in an ExportedProgram, such
    as torchao's ``convert_pt2e`` output: placeholders are user inputs, ``get_attr`` nodes are
    constants (named after their attribute path), outputs are the output node's tensors."""
    walk = _Walk(module, GraphBuilder(name), allow_host_ops, cwd or os.getcwd())
    outputs = walk.run()
    if walk.unsupported:
        raise TesselUnsupportedOpError(walk.unsupported, allow_host_ops)
    return drop_dead(walk.ctx.builder.build(outputs))


def imports_directly(module: torch.fx.GraphModule) -> bool:
    """Whether `module` imports (``import_graph_module``) as the Graph IR that exporting it
    again and decomposing it (``export_program``) would give: every node is a placeholder,
    ``get_attr``, function call or output; no call mutates its inputs; and every op is one
    the decomposition leaves alone or one of the few whose decomposition the importer
    reproduces (`_decomposed`: flatten, dropout, max_pool2d, reshape, transpose, unbind, ...)."""
    from tessel.frontend.export import decomposed_ops

    table = decomposed_ops()
    for node in module.graph.nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            continue
        if node.op != "call_function":
            return False
        target = node.target
        if isinstance(target, torch._ops.OpOverload):
            if target._schema.is_mutable:
                return False
            if _decomposes(target, table) and _decomposed(node) is None:
                return False
        elif target is not operator.getitem:
            return False
    return True


def _decomposes(op: torch._ops.OpOverload, table: frozenset) -> bool:
    """Whether exporting and decomposing rewrites `op`: it is in the table, or it is a
    composite op (CompositeImplicitAutograd: flatten, reshape, dropout, ...) not kept whole."""
    from tessel.frontend.export import KEEP_WHOLE

    if op in table:
        return True
    return (op.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd)
            and op not in KEEP_WHOLE)


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
    """One pass over the nodes of an ExportedProgram or of a bare GraphModule."""

    def __init__(self, program: ExportedProgram | torch.fx.GraphModule, builder: GraphBuilder,
                 allow_host: bool, cwd: str):
        self.program, self.allow_host, self.cwd = program, allow_host, cwd
        self.ctx = ImportContext(builder)
        self.unsupported: list[tuple[str, str]] = []
        self.kinds = ({s.arg.name: s for s in program.graph_signature.input_specs}
                      if isinstance(program, ExportedProgram) else {})
        self.names: dict[torch.fx.Node, tuple[str, ...]] = {}  # IR names, if not the fx names
        self.attrs: dict[str, str] = {}  # GraphModule attribute -> its IR constant

    def run(self) -> list[str]:
        outputs: list[str] = []
        nodes = list(self.program.graph.nodes)
        if isinstance(self.program, torch.fx.GraphModule):
            self.names = export_names(nodes)
            nodes = _lifted_order(self.program, nodes)
        for node in nodes:
            # a loaded .pt2 is data: a node whose arguments or metadata do not fit its op is a
            # TesselFormatError naming it (tessel.frontend.contract)
            with node_boundary(f"exported node '{node.name}' ({node.op} {op_name(node)})"):
                if node.op == "placeholder":
                    self.placeholder(node)
                elif node.op == "call_function":
                    self.call(node)
                elif node.op == "get_attr" and isinstance(self.program, torch.fx.GraphModule):
                    self.attribute(node)
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
        self._constant(node, self._lifted(spec.target), spec.target, spec.kind.name.lower())

    def attribute(self, node: torch.fx.Node) -> None:
        """A ``get_attr`` of a GraphModule: a constant tensor named after its attribute path."""
        if not node.users:
            return
        if node.target in self.attrs:  # another get_attr of the same tensor
            self.ctx.env[node] = self.attrs[node.target]
            return
        value: Any = self.program
        for part in str(node.target).split("."):
            value = getattr(value, part)
        if not isinstance(value, torch.Tensor):
            raise TesselError(f"attribute '{node.target}' is a {type(value).__name__}, not a "
                              "tensor")
        self._constant(node, value, str(node.target), "attribute")
        self.attrs[str(node.target)] = self.ctx.env[node]

    def _constant(self, node: torch.fx.Node, tensor: torch.Tensor, fqn: str, kind: str) -> None:
        try:
            array = tensor.detach().cpu().numpy().astype(ir_dtype(tensor.dtype).numpy)
        except Unsupported as exc:
            raise TesselError(f"{kind} '{fqn}': {exc}") from exc
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
        names = self.names.get(node)
        ctx.loc, ctx.hint = source_loc(node, self.cwd), names[0] if names else node.name
        ctx.names = list(names or ())
        converter = CONVERTERS.get(target)
        inputs = node.all_input_nodes
        if converter is not None and any(ctx.env.get(i) is _POISON for i in inputs):
            ctx.env[node] = _POISON  # a producer was unsupported and is reported already
            return
        untyped_in = any(isinstance(ctx.env.get(i), Opaque) for i in inputs)
        why = untyped(node.meta.get("val"))
        try:
            if why is not None or untyped_in:
                raise Unsupported(why or "reads a value the IR cannot type")
            if converter is None:
                raise Unsupported("")
            ctx.env[node] = converter(ctx, node, self._scalars_resolved(bind_args(node)))
        except Unsupported as exc:
            self.fallback(node, str(exc))
        ctx.names = []

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
        results = node.args[0] if isinstance(node.args[0], (tuple, list)) else (node.args[0],)
        user = ([s.kind is OutputKind.USER_OUTPUT for s in self.program.graph_signature.output_specs]
                if isinstance(self.program, ExportedProgram) else [True] * len(results))
        names = []
        for is_user, arg in zip(user, results, strict=True):
            if not is_user or not isinstance(arg, torch.fx.Node):
                continue
            value = self.ctx.env.get(arg)
            if isinstance(value, Opaque):
                raise TesselError(
                    f"output {arg.name} at {source_loc(value.node, self.cwd)} is a "
                    f"{value.node.meta['val'].dtype} tensor, which a compiled model cannot "
                    "return; return a real tensor (torch.view_as_real, .abs(), .angle())")
            if isinstance(value, str):
                names.append(value)
            elif value is not _POISON and isinstance(arg.meta.get("val"), torch.Tensor):
                raise TesselError(f"output {arg.name} was not imported")
        if not names and not self.unsupported:
            raise TesselError("the model has no tensor outputs")
        return names


_A = torch.ops.aten
# ops that run_decompositions (the default table minus KEEP_WHOLE) rewrites into others: the op
# names of the nodes it makes, for the ones that a converted pt2e module keeps whole
_DECOMPOSED_NAMES: dict[Any, tuple[str, ...]] = {
    _A.flatten.using_ints: ("view",), _A.dropout.default: ("clone",),
    _A.max_pool2d.default: ("max_pool2d_with_indices", "getitem"),
    _A.transpose.int: ("permute",), _A.expand_as.default: ("expand",),
    _A.rsub.Scalar: ("sub",), _A.to.dtype: ("_to_copy",), _A.clamp_min.default: ("clamp",),
}
_NO_OP = ("clone", "getitem")  # decomposed nodes that import as no IR op


def _decomposed(node: torch.fx.Node) -> tuple[str, ...] | None:
    """The op names of the nodes `node` decomposes into, or None if it stays one node."""
    target = node.target
    if target in _DECOMPOSED_NAMES:
        return _DECOMPOSED_NAMES[target]
    if target is _A.reshape.default:  # a view, or a contiguous copy viewed
        val = _layout_val(node.args[0])
        contiguous = not isinstance(val, torch.Tensor) or val.is_contiguous()
        return ("view",) if contiguous else ("clone", "view")
    if target is _A.unbind.int:  # split into slices, then each squeezed
        n = len(node.meta.get("val") or ())
        return ("slice",) * n + ("squeeze",) * n
    return None


def _layout_val(arg: Any) -> Any:
    """The example value whose strides `arg` has: pt2e's quantize / dequantize nodes (which
    keep their input's layout) carry none, their input does."""
    while isinstance(arg, torch.fx.Node):
        val = arg.meta.get("val")
        if val is not None:
            return val
        if not (isinstance(arg.target, torch._ops.OpOverload)
                and arg.target.namespace == "quantized_decomposed" and arg.args):
            return None
        arg = arg.args[0]
    return None


def export_names(nodes: list[torch.fx.Node]) -> dict[torch.fx.Node, tuple[str, ...]]:
    """The names of the IR ops each call node of a GraphModule imports as, as they would be
    if the module were exported and decomposed again (what the IR values of a converted pt2e
    module were named when it was): torch.export names a node after its op packet
    (``quantize_per_tensor``, not ``quantize_per_tensor_default``), numbered in graph order
    after the placeholders; an op that decomposes takes the names of the nodes it becomes."""
    from torch.fx.graph import _Namespace

    space = _Namespace()
    for node in nodes:
        if node.op == "placeholder":
            space.create_name(node.name, None)
    names: dict[torch.fx.Node, tuple[str, ...]] = {}
    for node in nodes:
        if node.op != "call_function":
            continue
        target = node.target
        parts = _decomposed(node)
        if parts is not None:
            made = [space.create_name(p, None) for p in parts]
            names[node] = tuple(m for m, p in zip(made, parts, strict=True) if p not in _NO_OP)
        elif (target is operator.getitem and isinstance(node.args[0], torch.fx.Node)
              and node.args[0].target is _A.unbind.int):
            names[node] = ()  # the decomposed unbind has no tuple to index
        elif isinstance(target, torch._ops.OpOverload):
            names[node] = (space.create_name(target.overloadpacket.__name__, None),)
        else:
            names[node] = (space.create_name(getattr(target, "__name__", node.name), None),)
    return names


def _lifted_order(module: torch.fx.GraphModule, nodes: list[torch.fx.Node]
                  ) -> list[torch.fx.Node]:
    """`nodes` with the used ``get_attr`` nodes first, in the order torch.export lifts them
    (parameters, then buffers, then plain tensor attributes, each in registration order)."""
    rank = {name: k for k, (name, _) in enumerate(
        [*module.named_parameters(remove_duplicate=False),
         *module.named_buffers(remove_duplicate=False)])}
    attrs = [n for n in nodes if n.op == "get_attr"]
    first = {n: k for k, n in enumerate(attrs)}
    attrs.sort(key=lambda n: (rank.get(str(n.target), len(rank)), first[n]))
    return attrs + [n for n in nodes if n.op != "get_attr"]


def op_name(node: torch.fx.Node) -> str:
    """Display name of an fx call target ('aten.cumsum.default', 'operator.getitem')."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    module = getattr(target, "__module__", None) or ""
    return f"{module.replace('_operator', 'operator')}.{getattr(target, '__name__', target)}"


