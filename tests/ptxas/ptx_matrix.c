/* SPDX-License-Identifier: MIT */
/*
 * Every instruction form the builder accepts, for one target, in one kernel:
 *     ptx_matrix TARGET      PTX on standard output
 *     ptx_matrix --targets   the target names, one a line
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
 * forms with each of their modes.
 */
#include "ptxgen.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The registers every case reads, made once a kernel. */
typedef struct env {
    pg_reg ptr;                 /* u64 global pointer */
    pg_reg src[PG_TYPE_COUNT];  /* one written register a type (8-bit: 16-bit) */
    pg_reg saddr;               /* u32 shared address */
    pg_shared smem;
    pg_param param[PG_TYPE_COUNT]; /* one of every type but pred */
} env;

typedef struct matrix {
    pg_target target;
    pg_kernel *out;   /* the kernel written */
    env out_env;
    pg_kernel *probe; /* scratch; made again after a refused call */
    env probe_env;
    unsigned tried, kept;
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
    e->src[PG_PRED] = pgv_setp(k, PG_CMP_EQ, PG_U32, e->src[PG_U32], pg_u32(0));
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

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--targets") == 0) {
        for (int t = 0; t < PG_TARGET_COUNT; t++)
            printf("%s\n", pg_target_name((pg_target)t));
        return 0;
    }
    matrix m = {0};
    if (argc != 2 || pg_target_parse(argv[1], &m.target)) {
        fprintf(stderr, "usage: ptx_matrix TARGET | --targets\n");
        return 2;
    }
    if (setup(&m.out, &m.out_env, m.target) || setup(&m.probe, &m.probe_env, m.target)) {
        fprintf(stderr, "ptx_matrix: setup failed: %s\n", pg_kernel_message(m.out));
        return 1;
    }
    enumerate(&m);
    const char *ptx = NULL;
    size_t len = 0;
    int rc = pg_kernel_emit(m.out, &ptx, &len);
    if (rc) {
        fprintf(stderr, "ptx_matrix %s: %s\n", argv[1], pg_kernel_message(m.out));
        return 1;
    }
    /* Never pass by checking nothing: the builder takes well over this
     * many forms on every target. */
    if (m.kept < 1000) {
        fprintf(stderr, "ptx_matrix %s: only %u forms accepted\n", argv[1], m.kept);
        return 1;
    }
    fwrite(ptx, 1, len, stdout);
    fprintf(stderr, "ptx_matrix %s: %u of %u forms accepted\n", argv[1], m.kept, m.tried);
    pg_kernel_destroy(&m.out);
    pg_kernel_destroy(&m.probe);
    return 0;
}
