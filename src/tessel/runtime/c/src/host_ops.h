/* The IR ops as the C runtime knows them: every op name of the Graph IR (so that an unknown
 * name is a parse error, as in Python), and for the ops it has kernels for, their attributes
 * (docs/ir.md) and their shape / dtype rule, checked against each node's declared type. */
#ifndef TESSEL_HOST_OPS_H
#define TESSEL_HOST_OPS_H

#include "plan.h"

typedef enum attr_kind {
    A_INT = 1, A_FLOAT, A_BOOL, A_STR, A_INTS, A_FLOATS, A_DTYPE, A_LAYOUT, A_TENSOR
} attr_kind;

/* where a parsed attribute goes in tsl_node */
typedef enum attr_slot {
    S_I0, S_I1, S_I2, S_I3, S_F0, S_F1, S_DTYPE, S_LIST, S_FLAG, S_DATA, S_NONE
} attr_slot;

typedef struct attr_spec {
    const char *name;
    uint8_t kind;     /* attr_kind */
    uint8_t slot;     /* attr_slot */
    uint8_t required; /* 1: no default */
    double def;       /* the default (numbers and bools) */
} attr_spec;

typedef struct op_spec {
    const char *name;   /* the IR spelling */
    uint8_t op;         /* tsl_host_op, 0: a known op without a C kernel */
    uint8_t n_operands; /* fixed arity; 0xff: variadic (at least 1) */
    uint8_t n_attrs;
    const attr_spec *attrs;
} op_spec;

/* The spec of an op name (a code point span), NULL if the IR has no such op. */
const op_spec *tsl_op_lookup(tsl_str name);
/* Shape and dtype rule of a supported op: 0 if the node's declared type is what its operands
 * and attributes give (else the verifier's problem). */
int tsl_op_infer(const tsl_model *m, const tsl_node *n);
/* 0 if the C kernel handles this node's types (else the op is refused as unsupported). */
int tsl_op_kernel_ok(const tsl_model *m, const tsl_node *n);

uint8_t tsl_ir_dtype(tsl_str word);
const char *tsl_op_name(uint8_t op); /* the IR name of a supported op */ /* f32 ... bool -> tsl_dtype, 0 if none */

#endif
