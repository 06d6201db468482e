"""What a model calls its outputs, so that a compiled model's outputs are named after them
(``logits``, not ``dequantize_per_tensor_140``).

* a module returning a dict or a named tuple: its keys / fields (``"a.b"`` when nested, with
  the index of a tuple inside: ``"boxes.0"``);
* a module returning one tensor or a tuple of tensors: the variable names of its ``forward``'s
  return statement when every return names the same distinct variables, none of them an
  argument of ``forward`` (``return logits, probs``); else ``output_0``, ``output_1``, ...;
* a graph imported from a model file (ONNX, TFLite): the file's own output names.

The names are valid IR value names (``ir.sanitize_name``); anything that does not give one
name per output falls back to ``output_0 .. output_{n-1}``.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Sequence
from typing import Any

import torch

from tessel.ir import sanitize_name


def default_names(count: int) -> list[str]:
    return [f"output_{k}" for k in range(count)]


def output_names(model: Any, example_inputs: Sequence[torch.Tensor], count: int) -> list[str]:
    """``count`` names for the outputs of ``model`` (an nn.Module, an ExportedProgram or its
    GraphModule, an imported IRModule / QDQModule) run on ``example_inputs``."""
    from tessel.frontend.ir_module import IRModule, QDQModule

    if isinstance(model, QDQModule):  # an imported model file: its own names
        return _checked(list(model.qdq_graph.outputs), count)
    if isinstance(model, IRModule):
        return _checked(list(model.graph.outputs), count)
    module = model.module() if isinstance(model, torch.export.ExportedProgram) else model
    try:
        with torch.no_grad():
            result = module(*example_inputs)
    except Exception:  # noqa: BLE001 (names are a nicety: the compile reports real errors)
        return default_names(count)
    leaves = _leaves(result, ())
    if any(isinstance(p, str) for path in leaves for p in path):
        return _checked([".".join(str(p) for p in path) for path in leaves], count)
    returned = _return_names(module)
    if returned is not None and len(returned) == len(leaves):
        return _checked(returned, count)
    return default_names(count)


def _checked(names: list[str], count: int) -> list[str]:
    clean = [sanitize_name(n) for n in names]
    if len(clean) != count or len(set(clean)) != count:
        return default_names(count)
    return clean


def _leaves(value: Any, path: tuple) -> list[tuple]:
    """The path (keys, fields, indices) of every tensor in an output structure, in the order
    torch.export flattens it."""
    if isinstance(value, torch.Tensor):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, (*path, str(k)))]
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return [p for f in value._fields for p in _leaves(getattr(value, f), (*path, f))]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in _leaves(v, (*path, i))]
    return []


def _return_names(module: Any) -> list[str] | None:
    """The variables every return statement of ``forward`` names (None: not one such form)."""
    forward = getattr(type(module), "forward", None)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(forward)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    fn = tree.body[0] if tree.body else None
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    args = fn.args
    params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    forms = set()
    for node in _returns(fn):
        value = node.value
        items = value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]
        if not all(isinstance(v, ast.Name) for v in items):
            return None
        forms.add(tuple(v.id for v in items))  # type: ignore[union-attr]
    if len(forms) != 1:
        return None
    names = list(forms.pop())
    if len(set(names)) != len(names) or params & set(names):
        return None
    return names


def _returns(fn: ast.AST) -> list[ast.Return]:
    """The return statements of ``fn`` itself (not of functions defined inside it)."""
    out: list[ast.Return] = []
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return) and node.value is not None:
            out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out
