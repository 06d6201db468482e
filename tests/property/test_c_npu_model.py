"""The C NPU model (tessel/runtime/c/npu) against the Python simulator, instruction by
instruction: the cases of the ISA oracle tests (every instruction, operand layouts, zero points,
extremes, int4 weights, traps) run on both from the same memories; every memory must be equal
afterwards, or both must trap at the same instruction."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracle_kit import ARCH, EXT_REGION, Case, _contents, program_of
from test_isa_oracle_matrix import conv_case, dwconv_case, matmul_case
from test_isa_oracle_move import dma_case, lut_load_case
from test_isa_oracle_vector import (
    copy_case,
    eltwise_case,
    lut_case,
    pool_case,
    reduce_case,
    requant_case,
    unary_case,
    vector_sequence,
)

from tessel.errors import TesselSimError
from tessel.isa import encode_stream
from tessel.runtime import cengine
from tessel.sim.functional import run_functional
from tessel.sim.prepare import prepare
from tessel.sim.state import MachineState

pytestmark = pytest.mark.skipif(cengine.available() is not None,
                                reason=str(cengine.available()))


def _python(case: Case, c: dict[str, np.ndarray]) -> tuple[dict[str, bytes] | None, int | None]:
    state = MachineState(ARCH)
    state.sram[:] = c["sram"]
    state.acc_bytes[:] = c["acc"]
    state.lut_bytes[:] = c["lut"]
    state.offchip[0][:EXT_REGION] = c["ext"]
    try:
        run_functional(prepare(program_of(case), ARCH), state)
    except TesselSimError as exc:
        at = str(exc).split(" instruction ", 1)[1].split(" ", 1)[0]
        return None, int(at)
    return {"sram": state.sram.tobytes(), "acc": state.acc_bytes.tobytes(),
            "lut": state.lut_bytes.tobytes(), "ext": state.offchip[0][:EXT_REGION].tobytes()}, None


def _c(case: Case, c: dict[str, np.ndarray]) -> tuple[dict[str, bytes] | None, int | None]:
    mem = {k: np.array(v, np.uint8) for k, v in c.items()}
    stream = encode_stream(case.instrs)
    code, index, _ = cengine.run_queue(ARCH, int(case.engine), stream, len(case.instrs),
                                       mem["sram"], mem["acc"], mem["lut"], mem["ext"])
    if code:
        assert code in (cengine.NPU_TRAP, cengine.NPU_DEADLOCK), code
        return None, index
    return {k: v.tobytes() for k, v in mem.items()}, None


def compare(case: Case) -> None:
    for sample in _contents(case, 0):
        want, want_trap = _python(case, sample)
        got, got_trap = _c(case, sample)
        assert got_trap == want_trap, (got_trap, want_trap, case.instrs)
        if want is not None:
            for name in ("sram", "acc", "lut", "ext"):
                if got[name] != want[name]:
                    diff = [i for i in range(len(want[name])) if got[name][i] != want[name][i]]
                    raise AssertionError(f"{name} differs at {len(diff)} bytes, first {diff[:8]}: "
                                         f"{case.instrs}")


CASES = st.one_of(conv_case(), matmul_case(), dwconv_case(), dma_case(), lut_load_case(),
                  requant_case(), eltwise_case(), lut_case(), pool_case(), reduce_case(),
                  unary_case(), copy_case(), vector_sequence())


@settings(max_examples=400, deadline=None, derandomize=True)
@given(CASES)
def test_c_model_equals_the_simulator(case: Case) -> None:
    compare(case)


def test_a_trap_is_reported_at_its_instruction(monkeypatch: Any) -> None:
    """A REQUANT whose multiplier is negative traps in both, at that instruction."""
    from tessel.isa import Engine, Instruction, Opcode

    ins = Instruction.make(Opcode.REQUANT, src=1, src_addr=0, rows=1, ch=1, out_dtype=0,
                           dst_addr=64, param_addr=128, act_min=-128, act_max=127)
    case = Case(Engine.VECTOR, [ins, ins])
    sample = _contents(case, 0)[0]
    sample["sram"][128 + 4: 128 + 8] = np.frombuffer(np.int32(-1).tobytes(), np.uint8)
    assert _python(case, sample)[1] == 0
    assert _c(case, sample)[1] == 0
