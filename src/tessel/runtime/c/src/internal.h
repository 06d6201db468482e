/* Declarations shared by libtessel's source files (not part of the public API). */
#ifndef TESSEL_INTERNAL_H
#define TESSEL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tessel/tessel.h"

#define TSL_NO_OFFSET UINT64_MAX

/* ---- util.c ---------------------------------------------------------------------------- */
uint16_t tsl_rd16(const uint8_t *p);
uint32_t tsl_rd32(const uint8_t *p);
uint64_t tsl_rd64(const uint8_t *p);
uint32_t tsl_crc32(const uint8_t *p, size_t n);
/* Record a failure in `e` (may be NULL) and return `code`. */
tsl_status tsl_fail(tsl_error *e, tsl_status code, uint64_t offset, int32_t section,
                    int32_t index);
void tsl_error_clear(tsl_error *e);
/* 1 if [p, p+n) is valid UTF-8 (no overlong forms, surrogates or code points > U+10FFFF);
 * else 0 and *bad = the offset of the first invalid byte. */
int tsl_utf8_valid(const uint8_t *p, size_t n, size_t *bad);
/* The next code point of a string (raw UTF-8, or a JSON string body whose escapes are
 * decoded, a surrogate pair of escapes combined); -1 at the end. */
typedef struct tsl_cp_reader {
    const uint8_t *p, *end;
    int json;
} tsl_cp_reader;
int32_t tsl_cp_next(tsl_cp_reader *r);
int tsl_str_eq(tsl_str a, tsl_str b);
int tsl_str_eq_c(tsl_str a, const char *c);
uint32_t tsl_str_hash(tsl_str s);
/* Decode a JSON string body into UTF-8 bytes in `out` (cap bytes); returns the length or -1. */
long tsl_str_decode(tsl_str s, uint8_t *out, size_t cap);

/* ---- decimal.c: correctly rounded decimal -> double (no libc, no allocation) ------------- */
/* Parses [p, end) as -?digits[.digits][(e|E)[+-]digits]; returns 0 on success. `inf`, `nan`
 * are not handled here. *overflow = 1 when the value is out of the double range (result ±inf). */
int tsl_parse_double(const uint8_t *p, const uint8_t *end, double *out, int *overflow);

/* ---- json.c ------------------------------------------------------------------------------ */
/* Validate UTF-8 JSON text holding one object (docs/binary-format.md §6.4). */
tsl_status tsl_json_check(const uint8_t *p, size_t n, uint64_t file_offset, int32_t section,
                          tsl_error *e);
/* Queries on validated JSON. A value is a pointer to its first byte. */
typedef struct tsl_json {
    const uint8_t *p, *end;  /* the value, and the end of the whole text */
} tsl_json;
const uint8_t *tsl_json_ws(const uint8_t *p, const uint8_t *end);
const uint8_t *tsl_json_skip(const uint8_t *p, const uint8_t *end); /* past one value */
int tsl_json_get(tsl_json obj, const char *key, tsl_json *out);      /* 1 if found */
/* Iterate an array (or an object's members: *key set) : it.p = NULL to start. */
typedef struct tsl_json_iter {
    tsl_json container;
    const uint8_t *cur;
    int started;
} tsl_json_iter;
void tsl_json_iter_init(tsl_json_iter *it, tsl_json container);
int tsl_json_iter_next(tsl_json_iter *it, tsl_str *key, tsl_json *value);
/* Kinds: 'o' object, 'a' array, 's' string, 'i' integer, 'f' other number, 't', 'n' (null). */
char tsl_json_kind(tsl_json v);
/* An integer value: sign and magnitude; *big when it does not fit int64. */
int64_t tsl_json_int(tsl_json v, int *big);
tsl_str tsl_json_string(tsl_json v); /* the body of a string value */
uint32_t tsl_json_count(tsl_json container);

/* ---- isa.c --------------------------------------------------------------------------------- */
enum {
    TSL_OP_END = 0x01, TSL_OP_WAIT = 0x02, TSL_OP_SIGNAL = 0x03,
    TSL_OP_DMA_LOAD = 0x10, TSL_OP_DMA_STORE = 0x11, TSL_OP_DMA_LOAD_W = 0x12,
    TSL_OP_CONV = 0x20, TSL_OP_MATMUL = 0x21,
    TSL_OP_REQUANT = 0x30, TSL_OP_ELTWISE = 0x31, TSL_OP_LUT = 0x32, TSL_OP_LUT_LOAD = 0x33,
    TSL_OP_POOL = 0x34, TSL_OP_DWCONV = 0x35, TSL_OP_REDUCE = 0x36, TSL_OP_COPY = 0x37,
    TSL_OP_UNARY = 0x38
};
#define TSL_MAX_FIELDS 32
/* Bytes of an instruction with this opcode, 0 for an unknown opcode. */
uint32_t tsl_isa_size(uint8_t opcode);
/* Whether the opcode may sit in engine `engine`'s queue. */
int tsl_isa_runs_on(uint8_t opcode, int engine);
/* Decode the instruction at p (avail bytes left): its fields (signed values) into f. */
tsl_status tsl_isa_decode(const uint8_t *p, size_t avail, int64_t *f, uint32_t *nfields);
uint32_t tsl_isa_field_count(uint8_t opcode);
int tsl_isa_field(uint8_t opcode, uint32_t k, uint32_t *at, uint32_t *bits, int64_t *lo, int64_t *hi);

/* ---- load.c / meta.c / host_plan.c ------------------------------------------------------- */
typedef struct tsl_section {
    uint16_t kind;
    int32_t index;
    uint64_t offset, size;
    uint32_t count;
} tsl_section;

typedef struct tsl_loader {
    tsl_model *m;
    const tsl_target *target;
    tsl_error *e;
    tsl_section metadata, host, io;
    int has_host;
    /* off-chip boxes of the DMA instructions, per memory: loads and stores (hulls) */
    uint64_t load_lo[TSL_MEMORIES], load_hi[TSL_MEMORIES];
    uint64_t store_lo[TSL_MEMORIES], store_hi[TSL_MEMORIES];
    uint8_t loads[TSL_MEMORIES], stores[TSL_MEMORIES];
    int host_beyond;  /* a host_K graph with K beyond this build's regions */
} tsl_loader;

tsl_status tsl_check_metadata(tsl_loader *L);
tsl_status tsl_load_host(tsl_loader *L);      /* parse + verify HOST_GRAPHS into the model */
tsl_status tsl_plan(tsl_loader *L);           /* dataflow, I/O, arena layout */

/* ---- ir.c: the IR text reader ------------------------------------------------------------- */
tsl_status tsl_ir_parse(tsl_loader *L, tsl_str text, int part, tsl_str key);

/* ---- npu windows (load.c) ----------------------------------------------------------------- */
tsl_status tsl_plan_windows(tsl_loader *L);

#endif
