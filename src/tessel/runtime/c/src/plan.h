/* Values, host ops and steps shared by the host-graph reader, the planner and the executor. */
#ifndef TESSEL_PLAN_H
#define TESSEL_PLAN_H

#include "internal.h"

/* what defines a value */
typedef enum tsl_value_kind {
    TSL_V_MODEL_INPUT = 1,   /* written by the caller before tsl_invoke */
    TSL_V_REGION_OUTPUT = 2, /* read back from an NPU output descriptor after its region */
    TSL_V_GRAPH_INPUT = 3,   /* a host graph's input: the same bytes as the value it reads */
    TSL_V_NODE = 4           /* computed by a host node (a constant: placed by tsl_prepare) */
} tsl_value_kind;

#define TSL_STEP_END 0x7fff /* model outputs live to the end of the run */

/* the host ops this runtime has kernels for (the IR names of docs/ir.md) */
typedef enum tsl_host_op {
    TSL_H_CONSTANT = 1,
    TSL_H_QUANTIZE, TSL_H_DEQUANTIZE, TSL_H_CAST,
    TSL_H_RESHAPE, TSL_H_EXPAND, TSL_H_TRANSPOSE, TSL_H_SLICE, TSL_H_CONCAT,
    TSL_H_ADD, TSL_H_SUB, TSL_H_MUL, TSL_H_DIV, TSL_H_MAXIMUM, TSL_H_MINIMUM,
    TSL_H_RELU, TSL_H_CLAMP, TSL_H_NEG, TSL_H_ABS, TSL_H_SQRT,
    TSL_H_SUM, TSL_H_MEAN,
    TSL_H_EMBEDDING,
    TSL_H_REQUANTIZE, TSL_H_QADD, TSL_H_QSUB, TSL_H_QMUL, TSL_H_LUT,
    TSL_H_COUNT
} tsl_host_op;

/* constants' encodings (tsl_node.flag) */
#define TSL_CONST_INLINE 1
#define TSL_CONST_BASE64 2

#endif
