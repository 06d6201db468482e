/* Little-endian reads, CRC-32, error records, UTF-8 and the string helpers of libtessel. */
#include "internal.h"

uint16_t tsl_rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

uint32_t tsl_rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) |
           ((uint32_t)p[3] << 24);
}

uint64_t tsl_rd64(const uint8_t *p) {
    return (uint64_t)tsl_rd32(p) | ((uint64_t)tsl_rd32(p + 4) << 32);
}

/* CRC-32/ISO-HDLC (zlib's), a nibble at a time: a 64-byte table instead of 1 KiB of flash. */
static const uint32_t crc_nibble[16] = {
    0x00000000u, 0x1db71064u, 0x3b6e20c8u, 0x26d930acu, 0x76dc4190u, 0x6b6b51f4u,
    0x4db26158u, 0x5005713cu, 0xedb88320u, 0xf00f9344u, 0xd6d6a3e8u, 0xcb61b38cu,
    0x9b64c2b0u, 0x86d3d2d4u, 0xa00ae278u, 0xbdbdf21cu};

uint32_t tsl_crc32(const uint8_t *p, size_t n) {
    uint32_t crc = 0xffffffffu;
    size_t i;
    for (i = 0; i < n; i++) {
        crc ^= p[i];
        crc = crc_nibble[crc & 0xf] ^ (crc >> 4);
        crc = crc_nibble[crc & 0xf] ^ (crc >> 4);
    }
    return crc ^ 0xffffffffu;
}

void tsl_error_clear(tsl_error *e) {
    if (!e) return;
    e->code = TSL_OK;
    e->offset = TSL_NO_OFFSET;
    e->section = -1;
    e->index = -1;
    e->engine = -1;
    e->name.ptr = NULL;
    e->name.len = 0;
    e->name.json = 0;
}

tsl_status tsl_fail(tsl_error *e, tsl_status code, uint64_t offset, int32_t section,
                    int32_t index) {
    if (e) {
        e->code = code;
        e->offset = offset;
        e->section = section;
        e->index = index;
    }
    return code;
}

int tsl_utf8_valid(const uint8_t *p, size_t n, size_t *bad) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        }
        if ((c & 0xe0) == 0xc0) { len = 2; cp = c & 0x1f; min = 0x80; }
        else if ((c & 0xf0) == 0xe0) { len = 3; cp = c & 0x0f; min = 0x800; }
        else if ((c & 0xf8) == 0xf0) { len = 4; cp = c & 0x07; min = 0x10000; }
        else { *bad = i; return 0; }
        if (n - i < len) { *bad = i; return 0; }
        {
            size_t k;
            for (k = 1; k < len; k++) {
                if ((p[i + k] & 0xc0) != 0x80) { *bad = i; return 0; }
                cp = (cp << 6) | (p[i + k] & 0x3f);
            }
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) { *bad = i; return 0; }
        i += len;
    }
    return 1;
}

static int hexval(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int32_t hex4(const uint8_t *p) {
    int32_t v = 0;
    int k;
    for (k = 0; k < 4; k++) v = (v << 4) | hexval(p[k]);
    return v;
}

static int32_t utf8_next(tsl_cp_reader *r) {
    const uint8_t *p = r->p;
    uint8_t c = *p;
    int32_t cp;
    int len, k;
    if (c < 0x80) { r->p = p + 1; return c; }
    if ((c & 0xe0) == 0xc0) { len = 2; cp = c & 0x1f; }
    else if ((c & 0xf0) == 0xe0) { len = 3; cp = c & 0x0f; }
    else { len = 4; cp = c & 0x07; }
    if (r->end - p < len) { r->p = r->end; return 0xfffd; } /* validated text never gets here */
    for (k = 1; k < len; k++) cp = (cp << 6) | (p[k] & 0x3f);
    r->p = p + len;
    return cp;
}

int32_t tsl_cp_next(tsl_cp_reader *r) {
    int32_t cp;
    if (r->p >= r->end) return -1;
    if (!r->json || *r->p != '\\') return utf8_next(r);
    /* an escape (the text was validated: every escape is complete) */
    if (r->end - r->p < 2) { r->p = r->end; return -1; }
    switch (r->p[1]) {
    case 'b': r->p += 2; return 8;
    case 'f': r->p += 2; return 12;
    case 'n': r->p += 2; return 10;
    case 'r': r->p += 2; return 13;
    case 't': r->p += 2; return 9;
    case 'u': break;
    default: cp = r->p[1]; r->p += 2; return cp; /* \" \\ \/ */
    }
    if (r->end - r->p < 6) { r->p = r->end; return -1; }
    cp = hex4(r->p + 2);
    r->p += 6;
    if (cp >= 0xd800 && cp <= 0xdbff && r->end - r->p >= 6 && r->p[0] == '\\' && r->p[1] == 'u') {
        int32_t lo = hex4(r->p + 2);
        if (lo >= 0xdc00 && lo <= 0xdfff) {
            r->p += 6;
            return 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
    }
    return cp;
}

int tsl_str_eq(tsl_str a, tsl_str b) {
    tsl_cp_reader ra, rb;
    if (!a.json && !b.json) return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
    ra.p = a.ptr; ra.end = a.ptr + a.len; ra.json = a.json;
    rb.p = b.ptr; rb.end = b.ptr + b.len; rb.json = b.json;
    for (;;) {
        int32_t x = tsl_cp_next(&ra), y = tsl_cp_next(&rb);
        if (x != y) return 0;
        if (x < 0) return 1;
    }
}

int tsl_str_eq_c(tsl_str a, const char *c) {
    tsl_str b;
    b.ptr = (const uint8_t *)c;
    b.len = (uint32_t)strlen(c);
    b.json = 0;
    return tsl_str_eq(a, b);
}

uint32_t tsl_str_hash(tsl_str s) {
    tsl_cp_reader r;
    uint32_t h = 2166136261u;
    int32_t cp;
    r.p = s.ptr; r.end = s.ptr + s.len; r.json = s.json;
    while ((cp = tsl_cp_next(&r)) >= 0) {
        h = (h ^ (uint32_t)cp) * 16777619u;
    }
    return h;
}

long tsl_str_decode(tsl_str s, uint8_t *out, size_t cap) {
    tsl_cp_reader r;
    int32_t cp;
    size_t n = 0;
    r.p = s.ptr; r.end = s.ptr + s.len; r.json = s.json;
    while ((cp = tsl_cp_next(&r)) >= 0) {
        uint8_t buf[4];
        size_t k, len;
        if (cp < 0x80) { buf[0] = (uint8_t)cp; len = 1; }
        else if (cp < 0x800) { buf[0] = (uint8_t)(0xc0 | (cp >> 6)); buf[1] = (uint8_t)(0x80 | (cp & 0x3f)); len = 2; }
        else if (cp < 0x10000) {
            buf[0] = (uint8_t)(0xe0 | (cp >> 12)); buf[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
            buf[2] = (uint8_t)(0x80 | (cp & 0x3f)); len = 3;
        } else {
            buf[0] = (uint8_t)(0xf0 | (cp >> 18)); buf[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
            buf[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f)); buf[3] = (uint8_t)(0x80 | (cp & 0x3f)); len = 4;
        }
        if (n + len > cap) return -1;
        for (k = 0; k < len; k++) out[n++] = buf[k];
    }
    return (long)n;
}

int tsl_str_copy(tsl_str s, char *buf, size_t cap) {
    long n;
    if (!buf || cap == 0) return -1;
    n = tsl_str_decode(s, (uint8_t *)buf, cap - 1);
    if (n < 0) return -1;
    buf[n] = 0;
    return (int)n;
}

uint32_t tsl_dtype_size(tsl_dtype dtype) {
    switch (dtype) {
    case TSL_INT8: case TSL_UINT8: case TSL_BOOL: return 1;
    case TSL_INT16: case TSL_FLOAT16: return 2;
    case TSL_INT32: case TSL_FLOAT32: return 4;
    case TSL_INT64: return 8;
    }
    return 0;
}

const char *tsl_status_text(tsl_status code) {
    switch (code) {
    case TSL_OK: return "ok";
    case TSL_E_TRUNCATED: return "file shorter than the 80-byte header";
    case TSL_E_MAGIC: return "magic is not TSL\\0 (not a .tsl file)";
    case TSL_E_VERSION: return "unsupported format major version";
    case TSL_E_HEADER_CRC: return "header CRC-32 mismatch (header corrupted)";
    case TSL_E_ARCH_HASH: return "compiled for another architecture (arch_hash)";
    case TSL_E_FLAGS: return "header flags must be 0";
    case TSL_E_HEADER_SIZE: return "header_size must be 80";
    case TSL_E_FILE_SIZE: return "file_size differs from the file's length (truncated or padded)";
    case TSL_E_TABLE_OFFSET: return "table_offset must be 80";
    case TSL_E_SECTION_COUNT: return "section_count above 64";
    case TSL_E_RESERVED: return "reserved header field not 0";
    case TSL_E_TABLE_BOUNDS: return "section table ends past the file";
    case TSL_E_TABLE_CRC: return "section table CRC-32 mismatch";
    case TSL_E_SECTION_KIND: return "unknown required section kind";
    case TSL_E_SECTION_FLAGS: return "section flags must be 0";
    case TSL_E_SECTION_ALIGNMENT: return "section alignment not a power of two in [1, 4096]";
    case TSL_E_SECTION_MISALIGNED: return "section offset not aligned";
    case TSL_E_SECTION_OFFSET: return "section offset outside the data area";
    case TSL_E_SECTION_SIZE: return "section ends past the file";
    case TSL_E_SECTION_DUPLICATE: return "duplicate section kind";
    case TSL_E_SECTION_OVERLAP: return "sections overlap";
    case TSL_E_PADDING: return "non-zero byte outside header, table and sections";
    case TSL_E_SECTION_CRC: return "section CRC-32 mismatch (section corrupted)";
    case TSL_E_SECTION_MISSING: return "required section (CONSTANTS, IO, METADATA) missing";
    case TSL_E_STREAM_COUNT: return "instruction count impossible for the section size";
    case TSL_E_OPCODE: return "unknown opcode";
    case TSL_E_INSTRUCTION_TRUNCATED: return "instruction cut short by the end of the stream";
    case TSL_E_FIELD_RANGE: return "instruction field outside its legal values";
    case TSL_E_PADDING_BITS: return "instruction padding bits not 0";
    case TSL_E_WRONG_ENGINE: return "instruction belongs to another engine";
    case TSL_E_TOKEN_SELF: return "WAIT / SIGNAL names its own engine";
    case TSL_E_END_MISPLACED: return "END before the end of the stream";
    case TSL_E_NO_END: return "stream does not end with END";
    case TSL_E_INSTRUCTION_COUNT: return "decoded instruction count differs from the table's";
    case TSL_E_DEADLOCK: return "deadlock: a WAIT is never signalled";
    case TSL_E_TOKENS_LEFT: return "signalled tokens never waited for";
    case TSL_E_CONSTANTS_SIZE: return "CONSTANTS shorter than its 16-byte prefix";
    case TSL_E_CONSTANTS_COUNT: return "CONSTANTS count must be 0";
    case TSL_E_CONSTANTS_RESERVED: return "CONSTANTS reserved field not 0";
    case TSL_E_CONSTANTS_ADDRESS: return "constants leave the 64-bit address space";
    case TSL_E_IO_COUNT: return "IO descriptor count exceeds the section";
    case TSL_E_IO_DIRECTION: return "IO direction not input (1) or output (2)";
    case TSL_E_IO_DTYPE: return "IO dtype unknown";
    case TSL_E_IO_SCALE_TYPE: return "IO scale_type unknown";
    case TSL_E_IO_RESERVED: return "IO reserved field not 0";
    case TSL_E_IO_RANK: return "IO rank above 8";
    case TSL_E_IO_SHAPE: return "IO shape invalid (dims, size or entries beyond rank)";
    case TSL_E_IO_NAME: return "IO name invalid (bounds, UTF-8, length or NUL)";
    case TSL_E_IO_QUANT: return "IO quantisation block invalid (alignment, count, bounds, axis)";
    case TSL_E_IO_QUANT_VALUE: return "IO scale not finite > 0 or zero point outside its dtype";
    case TSL_E_IO_NBYTES: return "IO nbytes differs from shape x itemsize";
    case TSL_E_IO_ADDRESS: return "IO tensor leaves the 64-bit address space";
    case TSL_E_IO_DUPLICATE: return "IO names not unique";
    case TSL_E_JSON_COUNT: return "METADATA / HOST_GRAPHS count must be 0";
    case TSL_E_UTF8: return "not valid UTF-8";
    case TSL_E_JSON: return "not valid JSON";
    case TSL_E_JSON_NOT_OBJECT: return "JSON top level is not an object";
    case TSL_E_JSON_DUPLICATE_KEY: return "JSON object has a duplicate key";
    case TSL_E_META_TYPE: return "metadata key has the wrong type";
    case TSL_E_META_VERSION: return "metadata_version newer than this reader";
    case TSL_E_META_SOURCE: return "metadata source.model / source.calibration invalid";
    case TSL_E_META_LAYER: return "metadata layers[] entry invalid";
    case TSL_E_META_REGIONS: return "metadata npu_regions invalid";
    case TSL_E_META_DATAFLOW: return "a value is read before any part of the program produces it";
    case TSL_E_META_HOST_KEYS: return "host graphs do not fit the NPU regions";
    case TSL_E_HOST_KEY: return "HOST_GRAPHS key is not prologue / epilogue / host_K with IR text";
    case TSL_E_HOST_PARSE: return "host graph IR text does not parse";
    case TSL_E_HOST_VERIFY: return "host graph does not verify";
    case TSL_E_HOST_OP_UNSUPPORTED: return "host op not supported by the C runtime";
    case TSL_E_HOST_TYPE: return "a value's type differs between the parts producing and reading it";
    case TSL_E_MEMORY_INDEX: return "memory index the target does not have";
    case TSL_E_MEMORY_RANGE: return "bytes outside their memory";
    case TSL_E_LIMIT: return "above a limit of this build (TSL_MAX_*)";
    case TSL_E_ARGUMENT: return "invalid argument";
    case TSL_E_ARENA: return "arena too small or not 8-byte aligned";
    case TSL_E_DRIVER: return "NPU driver failure";
    case TSL_E_NPU_TRAP: return "NPU trap";
    case TSL_E_NPU_DEADLOCK: return "NPU deadlock";
    case TSL_E_HOST_RUNTIME: return "host op failed on its data";
    }
    return "unknown status";
}
