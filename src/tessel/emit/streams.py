"""Instruction queues of the four engines and the token protocol between them.

A *ring* is a set of `depth` buffers that one engine fills and another drains, as in VTA's
decoupled access/execute: the producer `acquire`s a slot (waiting for a "free" token once all
slots are in use), fills it and `publish`es it ("ready" token); the consumer `consume`s it
(waits for "ready") and `release`s it ("free" token). `Streams.end_step` drains every ring,
so that at a step boundary no token is outstanding and every buffer of the step is idle:
the next step may then reuse any SRAM and accumulator address.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tessel.isa import NUM_TOKENS, Engine, Instruction, Opcode

STEP_DONE_TOKEN = NUM_TOKENS - 1  # DMA_OUT -> DMA_IN: the previous step's stores are done


# every SIGNAL / WAIT a program can hold, built once (instructions are immutable values: the
# queues share them; half of a program's instructions are tokens)
_SIGNALS = {(e, t): Instruction.make(Opcode.SIGNAL, engine=e, token=t)
            for e in Engine for t in range(NUM_TOKENS)}
_WAITS = {(e, t): Instruction.make(Opcode.WAIT, engine=e, token=t)
          for e in Engine for t in range(NUM_TOKENS)}


def _signal(peer: Engine, token: int) -> Instruction:
    return _SIGNALS[peer, token]


def _wait(peer: Engine, token: int) -> Instruction:
    return _WAITS[peer, token]


@dataclass
class Ring:
    """`depth` buffers passed from `producer` to `consumer` (see module docstring)."""

    streams: Streams
    producer: Engine
    consumer: Engine
    depth: int
    token: int
    acquired: int = 0
    consumed: int = 0

    def __post_init__(self) -> None:
        # the ring's four token instructions and the two queues they go to, looked up once
        # (a ring emits four tokens per slot it passes)
        self._pq = self.streams.queues[self.producer]
        self._cq = self.streams.queues[self.consumer]
        self._to_consumer = _signal(self.consumer, self.token)  # producer: "ready"
        self._from_consumer = _wait(self.consumer, self.token)  # producer: wait for "free"
        self._from_producer = _wait(self.producer, self.token)  # consumer: wait for "ready"
        self._to_producer = _signal(self.producer, self.token)  # consumer: "free"

    @property
    def slot(self) -> int:
        """The slot the producer fills next (valid after acquire)."""
        return (self.acquired - 1) % self.depth

    def slot_after_acquire(self) -> int:
        """The slot the next `acquire` will return (to address a tile before acquiring)."""
        return self.acquired % self.depth

    def acquire(self) -> int:
        if self.acquired >= self.depth:
            self._pq.append(self._from_consumer)
        self.acquired += 1
        return (self.acquired - 1) % self.depth

    def publish(self) -> None:
        self._pq.append(self._to_consumer)

    def consume(self) -> int:
        self._cq.append(self._from_producer)
        self.consumed += 1
        return (self.consumed - 1) % self.depth

    def release(self) -> None:
        self._cq.append(self._to_producer)

    def drain(self) -> None:
        """Producer side: take back the free tokens of the last `depth` slots."""
        assert self.consumed == self.acquired, "every slot must be consumed before draining"
        self._pq.extend([self._from_consumer] * min(self.depth, self.acquired))


@dataclass
class Streams:
    """The four instruction queues being built, plus the rings of the current step."""

    queues: dict[Engine, list[Instruction]] = field(
        default_factory=lambda: {e: [] for e in Engine})
    _rings: list[Ring] = field(default_factory=list)
    _steps: int = 0

    def emit(self, engine: Engine, *instrs: Instruction) -> None:
        self.queues[engine].extend(instrs)

    def ring(self, producer: Engine, consumer: Engine, depth: int) -> Ring:
        """A new ring for this step; token ids are unique per (producer, consumer) pair."""
        used = sum(1 for r in self._rings
                   if frozenset((r.producer, r.consumer)) == frozenset((producer, consumer)))
        if used >= STEP_DONE_TOKEN:
            raise ValueError(f"too many rings between {producer.name} and {consumer.name}")
        r = Ring(self, producer, consumer, max(1, depth), used)
        self._rings.append(r)
        return r

    def begin_step(self) -> None:
        """Order this step after the previous one: DMA_IN waits until its stores are done."""
        if self._steps:
            self.emit(Engine.DMA_IN, _wait(Engine.DMA_OUT, STEP_DONE_TOKEN))

    def end_step(self, prefetched: bool = False) -> None:
        """Drain every ring of the step and tell DMA_IN that all stores have landed.

        prefetched: DMA_IN issued the next step's first group loads in this step
        (schedule/prefetch.py); DMA_OUT then also waits for DMA_IN's STEP_DONE_TOKEN, which
        DMA_IN signals once those loads have landed (a DMA SIGNAL waits for its transfers),
        so the next step still starts with no transfer of this step in flight."""
        for r in self._rings:
            r.drain()
        self._rings.clear()
        # the other engines must also be idle before the next step reuses their buffers
        engines = (Engine.MATRIX, Engine.VECTOR) + ((Engine.DMA_IN,) if prefetched else ())
        for engine in engines:
            self.emit(engine, _signal(Engine.DMA_OUT, STEP_DONE_TOKEN))
            self.emit(Engine.DMA_OUT, _wait(engine, STEP_DONE_TOKEN))
        self.emit(Engine.DMA_OUT, _signal(Engine.DMA_IN, STEP_DONE_TOKEN))
        self._steps += 1

    def finish(self) -> dict[Engine, tuple[Instruction, ...]]:
        """The queues with END appended; the last step's completion token is taken."""
        if self._steps:
            self.emit(Engine.DMA_IN, _wait(Engine.DMA_OUT, STEP_DONE_TOKEN))
        end = Instruction.make(Opcode.END)
        return {e: tuple(q) + (end,) for e, q in self.queues.items()}
