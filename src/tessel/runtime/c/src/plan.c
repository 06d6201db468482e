/* The plan of one inference, fixed at load: the type of every value (model inputs from the
 * prologue or the descriptors, region outputs from the descriptors, host values from the IR),
 * the types where parts meet (a value must be what the part reading it declares), the model's
 * I/O descriptions, the off-chip windows the NPU touches, and the arena: windows, then the host
 * values packed by their live ranges. */
#include "plan.h"

#define ALIGN8(x) (((x) + 7u) & ~(uint64_t)7u)

static void type_of_desc(tsl_value *v, const tsl_desc *d) {
    int k;
    v->dtype = d->dtype;
    v->rank = d->rank;
    for (k = 0; k < TSL_MAX_RANK; k++) v->shape[k] = k < d->rank ? d->shape[k] : 0;
    v->nbytes = d->nbytes;
    v->quantised = 0;
    if (d->scale_type && d->axis == -1 && d->quant_count == 1) {
        v->quantised = 1;
        if (d->scale_type == 1) {
            float f;
            uint32_t b = tsl_rd32(d->quant);
            memcpy(&f, &b, 4);
            v->scale = f;
            v->zero_point = (int32_t)tsl_rd32(d->quant + 4);
        } else {
            uint64_t b = tsl_rd64(d->quant);
            memcpy(&v->scale, &b, 8);
            v->zero_point = (int32_t)tsl_rd32(d->quant + 8);
        }
    }
}

static int same_type(const tsl_value *a, const tsl_value *b) {
    int k;
    if (a->dtype != b->dtype || a->rank != b->rank) return 0;
    for (k = 0; k < a->rank; k++)
        if (a->shape[k] != b->shape[k]) return 0;
    return 1;
}

static int find_desc(const tsl_model *m, tsl_str name, int output) {
    uint32_t i;
    for (i = 0; i < m->n_desc; i++)
        if (m->desc[i].output == output && tsl_str_eq(m->desc[i].name, name)) return (int)i;
    return -1;
}

/* model inputs: the prologue's declared input, else the input descriptor of that name */
static tsl_status model_input_types(tsl_loader *L) {
    tsl_model *m = L->m;
    uint32_t i, j;
    for (i = 0; i < m->n_model_in; i++) {
        tsl_value *v = &m->value[m->model_in[i]];
        int found = 0, d;
        for (j = 0; j < m->n_values && m->part[0].present; j++) {
            const tsl_value *g = &m->value[j];
            if (g->kind == TSL_V_GRAPH_INPUT && g->part == 0 && tsl_str_eq(g->name, v->name)) {
                v->dtype = g->dtype;
                v->rank = g->rank;
                memcpy(v->shape, g->shape, sizeof v->shape);
                v->nbytes = g->nbytes;
                v->quantised = g->quantised == 1;
                v->scale = g->scale;
                v->zero_point = g->zero_point;
                found = 1;
            }
        }
        if (found) continue;
        d = find_desc(m, v->name, 0);
        if (d < 0) return tsl_fail(L->e, TSL_E_META_DATAFLOW, TSL_NO_OFFSET, L->metadata.index, (int32_t)i);
        type_of_desc(v, &m->desc[d]);
    }
    return TSL_OK;
}

static tsl_status meeting_types(tsl_loader *L) {
    tsl_model *m = L->m;
    uint32_t i, k;
    for (i = 0; i < m->n_values; i++) {
        tsl_value *v = &m->value[i];
        if (v->kind == TSL_V_REGION_OUTPUT) type_of_desc(v, &m->desc[v->source]);
    }
    for (i = 0; i < m->n_values; i++) {
        const tsl_value *v = &m->value[i];
        if (v->kind == TSL_V_GRAPH_INPUT && v->part >= 0 && !same_type(v, &m->value[v->source])) {
            tsl_fail(L->e, TSL_E_HOST_TYPE, TSL_NO_OFFSET, -1, (int32_t)i);
            if (L->e) L->e->name = v->name;
            return TSL_E_HOST_TYPE;
        }
    }
    for (k = 0; k < m->n_regions; k++) {
        const tsl_region *g = &m->region[k];
        for (i = 0; i < g->in_count; i++) {
            tsl_value want;
            const tsl_desc *d = &m->desc[m->region_io[g->in_first + i]];
            type_of_desc(&want, d);
            if (!same_type(&want, &m->value[m->region_in_value[g->in_first + i]])) {
                tsl_fail(L->e, TSL_E_HOST_TYPE, TSL_NO_OFFSET, -1, (int32_t)k);
                if (L->e) L->e->name = d->name;
                return TSL_E_HOST_TYPE;
            }
        }
    }
    return TSL_OK;
}

static void info_of(tsl_tensor_info *t, const tsl_value *v) {
    int k;
    memset(t, 0, sizeof *t);
    t->name = v->name;
    t->dtype = (tsl_dtype)v->dtype;
    t->rank = v->rank;
    for (k = 0; k < v->rank; k++) t->shape[k] = v->shape[k];
    t->nbytes = v->nbytes;
    t->quantised = v->quantised == 1;
    t->scale = v->scale;
    t->zero_point = v->zero_point;
}

/* ---- off-chip windows ---------------------------------------------------------------------- */
static void widen(tsl_window *w, uint64_t lo, uint64_t hi) {
    if (!w->used || lo < w->lo) w->lo = lo;
    if (!w->used || hi > w->hi) w->hi = hi;
    w->used = 1;
}

tsl_status tsl_plan_windows(tsl_loader *L) {
    tsl_model *m = L->m;
    uint32_t i, cm = m->constants_memory;
    uint64_t c0 = m->constants_address, c1 = c0 + m->constants_size;
    int desc_in_cm = 0, desc_over_c = 0, mem;
    for (i = 0; i < m->n_desc; i++) {
        const tsl_desc *d = &m->desc[i];
        if (d->memory >= TSL_MEMORIES) return tsl_fail(L->e, TSL_E_MEMORY_INDEX, TSL_NO_OFFSET, L->io.index, (int32_t)i);
        if (d->nbytes > UINT64_MAX - d->address) return tsl_fail(L->e, TSL_E_LIMIT, TSL_NO_OFFSET, L->io.index, 8);
        if (d->memory == cm) {
            desc_in_cm = 1;
            if (d->address < c1 && d->address + d->nbytes > c0) desc_over_c = 1;
        }
        widen(&m->window[d->memory], d->address, d->address + d->nbytes);
    }
    for (mem = 0; mem < TSL_MEMORIES; mem++) {
        if (L->loads[mem]) widen(&m->window[mem], L->load_lo[mem], L->load_hi[mem]);
        if (L->stores[mem]) widen(&m->window[mem], L->store_lo[mem], L->store_hi[mem]);
    }
    if (m->constants_size == 0) return TSL_OK;
    if (cm >= TSL_MEMORIES) return tsl_fail(L->e, TSL_E_MEMORY_INDEX, TSL_NO_OFFSET, -1, -1);
    if (c1 < c0) return tsl_fail(L->e, TSL_E_LIMIT, TSL_NO_OFFSET, -1, 8); /* ends at 2^64 */
    if (!L->stores[cm] && !desc_in_cm &&
        (!L->loads[cm] || (L->load_lo[cm] >= c0 && L->load_hi[cm] <= c1))) {
        tsl_window *w = &m->window[cm];
        w->lo = c0;
        w->hi = c1;
        w->used = 1;
        w->in_binary = 1; /* read in place: the constants stay in the binary (flash) */
        return TSL_OK;
    }
    widen(&m->window[cm], c0, c1);
    m->constants_writable = desc_over_c ||
        (L->stores[cm] && L->store_lo[cm] < c1 && L->store_hi[cm] > c0);
    return TSL_OK;
}

/* ---- the host area ---------------------------------------------------------------------------- */
static int overlap(const tsl_value *a, const tsl_value *b) {
    return a->step <= b->last_use && b->step <= a->last_use;
}

static int stored(const tsl_value *v) {
    return v->kind != TSL_V_GRAPH_INPUT && v->part != -2 && v->nbytes > 0;
}

static uint64_t place_host(tsl_model *m) {
    uint32_t order[TSL_MAX_VALUES], n = 0, i, j, pass;
    uint64_t end = 0;
    for (pass = 0; pass < 2; pass++) /* the constants (live forever) first */
        for (i = 0; i < m->n_values; i++) {
            const tsl_value *v = &m->value[i];
            int is_const = v->node >= 0 && m->node[v->node].op == TSL_H_CONSTANT;
            if (stored(v) && is_const == (pass == 0)) order[n++] = i;
        }
    for (i = 0; i < n; i++) {
        tsl_value *v = &m->value[order[i]];
        uint64_t off = 0;
        int moved = 1;
        while (moved) {
            moved = 0;
            for (j = 0; j < i; j++) {
                const tsl_value *w = &m->value[order[j]];
                if (overlap(v, w) && off < w->offset + w->nbytes && w->offset < off + v->nbytes) {
                    off = ALIGN8(w->offset + w->nbytes);
                    moved = 1;
                }
            }
        }
        v->offset = off;
        if (off + v->nbytes > end) end = off + v->nbytes;
    }
    for (i = 0; i < m->n_values; i++) {
        tsl_value *v = &m->value[i];
        if (v->kind == TSL_V_GRAPH_INPUT && v->source >= 0) v->offset = m->value[v->source].offset;
    }
    return ALIGN8(end);
}

tsl_status tsl_plan(tsl_loader *L) {
    tsl_model *m = L->m;
    uint32_t i, mem;
    uint64_t at = 0;
    tsl_status st;
    for (i = 0; i < m->n_values; i++) {
        tsl_value *v = &m->value[i];
        if (v->node >= 0 && m->node[v->node].op == TSL_H_CONSTANT) {
            v->step = -2;
            v->last_use = TSL_STEP_END;
        }
    }
    if ((st = model_input_types(L)) != TSL_OK) return st;
    if ((st = meeting_types(L)) != TSL_OK) return st;
    if ((st = tsl_plan_windows(L)) != TSL_OK) return st;
    for (mem = 0; mem < TSL_MEMORIES; mem++) {
        tsl_window *w = &m->window[mem];
        if (!w->used || w->in_binary) continue;
        w->arena_offset = at;
        if (w->hi - w->lo > UINT64_MAX / 2 - at) return tsl_fail(L->e, TSL_E_LIMIT, TSL_NO_OFFSET, -1, 8);
        at = ALIGN8(at + (w->hi - w->lo));
    }
    m->host_offset = at;
    m->host_size = place_host(m);
    m->arena_size = at + m->host_size;
    for (i = 0; i < m->n_model_in; i++) info_of(&m->in_info[i], &m->value[m->model_in[i]]);
    for (i = 0; i < m->n_model_out; i++) info_of(&m->out_info[i], &m->value[m->model_out[i]]);
    return TSL_OK;
}

/* ---- the public queries ----------------------------------------------------------------------- */
uint64_t tsl_arena_size(const tsl_model *m) { return m ? m->arena_size : 0; }
uint32_t tsl_input_count(const tsl_model *m) { return m ? m->n_model_in : 0; }
uint32_t tsl_output_count(const tsl_model *m) { return m ? m->n_model_out : 0; }

const tsl_tensor_info *tsl_input(const tsl_model *m, uint32_t i) {
    return (m && i < m->n_model_in) ? &m->in_info[i] : NULL;
}

const tsl_tensor_info *tsl_output(const tsl_model *m, uint32_t i) {
    return (m && i < m->n_model_out) ? &m->out_info[i] : NULL;
}

void *tsl_input_data(const tsl_model *m, uint8_t *arena, uint32_t i) {
    if (!m || !arena || i >= m->n_model_in) return NULL;
    return arena + m->host_offset + m->value[m->model_in[i]].offset;
}

void *tsl_output_data(const tsl_model *m, uint8_t *arena, uint32_t i) {
    if (!m || !arena || i >= m->n_model_out) return NULL;
    return arena + m->host_offset + m->value[m->model_out[i]].offset;
}

void tsl_constants_placement(const tsl_model *m, uint32_t *memory, uint64_t *address,
                             uint64_t *size, int *in_binary) {
    if (memory) *memory = m->constants_memory;
    if (address) *address = m->constants_address;
    if (size) *size = m->constants_size;
    if (in_binary) *in_binary = m->constants_size && m->window[m->constants_memory % TSL_MEMORIES].in_binary;
}
