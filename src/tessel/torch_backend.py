"""`torch.compile(model, backend="tessel")`: each graph TorchDynamo captures is compiled for the
NPU and run on the bit-exact simulator.

    cmodel = torch.compile(model.eval(), backend="tessel",
                           options={"target": "tnpu-s", "calibration_data": samples})
    y = cmodel(x)        # NPU simulator (host parts on the CPU), outputs as torch tensors

Registered as the dynamo backend "tessel" through the `torch_dynamo_backends` entry point
(pyproject.toml), and again when this module is imported (for installs whose metadata predates
the entry point).

Per captured graph: the module's parameters and buffers, which dynamo passes as graph inputs,
are bound as constants (weights are frozen at compile time, as for any ahead-of-time NPU
compile); the rest are the graph's user inputs. Calibration (docs/frontend.md):
* `calibration_data` (samples of the model's inputs) calibrates every graph whose user inputs
  have the shapes of a sample, i.e. the model's first graph (all of it without graph breaks),
  on up to `calibration_samples` (default 32) samples: the same quantisation as
  `tessel.compile(model, x, calibration_data=...)`.
* Any other graph (after a graph break; or no `calibration_data`) is calibrated on the inputs of
  its first call, one sample; a warning says so.
Graph breaks: the Python between graphs runs eagerly, as with every dynamo backend; ops the NPU
cannot run stay in the graph and run on the host through Tessel's own fallback. A graph Tessel
refuses raises its TesselError, or runs eagerly with a warning if `eager_fallback=True`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import fx, nn

from tessel.errors import TesselConfigError, TesselError

OPTION_KEYS = frozenset({"target", "calibration_data", "calibration_samples", "eager_fallback"})


class _BoundGraph(nn.Module):
    """A dynamo graph with its parameter / buffer inputs bound to itself: forward(*user)."""

    def __init__(self, gm: fx.GraphModule, args: Sequence[Any], state: Sequence[bool]):
        super().__init__()
        self.gm = gm
        self.state = tuple(state)
        for k, (a, is_state) in enumerate(zip(args, state, strict=True)):
            if is_state and isinstance(a, nn.Parameter):
                self.register_parameter(f"arg{k}", nn.Parameter(a.detach().clone(),
                                                                requires_grad=False))
            elif is_state:
                self.register_buffer(f"arg{k}", a.detach().clone())

    def forward(self, *user):
        it = iter(user)
        args = [getattr(self, f"arg{k}") if s else next(it) for k, s in enumerate(self.state)]
        out = self.gm(*args)
        return tuple(out) if isinstance(out, list | tuple) else (out,)


def _is_state(node: fx.Node) -> bool:
    """A placeholder that dynamo filled from a module's parameters or buffers."""
    arg = node.meta.get("grapharg")
    name = arg.source.name if arg is not None and getattr(arg, "source", None) else ""
    name = name() if callable(name) else str(name)
    return "._parameters[" in name or "._buffers[" in name


def _calibration(options: dict, user: tuple[torch.Tensor, ...], label: str) -> list[tuple]:
    samples = options.get("calibration_data")
    count = int(options.get("calibration_samples", 32))
    if samples is not None:
        fitting = []
        for s in samples:
            s = (s,) if isinstance(s, torch.Tensor) else tuple(s)
            if len(s) == len(user) and all(isinstance(a, torch.Tensor) and a.shape == b.shape
                                           for a, b in zip(s, user, strict=True)):
                fitting.append(s)
            if len(fitting) == count:
                break
        if fitting:
            return fitting
    warnings.warn(f"tessel backend: {label} is calibrated on the inputs of its first call only "
                  "(1 sample); pass options={'calibration_data': ...} matching its inputs",
                  stacklevel=2)
    return [user]


def tessel_backend(gm: fx.GraphModule, example_inputs: Sequence[Any], *,
                   options: dict | None = None) -> Callable[..., Any]:
    """The dynamo backend: compile `gm` with Tessel, return a function running it on the
    simulator (see the module docstring for `options`)."""
    from tessel.driver import compile as tessel_compile

    options = dict(options or {})
    unknown = sorted(set(options) - OPTION_KEYS)
    if unknown:
        raise TesselConfigError(f"tessel backend: unknown option(s) {unknown}; known: "
                                f"{sorted(OPTION_KEYS)}")
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    state = [_is_state(n) for n in placeholders]
    user = tuple(a for a, s in zip(example_inputs, state, strict=True) if not s)
    label = f"graph {gm.__class__.__name__} ({len(user)} input(s))"
    try:
        if not all(isinstance(a, torch.Tensor) for a in example_inputs):
            raise TesselConfigError(f"tessel backend: {label} has non-tensor inputs (symbolic "
                                    "shapes?); use torch.compile(..., dynamic=False)")
        user = tuple(a.detach() for a in user)
        bound = _BoundGraph(gm, example_inputs, state).eval()
        with torch.no_grad():
            program = torch.export.export(bound, user, strict=False)
        cm = tessel_compile(program, user, target=options.get("target", "tnpu-s"),
                            calibration_data=_calibration(options, user, label),
                            name="torch_compile")
    except TesselError as exc:
        if not options.get("eager_fallback"):
            raise
        warnings.warn(f"tessel backend: {label} runs eagerly: {exc}", stacklevel=2)
        return gm.forward

    user_index = [k for k, s in enumerate(state) if not s]

    def run(*args):
        outs = cm.run(*(args[k] for k in user_index))
        return tuple(torch.from_numpy(o) for o in outs)

    run.compiled_model = cm  # type: ignore[attr-defined]  # for tests and inspection
    return run


def register() -> None:
    """Register "tessel" with TorchDynamo unless the entry point already did."""
    from torch._dynamo.backends.registry import list_backends, register_backend

    if "tessel" not in list_backends(exclude_tags=()):
        register_backend(tessel_backend, name="tessel")


register()
