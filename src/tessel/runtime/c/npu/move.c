/* DMA_LOAD, DMA_STORE (off-chip <-> SRAM), COPY (SRAM -> SRAM, all reads first) and LUT_LOAD
 * (docs/isa.md §4): 4-D strided element loops, i0 innermost. */
#include "model.h"

static tsl_status trap(tsl_sim *s, const char *why) {
    s->trap = why;
    return TSL_E_NPU_TRAP;
}

static void box4(int64_t base, const int64_t *d, const int64_t *st, int64_t w, int64_t *lo, int64_t *hi) {
    int k;
    *lo = *hi = base;
    for (k = 0; k < 4; k++) {
        int64_t span = st[k] * (d[k] - 1);
        if (span < 0) *lo += span; else *hi += span;
    }
    *hi += w;
}

/* copy elements between two 4-D patterns (dst and src bytes not overlapping) */
static void copy4(uint8_t *dst, const int64_t *ds, const uint8_t *src, const int64_t *ss,
                  const int64_t *d, int64_t w) {
    int64_t i0, i1, i2, i3;
    for (i3 = 0; i3 < d[3]; i3++)
        for (i2 = 0; i2 < d[2]; i2++)
            for (i1 = 0; i1 < d[1]; i1++) {
                uint8_t *to = dst + (i1 * ds[1] + i2 * ds[2] + i3 * ds[3]);
                const uint8_t *from = src + (i1 * ss[1] + i2 * ss[2] + i3 * ss[3]);
                if (ds[0] == w && ss[0] == w) {
                    memcpy(to, from, (size_t)(d[0] * w));
                    continue;
                }
                for (i0 = 0; i0 < d[0]; i0++) memcpy(to + i0 * ds[0], from + i0 * ss[0], (size_t)w);
            }
}

static tsl_status dma(tsl_sim *s, int store, const int64_t *f) {
    int64_t w = NBYTES(f[DMA_DTYPE]), lo, hi;
    uint8_t *ext;
    box4(f[DMA_EXT_ADDR], f + DMA_D0, f + DMA_EXT_S0, w, &lo, &hi);
    ext = tsl_sim_offchip(s, (int)f[DMA_MEM], lo, hi - lo, store); /* the byte at address lo */
    if (!ext) return trap(s, "DMA outside the memory the runtime mapped");
    ext += f[DMA_EXT_ADDR] - lo;
    if (store)
        copy4(ext, f + DMA_EXT_S0, s->sram + f[DMA_SRAM_ADDR], f + DMA_SRAM_S0, f + DMA_D0, w);
    else
        copy4(s->sram + f[DMA_SRAM_ADDR], f + DMA_SRAM_S0, ext, f + DMA_EXT_S0, f + DMA_D0, w);
    return TSL_OK;
}

static tsl_status copy(tsl_sim *s, const int64_t *f) {
    int64_t w = NBYTES(f[CP_DTYPE]), slo, shi, dlo, dhi, dense[4], k;
    box4(f[CP_SRC_ADDR], f + CP_D0, f + CP_SRC_S0, w, &slo, &shi);
    box4(f[CP_DST_ADDR], f + CP_D0, f + CP_DST_S0, w, &dlo, &dhi);
    if (shi <= dlo || dhi <= slo) { /* disjoint: straight through */
        copy4(s->sram + f[CP_DST_ADDR], f + CP_DST_S0, s->sram + f[CP_SRC_ADDR], f + CP_SRC_S0, f + CP_D0, w);
        return TSL_OK;
    }
    /* every read first: gather the source densely into the scratch, then scatter */
    dense[0] = w;
    for (k = 1; k < 4; k++) dense[k] = dense[k - 1] * f[CP_D0 + k - 1];
    copy4(s->scratch, dense, s->sram + f[CP_SRC_ADDR], f + CP_SRC_S0, f + CP_D0, w);
    copy4(s->sram + f[CP_DST_ADDR], f + CP_DST_S0, s->scratch, dense, f + CP_D0, w);
    return TSL_OK;
}

static tsl_status lut_load(tsl_sim *s, const int64_t *f) {
    int64_t i;
    for (i = 0; i < f[LL_COUNT]; i++)
        s->lut[f[LL_BASE] + i] = (int16_t)rd_elem(s->sram + f[LL_SRC_ADDR] + 2 * i, 1);
    return TSL_OK;
}

tsl_status tsl_sim_move(tsl_sim *s, uint8_t op, const int64_t *f) {
    switch (op) {
    case TSL_OP_DMA_LOAD: return dma(s, 0, f);
    case TSL_OP_DMA_STORE: return dma(s, 1, f);
    case TSL_OP_COPY: return copy(s, f);
    default: return lut_load(s, f);
    }
}
