/* DMA_LOAD_W (docs/isa.md §4): the weight decoder. It reads a weight stream off chip
 * (docs/binary-format.md, "Compressed weight streams": raw, or Rice-coded byte or nibble
 * symbols) and writes the bytes it codes to the SRAM. Every read is bounded by the stream's
 * length and every write by out_bytes: a malformed stream (unknown mode, wrong length, k >= S,
 * a unary section without exactly one zero per symbol, a code above ESCAPE, a symbol above
 * 2^S - 1, non-zero padding, a missing bit) or one decoding to other than out_bytes traps, the
 * SRAM untouched (the bytes are decoded into the scratch first). */
#include "model.h"

enum { MODE_RAW, MODE_BYTES, MODE_NIBBLES };
#define HEADER 5u        /* mode + n */
#define CODED_HEADER 9u  /* mode + n + U */
#define BLOCK 64u        /* symbols per Rice parameter */
#define K_BITS 3u
#define ESCAPE 8u

/* a bit string: bits [at, end) of p, least significant bit of each byte first */
typedef struct bits {
    const uint8_t *p;
    uint64_t at, end;
} bits;

/* the next n bits (n <= 8) as an integer, least significant first; 0 when too few remain */
static int take(bits *b, unsigned n, unsigned *v) {
    unsigned j;
    if (b->end - b->at < n) return 0;
    *v = 0;
    for (j = 0; j < n; j++, b->at++) *v |= (unsigned)((b->p[b->at >> 3] >> (b->at & 7)) & 1u) << j;
    return 1;
}

static tsl_status trap(tsl_sim *s, const char *why) {
    s->trap = why;
    return TSL_E_NPU_TRAP;
}

/* the zig-zag symbol back to its signed value's low `nbits` bits */
static unsigned unzigzag(unsigned sym) {
    return (sym >> 1) ^ (0u - (sym & 1u));
}

/* Decode the coded stream `st` (len bytes, len >= CODED_HEADER) of `count` symbols of `nbits`
 * bits each into out; NULL or why the stream is malformed. */
static const char *decode_coded(const uint8_t *st, uint64_t len, uint64_t count, unsigned nbits,
                                uint8_t *out) {
    uint64_t total = (len - CODED_HEADER) * 8, ubits = tsl_rd32(st + 5), i, nblocks, kbits;
    bits kb, ub, rb;
    unsigned k = 0, u, rem, j, w, sym;
    if (count > total) return "malformed weight stream: fewer bits than symbols";
    nblocks = (count + BLOCK - 1) / BLOCK;
    kbits = nblocks * K_BITS;
    if (kbits + ubits > total) return "malformed weight stream: unary section past its end";
    kb.p = ub.p = rb.p = st + CODED_HEADER;
    kb.at = 0;
    kb.end = kbits;
    ub.at = kbits;
    ub.end = kbits + ubits;
    rb.at = ub.end;
    rb.end = total;
    for (i = 0; i < count; i++) {
        if (i % BLOCK == 0) {
            (void)take(&kb, K_BITS, &k);
            if (k >= nbits) return "malformed weight stream: Rice parameter >= symbol bits";
        }
        for (u = 0;; u++) {
            if (!take(&ub, 1, &j)) return "malformed weight stream: unary section too short";
            if (!j) break;
            if (u == ESCAPE) return "malformed weight stream: unary code above ESCAPE";
        }
        w = u == ESCAPE ? nbits : k;
        if (!take(&rb, w, &rem)) return "malformed weight stream: remainder bits missing";
        sym = u == ESCAPE ? rem : (u << k) | rem;
        if (sym >> nbits) return "malformed weight stream: symbol above 2^S - 1";
        sym = unzigzag(sym) & ((1u << nbits) - 1);
        if (nbits == 8) out[i] = (uint8_t)sym;
        else if (i & 1) out[i >> 1] |= (uint8_t)(sym << 4);
        else out[i >> 1] = (uint8_t)sym;
    }
    if (ub.at != ub.end) return "malformed weight stream: unary section codes more symbols";
    if (rb.end - rb.at >= 8) return "malformed weight stream: bytes after its last symbol";
    while (rb.at < rb.end) {
        (void)take(&rb, 1, &j);
        if (j) return "malformed weight stream: non-zero padding";
    }
    return NULL;
}

tsl_status tsl_sim_wdecode(tsl_sim *s, const int64_t *f) {
    uint64_t len = (uint64_t)f[WL_EXT_BYTES], out = (uint64_t)f[WL_OUT_BYTES], n;
    const uint8_t *st = tsl_sim_offchip(s, (int)f[WL_MEM], f[WL_EXT_ADDR], f[WL_EXT_BYTES], 0);
    const char *why;
    if (!st) return trap(s, "DMA outside the memory the runtime mapped");
    if (len < HEADER) return trap(s, "malformed weight stream: shorter than its header");
    n = tsl_rd32(st + 1);
    if (n != out) return trap(s, "the weight stream does not decode to out_bytes bytes");
    if (out > s->scratch_size) return trap(s, "the weight stream decodes past the SRAM");
    switch (st[0]) {
    case MODE_RAW:
        if (len != HEADER + n) return trap(s, "malformed weight stream: raw length mismatch");
        memcpy(s->sram + f[WL_SRAM_ADDR], st + HEADER, (size_t)n);
        return TSL_OK;
    case MODE_BYTES: case MODE_NIBBLES:
        if (len < CODED_HEADER) return trap(s, "malformed weight stream: shorter than its header");
        why = decode_coded(st, len, st[0] == MODE_BYTES ? n : 2 * n, st[0] == MODE_BYTES ? 8 : 4,
                           s->scratch);
        if (why) return trap(s, why);
        memcpy(s->sram + f[WL_SRAM_ADDR], s->scratch, (size_t)n);
        return TSL_OK;
    default:
        return trap(s, "malformed weight stream: unknown mode");
    }
}
