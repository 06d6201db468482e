/* A fuzzer of libtessel's loader (and, for binaries it accepts, of tsl_prepare and tsl_invoke on
 * the C NPU model), meant to be built with AddressSanitizer and UndefinedBehaviorSanitizer.
 *
 *   fuzz_load [--cases N] [--seed S] [--run] [--emit DIR] [--quiet] seed.tsl ...
 *
 * Each case takes a seed binary, applies one to three mutations, mostly structured ones that
 * keep the container's checksums right so that the deeper rules are reached (instruction fields
 * set to the ends of their ranges or beyond, instructions spliced, descriptor fields, JSON and
 * IR text edits, section table edits, constant bytes: the weight streams of DMA_LOAD_W and
 * the index nibbles of 2:4 sparse CONVs), some
 * raw ones (bit flips, words, truncation), and runs
 * tsl_load. --run also prepares and runs an accepted binary on the C NPU model under a work
 * budget. --emit writes every case to DIR (the differential test against the Python reader
 * reads them). A sanitizer finding aborts the process; the summary counts the outcomes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/internal.h"
#include "tessel/tessel_sim.h"

/* ---- random numbers ---------------------------------------------------------------------------- */
static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}
static uint64_t below(uint64_t n) { return n ? rnd() % n : 0; }
static int chance(int percent) { return (int)below(100) < percent; }

/* ---- a container held as sections ----------------------------------------------------------- */
typedef struct sect {
    uint16_t kind, flags;
    uint32_t align, count;
    uint8_t *data;
    size_t size;
} sect;

typedef struct cont {
    uint8_t head[80];
    int n;
    sect s[64];
} cont;

static void cont_free(cont *c) {
    int i;
    for (i = 0; i < c->n; i++) free(c->s[i].data);
    c->n = 0;
}

static int cont_parse(cont *c, const uint8_t *d, size_t n) {
    uint32_t count, i;
    if (n < 80) return 0;
    memcpy(c->head, d, 80);
    count = tsl_rd32(d + 28);
    if (count > 64 || 80 + 32 * (uint64_t)count > n) return 0;
    c->n = 0;
    for (i = 0; i < count; i++) {
        const uint8_t *t = d + 80 + 32 * i;
        uint64_t off = tsl_rd64(t + 8), size = tsl_rd64(t + 16);
        sect *s = &c->s[c->n];
        if (off > n || size > n - off) { cont_free(c); return 0; }
        s->kind = tsl_rd16(t);
        s->flags = tsl_rd16(t + 2);
        s->align = tsl_rd32(t + 4);
        s->count = tsl_rd32(t + 24);
        s->size = (size_t)size;
        s->data = (uint8_t *)malloc(s->size + 1);
        memcpy(s->data, d + off, s->size);
        c->n++;
    }
    return 1;
}

static void w16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void w32(uint8_t *p, uint32_t v) { w16(p, (uint16_t)v); w16(p + 2, (uint16_t)(v >> 16)); }
static void w64(uint8_t *p, uint64_t v) { w32(p, (uint32_t)v); w32(p + 4, (uint32_t)(v >> 32)); }

/* serialize as the reference writer does: table order, each section at its alignment */
static size_t cont_write(const cont *c, uint8_t *out, size_t cap) {
    size_t at = 80 + 32 * (size_t)c->n;
    int i;
    if (at > cap) return 0;
    memset(out, 0, at);
    for (i = 0; i < c->n; i++) {
        const sect *s = &c->s[i];
        uint32_t a = s->align && s->align <= 4096 && !(s->align & (s->align - 1)) ? s->align : 8;
        uint8_t *t = out + 80 + 32 * i;
        size_t off = (at + a - 1) / a * a;
        if (off + s->size > cap) return 0;
        memset(out + at, 0, off - at);
        memcpy(out + off, s->data, s->size);
        w16(t, s->kind);
        w16(t + 2, s->flags);
        w32(t + 4, s->align);
        w64(t + 8, off);
        w64(t + 16, s->size);
        w32(t + 24, s->count);
        w32(t + 28, tsl_crc32(s->data, s->size));
        at = off + s->size;
    }
    memcpy(out, c->head, 80);
    w64(out + 16, at);
    w32(out + 28, (uint32_t)c->n);
    w32(out + 64, tsl_crc32(out + 80, 32 * (size_t)c->n));
    w32(out + 76, tsl_crc32(out, 76));
    return at;
}

/* recompute every checksum of a byte-mutated file whose table still fits */
static void fix_crcs(uint8_t *d, size_t n) {
    uint32_t count, i;
    if (n < 80) return;
    count = tsl_rd32(d + 28);
    if (count <= 64 && 80 + 32 * (uint64_t)count <= n) {
        for (i = 0; i < count; i++) {
            uint8_t *t = d + 80 + 32 * i;
            uint64_t off = tsl_rd64(t + 8), size = tsl_rd64(t + 16);
            if (off <= n && size <= n - off) w32(t + 28, tsl_crc32(d + off, (size_t)size));
        }
        w32(d + 64, tsl_crc32(d + 80, 32 * (size_t)count));
    }
    w32(d + 76, tsl_crc32(d, 76));
}

static sect *find_kind(cont *c, uint16_t kind) {
    int i;
    for (i = 0; i < c->n; i++)
        if (c->s[i].kind == kind) return &c->s[i];
    return NULL;
}

static void resize(sect *s, size_t at, size_t remove, const uint8_t *insert, size_t add) {
    uint8_t *d = (uint8_t *)malloc(s->size - remove + add + 1);
    memcpy(d, s->data, at);
    if (add) memcpy(d + at, insert, add);
    memcpy(d + at + add, s->data + at + remove, s->size - at - remove);
    free(s->data);
    s->data = d;
    s->size = s->size - remove + add;
}

/* ---- structured mutations ------------------------------------------------------------------------- */
static const int64_t SPECIAL[] = {0, 1, -1, 2, 7, 8, 15, 16, 127, 128, 255, 256, 4095, 4096,
                                  65535, 65536, 0x7fffffffLL, 0x80000000LL, 0xffffffffLL,
                                  -0x80000000LL, 0x100000000LL, INT64_MAX, INT64_MIN};

static int64_t special(void) {
    if (chance(30)) return (int64_t)rnd();
    return SPECIAL[below(sizeof SPECIAL / sizeof SPECIAL[0])];
}

/* an instruction field set to an end of its range, a neighbour, in range, or beyond */
static int mutate_instruction(cont *c) {
    sect *s = find_kind(c, (uint16_t)(1 + below(4)));
    size_t off = 0, pick, k;
    uint32_t at, bits, f, nf;
    int64_t lo, hi, v;
    uint64_t words[12];
    if (!s || s->size == 0) return 0;
    pick = below(s->count ? s->count : 1);
    for (k = 0; k < pick && off < s->size; k++) {
        uint32_t sz = tsl_isa_size(s->data[off]);
        if (!sz) break;
        off += sz;
    }
    if (off >= s->size || !tsl_isa_size(s->data[off])) return 0;
    nf = tsl_isa_field_count(s->data[off]);
    if (!nf || off + tsl_isa_size(s->data[off]) > s->size) return 0;
    f = (uint32_t)below(nf);
    tsl_isa_field(s->data[off], f, &at, &bits, &lo, &hi);
    switch (below(6)) {
    case 0: v = lo; break;
    case 1: v = hi; break;
    case 2: v = lo + (int64_t)below((uint64_t)(hi - lo) + 1); break;
    case 3: v = hi + 1; break;
    case 4: v = lo - 1; break;
    default: v = special(); break;
    }
    for (k = 0; k < tsl_isa_size(s->data[off]) / 8; k++) words[k] = tsl_rd64(s->data + off + 8 * k);
    for (k = 0; k < bits; k++) {
        uint32_t b = at + (uint32_t)k;
        uint64_t bit = ((uint64_t)v >> k) & 1;
        words[b / 64] = (words[b / 64] & ~((uint64_t)1 << (b % 64))) | (bit << (b % 64));
    }
    for (k = 0; k < tsl_isa_size(s->data[off]) / 8; k++) w64(s->data + off + 8 * k, words[k]);
    return 1;
}

/* instructions spliced: one deleted, duplicated, or copied from another stream */
static int splice_instructions(cont *c) {
    sect *s = find_kind(c, (uint16_t)(1 + below(4))), *o = find_kind(c, (uint16_t)(1 + below(4)));
    size_t off = 0, k, pick, sz;
    if (!s || !o || s->size == 0 || o->size == 0) return 0;
    pick = below(s->count ? s->count : 1);
    for (k = 0; k < pick; k++) {
        uint32_t n = tsl_isa_size(s->data[off]);
        if (!n || off + n >= s->size) break;
        off += n;
    }
    sz = tsl_isa_size(s->data[off]);
    if (!sz || off + sz > s->size) return 0;
    switch (below(3)) {
    case 0: resize(s, off, sz, NULL, 0); if (chance(80)) s->count--; break;
    case 1: { uint8_t tmp[88]; memcpy(tmp, s->data + off, sz); resize(s, off, 0, tmp, sz); if (chance(80)) s->count++; break; }
    default: {
        uint32_t n = tsl_isa_size(o->data[0]);
        uint8_t tmp[88];
        if (!n || n > o->size) return 0;
        memcpy(tmp, o->data, n);
        resize(s, off, 0, tmp, n);
        if (chance(80)) s->count++;
    }
    }
    return 1;
}

/* constant bytes changed in place (the weight streams DMA_LOAD_W decodes and the 2:4 index
 * nibbles of sparse CONVs, when the seed has them): bits flipped, a byte set, or a 32-bit word
 * set to a special value */
static int mutate_constants(cont *c) {
    sect *s = find_kind(c, 0x10);
    size_t at;
    int k;
    if (!s || s->size <= 16) return 0;
    at = 16 + below(s->size - 16);
    switch (below(3)) {
    case 0: for (k = 1 + (int)below(4); k > 0; k--) s->data[16 + below(s->size - 16)] ^= (uint8_t)(1u << below(8)); break;
    case 1: s->data[at] = (uint8_t)rnd(); break;
    default: if (at + 4 <= s->size) w32(s->data + at, (uint32_t)special()); break;
    }
    return 1;
}

static int mutate_descriptor(cont *c) {
    static const uint8_t FIELD_AT[] = {0, 1, 2, 3, 4, 5, 8, 16, 24, 32, 36, 40, 60, 64, 68, 72, 76};
    static const uint8_t FIELD_SIZE[] = {1, 1, 1, 1, 1, 1, 4, 8, 8, 4, 4, 4, 4, 4, 4, 4, 4};
    sect *s = find_kind(c, 0x11);
    size_t d, f;
    int64_t v;
    if (!s || s->count == 0 || s->size < 80) return 0;
    d = below(s->count < s->size / 80 ? s->count : s->size / 80);
    f = below(sizeof FIELD_AT);
    v = chance(40) ? (int64_t)below(10) - 2 : special();
    if (FIELD_SIZE[f] == 1) s->data[80 * d + FIELD_AT[f]] = (uint8_t)v;
    else if (FIELD_SIZE[f] == 4) w32(s->data + 80 * d + FIELD_AT[f], (uint32_t)v);
    else w64(s->data + 80 * d + FIELD_AT[f], (uint64_t)v);
    return 1;
}

static const char *const SNIPPETS[] = {
    "null", "[]", "{}", "\"x\"", "0", "-1", "1e999", "0.5", "99999999999999999999999", "true",
    ",\"model_inputs\":[\"q\"]", ",\"npu_regions\":[]", "\"npu_regions\":[{\"inputs\":[],\"outputs\":[],\"ends\":{}}],",
    ",\"metadata_version\":2", ",\"layers\":[{}]", "\\u0000", "\\ud800", "\\\"", "\\n", "NaN",
    "%x", "%quantize_per_tensor", "quantize", "dequantize", "host", "conv2d", "cast", "embedding",
    "sum", "mean", "reshape", "expand", "transpose", "slice", "concat", "clamp", "relu", "div",
    "tensor<1xf32>", "tensor<0x3xi8>", "tensor<4294967296xf32>", "q(0.5, 3)", "q([1.0], [0], axis=9)",
    "dense<[1, 2]>", "dense_resource<k>", "loc(\\\"a\\\" at \\\"b\\\":1)", "i64", "bool", "u8",
    "{axes = [0, 0], keepdim = true}", "{shape = [-1]}", "{perm = [1, 0]}", "//", "resources {",
    "\\\"prologue\\\"", "\"host_1\":\"graph @g() {\\n return %x\\n}\"", "\"host_99\":\"\"",
    "graph @g(%x: tensor<1xf32>) {\\n  return %x\\n}", "=", ",", ":", "(", ")", "<", ">"};

/* a text edit of a JSON section (the metadata, or the host graphs' IR inside their strings) */
static int mutate_text(cont *c) {
    sect *s = find_kind(c, chance(50) ? 0x12 : 0x13);
    size_t at, len;
    if (!s) return 0;
    at = below(s->size + 1);
    switch (below(6)) {
    case 0: /* delete a span */
        len = below(s->size - at < 40 ? s->size - at + 1 : 40);
        resize(s, at, len, NULL, 0);
        break;
    case 1: { /* duplicate a span */
        uint8_t tmp[64];
        len = below(s->size - at < 64 ? s->size - at + 1 : 64);
        memcpy(tmp, s->data + at, len);
        resize(s, at, 0, tmp, len);
        break;
    }
    case 2: case 3: { /* insert a snippet */
        const char *sn = SNIPPETS[below(sizeof SNIPPETS / sizeof SNIPPETS[0])];
        resize(s, at, 0, (const uint8_t *)sn, strlen(sn));
        break;
    }
    case 4: { /* a digit run replaced by a snippet number */
        size_t b = at, e;
        while (b < s->size && !(s->data[b] >= '0' && s->data[b] <= '9')) b++;
        e = b;
        while (e < s->size && s->data[e] >= '0' && s->data[e] <= '9') e++;
        if (b >= s->size) return 0;
        {
            static const char *const NUM[] = {"0", "1", "9", "65535", "4294967295", "-1", "1.5",
                                              "99999999999999999999", "1e400", "2147483648", "00"};
            const char *sn = NUM[below(sizeof NUM / sizeof NUM[0])];
            resize(s, b, e - b, (const uint8_t *)sn, strlen(sn));
        }
        break;
    }
    default: /* one byte */
        if (s->size == 0) return 0;
        s->data[below(s->size)] = chance(50) ? (uint8_t)"\"\\{}[],:0a%@<>"[below(14)] : (uint8_t)rnd();
        break;
    }
    return 1;
}

static int mutate_table(cont *c) {
    sect *s;
    if (c->n == 0) return 0;
    s = &c->s[below((uint64_t)c->n)];
    switch (below(7)) {
    case 0: s->kind = (uint16_t)(chance(50) ? below(0x20) : 0x8000 + below(4)); break;
    case 1: s->flags = (uint16_t)special(); break;
    case 2: s->align = (uint32_t)(chance(50) ? ((uint64_t)1 << below(14)) : (uint64_t)special()); break;
    case 3: s->count = (uint32_t)(chance(50) ? s->count + below(5) - 2 : (uint64_t)special()); break;
    case 4: if (c->n > 1) { free(s->data); *s = c->s[--c->n]; } break; /* drop */
    case 5: if (c->n < 64) { /* duplicate */
            sect *d = &c->s[c->n++];
            *d = *s;
            d->data = (uint8_t *)malloc(s->size + 1);
            memcpy(d->data, s->data, s->size);
        }
        break;
    default: /* constant bytes or the constants' placement */
        s = find_kind(c, 0x10);
        if (!s || s->size < 16) return 0;
        if (chance(50)) w64(s->data + 8, (uint64_t)special());
        else w32(s->data + (chance(50) ? 0 : 4), (uint32_t)special());
        break;
    }
    return 1;
}

/* ---- raw mutations on the serialized bytes ------------------------------------------------------- */
static size_t mutate_raw(uint8_t *d, size_t n, size_t cap) {
    size_t k;
    switch (below(4)) {
    case 0:
        for (k = 1 + below(8); k > 0; k--) d[below(n)] ^= (uint8_t)(1u << below(8));
        break;
    case 1:
        if (n >= 8) { size_t at = below(n - 7); if (chance(50)) w32(d + at, (uint32_t)special()); else w64(d + at, (uint64_t)special()); }
        break;
    case 2:
        n = below(n + 1); /* truncate */
        break;
    default:
        k = below(64);
        if (n + k <= cap) { memset(d + n, chance(50) ? 0 : (int)below(256), k); n += k; }
        break;
    }
    return n;
}

/* ---- main --------------------------------------------------------------------------------------- */
typedef struct seedf {
    uint8_t *data;
    size_t size;
} seedf;

int main(int argc, char **argv) {
    seedf seeds[32];
    int n_seeds = 0, i, run = 0, quiet = 0;
    long cases = 1000, seed = 1, c, counts[256] = {0}, ran = 0, traps = 0, wtraps = 0, itraps = 0;
    const char *emit = NULL;
    tsl_sim_config cfg = {524288, 16384, 1024, 1, {536870912}, 1, 1}; /* tnpu-s with the weight decoder and 2:4 sparsity */
    double slowest = 0;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cases") && i + 1 < argc) cases = atol(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = atol(argv[++i]);
        else if (!strcmp(argv[i], "--emit") && i + 1 < argc) emit = argv[++i];
        else if (!strcmp(argv[i], "--run")) run = 1;
        else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else if (n_seeds < 32) {
            FILE *f = fopen(argv[i], "rb");
            long len;
            if (!f) { fprintf(stderr, "fuzz_load: cannot read %s\n", argv[i]); return 2; }
            fseek(f, 0, SEEK_END);
            len = ftell(f);
            fseek(f, 0, SEEK_SET);
            seeds[n_seeds].data = (uint8_t *)malloc((size_t)len + 1);
            seeds[n_seeds].size = fread(seeds[n_seeds].data, 1, (size_t)len, f);
            fclose(f);
            n_seeds++;
        }
    }
    if (!n_seeds) { fprintf(stderr, "usage: fuzz_load [--cases N] [--seed S] [--run] [--emit DIR] seed.tsl ...\n"); return 2; }
    rng_state ^= (uint64_t)seed * 0x9e3779b97f4a7c15ull;
    for (c = 0; c < cases; c++) {
        const seedf *sd = &seeds[below((uint64_t)n_seeds)];
        size_t cap = sd->size * 2 + 65536, n;
        uint8_t *buf = (uint8_t *)malloc(cap);
        tsl_model *m = (tsl_model *)malloc(sizeof(tsl_model));
        tsl_error err;
        tsl_status st;
        cont ct;
        clock_t t0 = clock();
        double dt;
        int k, edits = 1 + (int)below(3);
        if (chance(75) && cont_parse(&ct, sd->data, sd->size)) {
            for (k = 0; k < edits; k++) {
                switch (below(7)) {
                case 0: case 1: mutate_instruction(&ct); break;
                case 2: mutate_text(&ct); break;
                case 3: mutate_descriptor(&ct); break;
                case 4: splice_instructions(&ct); break;
                case 5: mutate_constants(&ct); break;
                default: mutate_table(&ct); break;
                }
            }
            n = cont_write(&ct, buf, cap);
            cont_free(&ct);
            if (chance(10)) n = mutate_raw(buf, n, cap);
        } else {
            memcpy(buf, sd->data, sd->size);
            n = sd->size;
            for (k = 0; k < edits; k++) n = mutate_raw(buf, n, cap);
            if (chance(80)) fix_crcs(buf, n);
        }
        if (emit) {
            char path[4096];
            FILE *f;
            snprintf(path, sizeof path, "%s/case_%06ld.tsl", emit, c);
            f = fopen(path, "wb");
            if (f) { fwrite(buf, 1, n, f); fclose(f); }
        }
        st = tsl_load(m, buf, n, NULL, &err);
        counts[st & 0xff]++;
        if (st == TSL_OK && run && tsl_arena_size(m) <= ((uint64_t)64 << 20)) {
            size_t asz = (size_t)tsl_arena_size(m), ssz = tsl_sim_memory_size(&cfg);
            uint8_t *arena = (uint8_t *)calloc(asz ? asz : 8, 1);
            void *raw = malloc(ssz + 16);
            tsl_sim sim;
            if (arena && raw &&
                tsl_sim_init(&sim, &cfg, (void *)(((uintptr_t)raw + 15) & ~(uintptr_t)15), ssz) == TSL_OK &&
                tsl_prepare(m, arena, asz, &err) == TSL_OK) {
                sim.budget = 1u << 24;
                if (tsl_invoke(m, arena, asz, &tsl_sim_driver, &sim, &err) != TSL_OK) {
                    traps++;
                    if (sim.trap && !strncmp(sim.trap, "malformed weight stream", 23)) wtraps++;
                    if (sim.trap && !strncmp(sim.trap, "malformed 2:4 indices", 21)) itraps++;
                }
                ran++;
            }
            free(arena);
            free(raw);
        }
        dt = (double)(clock() - t0) / CLOCKS_PER_SEC;
        if (dt > slowest) slowest = dt;
        free(m);
        free(buf);
        if (!quiet && (c + 1) % 10000 == 0) fprintf(stderr, "fuzz_load: %ld cases\n", c + 1);
    }
    printf("cases %ld, accepted %ld, ran %ld (trapped %ld, on weight streams %ld, on 2:4 indices %ld), "
           "slowest %.3f s\n", cases, counts[0], ran, traps, wtraps, itraps, slowest);
    for (i = 1; i < 256; i++)
        if (counts[i]) printf("  refused %3d x%ld: %s\n", i, counts[i], tsl_status_text((tsl_status)i));
    for (i = 0; i < n_seeds; i++) free(seeds[i].data);
    return 0;
}
