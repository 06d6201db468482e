"""Files `tessel explore` writes into its output folder: pareto.csv, pareto.png (latency vs
energy, area as colour) and presets/NAME.toml (each front point as a preset that
``tessel.arch.load_target`` reads back equal).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tessel.arch import NpuArch
from tessel.fileio import write_atomic

if TYPE_CHECKING:
    from tessel.analysis.explore import ExploreResult


def write_outputs(result: ExploreResult, out_dir: Path,
                  archs: Mapping[str, NpuArch]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [write_csv(result, out_dir / "pareto.csv"),
             write_plot(result, out_dir / "pareto.png")]
    presets = out_dir / "presets"
    presets.mkdir(exist_ok=True)
    for p in result.front:
        arch = archs[p.key]
        path = presets / f"{arch.name}.toml"
        files.append(write_atomic(path, arch_to_toml(arch)))
    return files


def write_csv(result: ExploreResult, path: Path) -> Path:
    rows = result.front_rows()
    cols = ["arch", *[k for k, _ in result.space.params],
            "latency_ms", "energy_uj", "area_mm2", "power_mw"]
    f = io.StringIO(newline="")
    w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    return write_atomic(path, f.getvalue())


def write_plot(result: ExploreResult, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agg = result.space.latency
    fig, ax = plt.subplots(figsize=(7, 5))
    others = [p for p in result.points if p.feasible and p not in result.front]
    if others:
        ax.scatter([p.latency_ms(agg) for p in others], [p.energy_uj for p in others],
                   c="lightgrey", s=12, label="explored")
    if result.front:
        sc = ax.scatter([p.latency_ms(agg) for p in result.front],
                        [p.energy_uj for p in result.front],
                        c=[p.area_mm2 for p in result.front], cmap="viridis", s=40,
                        edgecolors="black", label="Pareto front")
        fig.colorbar(sc, ax=ax, label="area (mm$^2$)")
    ax.set_xlabel(f"latency (ms, {agg.value} over {', '.join(result.models)})")
    ax.set_ylabel("energy per inference (uJ)")
    ax.set_title(f"design space around {result.base}: {len(result.points)} points")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return write_atomic(path, buf.getvalue())


def arch_to_toml(arch: NpuArch) -> str:
    """The preset file of ``arch`` (the layout of tessel/arch/presets/*.toml)."""
    d = arch.to_toml_dict()
    lines = ["# written by `tessel explore`"]
    tables: list[tuple[str, dict[str, Any]]] = []
    arrays: list[tuple[str, list[dict[str, Any]]]] = []
    for k, v in d.items():
        if isinstance(v, dict):
            tables.append((k, v))
        elif isinstance(v, list):
            arrays.append((k, v))
        else:
            lines.append(f"{k} = {_toml_value(v)}")
    for name, table in tables:
        lines += ["", f"[{name}]"] + [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    for name, items in arrays:
        for item in items:
            lines += ["", f"[[{name}]]"] + [f"{k} = {_toml_value(v)}" for k, v in item.items()]
    return "\n".join(lines) + "\n"


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))
