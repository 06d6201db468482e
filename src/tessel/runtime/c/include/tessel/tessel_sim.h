/*
 * The C model of the Tessel NPU: the instruction set of docs/isa.md (semantics, static rules,
 * traps) behind the driver interface of tessel/tessel_npu.h, so that libtessel runs a binary
 * end to end on a host. Written from docs/isa.md; bit-exact with the Python simulator (tests).
 *
 *   tsl_sim sim;
 *   tsl_sim_config cfg = {sram_bytes, acc_entries, lut_entries, n_offchip, {sizes...}, wdecoder, sparse};
 *   void *mem = malloc(tsl_sim_memory_size(&cfg));   // the model's SRAM, accumulator, LUT, scratch
 *   tsl_sim_init(&sim, &cfg, mem, tsl_sim_memory_size(&cfg));
 *   tsl_invoke(&model, arena, arena_size, &tsl_sim_driver, &sim, &err);
 *
 * Like the runtime, the model allocates nothing: its memories are the block given to init.
 */
#ifndef TESSEL_TESSEL_SIM_H
#define TESSEL_TESSEL_SIM_H

#include "tessel/tessel_npu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tsl_sim_config {
    uint32_t sram_bytes;      /* onchip.sram_bytes */
    uint32_t acc_entries;     /* onchip.acc_bytes / 4 */
    uint32_t lut_entries;     /* onchip.lut_entries */
    uint32_t offchip_count;   /* len(offchip) */
    uint64_t offchip_size[TSL_MEMORIES];
    uint32_t wdecoder;        /* wdecoder.enabled: DMA_LOAD_W runs (else it traps) */
    uint32_t sparse;          /* sparse.enabled: CONV reads 2:4 sparse weights (else it traps) */
} tsl_sim_config;

typedef struct tsl_sim_queue {
    const uint8_t *cmds;      /* the submitted instructions */
    size_t nbytes, at;        /* their bytes, and the offset of the next one */
    uint32_t first, pc, end;  /* instruction indices: first submitted, next, one past the last */
} tsl_sim_queue;

typedef struct tsl_sim_memory {
    uint64_t base, size;
    uint8_t *host;
    int mapped, writable;
} tsl_sim_memory;

typedef struct tsl_sim {
    tsl_sim_config cfg;
    uint8_t *sram;
    int32_t *acc;
    int16_t *lut;
    uint8_t *scratch;         /* 4 x sram_bytes: outputs gathered before they are written */
    uint64_t scratch_size;
    tsl_sim_memory mem[TSL_MEMORIES];
    tsl_sim_queue queue[TSL_ENGINES];
    uint8_t sem[TSL_ENGINES][TSL_ENGINES][16];
    uint64_t executed;        /* instructions executed since init */
    uint64_t macs;            /* multiply-accumulates of CONV, MATMUL, DWCONV since init */
    uint64_t work;            /* elements and MACs processed since init (docs/isa.md §5 work) */
    uint64_t budget;          /* 0: none; else an instruction that would take the work past it
                                 traps (a bound for fuzzing hostile programs) */
    const char *trap;         /* why the last trap happened (static text) */
} tsl_sim;

/* Bytes of memory the model needs (SRAM, accumulator, LUT memory, scratch), 16-byte aligned. */
size_t tsl_sim_memory_size(const tsl_sim_config *cfg);
tsl_status tsl_sim_init(tsl_sim *sim, const tsl_sim_config *cfg, void *memory, size_t size);

/* The driver whose context is a tsl_sim. */
extern const tsl_driver tsl_sim_driver;

#ifdef __cplusplus
}
#endif
#endif
