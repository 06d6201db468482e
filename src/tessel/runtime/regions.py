"""The NPU regions of a program (format 1.1 `metadata.npu_regions`): where each region's
instructions end in every engine's stream, which inputs the runtime writes before it and which
outputs it reads after it. The runtime stops the NPU at each end and runs the host part. The
reader checks them (`tessel.binary.metadata.parse_regions`, the one parser)."""

from __future__ import annotations

from tessel.binary import TslProgram
from tessel.binary.metadata import Region, parse_regions
from tessel.errors import TesselFormatError
from tessel.isa import Engine

__all__ = ["Region", "regions_of"]


def regions_of(program: TslProgram) -> tuple[Region, ...]:
    """The `npu_regions` of a program's metadata, checked (TesselFormatError); a file without
    it (format 1.0) has one region reading every input and writing every output."""
    lengths = {e.name: len(program.streams.get(e, ())) for e in Engine}
    try:
        return parse_regions(program.metadata.get("npu_regions"), lengths,
                             [d.name for d in program.inputs], [d.name for d in program.outputs])
    except TesselFormatError as exc:
        raise TesselFormatError(f"metadata: {exc}") from None
