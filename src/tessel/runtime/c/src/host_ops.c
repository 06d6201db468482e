/* The op table of the host-graph reader and the shape / dtype rules of the ops with C kernels
 * (the `infer` rules of tessel.ops, re-checked as tessel.ir.verify does). */
#include "host_ops.h"

#define NEG_INF (-1.0 / 0.0)
#define POS_INF (1.0 / 0.0)

static const attr_spec A_CONSTANT[] = {{"value", A_TENSOR, S_DATA, 1, 0}};
static const attr_spec A_QUANTIZE[] = {
    {"scale", A_FLOAT, S_F0, 1, 0}, {"zero_point", A_INT, S_I0, 1, 0}, {"qmin", A_INT, S_I1, 1, 0},
    {"qmax", A_INT, S_I2, 1, 0}, {"dtype", A_DTYPE, S_DTYPE, 1, 0}};
static const attr_spec A_DEQUANTIZE[] = {{"scale", A_FLOAT, S_F0, 1, 0},
                                         {"zero_point", A_INT, S_I0, 1, 0}};
static const attr_spec A_CAST[] = {{"dtype", A_DTYPE, S_DTYPE, 1, 0}};
static const attr_spec A_SHAPE[] = {{"shape", A_INTS, S_LIST, 1, 0}};
static const attr_spec A_PERM[] = {{"perm", A_INTS, S_LIST, 1, 0}};
static const attr_spec A_SLICE[] = {
    {"axis", A_INT, S_I0, 1, 0}, {"start", A_INT, S_I1, 1, 0}, {"end", A_INT, S_I2, 1, 0},
    {"step", A_INT, S_I3, 0, 1}};
static const attr_spec A_AXIS[] = {{"axis", A_INT, S_I0, 1, 0}};
static const attr_spec A_CLAMP[] = {{"min", A_FLOAT, S_F0, 0, NEG_INF}, {"max", A_FLOAT, S_F1, 0, POS_INF}};
static const attr_spec A_REDUCE[] = {{"axes", A_INTS, S_LIST, 1, 0}, {"keepdim", A_BOOL, S_FLAG, 0, 0}};

#define N(a) (uint8_t)(sizeof(a) / sizeof((a)[0]))
#define VARIADIC 0xff

static const op_spec OPS[] = {
    {"constant", TSL_H_CONSTANT, 0, N(A_CONSTANT), A_CONSTANT},
    {"relu", TSL_H_RELU, 1, 0, NULL},
    {"clamp", TSL_H_CLAMP, 1, N(A_CLAMP), A_CLAMP},
    {"sigmoid", 0, 0, 0, NULL}, {"tanh", 0, 0, 0, NULL}, {"gelu", 0, 0, 0, NULL},
    {"hardswish", 0, 0, 0, NULL}, {"hardsigmoid", 0, 0, 0, NULL}, {"silu", 0, 0, 0, NULL},
    {"exp", 0, 0, 0, NULL}, {"log", 0, 0, 0, NULL},
    {"neg", TSL_H_NEG, 1, 0, NULL},
    {"abs", TSL_H_ABS, 1, 0, NULL},
    {"sqrt", TSL_H_SQRT, 1, 0, NULL},
    {"rsqrt", 0, 0, 0, NULL}, {"reciprocal", 0, 0, 0, NULL},
    {"add", TSL_H_ADD, 2, 0, NULL},
    {"sub", TSL_H_SUB, 2, 0, NULL},
    {"mul", TSL_H_MUL, 2, 0, NULL},
    {"div", TSL_H_DIV, 2, 0, NULL},
    {"maximum", TSL_H_MAXIMUM, 2, 0, NULL},
    {"minimum", TSL_H_MINIMUM, 2, 0, NULL},
    {"pow", 0, 0, 0, NULL}, {"conv2d", 0, 0, 0, NULL}, {"conv_transpose2d", 0, 0, 0, NULL},
    {"linear", 0, 0, 0, NULL}, {"matmul", 0, 0, 0, NULL}, {"batch_norm", 0, 0, 0, NULL},
    {"layer_norm", 0, 0, 0, NULL}, {"softmax", 0, 0, 0, NULL}, {"sdpa", 0, 0, 0, NULL},
    {"max_pool2d", 0, 0, 0, NULL}, {"avg_pool2d", 0, 0, 0, NULL},
    {"mean", TSL_H_MEAN, 1, N(A_REDUCE), A_REDUCE},
    {"sum", TSL_H_SUM, 1, N(A_REDUCE), A_REDUCE},
    {"reduce_max", 0, 0, 0, NULL},
    {"embedding", TSL_H_EMBEDDING, 2, 0, NULL},
    {"upsample_nearest", 0, 0, 0, NULL}, {"upsample_bilinear", 0, 0, 0, NULL},
    {"reshape", TSL_H_RESHAPE, 1, N(A_SHAPE), A_SHAPE},
    {"transpose", TSL_H_TRANSPOSE, 1, N(A_PERM), A_PERM},
    {"concat", TSL_H_CONCAT, VARIADIC, N(A_AXIS), A_AXIS},
    {"slice", TSL_H_SLICE, 1, N(A_SLICE), A_SLICE},
    {"pad", 0, 0, 0, NULL},
    {"expand", TSL_H_EXPAND, 1, N(A_SHAPE), A_SHAPE},
    {"cast", TSL_H_CAST, 1, N(A_CAST), A_CAST},
    {"qconv2d", 0, 0, 0, NULL}, {"qlinear", 0, 0, 0, NULL}, {"qmatmul", 0, 0, 0, NULL},
    {"qadd", 0, 0, 0, NULL}, {"qsub", 0, 0, 0, NULL}, {"qmul", 0, 0, 0, NULL},
    {"requantize", 0, 0, 0, NULL}, {"lut", 0, 0, 0, NULL}, {"qavg_pool2d", 0, 0, 0, NULL},
    {"qmean", 0, 0, 0, NULL}, {"qsoftmax", 0, 0, 0, NULL}, {"qlayer_norm", 0, 0, 0, NULL},
    {"quantize", TSL_H_QUANTIZE, 1, N(A_QUANTIZE), A_QUANTIZE},
    {"dequantize", TSL_H_DEQUANTIZE, 1, N(A_DEQUANTIZE), A_DEQUANTIZE},
    {"host", 0, 0, 0, NULL},
};

const op_spec *tsl_op_lookup(tsl_str name) {
    size_t i;
    for (i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
        if (tsl_str_eq_c(name, OPS[i].name)) return &OPS[i];
    return NULL;
}

const char *tsl_op_name(uint8_t op) {
    size_t i;
    for (i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
        if (OPS[i].op == op && op != 0) return OPS[i].name;
    return "?";
}

uint8_t tsl_ir_dtype(tsl_str w) {
    static const struct { const char *name; uint8_t dt; } T[] = {
        {"f32", TSL_FLOAT32}, {"i64", TSL_INT64}, {"i32", TSL_INT32}, {"i16", TSL_INT16},
        {"i8", TSL_INT8}, {"u8", TSL_UINT8}, {"bool", TSL_BOOL}};
    size_t i;
    for (i = 0; i < sizeof T / sizeof T[0]; i++)
        if (tsl_str_eq_c(w, T[i].name)) return T[i].dt;
    return 0;
}

/* ---- inference ---------------------------------------------------------------------------- */
typedef struct ttype {
    uint8_t dtype, rank;
    int64_t dim[TSL_MAX_RANK];
} ttype;

static const tsl_value *operand(const tsl_model *m, const tsl_node *n, int k) {
    return &m->value[m->operand[n->in_first + k]];
}

static void of_value(ttype *t, const tsl_value *v) {
    int k;
    t->dtype = v->dtype;
    t->rank = v->rank;
    for (k = 0; k < v->rank; k++) t->dim[k] = v->shape[k];
}

static int same(const ttype *t, const tsl_value *declared) {
    int k;
    if (t->dtype != declared->dtype || t->rank != declared->rank) return 0;
    for (k = 0; k < t->rank; k++)
        if (t->dim[k] != (int64_t)declared->shape[k]) return 0;
    return 1;
}

static int is_int_dtype(uint8_t dt) {
    return dt == TSL_INT8 || dt == TSL_UINT8 || dt == TSL_INT16 || dt == TSL_INT32 || dt == TSL_INT64;
}

static void bounds(uint8_t dt, int64_t *lo, int64_t *hi) {
    switch (dt) {
    case TSL_INT8: *lo = -128; *hi = 127; return;
    case TSL_UINT8: *lo = 0; *hi = 255; return;
    case TSL_INT16: *lo = -32768; *hi = 32767; return;
    case TSL_INT32: *lo = INT32_MIN; *hi = INT32_MAX; return;
    default: *lo = INT64_MIN; *hi = INT64_MAX; return;
    }
}

/* tessel.ir.ops.broadcast_shapes */
static int broadcast(const ttype *a, const int64_t *bdim, int brank, ttype *out) {
    int i, r = a->rank > brank ? a->rank : brank;
    if (r > TSL_MAX_RANK) return 1;
    for (i = 0; i < r; i++) {
        int64_t da = i < a->rank ? a->dim[a->rank - 1 - i] : 1;
        int64_t db = i < brank ? bdim[brank - 1 - i] : 1;
        int64_t lo = da < db ? da : db, hi = da > db ? da : db;
        if (!(da == db || da == 1 || db == 1)) return 1;
        out->dim[r - 1 - i] = lo != 0 ? hi : 0;
    }
    out->rank = (uint8_t)r;
    return 0;
}

/* tessel.ir.ops.axis_index: -rank <= axis < max(rank, 1), then axis % rank (0 for rank 0) */
static int axis_index(int64_t axis, int rank, int *out) {
    if (!(-rank <= axis && axis < (rank > 1 ? rank : 1))) return 1;
    *out = rank ? (int)(((axis % rank) + rank) % rank) : 0;
    return 0;
}

static int64_t slice_len(int64_t size, int64_t start, int64_t end, int64_t step) {
    if (start < 0) { start += size; if (start < 0) start = 0; } else if (start > size) start = size;
    if (end < 0) { end += size; if (end < 0) end = 0; } else if (end > size) end = size;
    if (end <= start) return 0;
    return (end - start + step - 1) / step;
}

static int infer_reduce(const tsl_node *n, const ttype *x, ttype *out) {
    int seen[TSL_MAX_RANK] = {0}, k, r = 0;
    for (k = 0; k < n->list_len; k++) {
        int ax;
        if (axis_index(n->list[k], x->rank, &ax)) return 1;
        if (seen[ax]) return 1;
        seen[ax] = 1;
    }
    for (k = 0; k < x->rank; k++) {
        if (seen[k] && !n->flag) continue;
        out->dim[r++] = seen[k] ? 1 : x->dim[k];
    }
    out->rank = (uint8_t)r;
    out->dtype = x->dtype;
    return 0;
}

static int infer_concat(const tsl_model *m, const tsl_node *n, ttype *out) {
    ttype first;
    int ax, k, d;
    int64_t size = 0;
    of_value(&first, operand(m, n, 0));
    if (axis_index(n->i[0], first.rank, &ax) || first.rank == 0) return 1;
    for (k = 0; k < n->n_in; k++) {
        const tsl_value *t = operand(m, n, k);
        if (k > 0) {
            if (t->dtype != first.dtype || t->rank != first.rank) return 1;
            for (d = 0; d < first.rank; d++)
                if (d != ax && (int64_t)t->shape[d] != first.dim[d]) return 1;
        }
        size += t->shape[ax];
    }
    *out = first;
    out->dim[ax] = size;
    return 0;
}

static int infer_shape_ops(const tsl_model *m, const tsl_node *n, const ttype *x, ttype *out) {
    int k;
    switch (n->op) {
    case TSL_H_RESHAPE: {
        int64_t a = 1, b = 1;
        for (k = 0; k < x->rank; k++) a *= x->dim[k];
        for (k = 0; k < n->list_len; k++) {
            if (n->list[k] < 0) return 1;
            if (n->list[k] > 0 && b > INT64_MAX / n->list[k]) return 1;
            b *= n->list[k];
        }
        if (a != b) return 1;
        out->rank = n->list_len;
        for (k = 0; k < n->list_len; k++) out->dim[k] = n->list[k];
        out->dtype = x->dtype;
        return 0;
    }
    case TSL_H_EXPAND: {
        ttype b;
        if (broadcast(x, n->list, n->list_len, &b) || b.rank != n->list_len) return 1;
        for (k = 0; k < b.rank; k++)
            if (b.dim[k] != n->list[k]) return 1;
        *out = b;
        out->dtype = x->dtype;
        return 0;
    }
    case TSL_H_TRANSPOSE: {
        int seen[TSL_MAX_RANK] = {0};
        if (n->list_len != x->rank) return 1;
        for (k = 0; k < n->list_len; k++) {
            if (n->list[k] < 0 || n->list[k] >= x->rank || seen[n->list[k]]) return 1;
            seen[n->list[k]] = 1;
            out->dim[k] = x->dim[n->list[k]];
        }
        out->rank = x->rank;
        out->dtype = x->dtype;
        return 0;
    }
    case TSL_H_SLICE: {
        int ax;
        if (axis_index(n->i[0], x->rank, &ax) || x->rank == 0) return 1;
        if (n->i[3] < 1) return 1;
        *out = *x;
        out->dim[ax] = slice_len(x->dim[ax], n->i[1], n->i[2], n->i[3]);
        return 0;
    }
    case TSL_H_CONCAT:
        return infer_concat(m, n, out);
    default:
        return 1;
    }
}

int tsl_op_infer(const tsl_model *m, const tsl_node *n) {
    ttype x, out;
    const tsl_value *declared = &m->value[n->out];
    if (n->n_in > 0) of_value(&x, operand(m, n, 0));
    switch (n->op) {
    case TSL_H_CONSTANT:
        return 0; /* the parser built the value from the declared type */
    case TSL_H_QUANTIZE: {
        int64_t lo, hi;
        double s = n->f[0];
        if (x.dtype != TSL_FLOAT32) return 1;
        if (n->dtype != TSL_INT8 && n->dtype != TSL_INT16 && n->dtype != TSL_INT32 && n->dtype != TSL_UINT8) return 1;
        bounds(n->dtype, &lo, &hi);
        if (!(lo <= n->i[1] && n->i[1] <= n->i[2] && n->i[2] <= hi)) return 1;
        if (!(s > 0 && s < POS_INF)) return 1; /* QuantParams: finite and > 0 */
        out = x;
        out.dtype = n->dtype;
        break;
    }
    case TSL_H_DEQUANTIZE:
        if (!is_int_dtype(x.dtype)) return 1;
        out = x;
        out.dtype = TSL_FLOAT32;
        break;
    case TSL_H_CAST:
        out = x;
        out.dtype = n->dtype;
        break;
    case TSL_H_ADD: case TSL_H_SUB: case TSL_H_MUL: case TSL_H_DIV: case TSL_H_MAXIMUM: case TSL_H_MINIMUM: {
        const tsl_value *b = operand(m, n, 1);
        int64_t bdim[TSL_MAX_RANK];
        int k;
        if (b->dtype != x.dtype) return 1;
        for (k = 0; k < b->rank; k++) bdim[k] = b->shape[k];
        if (broadcast(&x, bdim, b->rank, &out)) return 1;
        out.dtype = x.dtype;
        break;
    }
    case TSL_H_RELU: case TSL_H_CLAMP: case TSL_H_NEG: case TSL_H_ABS: case TSL_H_SQRT:
        out = x;
        break;
    case TSL_H_SUM: case TSL_H_MEAN:
        if (infer_reduce(n, &x, &out)) return 1;
        break;
    case TSL_H_EMBEDDING: {
        const tsl_value *idx = operand(m, n, 1);
        int k;
        if (x.rank != 2) return 1;
        if (idx->dtype != TSL_INT64 && idx->dtype != TSL_INT32) return 1;
        if (idx->rank + 1 > TSL_MAX_RANK) return 1;
        for (k = 0; k < idx->rank; k++) out.dim[k] = idx->shape[k];
        out.dim[idx->rank] = x.dim[1];
        out.rank = (uint8_t)(idx->rank + 1);
        out.dtype = x.dtype;
        break;
    }
    default:
        if (infer_shape_ops(m, n, &x, &out)) return 1;
        break;
    }
    return same(&out, declared) ? 0 : 1;
}

int tsl_op_kernel_ok(const tsl_model *m, const tsl_node *n) {
    const tsl_value *x = n->n_in ? operand(m, n, 0) : NULL;
    switch (n->op) {
    case TSL_H_ADD: case TSL_H_SUB: case TSL_H_MUL: case TSL_H_DIV: case TSL_H_MAXIMUM:
    case TSL_H_MINIMUM: case TSL_H_RELU: case TSL_H_CLAMP: case TSL_H_NEG: case TSL_H_ABS:
    case TSL_H_SQRT:
        return x->dtype == TSL_FLOAT32 ? 0 : 1;
    case TSL_H_SUM: case TSL_H_MEAN:
        /* one axis: numpy's summation order is pairwise along a contiguous axis, in order
         * otherwise (plan.c reproduces both); several axes are not supported */
        return (x->dtype == TSL_FLOAT32 && n->list_len == 1 && x->rank > 0) ? 0 : 1;
    default:
        return 0;
    }
}
