"""Side-by-side comparisons (`tessel compare`): NPU targets for one or more models, and two
binaries of one model.

Targets: every model is estimated on every target (``estimate_graph``: the schedule the
compiler would emit, mappings and fusion searched per target, no binary), giving per
(model, target) the latency, energy, MAC utilisation and off-chip traffic, next to each
target's area at its own process node; and the layers whose cost-model bound differs between
targets (a layer counted only where every target runs it as the same step).

Binaries: two compiled programs of one model (a regression check): the simulator's profile of
each, their totals, and per layer (matched by IR name) the cycles, mapping and off-chip bytes
that changed.

    cmp = compare_targets({"resnet18": graph}, [load_target("tnpu-s"), load_target("tnpu-m")])
    print(cmp.text()); cmp.to_json(); write_compare_html(cmp, "cmp.html")
    diff = compare_binaries(load("a.tsl"), load("b.tsl"), "a.tsl", "b.tsl")
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from tessel.analysis.estimate import EstimateReport, estimate_graph
from tessel.arch import NpuArch
from tessel.display import (
    Table,
    fit_text,
    fmt_change,
    fmt_int,
    plural,
    short_repr,
    summary_html,
)
from tessel.ir import Graph
from tessel.progress import track
from tessel.runtime.compiled import CompiledModel
from tessel.runtime.profile import LayerStats
from tessel.schedule import search


@dataclass(frozen=True)
class TargetInfo:
    """What a comparison shows of a target besides its results."""

    name: str
    process_node_nm: int
    clock_hz: int
    peak_tops: float
    sram_bytes: int
    area_mm2: float  # at its own process node

    @classmethod
    def of(cls, arch: NpuArch) -> TargetInfo:
        return cls(arch.name, arch.process_node_nm, arch.clock_hz, arch.peak_tops,
                   arch.onchip.sram_bytes, arch.derived.area_mm2)


@dataclass(frozen=True)
class TargetResult:
    """One model on one target (the analytical estimate)."""

    model: str
    target: str
    cycles: int
    latency_ms: float
    energy_uj: float
    mac_utilisation: float
    offchip_read_bytes: int
    offchip_written_bytes: int
    layers: int
    host_ops: int

    @property
    def offchip_bytes(self) -> int:
        return self.offchip_read_bytes + self.offchip_written_bytes


@dataclass(frozen=True)
class BoundChange:
    """A layer whose cost-model bound is not the same on every target."""

    model: str
    layer: str  # module path, else IR name
    ir_name: str
    op: str
    bounds: dict[str, str]  # target -> bound
    cycles: dict[str, int]  # target -> estimated cycles


@dataclass(frozen=True)
class TargetComparison:
    """Every model on every target, and the layers whose bound changes between targets."""

    models: tuple[str, ...]
    targets: tuple[TargetInfo, ...]
    results: tuple[TargetResult, ...]  # model-major, targets in the order given
    bound_changes: tuple[BoundChange, ...]

    def result(self, model: str, target: str) -> TargetResult:
        return next(r for r in self.results if r.model == model and r.target == target)

    def table(self) -> Table:
        """One row per (model, target); changes against the first target of each model."""
        info = {t.name: t for t in self.targets}
        rows = []
        for r in self.results:
            base = self.result(r.model, self.targets[0].name)
            t = info[r.target]
            vs = "" if r.target == base.target else \
                fmt_change(100 * (r.latency_ms - base.latency_ms) / base.latency_ms
                           if base.latency_ms else 0.0, 1)
            rows.append((r.model, r.target, f"{r.latency_ms:.3f}", vs, f"{r.energy_uj:.2f}",
                         f"{t.area_mm2:.3f} @ {t.process_node_nm} nm",
                         f"{100 * r.mac_utilisation:.1f}", f"{r.offchip_bytes / 1e6:.2f}",
                         fmt_int(r.cycles), str(_changed_layers(self, r))))
        return Table(("model", "target", "latency ms", f"vs {self.targets[0].name}",
                      "energy uJ", "area mm2 @ node", "MAC util %", "off-chip MB", "cycles",
                      "bound changes"), rows,
                     numeric=(False, False, True, True, True, True, True, True, True, True),
                     title=f"{plural(len(self.models), 'model')} on "
                           f"{plural(len(self.targets), 'target')} (analytical estimate)")

    def bound_table(self, limit: int | None = None) -> Table:
        """The layers whose bound changes, slowest (on the first target) first."""
        names = [t.name for t in self.targets]
        first = names[0]
        shown = sorted(self.bound_changes, key=lambda c: (-c.cycles.get(first, 0), c.model,
                                                          c.ir_name))[:limit]
        rows = [(c.model, c.layer, c.op,
                 *(f"{c.bounds[n]} {fmt_int(c.cycles[n])}" for n in names), c.ir_name)
                for c in shown]
        title = (f"{plural(len(self.bound_changes), 'layer')} whose bound changes between "
                 "targets (bound, estimated cycles)")
        if limit is not None and len(shown) < len(self.bound_changes):
            title += f"; the {len(shown)} slowest shown"
        return Table(("model", "layer", "op", *names, "IR name"), rows, title=title,
                     secondary=(3 + len(names),))

    def summary(self) -> str:
        lines = []
        for m in self.models:
            rs = [self.result(m, t.name) for t in self.targets]
            best = min(rs, key=lambda r: (r.latency_ms, r.target))
            frugal = min(rs, key=lambda r: (r.energy_uj, r.target))
            lines.append(f"{m}: fastest on {best.target} ({best.latency_ms:.3f} ms), least "
                         f"energy on {frugal.target} ({frugal.energy_uj:.2f} uJ)")
        return "\n".join(lines)

    def text(self, width: int | None = None, layers: int | None = 20) -> str:
        """The summary, the results table and the bound changes, at most ``width`` columns."""
        parts = [fit_text(self.summary(), width), "", self.table().text(width)]
        if self.bound_changes:
            parts += ["", self.bound_table(layers).text(width)]
        else:
            parts += ["", "no layer changes its bound between these targets"]
        return "\n".join(parts)

    def to_dict(self) -> dict:
        return {"models": list(self.models), "targets": [asdict(t) for t in self.targets],
                "results": [dict(asdict(r), offchip_bytes=r.offchip_bytes)
                            for r in self.results],
                "bound_changes": [asdict(c) for c in self.bound_changes]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    def __repr__(self) -> str:
        return short_repr("TargetComparison", [
            ("models", list(self.models)), ("targets", [t.name for t in self.targets]),
            ("bound_changes", len(self.bound_changes))])

    def _repr_html_(self) -> str:
        return summary_html("TargetComparison", self.summary().split("\n"),
                            [self.table(), self.bound_table(10)])


def _changed_layers(cmp: TargetComparison, r: TargetResult) -> int:
    first = cmp.targets[0].name
    return sum(1 for c in cmp.bound_changes if c.model == r.model
               and c.bounds.get(r.target) != c.bounds.get(first))


def compare_targets(graphs: Mapping[str, Graph], archs: Sequence[NpuArch]) -> TargetComparison:
    """Estimate every integer graph (model name -> graph) on every target; one search cache
    is shared, so a step whose timing does not depend on what differs is searched once."""
    if not graphs or not archs:
        raise ValueError("compare_targets needs at least one model and one target")
    with search.use(search.active() or search.SearchCache()):
        pairs = [(m, a) for m in graphs for a in archs]
        reports = {(m, a.name): estimate_graph(graphs[m], a, name=m)
                   for m, a in track(pairs, "compare: estimates")}
    results = tuple(_result(reports[m, a.name]) for m, a in pairs)
    changes = tuple(c for m in graphs for c in _bound_changes(m, [reports[m, a.name]
                                                                  for a in archs]))
    return TargetComparison(tuple(graphs), tuple(TargetInfo.of(a) for a in archs), results,
                            changes)


def _result(e: EstimateReport) -> TargetResult:
    return TargetResult(e.model, e.target, e.cycles, e.latency_ms, e.energy_uj,
                        e.mac_utilisation, sum(e.bytes_read.values()),
                        sum(e.bytes_written.values()), len(e.layers), len(e.host_ops))


def _bound_changes(model: str, reports: list[EstimateReport]) -> list[BoundChange]:
    """Layers (steps with the same IR name on every target) whose bound differs."""
    by_target = [{x.name: x for x in e.layers} for e in reports]
    out = []
    for x in reports[0].layers:
        same = [m.get(x.name) for m in by_target]
        if any(s is None or s.op != x.op for s in same):
            continue  # fused differently on some target: not one layer to compare
        bounds = {e.target: s.bound for e, s in zip(reports, same, strict=True) if s}
        if len(set(bounds.values())) > 1:
            out.append(BoundChange(model, x.label, x.name, x.op, bounds,
                                   {e.target: s.cycles for e, s in zip(reports, same,
                                                                       strict=True) if s}))
    return out


@dataclass(frozen=True)
class LayerDelta:
    """One layer in two binaries (matched by IR name; None: not in that binary)."""

    layer: str
    ir_name: str
    op: str
    cycles: tuple[int | None, int | None]
    mapping: tuple[str | None, str | None]
    offchip_bytes: tuple[int | None, int | None]

    @property
    def changed(self) -> bool:
        return (self.cycles[0] != self.cycles[1] or self.mapping[0] != self.mapping[1]
                or self.offchip_bytes[0] != self.offchip_bytes[1])


@dataclass(frozen=True)
class BinaryFigures:
    name: str  # what the user called it (the file)
    model: str
    target: str
    bytes: int  # size of the .tsl
    cycles: int
    latency_ms: float
    energy_uj: float
    mac_utilisation: float
    offchip_bytes: int
    layers: int


@dataclass(frozen=True)
class BinaryComparison:
    """Two binaries of one model: totals and the layers that changed."""

    a: BinaryFigures
    b: BinaryFigures
    layers: tuple[LayerDelta, ...]  # every layer of either binary, a's order then b's new ones

    @property
    def changed(self) -> tuple[LayerDelta, ...]:
        return tuple(x for x in self.layers if x.changed)

    def totals_table(self) -> Table:
        a, b = self.a, self.b
        rows = []
        for label, va, vb, fmt in (
                ("cycles", a.cycles, b.cycles, fmt_int),
                ("latency ms", a.latency_ms, b.latency_ms, lambda v: f"{v:.4f}"),
                ("energy uJ", a.energy_uj, b.energy_uj, lambda v: f"{v:.3f}"),
                ("MAC utilisation %", 100 * a.mac_utilisation, 100 * b.mac_utilisation,
                 lambda v: f"{v:.2f}"),
                ("off-chip bytes", a.offchip_bytes, b.offchip_bytes, fmt_int),
                ("binary bytes", a.bytes, b.bytes, fmt_int),
                ("layers", a.layers, b.layers, str)):
            rows.append((label, fmt(va), fmt(vb), fmt_change(100 * (vb - va) / va if va else 0.0)))
        return Table(("figure", a.name, b.name, "change"), rows,
                     numeric=(False, True, True, True),
                     title=f"{a.model} on {a.target} vs {b.model} on {b.target}")

    def layer_table(self, limit: int | None = None) -> Table:
        """The changed layers, largest cycle change first."""
        def delta(x: LayerDelta) -> int:
            return abs((x.cycles[1] or 0) - (x.cycles[0] or 0))
        shown = sorted(self.changed, key=lambda x: (-delta(x), x.ir_name))[:limit]
        rows = []
        for x in shown:
            ca, cb = x.cycles
            change = fmt_change(100 * (cb - ca) / ca) if ca and cb is not None else \
                ("new" if ca is None else "gone")
            rows.append((x.layer, x.op, _opt(ca), _opt(cb), change,
                         _opt(x.offchip_bytes[0]), _opt(x.offchip_bytes[1]),
                         x.mapping[0] or "-",
                         (x.mapping[1] or "-") if x.mapping[1] != x.mapping[0] else "(same)",
                         x.ir_name))
        title = (f"{plural(len(self.changed), 'layer')} changed of {len(self.layers)} "
                 "(bytes: off-chip, read + written)")
        if limit is not None and len(shown) < len(self.changed):
            title += f"; the {len(shown)} largest cycle changes shown"
        return Table(("layer", "op", "cycles a", "cycles b", "change", "bytes a", "bytes b",
                      "mapping a", "mapping b", "IR name"), rows,
                     numeric=(False, False, True, True, True, True, True, False, False, False),
                     title=title, secondary=(9,))

    def text(self, width: int | None = None, layers: int | None = 20) -> str:
        parts = [fit_text(f"a = {self.a.name}, b = {self.b.name}", width), "",
                 self.totals_table().text(width), ""]
        parts.append(self.layer_table(layers).text(width) if self.changed
                     else "no layer changed (cycles, mapping, off-chip bytes)")
        return "\n".join(parts)

    def to_dict(self) -> dict:
        return {"a": asdict(self.a), "b": asdict(self.b),
                "layers": [dict(asdict(x), changed=x.changed) for x in self.layers]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    def __repr__(self) -> str:
        return short_repr("BinaryComparison", [("a", repr(self.a.name)), ("b", repr(self.b.name)),
                                               ("changed_layers", len(self.changed))])

    def _repr_html_(self) -> str:
        return summary_html("BinaryComparison", [f"a = {self.a.name}, b = {self.b.name}"],
                            [self.totals_table(), self.layer_table(10)])


def _opt(v: int | None) -> str:
    return "-" if v is None else fmt_int(v)


def compare_binaries(a: CompiledModel, b: CompiledModel, name_a: str = "a",
                     name_b: str = "b") -> BinaryComparison:
    """The simulator's profiles of two binaries, side by side, layers matched by IR name."""
    fa, fb = _figures(a, name_a), _figures(b, name_b)
    la = {x.name: x for x in a.profile.layers}
    lb = {x.name: x for x in b.profile.layers}
    order = list(la) + [n for n in lb if n not in la]
    deltas = []
    for n in order:
        x, y = la.get(n), lb.get(n)
        some = x or y
        assert some is not None
        deltas.append(LayerDelta(some.label, n, some.op,
                                 (x and x.cycles, y and y.cycles),
                                 (x and x.mapping, y and y.mapping),
                                 (_offchip(x), _offchip(y))))
    return BinaryComparison(fa, fb, tuple(deltas))


def _offchip(x: LayerStats | None) -> int | None:
    return None if x is None else sum(x.bytes_read.values()) + sum(x.bytes_written.values())


def _figures(cm: CompiledModel, name: str) -> BinaryFigures:
    p = cm.profile
    return BinaryFigures(name, p.model, p.target, len(cm.binary), p.cycles, p.latency_ms,
                         p.energy_uj, p.mac_utilisation,
                         sum(p.bytes_read.values()) + sum(p.bytes_written.values()),
                         len(p.layers))
