"""Cut a model at named submodules: the compiled part ends with their outputs, and what the
model does after them (box decoding, NMS, anything data-dependent torch.export cannot trace)
stays in PyTorch, run by the user on the compiled model's outputs.

``cut(model, "head")`` is an ``nn.Module`` whose forward runs ``model`` until every named
submodule has returned and then stops: a forward hook raises a private exception that the
cut's own forward catches, so neither eager runs (calibration) nor torch.export's non-strict
tracing (which runs the Python code) ever reach the code after the cut. Its output is a dict
from each module path to that module's output, so the compiled outputs are named after them
(``head.0``, ``head.1`` for a head returning two tensors).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from tessel.errors import TesselConfigError, TesselError, did_you_mean


class _Reached(Exception):
    """Raised by the last cut module's forward hook: the rest of the forward does not run."""


class CutModel(nn.Module):
    """`model` up to (and including) the submodules `names`; see the module docstring."""

    def __init__(self, model: nn.Module, names: Sequence[str]):
        super().__init__()
        self.model = model
        self.names = tuple(names)
        self.left: list[str] | None = None  # what `left_out` found (set by the CLI)
        self.train(model.training)

    def forward(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        captured: dict[str, Any] = {}

        def hook(name: str):
            def record(_module: nn.Module, _inputs: Any, output: Any) -> None:
                captured.setdefault(name, output)
                if len(captured) == len(self.names):
                    raise _Reached
            return record

        handles = [self.model.get_submodule(n).register_forward_hook(hook(n))
                   for n in self.names]
        stack = _tracer_module_stack()
        depth = None if stack is None else len(stack)
        try:
            self.model(*args, **kwargs)
        except _Reached:
            # torch's tracer pops a module's entry only when its forward returns: drop the
            # entries of the forwards the cut left (else the export's next pop fails)
            while stack is not None and depth is not None and len(stack) > depth:
                stack.popitem(last=True)
        finally:
            for handle in handles:
                handle.remove()
        missing = [n for n in self.names if n not in captured]
        if missing:
            raise TesselError(f"the model's forward returned without running {', '.join(missing)}"
                              " (a cut ends at modules the forward calls)")
        return {n: captured[n] for n in self.names}


def _tracer_module_stack() -> Any:
    """The module stack of the fx tracer a non-strict torch.export is running, or None."""
    from torch.fx.experimental import proxy_tensor

    tracer = getattr(proxy_tensor, "_CURRENT_MAKE_FX_TRACER", None)
    return getattr(getattr(tracer, "fx_tracer", None), "module_stack", None)


def cut(model: nn.Module, until: str | Sequence[str]) -> CutModel:
    """`model` cut after the submodule(s) `until` (module paths such as ``"head"`` or
    ``"heads.cls,heads.box"``); compile the result, run the rest of the model in PyTorch."""
    if not isinstance(model, nn.Module):
        raise TesselConfigError(f"a model is cut at its submodules: got a {type(model).__name__}"
                                ", not an nn.Module")
    names = [n.strip() for n in (until.split(",") if isinstance(until, str) else until)]
    if not names or any(not n for n in names):
        raise TesselConfigError(f"--until names module paths (e.g. 'head'), got {until!r}")
    known = [n for n, _ in model.named_modules() if n]
    for name in names:
        if name not in known:
            raise TesselConfigError(
                f"--until {name!r}: {type(model).__name__} has no submodule {name!r}"
                f"{did_you_mean(name, known)}; its top-level modules: "
                f"{', '.join(n for n, _ in model.named_children())}")
    return CutModel(model, names)


def left_out(model: CutModel, example_inputs: Sequence[torch.Tensor]) -> list[str]:
    """The top-most submodules of the cut model that its forward never starts (they run in
    PyTorch after the compiled part), found by running it once on `example_inputs`."""
    started: set[str] = set()
    inner = model.model
    handles = [m.register_forward_pre_hook(lambda *_a, n=n: started.add(n))
               for n, m in inner.named_modules() if n]
    try:
        with torch.no_grad():
            model(*example_inputs)
    finally:
        for handle in handles:
            handle.remove()
    # a container (ModuleList, ModuleDict) has no forward of its own: it ran if a child did
    ran = {n for s in started for n in _ancestors(s)}
    out: list[str] = []
    for name, _ in inner.named_modules():
        if name and name not in ran and not any(name.startswith(o + ".") for o in out):
            out.append(name)
    return out


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts) + 1)]


def cut_record(model: Any) -> dict[str, list[str]]:
    """{"until": module paths} for a cut model (recorded in a binary's metadata.source, so that
    rebuilding the model from its source cuts it again), else {}."""
    return {"until": list(model.names)} if isinstance(model, CutModel) else {}


def recut(model: nn.Module, record: dict[str, Any]) -> nn.Module:
    """`model` cut as a binary's metadata.source records (unchanged when it records no cut)."""
    until = record.get("until")
    if until is None:
        return model
    if not (isinstance(until, list) and until and all(isinstance(n, str) for n in until)):
        raise TesselError(f"metadata.source.until must be a list of module paths, got {until!r}")
    return cut(model, until)
