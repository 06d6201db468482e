"""The NPU regions of a program (format 1.1 `metadata.npu_regions`): where each region's
instructions end in every engine's stream, which inputs the runtime writes before it and which
outputs it reads after it. The runtime stops the NPU at each end and runs the host part."""

from __future__ import annotations

from dataclasses import dataclass

from tessel.binary import TslProgram
from tessel.errors import TesselFormatError
from tessel.isa import Engine


@dataclass(frozen=True)
class Region:
    """One NPU region of a program: inputs written before it, engine stop indices, outputs."""

    inputs: tuple[str, ...]
    ends: list[int]  # per engine (Engine order): index one past the region's last instruction
    outputs: tuple[str, ...]


def regions_of(program: TslProgram) -> tuple[Region, ...]:
    """The `npu_regions` of a program's metadata, checked (TesselFormatError); a file without
    it (format 1.0) has one region reading every input and writing every output."""
    lengths = [len(program.streams.get(e, ())) for e in Engine]
    spec = program.metadata.get("npu_regions")
    if spec is None:
        return (Region(tuple(d.name for d in program.inputs), lengths,
                       tuple(d.name for d in program.outputs)),)
    names_in = {d.name for d in program.inputs}
    names_out = {d.name for d in program.outputs}
    if not isinstance(spec, list):
        raise TesselFormatError("metadata 'npu_regions' must be a list")
    out, previous = [], [0] * len(lengths)
    for k, r in enumerate(spec):
        where = f"metadata npu_regions[{k}]"
        try:
            ins, outs, ends = tuple(r["inputs"]), tuple(r["outputs"]), r["ends"]
            stops = [ends[e.name] for e in Engine]
        except (TypeError, KeyError) as exc:
            raise TesselFormatError(f"{where}: needs inputs, outputs and ends per engine "
                                    f"({exc})") from None
        if not set(ins) <= names_in or not set(outs) <= names_out:
            raise TesselFormatError(f"{where}: names not among the IO descriptors")
        if not all(isinstance(s, int) and p <= s <= n
                   for s, p, n in zip(stops, previous, lengths, strict=True)):
            raise TesselFormatError(f"{where}: ends {stops} not within the streams "
                                    f"{lengths} after the previous region")
        out.append(Region(ins, stops, outs))
        previous = stops
    if out and previous != lengths:
        raise TesselFormatError(f"metadata npu_regions: the last region ends at {previous}, "
                                f"not at the end of the streams {lengths}")
    return tuple(out)
