/* Correctly rounded decimal text -> IEEE double, without libc or allocation.
 *
 * A decimal is held as up to DEC_DIGITS digits (those beyond are dropped, with a flag that
 * breaks exact ties upwards) and scaled by powers of two until it lies in [1/2, 1); the
 * 53 bits of the mantissa are then its rounded integer part. This is the classic simple
 * decimal conversion (the algorithm of Go's strconv); it is exact for every input, with a
 * cost proportional to the digits kept. Used for the IR's float attributes (scales) and the
 * JSON numbers of the metadata (NaN / overflow checks), so that a file parses to the same
 * doubles as in Python. */
#include "internal.h"

#define DEC_DIGITS 800
#define DEC_MAX_SHIFT 28

typedef struct dec {
    uint8_t d[DEC_DIGITS + 16]; /* digits (values 0..9), most significant first */
    int nd, dp, neg, trunc;
} dec;

static void dec_trim(dec *a) {
    while (a->nd > 0 && a->d[a->nd - 1] == 0) a->nd--;
    if (a->nd == 0) a->dp = 0;
}

/* a *= 2^k, 1 <= k <= DEC_MAX_SHIFT (at most 9 new digits) */
static void dec_lshift(dec *a, unsigned k) {
    const int delta = 9;
    uint64_t carry = 0;
    int r, w = a->nd - 1 + delta, first;
    for (r = a->nd - 1; r >= 0; r--, w--) {
        uint64_t n = ((uint64_t)a->d[r] << k) + carry;
        carry = n / 10;
        a->d[w] = (uint8_t)(n % 10);
    }
    while (carry > 0) {
        a->d[w--] = (uint8_t)(carry % 10);
        carry /= 10;
    }
    first = w + 1;
    a->nd = a->nd + delta - first;
    memmove(a->d, a->d + first, (size_t)a->nd);
    a->dp += delta - first;
    if (a->nd > DEC_DIGITS) {
        int i;
        for (i = DEC_DIGITS; i < a->nd; i++)
            if (a->d[i]) a->trunc = 1;
        a->nd = DEC_DIGITS;
    }
    dec_trim(a);
}

/* a /= 2^k, 1 <= k <= DEC_MAX_SHIFT */
static void dec_rshift(dec *a, unsigned k) {
    int r = 0, w = 0;
    uint64_t n = 0, mask = ((uint64_t)1 << k) - 1;
    for (; (n >> k) == 0; r++) {
        if (r >= a->nd) {
            if (n == 0) { a->nd = 0; return; }
            while ((n >> k) == 0) { n *= 10; r++; }
            break;
        }
        n = n * 10 + a->d[r];
    }
    a->dp -= r - 1;
    for (; r < a->nd; r++) {
        uint64_t c = a->d[r];
        a->d[w++] = (uint8_t)(n >> k);
        n &= mask;
        n = n * 10 + c;
    }
    while (n > 0) {
        uint64_t dig = n >> k;
        n &= mask;
        if (w < DEC_DIGITS) a->d[w++] = (uint8_t)dig;
        else if (dig > 0) a->trunc = 1;
        n *= 10;
    }
    a->nd = w;
    dec_trim(a);
}

static void dec_shift(dec *a, int k) {
    if (a->nd == 0) return;
    while (k > DEC_MAX_SHIFT) { dec_lshift(a, DEC_MAX_SHIFT); k -= DEC_MAX_SHIFT; }
    while (k < -DEC_MAX_SHIFT) { dec_rshift(a, DEC_MAX_SHIFT); k += DEC_MAX_SHIFT; }
    if (k > 0) dec_lshift(a, (unsigned)k);
    else if (k < 0) dec_rshift(a, (unsigned)-k);
}

static int dec_round_up(const dec *a, int nd) {
    if (nd < 0 || nd >= a->nd) return 0;
    if (a->d[nd] == 5 && nd + 1 == a->nd) { /* exactly halfway: to even, unless truncated */
        if (a->trunc) return 1;
        return nd > 0 && (a->d[nd - 1] % 2) == 1;
    }
    return a->d[nd] >= 5;
}

static uint64_t dec_rounded_integer(const dec *a) {
    int i;
    uint64_t n = 0;
    if (a->dp > 20) return UINT64_MAX;
    for (i = 0; i < a->dp && i < a->nd; i++) n = n * 10 + a->d[i];
    for (; i < a->dp; i++) n *= 10;
    if (dec_round_up(a, a->dp)) n++;
    return n;
}

static const int powtab[] = {1, 3, 6, 9, 13, 16, 19, 23, 26};

static uint64_t dec_bits(dec *a, int *overflow) {
    const int mantbits = 52, expbits = 11, bias = -1023;
    int exp = 0;
    uint64_t mant = 0, bits;
    *overflow = 0;
    if (a->nd == 0) { exp = bias; goto out; }
    if (a->dp > 310) goto ovf;
    if (a->dp < -330) { mant = 0; exp = bias; goto out; }
    while (a->dp > 0) {
        int n = a->dp >= 9 ? 27 : powtab[a->dp];
        dec_shift(a, -n);
        exp += n;
    }
    while (a->dp < 0 || (a->dp == 0 && a->d[0] < 5)) {
        int n = -a->dp >= 9 ? 27 : powtab[-a->dp];
        dec_shift(a, n);
        exp -= n;
    }
    exp--;
    if (exp < bias + 1) {
        int n = bias + 1 - exp;
        dec_shift(a, -n);
        exp += n;
    }
    if (exp - bias >= (1 << expbits) - 1) goto ovf;
    dec_shift(a, 1 + mantbits);
    mant = dec_rounded_integer(a);
    if (mant == ((uint64_t)2 << mantbits)) {
        mant >>= 1;
        exp++;
        if (exp - bias >= (1 << expbits) - 1) goto ovf;
    }
    if ((mant & ((uint64_t)1 << mantbits)) == 0) exp = bias;
    goto out;
ovf:
    mant = 0;
    exp = (1 << expbits) - 1 + bias;
    *overflow = 1;
out:
    bits = mant & (((uint64_t)1 << mantbits) - 1);
    bits |= (uint64_t)((exp - bias) & ((1 << expbits) - 1)) << mantbits;
    if (a->neg) bits |= (uint64_t)1 << 63;
    return bits;
}

int tsl_parse_double(const uint8_t *p, const uint8_t *end, double *out, int *overflow) {
    dec a;
    int saw_digits = 0, saw_dot = 0;
    uint64_t bits;
    a.nd = 0; a.dp = 0; a.neg = 0; a.trunc = 0;
    if (p < end && *p == '-') { a.neg = 1; p++; }
    for (; p < end; p++) {
        uint8_t c = *p;
        if (c == '.') {
            if (saw_dot) return -1;
            saw_dot = 1;
            a.dp = a.nd;
            continue;
        }
        if (c < '0' || c > '9') break;
        saw_digits = 1;
        if (c == '0' && a.nd == 0) { a.dp--; continue; } /* leading zeros */
        if (a.nd < DEC_DIGITS) a.d[a.nd++] = (uint8_t)(c - '0');
        else if (c != '0') a.trunc = 1;
    }
    if (!saw_digits) return -1;
    if (!saw_dot) a.dp = a.nd;
    else if (a.nd == 0) a.dp = 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        int esign = 1;
        long e = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) { if (*p == '-') esign = -1; p++; }
        if (p >= end || *p < '0' || *p > '9') return -1;
        for (; p < end && *p >= '0' && *p <= '9'; p++)
            if (e < 10000) e = e * 10 + (*p - '0');
        a.dp += (int)(esign * e);
    }
    if (p != end) return -1;
    /* leading zeros after the point moved dp down while no digit was kept: undo for zero */
    if (a.nd == 0) a.dp = 0;
    dec_trim(&a);
    bits = dec_bits(&a, overflow);
    memcpy(out, &bits, sizeof bits);
    return 0;
}
