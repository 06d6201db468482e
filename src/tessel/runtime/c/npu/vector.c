/* The vector engine (docs/isa.md §4): REQUANT, ELTWISE, LUT, POOL, REDUCE, UNARY. Each reads all
 * of its inputs first, then writes: results are gathered in the model's scratch (one int32 per
 * output element, in iteration order) and written afterwards, so an output may overlap an input. */
#include "model.h"

static tsl_status trap(tsl_sim *s, const char *why) {
    s->trap = why;
    return TSL_E_NPU_TRAP;
}

static int32_t *out_buffer(tsl_sim *s) { return (int32_t *)(void *)s->scratch; }

/* sat32(a * b) for |a|, |b| < 2^34 */
static int64_t sat32_mul(int64_t a, int64_t b) {
    uint64_t ua = (uint64_t)(a < 0 ? -a : a), ub = (uint64_t)(b < 0 ? -b : b), p;
    int neg = (a < 0) != (b < 0);
    if (ua == 0 || ub == 0) return 0;
    if (ua > (((uint64_t)1) << 32) / ub) return neg ? INT32_MIN : INT32_MAX;
    p = ua * ub;
    return sat32(neg ? -(int64_t)p : (int64_t)p);
}

/* ---- REQUANT ------------------------------------------------------------------------------- */
/* acc_width WIDE: int64 bias[P], q31[P], shift[P]; y = clamp(sat32((sat48(acc + bias) q15 +
 * 2^(s-1)) >> s) + out_zp), q15 = Q31 reduced to Q15, s = 15 - shift */
static tsl_status requant_wide(tsl_sim *s, const int64_t *f) {
    int64_t P = f[RQ_PARAM_MODE] ? 1 : f[RQ_CH], r, c, p, n = 0, lim = (int64_t)1 << 47;
    const uint8_t *prm = s->sram + f[RQ_PARAM_ADDR];
    const uint32_t *acc = (const uint32_t *)s->acc;
    int32_t *out = out_buffer(s);
    int dt = (int)f[RQ_OUT_DTYPE];
    for (p = 0; p < P; p++) {
        int64_t q31 = rd_elem(prm + 8 * P + 4 * p, 2), shift = rd_elem(prm + 12 * P + 4 * p, 2);
        if (q31 < 0 || shift < -31 || shift > 14) return trap(s, "REQUANT parameter out of range (q31 < 0 or shift outside [-31, 14] for acc_width WIDE)");
    }
    for (r = 0; r < f[RQ_ROWS]; r++)
        for (c = 0; c < f[RQ_CH]; c++) {
            int64_t pi = f[RQ_PARAM_MODE] ? 0 : c, e = f[RQ_SRC_ADDR] + r * f[RQ_SRC_STRIDE] + 2 * c;
            uint64_t braw = (uint64_t)(uint32_t)rd_elem(prm + 8 * pi, 2) | ((uint64_t)(uint32_t)rd_elem(prm + 8 * pi + 4, 2) << 32);
            int64_t bias = (int64_t)braw, q31 = rd_elem(prm + 8 * P + 4 * pi, 2);
            int shift = (int)rd_elem(prm + 12 * P + 4 * pi, 2);
            int64_t q15 = q31 < 0x7FFF0000 ? (q31 + (1 << 15)) >> 16 : 0x7FFF;
            int64_t x = wrap48((uint64_t)acc[e] | ((uint64_t)acc[e + 1] << 32));
            int64_t v = clamp64(x + clamp64(bias, -2 * lim, 2 * lim), -lim, lim - 1);
            out[n++] = (int32_t)clamp64(sat32(wide_round(v, q15, shift)) + f[RQ_OUT_ZP], f[RQ_ACT_MIN], f[RQ_ACT_MAX]);
        }
    n = 0;
    for (r = 0; r < f[RQ_ROWS]; r++)
        for (c = 0; c < f[RQ_CH]; c++)
            wr_elem(s->sram + (f[RQ_DST_ADDR] + r * f[RQ_DST_STRIDE] + c * NBYTES(dt)), dt, out[n++]);
    return TSL_OK;
}

static tsl_status requant(tsl_sim *s, const int64_t *f) {
    int64_t P = f[RQ_PARAM_MODE] ? 1 : f[RQ_CH], r, c, p, n = 0;
    const uint8_t *prm = s->sram + f[RQ_PARAM_ADDR];
    int32_t *out = out_buffer(s);
    int dt = (int)f[RQ_OUT_DTYPE];
    for (p = 0; p < P; p++) {
        int64_t q31 = rd_elem(prm + 4 * P + 4 * p, 2), shift = rd_elem(prm + 8 * P + 4 * p, 2);
        if (q31 < 0 || shift < -31 || shift > 30) return trap(s, "REQUANT parameter out of range (q31 < 0 or shift outside [-31, 30])");
    }
    for (r = 0; r < f[RQ_ROWS]; r++)
        for (c = 0; c < f[RQ_CH]; c++) {
            int64_t pi = f[RQ_PARAM_MODE] ? 0 : c, x;
            int64_t bias = rd_elem(prm + 4 * pi, 2), q31 = rd_elem(prm + 4 * P + 4 * pi, 2);
            int shift = (int)rd_elem(prm + 8 * P + 4 * pi, 2);
            if (f[RQ_SRC] == 0) x = s->acc[f[RQ_SRC_ADDR] + r * f[RQ_SRC_STRIDE] + c];
            else x = rd_elem(s->sram + (f[RQ_SRC_ADDR] + r * f[RQ_SRC_STRIDE] + 4 * c), 2);
            x = f[RQ_ROUNDING] ? single_round(sat32(x + bias), q31, shift)
                               : mbqm(sat32(x + bias), q31, shift);
            out[n++] = (int32_t)clamp64(x + f[RQ_OUT_ZP], f[RQ_ACT_MIN], f[RQ_ACT_MAX]);
        }
    n = 0;
    for (r = 0; r < f[RQ_ROWS]; r++)
        for (c = 0; c < f[RQ_CH]; c++)
            wr_elem(s->sram + (f[RQ_DST_ADDR] + r * f[RQ_DST_STRIDE] + c * NBYTES(dt)), dt, out[n++]);
    return TSL_OK;
}

/* ---- 3-D iteration (ELTWISE, LUT, UNARY) ------------------------------------------------------ */
typedef struct it3 {
    int64_t d[3];
} it3;

static int64_t at3(int64_t base, const int64_t *st, int64_t i0, int64_t i1, int64_t i2) {
    return base + i0 * st[0] + i1 * st[1] + i2 * st[2];
}

/* ELTWISE's rescale in its rounding mode (field `rounding`: 0 DOUBLE, 1 SINGLE saturated) */
static int64_t ew_scale(int64_t x, int64_t q31, int shift, int64_t single) {
    return single ? sat32(single_round(x, q31, shift)) : mbqm(x, q31, shift);
}

static tsl_status eltwise(tsl_sim *s, const int64_t *f) {
    int32_t *out = out_buffer(s);
    int64_t i0, i1, i2, n = 0, sr = f[EW_ROUNDING];
    int op = (int)f[EW_OP], ls = (int)f[EW_LSHIFT];
    for (i2 = 0; i2 < f[EW_D0 + 2]; i2++)
        for (i1 = 0; i1 < f[EW_D0 + 1]; i1++)
            for (i0 = 0; i0 < f[EW_D0]; i0++) {
                int64_t A = rd_elem(s->sram + at3(f[EW_A_ADDR], f + EW_A_S0, i0, i1, i2), (int)f[EW_A_DT]);
                int64_t B = rd_elem(s->sram + at3(f[EW_B_ADDR], f + EW_B_S0, i0, i1, i2), (int)f[EW_B_DT]);
                int64_t r;
                if (op == 2) {
                    r = sat32_mul(A - f[EW_A_ZP], B - f[EW_B_ZP]);
                } else {
                    int64_t ra = ew_scale(sat32_shl(A - f[EW_A_ZP], ls), f[EW_A_MULT], (int)f[EW_A_SHIFT], sr);
                    int64_t rb = ew_scale(sat32_shl(B - f[EW_B_ZP], ls), f[EW_B_MULT], (int)f[EW_B_SHIFT], sr);
                    switch (op) {
                    case 0: r = sat32(ra + rb); break;
                    case 1: r = sat32(ra - rb); break;
                    case 3: r = ra > rb ? ra : rb; break;
                    default: r = ra < rb ? ra : rb; break;
                    }
                }
                out[n++] = (int32_t)clamp64(ew_scale(r, f[EW_OUT_MULT], (int)f[EW_OUT_SHIFT], sr) + f[EW_OUT_ZP],
                                            f[EW_ACT_MIN], f[EW_ACT_MAX]);
            }
    n = 0;
    for (i2 = 0; i2 < f[EW_D0 + 2]; i2++)
        for (i1 = 0; i1 < f[EW_D0 + 1]; i1++)
            for (i0 = 0; i0 < f[EW_D0]; i0++)
                wr_elem(s->sram + at3(f[EW_OUT_ADDR], f + EW_OUT_S0, i0, i1, i2), (int)f[EW_OUT_DT], out[n++]);
    return TSL_OK;
}

static int64_t wrap(int64_t v, int bits) {
    int64_t m = (int64_t)1 << bits, h = m >> 1;
    return ((v + h) % m + m) % m - h;
}

static tsl_status lut(tsl_sim *s, const int64_t *f) {
    int32_t *out = out_buffer(s);
    int64_t i0, i1, i2, n = 0, base = f[LU_BASE];
    int i16 = f[LU_MODE] == 1;
    for (i2 = 0; i2 < f[LU_D0 + 2]; i2++)
        for (i1 = 0; i1 < f[LU_D0 + 1]; i1++)
            for (i0 = 0; i0 < f[LU_D0]; i0++) {
                const uint8_t *p = s->sram + at3(f[LU_SRC_ADDR], f + LU_SRC_S0, i0, i1, i2);
                if (!i16) {
                    out[n++] = (int32_t)wrap(s->lut[base + rd_elem(p, 0) + 128], 8);
                } else {
                    int64_t x = rd_elem(p, 1);
                    int64_t idx = 256 + (x >= 0 ? x >> 7 : -((-x + 127) >> 7)), off = x & 0x7f;
                    int64_t b0 = s->lut[base + idx];
                    int64_t slope = wrap(s->lut[base + idx + 1] - b0, 16);
                    int64_t t = slope * off + 64;
                    out[n++] = (int32_t)wrap(b0 + (t >= 0 ? t >> 7 : -((-t + 127) >> 7)), 16);
                }
            }
    n = 0;
    for (i2 = 0; i2 < f[LU_D0 + 2]; i2++)
        for (i1 = 0; i1 < f[LU_D0 + 1]; i1++)
            for (i0 = 0; i0 < f[LU_D0]; i0++)
                wr_elem(s->sram + at3(f[LU_DST_ADDR], f + LU_DST_S0, i0, i1, i2), i16 ? 1 : 0, out[n++]);
    return TSL_OK;
}

static uint64_t isqrt(uint64_t v) {
    uint64_t r = 0, bit = (uint64_t)1 << 62;
    while (bit > v) bit >>= 2;
    while (bit) {
        if (v >= r + bit) { v -= r + bit; r = (r >> 1) + bit; }
        else r >>= 1;
        bit >>= 2;
    }
    return r;
}

static tsl_status unary(tsl_sim *s, const int64_t *f) {
    int32_t *out = out_buffer(s);
    int64_t i0, i1, i2, n = 0;
    int fb = (int)f[UN_FRAC];
    for (i2 = 0; i2 < f[UN_D0 + 2]; i2++)
        for (i1 = 0; i1 < f[UN_D0 + 1]; i1++)
            for (i0 = 0; i0 < f[UN_D0]; i0++) {
                int64_t x = rd_elem(s->sram + at3(f[UN_SRC_ADDR], f + UN_SRC_S0, i0, i1, i2), 2), y;
                if (x <= 0) y = INT32_MAX;
                else if (f[UN_OP] == 0) y = rounding_div((int64_t)1 << fb, x);
                else y = (int64_t)isqrt(((uint64_t)1 << (2 * fb)) / (uint64_t)x);
                out[n++] = (int32_t)(y > INT32_MAX ? INT32_MAX : y);
            }
    n = 0;
    for (i2 = 0; i2 < f[UN_D0 + 2]; i2++)
        for (i1 = 0; i1 < f[UN_D0 + 1]; i1++)
            for (i0 = 0; i0 < f[UN_D0]; i0++)
                wr_elem(s->sram + at3(f[UN_DST_ADDR], f + UN_DST_S0, i0, i1, i2), 2, out[n++]);
    return TSL_OK;
}

/* ---- POOL ---------------------------------------------------------------------------------------- */
static tsl_status pool(tsl_sim *s, const int64_t *f) {
    int32_t *out = out_buffer(s);
    int dt = (int)f[PO_DTYPE], w = NBYTES(dt);
    int64_t oy, ox, c, ky, kx, n = 0;
    for (oy = 0; oy < f[PO_OUT_H]; oy++)
        for (ox = 0; ox < f[PO_OUT_W]; ox++)
            for (c = 0; c < f[PO_CH]; c++) {
                int64_t sum = 0, best = 0, count = 0, y;
                for (ky = 0; ky < f[PO_KH]; ky++) {
                    int64_t iy = oy * f[PO_STRIDE_H] - f[PO_PAD_TOP] + ky * f[PO_DIL_H];
                    if (iy < 0 || iy >= f[PO_IN_H]) continue;
                    for (kx = 0; kx < f[PO_KW]; kx++) {
                        int64_t ix = ox * f[PO_STRIDE_W] - f[PO_PAD_LEFT] + kx * f[PO_DIL_W], v;
                        if (ix < 0 || ix >= f[PO_IN_W]) continue;
                        v = rd_elem(s->sram + (f[PO_IN_ADDR] + iy * f[PO_IN_SH] + ix * f[PO_IN_SW] + c * w), dt);
                        if (count == 0 || v > best) best = v;
                        sum += v;
                        count++;
                    }
                }
                if (count == 0) return trap(s, "POOL window with no valid position");
                y = f[PO_OP] == 0 ? best : rounding_div(sum, count);
                out[n++] = (int32_t)clamp64(y, f[PO_ACT_MIN], f[PO_ACT_MAX]);
            }
    n = 0;
    for (oy = 0; oy < f[PO_OUT_H]; oy++)
        for (ox = 0; ox < f[PO_OUT_W]; ox++)
            for (c = 0; c < f[PO_CH]; c++)
                wr_elem(s->sram + (f[PO_OUT_ADDR] + oy * f[PO_OUT_SH] + ox * f[PO_OUT_SW] + c * w), dt, out[n++]);
    return TSL_OK;
}

/* ---- REDUCE -------------------------------------------------------------------------------------- */
static tsl_status reduce(tsl_sim *s, const int64_t *f) {
    int32_t *out = out_buffer(s);
    int ax = (int)f[RD_AXIS], lo = ax == 0 ? 1 : 0, hi = ax == 2 ? 1 : 2, op = (int)f[RD_OP];
    int dt = (int)f[RD_DTYPE], odt = op <= 1 ? 2 : dt;
    int64_t jl, jh, t, n = 0, i[3];
    for (jh = 0; jh < f[RD_D0 + hi]; jh++)
        for (jl = 0; jl < f[RD_D0 + lo]; jl++) {
            int64_t acc = 0, y = 0;
            int sat = 0;
            i[lo] = jl;
            i[hi] = jh;
            for (t = 0; t < f[RD_D0 + ax]; t++) {
                int64_t x;
                i[ax] = t;
                x = rd_elem(s->sram + at3(f[RD_SRC_ADDR], f + RD_SRC_S0, i[0], i[1], i[2]), dt);
                if (op == 0) acc += x - f[RD_IN_ZP];
                else if (op == 1) {
                    int64_t d = x - f[RD_IN_ZP];
                    if (sat) continue;
                    if (d > 3037000499LL || d < -3037000499LL) { sat = 1; continue; } /* d^2 > 2^63 */
                    acc += d * d;
                    if (acc > INT32_MAX) sat = 1;
                } else if (t == 0 || (op == 2 ? x > y : x < y)) {
                    y = x;
                }
            }
            if (op == 0) y = sat32(acc);
            else if (op == 1) y = sat ? INT32_MAX : acc;
            out[n++] = (int32_t)y;
        }
    n = 0;
    for (jh = 0; jh < f[RD_D0 + hi]; jh++)
        for (jl = 0; jl < f[RD_D0 + lo]; jl++)
            wr_elem(s->sram + (f[RD_DST_ADDR] + jl * f[RD_DST_S0] + jh * f[RD_DST_S1]), odt, out[n++]);
    return TSL_OK;
}

tsl_status tsl_sim_vector(tsl_sim *s, uint8_t op, const int64_t *f) {
    switch (op) {
    case TSL_OP_REQUANT: return f[RQ_ACC_WIDTH] ? requant_wide(s, f) : requant(s, f);
    case TSL_OP_ELTWISE: return eltwise(s, f);
    case TSL_OP_LUT: return lut(s, f);
    case TSL_OP_POOL: return pool(s, f);
    case TSL_OP_REDUCE: return reduce(s, f);
    case TSL_OP_UNARY: return unary(s, f);
    default: return trap(s, "not a vector instruction");
    }
}
