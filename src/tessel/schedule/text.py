"""The Schedule as readable text (`tessel compile --dump-after schedule`, golden schedule
tests): a header line, then one line per step with its ops, mapping, where its inputs and
output live (off-chip memory and address, or the on-chip SRAM range of a resident tensor), its
estimated cycles and bound, and the off-chip bytes its instructions read and write."""

from __future__ import annotations

from tessel.schedule.events import step_events
from tessel.schedule.result import Schedule, ScheduledStep


def schedule_text(schedule: Schedule) -> str:
    arch = schedule.arch
    wname = arch.offchip[schedule.constants.memory].name
    lines = [f"// schedule of {schedule.graph.name} on {arch.name}: {len(schedule.steps)} "
             f"step(s) in {schedule.region_count} region(s), {schedule.cycles} cycles; "
             f"arena {schedule.arena_peak} bytes (naive {schedule.arena_naive}); constants "
             f"{len(schedule.constants.blob)} bytes in {wname}"]
    for k, step in enumerate(schedule.steps):
        lines.append(step_line(schedule, k, step))
    if schedule.spilled:
        for name, why in sorted(schedule.spilled.items()):
            lines.append(f"// kept in DRAM: %{name}: {why}")
    return "\n".join(lines) + "\n"


def step_line(schedule: Schedule, k: int, step: ScheduledStep) -> str:
    """`step K rR %name = ops [mapping] in(...) out(...) cycles C bound B read R written W`."""
    graph = schedule.graph
    inner = {n.name for n in step.nodes[:-1]}
    reads = []
    for n in step.nodes:
        for name in n.inputs:
            if name in inner or name in reads:
                continue
            if graph.constant_value(name) is not None and name not in schedule.tensors:
                continue  # weights / parameters: in the constant layout
            reads.append(name)
    ins = ", ".join(_where(schedule, step, name) for name in reads)
    out = _where(schedule, step, step.nodes[-1].name)
    ev = step_events(step.work, schedule.arch, step.tally)
    est = step.estimate
    return (f"step {k} r{step.region} %{step.name} = {step.op} [{step.mapping}] in({ins}) "
            f"out({out}) cycles {est.cycles} bound {est.bound.value} "
            f"read {sum(ev.offchip_read_bytes)} written {sum(ev.offchip_write_bytes)}")


def _where(schedule: Schedule, step: ScheduledStep, name: str) -> str:
    """`%x@lpddr+0x1000` (DRAM), `%x@sram[0x7000,0x8000)` (resident in this step)."""
    t = schedule.tensors[name]
    for r in step.residents:
        if r.mem == t.memory and r.lo == t.address and r.hi == t.address + t.nbytes:
            return f"%{name}@sram[{r.sram:#x},{r.sram + t.nbytes:#x})"
    return f"%{name}@{schedule.arch.offchip[t.memory].name}+{t.address:#x}"
