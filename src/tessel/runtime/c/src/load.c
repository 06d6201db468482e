/* tsl_load: the container rules of docs/binary-format.md in its validation order (§10): header,
 * section table, layout, checksums, instruction streams and their tokens, CONSTANTS, IO; then
 * the metadata and host graphs (meta.c, ir.c) and the plan of the arena (plan.c). */
#include "internal.h"

#define HEADER_SIZE 80
#define ENTRY_SIZE 32
#define MAX_SECTIONS 64
#define KIND_CONSTANTS 0x10
#define KIND_IO 0x11
#define KIND_METADATA 0x12
#define KIND_HOST 0x13
#define OPTIONAL_BASE 0x8000
#define DESC_SIZE 80
#define MAX_TENSOR_BYTES ((uint64_t)1 << 40)

static int known_kind(uint16_t k) {
    return (k >= 1 && k <= 4) || (k >= KIND_CONSTANTS && k <= KIND_HOST);
}

/* ---- header and table ------------------------------------------------------------------------ */
static tsl_status check_header(tsl_loader *L, const uint8_t *d, size_t n, uint32_t *count) {
    tsl_error *e = L->e;
    uint32_t crc;
    uint64_t table_end;
    if (n < HEADER_SIZE) return tsl_fail(e, TSL_E_TRUNCATED, 0, -1, -1);
    if (memcmp(d, "TSL\0", 4) != 0) return tsl_fail(e, TSL_E_MAGIC, 0, -1, -1);
    if (tsl_rd16(d + 4) != TSL_VERSION_MAJOR) return tsl_fail(e, TSL_E_VERSION, 4, -1, -1);
    crc = tsl_crc32(d, 76);
    if (crc != tsl_rd32(d + 76)) return tsl_fail(e, TSL_E_HEADER_CRC, 76, -1, -1);
    if (L->target && L->target->arch_hash && memcmp(L->target->arch_hash, d + 32, 32) != 0)
        return tsl_fail(e, TSL_E_ARCH_HASH, 32, -1, -1);
    if (tsl_rd32(d + 8) != 0) return tsl_fail(e, TSL_E_FLAGS, 8, -1, -1);
    if (tsl_rd32(d + 12) != HEADER_SIZE) return tsl_fail(e, TSL_E_HEADER_SIZE, 12, -1, -1);
    if (tsl_rd64(d + 16) != (uint64_t)n) return tsl_fail(e, TSL_E_FILE_SIZE, 16, -1, -1);
    if (tsl_rd32(d + 24) != HEADER_SIZE) return tsl_fail(e, TSL_E_TABLE_OFFSET, 24, -1, -1);
    *count = tsl_rd32(d + 28);
    if (*count > MAX_SECTIONS) return tsl_fail(e, TSL_E_SECTION_COUNT, 28, -1, -1);
    if (tsl_rd32(d + 68) != 0) return tsl_fail(e, TSL_E_RESERVED, 68, -1, -1);
    if (tsl_rd32(d + 72) != 0) return tsl_fail(e, TSL_E_RESERVED, 72, -1, -1);
    table_end = HEADER_SIZE + (uint64_t)*count * ENTRY_SIZE;
    if (table_end > n) return tsl_fail(e, TSL_E_TABLE_BOUNDS, 28, -1, -1);
    if (tsl_crc32(d + HEADER_SIZE, (size_t)(table_end - HEADER_SIZE)) != tsl_rd32(d + 64))
        return tsl_fail(e, TSL_E_TABLE_CRC, 64, -1, -1);
    memcpy(L->m->arch_hash, d + 32, 32);
    return TSL_OK;
}

static tsl_status check_entry(tsl_loader *L, const uint8_t *d, size_t n, uint32_t i,
                              uint64_t table_end, tsl_section *s) {
    const uint8_t *t = d + HEADER_SIZE + (size_t)i * ENTRY_SIZE;
    uint64_t at = HEADER_SIZE + (uint64_t)i * ENTRY_SIZE;
    uint32_t align = tsl_rd32(t + 4);
    s->kind = tsl_rd16(t);
    s->index = (int32_t)i;
    s->offset = tsl_rd64(t + 8);
    s->size = tsl_rd64(t + 16);
    s->count = tsl_rd32(t + 24);
    if (s->kind < OPTIONAL_BASE && !known_kind(s->kind))
        return tsl_fail(L->e, TSL_E_SECTION_KIND, at, (int32_t)i, -1);
    if (tsl_rd16(t + 2) != 0) return tsl_fail(L->e, TSL_E_SECTION_FLAGS, at + 2, (int32_t)i, -1);
    if (align < 1 || align > 4096 || (align & (align - 1)) != 0)
        return tsl_fail(L->e, TSL_E_SECTION_ALIGNMENT, at + 4, (int32_t)i, -1);
    if (s->offset % align) return tsl_fail(L->e, TSL_E_SECTION_MISALIGNED, at + 8, (int32_t)i, -1);
    if (s->offset < table_end || s->offset > n)
        return tsl_fail(L->e, TSL_E_SECTION_OFFSET, at + 8, (int32_t)i, -1);
    if (s->size > n - s->offset) return tsl_fail(L->e, TSL_E_SECTION_SIZE, at + 16, (int32_t)i, -1);
    return TSL_OK;
}

static int zero_gap(const uint8_t *d, uint64_t from, uint64_t to, uint64_t *bad) {
    uint64_t k;
    for (k = from; k < to; k++)
        if (d[k]) { *bad = k; return 0; }
    return 1;
}

static tsl_status check_layout(tsl_loader *L, const uint8_t *d, size_t n, uint32_t count,
                               tsl_section *sec) {
    uint64_t table_end = HEADER_SIZE + (uint64_t)count * ENTRY_SIZE, cursor, bad;
    uint8_t order[MAX_SECTIONS];
    uint32_t i, j;
    tsl_status st;
    for (i = 0; i < count; i++) {
        if ((st = check_entry(L, d, n, i, table_end, &sec[i])) != TSL_OK) return st;
        for (j = 0; j < i; j++)
            if (sec[j].kind == sec[i].kind)
                return tsl_fail(L->e, TSL_E_SECTION_DUPLICATE, HEADER_SIZE + (uint64_t)i * ENTRY_SIZE,
                                (int32_t)i, -1);
    }
    for (i = 0; i < count; i++) order[i] = (uint8_t)i; /* insertion sort by (offset, size) */
    for (i = 1; i < count; i++) {
        uint8_t x = order[i];
        j = i;
        while (j > 0 && (sec[order[j - 1]].offset > sec[x].offset ||
                         (sec[order[j - 1]].offset == sec[x].offset && sec[order[j - 1]].size > sec[x].size))) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = x;
    }
    cursor = table_end;
    for (i = 0; i < count; i++) {
        const tsl_section *s = &sec[order[i]];
        if (s->offset < cursor) return tsl_fail(L->e, TSL_E_SECTION_OVERLAP, s->offset, s->index, -1);
        if (!zero_gap(d, cursor, s->offset, &bad)) return tsl_fail(L->e, TSL_E_PADDING, bad, -1, -1);
        cursor = s->offset + s->size;
    }
    if (!zero_gap(d, cursor, n, &bad)) return tsl_fail(L->e, TSL_E_PADDING, bad, -1, -1);
    for (i = 0; i < count; i++) {
        if (tsl_crc32(d + sec[i].offset, (size_t)sec[i].size) !=
            tsl_rd32(d + HEADER_SIZE + (size_t)i * ENTRY_SIZE + 28))
            return tsl_fail(L->e, TSL_E_SECTION_CRC, HEADER_SIZE + (uint64_t)i * ENTRY_SIZE + 28,
                            (int32_t)i, -1);
    }
    return TSL_OK;
}

/* ---- instruction streams ------------------------------------------------------------------- */
static tsl_status stream_fail(tsl_loader *L, tsl_status code, const tsl_section *s, uint64_t off,
                              int32_t index, int engine) {
    tsl_fail(L->e, code, s->offset + off, s->index, index);
    if (L->e) L->e->engine = engine;
    return code;
}

/* an off-chip box [lo, hi) of memory `mem` a transfer reads or writes, for the memory windows
 * (plan.c) */
static void note_box(tsl_loader *L, int mem, int64_t lo, int64_t hi, int store) {
    if (lo < 0) return; /* traps when it runs (outside its memory) */
    if (store) {
        if (!L->stores[mem] || (uint64_t)lo < L->store_lo[mem]) L->store_lo[mem] = (uint64_t)lo;
        if (!L->stores[mem] || (uint64_t)hi > L->store_hi[mem]) L->store_hi[mem] = (uint64_t)hi;
        L->stores[mem] = 1;
    } else {
        if (!L->loads[mem] || (uint64_t)lo < L->load_lo[mem]) L->load_lo[mem] = (uint64_t)lo;
        if (!L->loads[mem] || (uint64_t)hi > L->load_hi[mem]) L->load_hi[mem] = (uint64_t)hi;
        L->loads[mem] = 1;
    }
}

/* the DMA instruction's off-chip box: DMA_LOAD / DMA_STORE's pattern, DMA_LOAD_W's stream */
static void note_dma(tsl_loader *L, uint8_t op, const int64_t *f) {
    int64_t lo = f[1], hi = f[1] + f[2];
    int k;
    if (op != TSL_OP_DMA_LOAD_W) {
        lo = hi = f[6];
        for (k = 0; k < 4; k++) {
            int64_t span = f[7 + k] * (f[2 + k] - 1);
            if (span < 0) lo += span; else hi += span;
        }
        hi += (int64_t)1 << f[1];
    }
    note_box(L, (int)f[0], lo, hi, op == TSL_OP_DMA_STORE);
}

static tsl_status check_stream(tsl_loader *L, const uint8_t *d, const tsl_section *s, int engine) {
    const uint8_t *p = d + s->offset;
    uint64_t off = 0;
    uint32_t n = 0, size;
    uint8_t last = 0;
    int64_t f[TSL_MAX_FIELDS];
    tsl_status st;
    if (s->count == 0 || s->count > s->size) return stream_fail(L, TSL_E_STREAM_COUNT, s, 0, -1, engine);
    while (off < s->size) {
        st = tsl_isa_decode(p + off, (size_t)(s->size - off), f, NULL);
        if (st != TSL_OK) return stream_fail(L, st, s, off, (int32_t)n, engine);
        if (!tsl_isa_runs_on(p[off], engine)) return stream_fail(L, TSL_E_WRONG_ENGINE, s, off, (int32_t)n, engine);
        if (p[off] == TSL_OP_DMA_LOAD || p[off] == TSL_OP_DMA_STORE || p[off] == TSL_OP_DMA_LOAD_W)
            note_dma(L, p[off], f);
        last = p[off];
        size = tsl_isa_size(p[off]);
        off += size;
        n++;
    }
    if (last != TSL_OP_END) return stream_fail(L, TSL_E_NO_END, s, 0, -1, engine);
    for (off = 0, n = 0; off < s->size; off += tsl_isa_size(p[off]), n++) {
        if ((p[off] == TSL_OP_WAIT || p[off] == TSL_OP_SIGNAL) && (p[off + 1] & 3) == engine)
            return stream_fail(L, TSL_E_TOKEN_SELF, s, off, (int32_t)n, engine);
        if (p[off] == TSL_OP_END && off + 8 != s->size)
            return stream_fail(L, TSL_E_END_MISPLACED, s, off, (int32_t)n, engine);
    }
    if (n != s->count) return stream_fail(L, TSL_E_INSTRUCTION_COUNT, s, 0, -1, engine);
    L->m->stream[engine] = p;
    L->m->stream_size[engine] = (size_t)s->size;
    L->m->stream_count[engine] = n;
    return TSL_OK;
}

/* §6.1: run every stream abstractly (WAIT / SIGNAL only), each as far as it can. */
static tsl_status check_tokens(tsl_loader *L, const tsl_section *sec_of[TSL_ENGINES]) {
    tsl_model *m = L->m;
    uint64_t sem[TSL_ENGINES][TSL_ENGINES][16];
    size_t off[TSL_ENGINES] = {0, 0, 0, 0};
    uint32_t pc[TSL_ENGINES] = {0, 0, 0, 0};
    int moved = 1, e, c, t;
    memset(sem, 0, sizeof sem);
    while (moved) {
        moved = 0;
        for (e = 0; e < TSL_ENGINES; e++) {
            const uint8_t *p = m->stream[e];
            while (pc[e] < m->stream_count[e]) {
                uint8_t op = p[off[e]];
                int peer = p[off[e] + 1] & 3, tok = (p[off[e] + 1] >> 2) & 15;
                if (op == TSL_OP_SIGNAL) sem[e][peer][tok]++;
                else if (op == TSL_OP_WAIT) {
                    if (!sem[peer][e][tok]) break;
                    sem[peer][e][tok]--;
                }
                off[e] += tsl_isa_size(op);
                pc[e]++;
                moved = 1;
            }
        }
    }
    for (e = 0; e < TSL_ENGINES; e++) {
        if (pc[e] < m->stream_count[e]) {
            tsl_fail(L->e, TSL_E_DEADLOCK, sec_of[e]->offset + off[e], sec_of[e]->index, (int32_t)pc[e]);
            if (L->e) L->e->engine = e;
            return TSL_E_DEADLOCK;
        }
    }
    for (e = 0; e < TSL_ENGINES; e++)
        for (c = 0; c < TSL_ENGINES; c++)
            for (t = 0; t < 16; t++)
                if (sem[e][c][t]) {
                    tsl_fail(L->e, TSL_E_TOKENS_LEFT, sec_of[e]->offset, sec_of[e]->index, t);
                    if (L->e) L->e->engine = e;
                    return TSL_E_TOKENS_LEFT;
                }
    return TSL_OK;
}

/* ---- CONSTANTS ------------------------------------------------------------------------------- */
static tsl_status check_constants(tsl_loader *L, const uint8_t *d, const tsl_section *s) {
    tsl_model *m = L->m;
    const uint8_t *p = d + s->offset;
    uint64_t size;
    if (s->size < 16) return tsl_fail(L->e, TSL_E_CONSTANTS_SIZE, s->offset, s->index, -1);
    if (s->count != 0) return tsl_fail(L->e, TSL_E_CONSTANTS_COUNT, s->offset, s->index, -1);
    if (tsl_rd32(p + 4) != 0) return tsl_fail(L->e, TSL_E_CONSTANTS_RESERVED, s->offset + 4, s->index, -1);
    size = s->size - 16;
    m->constants_memory = tsl_rd32(p);
    m->constants_address = tsl_rd64(p + 8);
    if (size > 0 && m->constants_address > UINT64_MAX - size + 1)
        return tsl_fail(L->e, TSL_E_CONSTANTS_ADDRESS, s->offset + 8, s->index, -1);
    m->constants = p + 16;
    m->constants_size = size;
    return TSL_OK;
}

/* ---- IO ---------------------------------------------------------------------------------------- */
static int is_float_dtype(uint8_t dt) { return dt == TSL_FLOAT16 || dt == TSL_FLOAT32; }

static void dtype_range(uint8_t dt, int64_t *lo, int64_t *hi) {
    switch (dt) {
    case TSL_INT8: *lo = -128; *hi = 127; break;
    case TSL_UINT8: *lo = 0; *hi = 255; break;
    case TSL_INT16: *lo = -32768; *hi = 32767; break;
    default: *lo = INT32_MIN; *hi = INT32_MAX; break;
    }
}

static int finite_positive(double v, double limit) {
    return v == v && v > 0.0 && v <= limit;
}

static tsl_status check_quant(tsl_loader *L, const uint8_t *sec, uint64_t size, uint64_t heap,
                              tsl_desc *q, uint32_t qoff, uint64_t at, int32_t idx) {
    uint32_t itemsize = q->scale_type == 1 ? 4 : 8, k;
    int64_t lo, hi;
    if (q->scale_type == 0) {
        if (q->quant_count || qoff || q->axis != -1)
            return tsl_fail(L->e, TSL_E_IO_QUANT, at + 72, L->io.index, idx);
        return TSL_OK;
    }
    if (qoff % 8) return tsl_fail(L->e, TSL_E_IO_QUANT, at + 72, L->io.index, idx);
    if (q->quant_count == 0 ||
        q->quant_count > (size - (qoff < size ? qoff : size)) / (itemsize + 4))
        return tsl_fail(L->e, TSL_E_IO_QUANT, at + 76, L->io.index, idx);
    if (qoff < heap || (uint64_t)qoff + (uint64_t)q->quant_count * (itemsize + 4) > size)
        return tsl_fail(L->e, TSL_E_IO_QUANT, at + 72, L->io.index, idx);
    q->quant = sec + qoff;
    /* check_descriptor's quantisation rules, after name, shape and address */
    (void)lo; (void)hi; (void)k;
    return TSL_OK;
}

static tsl_status check_quant_values(tsl_loader *L, const tsl_desc *q, uint64_t at, int32_t idx) {
    uint32_t itemsize = q->scale_type == 1 ? 4 : 8, k, n = q->quant_count;
    int64_t lo, hi;
    if (q->scale_type == 0) return TSL_OK;
    if (is_float_dtype(q->dtype)) return tsl_fail(L->e, TSL_E_IO_QUANT_VALUE, at + 1, L->io.index, idx);
    if (q->axis == -1) {
        if (n != 1) return tsl_fail(L->e, TSL_E_IO_QUANT, at + 76, L->io.index, idx);
    } else if (q->axis < 0 || q->axis >= q->rank) {
        return tsl_fail(L->e, TSL_E_IO_QUANT, at + 4, L->io.index, idx);
    } else if (n != q->shape[q->axis]) {
        return tsl_fail(L->e, TSL_E_IO_QUANT, at + 76, L->io.index, idx);
    }
    for (k = 0; k < n; k++) {
        double s;
        if (itemsize == 4) {
            float f;
            uint32_t b = tsl_rd32(q->quant + 4 * k);
            memcpy(&f, &b, 4);
            s = f;
            if (!finite_positive(s, 3.4028234663852886e38)) goto bad;
        } else {
            uint64_t b = tsl_rd64(q->quant + 8 * k);
            memcpy(&s, &b, 8);
            if (!finite_positive(s, 1.7976931348623157e308)) goto bad;
        }
    }
    dtype_range(q->dtype, &lo, &hi);
    for (k = 0; k < n; k++) {
        int32_t z = (int32_t)tsl_rd32(q->quant + (size_t)n * itemsize + 4 * k);
        if (z < lo || z > hi) goto bad;
    }
    return TSL_OK;
bad:
    return tsl_fail(L->e, TSL_E_IO_QUANT_VALUE, at + 72, L->io.index, idx);
}

static tsl_status check_descriptor(tsl_loader *L, const uint8_t *sec, uint64_t size, uint32_t i,
                                   tsl_desc *q) {
    uint64_t heap = (uint64_t)L->io.count * DESC_SIZE, at = L->io.offset + (uint64_t)i * DESC_SIZE;
    const uint8_t *p = sec + (size_t)i * DESC_SIZE;
    uint32_t name_off, name_len, qoff, k;
    uint64_t nbytes = 1;
    size_t bad;
    int32_t idx = (int32_t)i;
    tsl_status st;
    if (p[0] != 1 && p[0] != 2) return tsl_fail(L->e, TSL_E_IO_DIRECTION, at, L->io.index, idx);
    if (p[1] < 1 || p[1] > 6) return tsl_fail(L->e, TSL_E_IO_DTYPE, at + 1, L->io.index, idx);
    if (p[3] > 2) return tsl_fail(L->e, TSL_E_IO_SCALE_TYPE, at + 3, L->io.index, idx);
    if (p[5] || tsl_rd16(p + 6) || tsl_rd32(p + 12)) return tsl_fail(L->e, TSL_E_IO_RESERVED, at + 5, L->io.index, idx);
    q->output = p[0] == 2;
    q->dtype = p[1];
    q->rank = p[2];
    q->scale_type = p[3];
    q->axis = (int8_t)p[4];
    q->memory = tsl_rd32(p + 8);
    q->address = tsl_rd64(p + 16);
    q->nbytes = tsl_rd64(p + 24);
    if (q->rank > TSL_MAX_RANK) return tsl_fail(L->e, TSL_E_IO_RANK, at + 2, L->io.index, idx);
    for (k = 0; k < TSL_MAX_RANK; k++) {
        q->shape[k] = tsl_rd32(p + 32 + 4 * k);
        if (k >= q->rank && q->shape[k]) return tsl_fail(L->e, TSL_E_IO_SHAPE, at + 32, L->io.index, idx);
    }
    name_off = tsl_rd32(p + 64);
    name_len = tsl_rd32(p + 68);
    if (name_off < heap || (uint64_t)name_off + name_len > size)
        return tsl_fail(L->e, TSL_E_IO_NAME, at + 64, L->io.index, idx);
    if (!tsl_utf8_valid(sec + name_off, name_len, &bad))
        return tsl_fail(L->e, TSL_E_IO_NAME, at + 64, L->io.index, idx);
    q->name.ptr = sec + name_off;
    q->name.len = name_len;
    q->name.json = 0;
    qoff = tsl_rd32(p + 72);
    q->quant_count = tsl_rd32(p + 76);
    q->quant = NULL;
    if ((st = check_quant(L, sec, size, heap, q, qoff, at, idx)) != TSL_OK) return st;
    /* check_descriptor: name, shape, address, quantisation; then nbytes */
    if (name_len < 1 || name_len > 1024 || memchr(q->name.ptr, 0, name_len))
        return tsl_fail(L->e, TSL_E_IO_NAME, at + 64, L->io.index, idx);
    for (k = 0; k < q->rank; k++) {
        if (q->shape[k] == 0) return tsl_fail(L->e, TSL_E_IO_SHAPE, at + 32 + 4 * k, L->io.index, idx);
        nbytes *= q->shape[k];
        if (nbytes > MAX_TENSOR_BYTES) return tsl_fail(L->e, TSL_E_IO_SHAPE, at + 32, L->io.index, idx);
    }
    nbytes *= tsl_dtype_size((tsl_dtype)q->dtype);
    if (nbytes > MAX_TENSOR_BYTES) return tsl_fail(L->e, TSL_E_IO_SHAPE, at + 32, L->io.index, idx);
    if (nbytes > 0 && q->address > UINT64_MAX - nbytes + 1)
        return tsl_fail(L->e, TSL_E_IO_ADDRESS, at + 16, L->io.index, idx);
    if ((st = check_quant_values(L, q, at, idx)) != TSL_OK) return st;
    if (q->nbytes != nbytes) return tsl_fail(L->e, TSL_E_IO_NBYTES, at + 24, L->io.index, idx);
    return TSL_OK;
}

static tsl_status check_io(tsl_loader *L, const uint8_t *d) {
    const tsl_section *s = &L->io;
    tsl_model *m = L->m;
    const uint8_t *sec = d + s->offset;
    uint32_t i, j, n_in = 0;
    tsl_desc tmp;
    tsl_status st;
    if (s->count > s->size / DESC_SIZE) return tsl_fail(L->e, TSL_E_IO_COUNT, s->offset, s->index, -1);
    for (i = 0; i < s->count; i++) {
        tsl_desc *q = i < TSL_MAX_DESCRIPTORS ? &m->desc[i] : &tmp;
        if ((st = check_descriptor(L, sec, s->size, i, q)) != TSL_OK) return st;
    }
    if (s->count > TSL_MAX_DESCRIPTORS) return tsl_fail(L->e, TSL_E_LIMIT, s->offset, s->index, 0);
    /* inputs first (the runtime's order), keeping each group's relative order */
    for (i = 0; i < s->count; i++) n_in += !m->desc[i].output;
    for (i = 1; i < s->count; i++) { /* stable: move inputs before outputs */
        tsl_desc x = m->desc[i];
        j = i;
        while (j > 0 && !x.output && m->desc[j - 1].output) { m->desc[j] = m->desc[j - 1]; j--; }
        m->desc[j] = x;
    }
    for (i = 0; i < s->count; i++)
        for (j = 0; j < i; j++)
            if (tsl_str_eq(m->desc[i].name, m->desc[j].name))
                return tsl_fail(L->e, TSL_E_IO_DUPLICATE, s->offset, s->index, (int32_t)i);
    m->n_desc = s->count;
    m->n_inputs_desc = n_in;
    return TSL_OK;
}

/* ---- placements (§7) ------------------------------------------------------------------------- */
static tsl_status check_placements(tsl_loader *L) {
    const tsl_target *t = L->target;
    tsl_model *m = L->m;
    uint32_t i;
    if (!t || t->memory_count == 0) return TSL_OK;
    if (m->constants_memory >= t->memory_count) return tsl_fail(L->e, TSL_E_MEMORY_INDEX, TSL_NO_OFFSET, -1, -1);
    if (m->constants_address > t->memory_size[m->constants_memory] ||
        m->constants_size > t->memory_size[m->constants_memory] - m->constants_address)
        return tsl_fail(L->e, TSL_E_MEMORY_RANGE, TSL_NO_OFFSET, -1, -1);
    for (i = 0; i < m->n_desc; i++) {
        const tsl_desc *q = &m->desc[i];
        if (q->memory >= t->memory_count) return tsl_fail(L->e, TSL_E_MEMORY_INDEX, TSL_NO_OFFSET, -1, (int32_t)i);
        if (q->address > t->memory_size[q->memory] || q->nbytes > t->memory_size[q->memory] - q->address)
            return tsl_fail(L->e, TSL_E_MEMORY_RANGE, TSL_NO_OFFSET, -1, (int32_t)i);
    }
    return TSL_OK;
}

/* ---- the whole file ------------------------------------------------------------------------- */
static tsl_status load_sections(tsl_loader *L, const uint8_t *d, size_t n) {
    tsl_section sec[MAX_SECTIONS];
    const tsl_section *by_kind[0x14];
    const tsl_section *sec_of[TSL_ENGINES];
    static const tsl_section none = {0, -1, 0, 0, 0};
    uint32_t count = 0, i;
    int e;
    tsl_status st;
    if ((st = check_header(L, d, n, &count)) != TSL_OK) return st;
    if ((st = check_layout(L, d, n, count, sec)) != TSL_OK) return st;
    for (i = 0; i < 0x14; i++) by_kind[i] = NULL;
    for (i = 0; i < count; i++)
        if (sec[i].kind < 0x14) by_kind[sec[i].kind] = &sec[i];
    if (!by_kind[KIND_CONSTANTS] || !by_kind[KIND_IO] || !by_kind[KIND_METADATA])
        return tsl_fail(L->e, TSL_E_SECTION_MISSING, TSL_NO_OFFSET, -1, -1);
    for (e = 0; e < TSL_ENGINES; e++) {
        sec_of[e] = by_kind[e + 1] ? by_kind[e + 1] : &none;
        if (by_kind[e + 1] && (st = check_stream(L, d, by_kind[e + 1], e)) != TSL_OK) return st;
    }
    if ((st = check_tokens(L, sec_of)) != TSL_OK) return st;
    if ((st = check_constants(L, d, by_kind[KIND_CONSTANTS])) != TSL_OK) return st;
    L->io = *by_kind[KIND_IO];
    if ((st = check_io(L, d)) != TSL_OK) return st;
    L->metadata = *by_kind[KIND_METADATA];
    L->has_host = by_kind[KIND_HOST] != NULL;
    if (L->has_host) L->host = *by_kind[KIND_HOST];
    if (L->metadata.count != 0)
        return tsl_fail(L->e, TSL_E_JSON_COUNT, L->metadata.offset, L->metadata.index, -1);
    if ((st = tsl_json_check(d + L->metadata.offset, (size_t)L->metadata.size, L->metadata.offset,
                             L->metadata.index, L->e)) != TSL_OK)
        return st;
    if ((st = tsl_load_host(L)) != TSL_OK) return st;
    if ((st = tsl_check_metadata(L)) != TSL_OK) return st;
    if ((st = check_placements(L)) != TSL_OK) return st;
    return tsl_plan(L);
}

tsl_status tsl_load(tsl_model *m, const uint8_t *data, size_t size, const tsl_target *target,
                    tsl_error *err) {
    tsl_loader L;
    tsl_error local;
    tsl_status st;
    if (!err) err = &local;
    tsl_error_clear(err);
    if (!m || (!data && size)) return tsl_fail(err, TSL_E_ARGUMENT, TSL_NO_OFFSET, -1, -1);
    memset(m, 0, sizeof *m);
    m->data = data;
    m->size = size;
    memset(&L, 0, sizeof L);
    L.m = m;
    L.target = target;
    L.e = err;
    st = load_sections(&L, data, size);
    if (st != TSL_OK) {
        memset(m, 0, sizeof *m); /* a failed load leaves no usable model */
        return err->code;
    }
    return TSL_OK;
}
