/* The static rules of docs/isa.md §3, checked before each instruction runs: a unit the target
 * lacks (the weight decoder, 2:4 sparsity), operand boxes in their memories (1, 2), each
 * instruction's rules (3, 4: accumulator rows apart, clamps within the output type, 2:4 sparse
 * weights on CONV only, in groups of four channels, symmetric), the resource bounds (5) and
 * destinations that would write a byte twice (6, decided arithmetically as §3 describes). */
#include "model.h"

enum { SP_SRAM, SP_ACC, SP_LUT, SP_EXT };

typedef struct rbox {
    int space, mem;
    int64_t lo, hi;
} rbox;

static rbox pattern(int space, int64_t base, const int64_t *dims, const int64_t *strides, int n,
                    int64_t elem) {
    rbox b;
    int k;
    b.space = space;
    b.mem = 0;
    b.lo = b.hi = base;
    for (k = 0; k < n; k++) {
        int64_t span = strides[k] * (dims[k] - 1);
        if (span < 0) b.lo += span; else b.hi += span;
    }
    b.hi += elem;
    return b;
}

static int64_t floor_half(int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

/* the SRAM bytes of an int4 weight pattern whose strides count nibbles */
static rbox nibbles(int64_t byte_addr, const int64_t *dims, const int64_t *strides, int n) {
    rbox b = pattern(SP_SRAM, 2 * byte_addr, dims, strides, n, 1);
    b.lo = floor_half(b.lo);
    b.hi = floor_half(b.hi + 1);
    return b;
}

static rbox range(int space, int64_t lo, int64_t hi) {
    rbox b;
    b.space = space;
    b.mem = 0;
    b.lo = lo;
    b.hi = hi;
    return b;
}

/* CONV's weights (docs/isa.md CONV): int8 bytes or int4 nibbles; 2:4 sparse, the values box
 * (kh*kw, cin/2, cout) and the index nibbles after it, one per group of four channels */
static rbox conv_weights(const int64_t *f) {
    int64_t d[3], s[3];
    int wt = (int)f[CV_W_TYPE], sparse = wt >= 2;
    rbox b;
    d[0] = f[CV_KH] * f[CV_KW]; d[1] = sparse ? (f[CV_CIN] + 1) / 2 : f[CV_CIN]; d[2] = f[CV_COUT];
    s[0] = f[CV_W_SK]; s[1] = f[CV_W_SCI]; s[2] = f[CV_W_SCO];
    b = (wt & 1) ? nibbles(f[CV_W_ADDR], d, s, 3) : pattern(SP_SRAM, f[CV_W_ADDR], d, s, 3, 1);
    if (sparse) b.hi += (d[0] * (f[CV_CIN] / 4) * f[CV_COUT] + 1) / 2;
    return b;
}

int64_t tsl_sim_sparse_indices(const int64_t *f) {
    rbox b = conv_weights(f);
    return b.hi - (f[CV_KH] * f[CV_KW] * (f[CV_CIN] / 4) * f[CV_COUT] + 1) / 2;
}

/* the instruction's operand boxes (docs/isa.md §4, "Boxes"); returns how many */
static int boxes(uint8_t op, const int64_t *f, rbox *b) {
    int64_t d[4], s[4];
    switch (op) {
    case TSL_OP_DMA_LOAD: case TSL_OP_DMA_STORE: {
        int64_t w = NBYTES(f[DMA_DTYPE]);
        b[0] = pattern(SP_EXT, f[DMA_EXT_ADDR], f + DMA_D0, f + DMA_EXT_S0, 4, w);
        b[0].mem = (int)f[DMA_MEM];
        b[1] = pattern(SP_SRAM, f[DMA_SRAM_ADDR], f + DMA_D0, f + DMA_SRAM_S0, 4, w);
        return 2;
    }
    case TSL_OP_DMA_LOAD_W:
        b[0] = range(SP_EXT, f[WL_EXT_ADDR], f[WL_EXT_ADDR] + f[WL_EXT_BYTES]);
        b[0].mem = (int)f[WL_MEM];
        b[1] = range(SP_SRAM, f[WL_SRAM_ADDR], f[WL_SRAM_ADDR] + f[WL_OUT_BYTES]);
        return 2;
    case TSL_OP_CONV: case TSL_OP_DWCONV: {
        int conv = op == TSL_OP_CONV;
        int64_t ch = conv ? f[CV_CIN] : f[DW_CH], kk = f[CV_KH] * f[CV_KW];
        int64_t oo = f[CV_OUT_H] * f[CV_OUT_W], e = conv && f[CV_IN_TYPE] ? 2 : 1;
        d[0] = f[CV_IN_H]; d[1] = f[CV_IN_W]; d[2] = ch;
        s[0] = f[CV_IN_SH]; s[1] = f[CV_IN_SW]; s[2] = e;
        b[0] = pattern(SP_SRAM, f[CV_IN_ADDR], d, s, 3, e);
        if (conv) {
            b[1] = conv_weights(f);
            d[0] = oo; d[1] = f[CV_COUT]; s[0] = f[CV_ACC_STRIDE]; s[1] = e;
            b[2] = pattern(SP_ACC, f[CV_ACC_ADDR], d, s, 2, e);
        } else {
            d[0] = kk; d[1] = ch; s[0] = f[DW_W_SK]; s[1] = 1;
            b[1] = (f[DW_W_TYPE] & 1) ? nibbles(f[DW_W_ADDR], d, s, 2) : pattern(SP_SRAM, f[DW_W_ADDR], d, s, 2, 1);
            d[0] = oo; d[1] = ch; s[0] = f[DW_ACC_STRIDE]; s[1] = 1;
            b[2] = pattern(SP_ACC, f[DW_ACC_ADDR], d, s, 2, 1);
        }
        return 3;
    }
    case TSL_OP_MATMUL: {
        int64_t e = f[MM_IN_TYPE] ? 2 : 1;
        d[0] = f[MM_M]; d[1] = f[MM_K]; s[0] = f[MM_A_SM]; s[1] = f[MM_A_SK];
        b[0] = pattern(SP_SRAM, f[MM_A_ADDR], d, s, 2, e);
        d[0] = f[MM_K]; d[1] = f[MM_N]; s[0] = f[MM_B_SK]; s[1] = f[MM_B_SN];
        b[1] = (f[MM_B_TYPE] & 1) ? nibbles(f[MM_B_ADDR], d, s, 2) : pattern(SP_SRAM, f[MM_B_ADDR], d, s, 2, 1);
        d[0] = f[MM_M]; d[1] = f[MM_N]; s[0] = f[MM_ACC_STRIDE]; s[1] = e;
        b[2] = pattern(SP_ACC, f[MM_ACC_ADDR], d, s, 2, e);
        return 3;
    }
    case TSL_OP_REQUANT: {
        int64_t P = f[RQ_PARAM_MODE] ? 1 : f[RQ_CH], w = NBYTES(f[RQ_OUT_DTYPE]);
        int64_t e = f[RQ_ACC_WIDTH] ? 2 : 1;
        d[0] = f[RQ_ROWS]; d[1] = f[RQ_CH];
        s[0] = f[RQ_SRC_STRIDE];
        s[1] = f[RQ_SRC] ? 4 : e;
        b[0] = pattern(f[RQ_SRC] ? SP_SRAM : SP_ACC, f[RQ_SRC_ADDR], d, s, 2, f[RQ_SRC] ? 4 : e);
        b[1] = range(SP_SRAM, f[RQ_PARAM_ADDR], f[RQ_PARAM_ADDR] + (f[RQ_ACC_WIDTH] ? 16 : 12) * P);
        s[0] = f[RQ_DST_STRIDE]; s[1] = w;
        b[2] = pattern(SP_SRAM, f[RQ_DST_ADDR], d, s, 2, w);
        return 3;
    }
    case TSL_OP_ELTWISE:
        b[0] = pattern(SP_SRAM, f[EW_A_ADDR], f + EW_D0, f + EW_A_S0, 3, NBYTES(f[EW_A_DT]));
        b[1] = pattern(SP_SRAM, f[EW_B_ADDR], f + EW_D0, f + EW_B_S0, 3, NBYTES(f[EW_B_DT]));
        b[2] = pattern(SP_SRAM, f[EW_OUT_ADDR], f + EW_D0, f + EW_OUT_S0, 3, NBYTES(f[EW_OUT_DT]));
        return 3;
    case TSL_OP_LUT: {
        int64_t w = f[LU_MODE] ? 2 : 1;
        b[0] = pattern(SP_SRAM, f[LU_SRC_ADDR], f + LU_D0, f + LU_SRC_S0, 3, w);
        b[1] = pattern(SP_SRAM, f[LU_DST_ADDR], f + LU_D0, f + LU_DST_S0, 3, w);
        b[2] = range(SP_LUT, f[LU_BASE], f[LU_BASE] + (f[LU_MODE] ? 513 : 256));
        return 3;
    }
    case TSL_OP_LUT_LOAD:
        b[0] = range(SP_SRAM, f[LL_SRC_ADDR], f[LL_SRC_ADDR] + 2 * f[LL_COUNT]);
        b[1] = range(SP_LUT, f[LL_BASE], f[LL_BASE] + f[LL_COUNT]);
        return 2;
    case TSL_OP_POOL: {
        int64_t w = NBYTES(f[PO_DTYPE]);
        d[0] = f[PO_IN_H]; d[1] = f[PO_IN_W]; d[2] = f[PO_CH];
        s[0] = f[PO_IN_SH]; s[1] = f[PO_IN_SW]; s[2] = w;
        b[0] = pattern(SP_SRAM, f[PO_IN_ADDR], d, s, 3, w);
        d[0] = f[PO_OUT_H]; d[1] = f[PO_OUT_W];
        s[0] = f[PO_OUT_SH]; s[1] = f[PO_OUT_SW];
        b[1] = pattern(SP_SRAM, f[PO_OUT_ADDR], d, s, 3, w);
        return 2;
    }
    case TSL_OP_REDUCE: {
        int ax = (int)f[RD_AXIS], lo = ax == 0 ? 1 : 0, hi = ax == 2 ? 1 : 2;
        int64_t w = f[RD_OP] <= 1 ? 4 : NBYTES(f[RD_DTYPE]);
        b[0] = pattern(SP_SRAM, f[RD_SRC_ADDR], f + RD_D0, f + RD_SRC_S0, 3, NBYTES(f[RD_DTYPE]));
        d[0] = f[RD_D0 + lo]; d[1] = f[RD_D0 + hi];
        b[1] = pattern(SP_SRAM, f[RD_DST_ADDR], d, f + RD_DST_S0, 2, w);
        return 2;
    }
    case TSL_OP_COPY:
        b[0] = pattern(SP_SRAM, f[CP_SRC_ADDR], f + CP_D0, f + CP_SRC_S0, 4, NBYTES(f[CP_DTYPE]));
        b[1] = pattern(SP_SRAM, f[CP_DST_ADDR], f + CP_D0, f + CP_DST_S0, 4, NBYTES(f[CP_DTYPE]));
        return 2;
    case TSL_OP_UNARY:
        b[0] = pattern(SP_SRAM, f[UN_SRC_ADDR], f + UN_D0, f + UN_SRC_S0, 3, 4);
        b[1] = pattern(SP_SRAM, f[UN_DST_ADDR], f + UN_D0, f + UN_DST_S0, 3, 4);
        return 2;
    default:
        return 0;
    }
}

static const char *space_error(const tsl_sim *s, const rbox *b) {
    uint64_t size;
    switch (b->space) {
    case SP_SRAM: size = s->cfg.sram_bytes; break;
    case SP_ACC: size = s->cfg.acc_entries; break;
    case SP_LUT: size = s->cfg.lut_entries; break;
    default:
        if ((uint32_t)b->mem >= s->cfg.offchip_count) return "DMA names an off-chip memory the target does not have";
        size = s->cfg.offchip_size[b->mem];
    }
    if (b->lo < 0 || (uint64_t)b->hi > size) return "an operand box lies outside its memory";
    return NULL;
}

/* ---- rules 3 and 4 ------------------------------------------------------------------------- */
static int in_type(int64_t lo, int64_t hi, int dt) {
    int64_t tmin = dt == 0 ? -128 : (dt == 1 ? -32768 : INT32_MIN);
    int64_t tmax = dt == 0 ? 127 : (dt == 1 ? 32767 : INT32_MAX);
    return tmin <= lo && lo <= hi && hi <= tmax;
}

/* in_type I16 (docs/isa.md rule 4): symmetric input, dense weights, even accumulator entries */
static const char *wide_error(int64_t zp, int64_t wt, int64_t acc_addr, int64_t acc_stride) {
    if (zp) return "in_type I16 needs its input zero point 0";
    if (wt >= 2) return "in_type I16 takes dense weights only";
    if (acc_addr % 2 || acc_stride % 2) return "in_type I16 needs acc_addr and acc_stride even";
    return NULL;
}

static const char *rule_error(uint8_t op, const int64_t *f) {
    switch (op) {
    case TSL_OP_CONV:
        if (f[CV_ACC_STRIDE] < (f[CV_IN_TYPE] ? 2 : 1) * f[CV_COUT]) return "acc_stride < cout (2 * cout for in_type I16)";
        if (f[CV_W_TYPE] >= 2 && f[CV_CIN] % 4) return "2:4 sparse weights need cin a multiple of 4";
        if (f[CV_W_TYPE] >= 2 && f[CV_W_ZP]) return "2:4 sparse weights need w_zp 0";
        return f[CV_IN_TYPE] ? wide_error(f[CV_IN_ZP], f[CV_W_TYPE], f[CV_ACC_ADDR], f[CV_ACC_STRIDE]) : NULL;
    case TSL_OP_MATMUL:
        if (f[MM_ACC_STRIDE] < (f[MM_IN_TYPE] ? 2 : 1) * f[MM_N]) return "acc_stride < n (2 * n for in_type I16)";
        if (f[MM_B_TYPE] >= 2) return "MATMUL takes dense weights only (b_type I8 or I4)";
        return f[MM_IN_TYPE] ? wide_error(f[MM_A_ZP], f[MM_B_TYPE], f[MM_ACC_ADDR], f[MM_ACC_STRIDE]) : NULL;
    case TSL_OP_DWCONV:
        if (f[DW_ACC_STRIDE] < f[DW_CH]) return "acc_stride < ch";
        return f[DW_W_TYPE] >= 2 ? "DWCONV takes dense weights only (w_type I8 or I4)" : NULL;
    case TSL_OP_REQUANT:
        if (f[RQ_ACC_WIDTH] && f[RQ_SRC]) return "acc_width WIDE reads the accumulator (src ACC)";
        if (f[RQ_ACC_WIDTH] && (f[RQ_SRC_ADDR] % 2 || f[RQ_SRC_STRIDE] % 2)) return "acc_width WIDE needs src_addr and src_stride even";
        if (f[RQ_ACC_WIDTH] && f[RQ_OUT_DTYPE] == 2) return "acc_width WIDE writes I8 or I16";
        return in_type(f[RQ_ACT_MIN], f[RQ_ACT_MAX], (int)f[RQ_OUT_DTYPE]) ? NULL : "clamp outside the output type";
    case TSL_OP_ELTWISE:
        return in_type(f[EW_ACT_MIN], f[EW_ACT_MAX], (int)f[EW_OUT_DT]) ? NULL : "clamp outside the output type";
    case TSL_OP_POOL:
        if (f[PO_DTYPE] == 2) return "POOL takes I8 or I16";
        return in_type(f[PO_ACT_MIN], f[PO_ACT_MAX], (int)f[PO_DTYPE]) ? NULL : "clamp outside the type";
    default:
        return NULL;
    }
}

/* ---- rule 5 ---------------------------------------------------------------------------------- */
static uint64_t prod(const int64_t *d, int n) {
    uint64_t p = 1;
    int k;
    for (k = 0; k < n; k++) {
        p *= (uint64_t)d[k];
        if (p > ((uint64_t)1 << 62)) return (uint64_t)1 << 62;
    }
    return p;
}

static uint64_t frame(int64_t out, int64_t stride, int64_t k, int64_t dil) {
    return (uint64_t)((out - 1) * stride + (k - 1) * dil + 1);
}

static const char *resource_error(const tsl_sim *s, uint8_t op, const int64_t *f) {
    uint64_t sram = s->cfg.sram_bytes, e[2] = {0, 0}, fr = 0, im2col = 0;
    int64_t t[4];
    switch (op) {
    case TSL_OP_DMA_LOAD: case TSL_OP_DMA_STORE: e[0] = prod(f + DMA_D0, 4); break;
    case TSL_OP_DMA_LOAD_W: e[0] = (uint64_t)f[WL_OUT_BYTES]; break;
    case TSL_OP_CONV:
        t[0] = f[CV_IN_H]; t[1] = f[CV_IN_W]; t[2] = f[CV_CIN];
        e[0] = prod(t, 3);
        t[0] = f[CV_KH]; t[1] = f[CV_KW]; t[2] = f[CV_CIN]; t[3] = f[CV_COUT];
        e[1] = prod(t, 4);
        fr = frame(f[CV_OUT_H], f[CV_STRIDE_H], f[CV_KH], f[CV_DIL_H]) *
             frame(f[CV_OUT_W], f[CV_STRIDE_W], f[CV_KW], f[CV_DIL_W]) * (uint64_t)f[CV_CIN];
        t[0] = f[CV_OUT_H] * f[CV_OUT_W]; t[1] = f[CV_KH] * f[CV_KW]; t[2] = f[CV_CIN];
        im2col = prod(t, 3);
        break;
    case TSL_OP_MATMUL:
        e[0] = (uint64_t)(f[MM_M] * f[MM_K]);
        e[1] = (uint64_t)(f[MM_K] * f[MM_N]);
        break;
    case TSL_OP_REQUANT: e[0] = (uint64_t)(f[RQ_ROWS] * f[RQ_CH]); break;
    case TSL_OP_ELTWISE: e[0] = prod(f + EW_D0, 3); break;
    case TSL_OP_LUT: e[0] = prod(f + LU_D0, 3); break;
    case TSL_OP_POOL: case TSL_OP_DWCONV: {
        int pool = op == TSL_OP_POOL;
        int64_t ch = pool ? f[PO_CH] : f[DW_CH];
        const int64_t *w = pool ? f + PO_KH : f + DW_KH; /* kh kw sh sw dh dw pt pl oh ow */
        t[0] = pool ? f[PO_IN_H] : f[DW_IN_H]; t[1] = pool ? f[PO_IN_W] : f[DW_IN_W]; t[2] = ch;
        e[0] = prod(t, 3);
        t[0] = w[8]; t[1] = w[9]; t[2] = ch;
        e[1] = prod(t, 3);
        fr = frame(w[8], w[2], w[0], w[4]) * frame(w[9], w[3], w[1], w[5]) * (uint64_t)ch;
        break;
    }
    case TSL_OP_REDUCE: e[0] = prod(f + RD_D0, 3); break;
    case TSL_OP_COPY: e[0] = prod(f + CP_D0, 4); break;
    case TSL_OP_UNARY: e[0] = prod(f + UN_D0, 3); break;
    default: break;
    }
    if (e[0] > sram || e[1] > sram) return "an SRAM operand has more elements than the SRAM has bytes";
    if (fr > WINDOW_FACTOR * sram || im2col > WINDOW_FACTOR * sram)
        return "window frame or im2col above 64 x the SRAM (static resource bound)";
    return NULL;
}

/* ---- rule 6 ------------------------------------------------------------------------------------ */
static int64_t floor_div(int64_t a, int64_t b) { /* b > 0 */
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/* the exact search of docs/isa.md §3 rule 6 over the difference vectors of all dimensions but
 * the longest (`ns`, `ss` sorted by stride; the longest solved in closed form) */
static int overlap_search(const int64_t *ns, const int64_t *ss, int n, int64_t elem) {
    int last = 0, k, r = 0;
    int64_t rn[4], rs[4], d[4], nl, sl;
    uint64_t work = 1;
    for (k = 1; k < n; k++)
        if (ns[k] > ns[last]) last = k;
    nl = ns[last];
    sl = ss[last];
    for (k = 0; k < n; k++) {
        if (k == last) continue;
        rn[r] = ns[k];
        rs[r] = ss[k];
        work *= (uint64_t)(2 * ns[k] - 1);
        if (work > MAX_OVERLAP_WORK) return 1;
        r++;
    }
    if (sl < elem) return 1;
    for (k = 0; k < r; k++) d[k] = -(rn[k] - 1);
    for (;;) {
        int64_t partial = 0;
        int zero = 1;
        for (k = 0; k < r; k++) {
            partial += d[k] * rs[k];
            if (d[k]) zero = 0;
        }
        if (!zero) {
            int64_t q = floor_div(-partial, sl), c;
            for (c = q; c <= q + 1; c++) {
                int64_t dl = c < -(nl - 1) ? -(nl - 1) : (c > nl - 1 ? nl - 1 : c);
                int64_t v = partial + dl * sl;
                if ((v < 0 ? -v : v) < elem) return 1;
            }
        }
        for (k = 0; k < r; k++) {
            if (++d[k] <= rn[k] - 1) break;
            d[k] = -(rn[k] - 1);
        }
        if (k == r) return 0;
    }
}

static int self_overlapping(const int64_t *dims, const int64_t *strides, int n, int64_t elem) {
    int64_t ns[4], ss[4], covered = elem;
    uint64_t count = 1, span = (uint64_t)elem;
    int m = 0, k, j;
    for (k = 0; k < n; k++) {
        if (dims[k] <= 1) continue;
        ns[m] = dims[k];
        ss[m] = strides[k] < 0 ? -strides[k] : strides[k];
        m++;
    }
    for (k = 1; k < m; k++) /* stable sort by stride */
        for (j = k; j > 0 && ss[j - 1] > ss[j]; j--) {
            int64_t t = ss[j]; ss[j] = ss[j - 1]; ss[j - 1] = t;
            t = ns[j]; ns[j] = ns[j - 1]; ns[j - 1] = t;
        }
    for (k = 0; k < m; k++) {
        if (ss[k] == 0) return 1;
        count *= (uint64_t)ns[k];
        if (count > ((uint64_t)1 << 60)) return 1; /* far more elements than bytes spanned */
        span += (uint64_t)(ss[k] * (ns[k] - 1));
    }
    if (count * (uint64_t)elem > span) return 1;
    for (k = 0; k < m; k++) {
        if (ss[k] < covered) break;
        covered += ss[k] * (ns[k] - 1);
    }
    if (k == m) return 0;
    return overlap_search(ns, ss, m, elem);
}

static const char *overlap_error(uint8_t op, const int64_t *f) {
    int64_t d[3], s[3];
    switch (op) {
    case TSL_OP_DMA_LOAD:
        return self_overlapping(f + DMA_D0, f + DMA_SRAM_S0, 4, NBYTES(f[DMA_DTYPE])) ? "destination written twice" : NULL;
    case TSL_OP_DMA_STORE:
        return self_overlapping(f + DMA_D0, f + DMA_EXT_S0, 4, NBYTES(f[DMA_DTYPE])) ? "destination written twice" : NULL;
    case TSL_OP_COPY:
        return self_overlapping(f + CP_D0, f + CP_DST_S0, 4, NBYTES(f[CP_DTYPE])) ? "destination written twice" : NULL;
    case TSL_OP_ELTWISE:
        return self_overlapping(f + EW_D0, f + EW_OUT_S0, 3, NBYTES(f[EW_OUT_DT])) ? "destination written twice" : NULL;
    case TSL_OP_LUT:
        return self_overlapping(f + LU_D0, f + LU_DST_S0, 3, f[LU_MODE] ? 2 : 1) ? "destination written twice" : NULL;
    case TSL_OP_UNARY:
        return self_overlapping(f + UN_D0, f + UN_DST_S0, 3, 4) ? "destination written twice" : NULL;
    case TSL_OP_REQUANT:
        d[0] = f[RQ_CH]; d[1] = f[RQ_ROWS];
        s[0] = NBYTES(f[RQ_OUT_DTYPE]); s[1] = f[RQ_DST_STRIDE];
        return self_overlapping(d, s, 2, s[0]) ? "destination written twice" : NULL;
    case TSL_OP_POOL:
        d[0] = f[PO_CH]; d[1] = f[PO_OUT_W]; d[2] = f[PO_OUT_H];
        s[0] = NBYTES(f[PO_DTYPE]); s[1] = f[PO_OUT_SW]; s[2] = f[PO_OUT_SH];
        return self_overlapping(d, s, 3, s[0]) ? "destination written twice" : NULL;
    case TSL_OP_REDUCE: {
        int ax = (int)f[RD_AXIS], j = 0, k;
        for (k = 0; k < 3; k++)
            if (k != ax) d[j++] = f[RD_D0 + k];
        return self_overlapping(d, f + RD_DST_S0, 2, f[RD_OP] <= 1 ? 4 : NBYTES(f[RD_DTYPE])) ? "destination written twice" : NULL;
    }
    default:
        return NULL;
    }
}

const char *tsl_sim_static_error(const tsl_sim *s, uint8_t op, const int64_t *f) {
    rbox b[4];
    int n = boxes(op, f, b), k;
    const char *why;
    if (op == TSL_OP_DMA_LOAD_W && !s->cfg.wdecoder) return "DMA_LOAD_W needs the weight decoder (wdecoder.enabled)";
    if (op == TSL_OP_CONV && f[CV_W_TYPE] >= 2 && !s->cfg.sparse)
        return "CONV with 2:4 sparse weights needs sparsity support (sparse.enabled)";
    for (k = 0; k < n; k++)
        if ((why = space_error(s, &b[k])) != NULL) return why;
    if ((why = rule_error(op, f)) != NULL) return why;
    if ((why = resource_error(s, op, f)) != NULL) return why;
    return overlap_error(op, f);
}
