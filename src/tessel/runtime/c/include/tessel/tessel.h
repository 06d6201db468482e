/*
 * libtessel: the C99 runtime of Tessel binaries (.tsl) for firmware.
 *
 *   tsl_model m;                                   // statically allocated, ~sizeof(tsl_model)
 *   tsl_error e;
 *   if (tsl_load(&m, tsl_binary, tsl_binary_len, NULL, &e) != TSL_OK) ...
 *   size_t need = tsl_arena_size(&m);              // known right after load
 *   tsl_prepare(&m, arena, need, &e);              // places the constants (once)
 *   memcpy(tsl_input_data(&m, arena, 0), x, tsl_input(&m, 0)->nbytes);
 *   tsl_invoke(&m, arena, need, &driver, driver_ctx, &e);
 *   y = tsl_output_data(&m, arena, 0);
 *
 * `tsl_load` validates every rule of docs/binary-format.md (one error code per rule, see
 * tsl_status) and never reads a byte it has not bounds-checked. The core never allocates
 * memory and never calls stdio: the model's tables live in `tsl_model` (fixed limits below,
 * each a macro a build may raise), tensors and host-op values live in the caller's arena,
 * and the NPU is reached only through `tsl_driver` (tessel/tessel_npu.h). docs/runtime.md
 * describes the API, the driver interface, memory, errors and porting.
 */
#ifndef TESSEL_TESSEL_H
#define TESSEL_TESSEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TSL_VERSION_MAJOR 1 /* the .tsl format major version this runtime reads */

/* ---- limits of one build (raise them with -D when a model needs more) ------------------- */
#ifndef TSL_MAX_DESCRIPTORS
#define TSL_MAX_DESCRIPTORS 32 /* NPU input + output descriptors (IO section) */
#endif
#ifndef TSL_MAX_REGIONS
#define TSL_MAX_REGIONS 8 /* NPU regions (metadata.npu_regions) */
#endif
#ifndef TSL_MAX_REGION_IO
#define TSL_MAX_REGION_IO 64 /* names listed by all regions' inputs and outputs */
#endif
#ifndef TSL_MAX_MODEL_IO
#define TSL_MAX_MODEL_IO 16 /* model inputs, and model outputs */
#endif
#ifndef TSL_MAX_HOST_NODES
#define TSL_MAX_HOST_NODES 64 /* nodes of all host graphs together */
#endif
#ifndef TSL_MAX_VALUES
#define TSL_MAX_VALUES 160 /* named values: model inputs, region outputs, host values */
#endif
#ifndef TSL_MAX_OPERANDS
#define TSL_MAX_OPERANDS 192 /* operands of all host nodes together */
#endif
#ifndef TSL_JSON_MAX_DEPTH
#define TSL_JSON_MAX_DEPTH 32 /* JSON nesting the reader parses (deeper: TSL_E_LIMIT) */
#endif
#ifndef TSL_JSON_MAX_KEYS
#define TSL_JSON_MAX_KEYS 256 /* keys of the open JSON objects checked for duplicates */
#endif

#define TSL_ENGINES 4    /* DMA_IN, MATRIX, VECTOR, DMA_OUT */
#define TSL_MEMORIES 8   /* off-chip memory indices a DMA instruction can name (3 bits) */
#define TSL_MAX_RANK 8
#define TSL_HOST_PARTS (TSL_MAX_REGIONS + 1)

/* ---- status codes: one per rule of docs/binary-format.md, then run-time conditions ------- */
typedef enum tsl_status {
    TSL_OK = 0,
    /* header (binary-format.md §3, §10 steps 1-6) */
    TSL_E_TRUNCATED = 1,      /* the file is shorter than the 80-byte header */
    TSL_E_MAGIC,              /* magic is not "TSL\0" */
    TSL_E_VERSION,            /* version_major is not 1 */
    TSL_E_HEADER_CRC,         /* header_crc32 does not match bytes [0, 76) */
    TSL_E_ARCH_HASH,          /* arch_hash is not the expected target's */
    TSL_E_FLAGS,              /* header flags are not 0 */
    TSL_E_HEADER_SIZE,        /* header_size is not 80 */
    TSL_E_FILE_SIZE,          /* file_size is not the file's length */
    TSL_E_TABLE_OFFSET,       /* table_offset is not 80 */
    TSL_E_SECTION_COUNT,      /* section_count > 64 */
    TSL_E_RESERVED,           /* a reserved header field is not 0 */
    TSL_E_TABLE_BOUNDS,       /* the section table ends past the file */
    TSL_E_TABLE_CRC,          /* table_crc32 does not match the table */
    /* section table (§4, §5, §10 steps 7-10) */
    TSL_E_SECTION_KIND = 20,  /* unknown kind below 0x8000 */
    TSL_E_SECTION_FLAGS,      /* an entry's flags are not 0 */
    TSL_E_SECTION_ALIGNMENT,  /* alignment is not a power of two in [1, 4096] */
    TSL_E_SECTION_MISALIGNED, /* offset is not a multiple of alignment */
    TSL_E_SECTION_OFFSET,     /* offset outside [table end, file_size] */
    TSL_E_SECTION_SIZE,       /* the section ends past the file */
    TSL_E_SECTION_DUPLICATE,  /* a kind appears twice */
    TSL_E_SECTION_OVERLAP,    /* two sections overlap */
    TSL_E_PADDING,            /* a byte outside header, table and sections is not 0 */
    TSL_E_SECTION_CRC,        /* a section's crc32 does not match its data */
    TSL_E_SECTION_MISSING,    /* CONSTANTS, IO or METADATA is missing */
    /* instruction sections (§6.1; isa.md §1, §2) */
    TSL_E_STREAM_COUNT = 40,  /* count is 0 or larger than the section's size */
    TSL_E_OPCODE,             /* unknown opcode */
    TSL_E_INSTRUCTION_TRUNCATED, /* the last instruction is cut short */
    TSL_E_FIELD_RANGE,        /* a field value outside its legal values */
    TSL_E_PADDING_BITS,       /* an instruction's padding bits are not 0 */
    TSL_E_WRONG_ENGINE,       /* an instruction of another engine's queue */
    TSL_E_TOKEN_SELF,         /* WAIT / SIGNAL names its own engine */
    TSL_E_END_MISPLACED,      /* END before the last instruction */
    TSL_E_NO_END,             /* the stream does not end with END */
    TSL_E_INSTRUCTION_COUNT,  /* decoded instructions differ from the table's count */
    TSL_E_DEADLOCK,           /* the token check: an engine blocks forever */
    TSL_E_TOKENS_LEFT,        /* the token check: signalled tokens never waited for */
    /* CONSTANTS (§6.2) */
    TSL_E_CONSTANTS_SIZE = 60, /* shorter than its 16-byte placement prefix */
    TSL_E_CONSTANTS_COUNT,    /* count is not 0 */
    TSL_E_CONSTANTS_RESERVED, /* reserved prefix field is not 0 */
    TSL_E_CONSTANTS_ADDRESS,  /* address + size leaves the 64-bit address space */
    /* IO (§6.3) */
    TSL_E_IO_COUNT = 70,      /* count * 80 exceeds the section */
    TSL_E_IO_DIRECTION,       /* direction is not 1 or 2 */
    TSL_E_IO_DTYPE,           /* dtype is not 1..6 */
    TSL_E_IO_SCALE_TYPE,      /* scale_type is not 0..2 */
    TSL_E_IO_RESERVED,        /* a reserved descriptor field is not 0 */
    TSL_E_IO_RANK,            /* rank > 8 */
    TSL_E_IO_SHAPE,           /* shape beyond rank not 0, a dim outside [1, 2^32-1], > 2^40 bytes */
    TSL_E_IO_NAME,            /* name outside the heap, not UTF-8, empty, > 1024 bytes or has NUL */
    TSL_E_IO_QUANT,           /* quantisation block: unaligned, count, bounds, axis */
    TSL_E_IO_QUANT_VALUE,     /* a scale not finite > 0, a zero point outside the dtype, float dtype quantised */
    TSL_E_IO_NBYTES,          /* nbytes is not product(shape) * itemsize */
    TSL_E_IO_ADDRESS,         /* address + nbytes leaves the 64-bit space */
    TSL_E_IO_DUPLICATE,       /* two descriptors share a name */
    /* METADATA and HOST_GRAPHS JSON (§6.4, §6.5) */
    TSL_E_JSON_COUNT = 90,    /* METADATA / HOST_GRAPHS count is not 0 */
    TSL_E_UTF8,               /* not valid UTF-8 */
    TSL_E_JSON,               /* not valid JSON (syntax, NaN / Infinity, a number overflowing a float) */
    TSL_E_JSON_NOT_OBJECT,    /* the top level is not an object */
    TSL_E_JSON_DUPLICATE_KEY, /* an object has a duplicate key */
    /* metadata schema (§6.4.1, §6.6) */
    TSL_E_META_TYPE = 100,    /* a key has the wrong type */
    TSL_E_META_VERSION,       /* metadata_version is newer than this reader */
    TSL_E_META_SOURCE,        /* source.model / source.calibration */
    TSL_E_META_LAYER,         /* a layers[] entry */
    TSL_E_META_REGIONS,       /* npu_regions */
    TSL_E_META_DATAFLOW,      /* a value read before any part produces it, duplicate model inputs */
    TSL_E_META_HOST_KEYS,     /* host graphs that do not fit the regions */
    /* host graphs (§6.5) */
    TSL_E_HOST_KEY = 110,     /* a HOST_GRAPHS key is not prologue / epilogue / host_K, or not text */
    TSL_E_HOST_PARSE,         /* the IR text does not parse (docs/ir.md) */
    TSL_E_HOST_VERIFY,        /* the graph does not verify (types, attributes, SSA) */
    TSL_E_HOST_OP_UNSUPPORTED, /* a host op this runtime has no kernel for (err.name names it) */
    TSL_E_HOST_TYPE,          /* a value's type differs between the part producing and the part reading it */
    /* target (§7) */
    TSL_E_MEMORY_INDEX = 120, /* a memory index the target does not have */
    TSL_E_MEMORY_RANGE,       /* bytes outside their memory */
    /* this build's limits */
    TSL_E_LIMIT = 130,        /* a count above a TSL_MAX_* limit of this build (err.index: which) */
    /* run time */
    TSL_E_ARGUMENT = 140,     /* a NULL pointer or an index out of range */
    TSL_E_ARENA,              /* the arena is smaller than tsl_arena_size() or not 8-byte aligned */
    TSL_E_DRIVER,             /* the NPU driver reported a failure */
    TSL_E_NPU_TRAP,           /* the NPU trapped (static rule or data-dependent trap) */
    TSL_E_NPU_DEADLOCK,       /* the NPU's engines wait for each other */
    TSL_E_HOST_RUNTIME        /* a host op failed on its data (an embedding index out of range) */
} tsl_status;

/* ---- tensors ------------------------------------------------------------------------------ */
typedef enum tsl_dtype {
    TSL_INT8 = 1, TSL_UINT8 = 2, TSL_INT16 = 3, TSL_INT32 = 4, TSL_FLOAT16 = 5, TSL_FLOAT32 = 6,
    TSL_INT64 = 7, TSL_BOOL = 8 /* host-graph types only (no .tsl descriptor has them) */
} tsl_dtype;

/* A string inside the binary: `json` != 0 when it is the body of a JSON string (escapes not
 * decoded; tsl_str_copy decodes it), else raw UTF-8. Never NUL-terminated. */
typedef struct tsl_str {
    const uint8_t *ptr;
    uint32_t len;
    uint8_t json;
} tsl_str;

/* A model input or output. */
typedef struct tsl_tensor_info {
    tsl_str name;
    tsl_dtype dtype;
    uint8_t rank;
    uint32_t shape[TSL_MAX_RANK];
    uint64_t nbytes;
    uint8_t quantised;      /* per-tensor quantised: real = scale * (q - zero_point) */
    double scale;
    int64_t zero_point;
} tsl_tensor_info;

/* Where a load or run failed: the code (the rule), and what the binary says about where. */
typedef struct tsl_error {
    tsl_status code;
    uint64_t offset;   /* byte offset in the file of the faulty field, or UINT64_MAX */
    int32_t section;   /* section table index, or -1 */
    int32_t index;     /* instruction / descriptor / node / region / limit index, or -1 */
    int32_t engine;    /* engine (0..3) for instruction errors and NPU traps, or -1 */
    tsl_str name;      /* a name from the binary (an op, a key, a tensor), or empty */
} tsl_error;

/* The target the binary must be built for (optional at load). */
typedef struct tsl_target {
    const uint8_t *arch_hash;          /* 32 bytes, or NULL: not checked */
    uint32_t memory_count;             /* off-chip memories, 0: placements not checked */
    uint64_t memory_size[TSL_MEMORIES];
} tsl_target;

/* ---- the loaded model: fixed-size tables; fields below are private ------------------------ */
typedef struct tsl_desc {
    tsl_str name;
    uint8_t output;        /* 0 input, 1 output */
    uint8_t dtype, rank, scale_type;
    int8_t axis;
    uint32_t memory;
    uint64_t address, nbytes;
    uint32_t shape[TSL_MAX_RANK];
    uint32_t quant_count;
    const uint8_t *quant;  /* quant_count scales (f32 / f64) then quant_count int32 zero points */
} tsl_desc;

typedef struct tsl_region {
    uint32_t end[TSL_ENGINES];      /* one past the region's last instruction, per engine */
    size_t end_byte[TSL_ENGINES];   /* the byte offset of that instruction in the stream */
    uint16_t in_first, in_count, out_first, out_count; /* into region_io (descriptor indices) */
} tsl_region;

typedef struct tsl_value {
    tsl_str name;
    uint8_t kind;          /* tsl_value_kind (host/plan.h) */
    uint8_t dtype, rank, quantised;
    uint32_t shape[TSL_MAX_RANK];
    uint64_t nbytes;
    uint64_t offset;       /* in the arena's host area */
    double scale;
    int64_t zero_point;
    int16_t source;        /* a graph input: the value it reads; a region output: its descriptor */
    int16_t part;          /* the host part of a graph input or node value (-1 otherwise) */
    int16_t node;          /* the host node defining it, -1 otherwise */
    int16_t step;          /* the step defining it: host part k = 2k, region k = 2k + 1 */
    int16_t last_use;      /* the last step reading it */
} tsl_value;

typedef struct tsl_node {
    uint8_t op;            /* tsl_host_op (host/ops.h) */
    uint8_t n_in;
    uint8_t dtype;         /* a dtype attribute (quantize, cast) */
    uint8_t list_len;
    uint8_t flag;          /* keepdim / a constant's encoding */
    uint16_t in_first;     /* into operands[] */
    uint16_t out;          /* the value it defines */
    int64_t i[4];          /* integer attributes, by op */
    double f[2];           /* float attributes, by op */
    int64_t list[TSL_MAX_RANK]; /* shape / perm / axes */
    const uint8_t *data;   /* constant: inline list or base64 text (in the binary) */
    uint32_t data_len;
    uint8_t data_json;     /* the text is inside a JSON string (escapes) */
} tsl_node;

typedef struct tsl_part {
    uint16_t node_first, node_count;
    uint8_t present;
} tsl_part;

typedef struct tsl_window {  /* one off-chip memory as the program uses it */
    uint64_t lo, hi;         /* NPU addresses [lo, hi) the program touches */
    uint64_t arena_offset;   /* where [lo, hi) lives in the arena, unless in_binary */
    uint8_t used, in_binary; /* in_binary: only the constants, read in place from the binary */
} tsl_window;

typedef struct tsl_model {
    const uint8_t *data;
    size_t size;
    uint8_t arch_hash[32];
    const uint8_t *stream[TSL_ENGINES];
    size_t stream_size[TSL_ENGINES];
    uint32_t stream_count[TSL_ENGINES];
    const uint8_t *constants;
    uint64_t constants_size, constants_address;
    uint32_t constants_memory;
    uint8_t constants_writable;      /* the program may overwrite its constants: re-placed per run */
    uint32_t n_desc, n_inputs_desc;
    tsl_desc desc[TSL_MAX_DESCRIPTORS];
    uint32_t n_regions;
    tsl_region region[TSL_MAX_REGIONS];
    uint16_t region_io[TSL_MAX_REGION_IO];
    uint32_t n_region_io;
    tsl_part part[TSL_HOST_PARTS];   /* host part k runs before region k (the last: epilogue) */
    uint32_t n_nodes, n_values, n_operands;
    tsl_node node[TSL_MAX_HOST_NODES];
    tsl_value value[TSL_MAX_VALUES];
    uint16_t operand[TSL_MAX_OPERANDS];
    uint16_t region_in_value[TSL_MAX_REGION_IO]; /* per region input: the value it reads */
    uint16_t region_out_value[TSL_MAX_REGION_IO];/* per region output: the value it defines */
    uint32_t n_model_in, n_model_out;
    uint16_t model_in[TSL_MAX_MODEL_IO], model_out[TSL_MAX_MODEL_IO]; /* value indices */
    tsl_tensor_info in_info[TSL_MAX_MODEL_IO], out_info[TSL_MAX_MODEL_IO];
    tsl_window window[TSL_MEMORIES];
    uint64_t host_offset, host_size; /* the host area of the arena */
    uint64_t arena_size;
} tsl_model;

/* ---- API ------------------------------------------------------------------------------------ */

/* Validate `data` (the whole .tsl file, which must stay readable while the model is used) and
 * fill `m`. `target` may be NULL. On failure returns the code and fills `err` (may be NULL). */
tsl_status tsl_load(tsl_model *m, const uint8_t *data, size_t size, const tsl_target *target,
                    tsl_error *err);

/* Bytes of arena one inference needs (8-byte aligned start): NPU memories + host values. */
uint64_t tsl_arena_size(const tsl_model *m);

uint32_t tsl_input_count(const tsl_model *m);
uint32_t tsl_output_count(const tsl_model *m);
const tsl_tensor_info *tsl_input(const tsl_model *m, uint32_t i);   /* NULL if out of range */
const tsl_tensor_info *tsl_output(const tsl_model *m, uint32_t i);
/* Where input i / output i lives in `arena` (write inputs before tsl_invoke, read outputs after). */
void *tsl_input_data(const tsl_model *m, uint8_t *arena, uint32_t i);
void *tsl_output_data(const tsl_model *m, uint8_t *arena, uint32_t i);

/* Where the NPU constants live: memory index, NPU address, size, and whether they stay in the
 * binary (1: the driver maps the binary's bytes; 0: tsl_prepare copies them into the arena). */
void tsl_constants_placement(const tsl_model *m, uint32_t *memory, uint64_t *address,
                             uint64_t *size, int *in_binary);

/* Copy the constants (NPU and host) into the arena; once before the first tsl_invoke. */
tsl_status tsl_prepare(const tsl_model *m, uint8_t *arena, size_t arena_size, tsl_error *err);

struct tsl_driver;
/* Run one inference: host parts and NPU regions in order, the NPU through `drv`. */
tsl_status tsl_invoke(const tsl_model *m, uint8_t *arena, size_t arena_size,
                      const struct tsl_driver *drv, void *drv_ctx, tsl_error *err);

/* A short description of a status code (static text). */
const char *tsl_status_text(tsl_status code);

/* Decode `s` (JSON escapes, if any) into `buf` as UTF-8 with a NUL; returns its length or -1 if
 * `cap` is too small. */
int tsl_str_copy(tsl_str s, char *buf, size_t cap);

/* Bytes of an element of `dtype` (0 for an unknown value). */
uint32_t tsl_dtype_size(tsl_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
