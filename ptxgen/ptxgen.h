/* SPDX-License-Identifier: MIT */
/*
 * ptxgen: a PTX builder in C11.
 *
 * A kernel is recorded call by call into an opaque pg_kernel, validated as a
 * whole (types, labels, definitions, barrier uniformity) and serialized to PTX
 * text. Same calls, same bytes.
 *
 * Errors are sticky: the first failing call records a code and a message in
 * the kernel; later calls do nothing; pg_kernel_emit() returns that error.
 * Nothing here aborts or exits.
 *
 * Thread safety: a pg_kernel belongs to one thread at a time. Distinct
 * kernels may be built concurrently. The table functions (pg_target_*,
 * pg_type_*, pg_strerror) are pure and thread-safe. pg_set_allocator() is not.
 */
#ifndef PTXGEN_PTXGEN_H
#define PTXGEN_PTXGEN_H

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

/* ---------------------------------------------------------------- operands */

typedef enum pg_val_kind {
    PG_VAL_NONE = 0, /* absent (e.g. no destination: atom becomes red) */
    PG_VAL_REG,      /* virtual register */
    PG_VAL_IMM_INT,  /* integer immediate, written in decimal */
    PG_VAL_IMM_F32,  /* f32 immediate, written exactly as 0fXXXXXXXX */
    PG_VAL_IMM_F64,  /* f64 immediate, written exactly as 0dXXXXXXXXXXXXXXXX */
    PG_VAL_SHARED,   /* the address of a shared-memory symbol */
} pg_val_kind;

/* An operand, passed by value. Registers are created by pg_reg_new() and
 * keep their type in the kernel that made them; a register or shared
 * address is valid only in that kernel (another kernel refuses it). */
typedef struct pg_val {
    uint32_t kind; /* pg_val_kind */
    uint32_t id;   /* register or shared-symbol id; 0 for immediates */
    uint64_t bits; /* immediate bits (two's complement / IEEE); for a
                      register or shared address, the kernel's identity */
} pg_val;

/* A pg_val of kind PG_VAL_REG. */
typedef pg_val pg_reg;

static inline pg_val pg_none(void) { pg_val v = {PG_VAL_NONE, 0, 0}; return v; }
static inline pg_val pg_u32(uint32_t x) { pg_val v = {PG_VAL_IMM_INT, 0, x}; return v; }
static inline pg_val pg_s32(int32_t x) { pg_val v = {PG_VAL_IMM_INT, 0, (uint64_t)(int64_t)x}; return v; }
static inline pg_val pg_u64(uint64_t x) { pg_val v = {PG_VAL_IMM_INT, 0, x}; return v; }
static inline pg_val pg_s64(int64_t x) { pg_val v = {PG_VAL_IMM_INT, 0, (uint64_t)x}; return v; }
static inline pg_val pg_f32(float x)
{
    union { float f; uint32_t u; } c;
    c.f = x;
    pg_val v = {PG_VAL_IMM_F32, 0, c.u};
    return v;
}
static inline pg_val pg_f64(double x)
{
    union { double f; uint64_t u; } c;
    c.f = x;
    pg_val v = {PG_VAL_IMM_F64, 0, c.u};
    return v;
}
static inline bool pg_is_reg(pg_val v) { return v.kind == PG_VAL_REG; }

/* Handles: small ids (0 = invalid) and the identity of the kernel that
 * made them; each is valid only in that kernel. */
typedef struct pg_label { uint32_t id, kernel; } pg_label;
typedef struct pg_param { uint32_t id, kernel; } pg_param;
typedef struct pg_shared { uint32_t id, kernel; } pg_shared;

/* ---------------------------------------------------------------- kernel */

typedef struct pg_kernel pg_kernel;

/* Create an empty kernel named `name` (a PTX identifier) for `target`.
 * On success *out owns the kernel; free it with pg_kernel_destroy().
 * Returns PG_EINVAL (bad name/target/out), PG_ENOMEM. */
PG_API int pg_kernel_create(pg_kernel **out, const char *name, pg_target target);
/* Free the kernel and everything it owns (including emitted text), set *k to
 * NULL. NULL and *k == NULL are allowed. */
PG_API void pg_kernel_destroy(pg_kernel **k);

/* The first error recorded (0 if none) and its message. The message lives as
 * long as the kernel; it is "" when there is no error. */
PG_API int pg_kernel_error(const pg_kernel *k);
PG_API const char *pg_kernel_message(const pg_kernel *k);
/* Record err (a negative PG_E* code; anything else records PG_EINVAL) and
 * a printf-formatted message, "<kernel name>: " first, as the kernel's
 * error, for a kernel definition that finds its own arguments wrong. The
 * error is sticky: when the kernel already has one, nothing changes and
 * that one is returned; else the recorded code (with a NULL k nothing is
 * recorded and the code is returned). Not thread-safe for one kernel,
 * like every builder call. */
PG_API int pg_kernel_fail(pg_kernel *k, int err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
PG_API pg_target pg_kernel_target(const pg_kernel *k);

/* `.maxntid x, y, z`: the most threads a block of this kernel will have. */
PG_API void pg_kernel_set_maxntid(pg_kernel *k, uint32_t x, uint32_t y, uint32_t z);

/* Validate and serialize. On success *ptx points to NUL-terminated text owned
 * by the kernel (valid until it is destroyed) and *len (if not NULL) is its
 * length. Emitting twice gives the same bytes. After emission the kernel
 * accepts no more instructions: such a call records PG_ESTATE (seen through
 * pg_kernel_error()), and pg_kernel_emit() still gives the text built. */
PG_API int pg_kernel_emit(pg_kernel *k, const char **ptx, size_t *len);

/* pg_kernel_emit(), handing the text over instead of lending it: on success
 * *ptx is the caller's, to free with pg_free(), and the kernel keeps none (a
 * later emit writes the same bytes anew). Spares a copy of a module that
 * runs to hundreds of kilobytes when the kernel is destroyed next. */
PG_API int pg_kernel_take_ptx(pg_kernel *k, char **ptx, size_t *len);
/* Frees text from pg_kernel_take_ptx() (through pg_set_allocator's free). */
PG_API void pg_free(void *p);

/* The PTX ISA (major*10+minor) the kernel needs: the target's minimum,
 * raised by any instruction that needs more. */
PG_API unsigned pg_kernel_isa(const pg_kernel *k);

/* ---------------------------------------------------------------- params */

/* Declare the next kernel parameter. Pointers are PG_U64. Every param
 * comes before the kernel's first instruction: one declared after it is
 * PG_ESTATE ("declare all params before the first instruction"). */
PG_API pg_param pg_param_add(pg_kernel *k, pg_type t, const char *name);
/* ld.param into a new register (8-bit params load into a 16-bit register). */
PG_API pg_reg pg_param_load(pg_kernel *k, pg_param p);
PG_API size_t pg_kernel_param_count(const pg_kernel *k);
/* Name and type of parameter i (0-based); PG_ERANGE past the end. */
PG_API int pg_kernel_param_info(const pg_kernel *k, size_t i, const char **name, pg_type *t);

/* ---------------------------------------------------------------- registers */

/* A new virtual register. 8-bit types are not registers in PTX: PG_ETYPE. */
PG_API pg_reg pg_reg_new(pg_kernel *k, pg_type t);
/* The type a register was created with; PG_TYPE_COUNT if not a register. */
PG_API pg_type pg_reg_type(const pg_kernel *k, pg_val r);

typedef enum pg_sreg {
    PG_SREG_TID_X, PG_SREG_TID_Y, PG_SREG_TID_Z,
    PG_SREG_NTID_X, PG_SREG_NTID_Y, PG_SREG_NTID_Z,
    PG_SREG_CTAID_X, PG_SREG_CTAID_Y, PG_SREG_CTAID_Z,
    PG_SREG_NCTAID_X, PG_SREG_NCTAID_Y, PG_SREG_NCTAID_Z,
    PG_SREG_LANEID, PG_SREG_WARPID,
    PG_SREG_COUNT
} pg_sreg;
/* mov.u32 from a special register into a new u32 register. */
PG_API pg_reg pg_sreg_read(pg_kernel *k, pg_sreg s);

/* ---------------------------------------------------------------- control */

/* The next instruction runs only where predicate p is true (false when
 * negate). Applies to exactly one instruction. */
PG_API void pg_guard(pg_kernel *k, pg_reg p, bool negate);

/* Labels are small ids; their names are assigned at emission in the order
 * they are bound ("L3_loop"). `hint` may be NULL; it is copied. */
PG_API pg_label pg_label_new(pg_kernel *k, const char *hint);
PG_API void pg_label_bind(pg_kernel *k, pg_label l);
/* bra (uniform when the branch is known uniform: emits bra.uni). */
PG_API void pg_bra(pg_kernel *k, pg_label l);
/* @p bra / @!p bra. */
PG_API void pg_bra_if(pg_kernel *k, pg_reg p, bool negate, pg_label l);
PG_API void pg_ret(pg_kernel *k);
PG_API void pg_exit(pg_kernel *k);
/* bar.sync id (0..15). */
PG_API void pg_bar_sync(pg_kernel *k, uint32_t id);
/* bar.warp.sync mask. */
PG_API void pg_bar_warp_sync(pg_kernel *k, uint32_t mask);

typedef enum pg_scope { PG_SCOPE_CTA, PG_SCOPE_GPU, PG_SCOPE_SYS } pg_scope;
/* membar.{cta,gl,sys}. */
PG_API void pg_membar(pg_kernel *k, pg_scope s);
/* fence.acq_rel.{cta,gpu,sys} (sc = false) or fence.sc.{...}. */
PG_API void pg_fence(pg_kernel *k, pg_scope s, bool sc);

/* A `// text` line. No newlines. */
PG_API void pg_comment(pg_kernel *k, const char *text);

/* ---------------------------------------------------------------- arithmetic */
/* Destinations are registers; sources are registers or immediates. `t` is
 * the instruction type (the .u32 in add.u32). Register types must agree
 * with it: same width, same kind (b-types match either). Float add, sub and
 * mul are written with .rn so ptxas never contracts them into fma. */

PG_API void pg_mov(pg_kernel *k, pg_type t, pg_reg d, pg_val a);
PG_API void pg_add(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b);
PG_API void pg_sub(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b);
/* Float: mul.rn; integer: mul.lo. */
PG_API void pg_mul(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b);
PG_API void pg_mul_hi(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b);
/* mul.wide.{u,s}{16,32}: d has twice the width of t. */
PG_API void pg_mul_wide(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b);
/* Integer mad.lo / mad.hi / mad.wide (d = a*b + c). */
PG_API void pg_mad(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b, pg_val c);
PG_API void pg_mad_hi(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b, pg_val c);
PG_API void pg_mad_wide(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b, pg_val c);
/* fma.rn (float). */
PG_API void pg_fma(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b, pg_val c);
/* Float: div.rn; integer: div. */
PG_API void pg_div(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b);
PG_API void pg_rem(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b);
/* rcp.rn, sqrt.rn (f32/f64); rsqrt.approx, ex2.approx, lg2.approx (.ftz
 * never: denormals are kept). */
PG_API void pg_rcp(pg_kernel *k, pg_type t, pg_reg d, pg_val a);
PG_API void pg_sqrt(pg_kernel *k, pg_type t, pg_reg d, pg_val a);
PG_API void pg_rsqrt(pg_kernel *k, pg_type t, pg_reg d, pg_val a);
PG_API void pg_ex2(pg_kernel *k, pg_type t, pg_reg d, pg_val a);
PG_API void pg_lg2(pg_kernel *k, pg_type t, pg_reg d, pg_val a);
PG_API void pg_min(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b);
PG_API void pg_max(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b);
PG_API void pg_abs(pg_kernel *k, pg_type t, pg_reg d, pg_val a);
PG_API void pg_neg(pg_kernel *k, pg_type t, pg_reg d, pg_val a);
/* Bitwise (b/u/s types, and pred for and/or/xor/not). */
PG_API void pg_and(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b);
PG_API void pg_or(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b);
PG_API void pg_xor(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b);
PG_API void pg_not(pg_kernel *k, pg_type t, pg_reg d, pg_val a);
/* shl.bN; shr.uN / shr.sN by the signedness of t. The shift amount is u32. */
PG_API void pg_shl(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b);
PG_API void pg_shr(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b);

/* Value forms. Each makes its own destination register, records the same
 * instruction as the in-place form above and returns the register (PG_VAL_NONE
 * after an error; errors are sticky as usual). The destination has type t,
 * except where noted, and is made before the instruction is recorded:
 *     pg_reg q = pgv_add(k, PG_F32, z, pg_f32(1.0f));
 * gives the same bytes as
 *     pg_reg q = pg_reg_new(k, PG_F32); pg_add(k, PG_F32, q, z, pg_f32(1.0f));
 * Use the in-place forms for loop-carried values that are written again. */
PG_API pg_reg pgv_mov(pg_kernel *k, pg_type t, pg_val a);
PG_API pg_reg pgv_add(pg_kernel *k, pg_type t, pg_val a, pg_val b);
PG_API pg_reg pgv_sub(pg_kernel *k, pg_type t, pg_val a, pg_val b);
PG_API pg_reg pgv_mul(pg_kernel *k, pg_type t, pg_val a, pg_val b);
PG_API pg_reg pgv_mul_hi(pg_kernel *k, pg_type t, pg_val a, pg_val b);
/* The destination has twice the width of t (u32 gives u64). */
PG_API pg_reg pgv_mul_wide(pg_kernel *k, pg_type t, pg_val a, pg_val b);
PG_API pg_reg pgv_mad(pg_kernel *k, pg_type t, pg_val a, pg_val b, pg_val c);
PG_API pg_reg pgv_mad_hi(pg_kernel *k, pg_type t, pg_val a, pg_val b, pg_val c);
/* The destination has twice the width of t; c has that width too. */
PG_API pg_reg pgv_mad_wide(pg_kernel *k, pg_type t, pg_val a, pg_val b, pg_val c);
PG_API pg_reg pgv_fma(pg_kernel *k, pg_type t, pg_val a, pg_val b, pg_val c);
PG_API pg_reg pgv_div(pg_kernel *k, pg_type t, pg_val a, pg_val b);
PG_API pg_reg pgv_rem(pg_kernel *k, pg_type t, pg_val a, pg_val b);
PG_API pg_reg pgv_rcp(pg_kernel *k, pg_type t, pg_val a);
PG_API pg_reg pgv_sqrt(pg_kernel *k, pg_type t, pg_val a);
PG_API pg_reg pgv_rsqrt(pg_kernel *k, pg_type t, pg_val a);
PG_API pg_reg pgv_ex2(pg_kernel *k, pg_type t, pg_val a);
PG_API pg_reg pgv_lg2(pg_kernel *k, pg_type t, pg_val a);
PG_API pg_reg pgv_min(pg_kernel *k, pg_type t, pg_val a, pg_val b);
PG_API pg_reg pgv_max(pg_kernel *k, pg_type t, pg_val a, pg_val b);
PG_API pg_reg pgv_abs(pg_kernel *k, pg_type t, pg_val a);
PG_API pg_reg pgv_neg(pg_kernel *k, pg_type t, pg_val a);
PG_API pg_reg pgv_and(pg_kernel *k, pg_type t, pg_val a, pg_val b);
PG_API pg_reg pgv_or(pg_kernel *k, pg_type t, pg_val a, pg_val b);
PG_API pg_reg pgv_xor(pg_kernel *k, pg_type t, pg_val a, pg_val b);
PG_API pg_reg pgv_not(pg_kernel *k, pg_type t, pg_val a);
PG_API pg_reg pgv_shl(pg_kernel *k, pg_type t, pg_val a, pg_val b);
PG_API pg_reg pgv_shr(pg_kernel *k, pg_type t, pg_val a, pg_val b);

typedef enum pg_cmp {
    PG_CMP_EQ, PG_CMP_NE, PG_CMP_LT, PG_CMP_LE, PG_CMP_GT, PG_CMP_GE,
    PG_CMP_LO, PG_CMP_LS, PG_CMP_HI, PG_CMP_HS, /* unsigned only */
    PG_CMP_EQU, PG_CMP_NEU, PG_CMP_LTU, PG_CMP_LEU, PG_CMP_GTU, PG_CMP_GEU,
    PG_CMP_NUM, PG_CMP_NAN, /* float only */
    PG_CMP_COUNT
} pg_cmp;
/* setp.cmp.t p, a, b (p is a pred register). */
PG_API void pg_setp(pg_kernel *k, pg_cmp c, pg_type t, pg_reg p, pg_val a, pg_val b);
/* selp.t d, a, b, p: d = p ? a : b. */
PG_API void pg_selp(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b, pg_reg p);
/* Value forms: a new .pred register p = (a cmp b); a new register of type t
 * holding p ? a : b. */
PG_API pg_reg pgv_setp(pg_kernel *k, pg_cmp c, pg_type t, pg_val a, pg_val b);
PG_API pg_reg pgv_selp(pg_kernel *k, pg_type t, pg_val a, pg_val b, pg_reg p);

typedef enum pg_rnd {
    PG_RND_NONE, PG_RND_RN, PG_RND_RZ, PG_RND_RM, PG_RND_RP,
    PG_RND_RNI, PG_RND_RZI, PG_RND_RMI, PG_RND_RPI,
    PG_RND_COUNT
} pg_rnd;
/* cvt[.rnd].dt.st d, a. Rounding is required where precision can be lost
 * (float to integer: an integer rounding; to a narrower float or integer to
 * float: a float rounding) and refused where it means nothing. */
PG_API void pg_cvt(pg_kernel *k, pg_type dt, pg_type st, pg_rnd r, pg_reg d, pg_val a);
/* Value form: a new register of type dt (u16/s16 for an 8-bit dt). */
PG_API pg_reg pgv_cvt(pg_kernel *k, pg_type dt, pg_type st, pg_rnd r, pg_val a);

/* Two halves into one register. pg_pack: mov.bN d, {lo, hi}, t PG_B32 (two
 * 16-bit halves) or PG_B64 (two 32-bit halves); lo lands in the low bits.
 * pg_cvt_pack: two f32 values rounded to nearest into one b32 register of
 * two halves, t PG_BF16 (cvt.rn.bf16x2.f32) or PG_F16 (cvt.rn.f16x2.f32),
 * sm_80 and PTX 7.0 or newer; the operands are written hi first, as PTX
 * has them, and lo again lands in the low bits. Its destination is a b32,
 * u32 or s32 register (not f32). Both take a register as the destination,
 * never an immediate. */
PG_API void pg_pack(pg_kernel *k, pg_type t, pg_reg d, pg_val lo, pg_val hi);
PG_API pg_reg pgv_pack(pg_kernel *k, pg_type t, pg_val lo, pg_val hi);
PG_API void pg_cvt_pack(pg_kernel *k, pg_type t, pg_reg d, pg_val lo, pg_val hi);
PG_API pg_reg pgv_cvt_pack(pg_kernel *k, pg_type t, pg_val lo, pg_val hi);

/* ---------------------------------------------------------------- memory */

typedef enum pg_space { PG_SPACE_GLOBAL, PG_SPACE_SHARED, PG_SPACE_PARAM } pg_space;

/* ld.space[.vN].t {d...}, [addr+offset]. `addr` is a u64/b64 register
 * (global), a u32/b32 or 64-bit register or a shared symbol (shared).
 * `width` is 1, 2 or 4; d points to `width` registers. 8-bit loads go to
 * 16- or 32-bit registers, all of one width in a vector (so do the
 * registers an 8-bit pg_st_v stores). */
PG_API void pg_ld(pg_kernel *k, pg_space s, pg_type t, pg_val addr, int64_t offset, pg_reg d);
PG_API void pg_ld_v(pg_kernel *k, pg_space s, pg_type t, unsigned width, pg_val addr,
                    int64_t offset, const pg_reg *d);
/* ld.global.nc: read-only data for the whole kernel. */
PG_API void pg_ld_nc(pg_kernel *k, pg_type t, pg_val addr, int64_t offset, pg_reg d);
/* Value forms of the scalar loads: a new register of type t (u16/s16 for
 * an 8-bit t). */
PG_API pg_reg pgv_ld(pg_kernel *k, pg_space s, pg_type t, pg_val addr, int64_t offset);
PG_API pg_reg pgv_ld_nc(pg_kernel *k, pg_type t, pg_val addr, int64_t offset);
PG_API void pg_st(pg_kernel *k, pg_space s, pg_type t, pg_val addr, int64_t offset, pg_val v);
PG_API void pg_st_v(pg_kernel *k, pg_space s, pg_type t, unsigned width, pg_val addr,
                    int64_t offset, const pg_val *v);

/* Shared memory. A static array: `.shared .align A .t name[count]`. The
 * dynamic one (at most one a kernel): `.extern .shared .align A .b8 name[]`.
 * Address either through pg_shared_addr() (usable as a ld/st address or a
 * mov source). */
PG_API pg_shared pg_shared_static(pg_kernel *k, pg_type t, uint32_t count, uint32_t align,
                                  const char *hint);
PG_API pg_shared pg_shared_dynamic(pg_kernel *k, uint32_t align);
PG_API pg_val pg_shared_addr(pg_shared s);
/* Bytes of static shared memory declared so far. */
PG_API uint32_t pg_kernel_static_shared_bytes(const pg_kernel *k);

typedef enum pg_atom_op {
    PG_ATOM_ADD, PG_ATOM_MIN, PG_ATOM_MAX, PG_ATOM_CAS, PG_ATOM_EXCH,
    PG_ATOM_AND, PG_ATOM_OR, PG_ATOM_XOR,
    PG_ATOM_COUNT
} pg_atom_op;
/* atom.space.op.t d, [addr+offset], a[, b]. With d = pg_none() (not CAS or
 * EXCH) it emits red. `b` is used by CAS only (compare a, swap in b). */
PG_API void pg_atom(pg_kernel *k, pg_space s, pg_atom_op op, pg_type t, pg_reg d, pg_val addr,
                    int64_t offset, pg_val a, pg_val b);

/* ---------------------------------------------------------------- warp */

typedef enum pg_shfl_mode { PG_SHFL_UP, PG_SHFL_DOWN, PG_SHFL_BFLY, PG_SHFL_IDX } pg_shfl_mode;
/* shfl.sync.mode.b32 d[|p], a, b, c, mask. `p` may be pg_none(). `a`/`d` are
 * 32-bit registers (any 32-bit type); `mask` (the membermask) is a 32-bit
 * integer: a b32/u32/s32 register or an immediate, never an f32 register. */
PG_API void pg_shfl(pg_kernel *k, pg_shfl_mode m, pg_reg d, pg_reg p, pg_val a, pg_val b,
                    pg_val c, pg_val mask);

typedef enum pg_vote_mode { PG_VOTE_ALL, PG_VOTE_ANY, PG_VOTE_UNI, PG_VOTE_BALLOT } pg_vote_mode;
/* vote.sync.mode.{pred,b32} d, {!}p, mask. Ballot writes a b32/u32 register.
 * `mask` as for pg_shfl. */
PG_API void pg_vote(pg_kernel *k, pg_vote_mode m, pg_reg d, pg_reg p, bool negate, pg_val mask);

/* ---------------------------------------------------------------- tensor cores */

/* mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 (sm_80+):
 * d[4] f32, a[4] b32 (f16x2), b[2] b32 (f16x2), c[4] f32. The fragments of
 * a and b are registers of type b32, u32 or s32 (two packed halves): not
 * f32, not immediates. */
PG_API void pg_mma_m16n8k16_f16_f32(pg_kernel *k, const pg_reg *d, const pg_reg *a,
                                    const pg_reg *b, const pg_reg *c);
/* The same for inputs of type in_type: PG_F16, or PG_BF16
 * (mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, sm_80+); any other
 * type is a PG_ETYPE error. */
PG_API void pg_mma_m16n8k16_f32(pg_kernel *k, pg_type in_type, const pg_reg *d, const pg_reg *a,
                                const pg_reg *b, const pg_reg *c);

/* ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16 (sm_75+): `num`
 * 8x8 b16 matrices from shared memory, each thread giving a row address;
 * d[num] are 32-bit registers (two b16 each). */
PG_API void pg_ldmatrix(pg_kernel *k, unsigned num, bool trans, const pg_reg *d, pg_val saddr,
                        int64_t offset);

/* ---------------------------------------------------------------- async copies */

/* cp.async.{ca,cg}.shared.global [sdst+soff], [gsrc+goff], bytes[, src_size]
 * (sm_80+): bytes is 4, 8 or 16 (16 uses .cg, bypassing L1). `src_size` (a
 * u32 register or immediate, or pg_none()) reads only that many bytes and
 * zero-fills the rest: the edge of a tile. */
PG_API void pg_cp_async(pg_kernel *k, pg_val sdst, int64_t soff, pg_val gsrc, int64_t goff,
                        unsigned bytes, pg_val src_size);
/* cp.async.commit_group: the copies issued so far form one group. */
PG_API void pg_cp_async_commit(pg_kernel *k);
/* cp.async.wait_group n: wait until at most n groups are in flight. The
 * copied data is visible to the thread that copied it; a bar.sync makes it
 * visible to the block. */
PG_API void pg_cp_async_wait(pg_kernel *k, uint32_t n);

/* ---------------------------------------------------------------- idioms */

/* ctaid.x * ntid.x + tid.x into a new u32 register. */
PG_API pg_reg pg_global_tid_x(pg_kernel *k);
/* setp.ge.u32 + bra: jump to `out` where idx >= n. */
PG_API void pg_bounds_guard(pg_kernel *k, pg_val idx, pg_val n, pg_label out);

/* A counted u32 loop: i = start, start + step, ... while i < n.
 *     pg_loop L;
 *     pg_reg i = pg_for_begin(k, &L, start, n, step);
 *     ... body using i ...
 *     pg_for_end(k, &L);
 * start, n and step are u32 registers or immediates, read once at the top
 * (n and step again at each turn; do not write them in the body). i is a
 * new register: the body may read it but must not write it. The test is
 * made before the first turn (start >= n runs the body zero times), and the
 * step is taken only while n - i > step, so i never wraps, for any n up to
 * 2^32 - 1. step must be at least 1 (an immediate 0 is refused). */
typedef struct pg_loop {
    pg_reg i, step, n, p;
    pg_label top, done;
} pg_loop;
PG_API pg_reg pg_for_begin(pg_kernel *k, pg_loop *l, pg_val start, pg_val n, pg_val step);
PG_API void pg_for_end(pg_kernel *k, pg_loop *l);

/* A grid-stride loop over [0, n): pg_for with start = the global thread id
 * (ctaid.x * ntid.x + tid.x) and step = ntid.x * nctaid.x.
 *     pg_loop L; pg_reg i = pg_grid_stride_begin(k, &L, n);
 *     ... body using i ...
 *     pg_grid_stride_end(k, &L);
 * The body must not contain a barrier (threads run different counts).
 * pg_grid_stride_end and pg_for_end close either kind of loop. */
PG_API pg_reg pg_grid_stride_begin(pg_kernel *k, pg_loop *l, pg_val n);
PG_API void pg_grid_stride_end(pg_kernel *k, pg_loop *l);

typedef enum pg_reduce_op { PG_REDUCE_SUM, PG_REDUCE_MAX, PG_REDUCE_MIN } pg_reduce_op;
/* Butterfly reduction over a full warp in a fixed order (offsets 16, 8, 4,
 * 2, 1): every lane ends with the same bits. t is f32, u32 or s32. Returns
 * a new register; all 32 lanes must be active. */
PG_API pg_reg pg_warp_reduce(pg_kernel *k, pg_reduce_op op, pg_type t, pg_reg v);
/* Block reduction in a fixed order: warp reductions, one value a warp in
 * `scratch` (a static shared array of >= 32 elements of type t), then warp 0
 * reduces those in lane order. Every thread of the block gets the result.
 * Must be reached by all threads of the block (it uses bar.sync; the
 * validator checks). blockDim.x must be a multiple of 32. */
PG_API pg_reg pg_block_reduce(pg_kernel *k, pg_reduce_op op, pg_type t, pg_reg v,
                              pg_shared scratch);

/* ---------------------------------------------------------------- Hopper (sm_90, sm_90a) */
/*
 * Target rules (each checked with ptxas 13.0): wgmma needs exactly sm_90a;
 * setmaxnreg an arch-specific target (sm_90a, sm_100a, sm_120a); TMA,
 * mbarrier expect_tx / try_wait, the async-proxy fences and elect.sync
 * sm_90 (PTX 8.0); stmatrix sm_90 (PTX 7.8); mbarrier init / arrive and the
 * bf16 mma.sync sm_80. A call the target lacks fails with PG_ETARGET naming
 * both. Shared-memory operands (`bar`, `sdst`, `saddr`) are a u32/b32 or
 * 64-bit register holding a shared address, or pg_shared_addr(); `off` is
 * a byte offset added to it.
 */

/* mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (sm_80+): operands
 * as pg_mma_m16n8k16_f16_f32, the b32 fragments holding bf16x2. */
PG_API void pg_mma_m16n8k16_bf16_f32(pg_kernel *k, const pg_reg *d, const pg_reg *a,
                                     const pg_reg *b, const pg_reg *c);

/* `.minnctapersm n`: with .maxntid, lets ptxas know the registers a thread
 * has at entry, which setmaxnreg needs (else it warns C7508 and ignores it). */
PG_API void pg_kernel_set_minnctapersm(pg_kernel *k, uint32_t n);

/* A CUtensorMap passed by value: `.param .align 64 .b8 name[128]`. Declared
 * like pg_param_add (before any instruction); pg_param_load refuses it:
 * take its address with pg_param_addr. */
PG_API pg_param pg_param_tensor_map(pg_kernel *k, const char *name);
/* cvta.param.u64: the generic address of a parameter (PTX 7.7), a new u64
 * register; what cp.async.bulk.tensor takes as its tensor map. */
PG_API pg_reg pg_param_addr(pg_kernel *k, pg_param p);

/* bar.sync id, nthreads: a named barrier for nthreads threads (a multiple
 * of 32, 32..1024), e.g. the consumer warpgroups of a warp-specialized
 * kernel. The validator lets it sit under a branch that is uniform across
 * each warp (a warp or warpgroup index: %tid.x >> 5 or more) but not under
 * one that splits a warp. */
PG_API void pg_bar_sync_count(pg_kernel *k, uint32_t id, uint32_t nthreads);
/* bar.arrive id, nthreads: this warp arrives at named barrier id without
 * waiting; the barrier completes when nthreads threads have arrived or
 * synced (pg_bar_sync_count with the same id and count). How one group of
 * warps hands a turn to another (the pingpong of two consumer warpgroups:
 * one syncs, the other arrives). The same operands and validator rule as
 * pg_bar_sync_count. */
PG_API void pg_bar_arrive(pg_kernel *k, uint32_t id, uint32_t nthreads);

/* mbarrier.init.shared::cta.b64 [bar+off], count (u32 register or
 * immediate, 1..2^20-1). */
PG_API void pg_mbarrier_init(pg_kernel *k, pg_val bar, int64_t off, pg_val count);
/* mbarrier.arrive.shared::cta.b64 _, [bar+off]: one arrival, the state
 * discarded. */
PG_API void pg_mbarrier_arrive(pg_kernel *k, pg_val bar, int64_t off);
/* mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar+off], tx: one arrival
 * that also expects tx more bytes of asynchronous copies (u32). */
PG_API void pg_mbarrier_arrive_expect_tx(pg_kernel *k, pg_val bar, int64_t off, pg_val tx);
/* mbarrier.try_wait.parity.shared::cta.b64 p, [bar+off], parity: p is true
 * once the phase of that parity (u32 register or immediate 0/1) completed. */
PG_API void pg_mbarrier_try_wait_parity(pg_kernel *k, pg_reg p, pg_val bar, int64_t off,
                                        pg_val parity);
/* The wait idiom: try_wait.parity in a loop until it succeeds
 *     $Ln_mbar_wait: mbarrier.try_wait.parity... %p, [bar+off], parity;
 *                    @!%p bra $Ln_mbar_wait;
 * (try_wait itself suspends for a while, so the loop does not spin hot). */
PG_API void pg_mbarrier_wait_parity(pg_kernel *k, pg_val bar, int64_t off, pg_val parity);

/* fence.proxy.async.shared::cta: generic-proxy writes to shared memory
 * become visible to the async proxy (TMA, wgmma) and back. */
PG_API void pg_fence_proxy_async(pg_kernel *k);
/* fence.mbarrier_init.release.cluster: initialized mbarriers become visible
 * to the cluster's async operations. */
PG_API void pg_fence_mbarrier_init(pg_kernel *k);

/* cp.async.bulk.tensor.{dims}d.shared::cluster.global.mbarrier::complete_tx::bytes
 *     [sdst], [tmap, {c0, ...}], [bar]
 * dims is 2 to 5; tmap a u64 register from pg_param_addr (or any generic
 * address of a tensor map); coords[dims] s32/u32 registers or immediates,
 * innermost first, in elements (may be outside the tensor: those elements
 * read as zero). sdst (a 128-byte aligned shared address) and bar as above. */
PG_API void pg_cp_async_bulk_tensor(pg_kernel *k, unsigned dims, pg_val sdst, pg_reg tmap,
                                    const pg_val *coords, pg_val bar);
/* cp.async.bulk.commit_group / cp.async.bulk.wait_group n (n <= 63): bulk
 * async-groups, for the copies that complete through groups (stores). */
PG_API void pg_cp_async_bulk_commit(pg_kernel *k);
PG_API void pg_cp_async_bulk_wait(pg_kernel *k, uint32_t n);

/* setmaxnreg.{inc,dec}.sync.aligned.u32 n: n in 24..256, a multiple of 8.
 * Every thread of the warpgroup must run it. */
PG_API void pg_setmaxnreg(pg_kernel *k, bool inc, uint32_t n);

/* stmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16 [saddr+off], {v}:
 * the inverse of pg_ldmatrix; v[num] are 32-bit registers. */
PG_API void pg_stmatrix(pg_kernel *k, unsigned num, bool trans, pg_val saddr, int64_t off,
                        const pg_reg *v);

/* elect.sync _|p, mask: p is true in exactly one active lane of mask (u32
 * register or immediate). */
PG_API void pg_elect_sync(pg_kernel *k, pg_reg p, pg_val mask);

/* wgmma.fence / commit_group / wait_group n (n <= 7), .sync.aligned. */
PG_API void pg_wgmma_fence(pg_kernel *k);
PG_API void pg_wgmma_commit(pg_kernel *k);
PG_API void pg_wgmma_wait(pg_kernel *k, uint32_t n);

/* Swizzle mode of a shared-memory matrix descriptor (bits 62-63). */
typedef enum pg_swizzle {
    PG_SWIZZLE_NONE = 0,
    PG_SWIZZLE_128B = 1,
    PG_SWIZZLE_64B = 2,
    PG_SWIZZLE_32B = 3,
} pg_swizzle;

/* The 64-bit wgmma shared-memory matrix descriptor of a tile at shared
 * address saddr: (saddr >> 4) & 0x3fff in bits 0-13, lbo >> 4 in 16-29
 * (leading byte offset), sbo >> 4 in 32-45 (stride byte offset), base_offset
 * (0..7) in 49-51, the swizzle in 62-63. lbo and sbo are multiples of 16
 * below 2^18. pg_wgmma_desc_bits computes it on the host (pure); pg_wgmma_desc
 * writes it as register arithmetic into a new u64 register (saddr a u32
 * register or pg_shared_addr()). Adding 2 to a descriptor moves its start
 * 32 bytes: one k16 step of a K-major bf16/f16 tile. */
PG_API uint64_t pg_wgmma_desc_bits(uint32_t saddr, uint32_t lbo, uint32_t sbo,
                                   unsigned base_offset, pg_swizzle sw);
PG_API pg_reg pg_wgmma_desc(pg_kernel *k, pg_val saddr, uint32_t lbo, uint32_t sbo,
                            unsigned base_offset, pg_swizzle sw);

/* wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ab}.{ab}: D[64 x n] (+)= A[64 x 16]
 * * B[16 x n] for one warpgroup (128 threads), asynchronous: wrap in
 * pg_wgmma_fence before, pg_wgmma_commit and pg_wgmma_wait after. */
typedef struct pg_wgmma {
    unsigned n;        /* 8..256, a multiple of 8 */
    pg_type ab;        /* PG_F16 or PG_BF16, A and B alike */
    const pg_reg *d;   /* n / 2 f32 accumulators */
    pg_val a_desc;     /* A from shared memory: a u64/b64 descriptor; or */
    const pg_reg *a;   /* A from registers: 4 b32 (used when a_desc is none) */
    pg_val b_desc;     /* B: a u64/b64 descriptor */
    pg_val scale_d;    /* a pred register, or pg_u32(0) (D = A*B) / pg_u32(1) */
    int scale_a;       /* 1 or -1 (0 means 1) */
    int scale_b;       /* 1 or -1 (0 means 1) */
    bool trans_a;      /* A is M-major (shared-memory A only) */
    bool trans_b;      /* B is N-major */
} pg_wgmma;
PG_API void pg_wgmma_mma_async(pg_kernel *k, const pg_wgmma *w);

#ifdef __cplusplus
}
#endif

#endif /* PTXGEN_PTXGEN_H */
