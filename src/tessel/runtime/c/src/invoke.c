/* tsl_prepare and tsl_invoke: place the constants, then run one inference as the Python
 * runtime does (runtime/compiled.py): host part 0, NPU region 1, host part 1, ... the epilogue;
 * before a region its input values are copied to their descriptors' addresses, after it its
 * outputs are copied back; the NPU runs through the driver, its state kept across regions. */
#include "kernels.h"
#include "ir_lex.h"
#include "tessel/tessel_npu.h"

/* ---- constants ------------------------------------------------------------------------------ */
static void store_scalar(uint8_t *p, uint8_t dt, const ir_num *n, int is_bool) {
    switch (dt) {
    case TSL_FLOAT32: {
        float f = n->is_float ? (float)n->f : (float)n->i;
        (void)is_bool;
        memcpy(p, &f, 4);
        break;
    }
    case TSL_BOOL:
        *p = n->is_float ? (n->f != 0.0 || n->f != n->f) : n->i != 0;
        break;
    case TSL_INT8: case TSL_UINT8: *p = (uint8_t)n->i; break;
    case TSL_INT16: { uint16_t v = (uint16_t)n->i; memcpy(p, &v, 2); break; }
    case TSL_INT32: { uint32_t v = (uint32_t)n->i; memcpy(p, &v, 4); break; }
    default: { uint64_t v = (uint64_t)n->i; memcpy(p, &v, 8); break; }
    }
}

tsl_status tsl_place_constant(const tsl_model *m, const tsl_node *n, uint8_t *host) {
    const tsl_value *v = &m->value[n->out];
    uint8_t *out = host + v->offset;
    if (n->flag == TSL_CONST_BASE64) {
        tsl_str s;
        s.ptr = n->data;
        s.len = n->data_len;
        s.json = 1;
        return ir_base64(s, out) == (int64_t)v->nbytes ? TSL_OK : TSL_E_HOST_PARSE;
    } else {
        ir_cur c;
        int64_t k;
        uint32_t sz = tsl_dtype_size((tsl_dtype)v->dtype);
        c.p = n->data;
        c.end = n->data + n->data_len;
        for (k = 0; k < n->i[0]; k++) {
            ir_num num;
            int is_bool = 0;
            if (k) ir_accept(&c, ",");
            ir_skip(&c);
            if (ir_starts(&c, "true") || ir_starts(&c, "false")) {
                tsl_str w;
                ir_ident(&c, &w);
                num.is_float = 0;
                num.i = ir_word_is(w, "true");
                is_bool = 1;
            } else if (ir_number(&c, &num) != TSL_OK) {
                return TSL_E_HOST_PARSE;
            }
            store_scalar(out + (uint64_t)k * sz, v->dtype, &num, is_bool);
        }
    }
    return TSL_OK;
}

static uint8_t *window_ptr(const tsl_model *m, uint8_t *arena, uint32_t mem, uint64_t address) {
    const tsl_window *w = &m->window[mem];
    return arena + w->arena_offset + (address - w->lo);
}

static void place_npu_constants(const tsl_model *m, uint8_t *arena) {
    if (m->constants_size && !m->window[m->constants_memory].in_binary)
        memcpy(window_ptr(m, arena, m->constants_memory, m->constants_address), m->constants,
               (size_t)m->constants_size);
}

static tsl_status check_arena(const tsl_model *m, uint8_t *arena, size_t size, tsl_error *err) {
    if (!m || !arena) return tsl_fail(err, TSL_E_ARGUMENT, TSL_NO_OFFSET, -1, -1);
    if (((uintptr_t)arena & 7u) != 0 || (uint64_t)size < m->arena_size)
        return tsl_fail(err, TSL_E_ARENA, TSL_NO_OFFSET, -1, -1);
    return TSL_OK;
}

tsl_status tsl_prepare(const tsl_model *m, uint8_t *arena, size_t size, tsl_error *err) {
    uint32_t i;
    tsl_status st;
    tsl_error_clear(err);
    if ((st = check_arena(m, arena, size, err)) != TSL_OK) return st;
    place_npu_constants(m, arena);
    for (i = 0; i < m->n_nodes; i++) {
        const tsl_node *n = &m->node[i];
        if (n->op != TSL_H_CONSTANT || m->value[n->out].part == -2) continue;
        if ((st = tsl_place_constant(m, n, arena + m->host_offset)) != TSL_OK)
            return tsl_fail(err, st, TSL_NO_OFFSET, -1, (int32_t)i);
    }
    return TSL_OK;
}

/* ---- one inference ------------------------------------------------------------------------------ */
/* The NPU's memories as a new run sees them: zeros, and the constants. */
static void reset_windows(const tsl_model *m, uint8_t *arena) {
    uint32_t mem;
    for (mem = 0; mem < TSL_MEMORIES; mem++) {
        const tsl_window *w = &m->window[mem];
        uint8_t *base = arena + w->arena_offset;
        if (!w->used || w->in_binary) continue;
        if (mem == m->constants_memory && m->constants_size && !m->constants_writable) {
            uint64_t c0 = m->constants_address - w->lo, c1 = c0 + m->constants_size;
            memset(base, 0, (size_t)c0);
            memset(base + c1, 0, (size_t)(w->hi - w->lo - c1));
        } else {
            memset(base, 0, (size_t)(w->hi - w->lo));
        }
    }
    if (m->constants_writable) place_npu_constants(m, arena);
}

static tsl_status driver_status(tsl_status st, tsl_error *err) {
    if (st == TSL_E_NPU_TRAP || st == TSL_E_NPU_DEADLOCK) {
        if (err) err->code = st;
        return st;
    }
    return tsl_fail(err, TSL_E_DRIVER, TSL_NO_OFFSET, -1, (int32_t)st);
}

static tsl_status map_memories(const tsl_model *m, uint8_t *arena, const tsl_driver *drv, void *ctx) {
    uint32_t mem;
    for (mem = 0; mem < TSL_MEMORIES; mem++) {
        const tsl_window *w = &m->window[mem];
        void *host;
        tsl_status st;
        if (!w->used) continue;
        host = w->in_binary ? (void *)(uintptr_t)m->constants : (void *)(arena + w->arena_offset);
        st = drv->map_memory(ctx, mem, w->lo, host, w->hi - w->lo, !w->in_binary);
        if (st != TSL_OK) return st;
    }
    return TSL_OK;
}

static tsl_status run_region(const tsl_model *m, uint32_t k, uint8_t *arena, uint32_t *pc,
                             size_t *pc_byte, const tsl_driver *drv, void *ctx, tsl_error *err) {
    const tsl_region *g = &m->region[k];
    uint8_t *host = arena + m->host_offset;
    uint32_t i;
    int e, any = 0;
    tsl_status st;
    for (i = 0; i < g->in_count; i++) {
        const tsl_desc *d = &m->desc[m->region_io[g->in_first + i]];
        const tsl_value *v = &m->value[m->region_in_value[g->in_first + i]];
        memcpy(window_ptr(m, arena, d->memory, d->address), host + v->offset, (size_t)d->nbytes);
    }
    for (e = 0; e < TSL_ENGINES; e++) {
        if (g->end[e] <= pc[e]) continue;
        st = drv->submit(ctx, (tsl_engine)e, m->stream[e] + pc_byte[e], g->end_byte[e] - pc_byte[e],
                         pc[e], g->end[e] - pc[e]);
        if (st != TSL_OK) return driver_status(st, err);
        pc[e] = g->end[e];
        pc_byte[e] = g->end_byte[e];
        any = 1;
    }
    if (any) {
        if ((st = drv->start(ctx)) != TSL_OK) return driver_status(st, err);
        if ((st = drv->wait(ctx, err)) != TSL_OK) return driver_status(st, err);
    }
    for (i = 0; i < g->out_count; i++) {
        const tsl_desc *d = &m->desc[m->region_io[g->out_first + i]];
        const tsl_value *v = &m->value[m->region_out_value[g->out_first + i]];
        memcpy(host + v->offset, window_ptr(m, arena, d->memory, d->address), (size_t)d->nbytes);
    }
    return TSL_OK;
}

tsl_status tsl_invoke(const tsl_model *m, uint8_t *arena, size_t size, const tsl_driver *drv,
                      void *ctx, tsl_error *err) {
    uint32_t pc[TSL_ENGINES] = {0, 0, 0, 0}, k, i;
    size_t pc_byte[TSL_ENGINES] = {0, 0, 0, 0};
    uint8_t *host;
    tsl_status st;
    tsl_error_clear(err);
    if ((st = check_arena(m, arena, size, err)) != TSL_OK) return st;
    if (!drv) return tsl_fail(err, TSL_E_ARGUMENT, TSL_NO_OFFSET, -1, -1);
    host = arena + m->host_offset;
    if ((st = drv->reset(ctx)) != TSL_OK) return driver_status(st, err);
    if ((st = map_memories(m, arena, drv, ctx)) != TSL_OK) return driver_status(st, err);
    reset_windows(m, arena);
    for (k = 0; k <= m->n_regions; k++) {
        const tsl_part *p = &m->part[k];
        for (i = 0; p->present && i < p->node_count; i++) {
            const tsl_node *n = &m->node[p->node_first + i];
            if ((st = tsl_run_node(m, n, host)) != TSL_OK)
                return tsl_fail(err, st, TSL_NO_OFFSET, -1, (int32_t)(p->node_first + i));
        }
        if (k < m->n_regions && (st = run_region(m, k, arena, pc, pc_byte, drv, ctx, err)) != TSL_OK)
            return st;
    }
    return TSL_OK;
}
