/* The host-side wrapper the Python package loads (ctypes): one handle holding a loaded model,
 * the C NPU model and the arena, allocated with malloc (this file is not part of the firmware
 * library). Used by `tessel run --engine c`, the tests and the fuzz harness. */
#include <stdlib.h>
#include <string.h>

#include "tessel/tessel.h"
#include "tessel/tessel_sim.h"

#ifndef TSL_SOURCE_HASH
#define TSL_SOURCE_HASH "unknown"
#endif

typedef struct tslh {
    tsl_model model;
    tsl_sim sim;
    void *sim_memory; /* malloc'd; the model's block is its first 16-byte aligned address */
    uint8_t *arena;
    size_t arena_size;
    uint8_t *binary; /* a copy: the model points into it */
    size_t binary_len;
} tslh;

const char *tslh_source_hash(void) { return TSL_SOURCE_HASH; }
size_t tslh_model_size(void) { return sizeof(tsl_model); }
const char *tslh_status_text(int code) { return tsl_status_text((tsl_status)code); }

int tslh_error_name(const tsl_error *e, char *buf, size_t cap) {
    if (!e || !e->name.ptr) { if (cap) buf[0] = 0; return 0; }
    return tsl_str_copy(e->name, buf, cap);
}

/* Validate a binary without running it; *arena_size on success. */
int tslh_check(const uint8_t *bin, size_t len, const tsl_target *target, tsl_error *err,
               uint64_t *arena_size) {
    tsl_model *m = (tsl_model *)malloc(sizeof(tsl_model));
    tsl_status st;
    if (!m) return TSL_E_ARGUMENT;
    st = tsl_load(m, bin, len, target, err);
    if (st == TSL_OK && arena_size) *arena_size = tsl_arena_size(m);
    free(m);
    return st;
}

void tslh_close(tslh *h) {
    if (!h) return;
    free(h->sim_memory);
    free(h->arena);
    free(h->binary);
    free(h);
}

/* A failed open frees its copy of the binary; an error name pointing into the copy (a section
 * key, an op name of a host graph) is pointed at the same bytes of the caller's `bin`, which
 * the caller holds while it reads the error. */
static tslh *open_failed(tslh *h, const uint8_t *bin, tsl_error *err) {
    if (err && err->name.ptr && h->binary) {
        uintptr_t at = (uintptr_t)err->name.ptr, lo = (uintptr_t)h->binary;
        if (at >= lo && at - lo < h->binary_len) err->name.ptr = bin + (at - lo);
    }
    tslh_close(h);
    return NULL;
}

tslh *tslh_open(const uint8_t *bin, size_t len, const tsl_target *target,
                const tsl_sim_config *cfg, tsl_error *err, int *status) {
    tslh *h = (tslh *)calloc(1, sizeof(tslh));
    size_t simsize;
    tsl_status st;
    *status = TSL_E_ARGUMENT;
    if (!h) return NULL;
    h->binary = (uint8_t *)malloc(len ? len : 1);
    if (!h->binary) { tslh_close(h); return NULL; }
    memcpy(h->binary, bin, len);
    h->binary_len = len;
    st = tsl_load(&h->model, h->binary, len, target, err);
    if (st != TSL_OK) { *status = st; return open_failed(h, bin, err); }
    h->arena_size = (size_t)tsl_arena_size(&h->model);
    if ((uint64_t)h->arena_size != tsl_arena_size(&h->model)) { *status = TSL_E_ARENA; return open_failed(h, bin, err); }
    h->arena = (uint8_t *)calloc(h->arena_size ? h->arena_size : 8, 1);
    simsize = tsl_sim_memory_size(cfg);
    h->sim_memory = malloc(simsize + 16);
    if (!h->arena || !h->sim_memory) { *status = TSL_E_ARENA; return open_failed(h, bin, err); }
    if ((st = tsl_sim_init(&h->sim, cfg, (void *)(((uintptr_t)h->sim_memory + 15) & ~(uintptr_t)15),
                           simsize)) != TSL_OK ||
        (st = tsl_prepare(&h->model, h->arena, h->arena_size, err)) != TSL_OK) {
        *status = st;
        return open_failed(h, bin, err);
    }
    *status = TSL_OK;
    return h;
}

uint32_t tslh_count(const tslh *h, int output) {
    return output ? tsl_output_count(&h->model) : tsl_input_count(&h->model);
}

/* name (decoded, NUL-terminated), dtype, rank, shape[8]; quantised, scale, zero point */
int tslh_info(const tslh *h, int output, uint32_t i, char *name, size_t cap, int *dtype,
              int *rank, uint32_t *shape, int *quantised, double *scale, int64_t *zp) {
    const tsl_tensor_info *t = output ? tsl_output(&h->model, i) : tsl_input(&h->model, i);
    int k;
    if (!t) return -1;
    if (tsl_str_copy(t->name, name, cap) < 0) return -1;
    *dtype = t->dtype;
    *rank = t->rank;
    for (k = 0; k < TSL_MAX_RANK; k++) shape[k] = t->shape[k];
    *quantised = t->quantised;
    *scale = t->scale;
    *zp = t->zero_point;
    return 0;
}

void *tslh_data(tslh *h, int output, uint32_t i) {
    return output ? tsl_output_data(&h->model, h->arena, i) : tsl_input_data(&h->model, h->arena, i);
}

uint64_t tslh_nbytes(const tslh *h, int output, uint32_t i) {
    const tsl_tensor_info *t = output ? tsl_output(&h->model, i) : tsl_input(&h->model, i);
    return t ? t->nbytes : 0;
}

int tslh_invoke(tslh *h, tsl_error *err) {
    return tsl_invoke(&h->model, h->arena, h->arena_size, &tsl_sim_driver, &h->sim, err);
}

const char *tslh_trap(const tslh *h) { return h->sim.trap ? h->sim.trap : ""; }
uint64_t tslh_arena_size(const tslh *h) { return h->arena_size; }
uint64_t tslh_executed(const tslh *h) { return h->sim.executed; }
uint64_t tslh_macs(const tslh *h) { return h->sim.macs; }

void tslh_constants(const tslh *h, uint32_t *memory, uint64_t *address, uint64_t *size, int *in_binary) {
    tsl_constants_placement(&h->model, memory, address, size, in_binary);
}

/* Run one engine's queue on the C NPU model over the given memories (the ISA tests): SRAM,
 * accumulator (bytes), LUT memory (bytes) and off-chip memory 0 [0, ext_size) are copied in
 * and back out. Returns the status; *trap_index is the failing instruction (or -1). */
int tslh_sim_run(const tsl_sim_config *cfg, int engine, const uint8_t *cmds, size_t nbytes,
                 uint32_t count, uint8_t *sram, uint8_t *acc, uint8_t *lut, uint8_t *ext,
                 uint64_t ext_size, int32_t *trap_index, const char **trap) {
    tsl_sim *s = (tsl_sim *)calloc(1, sizeof(tsl_sim));
    size_t size = tsl_sim_memory_size(cfg);
    void *raw = malloc(size + 16);
    tsl_error err;
    tsl_status st;
    *trap_index = -1;
    *trap = "";
    if (!s || !raw) { free(s); free(raw); return TSL_E_ARGUMENT; }
    st = tsl_sim_init(s, cfg, (void *)(((uintptr_t)raw + 15) & ~(uintptr_t)15), size);
    if (st == TSL_OK) {
        tsl_sim_driver.reset(s);
        memcpy(s->sram, sram, cfg->sram_bytes);
        memcpy(s->acc, acc, (size_t)cfg->acc_entries * 4);
        memcpy(s->lut, lut, (size_t)cfg->lut_entries * 2);
        tsl_sim_driver.map_memory(s, 0, 0, ext, ext_size, 1);
        tsl_sim_driver.submit(s, (tsl_engine)engine, cmds, nbytes, 0, count);
        tsl_sim_driver.start(s);
        st = tsl_sim_driver.wait(s, &err);
        if (st != TSL_OK) {
            *trap_index = err.index;
            *trap = s->trap ? s->trap : "";
        }
        memcpy(sram, s->sram, cfg->sram_bytes);
        memcpy(acc, s->acc, (size_t)cfg->acc_entries * 4);
        memcpy(lut, s->lut, (size_t)cfg->lut_entries * 2);
    }
    free(raw);
    free(s);
    return st;
}
