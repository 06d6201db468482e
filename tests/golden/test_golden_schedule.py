"""Golden schedule tests: each tests/golden/schedule/*.tir is an integer graph with a
`// RUN: schedule PRESET [on_chip_residency]` line and CHECK lines on the schedule's text
(`tessel compile --dump-after schedule`), which pin the mapping, fusion and placement decisions
the schedule stage makes for it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from filecheck import FileCheckError, filecheck, parse_directives
from tessel.arch import CompileOptions, load_preset
from tessel.driver import Dumps, Stage, compile_graph
from tessel.ir import parse_graph
from tessel.lower.legalize import legalize
from tessel.lower.partition import partition
from tessel.schedule.plan import plan
from tessel.schedule.result import Schedule
from tessel.schedule.text import schedule_text

CASES = sorted((Path(__file__).parent / "schedule").glob("*.tir"))
_RUN = re.compile(r"^//[ \t]*RUN:[ \t]*schedule[ \t]+(\S+)((?:[ \t]+\S+)*)[ \t]*$", re.MULTILINE)
FLAGS = {"on_chip_residency"}


def _run_line(text: str, source: str) -> tuple[str, CompileOptions]:
    found = _RUN.findall(text)
    assert len(found) == 1, f"{source}: expected one `// RUN: schedule PRESET [flags]` line"
    preset, flags = found[0][0], set(found[0][1].split())
    assert flags <= FLAGS, f"{source}: unknown flags {sorted(flags - FLAGS)}"
    return preset, CompileOptions(on_chip_residency="on_chip_residency" in flags)


def _schedule(path: Path) -> tuple[str, Schedule, CompileOptions]:
    text = path.read_text()
    preset, options = _run_line(text, str(path))
    graph = legalize(parse_graph(text, source=str(path)))
    part = partition(graph)
    sched = plan(graph, part.npu_nodes, part.npu_inputs, part.npu_outputs, load_preset(preset),
                 region_sizes=[len(r.nodes) for r in part.regions],
                 on_chip_residency=options.on_chip_residency)
    return text, sched, options


def test_cases_exist():
    assert len(CASES) >= 4


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_schedule_check_lines(path: Path) -> None:
    text, sched, _ = _schedule(path)
    assert parse_directives(text), f"{path}: no CHECK lines"
    filecheck(schedule_text(sched), text, source=str(path))


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_compile_emits_the_schedule_it_dumps(path: Path) -> None:
    """`compile_graph` prints the same schedule (--dump-after schedule), and the binary's
    layers are its steps: same names, mappings and estimates, in order."""
    text, sched, options = _schedule(path)
    out: list[str] = []
    cm = compile_graph(parse_graph(text), sched.arch, options=options,
                       dump=Dumps(frozenset({Stage.SCHEDULE}), out.append))
    assert out == [f"// ----- after schedule -----\n{schedule_text(sched)}"]
    assert [(x["name"], x["mapping"], x["estimated_cycles"])
            for x in cm.program.metadata["layers"]] == \
        [(s.name, str(s.mapping), s.estimate.cycles) for s in sched.steps]


BACKEND = [Stage.LEGALIZE, Stage.PARTITION, Stage.SCHEDULE, Stage.EMIT]


def test_every_backend_stage_dumps_in_pipeline_order() -> None:
    text = CASES[0].read_text()
    out: list[str] = []
    compile_graph(parse_graph(text), load_preset("tnpu-s"), dump=Dumps(frozenset(Stage), out.append))
    heads = [chunk.splitlines()[0] for chunk in out]
    assert heads == [f"// ----- after {s.value} -----" for s in BACKEND]
    assert ".engine DMA_IN" in out[-1] and "npu region 1:" in out[1]


def test_a_compile_dumps_every_stage_in_pipeline_order() -> None:
    """tessel.compile prints each stage's result in the order the stages run: the imported QDQ
    graph (float ops between quantize / dequantize), the integer graph in the model's layout,
    the same in NHWC, then the backend's stages."""
    import torch

    from tessel.driver import compile

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU()).eval()
    out: list[str] = []
    compile(model, (torch.randn(1, 3, 8, 8),), dump=Dumps(frozenset(Stage), out.append))
    heads = [chunk.splitlines()[0] for chunk in out]
    assert heads == [f"// ----- after {s.value} -----" for s in Stage]
    imported, lowered, nhwc = out[:3]
    assert "dequantize" in imported and "conv2d" in imported and "qconv2d" not in imported
    assert "qconv2d" in lowered and "layout = nchw" in lowered
    assert "layout = nhwc" in nhwc


def test_a_changed_mapping_fails_the_check() -> None:
    _, sched, _ = _schedule(CASES[0])
    with pytest.raises(FileCheckError):
        filecheck(schedule_text(sched), "// CHECK: [fused stripes rows=99 ch_chunk=16]",
                  source="<test>")


def test_compile_command_dumps_the_schedule(tmp_path, capsys) -> None:
    """`tessel compile M --dump-after schedule` prints one line per step of the binary."""
    from tessel.cli import main
    from tessel.runtime.compiled import load

    out = tmp_path / "d.tsl"
    assert main(["-q", "compile", "digits_cnn", "-o", str(out), "--calibration", "2",
                 "--dump-after", "schedule"]) == 0
    text = capsys.readouterr().out
    steps = [line for line in text.splitlines() if line.startswith("step ")]
    layers = load(out).program.metadata["layers"]
    assert "// ----- after schedule -----" in text
    assert len(steps) == len(layers) and all(
        f"%{x['name']} = {x['op']} [{x['mapping']}]" in s for s, x in zip(steps, layers, strict=True))


def test_compile_command_refuses_an_unknown_stage(tmp_path, capsys) -> None:
    from tessel.cli import main

    assert main(["compile", "digits_cnn", "-o", str(tmp_path / "d.tsl"),
                 "--dump-after", "scheduel"]) == 1
    assert "the compile's stages are import, lower_qdq, quantize, legalize, partition, schedule, emit" in \
        capsys.readouterr().err
