/* The stack libtessel needs: loads, prepares and runs a binary through a driver that does
 * nothing (so only the library's own frames count: the loader, the planner, the host kernels),
 * on a stack painted beforehand, and prints the deepest byte touched. A host tool of
 * benchmarks/bench_c_runtime.py (GCC / Clang: noinline).
 *
 *   stack_probe model.tsl   ->   "load 1234 prepare 56 invoke 789 model 123456"  (bytes) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessel/tessel.h"
#include "tessel/tessel_npu.h"

#define PROBE (256u * 1024u)
#define PAINT 0xA5

static tsl_model model;

static __attribute__((noinline)) void paint(void) {
    volatile uint8_t buf[PROBE];
    size_t i;
    for (i = 0; i < PROBE; i++) buf[i] = PAINT;
}

/* bytes of the painted region written since paint(), counted from its top */
static __attribute__((noinline)) size_t touched(void) {
    volatile uint8_t buf[PROBE];
    size_t i = 0;
    while (i < PROBE && buf[i] == PAINT) i++;
    return PROBE - i;
}

static tsl_status ok0(void *c) { (void)c; return TSL_OK; }
static tsl_status ok_map(void *c, uint32_t m, uint64_t b, void *h, uint64_t s, int w) {
    (void)c; (void)m; (void)b; (void)h; (void)s; (void)w; return TSL_OK;
}
static tsl_status ok_submit(void *c, tsl_engine e, const uint8_t *p, size_t n, uint32_t f, uint32_t k) {
    (void)c; (void)e; (void)p; (void)n; (void)f; (void)k; return TSL_OK;
}
static tsl_status ok_wait(void *c, tsl_error *e) { (void)c; (void)e; return TSL_OK; }
static const tsl_driver idle = {ok0, ok_map, ok_submit, ok0, ok_wait};

int main(int argc, char **argv) {
    FILE *f;
    long n;
    uint8_t *bin, *arena;
    size_t s_load, s_prep, s_inv;
    tsl_error e;
    if (argc != 2 || !(f = fopen(argv[1], "rb"))) { fprintf(stderr, "usage: stack_probe model.tsl\n"); return 2; }
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    bin = (uint8_t *)malloc((size_t)n);
    if (!bin || fread(bin, 1, (size_t)n, f) != (size_t)n) return 2;
    fclose(f);
    paint();
    if (tsl_load(&model, bin, (size_t)n, NULL, &e) != TSL_OK) { fprintf(stderr, "load failed %d\n", e.code); return 1; }
    s_load = touched();
    arena = (uint8_t *)calloc((size_t)tsl_arena_size(&model) + 8, 1);
    paint();
    if (tsl_prepare(&model, arena, (size_t)tsl_arena_size(&model), &e) != TSL_OK) return 1;
    s_prep = touched();
    paint();
    if (tsl_invoke(&model, arena, (size_t)tsl_arena_size(&model), &idle, NULL, &e) != TSL_OK) {
        fprintf(stderr, "invoke failed %d\n", e.code);
        return 1;
    }
    s_inv = touched();
    printf("load %lu prepare %lu invoke %lu model %lu\n", (unsigned long)s_load,
           (unsigned long)s_prep, (unsigned long)s_inv, (unsigned long)sizeof(tsl_model));
    free(arena);
    free(bin);
    return 0;
}
