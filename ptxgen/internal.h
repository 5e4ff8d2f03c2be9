/* SPDX-License-Identifier: MIT */
/*
 * Private to ptxgen/: the kernel record, the op table and the arena.
 * Layers, each file calling only those above it (the unit test
 * ptxgen-layers checks it on the objects' symbols):
 *   mem.c       allocator, arena
 *   error.c     error names, pg_fail and the kernel's message
 *   tables.c    targets, types, the op table
 *   format.c    text of operands and instructions, every op's line
 *   builder.c   recording, the kernel's directives
 *   hopper.c    the sm_90 instructions' builders     (on builder.c)
 *   idioms.c    loops, guards, reductions            (on builder.c)
 *   validate.c  whole-kernel checks                  (on format.c for messages)
 *   emit.c      the module text                      (on validate.c, format.c)
 */
#ifndef PTXGEN_INTERNAL_H
#define PTXGEN_INTERNAL_H

#include "ptxgen/ptxgen.h"

#include <stdarg.h>

/* ---------------------------------------------------------------- memory (mem.c) */

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

/* Instruction type classes: which .type suffixes an instruction takes. */
enum {
    TC_PRED = 1 << 0, TC_BIT = 1 << 1, TC_UINT = 1 << 2, TC_SINT = 1 << 3,
    TC_F16 = 1 << 4, TC_BF16 = 1 << 5, TC_F32 = 1 << 6, TC_F64 = 1 << 7, TC_8BIT = 1 << 8,
};
#define TC_INT (TC_UINT | TC_SINT)
#define TC_FLOAT (TC_F16 | TC_BF16 | TC_F32 | TC_F64)
#define TC_ANY (TC_PRED | TC_BIT | TC_INT | TC_FLOAT)
#define TC_MEM (TC_BIT | TC_INT | TC_FLOAT | TC_8BIT)
#define TC_NONE 0

/* The class of one type (TC_8BIT for b8/u8/s8); 0 for an invalid type. */
unsigned pg_type_tc(pg_type t);

/* Register classes: one `.reg` line and one name prefix each. */
typedef enum reg_class {
    RC_PRED, RC_B16, RC_H, RC_B32, RC_F32, RC_B64, RC_F64, RC_COUNT
} reg_class;

/* Everything asked of a type, in one row (tables.c): the public
 * pg_type_name, pg_type_bits, ... read it, and the builder's checks and
 * the formatter, which ask several times per operand, read it inline. */
typedef struct pg_type_info {
    const char *name;
    uint8_t name_len;
    uint8_t bits;      /* 1 for pred */
    uint16_t tc;       /* TC_* */
    uint8_t cls;       /* reg_class the registers of this type take */
    bool is_float, is_signed;
    bool is_bits;      /* b16, b32, b64: any type of that width */
} pg_type_info;
extern const pg_type_info pg_type_table[PG_TYPE_COUNT];

/* t must be valid (< PG_TYPE_COUNT): every recorded type is. */
static inline const pg_type_info *pg_type_row(pg_type t) { return &pg_type_table[t]; }

/* How an instruction is written (format.c). The plain forms are
 * "stem<suffixes> d, a[, b[, c]]" with every operand of the instruction
 * type, or the bare stem for NONE. */
typedef enum pg_text_form {
    TX_PLAIN,    /* stem.type                          mul.hi.u32, fma.rn.f32 */
    TX_FROUND,   /* stem.rn.type for floats, else stem.type       add, div    */
    TX_FROUND_LO,/* stem.rn.type for floats, else stem.lo.type    mul         */
    TX_BITS,     /* stem.bN / stem.pred                   and, or, xor, not   */
    TX_DATA,     /* stem.type, f16/bf16 as b16 (moves bits)       mov         */
    TX_NONE,     /* the stem alone                        ret, exit           */
    TX_FMT,      /* the stem, then the row's format string (below)            */
    TX_CUSTOM,   /* its own case in format.c: vectors of registers, operands
                    or stems that the record's fields choose (mma, wgmma,
                    ldmatrix, atom/red)                                       */
} pg_text_form;

/*
 * A TX_FMT row's format is what follows the stem. Its head, up to the first
 * space, reads only the record's type, type2, mod, mod2 and width (the
 * formatter keeps heads by them), but for %u:
 *   %t .type      %2 .type2 (cvt's source)     %b .type as bits (.pred .b32)
 *   %m .type as data, f16/bf16 as .b16 (ld, st) %k shr's: .bN of a bit type,
 *                                                 else .sN / .uN
 *   %c .cmp (mod) %r the rounding (mod; nothing for none)   %s .space (mod)
 *   %y membar's level (mod)   %e .scope (mod)   %n .nc if mod2
 *   %v .vN for a width above 1   %{a|b} a if mod2, else b
 *   %u .uni unless the line is guarded (an unguarded branch is uniform)
 * Operands: a place, then the type its immediate is written in:
 *   %d dst[0]   %0 .. %9 src[i]   %D the width destinations as a vector
 *   %V the width sources from src[1] as a vector ("{a, b}"; "a" for one)
 * and the type: t the instruction's, w twice its width (mul.wide), 2 type2,
 * h half of it (b16; b32 of b64), z t but u16 for a byte (st), p pred,
 * u u32, U u64, b b32, f f32. The rest take no type:
 *   %a [src[0]+offset], or [name] of the param an ld of the param space
 *      reads   %i imm   %o offset   %P the param imm names
 *   %S the special register (mod)   %L the label
 * Any other character is itself.
 */

/* Control-flow and uniformity flags. */
enum {
    OPF_TERM = 1 << 0,         /* ends a basic block: bra, ret, exit */
    OPF_BARRIER = 1 << 1,      /* a block-wide barrier: every thread or none */
    OPF_LANE_VARYING = 1 << 2, /* the result differs between threads whatever
                                  the operands: atom, shfl, vote, ldmatrix */
    OPF_ARCH_90A = 1 << 3,     /* only the sm_90a target has it: wgmma */
    OPF_ARCH_A = 1 << 4,       /* only the arch-specific ("a") targets: setmaxnreg */
    OPF_ALIGNED = 1 << 5,      /* .sync.aligned for a warpgroup or warp: never
                                  under a branch that splits a warp */
};

/* The op table: the one place that says, for each instruction,
 *   name, PTX mnemonic stem, the type classes it takes, its text form and
 *   format (above), its flags, and the lowest sm and PTX ISA that have it.
 * Per-type target rules (bf16 arithmetic needs sm_90, ...) and the operand
 * shapes live with their builders in builder.c and hopper.c. */
#define PG_OP_MAP(X)                                                                            \
    X(MOV, "mov", TC_ANY, TX_DATA, NULL, 0, 70, 60)                                             \
    X(SREG, "mov.u32", TC_UINT, TX_FMT, " %dt, %S", 0, 70, 60)                                  \
    X(ADD, "add", TC_INT | TC_FLOAT, TX_FROUND, NULL, 0, 70, 60)                                \
    X(SUB, "sub", TC_INT | TC_FLOAT, TX_FROUND, NULL, 0, 70, 60)                                \
    X(MUL, "mul", TC_INT | TC_FLOAT, TX_FROUND_LO, NULL, 0, 70, 60)                             \
    X(MUL_HI, "mul.hi", TC_INT, TX_PLAIN, NULL, 0, 70, 60)                                      \
    X(MUL_WIDE, "mul.wide", TC_INT, TX_FMT, "%t %dw, %0t, %1t", 0, 70, 60)                      \
    X(MAD, "mad.lo", TC_INT, TX_PLAIN, NULL, 0, 70, 60)                                         \
    X(MAD_HI, "mad.hi", TC_INT, TX_PLAIN, NULL, 0, 70, 60)                                      \
    X(MAD_WIDE, "mad.wide", TC_INT, TX_FMT, "%t %dw, %0t, %1t, %2w", 0, 70, 60)                 \
    X(FMA, "fma.rn", TC_FLOAT, TX_PLAIN, NULL, 0, 70, 60)                                       \
    X(DIV, "div", TC_INT | TC_F32 | TC_F64, TX_FROUND, NULL, 0, 70, 60)                         \
    X(REM, "rem", TC_INT, TX_PLAIN, NULL, 0, 70, 60)                                            \
    X(RCP, "rcp.rn", TC_F32 | TC_F64, TX_PLAIN, NULL, 0, 70, 60)                                \
    X(SQRT, "sqrt.rn", TC_F32 | TC_F64, TX_PLAIN, NULL, 0, 70, 60)                              \
    X(RSQRT, "rsqrt.approx", TC_F32 | TC_F64, TX_PLAIN, NULL, 0, 70, 60)                        \
    X(EX2, "ex2.approx", TC_F32, TX_PLAIN, NULL, 0, 70, 60)                                     \
    X(LG2, "lg2.approx", TC_F32, TX_PLAIN, NULL, 0, 70, 60)                                     \
    X(MIN, "min", TC_INT | TC_FLOAT, TX_PLAIN, NULL, 0, 70, 60)                                 \
    X(MAX, "max", TC_INT | TC_FLOAT, TX_PLAIN, NULL, 0, 70, 60)                                 \
    X(ABS, "abs", TC_SINT | TC_FLOAT, TX_PLAIN, NULL, 0, 70, 60)                                \
    X(NEG, "neg", TC_SINT | TC_FLOAT, TX_PLAIN, NULL, 0, 70, 60)                                \
    X(AND, "and", TC_PRED | TC_BIT | TC_INT, TX_BITS, NULL, 0, 70, 60)                          \
    X(OR, "or", TC_PRED | TC_BIT | TC_INT, TX_BITS, NULL, 0, 70, 60)                            \
    X(XOR, "xor", TC_PRED | TC_BIT | TC_INT, TX_BITS, NULL, 0, 70, 60)                          \
    X(NOT, "not", TC_PRED | TC_BIT | TC_INT, TX_BITS, NULL, 0, 70, 60)                          \
    X(SHL, "shl", TC_BIT | TC_INT, TX_FMT, "%b %dt, %0t, %1u", 0, 70, 60)                       \
    X(SHR, "shr", TC_BIT | TC_INT, TX_FMT, "%k %dt, %0t, %1u", 0, 70, 60)                       \
    X(SETP, "setp", TC_BIT | TC_INT | TC_FLOAT, TX_FMT, "%c%t %dp, %0t, %1t", 0, 70, 60)        \
    X(SELP, "selp", TC_BIT | TC_INT | TC_F32 | TC_F64, TX_FMT, "%t %dt, %0t, %1t, %2p", 0,      \
      70, 60)                                                                                   \
    X(CVT, "cvt", TC_INT | TC_FLOAT | TC_8BIT, TX_FMT, "%r%t%2 %dt, %02", 0, 70, 60)            \
    X(PACK, "mov", TC_BIT, TX_FMT, "%t %dt, {%0h, %1h}", 0, 70, 60)                             \
    X(CVT_PACK, "cvt.rn", TC_FLOAT, TX_FMT, "%tx2.f32 %db, %0f, %1f", 0, 80, 70)                \
    X(LD, "ld", TC_MEM, TX_FMT, "%s%n%v%m %Dt, %a", 0, 70, 60)                                  \
    X(ST, "st", TC_MEM, TX_FMT, "%s%v%m %a, %Vz", 0, 70, 60)                                    \
    X(ATOM, "atom", TC_BIT | TC_INT | TC_F32 | TC_F64, TX_CUSTOM, NULL, OPF_LANE_VARYING, 70,   \
      60)                                                                                       \
    X(SHFL, "shfl.sync", TC_BIT, TX_CUSTOM, NULL, OPF_LANE_VARYING, 70, 60)                     \
    X(VOTE, "vote.sync", TC_PRED | TC_BIT, TX_CUSTOM, NULL, OPF_LANE_VARYING, 70, 60)           \
    X(BAR, "bar.sync", TC_NONE, TX_FMT, " %i", OPF_BARRIER, 70, 60)                             \
    X(BAR_WARP, "bar.warp.sync", TC_BIT, TX_FMT, " %0b", 0, 70, 60)                             \
    X(MEMBAR, "membar", TC_NONE, TX_FMT, "%y", 0, 70, 60)                                       \
    X(FENCE, "fence", TC_NONE, TX_FMT, ".%{sc|acq_rel}%e", 0, 70, 60)                           \
    X(BRA, "bra", TC_NONE, TX_FMT, "%u %L", OPF_TERM, 70, 60)                                   \
    X(RET, "ret", TC_NONE, TX_NONE, NULL, OPF_TERM, 70, 60)                                     \
    X(EXIT, "exit", TC_NONE, TX_NONE, NULL, OPF_TERM, 70, 60)                                   \
    X(LABEL, "", TC_NONE, TX_CUSTOM, NULL, 0, 70, 60)                                           \
    X(COMMENT, "//", TC_NONE, TX_CUSTOM, NULL, 0, 70, 60)                                       \
    X(MMA, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", TC_F32, TX_CUSTOM, NULL, 0,     \
      80, 70)                                                                                   \
    X(MMA_BF16, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", TC_F32, TX_CUSTOM,       \
      NULL, 0, 80, 70)                                                                          \
    X(LDMATRIX, "ldmatrix.sync.aligned.m8n8", TC_BIT, TX_CUSTOM, NULL, OPF_LANE_VARYING, 75,    \
      65)                                                                                       \
    X(CP_ASYNC, "cp.async", TC_8BIT, TX_CUSTOM, NULL, 0, 80, 70)                                \
    X(CP_COMMIT, "cp.async.commit_group", TC_NONE, TX_NONE, NULL, 0, 80, 70)                    \
    X(CP_WAIT, "cp.async.wait_group", TC_NONE, TX_FMT, " %i", 0, 80, 70)                        \
    PG_OP_MAP_SM90(X)

/* The Hopper rows (hopper.c builds them): a counted named
 * barrier and its arrive, a parameter's address, mbarriers, the async proxy,
 * TMA, warpgroup MMA, register reallocation, stmatrix, elect. Each min sm /
 * ISA checked with ptxas 13.0, one lower refused. */
#define PG_OP_MAP_SM90(X)                                                                       \
    X(BAR_N, "bar.sync", TC_NONE, TX_FMT, " %i, %o", OPF_BARRIER, 70, 60)                       \
    X(BAR_ARRIVE, "bar.arrive", TC_NONE, TX_FMT, " %i, %o", OPF_BARRIER, 70, 60)                \
    X(CVTA_PARAM, "cvta.param.u64", TC_BIT | TC_UINT, TX_FMT, " %dU, %P", 0, 70, 77)            \
    X(MBAR_INIT, "mbarrier.init.shared::cta.b64", TC_NONE, TX_FMT, " %a, %1u", 0, 80, 78)       \
    X(MBAR_ARRIVE, "mbarrier.arrive.shared::cta.b64", TC_NONE, TX_FMT, " _, %a", 0, 80, 78)     \
    X(MBAR_EXPECT_TX, "mbarrier.arrive.expect_tx.shared::cta.b64", TC_NONE, TX_FMT,             \
      " _, %a, %1u", 0, 90, 80)                                                                 \
    X(MBAR_TRY_WAIT, "mbarrier.try_wait.parity.shared::cta.b64", TC_PRED, TX_FMT,               \
      " %dp, %a, %1u", OPF_LANE_VARYING, 90, 78)                                                \
    X(FENCE_PROXY_ASYNC, "fence.proxy.async.shared::cta", TC_NONE, TX_NONE, NULL, 0, 90, 80)    \
    X(FENCE_MBAR_INIT, "fence.mbarrier_init.release.cluster", TC_NONE, TX_NONE, NULL, 0, 90,    \
      80)                                                                                       \
    X(TMA_LOAD, "cp.async.bulk.tensor", TC_NONE, TX_CUSTOM, NULL, 0, 90, 80)                    \
    X(BULK_COMMIT, "cp.async.bulk.commit_group", TC_NONE, TX_NONE, NULL, 0, 90, 80)             \
    X(BULK_WAIT, "cp.async.bulk.wait_group", TC_NONE, TX_FMT, " %i", 0, 90, 80)                 \
    X(SETMAXNREG, "setmaxnreg", TC_NONE, TX_FMT, ".%{inc|dec}.sync.aligned.u32 %i",             \
      OPF_ARCH_A | OPF_ALIGNED, 90, 80)                                                         \
    X(STMATRIX, "stmatrix.sync.aligned.m8n8", TC_BIT, TX_CUSTOM, NULL, OPF_ALIGNED, 90, 78)     \
    X(ELECT, "elect.sync", TC_PRED, TX_FMT, " _|%dp, %0u", OPF_LANE_VARYING, 90, 80)            \
    X(WGMMA_FENCE, "wgmma.fence.sync.aligned", TC_NONE, TX_NONE, NULL,                          \
      OPF_ARCH_90A | OPF_ALIGNED, 90, 80)                                                       \
    X(WGMMA_COMMIT, "wgmma.commit_group.sync.aligned", TC_NONE, TX_NONE, NULL,                  \
      OPF_ARCH_90A | OPF_ALIGNED, 90, 80)                                                       \
    X(WGMMA_WAIT, "wgmma.wait_group.sync.aligned", TC_NONE, TX_FMT, " %i",                      \
      OPF_ARCH_90A | OPF_ALIGNED, 90, 80)                                                       \
    X(WGMMA, "wgmma.mma_async.sync.aligned", TC_F32, TX_CUSTOM, NULL,                           \
      OPF_LANE_VARYING | OPF_ARCH_90A | OPF_ALIGNED, 90, 80)

typedef enum pg_opcode {
#define PG_X_(e, stem, tc, form, fmt, flags, sm, isa) OP_##e,
    PG_OP_MAP(PG_X_)
#undef PG_X_
    OP_COUNT
} pg_opcode;

typedef struct pg_op_info {
    const char *stem;
    uint8_t stem_len;
    unsigned classes; /* TC_* */
    uint8_t form;     /* pg_text_form */
    const char *fmt;  /* TX_FMT: what follows the stem; NULL otherwise */
    uint8_t flags;    /* OPF_* */
    unsigned min_sm;
    unsigned min_isa;
} pg_op_info;
extern const pg_op_info pg_op_table[OP_COUNT];

static inline unsigned pg_op_flags(pg_opcode op) { return pg_op_table[op].flags; }

/* ---------------------------------------------------------------- records */

typedef struct reg_info {
    uint8_t type;  /* pg_type */
    uint8_t cls;   /* reg_class */
    uint32_t num;  /* number within its class, from 1 */
} reg_info;

typedef struct param_info {
    char *name;
    uint8_t type;
    bool tensor_map; /* `.param .align 64 .b8 name[128]` (type is b8) */
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
    /* wgmma: the accumulators, each read (unless scale-d is 0) and written;
     * too many for dst[] (up to 128). Arena-owned; NULL elsewhere: only an
     * OP_WGMMA record has them, and the validator reads nacc of those alone. */
    pg_val *acc;
    uint32_t nacc;
} instr;

#define PG_MSG_MAX 512

struct pg_kernel {
    arena mem;
    uint32_t tag; /* in every handle this kernel gives out */
    char *name;
    pg_target target;
    unsigned sm;  /* the target's, asked of every instruction */
    unsigned isa;
    int err;
    char msg[PG_MSG_MAX];
    bool emitted;
    char *text; /* the emitted module (heap; pg_kernel_destroy frees it) */
    size_t text_len;
    uint32_t maxntid[3];
    uint32_t minnctapersm; /* 0: no directive */
    /* setmaxnreg (hopper.c): the largest count an .inc asks for and the
     * largest a .dec does (0: none), and that .dec's instruction */
    uint32_t maxnreg_inc, maxnreg_dec, maxnreg_dec_at;

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

    /* While the text is written (pg_emit_text), NULL otherwise: each
     * register's name, NUL-padded with its length in the last byte, and
     * the last head ("add.u32", "setp.lt.s32") written for each op and
     * type (format.c). */
    const char (*reg_text)[16];
    struct pg_text_cache *head_text;

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

/* The most a setmaxnreg.dec may ask for given the kernel's .inc counts,
 * .maxntid and .minnctapersm; 0 for no limit. */
unsigned pg_maxnreg_limit(const pg_kernel *k);

/* Whether a label / shared address is one of this kernel's. */
bool pg_label_ok(const pg_kernel *k, pg_label l);
bool pg_shared_ok(const pg_kernel *k, pg_val v);

/* Grow a typed array stored on the heap (pg_kernel_destroy frees the
 * kernel's arrays); the new tail is zeroed. */
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

/* Validation (validate.c) and the module text (emit.c). */
int pg_validate(pg_kernel *k);
int pg_emit_text(pg_kernel *k);

/* ---------------------------------------------------------------- text (format.c) */

/* A growing NUL-terminated buffer; `oom` is sticky. Free p with pg_mem_free. */
typedef struct pg_sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} pg_sbuf;
/* Room for n more bytes; false once out of memory. */
bool pg_sb_reserve(pg_sbuf *b, size_t n);
void pg_sb_put(pg_sbuf *b, const char *s, size_t n);
void pg_sb_str(pg_sbuf *b, const char *s);
void pg_sb_fmt(pg_sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Set up k->reg_text and k->head_text for the emitter (in the arena);
 * pg_text_end clears them. */
int pg_text_begin(pg_kernel *k);
void pg_text_end(pg_kernel *k);
/* One instruction as its PTX line, tab-indented, with ";\n". */
void pg_format_instr(pg_sbuf *b, const pg_kernel *k, const instr *in);
/* One instruction as text, for messages ("add.u32 %r1, %r2, 3"). */
void pg_instr_text(const pg_kernel *k, const instr *in, char *buf, size_t n);
/* An operand as PTX: "%r3", "42", "0f3F800000". */
void pg_val_format(const pg_kernel *k, pg_val v, pg_type t, char *buf, size_t n);
/* A label's name: "$L3_loop". */
void pg_label_format(pg_sbuf *b, const pg_kernel *k, uint32_t id);
/* ld/st/mov have no f16/bf16 forms: they move bits ("b16"). */
const char *pg_data_type_name(pg_type t);
/* "add", "cas", ...; "?" if invalid. */
const char *pg_atom_name(pg_atom_op op);
/* "bfly", "ballot", "global": the modifiers of shfl, vote, ld/st; "?" if
 * invalid. */
const char *pg_shfl_name(pg_shfl_mode m);
const char *pg_vote_name(pg_vote_mode m);
const char *pg_space_name(pg_space s);

#endif /* PTXGEN_INTERNAL_H */
