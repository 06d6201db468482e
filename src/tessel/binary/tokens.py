"""Static check of the dependency tokens between engine streams: the program cannot deadlock
and leaves no token behind.

Each (producer, consumer, token id) is a counting semaphore with one consumer: SIGNAL adds one,
WAIT takes one or blocks. Because only the consumer engine takes from a semaphore, running every
engine as far as it can, repeatedly, reaches the end of all streams exactly when some schedule
of the real hardware does; so this abstract run decides deadlock-freedom in one linear pass."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tessel.errors import TesselFormatError

# instruction -> (is_signal, peer engine, token id) for SIGNAL / WAIT, else None
TokenOp = Callable[[Any], "tuple[bool, Any, int] | None"]


def check_tokens(streams: Mapping[Any, Sequence[Any]], token_op: TokenOp,
                 where: Callable[[Any], str]) -> None:
    """Raise TesselFormatError if the streams deadlock or leave signalled tokens unconsumed.
    `where(engine)` names the engine's section for the message."""
    ops = {engine: [token_op(i) for i in instrs] for engine, instrs in streams.items()}
    pc = dict.fromkeys(ops, 0)
    sem: Counter[tuple[Any, Any, int]] = Counter()
    progress = True
    while progress:
        progress = False
        for engine, stream in ops.items():
            start = pc[engine]
            pc[engine] = _advance(engine, stream, start, sem)
            progress |= pc[engine] != start
    for engine, stream in ops.items():
        if pc[engine] < len(stream):
            _, peer, token = stream[pc[engine]]
            raise TesselFormatError(
                f"{where(engine)}: deadlock: instruction {pc[engine]} waits for token {token} "
                f"from {getattr(peer, 'name', peer)} that is never signalled (after all other "
                "engines ran as far as they can)"
            )
    for (producer, consumer, token), n in sorted(sem.items(), key=str):
        if n:
            raise TesselFormatError(
                f"{where(producer)}: {n} SIGNAL(s) of token {token} to "
                f"{getattr(consumer, 'name', consumer)} are never waited for"
            )


def _advance(engine: Any, stream: list, pc: int, sem: Counter) -> int:
    """Run `engine` from `pc` until it blocks on a WAIT or reaches the end; return the new pc."""
    while pc < len(stream):
        op = stream[pc]
        if op is not None:
            is_signal, peer, token = op
            if is_signal:
                sem[(engine, peer, token)] += 1
            elif sem[(peer, engine, token)]:
                sem[(peer, engine, token)] -= 1
            else:
                return pc
        pc += 1
    return pc
