"""The C runtime has no 2:4 sparse weight path: a binary whose CONV stores 2:4 sparse weights
(w_type I8_2_4 / I4_2_4) is refused when it is loaded (the field's value is outside the
encoding the C runtime reads), never run with the weights misread."""

from __future__ import annotations

import pytest

from tessel.arch import load_preset
from tessel.binary import TslProgram, write_tsl
from tessel.isa import Engine, Instruction, Opcode
from tessel.isa.instrs.matrix import WeightType
from tessel.runtime import cengine


@pytest.mark.parametrize("w_type", [WeightType.I8_2_4, WeightType.I4_2_4])
def test_a_binary_with_sparse_weights_is_refused_at_load(w_type: WeightType) -> None:
    if cengine.available() is not None:
        pytest.skip(cengine.available())
    arch = load_preset("tnpu-s").with_param("sparse.enabled", True)
    end = Instruction.make(Opcode.END)
    conv = Instruction.make(
        Opcode.CONV, in_addr=0, in_h=1, in_w=1, in_stride_h=8, in_stride_w=8, cin=8, kh=1,
        kw=1, out_h=1, out_w=1, cout=4, w_addr=64, w_stride_k=16, w_stride_ci=4,
        w_stride_co=1, acc_addr=0, acc_stride=4, w_type=w_type)
    queues = {e: ((conv, end) if e is Engine.MATRIX else (end,)) for e in Engine}
    data = write_tsl(TslProgram(arch.arch_hash_bytes, queues, bytes(16), 0,
                                0x100, (), ()))
    code, err, _ = cengine.check(data)
    assert code != 0 and "outside its legal values" in cengine.describe(err)
    dense = Instruction.make(Opcode.CONV, **{**conv.as_dict(), "w_type": WeightType.I8})
    queues[Engine.MATRIX] = (dense, end)
    ok = write_tsl(TslProgram(arch.arch_hash_bytes, queues, bytes(16), 0, 0x100, (), ()))
    assert cengine.check(ok)[0] == 0
