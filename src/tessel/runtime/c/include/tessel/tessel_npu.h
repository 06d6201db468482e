/*
 * The NPU driver interface of libtessel: everything the runtime asks of the hardware.
 *
 * For each NPU region of a program, tsl_invoke maps the off-chip memories (the arena, or the
 * binary for constants that stay in flash), submits each engine's slice of its command stream
 * (the instructions exactly as encoded in the .tsl file, docs/isa.md §2), starts the engines
 * (and their DMA) and waits for them to finish. The NPU keeps its program counters' view and
 * its token counts from one region to the next within one inference; `reset` starts a new one.
 *
 * A port to a real SoC implements these five functions over the NPU's registers; the C NPU
 * model (tessel/tessel_sim.h) implements them in software. docs/runtime.md, "Porting".
 */
#ifndef TESSEL_TESSEL_NPU_H
#define TESSEL_TESSEL_NPU_H

#include "tessel/tessel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tsl_engine {
    TSL_ENGINE_DMA_IN = 0, TSL_ENGINE_MATRIX = 1, TSL_ENGINE_VECTOR = 2, TSL_ENGINE_DMA_OUT = 3
} tsl_engine;

typedef struct tsl_driver {
    /* A new inference: the NPU is idle; clear its token counts (the C model also clears its
     * SRAM, accumulator and LUT memory, the simulator's power-up state). */
    tsl_status (*reset)(void *ctx);
    /* Off-chip memory `mem`: NPU byte addresses [base, base + size) are the host bytes at
     * `host` (`writable` 0: the program only reads them, e.g. constants in flash). */
    tsl_status (*map_memory)(void *ctx, uint32_t mem, uint64_t base, void *host, uint64_t size,
                             int writable);
    /* Queue `count` instructions of `engine` (its instructions `first` .. first+count-1),
     * `nbytes` bytes at `cmds`; called once per engine with work in the region. */
    tsl_status (*submit)(void *ctx, tsl_engine engine, const uint8_t *cmds, size_t nbytes,
                         uint32_t first, uint32_t count);
    /* Start every queued stream; the DMA engines start with them. */
    tsl_status (*start)(void *ctx);
    /* Block until every started stream has executed its last queued instruction. On a trap
     * or a deadlock, returns TSL_E_NPU_TRAP / TSL_E_NPU_DEADLOCK and fills `err` (engine,
     * instruction index). */
    tsl_status (*wait)(void *ctx, tsl_error *err);
} tsl_driver;

#ifdef __cplusplus
}
#endif
#endif
