/* The host ops' kernels: the semantics of the Python runtime's kernels (numpy, float32 as
 * PyTorch's CPU eager) written in C, bit for bit: quantize / dequantize with PyTorch's rounding,
 * casts as numpy performs them on x86-64, element-wise float ops with numpy broadcasting, sums
 * in numpy's order (pairwise along a contiguous axis), data movement and embedding lookups. */
#include <math.h>

#include "kernels.h"

typedef struct tview {
    uint8_t *p;
    const tsl_value *v;
} tview;

static tview view(const tsl_model *m, uint8_t *host, int value) {
    tview t;
    t.v = &m->value[value];
    t.p = host + t.v->offset;
    return t;
}

static uint64_t numel(const tsl_value *v) {
    uint64_t n = 1;
    int k;
    for (k = 0; k < v->rank; k++) n *= v->shape[k];
    return n;
}

/* ---- element conversions ---------------------------------------------------------------------- */
static double load_num(const uint8_t *p, uint8_t dt) {
    switch (dt) {
    case TSL_INT8: return (double)*(const int8_t *)p;
    case TSL_UINT8: case TSL_BOOL: return (double)*p;
    case TSL_INT16: { int16_t v; memcpy(&v, p, 2); return v; }
    case TSL_INT32: { int32_t v; memcpy(&v, p, 4); return v; }
    case TSL_INT64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    default: { float v; memcpy(&v, p, 4); return v; }
    }
}

static int64_t load_int(const uint8_t *p, uint8_t dt) {
    switch (dt) {
    case TSL_INT8: return *(const int8_t *)p;
    case TSL_UINT8: case TSL_BOOL: return *p;
    case TSL_INT16: { int16_t v; memcpy(&v, p, 2); return v; }
    case TSL_INT32: { int32_t v; memcpy(&v, p, 4); return v; }
    default: { int64_t v; memcpy(&v, p, 8); return v; }
    }
}

static void store_int(uint8_t *p, uint8_t dt, int64_t v) {
    switch (dt) {
    case TSL_INT8: case TSL_UINT8: *p = (uint8_t)v; break;
    case TSL_BOOL: *p = v != 0; break;
    case TSL_INT16: { uint16_t x = (uint16_t)v; memcpy(p, &x, 2); break; }
    case TSL_INT32: { uint32_t x = (uint32_t)v; memcpy(p, &x, 4); break; }
    default: { uint64_t x = (uint64_t)v; memcpy(p, &x, 8); break; }
    }
}

/* float -> integer as x86-64 converts (cvttss2si): truncation; NaN and values outside the
 * 32-bit (64-bit for int64) range give the minimum; narrower types keep the low bits */
static int64_t trunc_x86(float f, int wide) {
    if (wide) {
        if (f != f || f >= 9223372036854775808.0f || f < -9223372036854775808.0f) return INT64_MIN;
        return (int64_t)f;
    }
    if (f != f || f >= 2147483648.0f || f < -2147483648.0f) return INT32_MIN;
    return (int32_t)f;
}

static float ldf(const uint8_t *p) { float v; memcpy(&v, p, 4); return v; }
static void stf(uint8_t *p, float v) { memcpy(p, &v, 4); }

/* ---- quantisation boundary (PyTorch's rounding: half to even, then the clamp) ----------------- */
static float clip_f(float x, float lo, float hi) {
    /* numpy's clip: min(max(x, lo), hi), a NaN operand propagating, ties keeping x */
    if (x == x) x = lo != lo ? lo : (x < lo ? lo : x);
    if (x != x) return x;
    if (hi != hi) return hi;
    return x > hi ? hi : x;
}

static void k_quantize(const tsl_node *n, tview x, tview y) {
    uint64_t i, count = numel(x.v);
    float inv = (float)(1.0 / n->f[0]), zp = (float)n->i[0];
    float lo = (float)n->i[1], hi = (float)n->i[2];
    for (i = 0; i < count; i++) {
        float q = rintf(ldf(x.p + 4 * i) * inv) + zp;
        if (q != q) q = zp; /* NaN: the zero point, the code of 0.0 (as the golden model) */
        q = clip_f(q, lo, hi);
        store_int(y.p + i * tsl_dtype_size((tsl_dtype)n->dtype), n->dtype,
                  trunc_x86(q, n->dtype == TSL_INT64));
    }
}

static void k_dequantize(const tsl_node *n, tview x, tview y) {
    uint64_t i, count = numel(x.v);
    uint32_t sz = tsl_dtype_size((tsl_dtype)x.v->dtype);
    float scale = (float)n->f[0];
    for (i = 0; i < count; i++) {
        int32_t d = (int32_t)((uint32_t)(int32_t)load_int(x.p + i * sz, x.v->dtype) - (uint32_t)(int32_t)n->i[0]);
        stf(y.p + 4 * i, (float)d * scale);
    }
}

static void k_cast(tview x, tview y) {
    uint64_t i, count = numel(x.v);
    uint32_t sx = tsl_dtype_size((tsl_dtype)x.v->dtype), sy = tsl_dtype_size((tsl_dtype)y.v->dtype);
    uint8_t dx = x.v->dtype, dy = y.v->dtype;
    for (i = 0; i < count; i++) {
        const uint8_t *a = x.p + i * sx;
        uint8_t *b = y.p + i * sy;
        if (dy == TSL_FLOAT32) {
            if (dx == TSL_INT64) { int64_t v; memcpy(&v, a, 8); stf(b, (float)v); }
            else stf(b, (float)load_num(a, dx));
        } else if (dx == TSL_FLOAT32) {
            float f = ldf(a);
            if (dy == TSL_BOOL) *b = f != 0.0f || f != f;
            else store_int(b, dy, trunc_x86(f, dy == TSL_INT64));
        } else {
            store_int(b, dy, load_int(a, dx));
        }
    }
}

/* ---- data movement ------------------------------------------------------------------------------ */
static void strides_of(const tsl_value *v, uint64_t *st) {
    int k;
    uint64_t s = 1;
    for (k = v->rank - 1; k >= 0; k--) {
        st[k] = s;
        s *= v->shape[k];
    }
}

/* y[idx] = x[src(idx)] element by element, src given by per-dimension source strides */
static void gather(tview x, tview y, const uint64_t *src_stride, uint64_t base) {
    uint32_t sz = tsl_dtype_size((tsl_dtype)y.v->dtype);
    uint64_t idx[TSL_MAX_RANK] = {0}, i, count = numel(y.v), off = base;
    int r = y.v->rank, k;
    for (i = 0; i < count; i++) {
        memcpy(y.p + i * sz, x.p + off * sz, sz);
        for (k = r - 1; k >= 0; k--) {
            idx[k]++;
            off += src_stride[k];
            if (idx[k] < y.v->shape[k]) break;
            off -= src_stride[k] * idx[k];
            idx[k] = 0;
        }
    }
}

static void k_expand(tview x, tview y) {
    uint64_t xs[TSL_MAX_RANK], st[TSL_MAX_RANK];
    int k, lead = y.v->rank - x.v->rank;
    strides_of(x.v, xs);
    for (k = 0; k < y.v->rank; k++) {
        int xk = k - lead;
        st[k] = (xk < 0 || x.v->shape[xk] == 1) ? 0 : xs[xk];
    }
    gather(x, y, st, 0);
}

static void k_transpose(const tsl_node *n, tview x, tview y) {
    uint64_t xs[TSL_MAX_RANK], st[TSL_MAX_RANK];
    int k;
    strides_of(x.v, xs);
    for (k = 0; k < y.v->rank; k++) st[k] = xs[n->list[k]];
    gather(x, y, st, 0);
}

static int norm_axis(int64_t axis, int rank) { return (int)(((axis % rank) + rank) % rank); }

static void k_slice(const tsl_node *n, tview x, tview y) {
    uint64_t xs[TSL_MAX_RANK], st[TSL_MAX_RANK];
    int k, ax = norm_axis(n->i[0], x.v->rank);
    int64_t size = x.v->shape[ax], start = n->i[1];
    if (start < 0) { start += size; if (start < 0) start = 0; } else if (start > size) start = size;
    strides_of(x.v, xs);
    for (k = 0; k < y.v->rank; k++) st[k] = xs[k];
    st[ax] = xs[ax] * (uint64_t)n->i[3];
    gather(x, y, st, (uint64_t)start * xs[ax]);
}

static void k_concat(const tsl_model *m, const tsl_node *n, uint8_t *host, tview y) {
    int ax = norm_axis(n->i[0], y.v->rank), k, j;
    uint32_t sz = tsl_dtype_size((tsl_dtype)y.v->dtype);
    uint64_t outer = 1, inner = sz, at = 0, o;
    for (k = 0; k < ax; k++) outer *= y.v->shape[k];
    for (k = ax + 1; k < y.v->rank; k++) inner *= y.v->shape[k];
    for (j = 0; j < n->n_in; j++) {
        tview x = view(m, host, m->operand[n->in_first + j]);
        uint64_t chunk = x.v->shape[ax] * inner;
        for (o = 0; o < outer; o++)
            memcpy(y.p + o * y.v->shape[ax] * inner + at, x.p + o * chunk, chunk);
        at += chunk;
    }
}

/* ---- element-wise float ops ----------------------------------------------------------------------- */
static float binary(uint8_t op, float a, float b) {
    switch (op) {
    case TSL_H_ADD: return a + b;
    case TSL_H_SUB: return a - b;
    case TSL_H_MUL: return a * b;
    case TSL_H_DIV: return a / b;
    /* numpy's maximum / minimum: a NaN operand propagates; on a tie the second operand */
    case TSL_H_MAXIMUM: return (a > b || a != a) ? a : b;
    default: return (a < b || a != a) ? a : b;
    }
}

/* the source offset strides of operand x broadcast to y's shape */
static void bstrides(const tsl_value *x, const tsl_value *y, uint64_t *st) {
    uint64_t xs[TSL_MAX_RANK];
    int k, lead = y->rank - x->rank;
    strides_of(x, xs);
    for (k = 0; k < y->rank; k++) {
        int xk = k - lead;
        st[k] = (xk < 0 || x->shape[xk] == 1) ? 0 : xs[xk];
    }
}

static void k_binary(const tsl_node *n, tview a, tview b, tview y) {
    uint64_t sa[TSL_MAX_RANK], sb[TSL_MAX_RANK], idx[TSL_MAX_RANK] = {0}, i, count = numel(y.v);
    uint64_t oa = 0, ob = 0;
    int k, r = y.v->rank;
    bstrides(a.v, y.v, sa);
    bstrides(b.v, y.v, sb);
    for (i = 0; i < count; i++) {
        stf(y.p + 4 * i, binary(n->op, ldf(a.p + 4 * oa), ldf(b.p + 4 * ob)));
        for (k = r - 1; k >= 0; k--) {
            idx[k]++;
            oa += sa[k];
            ob += sb[k];
            if (idx[k] < y.v->shape[k]) break;
            oa -= sa[k] * idx[k];
            ob -= sb[k] * idx[k];
            idx[k] = 0;
        }
    }
}

static void k_unary(const tsl_node *n, tview x, tview y) {
    uint64_t i, count = numel(x.v);
    float lo = (float)n->f[0], hi = (float)n->f[1];
    for (i = 0; i < count; i++) {
        float v = ldf(x.p + 4 * i);
        switch (n->op) {
        case TSL_H_RELU: v = (v > 0.0f || v != v) ? v : 0.0f; break; /* maximum(x, 0) */
        case TSL_H_CLAMP: v = clip_f(v, lo, hi); break;
        case TSL_H_NEG: v = -v; break;
        case TSL_H_ABS: v = fabsf(v); break;
        default: v = sqrtf(v); break;
        }
        stf(y.p + 4 * i, v);
    }
}

/* ---- reductions (numpy's order) ------------------------------------------------------------------- */
/* numpy's pairwise summation of n floats at stride s (float32 accumulators) */
static float pairwise(const uint8_t *a, uint64_t n, uint64_t s) {
    if (n < 8) {
        float res = 0.0f;
        uint64_t i;
        for (i = 0; i < n; i++) res += ldf(a + 4 * i * s);
        return res;
    }
    if (n <= 128) {
        float r[8], res;
        uint64_t i;
        int k;
        for (k = 0; k < 8; k++) r[k] = ldf(a + 4 * (uint64_t)k * s);
        for (i = 8; i < n - (n % 8); i += 8)
            for (k = 0; k < 8; k++) r[k] += ldf(a + 4 * (i + (uint64_t)k) * s);
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += ldf(a + 4 * i * s);
        return res;
    }
    {
        uint64_t n2 = n / 2;
        n2 -= n2 % 8;
        return pairwise(a, n2, s) + pairwise(a + 4 * n2 * s, n - n2, s);
    }
}

#define NUMPY_BUFSIZE 8192

static void k_reduce(const tsl_node *n, tview x, tview y) {
    int ax = norm_axis(n->list[0], x.v->rank), k;
    uint64_t outer = 1, len = x.v->shape[ax], inner = 1, o, j, t;
    for (k = 0; k < ax; k++) outer *= x.v->shape[k];
    for (k = ax + 1; k < x.v->rank; k++) inner *= x.v->shape[k];
    for (o = 0; o < outer; o++) {
        for (j = 0; j < inner; j++) {
            const uint8_t *a = x.p + 4 * (o * len * inner + j);
            float acc = 0.0f;
            if (inner == 1) { /* the reduced axis is the contiguous one: pairwise, per buffer */
                for (t = 0; t < len; t += NUMPY_BUFSIZE) {
                    uint64_t chunk = len - t < NUMPY_BUFSIZE ? len - t : NUMPY_BUFSIZE;
                    acc += pairwise(a + 4 * t, chunk, 1);
                }
            } else {
                for (t = 0; t < len; t++) acc += ldf(a + 4 * t * inner);
            }
            if (n->op == TSL_H_MEAN) acc = acc / (float)len;
            stf(y.p + 4 * (o * inner + j), acc);
        }
    }
}

static tsl_status k_embedding(tview w, tview idx, tview y) {
    uint64_t i, count = numel(idx.v), rows = w.v->shape[0];
    uint64_t row = (uint64_t)w.v->shape[1] * tsl_dtype_size((tsl_dtype)w.v->dtype);
    uint32_t isz = tsl_dtype_size((tsl_dtype)idx.v->dtype);
    for (i = 0; i < count; i++) {
        int64_t r = load_int(idx.p + i * isz, idx.v->dtype);
        if (r < 0) r += (int64_t)rows;
        if (r < 0 || (uint64_t)r >= rows) return TSL_E_HOST_RUNTIME;
        memcpy(y.p + i * row, w.p + (uint64_t)r * row, row);
    }
    return TSL_OK;
}

tsl_status tsl_run_node(const tsl_model *m, const tsl_node *n, uint8_t *host) {
    tview y = view(m, host, n->out), x, b;
    if (n->n_in) x = view(m, host, m->operand[n->in_first]);
    switch (n->op) {
    case TSL_H_CONSTANT: return TSL_OK; /* placed by tsl_prepare */
    case TSL_H_QUANTIZE: k_quantize(n, x, y); return TSL_OK;
    case TSL_H_DEQUANTIZE: k_dequantize(n, x, y); return TSL_OK;
    case TSL_H_CAST: k_cast(x, y); return TSL_OK;
    case TSL_H_RESHAPE: memmove(y.p, x.p, (size_t)y.v->nbytes); return TSL_OK;
    case TSL_H_EXPAND: k_expand(x, y); return TSL_OK;
    case TSL_H_TRANSPOSE: k_transpose(n, x, y); return TSL_OK;
    case TSL_H_SLICE: k_slice(n, x, y); return TSL_OK;
    case TSL_H_CONCAT: k_concat(m, n, host, y); return TSL_OK;
    case TSL_H_ADD: case TSL_H_SUB: case TSL_H_MUL: case TSL_H_DIV: case TSL_H_MAXIMUM:
    case TSL_H_MINIMUM:
        b = view(m, host, m->operand[n->in_first + 1]);
        k_binary(n, x, b, y);
        return TSL_OK;
    case TSL_H_RELU: case TSL_H_CLAMP: case TSL_H_NEG: case TSL_H_ABS: case TSL_H_SQRT:
        k_unary(n, x, y);
        return TSL_OK;
    case TSL_H_SUM: case TSL_H_MEAN: k_reduce(n, x, y); return TSL_OK;
    case TSL_H_EMBEDDING:
        b = view(m, host, m->operand[n->in_first + 1]);
        return k_embedding(x, b, y);
    default: return TSL_E_HOST_OP_UNSUPPORTED;
    }
}
