/* JSON (RFC 8259) as the .tsl reader takes it (docs/binary-format.md §6.4): a validator that
 * accepts exactly what Python's json module accepts under the reader's rules (UTF-8, no NaN /
 * Infinity, no float overflow, integers of at most 4300 digits, no duplicate key), without
 * allocating (an explicit stack of TSL_JSON_MAX_DEPTH levels and TSL_JSON_MAX_KEYS open keys),
 * and small queries on validated text (find a key, iterate, read an integer or a string). */
#include "internal.h"

#define JSON_MAX_INT_DIGITS 4300 /* Python's default int() limit: longer integers are refused */

typedef struct key_rec {
    uint32_t hash;
    tsl_str key;
} key_rec;

typedef struct jparser {
    const uint8_t *s, *p, *end;
    uint64_t base;
    int32_t section;
    tsl_error *e;
    key_rec keys[TSL_JSON_MAX_KEYS];
    int nkeys;
} jparser;

static tsl_status jfail(jparser *J, tsl_status code) {
    return tsl_fail(J->e, code, J->base + (uint64_t)(J->p - J->s), J->section, -1);
}

static void jws(jparser *J) {
    while (J->p < J->end && (*J->p == ' ' || *J->p == '\t' || *J->p == '\n' || *J->p == '\r'))
        J->p++;
}

static int is_hex(uint8_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A string at J->p (the opening quote); on success *body is its body and J->p is past it. */
static tsl_status jstring(jparser *J, tsl_str *body) {
    const uint8_t *start = ++J->p;
    while (J->p < J->end) {
        uint8_t c = *J->p;
        if (c == '"') {
            body->ptr = start;
            body->len = (uint32_t)(J->p - start);
            body->json = 1;
            J->p++;
            return TSL_OK;
        }
        if (c < 0x20) return jfail(J, TSL_E_JSON);
        if (c == '\\') {
            if (J->end - J->p < 2) { J->p = J->end; return jfail(J, TSL_E_JSON); }
            c = J->p[1];
            if (c == 'u') {
                int k;
                if (J->end - J->p < 6) return jfail(J, TSL_E_JSON);
                for (k = 2; k < 6; k++)
                    if (!is_hex(J->p[k])) return jfail(J, TSL_E_JSON);
                J->p += 6;
                continue;
            }
            if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' &&
                c != 'r' && c != 't')
                return jfail(J, TSL_E_JSON);
            J->p += 2;
            continue;
        }
        J->p++;
    }
    return jfail(J, TSL_E_JSON);
}

static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

static tsl_status jnumber(jparser *J) {
    const uint8_t *start = J->p;
    int is_float = 0;
    size_t int_digits = 0;
    if (*J->p == '-') J->p++;
    if (J->p >= J->end || !is_digit(*J->p)) return jfail(J, TSL_E_JSON);
    if (*J->p == '0') {
        J->p++;
        int_digits = 1;
    } else {
        while (J->p < J->end && is_digit(*J->p)) { J->p++; int_digits++; }
    }
    if (J->p < J->end && *J->p == '.' && J->end - J->p >= 2 && is_digit(J->p[1])) {
        is_float = 1;
        J->p++;
        while (J->p < J->end && is_digit(*J->p)) J->p++;
    }
    if (J->p < J->end && (*J->p == 'e' || *J->p == 'E')) {
        const uint8_t *q = J->p + 1;
        if (q < J->end && (*q == '+' || *q == '-')) q++;
        if (q < J->end && is_digit(*q)) {
            is_float = 1;
            J->p = q;
            while (J->p < J->end && is_digit(*J->p)) J->p++;
        }
    }
    if (is_float) {
        double v;
        int overflow = 0;
        if (tsl_parse_double(start, J->p, &v, &overflow) != 0 || overflow) {
            J->p = start;
            return jfail(J, TSL_E_JSON);
        }
    } else if (int_digits > JSON_MAX_INT_DIGITS) {
        J->p = start;
        return jfail(J, TSL_E_JSON);
    }
    return TSL_OK;
}

static int jword(jparser *J, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(J->end - J->p) >= n && memcmp(J->p, w, n) == 0) {
        J->p += n;
        return 1;
    }
    return 0;
}

/* A key of the innermost open object (whose keys start at `first`): refuse a duplicate. */
static tsl_status jkey(jparser *J, int first, tsl_str key, const uint8_t *at) {
    uint32_t h = tsl_str_hash(key);
    int k;
    for (k = first; k < J->nkeys; k++) {
        if (J->keys[k].hash == h && tsl_str_eq(J->keys[k].key, key)) {
            J->p = at;
            return jfail(J, TSL_E_JSON_DUPLICATE_KEY);
        }
    }
    if (J->nkeys >= TSL_JSON_MAX_KEYS) {
        J->p = at;
        tsl_fail(J->e, TSL_E_LIMIT, J->base + (uint64_t)(at - J->s), J->section, 6);
        return TSL_E_LIMIT;
    }
    J->keys[J->nkeys].hash = h;
    J->keys[J->nkeys].key = key;
    J->nkeys++;
    return TSL_OK;
}

/* The whole text: one value, iteratively (an explicit stack of open containers). */
static tsl_status jvalue_all(jparser *J, char *top_kind) {
    char kind[TSL_JSON_MAX_DEPTH];   /* '{' or '[' per open container */
    int key_first[TSL_JSON_MAX_DEPTH];
    int count[TSL_JSON_MAX_DEPTH];
    int depth = 0;
    tsl_status st;
    jws(J);
    *top_kind = J->p < J->end ? (char)*J->p : 0;
    for (;;) {
        /* parse one value at J->p */
        if (J->p >= J->end) return jfail(J, TSL_E_JSON);
        switch (*J->p) {
        case '{': case '[':
            if (depth >= TSL_JSON_MAX_DEPTH) {
                tsl_fail(J->e, TSL_E_LIMIT, J->base + (uint64_t)(J->p - J->s), J->section, 5);
                return TSL_E_LIMIT;
            }
            kind[depth] = (char)*J->p;
            key_first[depth] = J->nkeys;
            count[depth] = 0;
            depth++;
            J->p++;
            jws(J);
            if (J->p < J->end && *J->p == (kind[depth - 1] == '{' ? '}' : ']')) {
                J->p++;
                depth--;
                J->nkeys = key_first[depth];
                break; /* an empty container is a complete value */
            }
            if (kind[depth - 1] == '{') goto member;
            continue;
        case '"': {
            tsl_str body;
            if ((st = jstring(J, &body)) != TSL_OK) return st;
            break;
        }
        case 't': if (!jword(J, "true")) return jfail(J, TSL_E_JSON); break;
        case 'f': if (!jword(J, "false")) return jfail(J, TSL_E_JSON); break;
        case 'n': if (!jword(J, "null")) return jfail(J, TSL_E_JSON); break;
        default:
            if (*J->p == '-' || is_digit(*J->p)) {
                if ((st = jnumber(J)) != TSL_OK) return st;
                break;
            }
            return jfail(J, TSL_E_JSON);
        }
        /* a value is complete: close containers or move to the next element */
        for (;;) {
            if (depth == 0) {
                jws(J);
                if (J->p != J->end) return jfail(J, TSL_E_JSON); /* extra data */
                return TSL_OK;
            }
            jws(J);
            if (J->p >= J->end) return jfail(J, TSL_E_JSON);
            count[depth - 1]++;
            if (*J->p == ',') {
                J->p++;
                jws(J);
                if (kind[depth - 1] == '{') goto member;
                goto next_value;
            }
            if (*J->p == (kind[depth - 1] == '{' ? '}' : ']')) {
                J->p++;
                depth--;
                J->nkeys = key_first[depth];
                continue;
            }
            return jfail(J, TSL_E_JSON);
        }
    member: {
            tsl_str key;
            const uint8_t *at = J->p;
            if (J->p >= J->end || *J->p != '"') return jfail(J, TSL_E_JSON);
            if ((st = jstring(J, &key)) != TSL_OK) return st;
            if ((st = jkey(J, key_first[depth - 1], key, at)) != TSL_OK) return st;
            jws(J);
            if (J->p >= J->end || *J->p != ':') return jfail(J, TSL_E_JSON);
            J->p++;
            jws(J);
        }
    next_value:;
    }
}

tsl_status tsl_json_check(const uint8_t *p, size_t n, uint64_t file_offset, int32_t section,
                          tsl_error *e) {
    jparser J;
    size_t bad = 0;
    char top = 0;
    tsl_status st;
    if (!tsl_utf8_valid(p, n, &bad)) return tsl_fail(e, TSL_E_UTF8, file_offset + bad, section, -1);
    J.s = J.p = p;
    J.end = p + n;
    J.base = file_offset;
    J.section = section;
    J.e = e;
    J.nkeys = 0;
    if ((st = jvalue_all(&J, &top)) != TSL_OK) return st;
    if (top != '{') return tsl_fail(e, TSL_E_JSON_NOT_OBJECT, file_offset, section, -1);
    return TSL_OK;
}

/* ---- queries on validated text ------------------------------------------------------------- */
const uint8_t *tsl_json_ws(const uint8_t *p, const uint8_t *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static const uint8_t *skip_string(const uint8_t *p, const uint8_t *end) {
    p++;
    while (p < end && *p != '"') p += (*p == '\\') ? 2 : 1;
    return p < end ? p + 1 : end;
}

const uint8_t *tsl_json_skip(const uint8_t *p, const uint8_t *end) {
    if (p >= end) return end;
    if (*p == '"') return skip_string(p, end);
    if (*p == '{' || *p == '[') {
        long depth = 0;
        while (p < end) {
            uint8_t c = *p;
            if (c == '"') { p = skip_string(p, end); continue; }
            if (c == '{' || c == '[') depth++;
            else if (c == '}' || c == ']') {
                depth--;
                if (depth == 0) return p + 1;
            }
            p++;
        }
        return end;
    }
    while (p < end && (is_digit(*p) || *p == '-' || *p == '+' || *p == '.' || *p == 'e' ||
                       *p == 'E' || (*p >= 'a' && *p <= 'z')))
        p++;
    return p;
}

void tsl_json_iter_init(tsl_json_iter *it, tsl_json container) {
    it->container = container;
    it->cur = container.p + 1;
    it->started = 0;
}

int tsl_json_iter_next(tsl_json_iter *it, tsl_str *key, tsl_json *value) {
    const uint8_t *p = tsl_json_ws(it->cur, it->container.end), *end = it->container.end;
    int object = *it->container.p == '{';
    if (p >= end || *p == '}' || *p == ']') return 0;
    if (it->started) {
        if (*p != ',') return 0;
        p = tsl_json_ws(p + 1, end);
    }
    it->started = 1;
    if (object) {
        const uint8_t *k = p;
        p = skip_string(p, end);
        if (key) {
            key->ptr = k + 1;
            key->len = (uint32_t)(p - k - 2);
            key->json = 1;
        }
        p = tsl_json_ws(p, end);
        if (p < end && *p == ':') p++;
        p = tsl_json_ws(p, end);
    }
    value->p = p;
    value->end = end;
    it->cur = tsl_json_skip(p, end);
    return 1;
}

int tsl_json_get(tsl_json obj, const char *key, tsl_json *out) {
    tsl_json_iter it;
    tsl_str k;
    tsl_json v;
    if (tsl_json_kind(obj) != 'o') return 0;
    tsl_json_iter_init(&it, obj);
    while (tsl_json_iter_next(&it, &k, &v)) {
        if (tsl_str_eq_c(k, key)) {
            *out = v;
            return 1;
        }
    }
    return 0;
}

uint32_t tsl_json_count(tsl_json container) {
    tsl_json_iter it;
    tsl_json v;
    uint32_t n = 0;
    tsl_json_iter_init(&it, container);
    while (tsl_json_iter_next(&it, NULL, &v)) n++;
    return n;
}

char tsl_json_kind(tsl_json v) {
    const uint8_t *p = v.p;
    if (p >= v.end) return 0;
    switch (*p) {
    case '{': return 'o';
    case '[': return 'a';
    case '"': return 's';
    case 't': case 'f': return 't';
    case 'n': return 'n';
    default: break;
    }
    {
        const uint8_t *end = tsl_json_skip(p, v.end), *q;
        for (q = p; q < end; q++)
            if (*q == '.' || *q == 'e' || *q == 'E') return 'f';
        return 'i';
    }
}

int64_t tsl_json_int(tsl_json v, int *big) {
    const uint8_t *p = v.p, *end = tsl_json_skip(v.p, v.end);
    int neg = 0;
    uint64_t mag = 0;
    *big = 0;
    if (p < end && *p == '-') { neg = 1; p++; }
    for (; p < end && is_digit(*p); p++) {
        if (mag > (UINT64_MAX - 9) / 10) { *big = 1; mag = UINT64_MAX; continue; }
        mag = mag * 10 + (uint64_t)(*p - '0');
    }
    if (mag > (uint64_t)INT64_MAX) {
        *big = 1;
        return neg ? INT64_MIN : INT64_MAX;
    }
    return neg ? -(int64_t)mag : (int64_t)mag;
}

tsl_str tsl_json_string(tsl_json v) {
    tsl_str s;
    const uint8_t *end = tsl_json_skip(v.p, v.end);
    s.ptr = v.p + 1;
    s.len = (uint32_t)(end - v.p - 2);
    s.json = 1;
    return s;
}
