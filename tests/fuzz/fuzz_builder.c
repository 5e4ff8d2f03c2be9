/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: a byte string drives a sequence of builder calls (ops and
 * types, labels, branches, barriers, shared memory, idioms, vector
 * loads and stores, packs, tensor-core and async copies, and the Hopper
 * instructions: mbarriers, TMA, wgmma, stmatrix, elect, setmaxnreg).
 * Operands are mostly well typed so that many runs emit PTX; some are
 * deliberately wrong, and the class of an operand is drawn as well as its
 * type: a register of another type (b-types, bf16, 64-bit and 16-bit
 * ones among them), an integer, f32 or f64 immediate, a shared address,
 * none. The operands whose class PTX fixes (a membermask, an mma
 * fragment, the registers of an 8-bit vector) draw from the classes that
 * come closest to passing. An instruction the target lacks is mostly
 * left out, so that runs go on, and sometimes tried, so that the target
 * checks run too. Every run must either return an error code with a
 * message or emit PTX; the ptxas corpus check then assembles what was
 * emitted.
 */
#include "fuzz.h"

#include "ptxgen/ptxgen.h"

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
static const pg_type pool_types[] = {PG_PRED, PG_U32, PG_S32, PG_U64, PG_F32, PG_F64, PG_F16,
                                     PG_U16, PG_B32, PG_BF16, PG_S16, PG_B64, PG_B16, PG_S64};
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
    pg_target target;
    unsigned sm;
    pg_param tmap_param; /* a tensor map, when the first byte asked for one */
    pg_reg tmap;         /* its address (sm_90 and newer), else none */
    pg_shared tile;      /* 4 KiB, 128-byte aligned: TMA, ldmatrix, stmatrix, wgmma */
    pg_shared bars;      /* four mbarriers */
    bool maxntid;        /* .maxntid set: .minnctapersm means something */
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
        else if (t == PG_BF16)
            pg_mov(s->k, PG_B16, r, pg_u32(0x3f00)); /* 0.5: bits, on every target */
        else
            pg_mov(s->k, t, r, imm_for(s, t));
        if (s->nregs[ti] < POOL)
            s->regs[ti][s->nregs[ti]++] = r;
        return r;
    }
    return s->regs[ti][c % s->nregs[ti]];
}

/* An operand of another class: an immediate of each kind, a shared
 * address, none. */
static pg_val odd_operand(state *s)
{
    unsigned c = next(&s->in);
    switch (c % 6) {
    case 0: return pg_u32(c);
    case 1: return pg_s64(-(int64_t)((uint64_t)c << 40));
    case 2: return pg_f32((float)c);
    case 3: return pg_f64((double)c);
    case 4: return s->nshared ? pg_shared_addr(s->shared[c % s->nshared]) : pg_none();
    default: return pg_none();
    }
}

/* Mostly the right type; one time in 32 a register of a random type, one
 * in 64 an operand of another class. */
static pg_val src_of(state *s, pg_type t)
{
    unsigned c = next(&s->in);
    if ((c & 31) == 31)
        return reg_of(s, pool_types[(c >> 5) % NPT]);
    if ((c & 31) == 30 && t != PG_PRED && t != PG_F16 && t != PG_BF16 && t != PG_B16 &&
        t != PG_S16)
        return imm_for(s, t);
    if ((c & 63) == 29)
        return odd_operand(s);
    return reg_of(s, t);
}

/* A membermask: mostly all lanes, then a 32-bit integer register of each
 * type, sometimes anything src_of gives. */
static pg_val mask_of(state *s)
{
    unsigned c = next(&s->in) % 16;
    static const pg_type t[] = {PG_U32, PG_S32, PG_B32};
    if (c < 10)
        return pg_u32(0xffffffffu);
    if (c < 14)
        return reg_of(s, t[c % 3]);
    return src_of(s, c & 1 ? PG_F32 : PG_U32);
}

/* A .b32 register of packed halves (an mma fragment), or sometimes not. */
static pg_reg packed_of(state *s)
{
    unsigned c = next(&s->in) % 16;
    static const pg_type t[] = {PG_U32, PG_B32, PG_S32};
    if (c < 14)
        return reg_of(s, t[c % 3]);
    return src_of(s, PG_F32);
}

/* Whether to make a call that needs sm `sm` (an arch-specific target if
 * `arch`, sm_90a itself if `only90a`): always where the target has it,
 * one time in 8 elsewhere, to see the refusal. */
static bool target_has(state *s, unsigned sm, bool arch, bool only90a)
{
    bool ok = s->sm >= sm && (!arch || pg_target_is_arch_specific(s->target)) &&
              (!only90a || s->target == PG_SM_90A);
    return ok || (next(&s->in) & 7) == 0;
}

static pg_shared tile_of(state *s)
{
    if (!s->tile.id)
        s->tile = pg_shared_static(s->k, PG_B32, 1024, 128, "tile");
    return s->tile;
}

/* An mbarrier: one of four in shared memory, by symbol or by a u32
 * register holding its address, with its byte offset. */
static pg_val bar_of(state *s, int64_t *off)
{
    if (!s->bars.id)
        s->bars = pg_shared_static(s->k, PG_B64, 4, 8, "bar");
    unsigned c = next(&s->in);
    *off = (int64_t)(c % 4) * 8;
    if (c & 0x80) {
        pg_reg a = reg_of(s, PG_U32);
        pg_mov(s->k, PG_U32, a, pg_shared_addr(s->bars));
        return a;
    }
    return pg_shared_addr(s->bars);
}

/* A shared address in the tile: the symbol, or a u32 register holding it
 * (or, one time in 16, any operand src_of gives). */
static pg_val tile_addr(state *s)
{
    unsigned c = next(&s->in) % 16;
    pg_shared t = tile_of(s);
    if (c < 8)
        return pg_shared_addr(t);
    if (c < 15) {
        pg_reg a = reg_of(s, PG_U32);
        pg_mov(s->k, PG_U32, a, pg_shared_addr(t));
        return a;
    }
    return src_of(s, PG_U32);
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
    unsigned op = next(&s->in) % 53;
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
        t = next(&s->in) & 1 ? PG_F32 : PG_U32;
        d = reg_of(s, t);
        a = src_of(s, t);
        x = next(&s->in) % 32;
        pg_reg p = next(&s->in) & 1 ? reg_of(s, PG_PRED) : pg_none();
        c = mask_of(s);
        pg_shfl(k, m, d, p, a, pg_u32(x), pg_u32(31), c);
        break;
    }
    case 21: {
        pg_vote_mode m = (pg_vote_mode)(next(&s->in) % 4);
        d = reg_of(s, m == PG_VOTE_BALLOT ? PG_U32 : PG_PRED);
        a = reg_of(s, PG_PRED);
        x = next(&s->in) & 1;
        c = mask_of(s);
        pg_vote(k, m, d, a, x, c);
        break;
    }
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
    case 29:
        d = reg_of(s, PG_F16);
        a = reg_of(s, PG_F16);
        pg_add(k, PG_F16, d, d, a);
        break;
    case 30: { /* vector loads and stores, 8-bit ones in 16- or 32-bit registers */
        static const pg_type vt[] = {PG_U8, PG_S8, PG_U16, PG_U32, PG_F32, PG_F64,
                                     PG_U64, PG_F16, PG_B32, PG_S16};
        t = vt[next(&s->in) % (sizeof vt / sizeof vt[0])];
        unsigned w = 1u << (next(&s->in) % 3), bits = pg_type_bits(t);
        if (w * bits > 128)
            w = 128 / bits;
        unsigned mix = next(&s->in);
        pg_reg r[4];
        for (unsigned i = 0; i < w; i++) {
            pg_type rt = t;
            if (bits == 8) /* mostly one width; now and then a mix */
                rt = ((mix >> (i == 0 ? 0 : (mix & 0x10 ? i : 0))) & 1) ? PG_U32 : PG_U16;
            r[i] = src_of(s, rt);
        }
        bool shared = next(&s->in) & 1;
        pg_val addr = shared ? tile_addr(s) : s->ptr;
        int64_t off = (int64_t)(next(&s->in) % 4) * w * (bits / 8);
        if (next(&s->in) & 1)
            pg_ld_v(k, shared ? PG_SPACE_SHARED : PG_SPACE_GLOBAL, t, w, addr, off, r);
        else
            pg_st_v(k, shared ? PG_SPACE_SHARED : PG_SPACE_GLOBAL, t, w, addr, off, r);
        break;
    }
    case 31: /* two halves into one register */
        if (next(&s->in) & 1) {
            t = next(&s->in) & 1 ? PG_B32 : PG_B64;
            d = reg_of(s, t == PG_B32 ? PG_U32 : PG_U64);
            a = src_of(s, t == PG_B32 ? PG_U16 : PG_U32);
            b = src_of(s, t == PG_B32 ? PG_BF16 : PG_F32);
            pg_pack(k, t, d, a, b);
        } else if (target_has(s, 80, false, false)) {
            t = next(&s->in) & 1 ? PG_BF16 : PG_F16;
            d = packed_of(s);
            a = src_of(s, PG_F32);
            b = src_of(s, PG_F32);
            pg_cvt_pack(k, t, d, a, b);
        }
        break;
    case 32: /* mma.sync m16n8k16 */
        if (target_has(s, 80, false, false)) {
            pg_reg md[4], ma[4], mb[2], mc[4];
            for (unsigned i = 0; i < 4; i++)
                md[i] = reg_of(s, PG_F32);
            for (unsigned i = 0; i < 4; i++)
                ma[i] = packed_of(s);
            for (unsigned i = 0; i < 2; i++)
                mb[i] = packed_of(s);
            for (unsigned i = 0; i < 4; i++)
                mc[i] = src_of(s, PG_F32);
            pg_mma_m16n8k16_f32(k, next(&s->in) & 1 ? PG_BF16 : PG_F16, md, ma, mb, mc);
        }
        break;
    case 33: /* ldmatrix */
        if (target_has(s, 75, false, false)) {
            unsigned n = 1u << (next(&s->in) % 3);
            bool tr = next(&s->in) & 1;
            pg_reg r[4];
            for (unsigned i = 0; i < n; i++)
                r[i] = packed_of(s);
            a = tile_addr(s);
            pg_ldmatrix(k, n, tr, r, a, (int64_t)(next(&s->in) % 8) * 16);
        }
        break;
    case 34: /* cp.async and its groups */
        if (target_has(s, 80, false, false)) {
            x = next(&s->in) % 4;
            if (x == 0) {
                pg_cp_async_commit(k);
            } else if (x == 1) {
                pg_cp_async_wait(k, next(&s->in) % 8);
            } else {
                unsigned bytes = 4u << (next(&s->in) % 3);
                a = tile_addr(s);
                y = next(&s->in) % 3;
                c = y == 0 ? pg_none() : y == 1 ? pg_u32(next(&s->in) % (bytes + 1))
                                                : src_of(s, PG_U32);
                pg_cp_async(k, a, (int64_t)(next(&s->in) % 4) * bytes, s->ptr, 0, bytes, c);
            }
        }
        break;
    case 35: /* atom and red beyond add */
        t = next(&s->in) & 1 ? PG_U32 : PG_U64;
        x = next(&s->in) % PG_ATOM_COUNT;
        d = next(&s->in) & 1 || x == PG_ATOM_CAS || x == PG_ATOM_EXCH ? reg_of(s, t) : pg_none();
        a = src_of(s, t);
        b = src_of(s, t);
        pg_atom(k, PG_SPACE_GLOBAL, (pg_atom_op)x, t, d, s->ptr, 0, a, b);
        break;
    case 36: { /* mbarrier init, arrive, expect_tx */
        x = next(&s->in) % 3;
        int64_t off = 0;
        if (!target_has(s, x == 2 ? 90 : 80, false, false))
            break;
        a = bar_of(s, &off);
        if (x == 0) {
            b = next(&s->in) & 1 ? pg_u32(1 + next(&s->in)) : src_of(s, PG_U32);
            pg_mbarrier_init(k, a, off, b);
        } else if (x == 1) {
            pg_mbarrier_arrive(k, a, off);
        } else {
            b = next(&s->in) & 1 ? pg_u32(next(&s->in) * 128) : src_of(s, PG_U32);
            pg_mbarrier_arrive_expect_tx(k, a, off, b);
        }
        break;
    }
    case 37: { /* mbarrier waits */
        int64_t off = 0;
        if (!target_has(s, 90, false, false))
            break;
        a = bar_of(s, &off);
        b = next(&s->in) & 1 ? pg_u32(next(&s->in) & 1) : src_of(s, PG_U32);
        if (next(&s->in) & 1) {
            d = reg_of(s, PG_PRED);
            pg_mbarrier_try_wait_parity(k, d, a, off, b);
        } else {
            pg_mbarrier_wait_parity(k, a, off, b);
        }
        break;
    }
    case 38:
        if (target_has(s, 90, false, false)) {
            if (next(&s->in) & 1)
                pg_fence_proxy_async(k);
            else
                pg_fence_mbarrier_init(k);
        }
        break;
    case 39: { /* TMA: a tensor map from the param, coordinates of every class */
        if (!target_has(s, 90, false, false))
            break;
        unsigned dims = 2 + next(&s->in) % 4;
        pg_val co[5];
        for (unsigned i = 0; i < dims; i++)
            co[i] = next(&s->in) & 1 ? pg_s32((int)(next(&s->in) % 64) - 8) : src_of(s, PG_S32);
        int64_t off = 0;
        b = bar_of(s, &off); /* TMA names the mbarrier without an offset */
        a = pg_shared_addr(tile_of(s));
        d = s->tmap.kind == PG_VAL_REG && (next(&s->in) & 7) ? s->tmap : src_of(s, PG_U64);
        pg_cp_async_bulk_tensor(k, dims, a, d, co, b);
        break;
    }
    case 40:
        if (target_has(s, 90, false, false)) {
            if (next(&s->in) & 1)
                pg_cp_async_bulk_commit(k);
            else
                pg_cp_async_bulk_wait(k, next(&s->in) % 64);
        }
        break;
    case 41: /* setmaxnreg: arch-specific targets */
        if (target_has(s, 90, true, false)) {
            x = next(&s->in) & 1;
            y = 24 + 8 * (next(&s->in) % 30);
            pg_setmaxnreg(k, x, y);
        }
        break;
    case 42: /* stmatrix */
        if (target_has(s, 90, false, false)) {
            unsigned n = 1u << (next(&s->in) % 3);
            bool tr = next(&s->in) & 1;
            pg_reg r[4];
            for (unsigned i = 0; i < n; i++)
                r[i] = next(&s->in) & 1 ? packed_of(s) : reg_of(s, PG_F32);
            a = tile_addr(s);
            pg_stmatrix(k, n, tr, a, (int64_t)(next(&s->in) % 8) * 16, r);
        }
        break;
    case 43: /* elect.sync */
        if (target_has(s, 90, false, false)) {
            d = reg_of(s, PG_PRED);
            c = mask_of(s);
            pg_elect_sync(k, d, c);
        }
        break;
    case 44: /* wgmma fence, commit, wait: sm_90a alone */
        if (target_has(s, 90, false, true)) {
            x = next(&s->in) % 3;
            if (x == 0)
                pg_wgmma_fence(k);
            else if (x == 1)
                pg_wgmma_commit(k);
            else
                pg_wgmma_wait(k, next(&s->in) % 8);
        }
        break;
    case 45: { /* wgmma.mma_async, A from shared memory or registers */
        if (!target_has(s, 90, false, true))
            break;
        pg_reg acc[16], ra[4];
        pg_wgmma w = {0};
        w.n = 8 * (1 + next(&s->in) % 4);
        w.ab = next(&s->in) & 1 ? PG_BF16 : PG_F16;
        for (unsigned i = 0; i < w.n / 2; i++)
            acc[i] = reg_of(s, PG_F32);
        w.d = acc;
        if (next(&s->in) & 1) {
            for (unsigned i = 0; i < 4; i++)
                ra[i] = packed_of(s);
            w.a = ra;
            w.a_desc = pg_none();
        } else {
            w.a_desc = reg_of(s, PG_U64);
            w.trans_a = next(&s->in) & 1;
        }
        w.b_desc = next(&s->in) & 7 ? reg_of(s, PG_U64) : src_of(s, PG_U64);
        w.trans_b = next(&s->in) & 1;
        x = next(&s->in) % 4;
        w.scale_d = x == 0 ? pg_u32(0) : x == 1 ? pg_u32(1) : reg_of(s, PG_PRED);
        w.scale_a = next(&s->in) & 1 ? -1 : 1;
        w.scale_b = next(&s->in) & 1 ? -1 : 1;
        pg_wgmma_mma_async(k, &w);
        break;
    }
    case 46: { /* a wgmma descriptor into the u64 pool */
        static const uint32_t sbo[] = {16, 128, 1024, 2048};
        a = next(&s->in) & 1 ? pg_shared_addr(tile_of(s)) : tile_addr(s);
        x = sbo[next(&s->in) % 4];
        y = next(&s->in) % 8;
        pg_swizzle sw = (pg_swizzle)(next(&s->in) % 4);
        d = pg_wgmma_desc(k, a, 16, x, y, sw);
        if (d.kind == PG_VAL_REG && s->nregs[type_index(PG_U64)] < POOL)
            s->regs[type_index(PG_U64)][s->nregs[type_index(PG_U64)]++] = d;
        break;
    }
    case 47: /* a counted named barrier, or an arrive at one */
        x = 1 + next(&s->in) % 15;
        y = 32 * (1 + next(&s->in) % 8);
        if (next(&s->in) & 1)
            pg_bar_sync_count(k, x, y);
        else
            pg_bar_arrive(k, x, y);
        break;
    case 48: /* a cvt of any drawn class into a drawn destination */
        t = pool_types[next(&s->in) % NPT];
        d = reg_of(s, t);
        a = src_of(s, PG_F32);
        pg_cvt(k, t, PG_F32, pg_type_is_float(t) ? (t == PG_F64 ? PG_RND_NONE : PG_RND_RN)
                                                 : PG_RND_RZI, d, a);
        break;
    case 49: /* setp and selp on the 16- and 64-bit pools */
        t = next(&s->in) & 1 ? PG_S16 : PG_S64;
        d = reg_of(s, PG_PRED);
        a = src_of(s, t);
        b = src_of(s, t);
        pg_setp(k, PG_CMP_LT, t, d, a, b);
        c = reg_of(s, t);
        pg_selp(k, t, c, a, b, d);
        break;
    case 50: /* a bitwise op on a b-type register */
        t = next(&s->in) & 1 ? PG_B32 : PG_B64;
        d = reg_of(s, t);
        a = src_of(s, t);
        b = src_of(s, t);
        pg_or(k, t, d, a, b);
        break;
    case 51: { /* the block shape, again: what setmaxnreg may ask for depends on it */
        static const uint32_t th[] = {128, 256, 384, 1024, 96};
        x = th[next(&s->in) % 5];
        y = 1 + next(&s->in) % 4;
        if (!s->maxntid || (next(&s->in) & 1)) {
            pg_kernel_set_maxntid(k, x, 1, 1);
            s->maxntid = true;
        } else {
            pg_kernel_set_minnctapersm(k, y);
        }
        break;
    }
    default: /* bf16 arithmetic (sm_90) or a shift of a 16-bit value */
        if (target_has(s, 90, false, false)) {
            d = reg_of(s, PG_BF16);
            a = src_of(s, PG_BF16);
            b = src_of(s, PG_BF16);
            pg_mul(k, PG_BF16, d, a, b);
        } else {
            d = reg_of(s, PG_U16);
            a = src_of(s, PG_U16);
            pg_shl(k, PG_B16, d, a, pg_u32(next(&s->in) % 16));
        }
        break;
    }
}

int fuzz_builder_run(const uint8_t *data, size_t size, char **ptx, const char **target)
{
    *ptx = NULL;
    state s;
    memset(&s, 0, sizeof s);
    s.in = (input){data, size, 0};
    unsigned first = next(&s.in);
    pg_target t = (pg_target)(first % PG_TARGET_COUNT);
    if (target)
        *target = pg_target_name(t);
    int rc = pg_kernel_create(&s.k, "fuzz", t);
    if (rc)
        return rc;
    s.target = t;
    s.sm = pg_target_sm(t);
    pg_param pp = pg_param_add(s.k, PG_U64, "ptr");
    pg_param pn = pg_param_add(s.k, PG_U32, "n");
    if (first & 0x80)
        s.tmap_param = pg_param_tensor_map(s.k, "tmap");
    s.ptr = pg_param_load(s.k, pp);
    pg_reg n = pg_param_load(s.k, pn);
    s.regs[type_index(PG_U32)][s.nregs[type_index(PG_U32)]++] = n;
    s.tmap = s.tmap_param.id && s.sm >= 90 ? pg_param_addr(s.k, s.tmap_param) : pg_none();
    unsigned flags = next(&s.in);
    s.maxntid = flags & 1;
    if (flags & 1)
        pg_kernel_set_maxntid(s.k, flags & 2 ? 384 : 256, 1, 1);
    if ((flags & 5) == 5) /* without .maxntid, ptxas warns it away */
        pg_kernel_set_minnctapersm(s.k, 1);
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
