/* The C NPU model as a driver (tessel/tessel_sim.h): its memories, and the four queues run as
 * docs/isa.md §1 says: in order, with the dependency tokens. Each engine runs as far as it can
 * (until a WAIT finds no token, or a SIGNAL finds its count at 255), then the next, round robin,
 * until every submitted instruction has run; if none can move, the engines deadlock. Before an
 * instruction runs, the static rules of §3 are checked (a violation traps). */
#include "model.h"

#define ALIGN16(x) (((x) + 15u) & ~(size_t)15u)

size_t tsl_sim_memory_size(const tsl_sim_config *c) {
    return ALIGN16((size_t)c->sram_bytes) + ALIGN16((size_t)c->acc_entries * 4) +
           ALIGN16((size_t)c->lut_entries * 2) + ALIGN16((size_t)c->sram_bytes * 4 + 16);
}

tsl_status tsl_sim_init(tsl_sim *s, const tsl_sim_config *cfg, void *memory, size_t size) {
    uint8_t *p = (uint8_t *)memory;
    if (!s || !cfg || !memory || cfg->offchip_count > TSL_MEMORIES) return TSL_E_ARGUMENT;
    if (size < tsl_sim_memory_size(cfg) || ((uintptr_t)memory & 15u)) return TSL_E_ARENA;
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->sram = p;
    p += ALIGN16((size_t)cfg->sram_bytes);
    s->acc = (int32_t *)(void *)p;
    p += ALIGN16((size_t)cfg->acc_entries * 4);
    s->lut = (int16_t *)(void *)p;
    p += ALIGN16((size_t)cfg->lut_entries * 2);
    s->scratch = p;
    s->scratch_size = (uint64_t)cfg->sram_bytes * 4 + 16;
    return TSL_OK;
}

uint8_t *tsl_sim_offchip(tsl_sim *s, int mem, int64_t addr, int64_t n, int write) {
    const tsl_sim_memory *m;
    if (mem < 0 || mem >= TSL_MEMORIES) return NULL;
    m = &s->mem[mem];
    if (!m->mapped || (write && !m->writable) || addr < 0 || (uint64_t)addr < m->base ||
        (uint64_t)n > m->size || (uint64_t)addr - m->base > m->size - (uint64_t)n)
        return NULL;
    return m->host + ((uint64_t)addr - m->base);
}

/* ---- the driver interface ------------------------------------------------------------------- */
static tsl_status sim_reset(void *ctx) {
    tsl_sim *s = (tsl_sim *)ctx;
    memset(s->sram, 0, s->cfg.sram_bytes);
    memset(s->acc, 0, (size_t)s->cfg.acc_entries * 4);
    memset(s->lut, 0, (size_t)s->cfg.lut_entries * 2);
    memset(s->sem, 0, sizeof s->sem);
    memset(s->mem, 0, sizeof s->mem);
    memset(s->queue, 0, sizeof s->queue);
    s->trap = NULL;
    return TSL_OK;
}

static tsl_status sim_map(void *ctx, uint32_t mem, uint64_t base, void *host, uint64_t size,
                          int writable) {
    tsl_sim *s = (tsl_sim *)ctx;
    if (mem >= TSL_MEMORIES) return TSL_E_ARGUMENT;
    s->mem[mem].base = base;
    s->mem[mem].size = size;
    s->mem[mem].host = (uint8_t *)host;
    s->mem[mem].mapped = 1;
    s->mem[mem].writable = writable;
    return TSL_OK;
}

static tsl_status sim_submit(void *ctx, tsl_engine engine, const uint8_t *cmds, size_t nbytes,
                             uint32_t first, uint32_t count) {
    tsl_sim *s = (tsl_sim *)ctx;
    tsl_sim_queue *q;
    if ((unsigned)engine >= TSL_ENGINES) return TSL_E_ARGUMENT;
    q = &s->queue[engine];
    q->cmds = cmds;
    q->nbytes = nbytes;
    q->at = 0;
    q->first = q->pc = first;
    q->end = first + count;
    return TSL_OK;
}

static tsl_status sim_start(void *ctx) {
    (void)ctx;
    return TSL_OK;
}

static uint64_t mul_sat(uint64_t a, uint64_t b) {
    return (b && a > UINT64_MAX / b) ? UINT64_MAX : a * b;
}

/* elements or MACs an instruction processes (its "work"; MACs for the matrix engine) */
static uint64_t work_of(uint8_t op, const int64_t *f) {
    switch (op) {
    case TSL_OP_DMA_LOAD: case TSL_OP_DMA_STORE:
        return mul_sat(mul_sat((uint64_t)f[DMA_D0], (uint64_t)f[DMA_D0 + 1]), mul_sat((uint64_t)f[DMA_D0 + 2], (uint64_t)f[DMA_D0 + 3]));
    case TSL_OP_COPY:
        return mul_sat(mul_sat((uint64_t)f[CP_D0], (uint64_t)f[CP_D0 + 1]), mul_sat((uint64_t)f[CP_D0 + 2], (uint64_t)f[CP_D0 + 3]));
    case TSL_OP_CONV:
        return mul_sat(mul_sat((uint64_t)(f[CV_OUT_H] * f[CV_OUT_W]), (uint64_t)f[CV_COUT]),
                       (uint64_t)(f[CV_KH] * f[CV_KW] * f[CV_CIN]));
    case TSL_OP_MATMUL: return mul_sat((uint64_t)(f[MM_M] * f[MM_N]), (uint64_t)f[MM_K]);
    case TSL_OP_DWCONV:
        return mul_sat((uint64_t)(f[DW_OUT_H] * f[DW_OUT_W] * f[DW_CH]), (uint64_t)(f[DW_KH] * f[DW_KW]));
    case TSL_OP_POOL:
        return mul_sat((uint64_t)(f[PO_OUT_H] * f[PO_OUT_W] * f[PO_CH]), (uint64_t)(f[PO_KH] * f[PO_KW]));
    case TSL_OP_REQUANT: return (uint64_t)(f[RQ_ROWS] * f[RQ_CH]);
    case TSL_OP_LUT_LOAD: return (uint64_t)f[LL_COUNT];
    case TSL_OP_DMA_LOAD_W: return (uint64_t)f[WL_OUT_BYTES];
    default: /* ELTWISE, LUT, REDUCE, UNARY: d0 d1 d2 after 1 to 3 leading fields */
        {
            int at = op == TSL_OP_ELTWISE ? EW_D0 : op == TSL_OP_LUT ? LU_D0 : op == TSL_OP_REDUCE ? RD_D0 : UN_D0;
            return mul_sat(mul_sat((uint64_t)f[at], (uint64_t)f[at + 1]), (uint64_t)f[at + 2]);
        }
    }
}

static tsl_status execute(tsl_sim *s, int engine, uint8_t op, const int64_t *f) {
    const char *why;
    uint64_t w;
    if (!tsl_isa_runs_on(op, engine)) { s->trap = "instruction of another engine"; return TSL_E_NPU_TRAP; }
    if ((why = tsl_sim_static_error(s, op, f)) != NULL) { s->trap = why; return TSL_E_NPU_TRAP; }
    w = work_of(op, f);
    if (s->budget && (w > s->budget || s->work > s->budget - w)) {
        s->trap = "work budget exceeded";
        return TSL_E_NPU_TRAP;
    }
    s->work += w;
    switch (op) {
    case TSL_OP_CONV: case TSL_OP_MATMUL: case TSL_OP_DWCONV: return tsl_sim_matrix(s, op, f);
    case TSL_OP_DMA_LOAD: case TSL_OP_DMA_STORE: case TSL_OP_COPY: case TSL_OP_LUT_LOAD:
        return tsl_sim_move(s, op, f);
    case TSL_OP_DMA_LOAD_W: return tsl_sim_wdecode(s, f);
    default: return tsl_sim_vector(s, op, f);
    }
}

/* Run one queue until it blocks or ends; *moved when it ran an instruction. */
static tsl_status run_engine(tsl_sim *s, int e, int *moved) {
    tsl_sim_queue *q = &s->queue[e];
    int64_t f[TSL_MAX_FIELDS];
    while (q->pc < q->end) {
        uint8_t op;
        tsl_status st;
        if (q->at >= q->nbytes) { s->trap = "command stream shorter than its count"; return TSL_E_NPU_TRAP; }
        op = q->cmds[q->at];
        if (tsl_isa_decode(q->cmds + q->at, q->nbytes - q->at, f, NULL) != TSL_OK) {
            s->trap = "malformed instruction";
            return TSL_E_NPU_TRAP;
        }
        if (op == TSL_OP_WAIT) {
            uint8_t *c = &s->sem[f[0]][e][f[1]];
            if (*c == 0) return TSL_OK;
            (*c)--;
        } else if (op == TSL_OP_SIGNAL) {
            uint8_t *c = &s->sem[e][f[0]][f[1]];
            if (*c == 255) return TSL_OK;
            (*c)++;
        } else if (op != TSL_OP_END) {
            if ((st = execute(s, e, op, f)) != TSL_OK) return st;
        }
        q->at += tsl_isa_size(op);
        q->pc++;
        s->executed++;
        *moved = 1;
    }
    return TSL_OK;
}

static tsl_status sim_wait(void *ctx, tsl_error *err) {
    tsl_sim *s = (tsl_sim *)ctx;
    int e;
    for (;;) {
        int moved = 0, done = 1;
        for (e = 0; e < TSL_ENGINES; e++) {
            tsl_sim_queue *q = &s->queue[e];
            tsl_status st;
            if (q->pc >= q->end) continue;
            if ((st = run_engine(s, e, &moved)) != TSL_OK) {
                tsl_fail(err, st, TSL_NO_OFFSET, -1, (int32_t)q->pc);
                if (err) err->engine = e;
                return st;
            }
        }
        for (e = 0; e < TSL_ENGINES; e++)
            if (s->queue[e].pc < s->queue[e].end) done = 0;
        if (done) return TSL_OK;
        if (!moved) {
            for (e = 0; e < TSL_ENGINES; e++)
                if (s->queue[e].pc < s->queue[e].end) break;
            s->trap = "deadlock: every engine waits";
            tsl_fail(err, TSL_E_NPU_DEADLOCK, TSL_NO_OFFSET, -1, (int32_t)s->queue[e].pc);
            if (err) err->engine = e;
            return TSL_E_NPU_DEADLOCK;
        }
    }
}

const tsl_driver tsl_sim_driver = {sim_reset, sim_map, sim_submit, sim_start, sim_wait};
