"""CLI commands about the hardware: ``tessel targets [--json] [--wide] [--target T ...]``
(each target's key figures and its operating points).

``--target`` values anywhere in the CLI are a preset name or a path to a .toml file, resolved
by ``tessel.arch.load_target``; ``add_target_argument`` adds that option to a sub-command.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tessel.arch import NpuArch, list_presets, load_target
from tessel.display import Table


def add_target_argument(parser: argparse.ArgumentParser, default: str | None = "tnpu-s") -> None:
    """Add ``--target NAME|FILE.toml`` to ``parser`` (resolve it with ``load_target``)."""
    parser.add_argument(
        "--target", default=default,
        help=f"preset name ({', '.join(list_presets())}) or path to a .toml file",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("targets", help="list NPU presets and their key figures")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--target", action="append", default=None,
                   help="show this preset or .toml file instead of all presets (repeatable)")
    p.add_argument("--wide", action="store_true", help="print the table at full width")
    p.set_defaults(func=targets_command)


COLUMNS = ("target", "node nm", "MHz", "array", "MACs/c", "peak TOPS", "SRAM KiB", "SRAM B/c",
           "operand path (in+w buf)", "off-chip: bandwidth, latency",
           "operating points (MHz @ V)", "area mm2")
NUMERIC = (False, True, True, False, True, True, True, True, False, False, False, True)
POINTS_COLUMN = COLUMNS.index("operating points (MHz @ V)")


def _row(a: NpuArch) -> list[str]:
    s = a.summary()
    ghz = s["clock_hz"] / 1e9
    mems = "; ".join(f"{m['name']} {m['bytes_per_cycle'] * ghz:g} GB/s, "
                     f"{m['latency_cycles']} c" for m in s["offchip"])
    operands = (f"{s['matrix.feed_bytes_per_cycle']}B/c {s['matrix.input_buffer_bytes'] / 1024:g}"
                f"+{s['matrix.weight_buffer_bytes'] / 1024:g}KiB")
    return [s["name"], str(s["process_node_nm"]), f"{s['clock_hz'] / 1e6:g}",
            f"{s['matrix.rows']}x{s['matrix.cols']} {s['matrix.dataflow'][0]}S",
            str(s["peak_macs_per_cycle"]), f"{s['peak_tops']:.3g}",
            f"{s['onchip.sram_bytes'] // 1024:,}", str(s["sram_bytes_per_cycle"]), operands,
            mems, "; ".join(f"{p['name']} {p['clock_hz'] / 1e6:g} @ {p['voltage_v']:g}"
                            for p in operating_points(a)), f"{s['area_mm2']:.3f}"]


def operating_points(a: NpuArch) -> list[dict[str, Any]]:
    """The target's operating points (DVFS), slowest first: name, clock, supply voltage."""
    return [{"name": p.name, "clock_hz": p.clock_hz, "voltage_v": p.voltage_v}
            for p in a.operating_points]


def targets_table(archs: list[NpuArch]) -> Table:
    """One row per target: process node, clock, array, peak TOPS, SRAM, the operand path,
    each off-chip memory's bandwidth and latency, its operating points (left out of a table
    too wide for the terminal) and the area (at its own process node)."""
    return Table(COLUMNS, [_row(a) for a in archs], NUMERIC, secondary=(POINTS_COLUMN,))


def format_table(archs: list[NpuArch], width: int | None = None) -> str:
    return targets_table(archs).text(width) + "\n"


def targets_command(args: argparse.Namespace) -> int:
    # a bad --target raises TesselConfigError naming the key; tessel.cli.main reports it
    archs = [load_target(n) for n in (args.target or list_presets())]
    if args.json:
        out = [dict(a.summary(), arch_hash=a.arch_hash, operating_points=operating_points(a))
               for a in archs]
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        targets_table(archs).print(wide=args.wide)
    return 0
