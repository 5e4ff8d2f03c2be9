/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: a byte string drives a sequence of builder calls (ops and
 * types, labels, branches, barriers, shared memory, idioms). Operands are
 * mostly well typed so that many runs emit PTX; some are deliberately
 * wrong so that every check is exercised. Every run must either return an
 * error code with a message or emit PTX; the ptxas corpus check then
 * assembles what was emitted.
 */
#include "fuzz.h"

#include "ptxgen.h"

#include <stdlib.h>
#include <string.h>

typedef struct input {
    const uint8_t *p;
    size_t n, at;
} input;

static unsigned next(input *in)
{
    return in->at < in->n ? in->p[in->at++] : 0;
}

static bool more(const input *in) { return in->at < in->n; }

enum { POOL = 8 };
static const pg_type pool_types[] = {PG_PRED, PG_U32, PG_S32, PG_U64, PG_F32, PG_F64, PG_F16, PG_U16};
#define NPT (sizeof pool_types / sizeof pool_types[0])

typedef struct state {
    pg_kernel *k;
    input in;
    pg_reg regs[NPT][POOL];
    unsigned nregs[NPT];
    pg_label labels[16];
    bool bound[16];
    unsigned nlabels;
    pg_shared shared[4];
    unsigned nshared;
    pg_loop loops[4];
    unsigned nloops;
    pg_reg ptr; /* a global pointer from a param */
} state;

static unsigned type_index(pg_type t)
{
    for (unsigned i = 0; i < NPT; i++)
        if (pool_types[i] == t)
            return i;
    return 0;
}

static pg_val imm_for(state *s, pg_type t)
{
    unsigned b = next(&s->in);
    switch (t) {
    case PG_F32: return pg_f32((float)(int)(b % 17) - 8.0f);
    case PG_F64: return pg_f64((double)(int)(b % 17) - 8.0);
    case PG_S32: return pg_s32((int)(b % 64) - 32);
    case PG_U16: return pg_u32(b);
    default: return pg_u32(b % 64);
    }
}

/* A register of type t, made (and initialised) when the pool is empty. */
static pg_reg reg_of(state *s, pg_type t)
{
    unsigned ti = type_index(t);
    unsigned c = next(&s->in);
    if (s->nregs[ti] == 0 || (c & 0x80 && s->nregs[ti] < POOL)) {
        pg_reg r = pg_reg_new(s->k, t);
        if (t == PG_PRED)
            pg_setp(s->k, PG_CMP_EQ, PG_U32, r, pg_sreg_read(s->k, (pg_sreg)(c % PG_SREG_COUNT)),
                    pg_u32(c & 7));
        else if (t == PG_F16)
            pg_cvt(s->k, PG_F16, PG_F32, PG_RND_RN, r, pg_f32(0.5f));
        else
            pg_mov(s->k, t, r, imm_for(s, t));
        if (s->nregs[ti] < POOL)
            s->regs[ti][s->nregs[ti]++] = r;
        return r;
    }
    return s->regs[ti][c % s->nregs[ti]];
}

/* Mostly the right type; one time in 32 a random one. */
static pg_val src_of(state *s, pg_type t)
{
    unsigned c = next(&s->in);
    if ((c & 31) == 31)
        return reg_of(s, pool_types[(c >> 5) % NPT]);
    if ((c & 31) == 30 && t != PG_PRED && t != PG_F16)
        return imm_for(s, t);
    return reg_of(s, t);
}

static pg_type arith_type(state *s)
{
    static const pg_type t[] = {PG_U32, PG_S32, PG_U64, PG_F32, PG_F64};
    return t[next(&s->in) % 5];
}

static pg_label label_of(state *s)
{
    unsigned c = next(&s->in);
    if (s->nlabels == 0 || (c & 0x80 && s->nlabels < 16)) {
        s->labels[s->nlabels] = pg_label_new(s->k, (c & 1) ? "f" : NULL);
        s->bound[s->nlabels] = false;
        return s->labels[s->nlabels++];
    }
    return s->labels[c % s->nlabels];
}

/* Every operand is drawn in its own statement: C leaves the order of
 * argument evaluation open, and the same bytes must mean the same calls
 * whatever compiler built this. */
static void step(state *s)
{
    pg_kernel *k = s->k;
    unsigned op = next(&s->in) % 30;
    pg_type t;
    pg_val a, b, c;
    pg_reg d;
    unsigned x, y;
    switch (op) {
    case 0:
    case 1:
    case 2:
    case 3:
        t = arith_type(s);
        d = reg_of(s, t);
        a = src_of(s, t);
        b = src_of(s, t);
        if (op == 0)
            pg_add(k, t, d, a, b);
        else if (op == 1)
            pg_sub(k, t, d, a, b);
        else if (op == 2)
            pg_mul(k, t, d, a, b);
        else
            pg_min(k, t, d, a, b);
        break;
    case 4:
        t = next(&s->in) & 1 ? PG_F32 : PG_F64;
        d = reg_of(s, t);
        a = src_of(s, t);
        b = src_of(s, t);
        c = src_of(s, t);
        pg_fma(k, t, d, a, b, c);
        break;
    case 5:
        t = next(&s->in) & 1 ? PG_F32 : PG_F64;
        x = next(&s->in) % 4;
        d = reg_of(s, t);
        a = src_of(s, t);
        switch (x) {
        case 0: b = src_of(s, t); pg_div(k, t, d, a, b); break;
        case 1: pg_sqrt(k, t, d, a); break;
        case 2: pg_rcp(k, t, d, a); break;
        default: pg_abs(k, t, d, a); break;
        }
        break;
    case 6: {
        t = arith_type(s);
        pg_cmp cmp = (pg_cmp)(next(&s->in) % 6);
        d = reg_of(s, PG_PRED);
        a = src_of(s, t);
        b = src_of(s, t);
        pg_setp(k, cmp, t, d, a, b);
        break;
    }
    case 7:
        t = arith_type(s);
        d = reg_of(s, t);
        a = src_of(s, t);
        b = src_of(s, t);
        c = reg_of(s, PG_PRED);
        pg_selp(k, t, d, a, b, c);
        break;
    case 8: {
        static const struct { pg_type d, s; pg_rnd r; } cv[] = {
            {PG_F32, PG_U32, PG_RND_RN}, {PG_S32, PG_F32, PG_RND_RZI}, {PG_F64, PG_F32, PG_RND_NONE},
            {PG_F32, PG_F64, PG_RND_RN}, {PG_U64, PG_U32, PG_RND_NONE}, {PG_F16, PG_F32, PG_RND_RN},
            {PG_F32, PG_F16, PG_RND_NONE}, {PG_U32, PG_F64, PG_RND_NONE}, {PG_U16, PG_U32, PG_RND_NONE},
        };
        unsigned i = next(&s->in) % (sizeof cv / sizeof cv[0]);
        d = reg_of(s, cv[i].d);
        a = src_of(s, cv[i].s);
        pg_cvt(k, cv[i].d, cv[i].s, cv[i].r, d, a);
        break;
    }
    case 9:
        t = next(&s->in) & 1 ? PG_U32 : PG_U64;
        x = next(&s->in) % 4;
        d = reg_of(s, t);
        a = src_of(s, t);
        switch (x) {
        case 0: b = src_of(s, t); pg_and(k, t, d, a, b); break;
        case 1: b = src_of(s, t); pg_xor(k, t, d, a, b); break;
        case 2: pg_shl(k, t, d, a, pg_u32(next(&s->in) % 32)); break;
        default: pg_shr(k, t, d, a, pg_u32(next(&s->in) % 32)); break;
        }
        break;
    case 10:
        t = next(&s->in) & 1 ? PG_F32 : PG_U32;
        x = next(&s->in) % 8;
        d = reg_of(s, t);
        pg_ld(k, PG_SPACE_GLOBAL, t, s->ptr, (int64_t)x * 4, d);
        break;
    case 11:
        t = next(&s->in) & 1 ? PG_F32 : PG_U32;
        x = next(&s->in) % 8;
        a = src_of(s, t);
        pg_st(k, PG_SPACE_GLOBAL, t, s->ptr, (int64_t)x * 4, a);
        break;
    case 12:
        if (s->nshared < 4)
            s->shared[s->nshared++] = pg_shared_static(k, PG_F32, 32 + next(&s->in), 4, "sm");
        break;
    case 13:
        if (s->nshared) {
            pg_shared sh = s->shared[next(&s->in) % s->nshared];
            x = next(&s->in) & 1;
            y = next(&s->in) % 16;
            if (x) {
                d = reg_of(s, PG_F32);
                pg_ld(k, PG_SPACE_SHARED, PG_F32, pg_shared_addr(sh), y * 4, d);
            } else {
                a = src_of(s, PG_F32);
                pg_st(k, PG_SPACE_SHARED, PG_F32, pg_shared_addr(sh), y * 4, a);
            }
        }
        break;
    case 14: pg_bar_sync(k, next(&s->in) % 2); break;
    case 15: {
        pg_label l = label_of(s);
        for (unsigned i = 0; i < s->nlabels; i++)
            if (s->labels[i].id == l.id && !s->bound[i]) {
                s->bound[i] = true;
                pg_label_bind(k, l);
            }
        break;
    }
    case 16: {
        d = reg_of(s, PG_PRED);
        x = next(&s->in) & 1;
        pg_label l = label_of(s);
        pg_bra_if(k, d, x, l);
        break;
    }
    case 17:
        if ((next(&s->in) & 7) == 0)
            pg_bra(k, label_of(s));
        break;
    case 18:
        d = reg_of(s, PG_PRED);
        pg_guard(k, d, next(&s->in) & 1);
        break;
    case 19:
        if ((next(&s->in) & 7) == 0)
            pg_ret(k);
        break;
    case 20: {
        pg_shfl_mode m = (pg_shfl_mode)(next(&s->in) % 4);
        d = reg_of(s, PG_F32);
        a = src_of(s, PG_F32);
        x = next(&s->in) % 32;
        pg_shfl(k, m, d, pg_none(), a, pg_u32(x), pg_u32(31), pg_u32(0xffffffffu));
        break;
    }
    case 21:
        d = reg_of(s, PG_U32);
        a = reg_of(s, PG_PRED);
        pg_vote(k, PG_VOTE_BALLOT, d, a, false, pg_u32(0xffffffffu));
        break;
    case 22:
        d = next(&s->in) & 1 ? reg_of(s, PG_F32) : pg_none();
        a = src_of(s, PG_F32);
        pg_atom(k, PG_SPACE_GLOBAL, PG_ATOM_ADD, PG_F32, d, s->ptr, 0, a, pg_none());
        break;
    case 23: pg_comment(k, "fuzz"); break;
    case 24: {
        pg_reduce_op r = (pg_reduce_op)(next(&s->in) % 3);
        (void)pg_warp_reduce(k, r, PG_F32, reg_of(s, PG_F32));
        break;
    }
    case 25:
        if (s->nshared)
            (void)pg_block_reduce(k, PG_REDUCE_SUM, PG_F32, reg_of(s, PG_F32), s->shared[0]);
        break;
    case 26:
        if (s->nloops < 4)
            (void)pg_grid_stride_begin(k, &s->loops[s->nloops++], src_of(s, PG_U32));
        break;
    case 27:
        if (s->nloops)
            pg_grid_stride_end(k, &s->loops[--s->nloops]);
        break;
    case 28: {
        pg_scope sc = (pg_scope)(next(&s->in) % 3);
        pg_fence(k, sc, next(&s->in) & 1);
        break;
    }
    default:
        d = reg_of(s, PG_F16);
        a = reg_of(s, PG_F16);
        pg_add(k, PG_F16, d, d, a);
        break;
    }
}

int fuzz_builder_run(const uint8_t *data, size_t size, char **ptx, const char **target)
{
    *ptx = NULL;
    state s;
    memset(&s, 0, sizeof s);
    s.in = (input){data, size, 0};
    pg_target t = (pg_target)(next(&s.in) % PG_TARGET_COUNT);
    if (target)
        *target = pg_target_name(t);
    int rc = pg_kernel_create(&s.k, "fuzz", t);
    if (rc)
        return rc;
    pg_param pp = pg_param_add(s.k, PG_U64, "ptr");
    pg_param pn = pg_param_add(s.k, PG_U32, "n");
    s.ptr = pg_param_load(s.k, pp);
    pg_reg n = pg_param_load(s.k, pn);
    s.regs[type_index(PG_U32)][s.nregs[type_index(PG_U32)]++] = n;
    if (next(&s.in) & 1)
        pg_kernel_set_maxntid(s.k, 256, 1, 1);
    unsigned steps = 0;
    while (more(&s.in) && steps++ < 4096 && !pg_kernel_error(s.k))
        step(&s);
    /* Close what is open so that many runs reach emission. */
    while (s.nloops)
        pg_grid_stride_end(s.k, &s.loops[--s.nloops]);
    for (unsigned i = 0; i < s.nlabels; i++)
        if (!s.bound[i])
            pg_label_bind(s.k, s.labels[i]);
    const char *text = NULL;
    size_t len = 0;
    rc = pg_kernel_emit(s.k, &text, &len);
    if (rc == 0) {
        *ptx = malloc(len + 1);
        if (*ptx)
            memcpy(*ptx, text, len + 1);
        else
            rc = PG_ENOMEM;
    } else {
        /* every error carries a message naming the kernel */
        const char *m = pg_kernel_message(s.k);
        if (!m || strncmp(m, "fuzz: ", 6) != 0)
            abort();
    }
    pg_kernel_destroy(&s.k);
    return rc;
}

#ifndef FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *ptx = NULL;
    int rc = fuzz_builder_run(data, size, &ptx, NULL);
    if (rc == 0) {
        /* the same bytes always give the same text */
        char *again = NULL;
        if (fuzz_builder_run(data, size, &again, NULL) != 0 || strcmp(ptx, again) != 0)
            abort();
        free(again);
    }
    free(ptx);
    return 0;
}
#endif
