"""Co-design advice (`tessel advise`): which hardware limit binds, per layer and for the whole
model, and what relaxing each NpuArch parameter by 2x would buy, with its area cost.

Every figure is measured, not guessed: each relaxation builds a new, validated NpuArch
(``NpuArch.with_params``, the dotted parameter names `tessel explore` uses too) and re-runs
``estimate_graph`` on it, i.e. the backend's mapping and
fusion search with the compiler in the loop, so a bigger SRAM that enables bigger tiles or a
different fusion shows up as such. ``confirm`` recompiles the model for a relaxed arch and
reads the simulator's timing model, to check a prediction.

    advice = advise(int_graph, load_target("tnpu-s"), name="mobilenet_v2")
    print(advice.table()); advice.ranked[0].latency_gain_pct
    check = confirm(int_graph, arch, advice)        # recompile + simulate the top item
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from tessel.analysis.estimate import EstimateReport, estimate_graph
from tessel.arch import NpuArch
from tessel.arch.decl import AdviseKnob, Limit, Memories, Param, Relax
from tessel.arch.params import knob_params, param_info
from tessel.display import (
    TERMINAL_WIDTH,
    Table,
    fit_text,
    fmt_change,
    fmt_int,
    plural,
    short_repr,
    summary_html,
)
from tessel.errors import TesselError
from tessel.ir import Graph
from tessel.progress import track
from tessel.schedule import search

MIN_GAIN_PCT = 1.0  # a relaxation "binds" a layer only if it saves at least this much


class Knob(enum.Enum):
    """An NpuArch parameter that advice relaxes by 2x: one member per parameter declared with
    an advise knob (tessel.arch.decl.AdviseKnob), named after its dotted name (MATRIX_ROWS)."""

    _ignore_ = ["_p"]
    for _p in knob_params():
        vars()[_p.key.upper().replace(".", "_")] = _p.key

    @property
    def param(self) -> Param:
        """The parameter's declaration (tessel.arch.decl.Param)."""
        return param_info(self.value)

    @property
    def knob(self) -> AdviseKnob:
        knob = self.param.knob
        assert knob is not None
        return knob

    @property
    def limit(self) -> Limit:
        """The hardware limit this parameter relaxes."""
        return self.knob.limit

    @property
    def in_area_model(self) -> bool:
        """Whether NpuArch's area model has a term for this parameter."""
        return self.param.area_term


# The estimate's per-step bound (tessel.schedule.estimate.Bound values) -> the limit it names.
_BOUND_LIMIT = {"compute": Limit.MAC_ARRAY, "vector": Limit.VECTOR_LANES,
                "dram": Limit.DRAM_BANDWIDTH, "latency": Limit.DMA_LATENCY}


@dataclass(frozen=True)
class Relaxation:
    """One 2x change of the hardware; ``memory`` names the off-chip memory a per-memory knob
    changes (None: every memory, or not a per-memory knob)."""

    knob: Knob
    memory: str | None = None

    def label(self, arch: NpuArch) -> str:
        p, how = self.knob.param, self.knob.knob.relax.value
        if not p.per_memory:
            return f"{p.key} {how}"
        if self.memory is None:
            return f"offchip.*.{p.field} {how} ({self.knob.limit.value})"
        roles = [r for r, m in (("weights", arch.weights_memory),
                                ("activations", arch.activations_memory)) if m == self.memory]
        return f"offchip.{self.memory}.{p.field} {how} ({'+'.join(roles)})"

    def values(self, arch: NpuArch) -> dict[str, int]:
        """The relaxed parameters by their dotted names (``NpuArch.with_params``)."""
        p = self.knob.param
        if not p.per_memory:
            names = [p.key]
        else:
            mems = [self.memory] if self.memory is not None else [m.name for m in arch.offchip]
            names = [f"offchip.{m}.{p.field}" for m in mems]
        double = self.knob.knob.relax is Relax.DOUBLE
        return {n: 2 * arch.param(n) if double else arch.param(n) // 2 for n in names}


def relaxations(arch: NpuArch) -> tuple[Relaxation, ...]:
    """The relaxations advice tries on ``arch``: one per knob, in declaration order; a
    per-memory knob (Memories.EACH_BUS) once per off-chip memory that holds weights or
    activations (once if they share a memory)."""
    bus = tuple(dict.fromkeys((arch.weights_memory, arch.activations_memory)))
    out: list[Relaxation] = []
    for k in Knob:
        each = k.param.per_memory and k.knob.memories is Memories.EACH_BUS
        out += [Relaxation(k, m) for m in bus] if each else [Relaxation(k)]
    return tuple(out)


def relax(arch: NpuArch, change: Relaxation) -> NpuArch:
    """``arch`` with one parameter relaxed by 2x (re-validated: raises TesselConfigError
    when the relaxed value is outside the ISA's limits, e.g. 1024 matrix rows)."""
    k = change.knob
    how = "x2" if k.knob.relax is Relax.DOUBLE else "half"
    name = f"{arch.name}.{k.value.replace('_', '-')}-{how}"
    if change.memory is not None:
        name = f"{name}.{change.memory}"
    values = change.values(arch)
    if all(arch.param(n) == v for n, v in values.items()):
        raise TesselError(f"{change.label(arch)} changes nothing: "
                          + ", ".join(f"{n} is {v}" for n, v in values.items()))
    return arch.with_params(values, name=name)


@dataclass(frozen=True)
class Gain:
    """What one relaxation buys (whole model) and costs; gains are % of the baseline."""

    change: str
    knob: Knob
    memory: str | None
    limit: Limit
    target: str
    cycles: int
    latency_gain_pct: float
    energy_uj: float
    energy_gain_pct: float
    area_mm2_delta: float
    area_pct: float
    area_modelled: bool  # False: the area model has no term for this parameter (cost 0 here)
    offchip_bytes_delta: int  # relaxed - baseline off-chip traffic (read + written)
    layer_cycles: dict[str, int]  # relaxed cycles of the layers present in both estimates

    @property
    def relaxation(self) -> Relaxation:
        return Relaxation(self.knob, self.memory)


@dataclass(frozen=True)
class LayerAdvice:
    """One layer (fused unit): its cost-model bound, the limit that binds it by sensitivity,
    and the % of its cycles each relaxation saves (None: the layer is fused differently)."""

    name: str  # IR name (the key of ``Gain.layer_cycles``)
    op: str
    cycles: int
    bound: str
    binding: Limit
    binding_change: str | None  # the relaxation that saves most, if it saves >= MIN_GAIN_PCT
    gains_pct: dict[str, float | None]
    layer: str = ""  # what users call it: its module path, else its IR name


@dataclass(frozen=True)
class Skipped:
    change: str
    reason: str


@dataclass(frozen=True)
class Advice:
    """Co-design advice for one model on one arch; ``ranked`` is sorted by latency gain."""

    model: str
    target: str
    cycles: int
    latency_ms: float
    energy_uj: float
    area_mm2: float
    binding: Limit
    binding_change: str | None
    bound_share_pct: dict[str, float]  # % of the model's cycles per cost-model bound
    sram_refetch_bytes: int  # off-chip traffic a 2x SRAM removes (re-fetches, spills)
    ranked: tuple[Gain, ...]
    layers: tuple[LayerAdvice, ...]
    skipped: tuple[Skipped, ...]

    def to_dict(self) -> dict:
        return json_plain(asdict(self))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    def summary(self) -> str:
        top = self.ranked[0] if self.ranked else None
        best = (f"; best 2x change: {top.change} ({fmt_change(-top.latency_gain_pct, 1)} "
                f"latency, {top.area_mm2_delta:+.4f} mm2)" if top else "")
        return (f"advice for {self.model} on {self.target}: {self.cycles:,} cycles = "
                f"{self.latency_ms:.3f} ms, {self.energy_uj:.2f} uJ, {self.area_mm2:.4f} mm2; "
                f"bound by {self.binding.value}{best}")

    def ranked_table(self) -> Table:
        """The 2x relaxations, best first; changes are signed (negative: less than now)."""
        return ranked_table(self)

    def layer_table(self, max_layers: int = 15) -> Table:
        """The slowest layers, their bound and the change that helps each most."""
        return layer_table(self, max_layers)

    def table(self, max_layers: int = 15, width: int | None = TERMINAL_WIDTH) -> str:
        """Text: the ranked relaxations, then the slowest layers and what binds them, at most
        ``width`` columns (None: no limit)."""
        return "\n".join([fit_text(self.summary(), width), "", self.ranked_table().text(width),
                          *_notes(self), "", self.layer_table(max_layers).text(width),
                          *(fit_text(x, width) for x in _skipped_rows(self))])

    def __repr__(self) -> str:
        top = self.ranked[0] if self.ranked else None
        return short_repr("Advice", [
            ("model", repr(self.model)), ("target", repr(self.target)),
            ("cycles", fmt_int(self.cycles)), ("binding", self.binding.value),
            ("best", repr(top.change) if top else None),
            ("latency_change", fmt_change(-top.latency_gain_pct) if top else None),
            ("relaxations", len(self.ranked)), ("layers", len(self.layers))])

    def _repr_html_(self) -> str:
        return summary_html(f"Advice for {self.model} on {self.target}",
                            [self.summary(), *_notes(self)],
                            [self.ranked_table(), self.layer_table(TOP_LAYERS)])

    def _repr_markdown_(self) -> str:
        return "\n\n".join([self.summary(), self.ranked_table().markdown(),
                             self.layer_table(TOP_LAYERS).markdown()])


TOP_LAYERS = 10  # layers shown by the notebook views


def ranked_table(a: Advice) -> Table:
    rows = [(str(i + 1), g.change, g.limit.value, fmt_change(-g.latency_gain_pct),
             fmt_int(g.cycles), fmt_change(-g.energy_gain_pct), f"{g.area_mm2_delta:+.4f}",
             fmt_change(g.area_pct, 1) if g.area_modelled else "n/m")
            for i, g in enumerate(a.ranked)]
    return Table(("rank", "change", "limit", "latency", "cycles", "energy", "area mm2", "area"),
                 rows, numeric=(True, False, False, True, True, True, True, True),
                 title="2x relaxations (changes vs now; negative = less)")


def layer_table(a: Advice, n: int) -> Table:
    shown = _slowest(a, n)
    rows = []
    for x in shown:
        best = (f"{x.binding_change} ({fmt_change(-(x.gains_pct[x.binding_change] or 0.0), 1)})"
                if x.binding_change else "-")
        rows.append((x.layer or x.name, x.op, fmt_int(x.cycles),
                     f"{_pct(x.cycles, a.cycles):.1f}", x.bound, x.binding.value, best, x.name))
    return Table(("layer", "op", "cycles", "share %", "bound", "binding",
                  "best change (its cycles)", "IR name"), rows,
                 numeric=(False, False, True, True, False, False, False, False),
                 title=f"{len(shown)} slowest of {plural(len(a.layers), 'layer')}",
                 secondary=(7,))


def advise(graph: Graph, arch: NpuArch, *, name: str | None = None) -> Advice:
    """Estimate ``graph`` on ``arch`` and on each 2x relaxation of it; rank the relaxations.
    The estimates share one search cache (tessel.schedule.search: exact), so a step
    whose cost a relaxation does not touch is searched once."""
    if search.active() is None:
        with search.use(search.SearchCache()):
            return advise(graph, arch, name=name)
    base = estimate_graph(graph, arch, name=name)
    gains, skipped = [], []
    for change in track(relaxations(arch), "advise: 2x relaxations"):
        label = change.label(arch)
        try:
            relaxed = relax(arch, change)
            gains.append(_gain(base, arch, change, label, relaxed,
                               estimate_graph(graph, relaxed, name=name)))
        except TesselError as exc:
            skipped.append(Skipped(label, str(exc)))
    order = {c.label(arch): i for i, c in enumerate(relaxations(arch))}
    ranked = tuple(sorted(gains, key=lambda g: (-g.latency_gain_pct, -g.energy_gain_pct,
                                                g.area_mm2_delta, order[g.change])))
    return _assemble(base, arch, ranked, tuple(skipped))


def _gain(base: EstimateReport, arch: NpuArch, change: Relaxation, label: str,
          relaxed_arch: NpuArch, est: EstimateReport) -> Gain:
    area0, area1 = arch.derived.area_mm2, relaxed_arch.derived.area_mm2
    e0, e1 = base.energy_uj, est.energy_uj
    by_name = {x.name: x.cycles for x in est.layers}
    return Gain(label, change.knob, change.memory, change.knob.limit, relaxed_arch.name,
                est.cycles, _pct(base.cycles - est.cycles, base.cycles), e1,
                _pct(e0 - e1, e0), area1 - area0, _pct(area1 - area0, area0),
                change.knob.in_area_model,
                _traffic(est) - _traffic(base),
                {x.name: by_name[x.name] for x in base.layers if x.name in by_name})


def _assemble(base: EstimateReport, arch: NpuArch, ranked: tuple[Gain, ...],
              skipped: tuple[Skipped, ...]) -> Advice:
    layers = tuple(_layer(x, ranked) for x in base.layers)
    share: dict[str, float] = {}
    for x in base.layers:
        share[x.bound] = share.get(x.bound, 0.0) + _pct(x.cycles, base.cycles)
    top = ranked[0] if ranked and ranked[0].latency_gain_pct >= MIN_GAIN_PCT else None
    if top is not None:
        binding, change = top.limit, top.change
    else:  # nothing relaxable helps by 1 %: name the cost model's dominant bound
        dominant = max(share, key=lambda b: (share[b], b)) if share else "compute"
        binding, change = _BOUND_LIMIT[dominant], None
    sram = [g for g in ranked if g.limit is Limit.SRAM_CAPACITY]
    refetch = max(0, -sram[0].offchip_bytes_delta) if sram else 0
    return Advice(base.model, arch.name, base.cycles, base.latency_ms, base.energy_uj,
                  arch.derived.area_mm2, binding, change,
                  {k: round(v, 3) for k, v in sorted(share.items())}, refetch, ranked,
                  layers, skipped)


def _layer(layer, ranked: tuple[Gain, ...]) -> LayerAdvice:
    gains: dict[str, float | None] = {}
    for g in ranked:
        c = g.layer_cycles.get(layer.name)
        gains[g.change] = None if c is None else round(_pct(layer.cycles - c, layer.cycles), 3)
    known = [(v, -i, k) for i, (k, v) in enumerate(gains.items()) if v is not None]
    best = max(known) if known else None
    if best is not None and best[0] >= MIN_GAIN_PCT:
        limit = next(g.limit for g in ranked if g.change == best[2])
        return LayerAdvice(layer.name, layer.op, layer.cycles, layer.bound, limit, best[2], gains,
                           layer.label)
    return LayerAdvice(layer.name, layer.op, layer.cycles, layer.bound,
                       _BOUND_LIMIT.get(layer.bound, Limit.MAC_ARRAY), None, gains, layer.label)


@dataclass(frozen=True)
class Confirmation:
    """A relaxation's predicted cycles against the recompiled binary's simulated cycles."""

    change: str
    predicted_cycles: int
    simulated_cycles: int
    error_pct: float  # (predicted - simulated) / simulated
    base_simulated_cycles: int | None
    simulated_gain_pct: float | None

    def within(self, tolerance_pct: float) -> bool:
        return abs(self.error_pct) <= tolerance_pct


def confirm(graph: Graph, arch: NpuArch, advice: Advice, rank: int = 0, *,
            with_base: bool = True) -> Confirmation:
    """Recompile ``graph`` for the ``rank``-th relaxation and simulate its timing."""
    from tessel.driver import compile_graph

    if not 0 <= rank < len(advice.ranked):
        raise TesselError(f"rank {rank} is out of range: advice has {len(advice.ranked)} items")
    gain = advice.ranked[rank]
    sim = compile_graph(graph, relax(arch, gain.relaxation)).profile.cycles
    base = compile_graph(graph, arch).profile.cycles if with_base else None
    return Confirmation(gain.change, gain.cycles, sim, _pct(gain.cycles - sim, sim), base,
                        None if base is None else _pct(base - sim, base))


def _notes(a: Advice) -> list[str]:
    if any(not g.area_modelled for g in a.ranked):
        return ["(n/m: not in the NPU area model: off-chip interface, DMA)"]
    return []


def _slowest(a: Advice, n: int) -> list[LayerAdvice]:
    return sorted(a.layers, key=lambda x: (-x.cycles, x.name))[:n]


def _skipped_rows(a: Advice) -> Iterator[str]:
    for s in a.skipped:
        yield f"skipped {s.change}: {s.reason}"


def _traffic(e: EstimateReport) -> int:
    return sum(e.bytes_read.values()) + sum(e.bytes_written.values())


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else 0.0


def json_plain(value: Any) -> Any:
    """``value`` (an asdict() of a report) with enums as their values, tuples as lists."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: json_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_plain(v) for v in value]
    return value
