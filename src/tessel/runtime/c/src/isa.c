/* The instruction encoding of docs/isa.md §2: per opcode, its size, engines and fields (width,
 * signedness, legal values), in table order, packed least-significant bit first from bit 8.
 * Written from the field tables of docs/isa.md §4; tests compare it with tessel.isa's table. */
#include "internal.h"

typedef struct fspec {
    uint8_t bits;
    uint8_t is_signed;
    int64_t lo, hi;
} fspec;

#define U(b) {b, 0, 0, (int64_t)((((uint64_t)1) << (b)) - 1)}
#define P(b) {b, 0, 1, (int64_t)((((uint64_t)1) << (b)) - 1)} /* an extent: 1 .. max */
#define S(b) {b, 1, -((int64_t)1 << ((b) - 1)), ((int64_t)1 << ((b) - 1)) - 1}
#define R(b, lo, hi) {b, 0, lo, hi}                         /* unsigned with a narrower range */
#define SR(b, lo, hi) {b, 1, lo, hi}
#define E(b, n) {b, 0, 0, (n) - 1}                            /* an enum of n members 0..n-1 */

static const fspec f_token[] = {E(2, 4), U(4)};
static const fspec f_dma[] = {U(3), E(2, 3), P(16), P(16), P(16), P(16), U(32), S(32), S(32),
                              S(32), S(32), U(32), S(24), S(24), S(24), S(24)};
static const fspec f_dma_w[] = {U(3), U(32), P(32), U(32), P(32)};
static const fspec f_conv[] = {U(32), P(12), P(12), S(24), S(24), P(16), S(9), P(4), P(4), P(4),
                               P(4), P(4), P(4), U(4), U(4), P(12), P(12), P(16), U(32), S(24),
                               S(24), S(24), S(9), U(24), P(16), E(1, 2), E(2, 4), E(1, 2)};
static const fspec f_matmul[] = {P(16), P(16), P(16), U(32), S(24), S(24), S(9), U(32), S(24),
                                 S(24), S(9), U(24), P(16), E(1, 2), E(2, 4), E(1, 2)};
static const fspec f_requant[] = {E(1, 2), U(32), S(24), P(16), P(16), E(2, 3), U(32), S(24),
                                  U(32), E(1, 2), S(32), S(32), S(32), E(1, 2), E(1, 2)};
static const fspec f_eltwise[] = {E(3, 5), E(2, 3), E(2, 3), E(2, 3), P(16), P(16), P(16),
                                  U(32), S(24), S(24), S(24), U(32), S(24), S(24), S(24), U(32),
                                  S(24), S(24), S(24), S(32), S(32), U(5), U(31),
                                  SR(6, -31, 30), U(31), SR(6, -31, 30), U(31), SR(6, -31, 30),
                                  S(32), S(32), S(32), E(1, 2)};
static const fspec f_lut[] = {E(1, 2), U(12), P(16), P(16), P(16), U(32), S(24), S(24), S(24),
                              U(32), S(24), S(24), S(24)};
static const fspec f_lut_load[] = {U(12), R(13, 1, 4096), U(32)};
static const fspec f_pool[] = {E(1, 2), E(2, 3), U(32), P(12), P(12), S(24), S(24), P(16),
                               P(8), P(8), P(4), P(4), P(4), P(4), U(8), U(8), P(12), P(12),
                               U(32), S(24), S(24), S(32), S(32)};
static const fspec f_dwconv[] = {U(32), P(12), P(12), S(24), S(24), P(16), S(9), P(4), P(4),
                                 P(4), P(4), P(4), P(4), U(4), U(4), P(12), P(12), U(32), S(24),
                                 U(24), P(16), E(1, 2), E(2, 4)};
static const fspec f_reduce[] = {E(2, 4), E(2, 3), R(2, 0, 2), P(16), P(16), P(16), U(32),
                                 S(24), S(24), S(24), S(32), U(32), S(24), S(24)};
static const fspec f_copy[] = {E(2, 3), P(16), P(16), P(16), P(16), U(32), S(24), S(24), S(24),
                               S(24), U(32), S(24), S(24), S(24), S(24)};
static const fspec f_unary[] = {E(2, 2), U(5), P(16), P(16), P(16), U(32), S(24), S(24), S(24),
                                U(32), S(24), S(24), S(24)};

#define N(a) (sizeof(a) / sizeof((a)[0]))

typedef struct ospec {
    uint8_t opcode, size;
    int8_t engine;  /* -1: any engine; -2: MATRIX or VECTOR */
    uint8_t nfields;
    const fspec *fields;
} ospec;

static const ospec OPS[] = {
    {TSL_OP_END, 8, -1, 0, NULL},
    {TSL_OP_WAIT, 8, -1, N(f_token), f_token},
    {TSL_OP_SIGNAL, 8, -1, N(f_token), f_token},
    {TSL_OP_DMA_LOAD, 48, 0, N(f_dma), f_dma},
    {TSL_OP_DMA_STORE, 48, 3, N(f_dma), f_dma},
    {TSL_OP_DMA_LOAD_W, 24, 0, N(f_dma_w), f_dma_w},
    {TSL_OP_CONV, 48, 1, N(f_conv), f_conv},
    {TSL_OP_MATMUL, 40, 1, N(f_matmul), f_matmul},
    {TSL_OP_REQUANT, 40, 2, N(f_requant), f_requant},
    {TSL_OP_ELTWISE, 88, 2, N(f_eltwise), f_eltwise},
    {TSL_OP_LUT, 40, 2, N(f_lut), f_lut},
    {TSL_OP_LUT_LOAD, 16, 2, N(f_lut_load), f_lut_load},
    {TSL_OP_POOL, 48, 2, N(f_pool), f_pool},
    {TSL_OP_DWCONV, 40, -2, N(f_dwconv), f_dwconv},
    {TSL_OP_REDUCE, 40, 2, N(f_reduce), f_reduce},
    {TSL_OP_COPY, 48, 2, N(f_copy), f_copy},
    {TSL_OP_UNARY, 40, 2, N(f_unary), f_unary},
};

static const ospec *find(uint8_t opcode) {
    size_t i;
    for (i = 0; i < N(OPS); i++)
        if (OPS[i].opcode == opcode) return &OPS[i];
    return NULL;
}

uint32_t tsl_isa_size(uint8_t opcode) {
    const ospec *o = find(opcode);
    return o ? o->size : 0;
}

uint32_t tsl_isa_field_count(uint8_t opcode) {
    const ospec *o = find(opcode);
    return o ? o->nfields : 0;
}

int tsl_isa_runs_on(uint8_t opcode, int engine) {
    const ospec *o = find(opcode);
    if (!o) return 0;
    if (o->engine == -1) return 1;
    if (o->engine == -2) return engine == 1 || engine == 2;
    return o->engine == engine;
}

/* bits [at, at + n) of the little-endian words w (n <= 32) */
static uint64_t bits_at(const uint64_t *w, unsigned at, unsigned n) {
    unsigned word = at / 64, shift = at % 64;
    uint64_t v = w[word] >> shift;
    if (shift + n > 64) v |= w[word + 1] << (64 - shift);
    return n == 64 ? v : v & ((((uint64_t)1) << n) - 1);
}

tsl_status tsl_isa_decode(const uint8_t *p, size_t avail, int64_t *f, uint32_t *nfields) {
    const ospec *o;
    uint64_t w[12];
    unsigned at = 8, k, nwords;
    if (avail == 0) return TSL_E_INSTRUCTION_TRUNCATED;
    o = find(p[0]);
    if (!o) return TSL_E_OPCODE;
    if (avail < o->size) return TSL_E_INSTRUCTION_TRUNCATED;
    nwords = o->size / 8;
    for (k = 0; k < nwords; k++) w[k] = tsl_rd64(p + 8 * k);
    w[nwords] = 0;
    for (k = 0; k < o->nfields; k++) {
        const fspec *fs = &o->fields[k];
        uint64_t raw = bits_at(w, at, fs->bits);
        int64_t v = (int64_t)raw;
        if (fs->is_signed && (raw >> (fs->bits - 1)) & 1) v = (int64_t)(raw - ((uint64_t)1 << fs->bits));
        if (v < fs->lo || v > fs->hi) return TSL_E_FIELD_RANGE;
        f[k] = v;
        at += fs->bits;
    }
    /* padding: every bit from `at` to the end of the instruction */
    for (k = at / 64; k < nwords; k++) {
        uint64_t word = w[k];
        if (k == at / 64 && at % 64) word >>= at % 64;
        if (word) return TSL_E_PADDING_BITS;
    }
    if (nfields) *nfields = o->nfields;
    return TSL_OK;
}

/* The bit position, width and legal range of field k of an opcode (for tools: the fuzzer). */
int tsl_isa_field(uint8_t opcode, uint32_t k, uint32_t *at, uint32_t *bits, int64_t *lo, int64_t *hi) {
    const ospec *o = find(opcode);
    uint32_t j, pos = 8;
    if (!o || k >= o->nfields) return 0;
    for (j = 0; j < k; j++) pos += o->fields[j].bits;
    *at = pos;
    *bits = o->fields[k].bits;
    *lo = o->fields[k].lo;
    *hi = o->fields[k].hi;
    return 1;
}
