/* The tokens of the Graph IR text (docs/ir.md) read from a host graph, which sits in a JSON
 * string of the HOST_GRAPHS section: the cursor decodes the JSON escapes as it goes, so the
 * grammar sees the text Python's parser sees. */
#ifndef TESSEL_IR_LEX_H
#define TESSEL_IR_LEX_H

#include "internal.h"

typedef struct ir_cur {
    const uint8_t *p, *end; /* raw (JSON-escaped) text */
} ir_cur;

typedef struct ir_num {
    int is_float;
    int64_t i;
    double f;
} ir_num;

/* token outcomes: 0 ok, else a tsl_status (HOST_PARSE or LIMIT) */
int32_t ir_peek(const ir_cur *c);        /* next code point, -1 at the end */
void ir_adv(ir_cur *c);                  /* past one code point */
void ir_skip(ir_cur *c);                 /* blanks and // comments */
int ir_starts(const ir_cur *c, const char *s);  /* the text at c starts with ASCII s */
int ir_accept(ir_cur *c, const char *s); /* skip, then s if there */
int ir_ident(ir_cur *c, tsl_str *out);   /* [A-Za-z_][A-Za-z0-9_.]* after skip */
int ir_value_name(ir_cur *c, tsl_str *out); /* '%' [A-Za-z0-9_][A-Za-z0-9_.]* */
tsl_status ir_number(ir_cur *c, ir_num *out);
/* A string literal: *body its raw span (between the quotes), *escaped when it holds a
 * backslash escape of the IR level (its value then differs from the span's text). */
tsl_status ir_string(ir_cur *c, tsl_str *body, int *escaped);
int ir_word_is(tsl_str w, const char *s);
/* Strict base64 (Python's binascii.a2b_base64(strict_mode=True)) of a raw span: checks it and
 * returns the decoded length; if out != NULL writes the bytes. -1 if invalid. */
int64_t ir_base64(tsl_str s, uint8_t *out);

#endif
