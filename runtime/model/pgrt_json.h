/* SPDX-License-Identifier: MIT */
/*
 * The model layer's strict JSON reader: limits on size, depth, string
 * length and numbers; UTF-8 checked; duplicate keys refused; a read-only
 * DOM. Private: the runtime reads config.json, adapter configs and
 * safetensors headers with it, and ptxgen-train its checkpoint state; it
 * is not installed. Its functions are exported from the runtime library
 * for those tools and the project's tests and fuzzers only (PGRT_INTERNAL),
 * with no promise of stability. Errors as in pgrt_model.h.
 */
#ifndef PTXGEN_PGRT_JSON_H
#define PTXGEN_PGRT_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ptxgen/pgrt_model.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(PGRT_BUILDING) && defined(__GNUC__)
#define PGRT_INTERNAL __attribute__((visibility("default")))
#else
#define PGRT_INTERNAL
#endif

/* ------------------------------------------------------------------ JSON */

typedef enum pgrt_json_type {
    PGRT_JSON_NULL,
    PGRT_JSON_BOOL,
    PGRT_JSON_NUMBER,
    PGRT_JSON_STRING,
    PGRT_JSON_ARRAY,
    PGRT_JSON_OBJECT,
} pgrt_json_type;

/* Zero fields take the defaults below. */
typedef struct pgrt_json_limits {
    size_t max_size;   /* bytes of text; default 100 MB */
    int max_depth;     /* nested arrays/objects; default 64, at most 512 */
    size_t max_string; /* bytes of one decoded string or key; default 1 MB */
    size_t max_number; /* characters of one number literal; default 64, at most 1024 */
} pgrt_json_limits;

typedef struct pgrt_json pgrt_json;     /* a parsed document */
typedef struct pgrt_jval pgrt_jval;     /* one value inside it */

/* Parse text[0, len) as one JSON value (RFC 8259, with whitespace around
 * it). Refused: anything else after the value, invalid UTF-8 (overlong
 * forms, surrogates, > U+10FFFF), control characters in strings, lone
 * surrogate escapes, \u0000 (so that every string is a C string), numbers
 * that overflow a double, duplicate keys in one object, a limit exceeded.
 * The message says what and where: "byte 17: duplicate key \"a\"". `what`
 * (a file name, may be NULL) prefixes it. limits may be NULL. The text
 * need not stay alive after the call. */
PGRT_INTERNAL int pgrt_json_parse(const char *text, size_t len, const pgrt_json_limits *limits,
                             const char *what, pgrt_json **out);
PGRT_INTERNAL void pgrt_json_destroy(pgrt_json **doc);
PGRT_INTERNAL const pgrt_jval *pgrt_json_root(const pgrt_json *doc);

/* The getters take NULL (an absent member) and then answer "absent":
 * type PGRT_JSON_NULL is reported only for a real null, use
 * pgrt_jval_is_null. */
PGRT_INTERNAL pgrt_json_type pgrt_jval_type(const pgrt_jval *v);
PGRT_INTERNAL bool pgrt_jval_is_null(const pgrt_jval *v);
/* Byte offset of the value's first character in the text. */
PGRT_INTERNAL size_t pgrt_jval_offset(const pgrt_jval *v);
/* Items of an array or members of an object (0 otherwise). */
PGRT_INTERNAL size_t pgrt_jval_count(const pgrt_jval *v);
PGRT_INTERNAL const pgrt_jval *pgrt_jval_item(const pgrt_jval *arr, size_t i);
/* Members in document order; pgrt_jval_member looks a key up (O(log n)). */
PGRT_INTERNAL const char *pgrt_jval_key_at(const pgrt_jval *obj, size_t i);
PGRT_INTERNAL const pgrt_jval *pgrt_jval_value_at(const pgrt_jval *obj, size_t i);
PGRT_INTERNAL const pgrt_jval *pgrt_jval_member(const pgrt_jval *obj, const char *key);
/* The decoded string (NUL-terminated, valid UTF-8) or NULL if v is not a
 * string; *len (may be NULL) gets its length. */
PGRT_INTERNAL const char *pgrt_jval_string(const pgrt_jval *v, size_t *len);
/* An integer literal (no fraction, no exponent) in [min, max]. PGRT_EINVAL
 * if v is not one, PGRT_ERANGE if outside. No message is set: the caller
 * names the field. */
PGRT_INTERNAL int pgrt_jval_int64(const pgrt_jval *v, int64_t min, int64_t max, int64_t *out);
/* Any number, as the nearest double. PGRT_EINVAL if v is not a number. */
PGRT_INTERNAL int pgrt_jval_double(const pgrt_jval *v, double *out);
PGRT_INTERNAL int pgrt_jval_bool(const pgrt_jval *v, bool *out);

/* The "__metadata__" object of a safetensors file, or NULL. */
PGRT_INTERNAL const pgrt_jval *pgrt_st_metadata(const pgrt_st_file *f);

#ifdef __cplusplus
}
#endif

#endif /* PTXGEN_PGRT_JSON_H */
