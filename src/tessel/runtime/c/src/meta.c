/* The metadata schema (docs/binary-format.md §6.4.1) and the NPU regions (§6.6): key types,
 * version, source, layers, npu_regions; then the I/O names against the program, in the order
 * the runtime runs the parts, which also binds every name a part reads to the value it reads. */
#include "internal.h"
#include "plan.h"

static const char *const ENGINE_NAMES[TSL_ENGINES] = {"DMA_IN", "MATRIX", "VECTOR", "DMA_OUT"};

static tsl_status mfail(tsl_loader *L, tsl_status code, const uint8_t *at, int32_t index) {
    uint64_t off = at ? L->metadata.offset + (uint64_t)(at - (L->m->data + L->metadata.offset))
                      : L->metadata.offset;
    return tsl_fail(L->e, code, off, L->metadata.index, index);
}

static int is_nat(tsl_json v) {
    int big;
    int64_t x;
    if (tsl_json_kind(v) != 'i') return 0;
    x = tsl_json_int(v, &big);
    return x >= 0;
}

static int is_str_list(tsl_json v) {
    tsl_json_iter it;
    tsl_json x;
    if (tsl_json_kind(v) != 'a') return 0;
    tsl_json_iter_init(&it, v);
    while (tsl_json_iter_next(&it, NULL, &x))
        if (tsl_json_kind(x) != 's') return 0;
    return 1;
}

static int is_fallback(tsl_json v) {
    static const char *const nats[] = {"npu_ops", "total_ops", "npu_macs", "total_macs", "regions"};
    tsl_json x, h;
    tsl_json_iter it;
    size_t k;
    if (tsl_json_kind(v) != 'o') return 0;
    for (k = 0; k < 5; k++)
        if (!tsl_json_get(v, nats[k], &x) || !is_nat(x)) return 0;
    if (!tsl_json_get(v, "host_ops", &h) || tsl_json_kind(h) != 'o') return 0;
    tsl_json_iter_init(&it, h);
    while (tsl_json_iter_next(&it, NULL, &x))
        if (!is_str_list(x)) return 0;
    return 1;
}

/* TOP_LEVEL of tessel.binary.metadata, in its order: 'n' nat, 's' string, 'o' object,
 * 'l' list of strings, 'a' list, 'f' fallback */
static const struct { const char *key; char type; } TOP[] = {
    {"metadata_version", 'n'}, {"model", 's'}, {"target", 's'}, {"tessel_version", 's'},
    {"arch", 'o'}, {"model_inputs", 'l'}, {"model_outputs", 'l'}, {"host_ops", 'l'},
    {"arena_peak_bytes", 'n'}, {"arena_naive_bytes", 'n'}, {"layers", 'a'}, {"source", 'o'},
    {"fallback", 'f'}, {"npu_regions", 'a'}, {"reference", 'o'}};

static int has_type(tsl_json v, char type) {
    switch (type) {
    case 'n': return is_nat(v);
    case 's': return tsl_json_kind(v) == 's';
    case 'o': return tsl_json_kind(v) == 'o';
    case 'l': return is_str_list(v);
    case 'a': return tsl_json_kind(v) == 'a';
    case 'f': return is_fallback(v);
    }
    return 0;
}

static tsl_status check_layer(tsl_loader *L, tsl_json layer, int32_t i) {
    static const struct { const char *key; char type; int required; } LAYER[] = {
        {"name", 's', 1}, {"op", 's', 1}, {"loc", 's', 1}, {"mapping", 's', 1}, {"bound", 's', 1},
        {"estimated_cycles", 'n', 1}, {"first", 'o', 1}, {"last", 'o', 1}, {"macs", 'n', 0},
        {"nodes", 'l', 0}};
    tsl_json v, first, last;
    size_t k;
    int e;
    if (tsl_json_kind(layer) != 'o') return mfail(L, TSL_E_META_LAYER, layer.p, i);
    for (k = 0; k < sizeof LAYER / sizeof LAYER[0]; k++) {
        if (!tsl_json_get(layer, LAYER[k].key, &v)) {
            if (LAYER[k].required) return mfail(L, TSL_E_META_LAYER, layer.p, i);
            continue;
        }
        if (!has_type(v, LAYER[k].type)) return mfail(L, TSL_E_META_LAYER, v.p, i);
    }
    tsl_json_get(layer, "first", &first);
    tsl_json_get(layer, "last", &last);
    for (e = 0; e < TSL_ENGINES; e++) {
        tsl_json a, b;
        int big_a, big_b;
        int64_t x, y, n = L->m->stream_count[e];
        if (!tsl_json_get(first, ENGINE_NAMES[e], &a) || tsl_json_kind(a) != 'i' ||
            !tsl_json_get(last, ENGINE_NAMES[e], &b) || tsl_json_kind(b) != 'i')
            return mfail(L, TSL_E_META_LAYER, layer.p, i);
        x = tsl_json_int(a, &big_a);
        y = tsl_json_int(b, &big_b);
        if (big_a || big_b || !(0 <= x && x <= y + 1 && y < n)) return mfail(L, TSL_E_META_LAYER, layer.p, i);
    }
    return TSL_OK;
}

static tsl_status check_schema(tsl_loader *L, tsl_json meta) {
    tsl_json v, src;
    tsl_json_iter it;
    size_t k;
    int32_t i = 0;
    int big;
    for (k = 0; k < sizeof TOP / sizeof TOP[0]; k++)
        if (tsl_json_get(meta, TOP[k].key, &v) && !has_type(v, TOP[k].type))
            return mfail(L, TSL_E_META_TYPE, v.p, (int32_t)k);
    if (tsl_json_get(meta, "metadata_version", &v) && (tsl_json_int(v, &big) > 1 || big))
        return mfail(L, TSL_E_META_VERSION, v.p, -1);
    if (tsl_json_get(meta, "source", &src)) {
        if (!tsl_json_get(src, "model", &v) || tsl_json_kind(v) != 's' || tsl_json_string(v).len == 0)
            return mfail(L, TSL_E_META_SOURCE, src.p, -1);
        if (!tsl_json_get(src, "calibration", &v) || !is_nat(v))
            return mfail(L, TSL_E_META_SOURCE, src.p, -1);
    }
    if (tsl_json_get(meta, "layers", &v)) {
        tsl_json layer;
        tsl_status st;
        tsl_json_iter_init(&it, v);
        while (tsl_json_iter_next(&it, NULL, &layer))
            if ((st = check_layer(L, layer, i++)) != TSL_OK) return st;
    }
    return TSL_OK;
}

/* ---- npu_regions ------------------------------------------------------------------------------ */
static int find_desc(const tsl_model *m, tsl_str name, int output) {
    uint32_t i;
    for (i = 0; i < m->n_desc; i++)
        if (m->desc[i].output == output && tsl_str_eq(m->desc[i].name, name)) return (int)i;
    return -1;
}

static size_t stream_offset(const tsl_model *m, int e, uint32_t index) {
    size_t off = 0;
    uint32_t k;
    for (k = 0; k < index; k++) off += tsl_isa_size(m->stream[e][off]);
    return off;
}

/* the names of one region list: descriptor indices into region_io */
static tsl_status region_names(tsl_loader *L, tsl_json list, int output, uint16_t *first,
                               uint16_t *count, int32_t k) {
    tsl_model *m = L->m;
    tsl_json_iter it;
    tsl_json x;
    if (tsl_json_kind(list) != 'a') return mfail(L, TSL_E_META_REGIONS, list.p, k);
    *first = (uint16_t)m->n_region_io;
    *count = 0;
    tsl_json_iter_init(&it, list);
    while (tsl_json_iter_next(&it, NULL, &x)) {
        int d;
        if (tsl_json_kind(x) != 's') return mfail(L, TSL_E_META_REGIONS, x.p, k);
        d = find_desc(m, tsl_json_string(x), output);
        if (d < 0) return mfail(L, TSL_E_META_REGIONS, x.p, k);
        if (m->n_region_io >= TSL_MAX_REGION_IO) return tsl_fail(L->e, TSL_E_LIMIT, TSL_NO_OFFSET, L->metadata.index, 2);
        m->region_io[m->n_region_io++] = (uint16_t)d;
        (*count)++;
    }
    return TSL_OK;
}

static tsl_status parse_regions(tsl_loader *L, tsl_json meta) {
    tsl_model *m = L->m;
    tsl_json spec, r, ins, outs, ends, x;
    tsl_json_iter it;
    uint32_t previous[TSL_ENGINES] = {0, 0, 0, 0};
    int32_t k = 0;
    int e;
    tsl_status st;
    if (!tsl_json_get(meta, "npu_regions", &spec)) { /* format 1.0: one region, every descriptor */
        tsl_region *g = &m->region[0];
        uint32_t i;
        m->n_regions = 1;
        g->in_first = g->out_first = 0;
        g->in_count = g->out_count = 0;
        for (i = 0; i < m->n_desc; i++) {
            if (m->n_region_io >= TSL_MAX_REGION_IO) return tsl_fail(L->e, TSL_E_LIMIT, TSL_NO_OFFSET, -1, 2);
            m->region_io[m->n_region_io++] = (uint16_t)i;
        }
        g->in_count = (uint16_t)m->n_inputs_desc;
        g->out_first = (uint16_t)m->n_inputs_desc;
        g->out_count = (uint16_t)(m->n_desc - m->n_inputs_desc);
        for (e = 0; e < TSL_ENGINES; e++) {
            g->end[e] = m->stream_count[e];
            g->end_byte[e] = m->stream_size[e];
        }
        return TSL_OK;
    }
    if (tsl_json_count(spec) == 0) return mfail(L, TSL_E_META_REGIONS, spec.p, -1);
    tsl_json_iter_init(&it, spec);
    while (tsl_json_iter_next(&it, NULL, &r)) {
        tsl_region *g;
        if (k >= TSL_MAX_REGIONS) return tsl_fail(L->e, TSL_E_LIMIT, TSL_NO_OFFSET, L->metadata.index, 1);
        g = &m->region[k];
        if (tsl_json_kind(r) != 'o' || !tsl_json_get(r, "inputs", &ins) ||
            !tsl_json_get(r, "outputs", &outs) || !tsl_json_get(r, "ends", &ends) ||
            tsl_json_kind(ends) != 'o')
            return mfail(L, TSL_E_META_REGIONS, r.p, k);
        for (e = 0; e < TSL_ENGINES; e++)
            if (!tsl_json_get(ends, ENGINE_NAMES[e], &x)) return mfail(L, TSL_E_META_REGIONS, ends.p, k);
        if ((st = region_names(L, ins, 0, &g->in_first, &g->in_count, k)) != TSL_OK) return st;
        if ((st = region_names(L, outs, 1, &g->out_first, &g->out_count, k)) != TSL_OK) return st;
        for (e = 0; e < TSL_ENGINES; e++) {
            int big;
            int64_t s;
            tsl_json_get(ends, ENGINE_NAMES[e], &x);
            if (tsl_json_kind(x) != 'i') return mfail(L, TSL_E_META_REGIONS, x.p, k);
            s = tsl_json_int(x, &big);
            if (big || s < (int64_t)previous[e] || s > (int64_t)m->stream_count[e])
                return mfail(L, TSL_E_META_REGIONS, x.p, k);
            g->end[e] = (uint32_t)s;
        }
        for (e = 0; e < TSL_ENGINES; e++) {
            g->end_byte[e] = stream_offset(m, e, g->end[e]);
            previous[e] = g->end[e];
        }
        k++;
    }
    for (e = 0; e < TSL_ENGINES; e++)
        if (previous[e] != m->stream_count[e]) return mfail(L, TSL_E_META_REGIONS, spec.p, -1);
    m->n_regions = (uint32_t)k;
    return TSL_OK;
}

/* ---- I/O names against the program ----------------------------------------------------------- */
/* The value a name denotes after env[0 .. n): the latest definition. */
static int lookup(const tsl_model *m, const uint16_t *env, uint32_t n, tsl_str name) {
    while (n-- > 0)
        if (tsl_str_eq(m->value[env[n]].name, name)) return env[n];
    return -1;
}

static tsl_status new_value(tsl_loader *L, tsl_str name, uint8_t kind, int16_t step, int *out) {
    tsl_model *m = L->m;
    tsl_value *v;
    if (m->n_values >= TSL_MAX_VALUES) return tsl_fail(L->e, TSL_E_LIMIT, TSL_NO_OFFSET, -1, 3);
    v = &m->value[m->n_values];
    memset(v, 0, sizeof *v);
    v->name = name;
    v->kind = kind;
    v->step = step;
    v->node = -1;
    v->source = -1;
    v->part = -1;
    v->last_use = step;
    *out = (int)m->n_values++;
    return TSL_OK;
}

static tsl_status model_names(tsl_loader *L, tsl_json meta, uint16_t *env, uint32_t *n_env) {
    tsl_model *m = L->m;
    tsl_json list, x;
    tsl_json_iter it;
    uint32_t i, j;
    int v = 0;
    tsl_status st;
    if (tsl_json_get(meta, "model_inputs", &list)) {
        tsl_json_iter_init(&it, list);
        while (tsl_json_iter_next(&it, NULL, &x)) {
            if (m->n_model_in >= TSL_MAX_MODEL_IO) return tsl_fail(L->e, TSL_E_LIMIT, TSL_NO_OFFSET, -1, 4);
            if ((st = new_value(L, tsl_json_string(x), TSL_V_MODEL_INPUT, -1, &v)) != TSL_OK) return st;
            m->model_in[m->n_model_in++] = (uint16_t)v;
        }
    } else {
        for (i = 0; i < m->n_inputs_desc; i++) {
            if (m->n_model_in >= TSL_MAX_MODEL_IO) return tsl_fail(L->e, TSL_E_LIMIT, TSL_NO_OFFSET, -1, 4);
            if ((st = new_value(L, m->desc[i].name, TSL_V_MODEL_INPUT, -1, &v)) != TSL_OK) return st;
            m->model_in[m->n_model_in++] = (uint16_t)v;
        }
    }
    for (i = 0; i < m->n_model_in; i++) {
        for (j = 0; j < i; j++)
            if (tsl_str_eq(m->value[m->model_in[i]].name, m->value[m->model_in[j]].name))
                return mfail(L, TSL_E_META_DATAFLOW, NULL, (int32_t)i);
        env[(*n_env)++] = m->model_in[i];
    }
    return TSL_OK;
}

/* host part `slot` (its graph inputs read the env; its nodes extend it) */
static tsl_status bind_part(tsl_loader *L, int slot, int16_t step, uint16_t *env, uint32_t *n_env) {
    tsl_model *m = L->m;
    const tsl_part *p = &m->part[slot];
    uint32_t i;
    if (!p->present) return TSL_OK;
    for (i = 0; i < m->n_values; i++) {
        tsl_value *v = &m->value[i];
        int src;
        if (v->kind != TSL_V_GRAPH_INPUT || v->part != slot) continue;
        src = lookup(m, env, *n_env, v->name);
        if (src < 0) return mfail(L, TSL_E_META_DATAFLOW, NULL, slot);
        v->source = (int16_t)src;
        v->step = step;
        v->last_use = step;
        if (m->value[src].last_use < step) m->value[src].last_use = step;
    }
    for (i = 0; i < p->node_count; i++) {
        tsl_value *v = &m->value[m->node[p->node_first + i].out];
        v->step = step;
        v->last_use = step;
        if (*n_env >= TSL_MAX_VALUES) return tsl_fail(L->e, TSL_E_LIMIT, TSL_NO_OFFSET, -1, 3);
        env[(*n_env)++] = m->node[p->node_first + i].out;
    }
    return TSL_OK;
}

static tsl_status bind_region(tsl_loader *L, uint32_t k, uint16_t *env, uint32_t *n_env) {
    tsl_model *m = L->m;
    const tsl_region *g = &m->region[k];
    int16_t step = (int16_t)(2 * k + 1);
    uint32_t i;
    int v = 0;
    tsl_status st;
    for (i = 0; i < g->in_count; i++) {
        const tsl_desc *d = &m->desc[m->region_io[g->in_first + i]];
        int src = lookup(m, env, *n_env, d->name);
        if (src < 0) return mfail(L, TSL_E_META_DATAFLOW, NULL, (int32_t)k);
        m->region_in_value[g->in_first + i] = (uint16_t)src;
        if (m->value[src].last_use < step) m->value[src].last_use = step;
    }
    for (i = 0; i < g->out_count; i++) {
        uint16_t di = m->region_io[g->out_first + i];
        if ((st = new_value(L, m->desc[di].name, TSL_V_REGION_OUTPUT, step, &v)) != TSL_OK) return st;
        m->value[v].source = (int16_t)di;
        m->region_out_value[g->out_first + i] = (uint16_t)v;
        if (*n_env >= TSL_MAX_VALUES) return tsl_fail(L->e, TSL_E_LIMIT, TSL_NO_OFFSET, -1, 3);
        env[(*n_env)++] = (uint16_t)v;
    }
    return TSL_OK;
}

/* Host graph slots: 0 prologue, K host_K, TSL_MAX_REGIONS epilogue (ir.c); runtime parts:
 * prologue, host_1 .. host_{R-1}, epilogue at R. */
static tsl_status place_epilogue(tsl_loader *L) {
    tsl_model *m = L->m;
    uint32_t k, R = m->n_regions;
    for (k = R; k < TSL_MAX_REGIONS; k++)
        if (m->part[k].present) return mfail(L, TSL_E_META_HOST_KEYS, NULL, (int32_t)k);
    if (L->host_beyond) return mfail(L, TSL_E_META_HOST_KEYS, NULL, -1);
    if (R < TSL_MAX_REGIONS) {
        uint32_t i;
        m->part[R] = m->part[TSL_MAX_REGIONS];
        memset(&m->part[TSL_MAX_REGIONS], 0, sizeof m->part[0]);
        for (i = 0; i < m->n_values; i++)
            if (m->value[i].part == TSL_MAX_REGIONS) m->value[i].part = (int16_t)R;
    }
    return TSL_OK;
}

static tsl_status check_dataflow(tsl_loader *L, tsl_json meta) {
    tsl_model *m = L->m;
    uint16_t env[TSL_MAX_VALUES];
    uint32_t n_env = 0, k, i;
    tsl_json list, x;
    tsl_json_iter it;
    tsl_status st;
    if ((st = model_names(L, meta, env, &n_env)) != TSL_OK) return st;
    if ((st = place_epilogue(L)) != TSL_OK) return st;
    for (k = 0; k <= m->n_regions; k++) {
        if ((st = bind_part(L, (int)k, (int16_t)(2 * k), env, &n_env)) != TSL_OK) return st;
        if (k < m->n_regions && (st = bind_region(L, k, env, &n_env)) != TSL_OK) return st;
    }
    if (tsl_json_get(meta, "model_outputs", &list)) {
        tsl_json_iter_init(&it, list);
        while (tsl_json_iter_next(&it, NULL, &x)) {
            int v = lookup(m, env, n_env, tsl_json_string(x));
            if (v < 0) return mfail(L, TSL_E_META_DATAFLOW, x.p, -1);
            if (m->n_model_out >= TSL_MAX_MODEL_IO) return tsl_fail(L->e, TSL_E_LIMIT, TSL_NO_OFFSET, -1, 4);
            m->model_out[m->n_model_out++] = (uint16_t)v;
        }
    } else {
        for (i = m->n_inputs_desc; i < m->n_desc; i++) {
            int v = lookup(m, env, n_env, m->desc[i].name);
            if (v < 0) return mfail(L, TSL_E_META_DATAFLOW, NULL, -1);
            if (m->n_model_out >= TSL_MAX_MODEL_IO) return tsl_fail(L->e, TSL_E_LIMIT, TSL_NO_OFFSET, -1, 4);
            m->model_out[m->n_model_out++] = (uint16_t)v;
        }
    }
    for (i = 0; i < m->n_model_out; i++) m->value[m->model_out[i]].last_use = TSL_STEP_END;
    return TSL_OK;
}

tsl_status tsl_check_metadata(tsl_loader *L) {
    tsl_json meta;
    tsl_status st;
    meta.p = tsl_json_ws(L->m->data + L->metadata.offset, L->m->data + L->metadata.offset + L->metadata.size);
    meta.end = L->m->data + L->metadata.offset + L->metadata.size;
    if ((st = check_schema(L, meta)) != TSL_OK) return st;
    if ((st = parse_regions(L, meta)) != TSL_OK) return st;
    return check_dataflow(L, meta);
}
