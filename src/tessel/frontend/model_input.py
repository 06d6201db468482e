"""What a user may hand Tessel as "the model": an `nn.Module`, a `torch.export.ExportedProgram`
(e.g. from `torch.export.load("m.pt2")`) or the `GraphModule` of an exported program
(`ep.module()`, which cannot be switched with `.eval()`).

    module = as_module(model)                # an nn.Module torch.export can export again
    inputs = example_inputs_of(model, None)  # the program's own example inputs

A model in training mode is refused with one clear error: for an `nn.Module` that is any
submodule with `training=True`; for an exported graph (whose `training` flag means nothing) any
batch norm or dropout node exported with training semantics.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import fx, nn

from tessel.errors import TesselConfigError, TesselError

_A = torch.ops.aten
# (op, index of its `training` argument, default): nodes that behave differently in training
_TRAINING_ARGS = (
    (_A.batch_norm.default, 5, None), (_A._native_batch_norm_legit.default, 5, None),
    (_A._native_batch_norm_legit_functional.default, 5, None),
    (_A.native_batch_norm.default, 5, None), (_A.dropout.default, 2, None),
    (_A.feature_dropout.default, 2, None), (_A.alpha_dropout.default, 2, None),
)
_ALWAYS_TRAINING = (_A.native_dropout.default,)


def check_eval_mode(model: nn.Module) -> None:
    """Raise TesselError if any submodule of `model` is in training mode."""
    training = [name or "<root>" for name, m in model.named_modules() if m.training]
    if training:
        shown = ", ".join(training[:5]) + (" ..." if len(training) > 5 else "")
        raise TesselError(
            f"model {type(model).__name__} is in training mode ({len(training)} module(s): "
            f"{shown}); call model.eval() before importing it (dropout and batch-norm statistics "
            "differ in training mode)")


def is_exported(model: object) -> bool:
    """True for an ExportedProgram or an fx GraphModule (an exported / traced graph)."""
    return isinstance(model, torch.export.ExportedProgram | fx.GraphModule)


def training_nodes(graph: fx.Graph) -> list[str]:
    """Names of the nodes of an exported graph that run with training semantics."""
    found = []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if node.target in _ALWAYS_TRAINING:
            found.append(f"{node.name} ({node.target})")
            continue
        for op, index, _ in _TRAINING_ARGS:
            if node.target is op:
                flag = node.args[index] if len(node.args) > index else node.kwargs.get("train")
                if flag is True:
                    found.append(f"{node.name} ({op})")
    return found


def _refuse_training_graph(graph: fx.Graph, what: str) -> None:
    nodes = training_nodes(graph)
    if nodes:
        shown = ", ".join(nodes[:5]) + (" ..." if len(nodes) > 5 else "")
        raise TesselError(
            f"{what} was exported in training mode ({len(nodes)} node(s): {shown}); export it "
            "again after model.eval() (dropout and batch-norm statistics differ in training mode)")


def as_module(model: object) -> nn.Module:
    """The nn.Module to export for `model` (an nn.Module, ExportedProgram or exported
    GraphModule), after refusing a model in training mode. Never calls `.eval()`."""
    if isinstance(model, torch.export.ExportedProgram):
        _refuse_training_graph(model.graph, "the ExportedProgram")
        return model.module()
    if isinstance(model, fx.GraphModule):
        _refuse_training_graph(model.graph, f"the {type(model).__name__}")
        return model
    if isinstance(model, nn.Module):
        check_eval_mode(model)
        return model
    raise TesselConfigError(
        f"expected a torch.nn.Module, a torch.export.ExportedProgram or an exported GraphModule "
        f"as the model, got {type(model).__module__}.{type(model).__qualname__}")


def model_name(model: object) -> str:
    """A readable name: the class name of an nn.Module, 'exported' for an exported graph."""
    if is_exported(model):
        return "exported"
    return type(model).__name__


def example_inputs_of(model: object, given: Sequence[torch.Tensor] | None
                      ) -> tuple[torch.Tensor, ...]:
    """`given` as a tuple; else the ExportedProgram's own example inputs (positional only)."""
    if given is not None:
        return (given,) if isinstance(given, torch.Tensor) else tuple(given)
    if isinstance(model, torch.export.ExportedProgram):
        stored = model.example_inputs
        if stored is not None:
            args, kwargs = stored
            if kwargs:
                raise TesselConfigError("the ExportedProgram's example inputs have keyword "
                                        f"arguments {sorted(kwargs)}; pass example_inputs")
            return tuple(args)
        return inputs_from_signature(model)
    raise TesselConfigError("example_inputs are needed for a model that is not an "
                            "ExportedProgram (it carries its own)")


def inputs_from_signature(program: torch.export.ExportedProgram) -> tuple[torch.Tensor, ...]:
    """Deterministic stand-in inputs (standard normal, seed 0; zeros for integer dtypes) of the
    shapes and dtypes of the program's user inputs, for a program saved without examples."""
    user = set(program.graph_signature.user_inputs)
    gen = torch.Generator().manual_seed(0)
    out = []
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in user:
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise TesselConfigError(f"input {node.name!r} of the ExportedProgram is not a "
                                    "tensor; pass example inputs (--inputs x.npz)")
        try:
            shape = [int(d) for d in val.shape]
        except TypeError:
            raise TesselConfigError(f"input {node.name!r} has a symbolic shape {tuple(val.shape)}"
                                    "; pass example inputs (--inputs x.npz)") from None
        if val.dtype.is_floating_point:
            out.append(torch.randn(shape, generator=gen).to(val.dtype))
        else:
            out.append(torch.zeros(shape, dtype=val.dtype))
    return tuple(out)
