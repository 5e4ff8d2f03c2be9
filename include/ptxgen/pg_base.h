/* SPDX-License-Identifier: MIT */
/*
 * ptxgen base: the names the builder, the kernel catalog and the runtime
 * share: error codes, targets (the target table) and element types. Pure
 * and thread-safe, except pg_set_allocator().
 */
#ifndef PTXGEN_PG_BASE_H
#define PTXGEN_PG_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(PTXGEN_BUILDING) && defined(__GNUC__)
#define PG_API __attribute__((visibility("default")))
#else
#define PG_API
#endif

/* ---------------------------------------------------------------- errors */

/* One table: code, value, message. Values are stable ABI. */
#define PG_ERRNO_MAP(X)                                                        \
    X(EINVAL, -1, "invalid argument")                                          \
    X(ENOMEM, -2, "out of memory")                                             \
    X(ETYPE, -3, "operand type mismatch")                                      \
    X(ETARGET, -4, "not supported by the target")                              \
    X(ELABEL, -5, "label error")                                               \
    X(EUNDEF, -6, "register read before any write")                            \
    X(EDIVERGE, -7, "barrier divergence")                                      \
    X(ESTATE, -8, "call not valid in this state")                              \
    X(ENOTFOUND, -9, "unknown name")                                           \
    X(ERANGE, -10, "value out of range")                                       \
    X(EIO, -11, "I/O error")

typedef enum pg_errno {
    PG_OK = 0,
#define PG_X_(name, val, msg) PG_##name = (val),
    PG_ERRNO_MAP(PG_X_)
#undef PG_X_
} pg_errno;

/* Message for an error code ("barrier divergence"); never NULL. */
PG_API const char *pg_strerror(int err);
/* Symbolic name ("PG_EDIVERGE"); never NULL. */
PG_API const char *pg_err_name(int err);
/* text made safe for a one-line message: C0 and C1 control characters, DEL
 * and bytes that are not UTF-8 become escapes (\n, \r, \t, \x1b), a
 * backslash becomes \\ so that an escape is never ambiguous; well-formed
 * UTF-8 passes. At most cap - 1 bytes and a NUL go to dst (cap < 4: "" or
 * nothing), never a sequence cut in half: the result ends in "..." when the
 * text did not fit. Returns the bytes written. ptxgen-dump quotes its
 * arguments with it, and the model layer escapes every message with it (a
 * tensor name, a config string or a path from a downloaded checkpoint
 * cannot retitle or clear the terminal). Pure and thread-safe. */
PG_API size_t pg_text_escape(char *dst, size_t cap, const char *text);

/* Replace malloc/realloc/free for everything ptxgen allocates. Pass NULLs to
 * restore libc. Not thread-safe: call before building anything. Tests use it
 * to make the N-th allocation fail. */
typedef struct pg_allocator {
    void *(*alloc)(size_t size, void *user);
    void *(*realloc)(void *ptr, size_t size, void *user);
    void (*free)(void *ptr, void *user);
    void *user;
} pg_allocator;
PG_API void pg_set_allocator(const pg_allocator *a);

/* ---------------------------------------------------------------- targets */

/* name, compute capability, lowest PTX ISA, architecture-specific ("a":
 * its features run on that sm alone) */
#define PG_TARGET_MAP(X)                                                       \
    X(SM_70, "sm_70", 70, 60, false)                                           \
    X(SM_75, "sm_75", 75, 63, false)                                           \
    X(SM_80, "sm_80", 80, 70, false)                                           \
    X(SM_86, "sm_86", 86, 71, false)                                           \
    X(SM_87, "sm_87", 87, 74, false)                                           \
    X(SM_89, "sm_89", 89, 78, false)                                           \
    X(SM_90, "sm_90", 90, 78, false)                                           \
    X(SM_90A, "sm_90a", 90, 80, true)                                          \
    X(SM_100, "sm_100", 100, 86, false)                                        \
    X(SM_100A, "sm_100a", 100, 86, true)                                       \
    X(SM_120, "sm_120", 120, 87, false)                                        \
    X(SM_120A, "sm_120a", 120, 87, true)                                       \
    X(SM_121, "sm_121", 121, 88, false)

typedef enum pg_target {
#define PG_X_(e, name, sm, isa, arch) PG_##e,
    PG_TARGET_MAP(PG_X_)
#undef PG_X_
    PG_TARGET_COUNT
} pg_target;

#define PG_TARGET_DEFAULT PG_SM_90

/* "sm_90a"; NULL for an out-of-range value. */
PG_API const char *pg_target_name(pg_target t);
/* Parse "sm_90" (exact, lower case). PG_ENOTFOUND for an unknown name. */
PG_API int pg_target_parse(const char *name, pg_target *out);
/* Compute capability as major*10+minor (sm_121 gives 121); 0 if invalid. */
PG_API unsigned pg_target_sm(pg_target t);
/* Lowest PTX ISA the target accepts, as major*10+minor (sm_90 gives 78). */
PG_API unsigned pg_target_min_isa(pg_target t);
/* Architecture-specific ("a") target. */
PG_API bool pg_target_is_arch_specific(pg_target t);
/* First CUDA driver version (cuDriverGetVersion form, 12080 for 12.8) that
 * loads PTX of the given ISA (major*10+minor); 0 if the ISA is unknown. */
PG_API unsigned pg_isa_min_driver(unsigned isa);

/* ---------------------------------------------------------------- types */

#define PG_TYPE_MAP(X)                                                         \
    X(PRED, "pred", 1)                                                         \
    X(B8, "b8", 8)                                                             \
    X(B16, "b16", 16)                                                          \
    X(B32, "b32", 32)                                                          \
    X(B64, "b64", 64)                                                          \
    X(U8, "u8", 8)                                                             \
    X(U16, "u16", 16)                                                          \
    X(U32, "u32", 32)                                                          \
    X(U64, "u64", 64)                                                          \
    X(S8, "s8", 8)                                                             \
    X(S16, "s16", 16)                                                          \
    X(S32, "s32", 32)                                                          \
    X(S64, "s64", 64)                                                          \
    X(F16, "f16", 16)                                                          \
    X(BF16, "bf16", 16)                                                        \
    X(F32, "f32", 32)                                                          \
    X(F64, "f64", 64)

typedef enum pg_type {
#define PG_X_(e, name, bits) PG_##e,
    PG_TYPE_MAP(PG_X_)
#undef PG_X_
    PG_TYPE_COUNT
} pg_type;

PG_API const char *pg_type_name(pg_type t); /* "u32"; NULL if invalid */
PG_API unsigned pg_type_bits(pg_type t);    /* 32; pred is 1; 0 if invalid */
PG_API bool pg_type_is_float(pg_type t);    /* f16 bf16 f32 f64 */
PG_API bool pg_type_is_signed(pg_type t);   /* s8..s64 */
PG_API int pg_type_parse(const char *name, pg_type *out);

#ifdef __cplusplus
}
#endif

#endif /* PTXGEN_PG_BASE_H */
