"""Cost formulas of docs/isa.md section 5, checked against hand-computed numbers."""

from __future__ import annotations

import pytest
from isa_samples import SAMPLES

from tessel.arch import Dataflow, load_preset
from tessel.isa import Engine, Opcode
from tessel.isa.costs import (
    Events,
    energy_breakdown_pj,
    energy_pj,
    gemm_cycles,
    gemm_dims,
    instruction_cost,
    matrix_cost,
    scalesim_cycles,
    static_energy_pj,
    vector_cost,
)

S = load_preset("tnpu-s")  # 16x16 WS, SRAM 64 B/cycle, 32 lanes, latency 4, LPDDR 16 B/c + 100
U55 = load_preset("u55-256")  # 16x16 OS, SRAM 32 B/cycle
WS, OS = Dataflow.WEIGHT_STATIONARY, Dataflow.OUTPUT_STATIONARY


def test_dma_is_latency_plus_bytes_over_bandwidth() -> None:
    c = instruction_cost(SAMPLES[Opcode.DMA_LOAD], S)
    assert c.cycles == 100 + 63  # 1000 bytes at 16 B/cycle
    assert c.events == Events(sram_write_bytes=1000, offchip_read_bytes=(1000,),
                              offchip_write_bytes=(0,))
    st = instruction_cost(SAMPLES[Opcode.DMA_STORE], S)  # 10 x 3 int32 = 120 bytes
    assert st.cycles == 100 + 8 and st.events.offchip_write_bytes == (120,)
    u55 = instruction_cost(SAMPLES[Opcode.DMA_LOAD].replace(mem=1), U55)  # flash 1 B/c + 64
    assert u55.cycles == 64 + 1000


@pytest.mark.parametrize("m,n,k,r,c,df,pipelined,scalesim", [
    # WS: folds = ceil(K/R)*ceil(N/C), T = M, fold 2R + C + T - 2;
    # OS: folds = ceil(M/R)*ceil(N/C), T = K, fold R + C + T - 2 (SCALE-Sim v3)
    (64, 32, 48, 16, 16, WS, 5 * 64 + 110, 6 * 110),
    (64, 32, 48, 16, 16, OS, 7 * 48 + 78, 8 * 78),
    (4, 16, 16, 16, 16, WS, 50, 50),  # one fold: identical
    (1, 1, 1, 8, 8, OS, 15, 15),
    (100, 10, 1000, 4, 8, OS, 49 * 1000 + 1010, 50 * 1010),
    (3, 64, 64, 32, 32, WS, 3 * 32 + 97, 4 * 97),  # T < R: fold every R cycles
])
def test_gemm_cycles(m, n, k, r, c, df, pipelined, scalesim) -> None:
    assert gemm_cycles(m, n, k, r, c, df) == pipelined
    assert scalesim_cycles(m, n, k, r, c, df) == scalesim
    assert gemm_cycles(m, n, k, r, c, df, pipelined=False) == scalesim
    assert pipelined <= scalesim


def test_matrix_cost_events_ws_and_os() -> None:
    mm = SAMPLES[Opcode.MATMUL]  # 64 x 32 x 48
    ws = matrix_cost(mm, S)
    assert ws.cycles == 430 and ws.events.macs == 64 * 32 * 48
    # operand path: A (3 KiB) fits the 32 KiB input buffer, read once; B preloaded once
    assert ws.events.sram_read_bytes == 64 * 48 + 48 * 32
    assert ws.events.operand_bytes == 64 * 48 * 2 + 48 * 32  # A once per column fold
    assert (ws.events.acc_writes, ws.events.acc_reads) == (2048 * 3, 2048 * 2)
    acc = matrix_cost(mm.replace(mode=1), S)
    assert acc.events.acc_reads == 2048 * 3
    os_ = matrix_cost(mm, U55)  # B (1.5 KiB) fits the 4 KiB weight buffer: read once
    assert os_.cycles == 414 and os_.events.sram_read_bytes == 64 * 48 + 48 * 32
    assert os_.events.operand_bytes == 64 * 48 * 2 + 48 * 32 * 4  # B once per row fold
    assert (os_.events.acc_writes, os_.events.acc_reads) == (2048, 0)
    tight = U55.with_params({"matrix.input_buffer_bytes": 0, "matrix.weight_buffer_bytes": 0})
    assert matrix_cost(mm, tight).events.sram_read_bytes == 64 * 48 * 2 + 48 * 32 * 4


def test_matrix_cost_is_bounded_by_the_operand_path_not_the_sram_ports() -> None:
    mm = SAMPLES[Opcode.MATMUL]
    narrow_sram = S.with_param("onchip.sram_bank_width_bytes", 1)
    assert matrix_cost(mm, narrow_sram).cycles == 430  # DMA's ports do not feed the array
    slow = S.with_param("matrix.feed_bytes_per_cycle", 1)
    assert matrix_cost(mm, slow).cycles == 64 * 48 + 48 * 32
    no_buffer = slow.with_param("matrix.input_buffer_bytes", 0)
    assert matrix_cost(mm, no_buffer).cycles == 64 * 48 * 2 + 48 * 32


def test_conv_input_is_read_once_per_tile_with_its_halo() -> None:
    conv = SAMPLES[Opcode.CONV]
    m, n, k = gemm_dims(conv)
    window = conv.in_h * conv.in_w * conv.cin
    assert matrix_cost(conv, S).events.sram_read_bytes == window + k * n
    assert window < m * k  # without the window buffer every kernel tap re-reads its input
    tight = S.with_param("matrix.input_buffer_bytes", window - 1)
    assert matrix_cost(conv, tight).events.sram_read_bytes == m * k + k * n


def test_depthwise_mode_of_the_array_puts_taps_on_rows_and_channels_on_columns() -> None:
    dw = SAMPLES[Opcode.DWCONV]
    m, n, k = gemm_dims(dw)
    assert (m, n, k) == (dw.out_h * dw.out_w, dw.ch, dw.kh * dw.kw)
    array = instruction_cost(dw, S, Engine.MATRIX)
    assert array == instruction_cost(dw, S) == matrix_cost(dw, S)
    assert array.cycles == max(gemm_cycles(m, n, k, 16, 16, WS),
                               -(-(dw.in_h * dw.in_w * dw.ch + k * n) // 64))
    assert instruction_cost(dw, S, Engine.VECTOR) == vector_cost(dw, S)
    assert array.events.macs == instruction_cost(dw, S, Engine.VECTOR).events.macs


def test_conv_gemm_dims() -> None:
    assert gemm_dims(SAMPLES[Opcode.CONV]) == (16, 8, 36)
    with pytest.raises(ValueError):
        gemm_dims(SAMPLES[Opcode.END])


def test_vector_costs() -> None:
    req = vector_cost(SAMPLES[Opcode.REQUANT], S)  # 400 elements, 880 SRAM bytes
    assert req.cycles == 4 + max(13, 14) and req.events.acc_reads == 400
    assert req.events.sram_read_bytes == 480 and req.events.vector_lane_ops == 400
    un = vector_cost(SAMPLES[Opcode.UNARY], S)
    assert un.cycles == 4 + 8 and un.events.vector_lane_ops == 256
    dw = vector_cost(SAMPLES[Opcode.DWCONV], S)
    assert dw.events.macs == 3 * 3 * 8 * 9 and dw.events.acc_writes == 72
    red = vector_cost(SAMPLES[Opcode.REDUCE], S)
    assert red.events.sram_write_bytes == 4 * 4 and red.events.sram_read_bytes == 64
    lut = vector_cost(SAMPLES[Opcode.LUT], S)
    assert lut.events.lut_accesses == 32


def test_every_opcode_has_a_cost() -> None:
    for op, ins in SAMPLES.items():
        c = instruction_cost(ins, S)
        assert c.cycles >= 1, op
    assert instruction_cost(SAMPLES[Opcode.WAIT], S).events == Events()


def test_energy() -> None:
    e = S.energy
    ev = Events(macs=10, sram_read_bytes=3, acc_writes=2, offchip_read_bytes=(100,))
    assert energy_pj(ev, S) == pytest.approx(
        10 * e.mac_int8_pj + 3 * e.sram_read_byte_pj + 2 * e.acc_access_pj + 100 * e.lpddr_byte_pj)
    parts = energy_breakdown_pj(ev, S)
    # 100 bytes of LPDDR at 14 pJ/bit (docs/architecture.md, "Off-chip energy")
    assert parts["lpddr"] == pytest.approx(100 * 8 * 14.0) and parts["vector"] == 0
    assert static_energy_pj(S.clock_hz, S) == pytest.approx(e.static_power_mw * 1e9)
    flash = energy_breakdown_pj(Events(offchip_write_bytes=(0, 5)), U55)
    assert flash["flash"] == pytest.approx(5 * U55.energy.flash_byte_pj)


def test_events_add() -> None:
    a = Events(macs=1, offchip_read_bytes=(1,))
    b = Events(macs=2, offchip_read_bytes=(0, 3))
    assert a + b == Events(macs=3, offchip_read_bytes=(1, 3), offchip_write_bytes=())
