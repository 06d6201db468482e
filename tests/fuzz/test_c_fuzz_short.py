"""A short seeded run of the C loader's sanitizer fuzzer (tests/fuzz/c_fuzz.py; ``make fuzz``
runs 100,000 cases): no AddressSanitizer / UndefinedBehaviorSanitizer finding, the mutations
reach the deep rules (many distinct refusal codes, accepted binaries run on the C NPU model,
malformed weight streams trap in its decoder, malformed 2:4 indices in its sparse CONV), the
seeds hold weight streams of 2:4 blocks, and the C loader agrees with the Python reader."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tessel.runtime.cengine import available

sys.path.insert(0, str(Path(__file__).resolve().parent))
import c_fuzz  # noqa: E402

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory):
    return c_fuzz.build(tmp_path_factory.mktemp("cfuzz"))


def test_short_sanitizer_run_has_no_finding(fuzzer):
    r = c_fuzz.run(fuzzer, 4000, seed=11)
    assert r["returncode"] == 0, r["stderr"]
    assert r["cases"] == 4000 and r["accepted"] > 50 and r["ran"] > 50
    assert len(r["refused"]) >= 35, sorted(r["refused"])  # header .. host graphs .. limits
    assert {43, 50, 77, 92, 111, 113} <= set(r["refused"])
    assert r["stream_traps"] > 0  # malformed DMA_LOAD_W streams reached the decoder and trapped
    assert r["index_traps"] > 0  # mutated 2:4 index nibbles reached the sparse CONV and trapped


def test_the_fuzzer_has_a_seed_with_weight_streams():
    from tessel.binary import read_tsl
    from tessel.isa import Opcode

    seeds = [p for p in c_fuzz.seeds() if p.parent.name == "wdecoder"]
    assert seeds
    for path in seeds:
        prog = read_tsl(path.read_bytes())
        assert any(i.opcode is Opcode.DMA_LOAD_W for q in prog.streams.values() for i in q)


def test_the_fuzzer_has_a_seed_with_sparse_convs():
    from tessel.binary import read_tsl
    from tessel.isa import Opcode
    from tessel.isa.instrs.matrix import WeightType

    seeds = [p for p in c_fuzz.seeds() if p.parent.name == "sparse"]
    assert seeds
    for path in seeds:
        prog = read_tsl(path.read_bytes())
        assert any(i.opcode is Opcode.CONV and WeightType(i.w_type).sparse
                   for q in prog.streams.values() for i in q)


def test_the_fuzzer_has_a_seed_with_2_4_weight_streams():
    from tessel.binary import read_tsl
    from tessel.isa import Opcode
    from tessel.isa.weight_codec import StreamMode

    modes = set()
    for path in (p for p in c_fuzz.seeds() if p.parent.name == "wdecoder"):
        prog = read_tsl(path.read_bytes())
        modes |= {prog.constants[i.ext_addr - prog.constants_address]
                  for q in prog.streams.values() for i in q
                  if i.opcode is Opcode.DMA_LOAD_W and i.mem == prog.constants_memory}
    assert StreamMode.SPARSE24 in modes, modes


def test_the_c_loader_accepts_only_what_the_python_reader_accepts(fuzzer):
    counts, bad = c_fuzz.differential(fuzzer, 400, seed=12)
    assert not bad, bad[:5]
    assert counts["both accept"] > 5 and counts["both refuse"] > 200
