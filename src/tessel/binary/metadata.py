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
from dataclasses import dataclass
from typing import Any

from tessel.errors import TesselFormatError

METADATA_VERSION = 1

_STR = "a string"
_NAT = "an integer >= 0"


def _is_nat(v: Any) -> bool:
    return type(v) is int and v >= 0


def _is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _is_fallback(v: Any) -> bool:
    """The compile's fallback summary (`tessel.lower.fallback.FallbackSummary.to_dict`)."""
    return (isinstance(v, dict)
            and all(_is_nat(v.get(k)) for k in ("npu_ops", "total_ops", "npu_macs",
                                                  "total_macs", "regions"))
            and isinstance(v.get("host_ops"), dict)
            and all(isinstance(k, str) and _is_str_list(x) for k, x in v["host_ops"].items()))


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
    "fallback": (_is_fallback, "an object with npu_ops, total_ops, npu_macs, total_macs, "
                 "regions (integers >= 0) and host_ops (reason -> list of op names)"),
    "npu_regions": (lambda v: isinstance(v, list), "a list of region objects"),
    "reference": (lambda v: isinstance(v, dict), "an object (reference outputs)"),
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
    regions = parse_regions(meta.get("npu_regions"), queue_lengths, inputs, outputs)
    _check_dataflow(meta, regions, inputs, outputs, host)


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


@dataclass(frozen=True)
class Region:
    """One NPU region of a program: inputs written before it, engine stop indices, outputs."""

    inputs: tuple[str, ...]
    ends: list[int]  # per engine (stream order): index one past the region's last instruction
    outputs: tuple[str, ...]


def parse_regions(spec: Any, queue_lengths: Mapping[str, int], inputs: list[str],
                  outputs: list[str]) -> tuple[Region, ...]:
    """The NPU regions of `metadata.npu_regions` (format 1.1), checked against the streams and
    the IO descriptors; None (format 1.0) is one region reading every input and writing every
    output. Raises TesselFormatError."""
    engines, lengths = list(queue_lengths), list(queue_lengths.values())
    if spec is None:
        return (Region(tuple(inputs), lengths, tuple(outputs)),)
    if not isinstance(spec, list) or not spec:
        raise _fail(f"'npu_regions' must be a non-empty list, got {_show(spec)}")
    out, previous = [], [0] * len(lengths)
    for k, r in enumerate(spec):
        where = f"'npu_regions[{k}]'"
        try:
            ins, outs, ends = tuple(r["inputs"]), tuple(r["outputs"]), r["ends"]
            stops = [ends[e] for e in engines]
        except (TypeError, KeyError) as exc:
            raise _fail(f"{where} needs inputs, outputs and ends per engine ({exc})") from None
        if not all(isinstance(n, str) for n in ins + outs):
            raise _fail(f"{where}: inputs and outputs must be lists of names")
        if not set(ins) <= set(inputs) or not set(outs) <= set(outputs):
            raise _fail(f"{where}: names not among the IO descriptors")
        if not all(type(s) is int and p <= s <= n
                   for s, p, n in zip(stops, previous, lengths, strict=True)):
            raise _fail(f"{where}: ends {stops} not within the streams {lengths} after the "
                        "previous region")
        out.append(Region(ins, stops, outs))
        previous = stops
    if previous != lengths:
        raise _fail(f"'npu_regions': the last region ends at {previous}, not at the end of the "
                    f"streams {lengths}")
    return tuple(out)


def host_part_keys(regions: int) -> list[str]:
    """The host graph keys in run order around `regions` NPU regions: host part k runs before
    region k+1 (prologue, host_1, ..., epilogue)."""
    return ["prologue"] + [f"host_{k}" for k in range(1, regions)] + ["epilogue"]


def _check_dataflow(meta: Mapping[str, Any], regions: tuple[Region, ...],
                    inputs: list[str], outputs: list[str], host: Mapping[str, Any]) -> None:
    """Every value the runtime looks up exists when it looks it up (runtime/compiled.py run:
    host part k, then NPU region k+1, ...)."""
    model_inputs = meta.get("model_inputs", inputs)
    model_outputs = meta.get("model_outputs", outputs)
    if len(set(model_inputs)) != len(model_inputs):
        raise _fail(f"'model_inputs' {model_inputs[:8]} has duplicate names")
    keys = host_part_keys(len(regions))
    extra = sorted(set(host) - set(keys))
    if extra:
        raise _fail(f"host graphs {extra} do not fit {len(regions)} NPU region(s)")
    env = set(model_inputs)
    for k, key in enumerate(keys):
        graph = host.get(key)
        if graph is not None:
            missing = [v.name for v in graph.inputs if v.name not in env]
            if missing:
                raise _fail(f"the {key} needs {missing[0]!r}, which is neither a "
                            "model input nor produced before it")
            env.update(node.name for node in graph.nodes)
        if k < len(regions):
            what = "NPU program" if len(regions) == 1 else f"NPU region {k + 1}"
            missing = [n for n in regions[k].inputs if n not in env]
            if missing:
                raise _fail(f"the {what} needs {missing[0]!r}, which is neither a model input "
                            "nor produced before it")
            env.update(regions[k].outputs)
    missing = [n for n in model_outputs if n not in env]
    if missing:
        raise _fail(f"model output {missing[0]!r} is produced by no part of the program")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."

