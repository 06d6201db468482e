"""The static token check: deadlock and unconsumed tokens between engine streams."""

from __future__ import annotations

import pytest

from tessel.binary.tokens import check_tokens
from tessel.errors import TesselFormatError


def op(instr: tuple) -> tuple[bool, str, int] | None:
    return None if instr[0] == "X" else (instr[0] == "S", instr[1], instr[2])


def run(streams: dict[str, list[tuple]]) -> None:
    check_tokens(streams, op, lambda engine: f"engine {engine}")


X, END = ("X",), ("X",)


def test_producer_consumer_ping_pong_passes() -> None:
    run({
        "A": [X, ("S", "B", 0), ("W", "B", 1), X, ("S", "B", 0), END],
        "B": [("W", "A", 0), X, ("S", "A", 1), ("W", "A", 0), END],
    })


def test_tokens_are_per_pair_and_id() -> None:
    with pytest.raises(TesselFormatError, match="engine B: deadlock: instruction 0 waits for "
                       "token 1 from A"):
        run({"A": [("S", "B", 0), END], "B": [("W", "A", 1), END]})


def test_cyclic_wait_is_a_deadlock() -> None:
    with pytest.raises(TesselFormatError, match="deadlock"):
        run({"A": [("W", "B", 0), ("S", "B", 0), END], "B": [("W", "A", 0), ("S", "A", 0), END]})


def test_wait_on_engine_without_stream_is_a_deadlock() -> None:
    with pytest.raises(TesselFormatError, match="engine A: deadlock.*from C"):
        run({"A": [("W", "C", 0), END]})


def test_unconsumed_signal_is_rejected() -> None:
    with pytest.raises(TesselFormatError, match="engine A: 2 SIGNAL\\(s\\) of token 3 to B are "
                       "never waited for"):
        run({"A": [("S", "B", 3), ("S", "B", 3), ("S", "B", 3), END], "B": [("W", "A", 3), END]})


def test_long_chain_is_linear() -> None:
    n = 20_000
    a = [x for _ in range(n) for x in (("S", "B", 0), ("W", "B", 0))] + [END]
    b = [x for _ in range(n) for x in (("W", "A", 0), ("S", "A", 0))] + [END]
    run({"A": a, "B": b})
