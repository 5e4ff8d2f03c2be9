/* SPDX-License-Identifier: MIT */
/*
 * Every instruction form the builder accepts, for one target, in one kernel:
 *     ptx_matrix TARGET [REFUSED]   PTX on standard output
 *     ptx_matrix --targets          the target names, one a line
 * Each call is first tried on a scratch kernel; a call the builder refuses
 * there is left out, a call it accepts goes into the kernel that is written.
 * matrix_check.sh assembles the result with ptxas, so that the builder's
 * rules and the assembler's cannot disagree: a form the builder accepts and
 * ptxas rejects fails the test, naming the line.
 *
 * The enumeration walks the public API: every arithmetic op x every type
 * (register and immediate operands), setp x comparison x type, cvt x
 * destination x source x rounding, pack and cvt-pack x type x operand
 * type, ld/st x space x type x width, atom x
 * space x operation x type, and the warp, barrier, tensor-core and async
 * forms with each of their modes. Then every operand of every form the
 * builder takes, the Hopper ones included, with every operand class (see
 * "operand classes" below). With REFUSED, the classes the builder refuses
 * are written there as text for ptxas to judge, and REFUSED.idx says
 * which lines are which.
 */
#include "ptxgen/ptxgen.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The registers every case reads, made once a kernel. */
typedef struct env {
    pg_reg ptr;                 /* u64 global pointer */
    pg_reg src[PG_TYPE_COUNT];  /* one written register a type (8-bit: 16-bit) */
    pg_reg alt[PG_TYPE_COUNT];  /* a second one (the operand-class cases) */
    pg_reg saddr;               /* u32 shared address */
    pg_shared smem;
    pg_param param[PG_TYPE_COUNT]; /* one of every type but pred */
} env;

typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (b->len + n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            fprintf(stderr, "ptx_matrix: out of memory\n");
            exit(1);
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* One refused class: its lines in the refused file (counted from the first
 * line of the candidates), the operand and class it stands for, and
 * whether the builder refused every type of that declared class there. */
typedef struct cand {
    unsigned first, last;
    unsigned group;
    bool strict;
} cand;

typedef struct classes {
    unsigned setup_lines; /* lines of an emitted kernel with only the setup */
    unsigned tried, kept, refused;
    sbuf text;            /* the refused forms' lines */
    unsigned lines;
    cand *cands;
    unsigned ncands, capcands, groups;
} classes;

typedef struct matrix {
    pg_target target;
    pg_kernel *out;   /* the kernel written */
    env out_env;
    pg_kernel *probe; /* scratch; made again after a refused call */
    env probe_env;
    unsigned tried, kept;
    const char *refused_out; /* where the refused operand classes go, or NULL */
    classes cls;             /* the operand-class cases */
} matrix;

static pg_type reg_type_for(pg_type t)
{
    if (pg_type_bits(t) == 8)
        return pg_type_is_signed(t) ? PG_S16 : PG_U16;
    return t;
}

static int setup(pg_kernel **kp, env *e, pg_target target)
{
    pg_kernel *k = NULL;
    int rc = pg_kernel_create(&k, "matrix", target);
    if (rc)
        return rc;
    memset(e, 0, sizeof *e);
    /* one param of every type, loaded by the param case */
    pg_param p = pg_param_add(k, PG_U64, "p");
    for (int t = 1; t < PG_TYPE_COUNT; t++) {
        char name[16];
        snprintf(name, sizeof name, "p_%s", pg_type_name((pg_type)t));
        e->param[t] = pg_param_add(k, (pg_type)t, name);
    }
    e->ptr = pg_param_load(k, p);
    for (int t = 1; t < PG_TYPE_COUNT; t++)
        e->src[t] = pgv_ld(k, PG_SPACE_GLOBAL, (pg_type)t, e->ptr, 0);
    for (int t = 1; t < PG_TYPE_COUNT; t++)
        e->alt[t] = pgv_ld(k, PG_SPACE_GLOBAL, (pg_type)t, e->ptr, 0);
    e->src[PG_PRED] = pgv_setp(k, PG_CMP_EQ, PG_U32, e->src[PG_U32], pg_u32(0));
    e->alt[PG_PRED] = pgv_setp(k, PG_CMP_EQ, PG_U32, e->alt[PG_U32], pg_u32(0));
    e->smem = pg_shared_static(k, PG_B32, 256, 16, "buf");
    e->saddr = pgv_mov(k, PG_U32, pg_shared_addr(e->smem));
    *kp = k;
    return pg_kernel_error(k);
}

/* The immediate operands tried: 1 an ordinary value, 2 the extreme one
 * (all ones, the most negative, the largest float). */
static pg_val imm_extreme(pg_type t)
{
    switch (t) {
    case PG_F32: return pg_f32(-3.4028235e38f);
    case PG_F64: return pg_f64(-1.7976931348623157e308);
    case PG_S16: return pg_s32(-32768);
    case PG_S32: return pg_s32(INT32_MIN);
    case PG_S64: return pg_s64(INT64_MIN);
    case PG_B16: case PG_U16: return pg_u32(0xffff);
    case PG_B32: case PG_U32: return pg_s32(-1); /* a negative number of the width */
    default: return pg_u64(UINT64_MAX);
    }
}

static pg_val imm_of(pg_type t)
{
    switch (t) {
    case PG_F32: return pg_f32(1.5f);
    case PG_F64: return pg_f64(2.5);
    case PG_F16: case PG_BF16: return pg_f32(1.5f); /* refused: no 16-bit float immediates */
    case PG_S8: case PG_S16: case PG_S32: case PG_S64: return pg_s32(-3);
    default: return pg_u32(3);
    }
}

static pg_type wide_of(pg_type t)
{
    switch (t) {
    case PG_U16: return PG_U32;
    case PG_S16: return PG_S32;
    case PG_U32: return PG_U64;
    case PG_S32: return PG_S64;
    default: return PG_U64;
    }
}

/* One case: a call made the same way on the scratch and the real kernel. */
typedef void (*case_fn)(pg_kernel *k, const env *e, const int *arg);

static void try_case(matrix *m, case_fn fn, const int *arg)
{
    m->tried++;
    fn(m->probe, &m->probe_env, arg);
    if (pg_kernel_error(m->probe)) {
        pg_kernel_destroy(&m->probe);
        setup(&m->probe, &m->probe_env, m->target);
        return;
    }
    fn(m->out, &m->out_env, arg);
    m->kept++;
}

#define TRY(m, fn, ...)                                                        \
    do {                                                                       \
        const int a_[] = {__VA_ARGS__};                                        \
        try_case(m, fn, a_);                                                   \
    } while (0)

/* ---------------------------------------------------------------- cases */

typedef pg_reg (*op1_fn)(pg_kernel *, pg_type, pg_val);
typedef pg_reg (*op2_fn)(pg_kernel *, pg_type, pg_val, pg_val);
typedef pg_reg (*op3_fn)(pg_kernel *, pg_type, pg_val, pg_val, pg_val);

static const op1_fn ops1[] = {pgv_mov, pgv_rcp, pgv_sqrt, pgv_rsqrt, pgv_ex2, pgv_lg2,
                              pgv_abs, pgv_neg, pgv_not};
static const op2_fn ops2[] = {pgv_add, pgv_sub, pgv_mul, pgv_mul_hi, pgv_mul_wide, pgv_div,
                              pgv_rem, pgv_min, pgv_max, pgv_and, pgv_or, pgv_xor,
                              pgv_shl, pgv_shr};
static const op3_fn ops3[] = {pgv_mad, pgv_mad_hi, pgv_mad_wide, pgv_fma};
#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

/* Operand `which` (0 a register, 1 an ordinary immediate, 2 an extreme
 * one) of type t. */
static pg_val operand(const env *e, pg_type t, int which)
{
    return which == 0 ? e->src[t] : which == 1 ? imm_of(t) : imm_extreme(t);
}

/* arg: op, type, immediate operand (0 none, 1, 2), immediates first? */
static void c_op1(pg_kernel *k, const env *e, const int *a)
{
    pg_type t = (pg_type)a[1];
    ops1[a[0]](k, t, operand(e, t, a[2]));
}

static void c_op2(pg_kernel *k, const env *e, const int *a)
{
    pg_type t = (pg_type)a[1];
    op2_fn f = ops2[a[0]];
    pg_val b = operand(e, t, a[2]);
    if (f == pgv_shl || f == pgv_shr)
        b = operand(e, PG_U32, a[2] ? 1 : 0);
    if (a[3])
        f(k, t, operand(e, t, a[2]), a[2] ? e->src[t] : b);
    else
        f(k, t, e->src[t], b);
}

static void c_op3(pg_kernel *k, const env *e, const int *a)
{
    pg_type t = (pg_type)a[1];
    op3_fn f = ops3[a[0]];
    pg_val c = f == pgv_mad_wide ? e->src[wide_of(t)] : e->src[t];
    if (a[3])
        f(k, t, operand(e, t, a[2]), e->src[t], c);
    else
        f(k, t, e->src[t], operand(e, t, a[2]), a[2] && f != pgv_mad_wide ? operand(e, t, a[2]) : c);
}

static void c_setp(pg_kernel *k, const env *e, const int *a)
{
    pg_type t = (pg_type)a[1];
    if (a[3])
        pgv_setp(k, (pg_cmp)a[0], t, operand(e, t, a[2]), e->src[t]);
    else
        pgv_setp(k, (pg_cmp)a[0], t, e->src[t], operand(e, t, a[2]));
}

static void c_selp(pg_kernel *k, const env *e, const int *a)
{
    pg_type t = (pg_type)a[0];
    pgv_selp(k, t, operand(e, t, a[1]), operand(e, t, a[1]), e->src[PG_PRED]);
}

static void c_cvt(pg_kernel *k, const env *e, const int *a)
{
    pgv_cvt(k, (pg_type)a[0], (pg_type)a[1], (pg_rnd)a[2], e->src[a[1]]);
}

/* arg: pack type, operand type, immediate halves? (0 pack, 1 cvt_pack) */
static void c_pack(pg_kernel *k, const env *e, const int *a)
{
    pg_type t = (pg_type)a[1], st = (pg_type)a[2];
    pg_val h = a[3] ? imm_of(st) : e->src[st];
    if (a[0])
        pgv_cvt_pack(k, t, e->src[st], h);
    else
        pgv_pack(k, t, e->src[st], h);
}

/* arg: space, type, width, nc, shared-symbol address? */
static void c_ld(pg_kernel *k, const env *e, const int *a)
{
    pg_type t = (pg_type)a[1];
    pg_val addr = a[0] == PG_SPACE_GLOBAL ? e->ptr : a[4] ? pg_shared_addr(e->smem) : e->saddr;
    if (a[3]) {
        pgv_ld_nc(k, t, addr, 0);
        return;
    }
    pg_reg d[4];
    for (int i = 0; i < a[2]; i++)
        d[i] = (unsigned)t < PG_TYPE_COUNT && t != PG_PRED ? pg_reg_new(k, reg_type_for(t))
                                                           : pg_reg_new(k, PG_U32);
    pg_ld_v(k, (pg_space)a[0], t, (unsigned)a[2], addr, 0, d);
}

static void c_st(pg_kernel *k, const env *e, const int *a)
{
    pg_type t = (pg_type)a[1];
    pg_val addr = a[0] == PG_SPACE_GLOBAL ? e->ptr : a[4] ? pg_shared_addr(e->smem) : e->saddr;
    pg_val v[4];
    for (int i = 0; i < a[2]; i++)
        v[i] = a[3] ? imm_of(t) : e->src[t];
    pg_st_v(k, (pg_space)a[0], t, (unsigned)a[2], addr, 0, v);
}

/* arg: space, op, type, with a destination? */
static void c_atom(pg_kernel *k, const env *e, const int *a)
{
    pg_type t = (pg_type)a[2];
    pg_val addr = a[0] == PG_SPACE_GLOBAL ? e->ptr : e->saddr;
    pg_reg d = a[3] ? pg_reg_new(k, t) : pg_none();
    pg_atom(k, (pg_space)a[0], (pg_atom_op)a[1], t, d, addr, 0, e->src[t], e->src[t]);
}

static void c_shfl(pg_kernel *k, const env *e, const int *a)
{
    pg_reg d = pg_reg_new(k, PG_U32);
    pg_reg p = a[1] ? pg_reg_new(k, PG_PRED) : pg_none();
    pg_shfl(k, (pg_shfl_mode)a[0], d, p, e->src[PG_U32], pg_u32(1), pg_u32(31),
            pg_u32(0xffffffffu));
}

static void c_vote(pg_kernel *k, const env *e, const int *a)
{
    pg_reg d = pg_reg_new(k, a[0] == PG_VOTE_BALLOT ? PG_B32 : PG_PRED);
    pg_vote(k, (pg_vote_mode)a[0], d, e->src[PG_PRED], a[1] != 0, pg_u32(0xffffffffu));
}

static void c_sync(pg_kernel *k, const env *e, const int *a)
{
    (void)e;
    switch (a[0]) {
    case 0: pg_bar_sync(k, (uint32_t)a[1]); break;
    case 1: pg_bar_warp_sync(k, 0xffffffffu); break;
    case 2: pg_membar(k, (pg_scope)a[1]); break;
    case 3: pg_fence(k, (pg_scope)a[1], false); break;
    case 4: pg_fence(k, (pg_scope)a[1], true); break;
    case 5: pg_bar_sync_count(k, (uint32_t)a[1], 64); break;
    case 6: pg_bar_arrive(k, (uint32_t)a[1], 64); break;
    }
}

static void c_sreg(pg_kernel *k, const env *e, const int *a)
{
    (void)e;
    pg_sreg_read(k, (pg_sreg)a[0]);
}

static void c_param(pg_kernel *k, const env *e, const int *a)
{
    pg_param_load(k, e->param[a[0]]);
}

static void c_flow(pg_kernel *k, const env *e, const int *a)
{
    pg_label l = pg_label_new(k, "next");
    switch (a[0]) {
    case 0: pg_bra(k, l); break;
    case 1: pg_bra_if(k, e->src[PG_PRED], a[1] != 0, l); break;
    case 2: pg_guard(k, e->src[PG_PRED], a[1] != 0); pg_ret(k); break;
    case 3: pg_guard(k, e->src[PG_PRED], a[1] != 0); pg_exit(k); break;
    }
    pg_label_bind(k, l);
}

static void c_mma(pg_kernel *k, const env *e, const int *a)
{
    (void)a;
    pg_reg d[4], fa[4], fb[2], c[4];
    for (int i = 0; i < 4; i++) {
        d[i] = pg_reg_new(k, PG_F32);
        fa[i] = e->src[PG_B32];
        c[i] = e->src[PG_F32];
    }
    fb[0] = fb[1] = e->src[PG_B32];
    pg_mma_m16n8k16_f16_f32(k, d, fa, fb, c);
}

static void c_ldmatrix(pg_kernel *k, const env *e, const int *a)
{
    pg_reg d[4];
    for (int i = 0; i < a[0]; i++)
        d[i] = pg_reg_new(k, PG_B32);
    pg_ldmatrix(k, (unsigned)a[0], a[1] != 0, d, e->saddr, 0);
}

/* arg: bytes, src-size kind (0 none, 1 register, 2 immediate), immediate */
static void c_cp_async(pg_kernel *k, const env *e, const int *a)
{
    pg_val size = a[1] == 0 ? pg_none() : a[1] == 1 ? e->src[PG_U32] : pg_u32((uint32_t)a[2]);
    pg_cp_async(k, e->saddr, 0, e->ptr, 0, (unsigned)a[0], size);
}

static void c_cp_group(pg_kernel *k, const env *e, const int *a)
{
    (void)e;
    if (a[0] < 0)
        pg_cp_async_commit(k);
    else
        pg_cp_async_wait(k, (uint32_t)a[0]);
}

/* ---------------------------------------------------------------- operand classes */
/*
 * The cases above give each register operand a register of the
 * instruction's own type. The cases below give each operand of a form, one
 * at a time, every other class: a register of each type (pred; b, u and s
 * of 16, 32 and 64 bits; f16, bf16, f32, f64), each kind of immediate
 * (integer, f32, f64) and a shared-memory symbol. The form is the call with every operand of its own
 * class (the "canonical" call); a form the builder refuses even so is left
 * to the cases above. A class the builder accepts goes into the kernel
 * ptxas assembles, like every other case. A class it refuses is written,
 * as text, into a second file: the canonical call's line with that one
 * operand replaced by a register of that class (declared as the builder
 * declares it), the immediate or the symbol, so that matrix_check.sh can count the
 * forms ptxas takes that the builder refuses. The operand is found in the
 * text by emitting the canonical call twice, the second time with another
 * register of the same type in that slot: the tokens that differ are the
 * operand's.
 */

enum { CL_IMM_INT = PG_TYPE_COUNT, CL_IMM_F32, CL_IMM_F64, CL_SHARED, CL_COUNT, CL_ALT = 64 };
/* NKINDS: the declared classes (6), immediates (3) and the shared address
 * decl_kind tells apart */
enum { MAX_SLOTS = 16, NKINDS = 10 };

typedef void (*form_fn)(pg_kernel *k, const env *e, const int *arg, const pg_val *v);

/* 8-bit types have no registers: not a class. */
static bool is_class(int c) { return c >= CL_IMM_INT || pg_type_bits((pg_type)c) != 8; }

/* The operand of class c (or, as c + CL_ALT, the second register of a type). */
static pg_val class_operand(const env *e, int c)
{
    switch (c) {
    case CL_IMM_INT: return pg_u32(3);
    case CL_IMM_F32: return pg_f32(1.5f);
    case CL_IMM_F64: return pg_f64(2.5);
    case CL_SHARED: return pg_shared_addr(e->smem);
    default: return c >= CL_ALT ? e->alt[c - CL_ALT] : e->src[c];
    }
}

/* The class as ptxas sees it: a register by the type it is declared with
 * (.pred .b16 .b32 .f32 .b64 .f64), the kind of immediate, or the shared
 * symbol. */
static int decl_kind(int c)
{
    if (c >= CL_IMM_INT)
        return 6 + (c - CL_IMM_INT);
    pg_type t = (pg_type)c;
    if (t == PG_PRED)
        return 0;
    if (t == PG_F32)
        return 3;
    if (t == PG_F64)
        return 5;
    return pg_type_bits(t) == 16 ? 1 : pg_type_bits(t) == 32 ? 2 : 4;
}

static const char *const kind_decl[6] = {".pred", ".b16", ".b32", ".f32", ".b64", ".f64"};

/* The text an operand of class c is written as in the refused file. */
static const char *class_text(int c, char *buf, size_t n)
{
    switch (c) {
    case CL_IMM_INT: return "3";
    case CL_IMM_F32: return "0f3FC00000";
    case CL_IMM_F64: return "0d4004000000000000";
    case CL_SHARED: return "matrix_buf1"; /* setup's array: "<kernel>_<hint><id>" */
    default: snprintf(buf, n, "%%q_%s", pg_type_name((pg_type)c)); return buf;
    }
}


static void operands(const env *e, const int *cls, unsigned n, pg_val *v)
{
    for (unsigned i = 0; i < n; i++)
        v[i] = class_operand(e, cls[i]);
}

/* The call on the scratch kernel, and on the real one if accepted. */
static bool try_class(matrix *m, form_fn fn, const int *arg, const int *cls, unsigned n, bool keep)
{
    pg_val v[MAX_SLOTS];
    operands(&m->probe_env, cls, n, v);
    fn(m->probe, &m->probe_env, arg, v);
    if (pg_kernel_error(m->probe)) {
        pg_kernel_destroy(&m->probe);
        setup(&m->probe, &m->probe_env, m->target);
        return false;
    }
    if (keep) {
        operands(&m->out_env, cls, n, v);
        fn(m->out, &m->out_env, arg, v);
    }
    return true;
}

/* The call alone on a fresh kernel, emitted: a copy of the text. */
static char *emit_alone(const matrix *m, form_fn fn, const int *arg, const int *cls, unsigned n)
{
    pg_kernel *k = NULL;
    env e;
    if (setup(&k, &e, m->target)) {
        pg_kernel_destroy(&k);
        return NULL;
    }
    char *copy = NULL;
    const char *ptx = NULL;
    size_t len = 0;
    if (fn) {
        pg_val v[MAX_SLOTS];
        operands(&e, cls, n, v);
        fn(k, &e, arg, v);
    }
    if (pg_kernel_emit(k, &ptx, &len) == 0 && (copy = malloc(len + 1)))
        memcpy(copy, ptx, len + 1);
    pg_kernel_destroy(&k);
    return copy;
}

/* Split text into lines in place; returns the count (at most max). */
static unsigned split_lines(char *s, char **line, unsigned max)
{
    unsigned n = 0;
    while (*s && n < max) {
        line[n++] = s;
        char *nl = strchr(s, '\n');
        if (!nl)
            break;
        *nl = '\0';
        s = nl + 1;
    }
    return n;
}

static bool delim(char c) { return c == ' ' || c == ',' || c == '{' || c == '}' || c == '[' ||
                                   c == ']' || c == ';' || c == '\t' || c == '|' || c == '+'; }

/* Line a with every token that differs from line b replaced by repl (a
 * guard's '@' or '!' kept); the number replaced, -1 if the two lines are
 * not the same shape, -2 if the result is not PTX syntax at all (an
 * immediate or a symbol as a guard, a negated predicate, either half of "d|p", or the
 * tensor map of "[tmap, {c...}]"): such a form is left out, as ptxas
 * would stop at it. */
static int substitute(const char *a, const char *b, const char *repl, sbuf *out)
{
    const char *a0 = a;
    int n = 0;
    while (*a || *b) {
        if (delim(*a) || delim(*b) || !*a || !*b) {
            if (*a != *b)
                return -1;
            sb_put(out, a, 1);
            a++, b++;
            continue;
        }
        size_t la = 0, lb = 0;
        while (a[la] && !delim(a[la]))
            la++;
        while (b[lb] && !delim(b[lb]))
            lb++;
        if (la == lb && memcmp(a, b, la) == 0) {
            sb_put(out, a, la);
        } else {
            size_t keep = 0;
            while (keep < la && (a[keep] == '@' || a[keep] == '!'))
                keep++;
            if (repl[0] != '%' && (keep || a[la] == '|' || (a > a0 && a[-1] == '|') ||
                                   (a > a0 && a[-1] == '[' && a[la] == ',')))
                return -2;
            sb_put(out, a, keep);
            sb_str(out, repl);
            n++;
        }
        a += la;
        b += lb;
    }
    return n;
}

enum { MAX_LINES = 4096 };

/* Write the refused classes of slots [slot, slot + count) as text: the
 * canonical call's lines with those slots' tokens replaced. */
static void write_refused(matrix *m, form_fn fn, const int *arg, const int *canon, unsigned n,
                          unsigned slot, unsigned count, const int *refused, unsigned nref,
                          const bool *kind_ok)
{
    classes *c = &m->cls;
    int other[MAX_SLOTS];
    memcpy(other, canon, n * sizeof *canon);
    for (unsigned i = slot; i < slot + count; i++)
        other[i] = canon[i] + CL_ALT;
    char *ta = emit_alone(m, fn, arg, canon, n), *tb = emit_alone(m, fn, arg, other, n);
    static char *la[MAX_LINES], *lb[MAX_LINES];
    unsigned na = ta ? split_lines(ta, la, MAX_LINES) : 0;
    unsigned nb = tb ? split_lines(tb, lb, MAX_LINES) : 0;
    /* the call's lines: after the setup's, before the "ret;" the emitter
     * ends a kernel with and the closing brace */
    unsigned from = c->setup_lines - 2, to = na - 2;
    if (!ta || !tb || na != nb || na < c->setup_lines || na >= MAX_LINES ||
        strcmp(la[to], "\tret;") != 0) {
        fprintf(stderr, "ptx_matrix: no text for a refused operand class (slot %u)\n", slot);
        exit(1);
    }
    unsigned base = c->groups;
    c->groups += NKINDS;
    for (unsigned r = 0; r < nref; r++) {
        char buf[32];
        const char *repl = class_text(refused[r], buf, sizeof buf);
        size_t mark = c->text.len;
        int replaced = 0;
        for (unsigned i = from; i < to; i++) {
            int k = substitute(la[i], lb[i], repl, &c->text);
            if (k == -2) {
                replaced = 0;
                break;
            }
            if (k < 0) {
                fprintf(stderr, "ptx_matrix: '%s' and '%s' differ in shape\n", la[i], lb[i]);
                exit(1);
            }
            replaced += k;
            sb_str(&c->text, "\n");
        }
        if (replaced == 0) { /* not in the text, or not PTX: nothing to try */
            c->text.len = mark;
            c->text.p[mark] = '\0';
            continue;
        }
        if (c->ncands == c->capcands) {
            c->capcands = c->capcands ? c->capcands * 2 : 1024;
            c->cands = realloc(c->cands, c->capcands * sizeof *c->cands);
            if (!c->cands)
                exit(1);
        }
        int kind = decl_kind(refused[r]);
        c->cands[c->ncands++] = (cand){c->lines + 1, c->lines + (to - from), base + (unsigned)kind,
                                       !kind_ok[kind]};
        c->lines += to - from;
    }
    free(ta);
    free(tb);
}

/* One form: the canonical call, then each operand with every other class:
 * each slot alone, then each vector operand's slots all at once (vec:
 * pairs of first slot and count, ending with a count of 0). */
static void class_form(matrix *m, form_fn fn, const int *arg, const int *canon, unsigned n,
                       const unsigned char *vec)
{
    classes *c = &m->cls;
    if (!try_class(m, fn, arg, canon, n, false))
        return;
    unsigned nsets = n;
    while (vec && vec[2 * (nsets - n) + 1])
        nsets++;
    for (unsigned set = 0; set < nsets; set++) {
        unsigned first = set, count = 1;
        if (set >= n) {
            first = vec[2 * (set - n)];
            count = vec[2 * (set - n) + 1];
        }
        int cl[MAX_SLOTS], refused[CL_COUNT];
        unsigned nref = 0;
        bool kind_ok[NKINDS] = {false};
        kind_ok[decl_kind(canon[first])] = true;
        for (int k = 0; k < CL_COUNT; k++) {
            if (!is_class(k) || k == canon[first])
                continue;
            memcpy(cl, canon, n * sizeof *canon);
            for (unsigned i = first; i < first + count; i++)
                cl[i] = k;
            c->tried++;
            if (try_class(m, fn, arg, cl, n, true)) {
                c->kept++;
                kind_ok[decl_kind(k)] = true;
            } else {
                refused[nref++] = k;
            }
        }
        c->refused += nref;
        if (nref && m->refused_out)
            write_refused(m, fn, arg, canon, n, first, count, refused, nref, kind_ok);
    }
}

typedef void (*ip1_fn)(pg_kernel *, pg_type, pg_reg, pg_val);
typedef void (*ip2_fn)(pg_kernel *, pg_type, pg_reg, pg_val, pg_val);
typedef void (*ip3_fn)(pg_kernel *, pg_type, pg_reg, pg_val, pg_val, pg_val);
static const ip1_fn ip1[] = {pg_mov, pg_rcp, pg_sqrt, pg_rsqrt, pg_ex2, pg_lg2, pg_abs, pg_neg,
                             pg_not};
static const ip2_fn ip2[] = {pg_add, pg_sub, pg_mul, pg_mul_hi, pg_mul_wide, pg_div, pg_rem,
                             pg_min, pg_max, pg_and, pg_or, pg_xor, pg_shl, pg_shr};
static const ip3_fn ip3[] = {pg_mad, pg_mad_hi, pg_mad_wide, pg_fma};

static void f_op1(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    ip1[a[0]](k, (pg_type)a[1], v[0], v[1]);
}

static void f_op2(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    ip2[a[0]](k, (pg_type)a[1], v[0], v[1], v[2]);
}

static void f_op3(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    ip3[a[0]](k, (pg_type)a[1], v[0], v[1], v[2], v[3]);
}

static void f_setp(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    pg_setp(k, (pg_cmp)a[0], (pg_type)a[1], v[0], v[1], v[2]);
}

static void f_selp(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    pg_selp(k, (pg_type)a[0], v[0], v[1], v[2], v[3]);
}

static void f_cvt(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    pg_cvt(k, (pg_type)a[0], (pg_type)a[1], (pg_rnd)a[2], v[0], v[1]);
}

static void f_pack(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    if (a[0])
        pg_cvt_pack(k, (pg_type)a[1], v[0], v[1], v[2]);
    else
        pg_pack(k, (pg_type)a[1], v[0], v[1], v[2]);
}

/* arg: space, type, width, nc */
static void f_ld(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    if (a[3])
        pg_ld_nc(k, (pg_type)a[1], v[0], 0, v[1]);
    else
        pg_ld_v(k, (pg_space)a[0], (pg_type)a[1], (unsigned)a[2], v[0], 0, v + 1);
}

static void f_st(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    pg_st_v(k, (pg_space)a[0], (pg_type)a[1], (unsigned)a[2], v[0], 0, v + 1);
}

/* arg: space, op, type, with a destination */
static void f_atom(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    const pg_val *s = a[3] ? v + 1 : v;
    pg_atom(k, (pg_space)a[0], (pg_atom_op)a[1], (pg_type)a[2], a[3] ? v[0] : pg_none(), s[0],
            0, s[1], a[1] == PG_ATOM_CAS ? s[2] : pg_none());
}

/* arg: mode, with a predicate */
static void f_shfl(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    if (a[1])
        pg_shfl(k, (pg_shfl_mode)a[0], v[0], v[1], v[2], v[3], v[4], v[5]);
    else
        pg_shfl(k, (pg_shfl_mode)a[0], v[0], pg_none(), v[1], v[2], v[3], v[4]);
}

static void f_vote(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    pg_vote(k, (pg_vote_mode)a[0], v[0], v[1], a[1] != 0, v[2]);
}

static void f_mma(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    pg_mma_m16n8k16_f32(k, (pg_type)a[0], v, v + 4, v + 8, v + 10);
}

static void f_ldmatrix(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    pg_ldmatrix(k, (unsigned)a[0], a[1] != 0, v, v[a[0]], 0);
}

static void f_cp_async(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    pg_cp_async(k, v[0], 0, v[1], 0, (unsigned)a[0], v[2]);
}

/* A guarded move: the guard is the operand. */
static void f_guard(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    pg_guard(k, v[0], a[0] != 0);
    pg_mov(k, PG_U32, e->alt[PG_U32], pg_u32(1));
}

/* arg: 0 init, 1 arrive, 2 arrive.expect_tx, 3 try_wait.parity */
static void f_mbar(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    switch (a[0]) {
    case 0: pg_mbarrier_init(k, v[0], 0, v[1]); break;
    case 1: pg_mbarrier_arrive(k, v[0], 0); break;
    case 2: pg_mbarrier_arrive_expect_tx(k, v[0], 0, v[1]); break;
    default: pg_mbarrier_try_wait_parity(k, v[0], v[1], 0, v[2]); break;
    }
}

static void f_tma(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    pg_cp_async_bulk_tensor(k, (unsigned)a[0], v[0], v[1], v + 3, v[2]);
}

static void f_stmatrix(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    pg_stmatrix(k, (unsigned)a[0], a[1] != 0, v[0], 0, v + 1);
}

static void f_elect(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    (void)a;
    pg_elect_sync(k, v[0], v[1]);
}

/* arg: A and B type, A from registers; n = 8 (four accumulators) */
static void f_wgmma(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    pg_wgmma w = {.n = 8, .ab = (pg_type)a[0], .d = v};
    if (a[1]) {
        w.a = v + 4;
        w.a_desc = pg_none();
        w.b_desc = v[8];
        w.scale_d = v[9];
    } else {
        w.a_desc = v[4];
        w.b_desc = v[5];
        w.scale_d = v[6];
    }
    pg_wgmma_mma_async(k, &w);
}

static void f_wgmma_desc(pg_kernel *k, const env *e, const int *a, const pg_val *v)
{
    (void)e;
    (void)a;
    (void)pg_wgmma_desc(k, v[0], 16, 1024, 0, PG_SWIZZLE_128B);
}

#define FORM(m, fn, canon, ...)                                                \
    do {                                                                       \
        const int a_[] = {__VA_ARGS__};                                        \
        class_form(m, fn, a_, canon, (unsigned)COUNT(canon), NULL);            \
    } while (0)
/* The same with vector operands: vec as class_form takes it. */
#define FORMV(m, fn, canon, vec, ...)                                          \
    do {                                                                       \
        const int a_[] = {__VA_ARGS__};                                        \
        class_form(m, fn, a_, canon, (unsigned)COUNT(canon), vec);             \
    } while (0)

/* canon[0..n) = t */
static int *fill(int *c, unsigned n, int t)
{
    for (unsigned i = 0; i < n; i++)
        c[i] = t;
    return c;
}

static void enumerate_classes(matrix *m)
{
    for (int t = 0; t < PG_TYPE_COUNT; t++) {
        int r = (int)reg_type_for((pg_type)t), w = (int)wide_of((pg_type)t);
        for (int o = 0; o < COUNT(ip1); o++) {
            int c[] = {r, r};
            FORM(m, f_op1, c, o, t);
        }
        for (int o = 0; o < COUNT(ip2); o++) {
            bool wide = ip2[o] == pg_mul_wide, sh = ip2[o] == pg_shl || ip2[o] == pg_shr;
            int c[] = {wide ? w : r, r, sh ? PG_U32 : r};
            FORM(m, f_op2, c, o, t);
        }
        for (int o = 0; o < COUNT(ip3); o++) {
            bool wide = ip3[o] == pg_mad_wide;
            int c[] = {wide ? w : r, r, r, wide ? w : r};
            FORM(m, f_op3, c, o, t);
        }
        for (int cmp = 0; cmp < PG_CMP_COUNT; cmp++) {
            int c[] = {PG_PRED, r, r};
            FORM(m, f_setp, c, cmp, t);
        }
        int cs[] = {r, r, r, PG_PRED};
        FORM(m, f_selp, cs, t);
    }
    for (int dt = 0; dt < PG_TYPE_COUNT; dt++)
        for (int st = 0; st < PG_TYPE_COUNT; st++)
            for (int rnd = 0; rnd < PG_RND_COUNT; rnd++) {
                int c[] = {(int)reg_type_for((pg_type)dt), (int)reg_type_for((pg_type)st)};
                FORM(m, f_cvt, c, dt, st, rnd);
            }
    {
        int c32[] = {PG_B32, PG_B16, PG_B16}, c64[] = {PG_B64, PG_B32, PG_B32};
        int cf[] = {PG_B32, PG_F32, PG_F32};
        FORM(m, f_pack, c32, 0, PG_B32);
        FORM(m, f_pack, c64, 0, PG_B64);
        FORM(m, f_pack, cf, 1, PG_BF16);
        FORM(m, f_pack, cf, 1, PG_F16);
    }
    for (int s = PG_SPACE_GLOBAL; s <= PG_SPACE_SHARED; s++)
        for (int t = 0; t < PG_TYPE_COUNT; t++)
            for (int w = 1; w <= 4; w *= 2) {
                int c[5];
                c[0] = s == PG_SPACE_GLOBAL ? PG_U64 : PG_U32;
                fill(c + 1, (unsigned)w, (int)reg_type_for((pg_type)t));
                const unsigned char v[] = {1, (unsigned char)w, 0, 0};
                const unsigned char *vec = w > 1 ? v : NULL;
                class_form(m, f_ld, (const int[]){s, t, w, 0}, c, 1 + (unsigned)w, vec);
                class_form(m, f_st, (const int[]){s, t, w, 0}, c, 1 + (unsigned)w, vec);
                if (s == PG_SPACE_GLOBAL && w == 1)
                    class_form(m, f_ld, (const int[]){s, t, w, 1}, c, 2, NULL);
            }
    for (int s = PG_SPACE_GLOBAL; s <= PG_SPACE_SHARED; s++)
        for (int op = 0; op < PG_ATOM_COUNT; op++)
            for (int t = 0; t < PG_TYPE_COUNT; t++)
                for (int d = 0; d < 2; d++) {
                    int c[4], n = 0;
                    if (d)
                        c[n++] = t;
                    c[n++] = s == PG_SPACE_GLOBAL ? PG_U64 : PG_U32;
                    c[n++] = t;
                    if (op == PG_ATOM_CAS)
                        c[n++] = t;
                    class_form(m, f_atom, (const int[]){s, op, t, d}, c, (unsigned)n, NULL);
                }
    for (int mode = 0; mode <= PG_SHFL_IDX; mode++) {
        int c[] = {PG_B32, PG_B32, PG_U32, PG_U32, PG_U32};
        int cp[] = {PG_B32, PG_PRED, PG_B32, PG_U32, PG_U32, PG_U32};
        FORM(m, f_shfl, c, mode, 0);
        FORM(m, f_shfl, cp, mode, 1);
    }
    for (int mode = 0; mode <= PG_VOTE_BALLOT; mode++)
        for (int neg = 0; neg < 2; neg++) {
            int c[] = {mode == PG_VOTE_BALLOT ? PG_B32 : PG_PRED, PG_PRED, PG_U32};
            FORM(m, f_vote, c, mode, neg);
        }
    for (int ab = 0; ab < 2; ab++) {
        int c[14];
        fill(c, 4, PG_F32);
        fill(c + 4, 6, PG_B32);
        fill(c + 10, 4, PG_F32);
        static const unsigned char vec[] = {0, 4, 4, 4, 8, 2, 10, 4, 0, 0};
        FORMV(m, f_mma, c, vec, ab ? PG_BF16 : PG_F16);
    }
    for (int n = 1; n <= 4; n *= 2)
        for (int tr = 0; tr < 2; tr++) {
            int c[5];
            fill(c, (unsigned)n, PG_B32)[n] = PG_U32;
            const unsigned char vec[] = {0, (unsigned char)n, 0, 0};
            class_form(m, f_ldmatrix, (const int[]){n, tr}, c, 1 + (unsigned)n,
                       n > 1 ? vec : NULL);
        }
    for (int b = 4; b <= 16; b *= 2) {
        int c[] = {PG_U32, PG_U64, PG_U32};
        FORM(m, f_cp_async, c, b);
    }
    for (int neg = 0; neg < 2; neg++) {
        int c[] = {PG_PRED};
        FORM(m, f_guard, c, neg);
    }
    /* Hopper */
    {
        int init[] = {PG_U32, PG_U32}, arrive[] = {PG_U32}, wait[] = {PG_PRED, PG_U32, PG_U32};
        FORM(m, f_mbar, init, 0);
        FORM(m, f_mbar, arrive, 1);
        FORM(m, f_mbar, init, 2);
        FORM(m, f_mbar, wait, 3);
    }
    for (int dims = 2; dims <= 5; dims++) {
        int c[8] = {PG_U32, PG_U64, PG_U32, PG_S32, PG_S32, PG_S32, PG_S32, PG_S32};
        const unsigned char vec[] = {3, (unsigned char)dims, 0, 0};
        class_form(m, f_tma, (const int[]){dims}, c, 3 + (unsigned)dims, vec);
    }
    for (int n = 1; n <= 4; n *= 2)
        for (int tr = 0; tr < 2; tr++) {
            int c[5] = {PG_U32};
            fill(c + 1, (unsigned)n, PG_B32);
            const unsigned char vec[] = {1, (unsigned char)n, 0, 0};
            class_form(m, f_stmatrix, (const int[]){n, tr}, c, 1 + (unsigned)n,
                       n > 1 ? vec : NULL);
        }
    {
        int c[] = {PG_PRED, PG_U32};
        FORM(m, f_elect, c, 0);
    }
    for (int ab = 0; ab < 2; ab++) {
        int cr[10], cd[7];
        fill(cr, 4, PG_F32);
        fill(cr + 4, 4, PG_B32);
        cr[8] = PG_U64;
        cr[9] = PG_PRED;
        fill(cd, 4, PG_F32);
        cd[4] = cd[5] = PG_U64;
        cd[6] = PG_PRED;
        static const unsigned char vr[] = {0, 4, 4, 4, 0, 0}, vd[] = {0, 4, 0, 0};
        FORMV(m, f_wgmma, cr, vr, ab ? PG_BF16 : PG_F16, 1);
        FORMV(m, f_wgmma, cd, vd, ab ? PG_BF16 : PG_F16, 0);
    }
    {
        int c[] = {PG_U32};
        FORM(m, f_wgmma_desc, c, 0);
    }
}

static void enumerate(matrix *m)
{
    for (int t = 0; t < PG_TYPE_COUNT; t++)
        for (int imm = 0; imm < 3; imm++)
            for (int first = 0; first < (imm ? 2 : 1); first++) {
                for (int o = 0; o < COUNT(ops1) && !first; o++)
                    TRY(m, c_op1, o, t, imm, 0);
                for (int o = 0; o < COUNT(ops2); o++)
                    TRY(m, c_op2, o, t, imm, first);
                for (int o = 0; o < COUNT(ops3); o++)
                    TRY(m, c_op3, o, t, imm, first);
                for (int c = 0; c < PG_CMP_COUNT; c++)
                    TRY(m, c_setp, c, t, imm, first);
                if (!first)
                    TRY(m, c_selp, t, imm);
            }
    for (int dt = 0; dt < PG_TYPE_COUNT; dt++)
        for (int st = 0; st < PG_TYPE_COUNT; st++)
            for (int r = 0; r < PG_RND_COUNT; r++)
                TRY(m, c_cvt, dt, st, r);
    for (int cvt = 0; cvt < 2; cvt++)
        for (int t = 0; t < PG_TYPE_COUNT; t++)
            for (int st = 0; st < PG_TYPE_COUNT; st++)
                for (int imm = 0; imm < 2; imm++)
                    TRY(m, c_pack, cvt, t, st, imm);
    for (int s = PG_SPACE_GLOBAL; s <= PG_SPACE_SHARED; s++)
        for (int t = 0; t < PG_TYPE_COUNT; t++)
            for (int w = 1; w <= 4; w *= 2)
                for (int sym = 0; sym < 2; sym++) {
                    TRY(m, c_ld, s, t, w, 0, sym);
                    TRY(m, c_st, s, t, w, 0, sym);
                    TRY(m, c_st, s, t, w, 1, sym);
                    if (s == PG_SPACE_GLOBAL && w == 1 && !sym)
                        TRY(m, c_ld, s, t, w, 1, sym);
                }
    for (int s = PG_SPACE_GLOBAL; s <= PG_SPACE_SHARED; s++)
        for (int op = 0; op < PG_ATOM_COUNT; op++)
            for (int t = 0; t < PG_TYPE_COUNT; t++)
                for (int d = 0; d < 2; d++)
                    TRY(m, c_atom, s, op, t, d);
    for (int mode = 0; mode <= PG_SHFL_IDX; mode++)
        for (int p = 0; p < 2; p++)
            TRY(m, c_shfl, mode, p);
    for (int mode = 0; mode <= PG_VOTE_BALLOT; mode++)
        for (int n = 0; n < 2; n++)
            TRY(m, c_vote, mode, n);
    TRY(m, c_sync, 0, 0);
    TRY(m, c_sync, 0, 15);
    TRY(m, c_sync, 1, 0);
    for (int id = 0; id <= 15; id += 15) {
        TRY(m, c_sync, 5, id);
        TRY(m, c_sync, 6, id);
    }
    for (int s = 0; s <= PG_SCOPE_SYS; s++)
        for (int kind = 2; kind <= 4; kind++)
            TRY(m, c_sync, kind, s);
    for (int s = 0; s < PG_SREG_COUNT; s++)
        TRY(m, c_sreg, s);
    for (int t = 1; t < PG_TYPE_COUNT; t++)
        TRY(m, c_param, t);
    for (int f = 0; f < 4; f++)
        for (int n = 0; n < 2; n++)
            TRY(m, c_flow, f, n);
    TRY(m, c_mma, 0);
    for (int n = 1; n <= 4; n *= 2)
        for (int tr = 0; tr < 2; tr++)
            TRY(m, c_ldmatrix, n, tr);
    for (int b = 4; b <= 16; b *= 2) {
        TRY(m, c_cp_async, b, 0, 0);
        TRY(m, c_cp_async, b, 1, 0);
        for (int sz = 0; sz <= b + 1; sz++)
            TRY(m, c_cp_async, b, 2, sz);
    }
    TRY(m, c_cp_group, -1);
    for (int n = 0; n <= 8; n++)
        TRY(m, c_cp_group, n);
}

/* The refused file: the kept kernel's text with the registers the refused
 * forms name declared after its opening brace, and those forms before its
 * closing one; and beside it (REFUSED.idx) one line a refused form: its
 * first and last line, its group (form, operand, declared class) and
 * whether the builder takes no type of that declared class there. */
static int write_refused_file(const matrix *m, const char *path, const char *ptx)
{
    const classes *c = &m->cls;
    const char *body = strstr(ptx, "\n{\n");
    size_t end = strlen(ptx);
    while (end && ptx[end - 1] != '}')
        end--;
    if (!body || !end)
        return -1;
    body += 3;
    sbuf out = {0};
    sb_put(&out, ptx, (size_t)(body - ptx));
    for (int t = 0; t < PG_TYPE_COUNT; t++) {
        if (!is_class(t))
            continue;
        char line[64];
        snprintf(line, sizeof line, "\t.reg %s %%q_%s;\n", kind_decl[decl_kind(t)],
                 pg_type_name((pg_type)t));
        sb_str(&out, line);
    }
    sb_put(&out, body, end - 1 - (size_t)(body - ptx));
    unsigned base = 0;
    for (size_t i = 0; i < out.len; i++)
        base += out.p[i] == '\n';
    if (c->text.len)
        sb_put(&out, c->text.p, c->text.len);
    sb_str(&out, "}\n");
    FILE *f = fopen(path, "w");
    if (!f || fwrite(out.p, 1, out.len, f) != out.len || fclose(f) != 0)
        return -1;
    free(out.p);
    char idx[4096];
    snprintf(idx, sizeof idx, "%s.idx", path);
    if (!(f = fopen(idx, "w")))
        return -1;
    for (unsigned i = 0; i < c->ncands; i++)
        fprintf(f, "%u %u %u %d\n", base + c->cands[i].first, base + c->cands[i].last,
                c->cands[i].group, c->cands[i].strict);
    return fclose(f) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--targets") == 0) {
        for (int t = 0; t < PG_TARGET_COUNT; t++)
            printf("%s\n", pg_target_name((pg_target)t));
        return 0;
    }
    matrix m = {0};
    if ((argc != 2 && argc != 3) || pg_target_parse(argv[1], &m.target)) {
        fprintf(stderr, "usage: ptx_matrix TARGET [REFUSED] | --targets\n");
        return 2;
    }
    m.refused_out = argc == 3 ? argv[2] : NULL;
    if (setup(&m.out, &m.out_env, m.target) || setup(&m.probe, &m.probe_env, m.target)) {
        fprintf(stderr, "ptx_matrix: setup failed: %s\n", pg_kernel_message(m.out));
        return 1;
    }
    char *alone = emit_alone(&m, NULL, NULL, NULL, 0);
    static char *lines[MAX_LINES];
    m.cls.setup_lines = alone ? split_lines(alone, lines, MAX_LINES) : 0;
    free(alone);
    /* the operand classes first: the cases below branch and return */
    enumerate_classes(&m);
    enumerate(&m);
    /* registers enough for every name a refused form's line holds */
    for (int i = 0; i < 16; i++)
        for (int t = 0; t < PG_TYPE_COUNT; t++)
            if (is_class(t))
                (void)pg_reg_new(m.out, (pg_type)t);
    const char *ptx = NULL;
    size_t len = 0;
    int rc = pg_kernel_emit(m.out, &ptx, &len);
    if (rc) {
        fprintf(stderr, "ptx_matrix %s: %s\n", argv[1], pg_kernel_message(m.out));
        return 1;
    }
    /* Never pass by checking nothing: the builder takes well over this
     * many forms on every target. */
    if (m.kept < 1000 || m.cls.kept < 1000) {
        fprintf(stderr, "ptx_matrix %s: only %u forms and %u operand classes accepted\n",
                argv[1], m.kept, m.cls.kept);
        return 1;
    }
    if (m.refused_out && write_refused_file(&m, m.refused_out, ptx)) {
        fprintf(stderr, "ptx_matrix: cannot write %s\n", m.refused_out);
        return 1;
    }
    fwrite(ptx, 1, len, stdout);
    fprintf(stderr, "ptx_matrix %s: %u of %u forms accepted\n", argv[1], m.kept, m.tried);
    fprintf(stderr, "ptx_matrix %s: %u of %u operand classes accepted\n", argv[1], m.cls.kept,
            m.cls.tried);
    pg_kernel_destroy(&m.out);
    pg_kernel_destroy(&m.probe);
    free(m.cls.text.p);
    free(m.cls.cands);
    return 0;
}
