/* Tokens of the Graph IR text over a JSON-escaped span (ir_lex.h). Each rule follows the
 * regular expressions and checks of tessel.ir.parser; where the C reader is stricter (ASCII
 * digits only, integers within int64, IR-level escapes in resource strings) it says so. */
#include "ir_lex.h"

#define MAX_INT_DIGITS 40
#define MAX_NUMBER_CHARS 1024

static int32_t decode_at(const uint8_t *p, const uint8_t *end, const uint8_t **next) {
    tsl_cp_reader r;
    int32_t cp;
    if (p >= end) { *next = end; return -1; }
    if (*p != '\\' && *p < 0x80) { *next = p + 1; return *p; }
    r.p = p;
    r.end = end;
    r.json = 1;
    cp = tsl_cp_next(&r);
    *next = r.p;
    return cp;
}

int32_t ir_peek(const ir_cur *c) {
    const uint8_t *n;
    return decode_at(c->p, c->end, &n);
}

void ir_adv(ir_cur *c) {
    const uint8_t *n;
    decode_at(c->p, c->end, &n);
    c->p = n;
}

void ir_skip(ir_cur *c) {
    for (;;) {
        int32_t ch = ir_peek(c);
        if (ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n') { ir_adv(c); continue; }
        if (ch == '/' && ir_starts(c, "//")) {
            while ((ch = ir_peek(c)) >= 0 && ch != '\n') ir_adv(c);
            continue;
        }
        return;
    }
}

int ir_starts(const ir_cur *c, const char *s) {
    ir_cur t = *c;
    for (; *s; s++) {
        if (ir_peek(&t) != (uint8_t)*s) return 0;
        ir_adv(&t);
    }
    return 1;
}

int ir_accept(ir_cur *c, const char *s) {
    ir_skip(c);
    if (!ir_starts(c, s)) return 0;
    for (; *s; s++) ir_adv(c);
    return 1;
}

static int is_alpha(int32_t ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }
static int is_digit(int32_t ch) { return ch >= '0' && ch <= '9'; }
static int is_tail(int32_t ch) { return is_alpha(ch) || is_digit(ch) || ch == '_' || ch == '.'; }

static int word(ir_cur *c, tsl_str *out, int digit_first) {
    const uint8_t *start;
    int32_t ch;
    ir_skip(c);
    start = c->p;
    ch = ir_peek(c);
    if (!(is_alpha(ch) || ch == '_' || (digit_first && is_digit(ch)))) return 0;
    while (is_tail(ir_peek(c))) ir_adv(c);
    out->ptr = start;
    out->len = (uint32_t)(c->p - start);
    out->json = 1;
    return 1;
}

int ir_ident(ir_cur *c, tsl_str *out) { return word(c, out, 0); }

int ir_value_name(ir_cur *c, tsl_str *out) {
    if (!ir_accept(c, "%")) return 0;
    return word(c, out, 1);
}

int ir_word_is(tsl_str w, const char *s) { return tsl_str_eq_c(w, s); }

tsl_status ir_number(ir_cur *c, ir_num *out) {
    char buf[MAX_NUMBER_CHARS + 1];
    size_t n = 0, digits = 0;
    int neg = 0, is_float = 0;
    ir_cur t;
    ir_skip(c);
    t = *c;
#define PUT(ch) do { if (n >= MAX_NUMBER_CHARS) return TSL_E_LIMIT; buf[n++] = (char)(ch); } while (0)
    if (ir_peek(&t) == '-') { neg = 1; PUT('-'); ir_adv(&t); }
    if (ir_starts(&t, "inf") || ir_starts(&t, "nan")) {
        int inf = ir_peek(&t) == 'i';
        ir_adv(&t); ir_adv(&t); ir_adv(&t);
        *c = t;
        out->is_float = 1;
        if (inf) {
            uint64_t b = 0x7ff0000000000000ull | (neg ? 0x8000000000000000ull : 0);
            memcpy(&out->f, &b, 8);
        } else {
            uint64_t b = 0x7ff8000000000000ull | (neg ? 0x8000000000000000ull : 0);
            memcpy(&out->f, &b, 8);
        }
        return TSL_OK;
    }
    if (!is_digit(ir_peek(&t))) return TSL_E_HOST_PARSE;
    while (is_digit(ir_peek(&t))) { PUT(ir_peek(&t)); ir_adv(&t); digits++; }
    if (ir_peek(&t) == '.') {
        is_float = 1;
        PUT('.');
        ir_adv(&t);
        while (is_digit(ir_peek(&t))) { PUT(ir_peek(&t)); ir_adv(&t); }
    }
    {
        int32_t e = ir_peek(&t);
        if (e == 'e' || e == 'E') {
            ir_cur u = t;
            ir_adv(&u);
            if (ir_peek(&u) == '+' || ir_peek(&u) == '-') ir_adv(&u);
            if (is_digit(ir_peek(&u))) {
                PUT('e');
                ir_adv(&t);
                if (ir_peek(&t) == '+' || ir_peek(&t) == '-') { PUT(ir_peek(&t)); ir_adv(&t); }
                while (is_digit(ir_peek(&t))) { PUT(ir_peek(&t)); ir_adv(&t); }
                is_float = 1;
            }
        }
    }
#undef PUT
    *c = t;
    out->is_float = is_float;
    if (is_float) {
        int overflow;
        if (tsl_parse_double((const uint8_t *)buf, (const uint8_t *)buf + n, &out->f, &overflow) != 0)
            return TSL_E_HOST_PARSE;
        return TSL_OK;
    }
    if (digits > MAX_INT_DIGITS) return TSL_E_HOST_PARSE;
    {
        uint64_t mag = 0, lim = (uint64_t)INT64_MAX + (uint64_t)neg; /* stricter: int64 */
        size_t k;
        for (k = (size_t)neg; k < n; k++) {
            uint64_t d = (uint64_t)(buf[k] - '0');
            if (mag > (lim - d) / 10) return TSL_E_LIMIT;
            mag = mag * 10 + d;
        }
        out->i = neg ? (int64_t)(0 - mag) : (int64_t)mag;
        out->f = (double)out->i;
    }
    return TSL_OK;
}

static int hexd(int32_t ch) {
    return is_digit(ch) || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
}

/* tessel.ir.parser._Parser.string: a fast path for bodies without a backslash or a newline;
 * else the body must match "((?:[^"\\\n]|\\.)*)" and be a valid JSON string. */
tsl_status ir_string(ir_cur *c, tsl_str *body, int *escaped) {
    ir_cur t;
    const uint8_t *start;
    int32_t ch;
    int plain = 1;
    ir_skip(c);
    if (ir_peek(c) != '"') return TSL_E_HOST_PARSE;
    ir_adv(c);
    start = c->p;
    t = *c;
    while ((ch = ir_peek(&t)) >= 0 && ch != '"') {
        if (ch == '\\' || ch == '\n') plain = 0;
        ir_adv(&t);
    }
    if (ch == '"' && plain) {
        body->ptr = start;
        body->len = (uint32_t)(t.p - start);
        body->json = 1;
        ir_adv(&t);
        *c = t;
        *escaped = 0;
        return TSL_OK;
    }
    /* the regular expression, then json.loads of the match */
    t = *c;
    for (;;) {
        ch = ir_peek(&t);
        if (ch < 0 || ch == '\n') return TSL_E_HOST_PARSE; /* unterminated */
        if (ch == '"') break;
        if (ch == '\\') {
            ir_adv(&t);
            ch = ir_peek(&t);
            if (ch < 0 || ch == '\n') return TSL_E_HOST_PARSE;
        }
        ir_adv(&t);
    }
    body->ptr = start;
    body->len = (uint32_t)(t.p - start);
    body->json = 1;
    ir_adv(&t);
    {
        ir_cur u;
        u.p = start;
        u.end = body->ptr + body->len;
        while ((ch = ir_peek(&u)) >= 0) {
            if (ch < 0x20) return TSL_E_HOST_PARSE;
            ir_adv(&u);
            if (ch != '\\') continue;
            ch = ir_peek(&u);
            ir_adv(&u);
            if (ch == 'u') {
                int k;
                for (k = 0; k < 4; k++) {
                    if (!hexd(ir_peek(&u))) return TSL_E_HOST_PARSE;
                    ir_adv(&u);
                }
            } else if (ch != '"' && ch != '\\' && ch != '/' && ch != 'b' && ch != 'f' &&
                       ch != 'n' && ch != 'r' && ch != 't') {
                return TSL_E_HOST_PARSE;
            }
        }
    }
    *c = t;
    *escaped = 1;
    return TSL_OK;
}

static int b64val(int32_t ch) {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+') return 62;
    if (ch == '/') return 63;
    return -1;
}

int64_t ir_base64(tsl_str s, uint8_t *out) {
    ir_cur c;
    int quad = 0, pads = 0, padding = 0, first = 1;
    uint32_t left = 0;
    int64_t n = 0;
    int32_t ch;
    c.p = s.ptr;
    c.end = s.ptr + s.len;
    while ((ch = ir_peek(&c)) >= 0) {
        int v;
        ir_adv(&c);
        if (ch == '=') {
            padding = 1;
            if (first) return -1; /* leading padding */
            if (quad >= 2 && quad + ++pads >= 4) {
                if (ir_peek(&c) >= 0) return -1; /* data after the padding */
                return n;
            }
            continue;
        }
        first = 0;
        v = b64val(ch);
        if (v < 0 || padding) return -1;
        pads = 0;
        switch (quad) {
        case 0: left = (uint32_t)v; quad = 1; break;
        case 1:
            if (out) out[n] = (uint8_t)((left << 2) | ((uint32_t)v >> 4));
            n++;
            left = (uint32_t)v & 0x0f;
            quad = 2;
            break;
        case 2:
            if (out) out[n] = (uint8_t)((left << 4) | ((uint32_t)v >> 2));
            n++;
            left = (uint32_t)v & 0x03;
            quad = 3;
            break;
        default:
            if (out) out[n] = (uint8_t)((left << 6) | (uint32_t)v);
            n++;
            quad = 0;
            break;
        }
    }
    return quad == 0 ? n : -1;
}
