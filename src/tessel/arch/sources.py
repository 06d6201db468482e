"""Where the presets' energy and area numbers come from: published figures and scaling rules.

Base figures are Horowitz, "Computing's energy problem (and what we can do about it)",
ISSCC 2014, for a 45 nm process at 0.9 V. They are scaled to a preset's node with the rule
written in docs/architecture.md:

* dynamic energy:  E(node) = E45 * (node / 45) * (Vdd(node) / 0.9)**2   (C ~ feature size, C V^2)
* area:            A(node) = A45 * (node / 45)**2
* off-chip (LPDDR, flash) energies are NOT scaled: their I/O and arrays do not follow logic;
  they come from memory figures of their own (below).

Operating points (``tessel.arch.operating``) follow the first-order CMOS rule (Rabaey,
Chandrakasan, Nikolic, "Digital Integrated Circuits", 2nd ed., 2003, ch. 5; Weste & Harris,
"CMOS VLSI Design", 4th ed., 2011, ch. 5): switching energy per event C V^2, so dynamic energy
scales with (V / Vnom)^2; leakage power V * I_leak, with I_leak taken as fixed, so it scales
with V / Vnom. The (clock, voltage) pairs of the presets come from the alpha-power law
(Sakurai & Newton, IEEE JSSC 25(2), 1990): gate delay ~ V / (V - Vt)^alpha, so the clock a
voltage sustains is f ~ (V - Vt)^alpha / V, with the stated assumptions for Vt and alpha.

The shipped presets were written from these functions, and tests/unit/arch checks that they
still agree; a custom preset may use any numbers it cites. Nothing in the compiler or the
simulator calls this module: they read the numbers from ``NpuArch``.
"""

from __future__ import annotations

import math

from tessel.errors import TesselConfigError

# --- Horowitz ISSCC 2014, 45 nm, 0.9 V --------------------------------------------------------
H45_INT8_MULT_PJ = 0.2
H45_INT32_ADD_PJ = 0.1
H45_INT32_MULT_PJ = 3.1
H45_INT8_ADD_PJ = 0.03
# 64-bit SRAM (cache) access energy by array size (bytes -> pJ per 64-bit access)
H45_SRAM_64B_PJ = ((8 * 1024, 10.0), (32 * 1024, 20.0), (1024 * 1024, 100.0))
H45_DRAM_32B_PJ = 640.0  # "32b DRAM read"
H45_AREA_INT8_MULT_UM2 = 282.0
H45_AREA_INT32_ADD_UM2 = 137.0
H45_AREA_INT32_MULT_UM2 = 3495.0
H45_AREA_INT8_ADD_UM2 = 36.0

# --- off-chip memories --------------------------------------------------------------------------
# LPDDR4 read/write energy, DRAM core + I/O: 14 pJ/bit for a 32 Gb single-die LPDDR4 at
# 3.2 Gb/s/pin (13 for a four-die 4 x 8 Gb package), H. Ha, "Understanding and Improving the
# Energy Efficiency of DRAM", PhD thesis, Stanford University (stacks.stanford.edu/file/
# yp843xn4828), from Micron-calibrated DRAM power models. LPDDR4x / LPDDR5 lower the I/O
# voltage further, so this is an upper figure for them.
LPDDR4_PJ_PER_BIT = 14.0
# The previous figure, kept as the conservative option (docs/architecture.md, "Off-chip
# energy"): Horowitz's DDR3-era 32-bit DRAM read, 640 pJ / 4 bytes.
LPDDR_CONSERVATIVE_BYTE_PJ = H45_DRAM_32B_PJ / 4
# Quad-SPI NOR flash read: supply x read current / throughput. Throughput: quad I/O at 133 MHz
# STR, 65 MB/s (Micron MT25QU 1.8 V datasheet, "up to 65 MB/s"). Assumption: 15 mA read current
# at 1.8 V, the order 1.8 V quad-SPI NOR datasheets give for fast quad reads at 104-133 MHz.
QSPI_FLASH_V = 1.8
QSPI_FLASH_READ_MA = 15.0  # assumption (above)
QSPI_FLASH_BYTES_PER_S = 65e6

# --- other sources and stated assumptions -----------------------------------------------------
# 6T bit cell of Intel's 45 nm process: 0.346 um^2 (Mistry et al., IEDM 2007).
BITCELL_45NM_UM2 = 0.346
ARRAY_EFFICIENCY = 0.7  # assumption: bit cells are 70% of a macro (periphery, sense amps)
FIXED_AREA_45NM_MM2 = 0.2  # assumption: control, sequencers, DMA, interconnect at 45 nm
LEAKAGE_MW_PER_MM2 = 10.0  # assumption: low-power library, ~10 mW/mm^2 at nominal Vdd
# assumption: unpacking an int4 weight (a nibble select and sign extension) costs a tenth of an
# 8-bit add's energy, and a decoder lane (one weight per cycle) a quarter of its area
INT4_DECODE_OF_INT8_ADD_ENERGY = 0.1
INT4_DECODE_OF_INT8_ADD_AREA = 0.25
# assumption: the weight decoder spends a third of an 8-bit add's energy per byte it decodes
# (a Rice symbol: a shift, a mask and a zig-zag), and a lane (one byte per cycle) an 8-bit
# adder's area
WEIGHT_DECODE_OF_INT8_ADD_ENERGY = 1 / 3
WEIGHT_DECODE_OF_INT8_ADD_AREA = 1.0
# assumption: 2:4 sparsity decodes an index (two 2-bit selects) for a fifth of an 8-bit add's
# energy, in a quarter of an 8-bit adder per index per cycle; the activation select in front of
# a MAC (an 8-bit 4:1 multiplexer) is half an 8-bit adder's area
SPARSE_INDEX_OF_INT8_ADD_ENERGY = 0.2
SPARSE_INDEX_OF_INT8_ADD_AREA = 0.25
SPARSE_MUX_OF_INT8_ADD_AREA = 0.5
VDD_BY_NODE = {45: 0.9, 28: 0.9, 22: 0.8, 16: 0.8, 12: 0.8, 7: 0.75, 5: 0.7}
# operating points: assumptions for the alpha-power law (Sakurai & Newton 1990) at every node
# here: threshold 0.35 V, alpha 1.3 (velocity-saturated short channels), and a floor of 0.5 V
# below which the SRAMs are taken not to work; the presets' points run at 1, 1/2 and 1/4 of
# the nominal clock
VT_V = 0.35
ALPHA = 1.3
VMIN_V = 0.5
POINT_FRACTIONS = ((1, "nominal"), (2, "half"), (4, "quarter"))  # clock divisor, name


def energy_scale(node_nm: int) -> float:
    """Dynamic-energy factor from 45 nm / 0.9 V to ``node_nm`` at its nominal Vdd."""
    if node_nm not in VDD_BY_NODE:
        raise TesselConfigError(f"no Vdd known for {node_nm} nm; known: {sorted(VDD_BY_NODE)}")
    return (node_nm / 45) * (VDD_BY_NODE[node_nm] / 0.9) ** 2


def lpddr_byte_pj() -> float:
    """Energy of one byte moved to or from LPDDR (LPDDR4, Ha's thesis: 14 pJ/bit)."""
    return LPDDR4_PJ_PER_BIT * 8


def flash_byte_pj() -> float:
    """Energy of one byte read from a quad-SPI NOR flash: V * I / throughput, in pJ."""
    return QSPI_FLASH_V * QSPI_FLASH_READ_MA * 1e-3 / QSPI_FLASH_BYTES_PER_S * 1e12


def alpha_power_voltage(vnom: float, fraction: float) -> float:
    """The supply voltage at which the clock is ``fraction`` of the one ``vnom`` sustains,
    under the alpha-power law f ~ (V - Vt)^alpha / V (bisection; at least ``VMIN_V``)."""
    def speed(v: float) -> float:
        return (v - VT_V) ** ALPHA / v

    target, lo, hi = fraction * speed(vnom), VT_V + 1e-9, vnom
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if speed(mid) < target else (lo, mid)
    return max(VMIN_V, round(hi, 3))


def operating_points(node_nm: int, clock_hz: int) -> list[tuple[str, int, float]]:
    """(name, clock, voltage) of a preset's operating points, slowest first."""
    if node_nm not in VDD_BY_NODE:
        raise TesselConfigError(f"no Vdd known for {node_nm} nm; known: {sorted(VDD_BY_NODE)}")
    vnom = VDD_BY_NODE[node_nm]
    return [(name, clock_hz // div, vnom if div == 1 else alpha_power_voltage(vnom, 1 / div))
            for div, name in reversed(POINT_FRACTIONS)]


def area_scale(node_nm: int) -> float:
    """Area factor from 45 nm to ``node_nm``."""
    return (node_nm / 45) ** 2


def sram_pj_per_byte_45(array_bytes: float) -> float:
    """Horowitz's SRAM access energy per byte at 45 nm for an array of ``array_bytes``.

    Log-log interpolation between the 8 KiB, 32 KiB and 1 MiB points, clamped outside them.
    """
    pts = H45_SRAM_64B_PJ
    if array_bytes <= pts[0][0]:
        return pts[0][1] / 8
    if array_bytes >= pts[-1][0]:
        return pts[-1][1] / 8
    for (s0, e0), (s1, e1) in zip(pts, pts[1:], strict=False):
        if s0 <= array_bytes <= s1:
            t = math.log(array_bytes / s0) / math.log(s1 / s0)
            return math.exp(math.log(e0) + t * math.log(e1 / e0)) / 8
    raise AssertionError("unreachable")


def horowitz_energy(
    node_nm: int, sram_bytes: int, sram_banks: int, acc_bytes: int, cols: int, lut_entries: int
) -> dict[str, float]:
    """Per-event energies (pJ) of a preset under the documented rule (no static power)."""
    s = energy_scale(node_nm)
    sram = sram_pj_per_byte_45(sram_bytes / sram_banks) * s  # one bank is accessed
    return {
        "mac_int8_pj": (H45_INT8_MULT_PJ + H45_INT32_ADD_PJ) * s,
        "sram_read_byte_pj": sram,
        "sram_write_byte_pj": sram,  # assumption: write = read (Horowitz gives reads)
        # accumulator: one bank per array column, 4 bytes per int32 entry
        "acc_access_pj": 4 * sram_pj_per_byte_45(acc_bytes / cols) * s,
        "lpddr_byte_pj": lpddr_byte_pj(),
        "sys_sram_byte_pj": sram_pj_per_byte_45(1024 * 1024) * s,
        "flash_byte_pj": flash_byte_pj(),
        "vector_lane_op_pj": (H45_INT32_MULT_PJ + H45_INT32_ADD_PJ) * s,
        "lut_lookup_pj": 2 * sram_pj_per_byte_45(2 * lut_entries) * s,
        "int4_decode_pj": H45_INT8_ADD_PJ * INT4_DECODE_OF_INT8_ADD_ENERGY * s,
    }


def horowitz_area(node_nm: int) -> dict[str, float]:
    """Area figures (mm^2) of a preset under the documented rule."""
    a = area_scale(node_nm) * 1e-6  # um^2 at 45 nm -> mm^2 at node
    return {
        "mac_mm2": (H45_AREA_INT8_MULT_UM2 + H45_AREA_INT32_ADD_UM2) * a,
        "sram_kib_mm2": 8192 * BITCELL_45NM_UM2 / ARRAY_EFFICIENCY * a,
        "vector_lane_mm2": (H45_AREA_INT32_MULT_UM2 + H45_AREA_INT32_ADD_UM2) * a,
        "fixed_mm2": FIXED_AREA_45NM_MM2 * area_scale(node_nm),
        "int4_decode_lane_mm2": H45_AREA_INT8_ADD_UM2 * INT4_DECODE_OF_INT8_ADD_AREA * a,
    }


def weight_decoder_figures(node_nm: int) -> dict[str, float]:
    """The weight decoder's energy per byte (pJ) and area per lane (mm^2) at ``node_nm``
    (``wdecoder.decode_byte_pj``, ``wdecoder.lane_mm2``; their defaults are the 45 nm ones)."""
    return {"decode_byte_pj": H45_INT8_ADD_PJ * WEIGHT_DECODE_OF_INT8_ADD_ENERGY
            * energy_scale(node_nm),
            "lane_mm2": H45_AREA_INT8_ADD_UM2 * WEIGHT_DECODE_OF_INT8_ADD_AREA * 1e-6
            * area_scale(node_nm)}


def sparsity_figures(node_nm: int) -> dict[str, float]:
    """2:4 sparsity's energy per index (pJ), area per index lane and per MAC's select (mm^2)
    at ``node_nm`` (``sparse.index_decode_pj``, ``index_lane_mm2``, ``mux_mac_mm2``; their
    defaults are the 45 nm ones)."""
    a = H45_AREA_INT8_ADD_UM2 * 1e-6 * area_scale(node_nm)
    return {"index_decode_pj": H45_INT8_ADD_PJ * SPARSE_INDEX_OF_INT8_ADD_ENERGY
            * energy_scale(node_nm),
            "index_lane_mm2": a * SPARSE_INDEX_OF_INT8_ADD_AREA,
            "mux_mac_mm2": a * SPARSE_MUX_OF_INT8_ADD_AREA}
