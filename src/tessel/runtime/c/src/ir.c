/* The host graphs of a .tsl file (HOST_GRAPHS, docs/binary-format.md §6.5): each key checked,
 * each graph's IR text parsed (the grammar of tessel.ir.parser) into the model's node and value
 * tables, then verified (tessel.ir.verify: SSA, arity, attributes, declared types). An op the
 * C runtime has no kernel for refuses the file (TSL_E_HOST_OP_UNSUPPORTED, err.name = the op). */
#include "host_ops.h"
#include "ir_lex.h"

typedef struct irp {
    tsl_loader *L;
    ir_cur c;
    int slot;
    uint32_t v_first, n_first;
    tsl_str unsupported;          /* the first op without a C kernel (host: its target) */
    uint32_t unsupported_node;
    int has_unsupported, verify_bad;
    ir_cur resources;
    int has_resources;
} irp;

static tsl_status perr(irp *P, tsl_status code) {
    tsl_fail(P->L->e, code, (uint64_t)(P->c.p - P->L->m->data), P->L->host.index, -1);
    return code;
}

static tsl_status expect(irp *P, const char *s) {
    return ir_accept(&P->c, s) ? TSL_OK : perr(P, TSL_E_HOST_PARSE);
}

#define TRY(x) do { tsl_status st_ = (x); if (st_ != TSL_OK) return st_; } while (0)

static tsl_status number(irp *P, ir_num *n) {
    tsl_status st = ir_number(&P->c, n);
    return st == TSL_OK ? TSL_OK : perr(P, st);
}

static tsl_status integer(irp *P, int64_t *out) {
    ir_num n;
    TRY(number(P, &n));
    if (n.is_float) return perr(P, TSL_E_HOST_PARSE);
    *out = n.i;
    return TSL_OK;
}

static tsl_status string(irp *P, tsl_str *body, int *escaped) {
    tsl_status st = ir_string(&P->c, body, escaped);
    return st == TSL_OK ? TSL_OK : perr(P, st);
}

/* ---- types ----------------------------------------------------------------------------------- */
static int finite_pos(double s) { return s > 0 && s < 1.0 / 0.0; }

static tsl_status quant(irp *P, tsl_value *v) {
    ir_num n;
    uint32_t scales = 0, zps = 0;
    int64_t axis;
    TRY(expect(P, "q("));
    if (ir_skip(&P->c), ir_starts(&P->c, "[")) {
        TRY(expect(P, "["));
        while (!ir_accept(&P->c, "]")) {
            if (scales) TRY(expect(P, ","));
            TRY(number(P, &n));
            if (!finite_pos(n.is_float ? n.f : (double)n.i)) v->quantised = 0xff;
            scales++;
        }
        TRY(expect(P, ","));
        TRY(expect(P, "["));
        while (!ir_accept(&P->c, "]")) {
            if (zps) TRY(expect(P, ","));
            TRY(number(P, &n));
            if (n.is_float) return perr(P, TSL_E_HOST_PARSE);
            zps++;
        }
        TRY(expect(P, ","));
        TRY(expect(P, "axis"));
        TRY(expect(P, "="));
        TRY(integer(P, &axis));
        TRY(expect(P, ")"));
        if (v->quantised == 0xff || scales != zps || scales == 0) return perr(P, TSL_E_HOST_PARSE);
        v->quantised = 2; /* per axis: not described in tsl_tensor_info */
        return TSL_OK;
    }
    TRY(number(P, &n));
    v->scale = n.is_float ? n.f : (double)n.i;
    TRY(expect(P, ","));
    TRY(number(P, &n));
    if (n.is_float) return perr(P, TSL_E_HOST_PARSE);
    v->zero_point = n.i;
    TRY(expect(P, ")"));
    if (!finite_pos(v->scale)) return perr(P, TSL_E_HOST_PARSE);
    v->quantised = 1;
    return TSL_OK;
}

/* i4 (int4 weights) is held in an int8 array, one value per byte (docs/ir.md): its values are
 * int8 values here, so that a host op reading them (a conv with no C kernel) is refused by
 * name instead of its type failing to parse */
static tsl_status dims_dtype(irp *P, tsl_value *v) {
    static const char *const NAMES[] = {"f32", "i64", "i32", "i16", "i8", "i4", "u8", "bool"};
    static const uint8_t DT[] = {TSL_FLOAT32, TSL_INT64, TSL_INT32, TSL_INT16, TSL_INT8,
                                 TSL_INT8, TSL_UINT8, TSL_BOOL};
    uint64_t nbytes = 1;
    int k;
    ir_skip(&P->c);
    v->rank = 0;
    while (ir_peek(&P->c) >= '0' && ir_peek(&P->c) <= '9') {
        uint64_t d = 0;
        int digits = 0, big = 0;
        while (ir_peek(&P->c) >= '0' && ir_peek(&P->c) <= '9') {
            d = d * 10 + (uint64_t)(ir_peek(&P->c) - '0');
            if (d > UINT32_MAX) big = 1, d = UINT32_MAX;
            digits++;
            ir_adv(&P->c);
        }
        if (ir_peek(&P->c) != 'x') return perr(P, TSL_E_HOST_PARSE);
        ir_adv(&P->c);
        if (digits > 40) return perr(P, TSL_E_HOST_PARSE);
        if (big || v->rank >= TSL_MAX_RANK) return perr(P, TSL_E_LIMIT);
        v->shape[v->rank++] = (uint32_t)d;
    }
    for (k = 0; k < 8; k++) {
        if (ir_starts(&P->c, NAMES[k])) {
            size_t j;
            for (j = 0; NAMES[k][j]; j++) ir_adv(&P->c);
            v->dtype = DT[k];
            break;
        }
    }
    if (k == 8) return perr(P, TSL_E_HOST_PARSE);
    for (k = 0; k < v->rank; k++) {
        nbytes *= v->shape[k];
        if (nbytes > ((uint64_t)1 << 40)) return perr(P, TSL_E_LIMIT);
    }
    v->nbytes = nbytes * tsl_dtype_size((tsl_dtype)v->dtype);
    if (v->nbytes > ((uint64_t)1 << 40)) return perr(P, TSL_E_LIMIT);
    return TSL_OK;
}

static tsl_status tensor_type(irp *P, tsl_value *v) {
    TRY(expect(P, "tensor<"));
    TRY(dims_dtype(P, v));
    v->quantised = 0;
    while (ir_accept(&P->c, ",")) {
        tsl_str w;
        ir_skip(&P->c);
        if (ir_starts(&P->c, "q(")) {
            v->quantised = 0;
            TRY(quant(P, v));
            continue;
        }
        if (!ir_ident(&P->c, &w) || !(ir_word_is(w, "any") || ir_word_is(w, "nchw") || ir_word_is(w, "nhwc")))
            return perr(P, TSL_E_HOST_PARSE);
    }
    return expect(P, ">");
}

/* ---- values ---------------------------------------------------------------------------------- */
static int find_local(const irp *P, tsl_str name) {
    const tsl_model *m = P->L->m;
    uint32_t i = m->n_values;
    while (i-- > P->v_first)
        if (tsl_str_eq(m->value[i].name, name)) return (int)i;
    return -1;
}

static tsl_status add_value(irp *P, tsl_str name, uint8_t kind, tsl_value **out) {
    tsl_model *m = P->L->m;
    tsl_value *v;
    if (m->n_values >= TSL_MAX_VALUES) return perr(P, TSL_E_LIMIT);
    if (find_local(P, name) >= 0) P->verify_bad = 1; /* defined twice */
    v = &m->value[m->n_values++];
    memset(v, 0, sizeof *v);
    v->name = name;
    v->kind = kind;
    v->node = -1;
    v->source = -1;
    v->part = (int16_t)P->slot;
    *out = v;
    return TSL_OK;
}

/* ---- attributes -------------------------------------------------------------------------------- */
static tsl_status scalar(irp *P, ir_num *n, int *is_bool) {
    ir_skip(&P->c);
    *is_bool = 0;
    if (ir_starts(&P->c, "true") || ir_starts(&P->c, "false")) {
        tsl_str w;
        ir_ident(&P->c, &w);
        *is_bool = 1;
        n->is_float = 0;
        n->i = ir_word_is(w, "true");
        return TSL_OK;
    }
    return number(P, n);
}

/* dense<[...]>, dense_resource<key> (dense_elided is refused, as by Python) */
static tsl_status tensor_literal(irp *P, tsl_node *node) {
    ir_num n;
    int b, count = 0;
    ir_skip(&P->c);
    if (ir_accept(&P->c, "dense_resource<")) {
        tsl_str key;
        if (!ir_ident(&P->c, &key)) return perr(P, TSL_E_HOST_PARSE);
        TRY(expect(P, ">"));
        if (node) {
            node->data = key.ptr;
            node->data_len = key.len;
            node->flag = TSL_CONST_BASE64 | 0x80; /* the key, until the resources are read */
        }
        return TSL_OK;
    }
    if (ir_starts(&P->c, "dense_elided<")) return perr(P, TSL_E_HOST_PARSE);
    TRY(expect(P, "dense<"));
    TRY(expect(P, "["));
    ir_skip(&P->c);
    if (node) node->data = P->c.p;
    while (!ir_accept(&P->c, "]")) {
        if (count) TRY(expect(P, ","));
        TRY(scalar(P, &n, &b));
        count++;
        if (node) node->data_len = (uint32_t)(P->c.p - node->data);
    }
    if (node) {
        node->flag = TSL_CONST_INLINE;
        node->i[0] = count;
    }
    return expect(P, ">");
}

/* a value of any kind (the attributes of ops without a C kernel: parsed, then refused) */
static tsl_status generic_value(irp *P) {
    ir_num n;
    tsl_str w;
    int32_t ch;
    ir_skip(&P->c);
    if (ir_starts(&P->c, "dense")) return tensor_literal(P, NULL);
    ch = ir_peek(&P->c);
    if (ch == '[') {
        int count = 0;
        ir_adv(&P->c);
        while (!ir_accept(&P->c, "]")) {
            if (count++) TRY(expect(P, ","));
            TRY(number(P, &n));
        }
        return TSL_OK;
    }
    if (ch == '"') {
        int esc;
        return string(P, &w, &esc);
    }
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_') {
        if (ir_starts(&P->c, "inf") || ir_starts(&P->c, "nan")) return number(P, &n);
        ir_ident(&P->c, &w);
        return TSL_OK;
    }
    return number(P, &n);
}

static tsl_status typed_value(irp *P, const attr_spec *a, tsl_node *node) {
    ir_num n;
    tsl_str w;
    switch (a->kind) {
    case A_TENSOR:
        return tensor_literal(P, node);
    case A_INTS: {
        int count = 0;
        TRY(expect(P, "["));
        while (!ir_accept(&P->c, "]")) {
            if (count) TRY(expect(P, ","));
            TRY(number(P, &n));
            if (n.is_float) return perr(P, TSL_E_HOST_PARSE);
            if (count >= TSL_MAX_RANK) return perr(P, TSL_E_LIMIT);
            node->list[count++] = n.i;
        }
        node->list_len = (uint8_t)count;
        return TSL_OK;
    }
    case A_BOOL:
        ir_skip(&P->c);
        if (!ir_ident(&P->c, &w) || !(ir_word_is(w, "true") || ir_word_is(w, "false")))
            return perr(P, TSL_E_HOST_PARSE);
        node->flag = (uint8_t)ir_word_is(w, "true");
        return TSL_OK;
    case A_DTYPE:
        ir_skip(&P->c);
        if (!ir_ident(&P->c, &w) || !tsl_ir_dtype(w)) return perr(P, TSL_E_HOST_PARSE);
        node->dtype = tsl_ir_dtype(w);
        return TSL_OK;
    case A_INT:
        TRY(number(P, &n));
        if (n.is_float) return perr(P, TSL_E_HOST_PARSE);
        node->i[a->slot - S_I0] = n.i;
        return TSL_OK;
    case A_FLOAT:
        TRY(number(P, &n));
        node->f[a->slot - S_F0] = n.is_float ? n.f : (double)n.i;
        return TSL_OK;
    default:
        return generic_value(P);
    }
}

static tsl_status attrs(irp *P, const op_spec *spec, tsl_node *node) {
    uint32_t seen = 0, k;
    int any = 0;
    TRY(expect(P, "{"));
    while (!ir_accept(&P->c, "}")) {
        tsl_str key;
        const attr_spec *a = NULL;
        if (any++) TRY(expect(P, ","));
        ir_skip(&P->c);
        if (!ir_ident(&P->c, &key)) return perr(P, TSL_E_HOST_PARSE);
        if (spec->op) {
            for (k = 0; k < spec->n_attrs; k++)
                if (tsl_str_eq_c(key, spec->attrs[k].name)) a = &spec->attrs[k];
            if (!a) return perr(P, TSL_E_HOST_PARSE); /* the op has no such attribute */
            if (seen & (1u << (a - spec->attrs))) return perr(P, TSL_E_HOST_PARSE);
            seen |= 1u << (a - spec->attrs);
        }
        TRY(expect(P, "="));
        if (a) {
            TRY(typed_value(P, a, node));
        } else if (tsl_str_eq_c(key, "target") && P->has_unsupported &&
                   P->unsupported_node == (uint32_t)(node - P->L->m->node) &&
                   tsl_str_eq_c(P->unsupported, "host")) {
            tsl_str target;
            int esc;
            ir_cur at = P->c;
            TRY(generic_value(P));
            if (ir_string(&at, &target, &esc) == TSL_OK) P->unsupported = target;
        } else {
            TRY(generic_value(P));
        }
    }
    for (k = 0; spec->op && k < spec->n_attrs; k++)
        if (!(seen & (1u << k)) && spec->attrs[k].required) P->verify_bad = 1;
    return TSL_OK;
}

static void defaults(const op_spec *spec, tsl_node *node) {
    uint32_t k;
    for (k = 0; k < spec->n_attrs; k++) {
        const attr_spec *a = &spec->attrs[k];
        if (a->required) continue;
        if (a->slot <= S_I3) node->i[a->slot - S_I0] = (int64_t)a->def;
        else if (a->slot == S_F0 || a->slot == S_F1) node->f[a->slot - S_F0] = a->def;
        else if (a->slot == S_FLAG) node->flag = (uint8_t)a->def;
    }
}

/* ---- nodes ------------------------------------------------------------------------------------- */
static tsl_status inline_values(irp *P, tsl_node *node, const tsl_value *t);

static tsl_status loc(irp *P) {
    tsl_str s;
    int esc;
    int64_t line;
    TRY(expect(P, "loc("));
    TRY(string(P, &s, &esc));
    TRY(expect(P, "at"));
    TRY(string(P, &s, &esc));
    TRY(expect(P, ":"));
    TRY(integer(P, &line));
    return expect(P, ")");
}

static tsl_status node_line(irp *P) {
    tsl_model *m = P->L->m;
    tsl_str name, opname;
    const op_spec *spec;
    tsl_node *node;
    tsl_value *v;
    uint32_t ni;
    if (!ir_value_name(&P->c, &name)) return perr(P, TSL_E_HOST_PARSE);
    TRY(expect(P, "="));
    ir_skip(&P->c);
    if (!ir_ident(&P->c, &opname)) return perr(P, TSL_E_HOST_PARSE);
    spec = tsl_op_lookup(opname);
    if (!spec) return perr(P, TSL_E_HOST_PARSE); /* unknown op */
    if (m->n_nodes >= TSL_MAX_HOST_NODES) return perr(P, TSL_E_LIMIT);
    ni = m->n_nodes++;
    node = &m->node[ni];
    memset(node, 0, sizeof *node);
    node->op = spec->op;
    node->in_first = (uint16_t)m->n_operands;
    TRY(expect(P, "("));
    while (!ir_accept(&P->c, ")")) {
        tsl_str in;
        int vi;
        if (node->n_in) TRY(expect(P, ","));
        if (!ir_value_name(&P->c, &in)) return perr(P, TSL_E_HOST_PARSE);
        vi = find_local(P, in);
        if (vi < 0) P->verify_bad = 1; /* used before it is defined */
        if (m->n_operands >= TSL_MAX_OPERANDS || node->n_in == 0xff) return perr(P, TSL_E_LIMIT);
        m->operand[m->n_operands++] = (uint16_t)(vi < 0 ? 0 : vi);
        node->n_in++;
    }
    defaults(spec, node);
    if (spec->op == 0 && !P->has_unsupported) {
        P->has_unsupported = 1;
        P->unsupported = opname;
        P->unsupported_node = ni;
    }
    ir_skip(&P->c);
    if (ir_starts(&P->c, "{")) TRY(attrs(P, spec, node));
    TRY(expect(P, ":"));
    TRY(add_value(P, name, TSL_V_NODE, &v));
    v->node = (int16_t)ni;
    node->out = (uint16_t)(v - m->value);
    TRY(tensor_type(P, v));
    ir_skip(&P->c);
    if (ir_starts(&P->c, "loc(")) TRY(loc(P));
    if (spec->op == TSL_H_CONSTANT && (node->flag & TSL_CONST_INLINE)) TRY(inline_values(P, node, v));
    if (spec->op && ((spec->n_operands == 0xff && node->n_in < 1) ||
                     (spec->n_operands != 0xff && node->n_in != spec->n_operands)))
        P->verify_bad = 1;
    return TSL_OK;
}

/* dense<[...]> of a constant: as many values as its type has, integers in range */
static tsl_status inline_values(irp *P, tsl_node *node, const tsl_value *t) {
    ir_cur save = P->c;
    uint64_t numel = 1;
    int64_t k, lo, hi;
    int is_int = t->dtype != TSL_FLOAT32 && t->dtype != TSL_BOOL;
    for (k = 0; k < t->rank; k++) numel *= t->shape[k];
    if ((uint64_t)node->i[0] != numel) return perr(P, TSL_E_HOST_PARSE);
    switch (t->dtype) {
    case TSL_INT8: lo = -128; hi = 127; break;
    case TSL_UINT8: lo = 0; hi = 255; break;
    case TSL_INT16: lo = -32768; hi = 32767; break;
    case TSL_INT32: lo = INT32_MIN; hi = INT32_MAX; break;
    default: lo = INT64_MIN; hi = INT64_MAX; break;
    }
    P->c.p = node->data;
    P->c.end = node->data + node->data_len;
    for (k = 0; k < node->i[0]; k++) {
        ir_num n;
        int b;
        if (k) ir_accept(&P->c, ",");
        scalar(P, &n, &b);
        if (is_int && (n.is_float || n.i < lo || n.i > hi)) {
            P->c = save;
            return perr(P, TSL_E_HOST_PARSE);
        }
    }
    P->c = save;
    return TSL_OK;
}

/* ---- resources ---------------------------------------------------------------------------------- */
/* the base64 body of resource `key`, from the resources section */
static int find_resource(irp *P, tsl_str key, tsl_str *body) {
    ir_cur c = P->resources;
    for (;;) {
        tsl_str k, s;
        int esc;
        if (ir_accept(&c, "}") || !ir_ident(&c, &k) || !ir_accept(&c, "=")) return 0;
        if (ir_string(&c, &s, &esc) != TSL_OK) return 0;
        if (tsl_str_eq(k, key)) { *body = s; return 1; }
    }
}

static tsl_status resources(irp *P) {
    tsl_model *m = P->L->m;
    uint32_t i;
    TRY(expect(P, "{"));
    P->resources = P->c;
    P->has_resources = 1;
    while (!ir_accept(&P->c, "}")) {
        tsl_str key, body, prev;
        ir_cur before;
        int esc;
        ir_skip(&P->c);
        before = P->c;
        if (!ir_ident(&P->c, &key)) return perr(P, TSL_E_HOST_PARSE);
        {   /* given twice: an earlier entry with this key */
            ir_cur save = P->resources, stop = before;
            ir_cur c = save;
            for (;;) {
                tsl_str k, s;
                int e2;
                ir_skip(&c);
                if (c.p >= stop.p || !ir_ident(&c, &k) || !ir_accept(&c, "=") ||
                    ir_string(&c, &s, &e2) != TSL_OK)
                    break;
                if (tsl_str_eq(k, key)) return perr(P, TSL_E_HOST_PARSE);
            }
            (void)prev;
        }
        TRY(expect(P, "="));
        TRY(string(P, &body, &esc));
        if (esc) return perr(P, TSL_E_LIMIT); /* IR-level escapes in base64: not read here */
        if (ir_base64(body, NULL) < 0) return perr(P, TSL_E_HOST_PARSE);
    }
    for (i = P->n_first; i < m->n_nodes; i++) {
        tsl_node *node = &m->node[i];
        tsl_str key, body;
        if (!(node->flag & 0x80)) continue;
        key.ptr = node->data;
        key.len = node->data_len;
        key.json = 1;
        if (!find_resource(P, key, &body)) return perr(P, TSL_E_HOST_PARSE);
        if ((uint64_t)ir_base64(body, NULL) != m->value[node->out].nbytes) return perr(P, TSL_E_HOST_PARSE);
        node->data = body.ptr;
        node->data_len = body.len;
        node->data_json = 1;
        node->flag = TSL_CONST_BASE64;
    }
    return TSL_OK;
}

/* ---- the graph ---------------------------------------------------------------------------------- */
static tsl_status graph(irp *P) {
    tsl_model *m = P->L->m;
    tsl_str name;
    int n_in = 0;
    uint32_t i;
    TRY(expect(P, "graph"));
    TRY(expect(P, "@"));
    if (!ir_ident(&P->c, &name)) return perr(P, TSL_E_HOST_PARSE);
    TRY(expect(P, "("));
    while (!ir_accept(&P->c, ")")) {
        tsl_str vname;
        tsl_value *v;
        if (n_in++) TRY(expect(P, ","));
        if (!ir_value_name(&P->c, &vname)) return perr(P, TSL_E_HOST_PARSE);
        TRY(expect(P, ":"));
        TRY(add_value(P, vname, TSL_V_GRAPH_INPUT, &v));
        TRY(tensor_type(P, v));
    }
    TRY(expect(P, "{"));
    for (;;) {
        ir_skip(&P->c);
        if (ir_starts(&P->c, "return")) break;
        TRY(node_line(P));
    }
    TRY(expect(P, "return"));
    do {
        tsl_str out;
        if (!ir_value_name(&P->c, &out)) return perr(P, TSL_E_HOST_PARSE);
        if (find_local(P, out) < 0) P->verify_bad = 1;
    } while (ir_accept(&P->c, ","));
    TRY(expect(P, "}"));
    if (ir_accept(&P->c, "resources")) TRY(resources(P));
    for (i = P->n_first; i < m->n_nodes; i++)
        if (m->node[i].flag & 0x80) return perr(P, TSL_E_HOST_PARSE); /* no resources section */
    ir_skip(&P->c);
    if (P->c.p != P->c.end) return perr(P, TSL_E_HOST_PARSE);
    return TSL_OK;
}

static tsl_status verify(irp *P) {
    tsl_model *m = P->L->m;
    uint32_t i;
    if (P->has_unsupported) {
        tsl_fail(P->L->e, TSL_E_HOST_OP_UNSUPPORTED, TSL_NO_OFFSET, P->L->host.index, -1);
        if (P->L->e) P->L->e->name = P->unsupported;
        return TSL_E_HOST_OP_UNSUPPORTED;
    }
    if (P->verify_bad) return tsl_fail(P->L->e, TSL_E_HOST_VERIFY, TSL_NO_OFFSET, P->L->host.index, -1);
    for (i = P->n_first; i < m->n_nodes; i++) {
        if (tsl_op_infer(m, &m->node[i]))
            return tsl_fail(P->L->e, TSL_E_HOST_VERIFY, TSL_NO_OFFSET, P->L->host.index, (int32_t)i);
    }
    for (i = P->n_first; i < m->n_nodes; i++) {
        if (tsl_op_kernel_ok(m, &m->node[i])) {
            const char *op = tsl_op_name(m->node[i].op);
            tsl_fail(P->L->e, TSL_E_HOST_OP_UNSUPPORTED, TSL_NO_OFFSET, P->L->host.index, (int32_t)i);
            if (P->L->e) {
                P->L->e->name.ptr = (const uint8_t *)op;
                P->L->e->name.len = (uint32_t)strlen(op);
                P->L->e->name.json = 0;
            }
            return TSL_E_HOST_OP_UNSUPPORTED;
        }
    }
    return TSL_OK;
}

tsl_status tsl_ir_parse(tsl_loader *L, tsl_str text, int slot, tsl_str key) {
    irp P;
    tsl_status st;
    (void)key;
    memset(&P, 0, sizeof P);
    P.L = L;
    P.c.p = text.ptr;
    P.c.end = text.ptr + text.len;
    P.slot = slot;
    P.v_first = L->m->n_values;
    P.n_first = L->m->n_nodes;
    if ((st = graph(&P)) != TSL_OK) return st;
    if ((st = verify(&P)) != TSL_OK) return st;
    if (slot >= 0) {
        L->m->part[slot].node_first = (uint16_t)P.n_first;
        L->m->part[slot].node_count = (uint16_t)(L->m->n_nodes - P.n_first);
        L->m->part[slot].present = 1;
    }
    return TSL_OK;
}

/* ---- the section ------------------------------------------------------------------------------- */
/* "prologue" -> 0, "epilogue" -> TSL_MAX_REGIONS, "host_K" -> K (or -2 beyond this build) */
static int host_slot(tsl_str key) {
    uint8_t buf[16];
    long n = tsl_str_decode(key, buf, sizeof buf);
    long k, v = 0;
    if (n < 0) return -1;
    if (n == 8 && memcmp(buf, "prologue", 8) == 0) return 0;
    if (n == 8 && memcmp(buf, "epilogue", 8) == 0) return TSL_MAX_REGIONS;
    if (n < 6 || n > 11 || memcmp(buf, "host_", 5) != 0 || buf[5] < '1' || buf[5] > '9') return -1;
    for (k = 5; k < n; k++) {
        if (buf[k] < '0' || buf[k] > '9') return -1;
        v = v * 10 + (buf[k] - '0');
    }
    return v < TSL_MAX_REGIONS ? (int)v : -2;
}

tsl_status tsl_load_host(tsl_loader *L) {
    const tsl_section *s = &L->host;
    tsl_json obj, v;
    tsl_json_iter it;
    tsl_str key;
    tsl_status st;
    if (!L->has_host) return TSL_OK;
    if (s->count != 0) return tsl_fail(L->e, TSL_E_JSON_COUNT, s->offset, s->index, -1);
    if ((st = tsl_json_check(L->m->data + s->offset, (size_t)s->size, s->offset, s->index, L->e)) != TSL_OK)
        return st;
    obj.p = tsl_json_ws(L->m->data + s->offset, L->m->data + s->offset + s->size);
    obj.end = L->m->data + s->offset + s->size;
    tsl_json_iter_init(&it, obj);
    while (tsl_json_iter_next(&it, &key, &v)) {
        if (host_slot(key) == -1 || tsl_json_kind(v) != 's') {
            tsl_fail(L->e, TSL_E_HOST_KEY, (uint64_t)(key.ptr - L->m->data), s->index, -1);
            if (L->e) L->e->name = key;
            return TSL_E_HOST_KEY;
        }
    }
    tsl_json_iter_init(&it, obj);
    while (tsl_json_iter_next(&it, &key, &v)) {
        int slot = host_slot(key);
        if (slot == -2) L->host_beyond = 1;
        if ((st = tsl_ir_parse(L, tsl_json_string(v), slot, key)) != TSL_OK) {
            if (L->e && st != TSL_E_HOST_OP_UNSUPPORTED) L->e->name = key;
            return st;
        }
    }
    return TSL_OK;
}
