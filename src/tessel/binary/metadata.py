"""The METADATA schema (typed, versioned) and its check against the program, run by the reader.

Everything the runtime and the profile read from the metadata is checked here, so that an
accepted file never makes ``runtime/compiled.py`` or ``runtime/profile.py`` fail on a missing
key, a wrong type or an out-of-range index (docs/binary-format.md, "Metadata schema"). Every
key is optional (a bare program has none); a key that is present must have its type. Unknown
keys are kept and ignored, so newer writers may add fields; ``metadata_version`` above
``METADATA_VERSION`` is refused. The I/O names are checked against the program: each NPU input
is a model input or a prologue value, each model output is produced by some part.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tessel.errors import TesselError, TesselFormatError

METADATA_VERSION = 1

_STR = "a string"
_NAT = "an integer >= 0"


def _is_nat(v: Any) -> bool:
    return type(v) is int and v >= 0


def _is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


# key -> (check, what it must be)
TOP_LEVEL: dict[str, tuple[Callable[[Any], bool], str]] = {
    "metadata_version": (_is_nat, _NAT),
    "model": (lambda v: isinstance(v, str), _STR),
    "target": (lambda v: isinstance(v, str), _STR),
    "tessel_version": (lambda v: isinstance(v, str), _STR),
    "arch": (lambda v: isinstance(v, dict), "an object (an architecture description)"),
    "model_inputs": (_is_str_list, "a list of strings"),
    "model_outputs": (_is_str_list, "a list of strings"),
    "host_ops": (_is_str_list, "a list of strings"),
    "arena_peak_bytes": (_is_nat, _NAT),
    "arena_naive_bytes": (_is_nat, _NAT),
    "layers": (lambda v: isinstance(v, list), "a list of layer objects"),
    "source": (lambda v: isinstance(v, dict), "an object"),
}
LAYER: dict[str, tuple[Callable[[Any], bool], str, bool]] = {  # key -> (check, what, required)
    "name": (lambda v: isinstance(v, str), _STR, True),
    "op": (lambda v: isinstance(v, str), _STR, True),
    "loc": (lambda v: isinstance(v, str), _STR, True),
    "mapping": (lambda v: isinstance(v, str), _STR, True),
    "bound": (lambda v: isinstance(v, str), _STR, True),
    "estimated_cycles": (_is_nat, _NAT, True),
    "first": (lambda v: isinstance(v, dict), "an object engine -> index", True),
    "last": (lambda v: isinstance(v, dict), "an object engine -> index", True),
    "macs": (_is_nat, _NAT, False),
    "nodes": (_is_str_list, "a list of strings", False),
}
SOURCE: dict[str, tuple[Callable[[Any], bool], str]] = {
    "model": (lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    "calibration": (_is_nat, _NAT),
}


def _fail(what: str) -> TesselFormatError:
    return TesselFormatError(f"METADATA: {what}")


def check_metadata(meta: Mapping[str, Any], queue_lengths: Mapping[str, int],
                   inputs: list[str], outputs: list[str],
                   host: Mapping[str, Any]) -> None:
    """Raise TesselFormatError unless ``meta`` follows the schema and agrees with the program.

    queue_lengths: engine name -> instructions in its stream; inputs / outputs: NPU descriptor
    names; host: parsed host graphs by key ("prologue" / "epilogue").
    """
    for key, (ok, what) in TOP_LEVEL.items():
        if key in meta and not ok(meta[key]):
            raise _fail(f"'{key}' must be {what}, got {_show(meta[key])}")
    version = meta.get("metadata_version", METADATA_VERSION)
    if version > METADATA_VERSION:
        raise _fail(f"'metadata_version' {version} is newer than this reader "
                    f"({METADATA_VERSION}); upgrade Tessel to read it")
    for key, (ok, what) in SOURCE.items():
        src = meta.get("source", {})
        if "source" in meta and (key not in src or not ok(src[key])):
            raise _fail(f"'source.{key}' must be {what}, got {_show(src.get(key))}")
    for i, layer in enumerate(meta.get("layers", [])):
        _check_layer(i, layer, queue_lengths)
    _check_dataflow(meta, inputs, outputs, host)


def _check_layer(i: int, layer: Any, queue_lengths: Mapping[str, int]) -> None:
    where = f"'layers[{i}]'"
    if not isinstance(layer, dict):
        raise _fail(f"{where} must be an object, got {_show(layer)}")
    for key, (ok, what, required) in LAYER.items():
        if key not in layer:
            if required:
                raise _fail(f"{where} has no '{key}'")
            continue
        if not ok(layer[key]):
            raise _fail(f"{where}.{key} must be {what}, got {_show(layer[key])}")
    for engine, n in queue_lengths.items():
        first, last = layer["first"].get(engine), layer["last"].get(engine)
        if type(first) is not int or type(last) is not int:
            raise _fail(f"{where}: first/last index of engine {engine} must be integers, got "
                        f"{_show(first)} / {_show(last)}")
        if not (0 <= first <= last + 1 and last < n):
            raise _fail(f"{where}: instructions [{first}, {last}] of engine {engine} are not "
                        f"a range inside its {n}-instruction stream")


def _check_dataflow(meta: Mapping[str, Any], inputs: list[str], outputs: list[str],
                    host: Mapping[str, Any]) -> None:
    """Every value the runtime looks up exists when it looks it up (runtime/compiled.py run)."""
    model_inputs = meta.get("model_inputs", inputs)
    model_outputs = meta.get("model_outputs", outputs)
    if len(set(model_inputs)) != len(model_inputs):
        raise _fail(f"'model_inputs' {model_inputs[:8]} has duplicate names")
    env = set(model_inputs)
    stages = (("prologue", host.get("prologue")), ("NPU program", None),
              ("epilogue", host.get("epilogue")))
    for name, graph in stages:
        needs = inputs if graph is None and name == "NPU program" else (
            [v.name for v in graph.inputs] if graph is not None else [])
        missing = [n for n in needs if n not in env]
        if missing:
            raise _fail(f"the {name} needs {missing[0]!r}, which is neither a model input nor "
                        "produced before it")
        if name == "NPU program":
            env.update(outputs)
        elif graph is not None:
            env.update(v.name for v in graph.inputs)
            env.update(node.name for node in graph.nodes)
    missing = [n for n in model_outputs if n not in env]
    if missing:
        raise _fail(f"model output {missing[0]!r} is produced by no part of the program")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_host_graphs(texts: Mapping[str, str]) -> dict[str, Any]:
    """The host graphs parsed (the reader has already checked that they parse and verify)."""
    from tessel.ir import parse_graph

    try:
        return {k: parse_graph(t, source=f"host graph {k!r}") for k, t in texts.items()}
    except TesselError as exc:  # cannot happen after read_host_graphs; kept for the contract
        raise _fail(str(exc)) from None
