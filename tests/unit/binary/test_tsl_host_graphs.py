"""The optional HOST_GRAPHS section: IR text of the host parts round-trips and is validated."""

from __future__ import annotations

import dataclasses

import pytest
from tsl_samples import codec_and_programs

from tessel.binary import read_tsl, write_tsl
from tessel.errors import TesselFormatError

TEXT = "graph @h(%x: tensor<2xf32>) {\n  %y = relu(%x) : tensor<2xf32>\n  return %y\n}\n"


def _with_model_input_x(program):
    """The program with a model input %x next to its NPU inputs (the host graphs read %x)."""
    names = ["x", *(d.name for d in program.inputs)]
    return dataclasses.replace(program, metadata={**program.metadata, "model_inputs": names})


def test_host_graphs_roundtrip_and_absent_section_stays_absent():
    codec, programs = codec_and_programs()
    plain = write_tsl(programs[0], codec=codec)
    assert read_tsl(plain, codec=codec).host_graphs == {}
    with_host = dataclasses.replace(_with_model_input_x(programs[0]),
                                    host_graphs={"prologue": TEXT, "epilogue": TEXT})
    data = write_tsl(with_host, codec=codec)
    assert len(data) > len(plain)
    assert read_tsl(data, codec=codec) == with_host


@pytest.mark.parametrize("graphs, what", [
    ({"prologue": TEXT.replace("relu", "rulu")}, "unknown op 'rulu'"),
    ({"prologue": TEXT.replace("return %y", "return %z")}, "not defined"),
])
def test_invalid_host_ir_is_a_format_error(graphs, what):
    codec, programs = codec_and_programs()
    data = write_tsl(dataclasses.replace(programs[0], host_graphs=graphs), codec=codec)
    with pytest.raises(TesselFormatError, match="HOST_GRAPHS") as err:
        read_tsl(data, codec=codec)
    assert what in str(err.value)


def test_unknown_host_graph_key_is_refused():
    codec, programs = codec_and_programs()
    with pytest.raises(TesselFormatError, match="unknown keys"):
        dataclasses.replace(programs[0], host_graphs={"middle": TEXT})


def test_the_reader_parses_host_graphs_once_and_the_runtime_uses_them():
    """The reader parses each host graph to check it and hands the graphs on: the runtime uses
    them (no second parse of what may be tens of MB of base64) while the program holds their
    text, and parses again after a `replace` changed the text."""
    from tessel.ir import parse_graph, print_graph
    from tessel.runtime.compiled import CompiledModel

    codec, programs = codec_and_programs()
    with_host = dataclasses.replace(_with_model_input_x(programs[0]),
                                    host_graphs={"prologue": TEXT, "epilogue": TEXT})
    read = read_tsl(write_tsl(with_host, codec=codec), codec=codec)
    assert set(read.parsed_host) == {"prologue", "epilogue"}
    text, graph = read.parsed_host["prologue"]
    assert text == TEXT and print_graph(graph) == print_graph(parse_graph(TEXT))
    cm = CompiledModel(read, None)  # host_parts needs no arch
    assert cm._host_graph("prologue") is graph
    other = TEXT.replace("relu", "sigmoid")
    changed = CompiledModel(dataclasses.replace(read, host_graphs={"prologue": other}), None)
    assert print_graph(changed._host_graph("prologue")) == print_graph(parse_graph(other))
    assert read == with_host  # the parsed graphs are not part of the program's value
