/* Internals of the C NPU model: field positions of each instruction (docs/isa.md §4, in table
 * order), the fixed-point functions of §1 and the per-instruction entry points. */
#ifndef TESSEL_NPU_MODEL_H
#define TESSEL_NPU_MODEL_H

#include "../src/internal.h"
#include "tessel/tessel_sim.h"

/* DMA_LOAD / DMA_STORE */
enum { DMA_MEM, DMA_DTYPE, DMA_D0, DMA_EXT_ADDR = 6, DMA_EXT_S0, DMA_SRAM_ADDR = 11, DMA_SRAM_S0 };
/* DMA_LOAD_W */
enum { WL_MEM, WL_EXT_ADDR, WL_EXT_BYTES, WL_SRAM_ADDR, WL_OUT_BYTES };
/* CONV */
enum { CV_IN_ADDR, CV_IN_H, CV_IN_W, CV_IN_SH, CV_IN_SW, CV_CIN, CV_IN_ZP, CV_KH, CV_KW,
       CV_STRIDE_H, CV_STRIDE_W, CV_DIL_H, CV_DIL_W, CV_PAD_TOP, CV_PAD_LEFT, CV_OUT_H, CV_OUT_W,
       CV_COUT, CV_W_ADDR, CV_W_SK, CV_W_SCI, CV_W_SCO, CV_W_ZP, CV_ACC_ADDR, CV_ACC_STRIDE,
       CV_MODE, CV_W_TYPE, CV_IN_TYPE };
/* MATMUL */
enum { MM_M, MM_N, MM_K, MM_A_ADDR, MM_A_SM, MM_A_SK, MM_A_ZP, MM_B_ADDR, MM_B_SK, MM_B_SN,
       MM_B_ZP, MM_ACC_ADDR, MM_ACC_STRIDE, MM_MODE, MM_B_TYPE, MM_IN_TYPE };
/* REQUANT */
enum { RQ_SRC, RQ_SRC_ADDR, RQ_SRC_STRIDE, RQ_ROWS, RQ_CH, RQ_OUT_DTYPE, RQ_DST_ADDR,
       RQ_DST_STRIDE, RQ_PARAM_ADDR, RQ_PARAM_MODE, RQ_OUT_ZP, RQ_ACT_MIN, RQ_ACT_MAX,
       RQ_ROUNDING, RQ_ACC_WIDTH };
/* ELTWISE */
enum { EW_OP, EW_A_DT, EW_B_DT, EW_OUT_DT, EW_D0, EW_A_ADDR = 7, EW_A_S0, EW_B_ADDR = 11,
       EW_B_S0, EW_OUT_ADDR = 15, EW_OUT_S0, EW_A_ZP = 19, EW_B_ZP, EW_LSHIFT, EW_A_MULT,
       EW_A_SHIFT, EW_B_MULT, EW_B_SHIFT, EW_OUT_MULT, EW_OUT_SHIFT, EW_OUT_ZP, EW_ACT_MIN,
       EW_ACT_MAX, EW_ROUNDING };
/* LUT, LUT_LOAD */
enum { LU_MODE, LU_BASE, LU_D0, LU_SRC_ADDR = 5, LU_SRC_S0, LU_DST_ADDR = 9, LU_DST_S0 };
enum { LL_BASE, LL_COUNT, LL_SRC_ADDR };
/* POOL */
enum { PO_OP, PO_DTYPE, PO_IN_ADDR, PO_IN_H, PO_IN_W, PO_IN_SH, PO_IN_SW, PO_CH, PO_KH, PO_KW,
       PO_STRIDE_H, PO_STRIDE_W, PO_DIL_H, PO_DIL_W, PO_PAD_TOP, PO_PAD_LEFT, PO_OUT_H, PO_OUT_W,
       PO_OUT_ADDR, PO_OUT_SH, PO_OUT_SW, PO_ACT_MIN, PO_ACT_MAX };
/* DWCONV */
enum { DW_IN_ADDR, DW_IN_H, DW_IN_W, DW_IN_SH, DW_IN_SW, DW_CH, DW_IN_ZP, DW_KH, DW_KW,
       DW_STRIDE_H, DW_STRIDE_W, DW_DIL_H, DW_DIL_W, DW_PAD_TOP, DW_PAD_LEFT, DW_OUT_H, DW_OUT_W,
       DW_W_ADDR, DW_W_SK, DW_ACC_ADDR, DW_ACC_STRIDE, DW_MODE, DW_W_TYPE };
/* REDUCE */
enum { RD_OP, RD_DTYPE, RD_AXIS, RD_D0, RD_SRC_ADDR = 6, RD_SRC_S0, RD_IN_ZP = 10, RD_DST_ADDR,
       RD_DST_S0, RD_DST_S1 };
/* COPY */
enum { CP_DTYPE, CP_D0, CP_SRC_ADDR = 5, CP_SRC_S0, CP_DST_ADDR = 10, CP_DST_S0 };
/* UNARY */
enum { UN_OP, UN_FRAC, UN_D0, UN_SRC_ADDR = 5, UN_SRC_S0, UN_DST_ADDR = 9, UN_DST_S0 };

#define NBYTES(dt) (1 << (dt)) /* ISA DType I8=0, I16=1, I32=2 */
#define WINDOW_FACTOR 64
#define MAX_OVERLAP_WORK (1 << 20)

/* ---- docs/isa.md §1: the fixed-point functions ------------------------------------------ */
static inline int64_t sat32(int64_t v) {
    return v > INT32_MAX ? INT32_MAX : (v < INT32_MIN ? INT32_MIN : v);
}

static inline int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

/* sat32(v * 2^s), 0 <= s <= 31, |v| < 2^40 */
static inline int64_t sat32_shl(int64_t v, int s) {
    if (v > (INT32_MAX >> s)) return INT32_MAX;
    if (v < (INT32_MIN >> s)) return INT32_MIN;
    return v * ((int64_t)1 << s);
}

/* SRDHM: round(a*b / 2^31), halves up; INT32_MIN * INT32_MIN -> INT32_MAX */
static inline int64_t srdhm(int64_t a, int64_t b) {
    int64_t ab;
    if (a == INT32_MIN && b == INT32_MIN) return INT32_MAX;
    ab = a * b + ((int64_t)1 << 30);
    return ab >= 0 ? ab / ((int64_t)1 << 31) : -((-ab + ((int64_t)1 << 31) - 1) / ((int64_t)1 << 31));
}

/* RDBPOT: x / 2^e rounded half away from zero */
static inline int64_t rdbpot(int64_t x, int e) {
    int64_t mag;
    if (e == 0) return x;
    mag = ((x < 0 ? -x : x) + ((int64_t)1 << (e - 1))) >> e;
    return x < 0 ? -mag : mag;
}

/* MBQM(x, q31, shift), q31 in [0, 2^31), shift in [-31, 30], x within int32 */
static inline int64_t mbqm(int64_t x, int64_t q31, int shift) {
    int left = shift > 0 ? shift : 0, right = shift < 0 ? -shift : 0;
    return rdbpot(srdhm(sat32(x * ((int64_t)1 << left)), q31), right);
}

/* SINGLE rounding: round(x * q31 / 2^s), s = 31 - shift in [1, 62], halves up; |x q31| < 2^62.
 * Floor division written out (no right shift of a negative value). */
static inline int64_t single_round(int64_t x, int64_t q31, int shift) {
    int s = 31 - shift;
    int64_t t = x * q31 + ((int64_t)1 << (s - 1)), d = (int64_t)1 << s;
    return t >= 0 ? t / d : -((-t + d - 1) / d);
}

/* ---- the wide accumulator (docs/isa.md, "The wide accumulator") ---------------------------- */
/* v modulo 2^48 in the signed 48-bit range (the value of a wide entry's 8 bytes) */
static inline int64_t wrap48(uint64_t v) {
    v &= (((uint64_t)1) << 48) - 1;
    return (v >> 47) ? (int64_t)v - ((int64_t)1 << 48) : (int64_t)v;
}

/* The wide rule's scale: (v q15 + 2^(s-1)) >> s, floor, s = 15 - shift in [1, 46]; |v q15| <=
 * 2^62. Floor division written out (no right shift of a negative value). */
static inline int64_t wide_round(int64_t v, int64_t q15, int shift) {
    int s = 15 - shift;
    int64_t t = v * q15 + ((int64_t)1 << (s - 1)), d = (int64_t)1 << s;
    return t >= 0 ? t / d : -((-t + d - 1) / d);
}

/* round(x / n), halves away from zero, n >= 1 */
static inline int64_t rounding_div(int64_t x, int64_t n) {
    int64_t mag = ((x < 0 ? -x : x) * 2 + n) / (2 * n);
    return x < 0 ? -mag : mag;
}

/* ---- rules.c, matrix.c, vector.c ------------------------------------------------------------ */
/* Why the instruction traps before it runs on this target (static rules 1-6), or NULL. */
const char *tsl_sim_static_error(const tsl_sim *s, uint8_t op, const int64_t *f);
/* The host bytes of off-chip [addr, addr + n) of memory `mem`, or NULL if not mapped. */
uint8_t *tsl_sim_offchip(tsl_sim *s, int mem, int64_t addr, int64_t n, int write);
/* The SRAM byte where a CONV's 2:4 index nibbles start: the end of its values box. */
int64_t tsl_sim_sparse_indices(const int64_t *f);
tsl_status tsl_sim_matrix(tsl_sim *s, uint8_t op, const int64_t *f);
tsl_status tsl_sim_vector(tsl_sim *s, uint8_t op, const int64_t *f);
tsl_status tsl_sim_move(tsl_sim *s, uint8_t op, const int64_t *f);
tsl_status tsl_sim_wdecode(tsl_sim *s, const int64_t *f); /* DMA_LOAD_W (wdecode.c) */

/* the element of type dt (0 I8, 1 I16, 2 I32) at p, and its store */
static inline int64_t rd_elem(const uint8_t *p, int dt) {
    if (dt == 0) return (int8_t)p[0];
    if (dt == 1) return (int16_t)(uint16_t)(p[0] | (p[1] << 8));
    return (int32_t)((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
}

static inline void wr_elem(uint8_t *p, int dt, int64_t v) {
    uint32_t u = (uint32_t)v;
    p[0] = (uint8_t)u;
    if (dt >= 1) p[1] = (uint8_t)(u >> 8);
    if (dt == 2) { p[2] = (uint8_t)(u >> 16); p[3] = (uint8_t)(u >> 24); }
}

#endif
