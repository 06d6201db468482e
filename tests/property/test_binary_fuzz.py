"""Fuzz the .tsl reader: >= 10,000 deterministic mutations of valid files (bit flips, byte
overwrites, truncation at every kind of boundary, huge counts/sizes/offsets in every field,
overlapping, duplicated and swapped sections, spliced and replaced contents), most with their
checksums recomputed so they reach the deep checks. Each case must either parse to a program that
re-serialises to an equal program, or raise TesselFormatError: never another exception, never a
hang, never an allocation far beyond the file's size."""

from __future__ import annotations

import random
import re
import signal
import struct
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "binary"))

from tsl_samples import codec_and_programs, entry_offset, fix_checksums  # noqa: E402

from tessel.binary import read_tsl, write_tsl  # noqa: E402
from tessel.errors import TesselFormatError  # noqa: E402

CASES = 12_000
SEED = 0x7E55E1
CASE_TIMEOUT_S = 2.0
ALLOC_SAMPLE = 400  # cases measured with tracemalloc (slow), spread over the run
ALLOC_PER_BYTE, ALLOC_SLACK = 32, 256 * 1024  # allowed peak: 32 x file size + 256 KiB

HEADER_FIELDS = [(4, "H"), (6, "H"), (8, "I"), (12, "I"), (16, "Q"), (24, "I"), (28, "I"),
                 (64, "I"), (68, "I"), (72, "I")]
ENTRY_FIELDS = [(0, "H"), (2, "H"), (4, "I"), (8, "Q"), (16, "Q"), (24, "I")]
DESC_FIELDS = [(0, "B"), (1, "B"), (2, "B"), (3, "B"), (4, "b"), (5, "B"), (6, "H"), (8, "I"),
               (12, "I"), (16, "Q"), (24, "Q"), *[(32 + 4 * k, "I") for k in range(8)],
               (64, "I"), (68, "I"), (72, "I"), (76, "I")]
CONST_FIELDS = [(0, "I"), (4, "I"), (8, "Q")]

Mutator = Callable[[random.Random, bytes], bytes]


def _sections(data: bytes) -> list[tuple[int, int, int, int]]:
    """(index, kind, offset, size) of each table entry of a well-formed file."""
    count = struct.unpack_from("<I", data, 28)[0]
    out = []
    for i in range(count):
        kind, _, _, offset, size = struct.unpack_from("<HHIQQ", data, entry_offset(i))
        out.append((i, kind, offset, size))
    return out


def _set_file_size(data: bytes) -> bytes:
    if len(data) < 80:
        return data
    return fix_checksums(data[:16] + struct.pack("<Q", len(data)) + data[24:])


def _extreme(rng: random.Random, fmt: str, data: bytes) -> int:
    if fmt == "b":
        return rng.choice([-128, -2, -1, 0, 1, 7, 8, 9, 127])
    bits = struct.calcsize(fmt) * 8
    top = 2**bits - 1
    return rng.choice([0, 1, 2, 3, 7, 8, 9, 16, 64, 80, 2 ** (bits - 1), top, top - 1,
                       rng.randrange(top + 1), min(len(data), top), min(len(data) + 1, top),
                       min(len(data) * 7, top)])


def flip_bits(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def overwrite_bytes(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def boundaries(data: bytes) -> list[int]:
    """Every structural boundary of a well-formed file (and its neighbours)."""
    points = {0, 1, 4, 8, 16, 24, 28, 32, 64, 76, 79, 80, len(data) - 1}
    for i, kind, offset, size in _sections(data):
        points |= {entry_offset(i) + f for f, _ in ENTRY_FIELDS} | {entry_offset(i + 1)}
        points |= {offset - 1, offset, offset + 1, offset + size - 1, offset + 16}
        if kind == 0x11:
            points |= {offset + 80 * k + f for k in range(4) for f, _ in DESC_FIELDS}
    return sorted(p for p in points if 0 <= p < len(data))


def truncate(rng: random.Random, data: bytes) -> bytes:
    cut = data[: rng.choice(boundaries(data))]
    return _set_file_size(cut) if rng.random() < 0.6 else cut


def huge_field(rng: random.Random, data: bytes) -> bytes:
    sections = _sections(data)
    where = rng.choice(["header", "entry", "entry", "desc", "desc", "const"])
    io = [s for s in sections if s[1] == 0x11 and s[3] >= 80]
    const = [s for s in sections if s[1] == 0x10]
    if where == "desc" and io:
        _, _, offset, size = io[0]
        field, fmt = rng.choice(DESC_FIELDS)
        base = offset + 80 * rng.randrange(size // 80 if size // 80 < 4 else 4)
    elif where == "const" and const:
        field, fmt = rng.choice(CONST_FIELDS)
        base = const[0][2]
    elif where in ("entry", "desc", "const"):
        field, fmt = rng.choice(ENTRY_FIELDS)
        base = entry_offset(rng.randrange(len(sections)))
    else:
        (field, fmt), base = rng.choice(HEADER_FIELDS), 0
    out = bytearray(data)
    struct.pack_into("<" + fmt, out, base + field, _extreme(rng, fmt, data))
    return fix_checksums(bytes(out))


def _entries_op(rng: random.Random, data: bytes, op: str) -> bytes:
    sections = _sections(data)
    if len(sections) < 2:
        return fix_checksums(flip_bits(rng, data))
    i, j = rng.sample(range(len(sections)), 2)
    out = bytearray(data)
    a, b = entry_offset(i), entry_offset(j)
    if op == "duplicate":
        out[a: a + 32] = data[b: b + 32]
    elif op == "swap":
        out[a: a + 32], out[b: b + 32] = data[b: b + 32], data[a: a + 32]
    elif op == "swap kinds":
        out[a: a + 2], out[b: b + 2] = data[b: b + 2], data[a: a + 2]
    else:  # overlap: move section i onto (or into) section j
        offset = sections[j][2] + rng.choice([0, 0, 1, 8, 16, sections[j][3] // 2])
        struct.pack_into("<Q", out, a + 8, offset)
    return fix_checksums(bytes(out))


def overlap(rng: random.Random, data: bytes) -> bytes:
    return _entries_op(rng, data, "overlap")


def duplicate(rng: random.Random, data: bytes) -> bytes:
    return _entries_op(rng, data, "duplicate")


def swap(rng: random.Random, data: bytes) -> bytes:
    return _entries_op(rng, data, rng.choice(["swap", "swap kinds"]))


def fixed_flips(rng: random.Random, data: bytes) -> bytes:
    return fix_checksums(flip_bits(rng, data))


def fixed_overwrite(rng: random.Random, data: bytes) -> bytes:
    return fix_checksums(overwrite_bytes(rng, data))


def splice(rng: random.Random, data: bytes) -> bytes:
    at = rng.randrange(80, len(data))
    if rng.random() < 0.5:
        return _set_file_size(data[:at] + rng.randbytes(rng.randint(1, 16)) + data[at:])
    return _set_file_size(data[:at] + data[at + rng.randint(1, 16):])


def replace_section(rng: random.Random, data: bytes) -> bytes:
    _, _, offset, size = rng.choice(_sections(data))
    out = bytearray(data)
    if size:
        start = rng.randrange(size)
        end = rng.randint(start + 1, size)
        out[offset + start: offset + end] = rng.randbytes(end - start)
    return fix_checksums(bytes(out))


def extend(rng: random.Random, data: bytes) -> bytes:
    tail = rng.choice([bytes(rng.randint(1, 64)), rng.randbytes(rng.randint(1, 64))])
    return _set_file_size(data + tail)


MUTATORS: list[Mutator] = [flip_bits, overwrite_bytes, fixed_flips, fixed_overwrite, truncate,
                           huge_field, huge_field, overlap, duplicate, swap, splice,
                           replace_section, extend]


def _timeout(signum: int, frame: object) -> None:
    raise TimeoutError("case took longer than the per-case timeout (hang?)")


def _run_case(data: bytes, codec: object) -> str:
    """'ok' or the error class; raises anything that is neither (a fuzz failure)."""
    try:
        program = read_tsl(data, codec=codec)
    except TesselFormatError as exc:
        return re.sub(r"\d+|0x[0-9a-f]+|'[^']*'", "#", str(exc))[:60]
    again = read_tsl(write_tsl(program, codec=codec), codec=codec)
    assert again == program, "re-serialised program differs"
    return "ok"


def test_fuzz_reader_accepts_only_valid_or_raises_format_error() -> None:
    codec, programs = codec_and_programs()
    bases = [write_tsl(p, codec=codec) for p in programs]
    rng = random.Random(SEED)
    outcomes: Counter[str] = Counter()
    failures: list[str] = []
    peak_bytes, worst_excess, slowest = 0, -(2**63), 0.0
    old = signal.signal(signal.SIGALRM, _timeout)
    start = time.perf_counter()
    try:
        for case in range(CASES):
            mutator = MUTATORS[case % len(MUTATORS)]
            data = mutator(rng, bases[rng.randrange(len(bases))])
            measure = case % (CASES // ALLOC_SAMPLE) == 0
            if measure:
                tracemalloc.start()
            t0 = time.perf_counter()
            signal.setitimer(signal.ITIMER_REAL, CASE_TIMEOUT_S)
            try:
                outcomes[_run_case(data, codec)] += 1
            except Exception as exc:  # noqa: BLE001 - a fuzz failure, collected below
                failures.append(f"case {case} ({mutator.__name__}): {type(exc).__name__}: {exc}")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                slowest = max(slowest, time.perf_counter() - t0)
                if measure:
                    peak = tracemalloc.get_traced_memory()[1]
                    worst_excess = max(worst_excess, peak - ALLOC_PER_BYTE * len(data))
                    peak_bytes = max(peak_bytes, peak)
                    tracemalloc.stop()
    finally:
        signal.signal(signal.SIGALRM, old)
    elapsed = time.perf_counter() - start
    print(f"\n.tsl fuzz: {CASES} cases in {elapsed:.2f} s (slowest case {slowest * 1e3:.1f} ms, "
          f"peak traced allocation {peak_bytes} B); {outcomes['ok']} accepted, "
          f"{CASES - outcomes['ok'] - len(failures)} rejected with {len(outcomes) - 1} distinct "
          f"messages, codec {codec.engine_type.__module__}")
    assert not failures, f"{len(failures)} failures, first:\n" + "\n".join(failures[:10])
    assert outcomes["ok"] > 0 and len(outcomes) > 40  # the mutations reach many different checks
    assert worst_excess < ALLOC_SLACK  # a huge count or size never makes the reader allocate it
    assert elapsed < 60
