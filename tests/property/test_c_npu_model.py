"""The C NPU model (tessel/runtime/c/npu) against the Python simulator, instruction by
instruction: the cases of the ISA oracle tests (every instruction, operand layouts, zero points,
extremes, int4 weights, traps) and CONVs with 2:4 sparse weights (any layout of the values,
valid or malformed indices, the static rules) run on both from the same memories; every memory
must be equal afterwards, or both must trap at the same instruction."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st
from oracle_kit import ARCH, EXT_REGION, ZP9, Case, _contents, case_of, place, program_of, strides_for
from test_isa_oracle_matrix import _acc, _layout, _mode, conv_case, dwconv_case, matmul_case
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

from tessel.arch import NpuArch
from tessel.errors import TesselSimError
from tessel.isa import Engine, Instruction, Opcode, encode_stream
from tessel.isa.instrs.matrix import WeightType, conv_weight_span
from tessel.isa.sparse24 import index_bytes
from tessel.runtime import cengine
from tessel.sim.functional import run_functional
from tessel.sim.prepare import prepare
from tessel.sim.state import MachineState

pytestmark = pytest.mark.skipif(cengine.available() is not None,
                                reason=str(cengine.available()))


def _python(case: Case, c: dict[str, np.ndarray], arch: NpuArch = ARCH
            ) -> tuple[dict[str, bytes] | None, int | None]:
    state = MachineState(arch)
    state.sram[:] = c["sram"]
    state.acc_bytes[:] = c["acc"]
    state.lut_bytes[:] = c["lut"]
    state.offchip[0][:EXT_REGION] = c["ext"]
    try:
        program = dataclasses.replace(program_of(case), arch_hash=arch.arch_hash_bytes)
        run_functional(prepare(program, arch), state)
    except TesselSimError as exc:
        at = str(exc).split(" instruction ", 1)[1].split(" ", 1)[0]
        return None, int(at)
    return {"sram": state.sram.tobytes(), "acc": state.acc_bytes.tobytes(),
            "lut": state.lut_bytes.tobytes(), "ext": state.offchip[0][:EXT_REGION].tobytes()}, None


def _c(case: Case, c: dict[str, np.ndarray], arch: NpuArch = ARCH
       ) -> tuple[dict[str, bytes] | None, int | None]:
    mem = {k: np.array(v, np.uint8) for k, v in c.items()}
    stream = encode_stream(case.instrs)
    code, index, _ = cengine.run_queue(arch, int(case.engine), stream, len(case.instrs),
                                       mem["sram"], mem["acc"], mem["lut"], mem["ext"])
    if code:
        assert code in (cengine.NPU_TRAP, cengine.NPU_DEADLOCK), code
        return None, index
    return {k: v.tobytes() for k, v in mem.items()}, None


def compare(case: Case, arch: NpuArch = ARCH) -> None:
    """Both run every sample of ``case`` (on ``arch``) to the same memories, or trap at the
    same instruction."""
    for sample in _contents(case, 0):
        want, want_trap = _python(case, sample, arch)
        got, got_trap = _c(case, sample, arch)
        assert got_trap == want_trap, (got_trap, want_trap, case.instrs)
        event("trapped" if want_trap is not None else "ran")
        if want is not None:
            for name in ("sram", "acc", "lut", "ext"):
                if got[name] != want[name]:
                    diff = [i for i in range(len(want[name])) if got[name][i] != want[name][i]]
                    raise AssertionError(f"{name} differs at {len(diff)} bytes, first {diff[:8]}: "
                                         f"{case.instrs}")


_PAIRS = [(a, b) for a in range(4) for b in range(a + 1, 4)]  # legal index nibbles: a < b


@st.composite
def sparse_conv_case(draw: Any) -> Case:
    """A CONV with 2:4 sparse weights: values (int8 or int4) in any layout, the index nibbles
    after their box legal (mostly), one group's illegal, or left random; rarely cin not a
    multiple of four or a non-zero w_zp (static traps)."""
    cin = draw(st.sampled_from([4, 4, 8, 12, 16, 6]))
    cout = draw(st.integers(1, 9))
    in_h, in_w = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    kh, kw = draw(st.sampled_from([1, 1, 2, 3])), draw(st.sampled_from([1, 1, 2, 3]))
    sh, sw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    dh, dw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    pt, pl = draw(st.integers(0, (kh - 1) * dh)), draw(st.integers(0, (kw - 1) * dw))
    oh = max(1, (in_h + pt - (kh - 1) * dh - 1) // sh + 1)
    ow = max(1, (in_w + pl - (kw - 1) * dw - 1) // sw + 1)
    window = 8192
    in_s = draw(strides_for([in_w, in_h], 1, span=cin))
    in_addr = place(draw, [cin, in_w, in_h], [1, *in_s], 1, window)
    w_type = draw(st.sampled_from([WeightType.I8_2_4, WeightType.I4_2_4]))
    ns = [kh * kw, -(-cin // 2), cout]
    nib, ss = _layout(draw, ns, window * w_type.per_byte)
    w_addr = nib // w_type.per_byte + (draw(st.sampled_from([0, nib % 2])) if w_type.per_byte > 1
                                       else 0)
    acc_addr, acc_stride = _acc(draw, oh * ow, cout)
    ins = Instruction.make(
        Opcode.CONV, in_addr=in_addr, in_h=in_h, in_w=in_w, in_stride_h=in_s[1],
        in_stride_w=in_s[0], cin=cin, in_zp=draw(ZP9), kh=kh, kw=kw, stride_h=sh, stride_w=sw,
        dil_h=dh, dil_w=dw, pad_top=pt, pad_left=pl, out_h=oh, out_w=ow, cout=cout,
        w_addr=w_addr, w_stride_k=ss[0], w_stride_ci=ss[1], w_stride_co=ss[2],
        w_zp=draw(st.one_of(*[st.just(0)] * 9, ZP9)), acc_addr=acc_addr, acc_stride=acc_stride,
        mode=_mode(draw), w_type=w_type)
    lo, hi = conv_weight_span(w_addr, kh, kw, cin, cout, *ss, w_type)
    assume(lo >= 0 and hi <= ARCH.onchip.sram_bytes)
    groups = kh * kw * (cin // 4) * cout
    meta = hi - index_bytes(kh * kw, cin, cout)
    indices = draw(st.sampled_from(["legal"] * 10 + ["one illegal", "random"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    nibbles = np.array([a | b << 2 for a, b in (_PAIRS[k] for k in rng.integers(0, 6, groups))]
                       + [0] * (groups % 2), np.uint8)
    if indices == "one illegal" and groups:
        nibbles[rng.integers(0, groups)] = draw(st.sampled_from([0, 5, 0xA, 0xF, 4, 9]))
    patch = [("SRAM", meta, (nibbles[0::2] | nibbles[1::2] << 4).tobytes())]

    def patches(draw_: Any, n: int | None) -> list:
        return [[patch if indices != "random" else [] for _ in range(n or 1)]
                for _run in range(2)]
    return case_of(draw, Engine.MATRIX, [ins], patches)


SPARSE = ARCH.with_param("sparse.enabled", True)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(sparse_conv_case())
def test_c_model_equals_the_simulator_on_sparse_convs(case: Case) -> None:
    compare(case, SPARSE)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(sparse_conv_case())
def test_without_sparsity_a_sparse_conv_traps_in_both(case: Case) -> None:
    sample = _contents(case, 0)[0]
    assert _python(case, sample)[1] == 0
    assert _c(case, sample)[1] == 0


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
