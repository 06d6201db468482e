/* The host ops' kernels (kernels.c) and the host part runner. */
#ifndef TESSEL_KERNELS_H
#define TESSEL_KERNELS_H

#include "plan.h"

/* Run one host node; `host` is the arena's host area. */
tsl_status tsl_run_node(const tsl_model *m, const tsl_node *n, uint8_t *host);
/* Decode a constant node's data into its value (tsl_prepare). */
tsl_status tsl_place_constant(const tsl_model *m, const tsl_node *n, uint8_t *host);

#endif
