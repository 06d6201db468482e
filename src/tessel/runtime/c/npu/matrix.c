/* CONV, MATMUL and DWCONV (docs/isa.md §4): int8 (or int4) products summed into int32
 * accumulator entries. Sums wrap modulo 2^32 (wrap32), so they accumulate in 32-bit unsigned
 * arithmetic directly in the accumulator: OVERWRITE clears the entries first, ACCUMULATE adds.
 * in_type I16 (CONV, MATMUL): int16 inputs times the weights summed in 64-bit unsigned
 * arithmetic, then wrapped to 48 bits into a wide entry (two int32 entries, low word first).
 * CONV's 2:4 sparse weights are decoded into a dense int8 matrix in the scratch first (the
 * skipped weights zeros, the products those of the dense CONV). */
#include "model.h"

/* wt(base, offset) of docs/isa.md CONV: an int8 weight, or an int4 one (offsets in nibbles) */
static inline int32_t weight(const uint8_t *sram, int64_t base, int64_t off, int i4) {
    int64_t n;
    int v;
    if (!i4) return (int8_t)sram[base + off];
    n = 2 * base + off;
    v = (sram[n >> 1] >> (4 * (n & 1))) & 0xf;
    return v >= 8 ? v - 16 : v;
}

static void clear(uint32_t *acc, int64_t n, int overwrite) {
    if (overwrite) memset(acc, 0, (size_t)n * 4);
}

/* acc[0 .. n) += xv * (w(base, off + j * stride) - zp) */
static void axpy(uint32_t *restrict acc, int64_t n, int32_t xv, const uint8_t *restrict sram,
                 int64_t base, int64_t off, int64_t stride, int32_t zp, int i4) {
    int64_t j;
    if (!i4 && stride == 1) {
        const int8_t *restrict w = (const int8_t *)(sram + (base + off));
        for (j = 0; j < n; j++) acc[j] += (uint32_t)(xv * (w[j] - zp));
        return;
    }
    for (j = 0; j < n; j++) acc[j] += (uint32_t)(xv * (weight(sram, base, off + j * stride, i4) - zp));
}

/* where a CONV reads its weights: wt(base, t * sk + ci * sci + co * sco) of `mem` */
typedef struct wsrc {
    const uint8_t *mem;
    int64_t base, sk, sci, sco;
    int32_t zp;
    int i4;
} wsrc;

/* the wide entry at int32 entry e: OVERWRITE -> wrap48(sum), ACCUMULATE -> wrap48(old + sum) */
static void wide_put(uint32_t *acc, int64_t e, uint64_t sum, int overwrite) {
    uint64_t old = overwrite ? 0 : ((uint64_t)acc[e] | ((uint64_t)acc[e + 1] << 32));
    uint64_t v = (uint64_t)wrap48(old + sum);
    acc[e] = (uint32_t)v;
    acc[e + 1] = (uint32_t)(v >> 32);
}

/* CONV in_type I16: per output (pixel, channel), the window's int16 x weight products */
static void conv16(tsl_sim *s, const int64_t *f, const wsrc *w) {
    int64_t oy, ox, co, ky, kx, ci, cout = f[CV_COUT], cin = f[CV_CIN], kw = f[CV_KW];
    int overwrite = f[CV_MODE] == 0;
    for (oy = 0; oy < f[CV_OUT_H]; oy++)
        for (ox = 0; ox < f[CV_OUT_W]; ox++) {
            int64_t e0 = f[CV_ACC_ADDR] + (oy * f[CV_OUT_W] + ox) * f[CV_ACC_STRIDE];
            for (co = 0; co < cout; co++) {
                uint64_t sum = 0;
                for (ky = 0; ky < f[CV_KH]; ky++) {
                    int64_t iy = oy * f[CV_STRIDE_H] - f[CV_PAD_TOP] + ky * f[CV_DIL_H];
                    if (iy < 0 || iy >= f[CV_IN_H]) continue;
                    for (kx = 0; kx < kw; kx++) {
                        int64_t ix = ox * f[CV_STRIDE_W] - f[CV_PAD_LEFT] + kx * f[CV_DIL_W];
                        int64_t row, koff;
                        if (ix < 0 || ix >= f[CV_IN_W]) continue;
                        row = f[CV_IN_ADDR] + iy * f[CV_IN_SH] + ix * f[CV_IN_SW];
                        koff = (ky * kw + kx) * w->sk + co * w->sco;
                        for (ci = 0; ci < cin; ci++) {
                            int64_t xv = rd_elem(s->sram + (row + 2 * ci), 1);
                            sum += (uint64_t)(xv * (weight(w->mem, w->base, koff + ci * w->sci, w->i4) - w->zp));
                        }
                    }
                }
                wide_put((uint32_t *)s->acc, e0 + 2 * co, sum, overwrite);
            }
        }
}

static void conv(tsl_sim *s, const int64_t *f, const wsrc *w) {
    const uint8_t *x = s->sram;
    int64_t oy, ox, ky, kx, ci;
    int64_t cout = f[CV_COUT], cin = f[CV_CIN], kw = f[CV_KW];
    int32_t in_zp = (int32_t)f[CV_IN_ZP];
    int overwrite = f[CV_MODE] == 0;
    for (oy = 0; oy < f[CV_OUT_H]; oy++)
        for (ox = 0; ox < f[CV_OUT_W]; ox++) {
            uint32_t *acc = (uint32_t *)s->acc + (f[CV_ACC_ADDR] + (oy * f[CV_OUT_W] + ox) * f[CV_ACC_STRIDE]);
            clear(acc, cout, overwrite);
            for (ky = 0; ky < f[CV_KH]; ky++) {
                int64_t iy = oy * f[CV_STRIDE_H] - f[CV_PAD_TOP] + ky * f[CV_DIL_H];
                if (iy < 0 || iy >= f[CV_IN_H]) continue;
                for (kx = 0; kx < kw; kx++) {
                    int64_t ix = ox * f[CV_STRIDE_W] - f[CV_PAD_LEFT] + kx * f[CV_DIL_W];
                    int64_t row, koff;
                    if (ix < 0 || ix >= f[CV_IN_W]) continue;
                    row = f[CV_IN_ADDR] + iy * f[CV_IN_SH] + ix * f[CV_IN_SW];
                    koff = (ky * kw + kx) * w->sk;
                    for (ci = 0; ci < cin; ci++) {
                        int32_t xv = (int8_t)x[row + ci] - in_zp;
                        if (xv == 0) continue;
                        axpy(acc, cout, xv, w->mem, w->base, koff + ci * w->sci, w->sco, w->zp, w->i4);
                    }
                }
            }
        }
}

/* 2:4 sparse weights (docs/isa.md CONV, w_type I8_2_4 / I4_2_4) as the dense int8 matrix
 * [kh*kw][cin][cout] in `out`: each group's two values at the positions its index nibble names,
 * zeros elsewhere. NULL, or why a group's indices are malformed (the first not below the
 * second); every index is checked before the CONV writes anything. */
static const char *decode_2_4(const uint8_t *sram, const int64_t *f, int8_t *out) {
    int64_t taps = f[CV_KH] * f[CV_KW], cin = f[CV_CIN], cout = f[CV_COUT];
    int64_t sk = f[CV_W_SK], sci = f[CV_W_SCI], sco = f[CV_W_SCO], base = f[CV_W_ADDR];
    int64_t n = 2 * tsl_sim_sparse_indices(f), t, g, co;
    int i4 = (int)(f[CV_W_TYPE] & 1);
    memset(out, 0, (size_t)(taps * cin * cout));
    for (t = 0; t < taps; t++)
        for (g = 0; g < cin / 4; g++)
            for (co = 0; co < cout; co++, n++) {
                unsigned m = (sram[n >> 1] >> (4 * (n & 1))) & 0xfu, i0 = m & 3u, i1 = m >> 2;
                int64_t off = t * sk + 2 * g * sci + co * sco;
                int8_t *dense = out + (t * cin + 4 * g) * cout + co;
                if (i0 >= i1) return "malformed 2:4 indices: a group's first index is not below its second";
                dense[i0 * cout] = (int8_t)weight(sram, base, off, i4);
                dense[i1 * cout] = (int8_t)weight(sram, base, off + sci, i4);
            }
    return NULL;
}

static tsl_status conv_op(tsl_sim *s, const int64_t *f) {
    int64_t cin = f[CV_CIN], cout = f[CV_COUT];
    uint64_t macs = (uint64_t)(f[CV_OUT_H] * f[CV_OUT_W] * cout) * (uint64_t)(f[CV_KH] * f[CV_KW] * cin);
    wsrc w;
    w.mem = s->sram;
    w.base = f[CV_W_ADDR];
    w.sk = f[CV_W_SK];
    w.sci = f[CV_W_SCI];
    w.sco = f[CV_W_SCO];
    w.zp = (int32_t)f[CV_W_ZP];
    w.i4 = (int)(f[CV_W_TYPE] & 1);
    if (f[CV_W_TYPE] >= 2) { /* decoded into the scratch (kh*kw*cin*cout <= SRAM bytes, rule 5) */
        const char *why = decode_2_4(s->sram, f, (int8_t *)s->scratch);
        if (why) {
            s->trap = why;
            return TSL_E_NPU_TRAP;
        }
        w.mem = s->scratch;
        w.base = 0;
        w.sk = cin * cout;
        w.sci = cout;
        w.sco = 1;
        w.i4 = 0;
        macs /= 2; /* the array runs the kept half of the reduction */
    }
    if (f[CV_IN_TYPE]) conv16(s, f, &w);
    else conv(s, f, &w);
    s->macs += macs;
    return TSL_OK;
}

/* MATMUL in_type I16: A int16 at byte addresses, each output a wide entry */
static void matmul16(tsl_sim *s, const int64_t *f) {
    int64_t i, j, t, n = f[MM_N];
    int32_t b_zp = (int32_t)f[MM_B_ZP];
    int i4 = (int)f[MM_B_TYPE], overwrite = f[MM_MODE] == 0;
    for (i = 0; i < f[MM_M]; i++)
        for (j = 0; j < n; j++) {
            uint64_t sum = 0;
            for (t = 0; t < f[MM_K]; t++) {
                int64_t av = rd_elem(s->sram + (f[MM_A_ADDR] + i * f[MM_A_SM] + t * f[MM_A_SK]), 1);
                sum += (uint64_t)(av * (weight(s->sram, f[MM_B_ADDR], t * f[MM_B_SK] + j * f[MM_B_SN], i4) - b_zp));
            }
            wide_put((uint32_t *)s->acc, f[MM_ACC_ADDR] + i * f[MM_ACC_STRIDE] + 2 * j, sum, overwrite);
        }
}

static void matmul(tsl_sim *s, const int64_t *f) {
    int64_t i, t, n = f[MM_N];
    int32_t a_zp = (int32_t)f[MM_A_ZP], b_zp = (int32_t)f[MM_B_ZP];
    int i4 = (int)f[MM_B_TYPE], overwrite = f[MM_MODE] == 0;
    if (f[MM_IN_TYPE]) {
        matmul16(s, f);
        return;
    }
    for (i = 0; i < f[MM_M]; i++) {
        uint32_t *acc = (uint32_t *)s->acc + (f[MM_ACC_ADDR] + i * f[MM_ACC_STRIDE]);
        clear(acc, n, overwrite);
        for (t = 0; t < f[MM_K]; t++) {
            int32_t av = (int8_t)s->sram[f[MM_A_ADDR] + i * f[MM_A_SM] + t * f[MM_A_SK]] - a_zp;
            if (av == 0) continue;
            axpy(acc, n, av, s->sram, f[MM_B_ADDR], t * f[MM_B_SK], f[MM_B_SN], b_zp, i4);
        }
    }
    s->macs += (uint64_t)(f[MM_M] * n) * (uint64_t)f[MM_K];
}

static void dwconv(tsl_sim *s, const int64_t *f) {
    const uint8_t *x = s->sram;
    int64_t oy, ox, ky, kx, c, ch = f[DW_CH], kw = f[DW_KW];
    int32_t in_zp = (int32_t)f[DW_IN_ZP];
    int i4 = (int)f[DW_W_TYPE], overwrite = f[DW_MODE] == 0;
    for (oy = 0; oy < f[DW_OUT_H]; oy++)
        for (ox = 0; ox < f[DW_OUT_W]; ox++) {
            uint32_t *acc = (uint32_t *)s->acc + (f[DW_ACC_ADDR] + (oy * f[DW_OUT_W] + ox) * f[DW_ACC_STRIDE]);
            clear(acc, ch, overwrite);
            for (ky = 0; ky < f[DW_KH]; ky++) {
                int64_t iy = oy * f[DW_STRIDE_H] - f[DW_PAD_TOP] + ky * f[DW_DIL_H];
                if (iy < 0 || iy >= f[DW_IN_H]) continue;
                for (kx = 0; kx < kw; kx++) {
                    int64_t ix = ox * f[DW_STRIDE_W] - f[DW_PAD_LEFT] + kx * f[DW_DIL_W];
                    const int8_t *row;
                    int64_t koff;
                    if (ix < 0 || ix >= f[DW_IN_W]) continue;
                    row = (const int8_t *)x + (f[DW_IN_ADDR] + iy * f[DW_IN_SH] + ix * f[DW_IN_SW]);
                    koff = (ky * kw + kx) * f[DW_W_SK];
                    if (!i4) {
                        const int8_t *w = (const int8_t *)x + (f[DW_W_ADDR] + koff);
                        for (c = 0; c < ch; c++) acc[c] += (uint32_t)((row[c] - in_zp) * w[c]);
                    } else {
                        for (c = 0; c < ch; c++)
                            acc[c] += (uint32_t)((row[c] - in_zp) * weight(x, f[DW_W_ADDR], koff + c, 1));
                    }
                }
            }
        }
    s->macs += (uint64_t)(f[DW_OUT_H] * f[DW_OUT_W] * ch) * (uint64_t)(f[DW_KH] * kw);
}

tsl_status tsl_sim_matrix(tsl_sim *s, uint8_t op, const int64_t *f) {
    if (op == TSL_OP_CONV) return conv_op(s, f);
    if (op == TSL_OP_MATMUL) matmul(s, f);
    else dwconv(s, f);
    return TSL_OK;
}
