/* SPDX-License-Identifier: MIT */
/* Private to ptxgen/: the kernel record, the op table and the arena. */
#ifndef PTXGEN_INTERNAL_H
#define PTXGEN_INTERNAL_H

#include "ptxgen.h"

#include <stdarg.h>

/* ---------------------------------------------------------------- memory */

void *pg_mem_alloc(size_t size);
void *pg_mem_realloc(void *p, size_t size);
void pg_mem_free(void *p);

/* A chunked bump allocator: everything a kernel owns lives here. */
typedef struct arena_chunk arena_chunk;
typedef struct arena {
    arena_chunk *head;
} arena;
void *arena_alloc(arena *a, size_t size);
char *arena_strdup(arena *a, const char *s);
void arena_free_all(arena *a);

/* ---------------------------------------------------------------- op table */

/* name, PTX mnemonic stem, min sm, min PTX ISA */
#define PG_OP_MAP(X)                                                           \
    X(MOV, "mov", 70, 60)                                                      \
    X(SREG, "mov", 70, 60)                                                     \
    X(ADD, "add", 70, 60)                                                      \
    X(SUB, "sub", 70, 60)                                                      \
    X(MUL, "mul", 70, 60)                                                      \
    X(MUL_HI, "mul.hi", 70, 60)                                                \
    X(MUL_WIDE, "mul.wide", 70, 60)                                            \
    X(MAD, "mad.lo", 70, 60)                                                   \
    X(MAD_HI, "mad.hi", 70, 60)                                                \
    X(MAD_WIDE, "mad.wide", 70, 60)                                            \
    X(FMA, "fma.rn", 70, 60)                                                   \
    X(DIV, "div", 70, 60)                                                      \
    X(REM, "rem", 70, 60)                                                      \
    X(RCP, "rcp.rn", 70, 60)                                                   \
    X(SQRT, "sqrt.rn", 70, 60)                                                 \
    X(RSQRT, "rsqrt.approx", 70, 60)                                           \
    X(EX2, "ex2.approx", 70, 60)                                               \
    X(LG2, "lg2.approx", 70, 60)                                               \
    X(MIN, "min", 70, 60)                                                      \
    X(MAX, "max", 70, 60)                                                      \
    X(ABS, "abs", 70, 60)                                                      \
    X(NEG, "neg", 70, 60)                                                      \
    X(AND, "and", 70, 60)                                                      \
    X(OR, "or", 70, 60)                                                        \
    X(XOR, "xor", 70, 60)                                                      \
    X(NOT, "not", 70, 60)                                                      \
    X(SHL, "shl", 70, 60)                                                      \
    X(SHR, "shr", 70, 60)                                                      \
    X(SETP, "setp", 70, 60)                                                    \
    X(SELP, "selp", 70, 60)                                                    \
    X(CVT, "cvt", 70, 60)                                                      \
    X(LD, "ld", 70, 60)                                                        \
    X(ST, "st", 70, 60)                                                        \
    X(ATOM, "atom", 70, 60)                                                    \
    X(SHFL, "shfl.sync", 70, 60)                                               \
    X(VOTE, "vote.sync", 70, 60)                                               \
    X(BAR, "bar.sync", 70, 60)                                                 \
    X(BAR_WARP, "bar.warp.sync", 70, 60)                                       \
    X(MEMBAR, "membar", 70, 60)                                                \
    X(FENCE, "fence", 70, 60)                                                  \
    X(BRA, "bra", 70, 60)                                                      \
    X(RET, "ret", 70, 60)                                                      \
    X(EXIT, "exit", 70, 60)                                                    \
    X(LABEL, "", 70, 60)                                                       \
    X(COMMENT, "//", 70, 60)                                                   \
    X(MMA, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", 80, 70)         \
    X(LDMATRIX, "ldmatrix.sync.aligned.m8n8", 75, 65)                          \
    X(CP_ASYNC, "cp.async", 80, 70)                                            \
    X(CP_COMMIT, "cp.async.commit_group", 80, 70)                              \
    X(CP_WAIT, "cp.async.wait_group", 80, 70)

typedef enum pg_opcode {
#define PG_X_(e, s, sm, isa) OP_##e,
    PG_OP_MAP(PG_X_)
#undef PG_X_
    OP_COUNT
} pg_opcode;

typedef struct pg_op_info {
    const char *stem;
    unsigned min_sm;
    unsigned min_isa;
} pg_op_info;
extern const pg_op_info pg_op_table[OP_COUNT];

/* ---------------------------------------------------------------- records */

/* Register classes: one `.reg` line and one name prefix each. */
typedef enum reg_class {
    RC_PRED, RC_B16, RC_H, RC_B32, RC_F32, RC_B64, RC_F64, RC_COUNT
} reg_class;

typedef struct reg_info {
    uint8_t type;  /* pg_type */
    uint8_t cls;   /* reg_class */
    uint32_t num;  /* number within its class, from 1 */
} reg_info;

typedef struct param_info {
    char *name;
    uint8_t type;
} param_info;

typedef struct label_info {
    char *hint;
    int64_t bound_at; /* instruction index of the LABEL record, -1 if unbound */
    uint32_t num;     /* 1, 2, ... in the order labels are bound */
} label_info;

typedef struct shared_info {
    char *name;
    uint8_t type;
    bool dynamic;
    uint32_t count, align;
} shared_info;

#define PG_MAX_DST 4
#define PG_MAX_SRC 10

typedef struct instr {
    uint16_t op;       /* pg_opcode */
    uint8_t type;      /* instruction type */
    uint8_t type2;     /* cvt source type */
    uint8_t mod;       /* cmp, rnd, space, shfl/vote mode, scope, sreg */
    uint8_t mod2;      /* atom op; fence sc; ld nc; ldmatrix trans */
    uint8_t width;     /* vector width of ld/st */
    uint8_t ndst, nsrc;
    bool guard_neg;
    bool src_neg;      /* vote: negated predicate */
    uint32_t guard;    /* predicate register id, 0 = none */
    uint32_t label;    /* bra target / bound label */
    uint32_t imm;      /* bar id; comment string index */
    int64_t offset;    /* address offset in bytes */
    int64_t offset2;   /* cp.async: the global source's offset */
    const char *text;  /* comment text (arena) */
    pg_val dst[PG_MAX_DST];
    pg_val src[PG_MAX_SRC]; /* ld/st/atom: src[0] is the address */
} instr;

#define PG_MSG_MAX 512

struct pg_kernel {
    arena mem;
    char *name;
    pg_target target;
    unsigned isa;
    int err;
    char msg[PG_MSG_MAX];
    bool emitted;
    const char *text;
    size_t text_len;
    uint32_t maxntid[3];

    reg_info *regs; /* index 0 unused */
    uint32_t nregs, cap_regs;
    uint32_t class_count[RC_COUNT];

    param_info *params;
    uint32_t nparams, cap_params;

    label_info *labels; /* index 0 unused */
    uint32_t nlabels, cap_labels;
    uint32_t nbound; /* labels are numbered in the order they are bound */

    shared_info *shared; /* index 0 unused */
    uint32_t nshared, cap_shared;

    instr *ins;
    uint32_t nins, cap_ins;

    bool has_guard, guard_neg;
    uint32_t guard;
};

/* Record the first error (sticky) with a formatted message. Returns err. */
int pg_fail(pg_kernel *k, int err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Grow a typed array stored in the arena. */
int pg_grow(pg_kernel *k, void **arr, uint32_t *cap, uint32_t need, size_t elem);

/* Append an instruction; returns NULL after an error. Applies a pending
 * guard and the op's target requirements. */
instr *pg_push(pg_kernel *k, pg_opcode op, pg_type t);
/* Raise the kernel's ISA / check the target for a feature. */
bool pg_require(pg_kernel *k, unsigned sm, unsigned isa, const char *what);

const char *pg_sreg_name(pg_sreg s);
const char *pg_reg_prefix(reg_class c);
const char *pg_reg_decl_type(reg_class c);
reg_class pg_type_class(pg_type t);

/* Validation (validate.c) and text (emit.c). */
int pg_validate(pg_kernel *k);
int pg_emit_text(pg_kernel *k);

/* One instruction as text, for messages. */
void pg_instr_text(const pg_kernel *k, const instr *in, char *buf, size_t n);

/* Name of operand for messages: "%r3", "42", "0f3F800000". */
void pg_val_format(const pg_kernel *k, pg_val v, pg_type t, char *buf, size_t n);

#endif /* PTXGEN_INTERNAL_H */
