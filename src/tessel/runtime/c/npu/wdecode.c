/* DMA_LOAD_W (docs/isa.md §4): the weight decoder. It reads a weight stream off chip
 * (docs/binary-format.md, "Compressed weight streams": raw, Rice-coded byte or nibble symbols,
 * or 2:4 sparse blocks whose values are one of those and whose indices are base-6 ranks) and
 * writes the bytes it codes to the SRAM. Every read is bounded by the stream's length and every
 * write by out_bytes: a malformed stream (unknown mode, wrong length, k >= S, a unary section
 * without exactly one zero per symbol, a code above ESCAPE, a symbol above 2^S - 1, non-zero
 * padding, a missing bit; in mode 3 blocks that do not fit n, values of the wrong length or
 * themselves in mode 3, an index section of the wrong length, a rank byte of 216 or more,
 * non-zero padding ranks) or one decoding to other than out_bytes traps, the SRAM untouched
 * (the bytes are decoded into the scratch first). */
#include "model.h"

enum { MODE_RAW, MODE_BYTES, MODE_NIBBLES, MODE_SPARSE24 };
#define HEADER 5u         /* mode + n */
#define CODED_HEADER 9u   /* mode + n + U */
#define SPARSE_HEADER 21u /* mode + n + value bytes and groups per block + blocks + values bytes */
#define RANKS 6u          /* legal 2:4 index nibbles; three ranks per byte in base 6 */
#define RANK_BYTES 216u   /* RANKS^3: a rank byte is below it */
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

/* the legal 2:4 index nibbles in the order of their rank: first position in bits 0-1, second
 * (above it) in bits 2-3 */
static const uint8_t PATTERN[RANKS] = {0x4, 0x8, 0xC, 0x9, 0xD, 0xE};

static const char *decode_stream(const uint8_t *st, uint64_t len, uint64_t n, uint8_t *out,
                                 int nested);

/* Expand the `count` blocks' ranks at rk (rbytes bytes) into index nibbles: block i's values
 * (vb bytes) move from out + count * ib + i * vb to out + i * (vb + ib), its ib index bytes
 * follow them. Every write lands below the values still to move. NULL or why the ranks are
 * malformed. */
static const char *expand_blocks(const uint8_t *rk, uint64_t vb, uint64_t groups, uint64_t count,
                                 uint8_t *out) {
    uint64_t ib = (groups + 1) / 2, i, g;
    const uint8_t *vals = out + count * ib;
    unsigned digits = 0, b = 0, nib;
    for (i = 0; i < count; i++) {
        uint8_t *dst = out + i * (vb + ib);
        memmove(dst, vals + i * vb, (size_t)vb);
        dst += vb;
        for (g = 0; g < groups; g++) {
            if (!digits) {
                b = *rk++;
                if (b >= RANK_BYTES) return "malformed weight stream: 2:4 rank byte >= 216";
                digits = 3;
            }
            nib = PATTERN[b % RANKS];
            b /= RANKS;
            digits--;
            if (g & 1) dst[g >> 1] |= (uint8_t)(nib << 4);
            else dst[g >> 1] = (uint8_t)nib;
        }
    }
    if (b) return "malformed weight stream: non-zero 2:4 rank padding";
    return NULL;
}

/* Decode the 2:4 stream `st` (len bytes, mode 3) of n bytes into out; NULL or why it is
 * malformed. Its values and tail are decoded to the end of out's n bytes, then the blocks
 * expanded forward in place. */
static const char *decode_sparse(const uint8_t *st, uint64_t len, uint64_t n, uint8_t *out) {
    uint64_t vb, groups, count, vlen, ib, nranks, vals;
    const char *why;
    if (len < SPARSE_HEADER) return "malformed weight stream: shorter than its header";
    vb = tsl_rd32(st + 5);
    groups = tsl_rd32(st + 9);
    count = tsl_rd32(st + 13);
    vlen = tsl_rd32(st + 17);
    ib = (groups + 1) / 2;
    if (!vb || !groups || !count || count > n / (vb + ib))
        return "malformed weight stream: 2:4 blocks do not fit its length";
    if (vlen > len - SPARSE_HEADER)
        return "malformed weight stream: 2:4 values run past its end";
    nranks = count * groups; /* both below 2^32 */
    if (len - SPARSE_HEADER - vlen != nranks / 3 + (nranks % 3 != 0))
        return "malformed weight stream: 2:4 index section of the wrong length";
    vals = n - count * ib;
    if (vlen < HEADER || tsl_rd32(st + SPARSE_HEADER + 1) != vals)
        return "malformed weight stream: 2:4 values of the wrong length";
    why = decode_stream(st + SPARSE_HEADER, vlen, vals, out + count * ib, 1);
    if (why) return why;
    return expand_blocks(st + SPARSE_HEADER + vlen, vb, groups, count, out);
}

/* Decode the stream `st` (len bytes, len >= HEADER) of n bytes into out; NULL or why it is
 * malformed. `nested`: the values of a 2:4 stream, which are not themselves one. */
static const char *decode_stream(const uint8_t *st, uint64_t len, uint64_t n, uint8_t *out,
                                 int nested) {
    switch (st[0]) {
    case MODE_RAW:
        if (len != HEADER + n) return "malformed weight stream: raw length mismatch";
        memcpy(out, st + HEADER, (size_t)n);
        return NULL;
    case MODE_BYTES: case MODE_NIBBLES:
        if (len < CODED_HEADER) return "malformed weight stream: shorter than its header";
        return decode_coded(st, len, st[0] == MODE_BYTES ? n : 2 * n, st[0] == MODE_BYTES ? 8 : 4,
                            out);
    case MODE_SPARSE24:
        if (nested) return "malformed weight stream: 2:4 values coded as a 2:4 stream";
        return decode_sparse(st, len, n, out);
    default:
        return "malformed weight stream: unknown mode";
    }
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
    if (st[0] == MODE_RAW) { /* straight to the SRAM: nothing to check after the length */
        if (len != HEADER + n) return trap(s, "malformed weight stream: raw length mismatch");
        memcpy(s->sram + f[WL_SRAM_ADDR], st + HEADER, (size_t)n);
        return TSL_OK;
    }
    why = decode_stream(st, len, n, s->scratch, 0);
    if (why) return trap(s, why);
    memcpy(s->sram + f[WL_SRAM_ADDR], s->scratch, (size_t)n);
    return TSL_OK;
}
