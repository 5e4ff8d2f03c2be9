/* SPDX-License-Identifier: MIT */
/*
 * The Hopper instructions (PG_OP_MAP_SM90 in internal.h): warpgroup MMA and
 * its shared-memory descriptors, TMA tensor copies, mbarriers and the async
 * proxy fences, register reallocation, stmatrix, elect.sync, a counted
 * named barrier and its arrive, tensor-map parameters, and the bf16
 * mma.sync. Builders check their operands at the call, as builder.c does;
 * format.c writes their text.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- checks */

static const char *stem(pg_opcode op) { return pg_op_table[op].stem; }

/* Usable, and the target has the op: the table's sm and ISA, then the
 * arch-specific rules the sm number alone cannot say. */
static bool begin(pg_kernel *k, pg_opcode op)
{
    if (!k || k->err)
        return false;
    if (k->emitted) {
        pg_fail(k, PG_ESTATE, "the kernel was already emitted; it takes no more instructions");
        return false;
    }
    const pg_op_info *oi = &pg_op_table[op];
    unsigned fl = oi->flags;
    if ((fl & OPF_ARCH_90A) && k->target != PG_SM_90A) {
        pg_fail(k, PG_ETARGET, "%s needs sm_90a (no other target has it); the target is %s",
                oi->stem, pg_target_name(k->target));
        return false;
    }
    if ((fl & OPF_ARCH_A) && !pg_target_is_arch_specific(k->target)) {
        pg_fail(k, PG_ETARGET, "%s needs an arch-specific target (sm_90a, sm_100a, sm_120a); "
                "the target is %s", oi->stem, pg_target_name(k->target));
        return false;
    }
    return pg_require(k, oi->min_sm, oi->min_isa, oi->stem);
}

/* A register of this kernel whose type is one of `ok` (pg_type bit mask). */
static bool reg_is(pg_kernel *k, pg_opcode op, pg_val v, unsigned ok, const char *what)
{
    if (k->err)
        return false;
    pg_type t = pg_reg_type(k, v);
    if (t == PG_TYPE_COUNT) {
        pg_fail(k, PG_EINVAL, "%s: %s is not a register of this kernel", stem(op), what);
        return false;
    }
    if (!(ok & (1u << t))) {
        pg_fail(k, PG_ETYPE, "%s: %s is a .%s register", stem(op), what, pg_type_name(t));
        return false;
    }
    return true;
}

#define T_(t) (1u << PG_##t)
#define T_U32 (T_(U32) | T_(B32) | T_(S32))
#define T_U64 (T_(U64) | T_(B64) | T_(S64))

/* A u32 operand: such a register, or an immediate in [lo, hi]. */
static bool u32_is(pg_kernel *k, pg_opcode op, pg_val v, uint64_t lo, uint64_t hi,
                   const char *what)
{
    if (v.kind == PG_VAL_REG)
        return reg_is(k, op, v, T_U32, what);
    if (v.kind != PG_VAL_IMM_INT) {
        pg_fail(k, PG_EINVAL, "%s: %s must be a u32 register or an integer immediate", stem(op),
                what);
        return false;
    }
    if (v.bits < lo || v.bits > hi) {
        pg_fail(k, PG_ERANGE, "%s: %s %llu is outside [%llu, %llu]", stem(op), what,
                (unsigned long long)v.bits, (unsigned long long)lo, (unsigned long long)hi);
        return false;
    }
    return true;
}

/* A shared-memory address: a shared symbol, a 32- or 64-bit integer
 * register. */
static bool saddr_is(pg_kernel *k, pg_opcode op, pg_val a, int64_t off, const char *what)
{
    if (k->err)
        return false;
    if (off > INT32_MAX || off < INT32_MIN) {
        pg_fail(k, PG_ERANGE, "%s: %s offset %lld is out of range", stem(op), what, (long long)off);
        return false;
    }
    if (a.kind == PG_VAL_SHARED) {
        if (!pg_shared_ok(k, a)) {
            pg_fail(k, PG_EINVAL, "%s: %s is not a shared symbol of this kernel", stem(op), what);
            return false;
        }
        return true;
    }
    if (a.kind != PG_VAL_REG) {
        pg_fail(k, PG_EINVAL, "%s: %s must be a shared address (register or shared symbol)",
                stem(op), what);
        return false;
    }
    return reg_is(k, op, a, T_U32 | T_U64, what);
}

static instr *push(pg_kernel *k, pg_opcode op, pg_type t) { return pg_push(k, op, t); }

/* ---------------------------------------------------------------- kernel, params, barriers */

pg_param pg_param_tensor_map(pg_kernel *k, const char *name)
{
    pg_param p = pg_param_add(k, PG_B8, name);
    if (p.id)
        k->params[p.id - 1].tensor_map = true;
    return p;
}

pg_reg pg_param_addr(pg_kernel *k, pg_param p)
{
    if (!begin(k, OP_CVTA_PARAM))
        return pg_none();
    if (p.kernel != k->tag || p.id == 0 || p.id > k->nparams) {
        pg_fail(k, PG_EINVAL, "pg_param_addr: not a param of this kernel");
        return pg_none();
    }
    pg_reg d = pg_reg_new(k, PG_U64);
    instr *in = push(k, OP_CVTA_PARAM, PG_U64);
    if (!in)
        return pg_none();
    in->imm = p.id;
    in->ndst = 1;
    in->dst[0] = d;
    return d;
}

/* bar.sync / bar.arrive id, nthreads: the same operands and limits. */
static void bar_counted(pg_kernel *k, pg_opcode op, uint32_t id, uint32_t nthreads)
{
    if (!begin(k, op))
        return;
    if (id > 15) {
        pg_fail(k, PG_ERANGE, "%s %u, %u: barrier ids are 0..15", stem(op), id, nthreads);
        return;
    }
    if (nthreads == 0 || nthreads > 1024 || nthreads % 32) {
        pg_fail(k, PG_ERANGE, "%s %u, %u: the thread count is a multiple of 32 in 32..1024",
                stem(op), id, nthreads);
        return;
    }
    instr *in = push(k, op, PG_PRED);
    if (!in)
        return;
    in->imm = id;
    in->offset = nthreads;
}

void pg_bar_sync_count(pg_kernel *k, uint32_t id, uint32_t nthreads)
{
    bar_counted(k, OP_BAR_N, id, nthreads);
}

void pg_bar_arrive(pg_kernel *k, uint32_t id, uint32_t nthreads)
{
    bar_counted(k, OP_BAR_ARRIVE, id, nthreads);
}

/* ---------------------------------------------------------------- mbarrier, fences */

void pg_mbarrier_init(pg_kernel *k, pg_val bar, int64_t off, pg_val count)
{
    if (!begin(k, OP_MBAR_INIT) || !saddr_is(k, OP_MBAR_INIT, bar, off, "the mbarrier") ||
        !u32_is(k, OP_MBAR_INIT, count, 1, (1u << 20) - 1, "the count"))
        return;
    instr *in = push(k, OP_MBAR_INIT, PG_PRED);
    if (!in)
        return;
    in->offset = off;
    in->nsrc = 2;
    in->src[0] = bar;
    in->src[1] = count;
}

void pg_mbarrier_arrive(pg_kernel *k, pg_val bar, int64_t off)
{
    if (!begin(k, OP_MBAR_ARRIVE) || !saddr_is(k, OP_MBAR_ARRIVE, bar, off, "the mbarrier"))
        return;
    instr *in = push(k, OP_MBAR_ARRIVE, PG_PRED);
    if (!in)
        return;
    in->offset = off;
    in->nsrc = 1;
    in->src[0] = bar;
}

void pg_mbarrier_arrive_expect_tx(pg_kernel *k, pg_val bar, int64_t off, pg_val tx)
{
    if (!begin(k, OP_MBAR_EXPECT_TX) ||
        !saddr_is(k, OP_MBAR_EXPECT_TX, bar, off, "the mbarrier") ||
        !u32_is(k, OP_MBAR_EXPECT_TX, tx, 0, (1u << 20) - 1, "the transaction bytes"))
        return;
    instr *in = push(k, OP_MBAR_EXPECT_TX, PG_PRED);
    if (!in)
        return;
    in->offset = off;
    in->nsrc = 2;
    in->src[0] = bar;
    in->src[1] = tx;
}

void pg_mbarrier_try_wait_parity(pg_kernel *k, pg_reg p, pg_val bar, int64_t off, pg_val parity)
{
    if (!begin(k, OP_MBAR_TRY_WAIT) || !reg_is(k, OP_MBAR_TRY_WAIT, p, T_(PRED), "the result") ||
        !saddr_is(k, OP_MBAR_TRY_WAIT, bar, off, "the mbarrier") ||
        !u32_is(k, OP_MBAR_TRY_WAIT, parity, 0, 1, "the parity"))
        return;
    instr *in = push(k, OP_MBAR_TRY_WAIT, PG_PRED);
    if (!in)
        return;
    in->offset = off;
    in->ndst = 1;
    in->dst[0] = p;
    in->nsrc = 2;
    in->src[0] = bar;
    in->src[1] = parity;
}

void pg_mbarrier_wait_parity(pg_kernel *k, pg_val bar, int64_t off, pg_val parity)
{
    if (!begin(k, OP_MBAR_TRY_WAIT))
        return;
    if (k->has_guard) {
        pg_fail(k, PG_ESTATE, "pg_mbarrier_wait_parity is a loop; a guard cannot apply to it");
        return;
    }
    pg_reg p = pg_reg_new(k, PG_PRED);
    pg_label top = pg_label_new(k, "mbar_wait");
    pg_label_bind(k, top);
    pg_mbarrier_try_wait_parity(k, p, bar, off, parity);
    pg_bra_if(k, p, true, top);
}

void pg_fence_proxy_async(pg_kernel *k)
{
    if (begin(k, OP_FENCE_PROXY_ASYNC))
        (void)push(k, OP_FENCE_PROXY_ASYNC, PG_PRED);
}

void pg_fence_mbarrier_init(pg_kernel *k)
{
    if (begin(k, OP_FENCE_MBAR_INIT))
        (void)push(k, OP_FENCE_MBAR_INIT, PG_PRED);
}

/* ---------------------------------------------------------------- TMA */

void pg_cp_async_bulk_tensor(pg_kernel *k, unsigned dims, pg_val sdst, pg_reg tmap,
                             const pg_val *coords, pg_val bar)
{
    if (!begin(k, OP_TMA_LOAD))
        return;
    if (dims < 2 || dims > 5) {
        pg_fail(k, PG_EINVAL, "cp.async.bulk.tensor: %ud (2 to 5 dimensions)", dims);
        return;
    }
    if (!coords) {
        pg_fail(k, PG_EINVAL, "cp.async.bulk.tensor: no coordinates");
        return;
    }
    if (!saddr_is(k, OP_TMA_LOAD, sdst, 0, "the destination") ||
        !reg_is(k, OP_TMA_LOAD, tmap, T_U64, "the tensor map") ||
        !saddr_is(k, OP_TMA_LOAD, bar, 0, "the mbarrier"))
        return;
    for (unsigned i = 0; i < dims; i++) {
        if (coords[i].kind == PG_VAL_IMM_INT) {
            int64_t c = (int64_t)coords[i].bits;
            if (c < INT32_MIN || c > INT32_MAX) {
                pg_fail(k, PG_ERANGE, "cp.async.bulk.tensor: coordinate %u does not fit s32", i);
                return;
            }
        } else if (!reg_is(k, OP_TMA_LOAD, coords[i], T_U32, "a coordinate")) {
            return;
        }
    }
    instr *in = push(k, OP_TMA_LOAD, PG_PRED);
    if (!in)
        return;
    in->width = (uint8_t)dims;
    in->nsrc = (uint8_t)(3 + dims);
    in->src[0] = sdst;
    in->src[1] = tmap;
    in->src[2] = bar;
    for (unsigned i = 0; i < dims; i++)
        in->src[3 + i] = coords[i];
}

void pg_cp_async_bulk_commit(pg_kernel *k)
{
    if (begin(k, OP_BULK_COMMIT))
        (void)push(k, OP_BULK_COMMIT, PG_PRED);
}

void pg_cp_async_bulk_wait(pg_kernel *k, uint32_t n)
{
    if (!begin(k, OP_BULK_WAIT))
        return;
    if (n > 63) {
        pg_fail(k, PG_ERANGE, "cp.async.bulk.wait_group %u: at most 63", n);
        return;
    }
    instr *in = push(k, OP_BULK_WAIT, PG_PRED);
    if (in)
        in->imm = n;
}

/* ---------------------------------------------------------------- registers, stmatrix, elect */

/* The counts ptxas allows a .dec (C7406): pg_maxnreg_limit in builder.c,
 * beside the .maxntid and .minnctapersm that decide them. */
void pg_setmaxnreg(pg_kernel *k, bool inc, uint32_t n)
{
    if (!begin(k, OP_SETMAXNREG))
        return;
    if (n < 24 || n > 256 || n % 8) {
        pg_fail(k, PG_ERANGE, "setmaxnreg.%s %u: the count is a multiple of 8 in 24..256",
                inc ? "inc" : "dec", n);
        return;
    }
    unsigned limit = pg_maxnreg_limit(k);
    if (!inc && limit && n > limit) {
        if (k->maxnreg_inc)
            pg_fail(k, PG_ERANGE, "setmaxnreg.dec.sync.aligned.u32 %u: more than the %u registers "
                    "of the kernel's largest setmaxnreg.inc; ptxas refuses a .dec above the "
                    "registers a thread can have (C7406)", n, limit);
        else
            pg_fail(k, PG_ERANGE, "setmaxnreg.dec.sync.aligned.u32 %u: more than the %u registers "
                    "a thread has at entry (.maxntid %u, %u, %u and .minnctapersm %u); ptxas "
                    "refuses a .dec above the registers a thread can have (C7406)", n, limit,
                    k->maxntid[0], k->maxntid[1], k->maxntid[2], k->minnctapersm);
        return;
    }
    unsigned top = k->maxnreg_inc > n ? k->maxnreg_inc : n;
    if (inc && k->maxnreg_dec > top) {
        pg_fail(k, PG_ERANGE, "setmaxnreg.inc.sync.aligned.u32 %u: the kernel's "
                "setmaxnreg.dec.sync.aligned.u32 %u (instruction %u) asks for more, and with an "
                ".inc ptxas holds every .dec to the largest count an .inc asks for (C7406)", n,
                k->maxnreg_dec, k->maxnreg_dec_at);
        return;
    }
    instr *in = push(k, OP_SETMAXNREG, PG_U32);
    if (!in)
        return;
    in->imm = n;
    in->mod2 = inc;
    if (inc) {
        k->maxnreg_inc = top;
    } else if (n > k->maxnreg_dec) {
        k->maxnreg_dec = n;
        k->maxnreg_dec_at = k->nins - 1;
    }
}

void pg_stmatrix(pg_kernel *k, unsigned num, bool trans, pg_val saddr, int64_t off,
                 const pg_reg *v)
{
    if (!begin(k, OP_STMATRIX))
        return;
    if (num != 1 && num != 2 && num != 4) {
        pg_fail(k, PG_EINVAL, "stmatrix: .x%u (1, 2 or 4 matrices)", num);
        return;
    }
    if (!v) {
        pg_fail(k, PG_EINVAL, "stmatrix: no source registers");
        return;
    }
    if (off % 16) {
        pg_fail(k, PG_EINVAL, "stmatrix: offset %lld is not a multiple of the 16-byte row",
                (long long)off);
        return;
    }
    if (!saddr_is(k, OP_STMATRIX, saddr, off, "the address"))
        return;
    for (unsigned i = 0; i < num; i++)
        if (!reg_is(k, OP_STMATRIX, v[i], T_U32 | T_(F32), "a source"))
            return;
    instr *in = push(k, OP_STMATRIX, PG_B16);
    if (!in)
        return;
    in->mod2 = trans;
    in->width = (uint8_t)num;
    in->offset = off;
    in->nsrc = (uint8_t)(1 + num);
    in->src[0] = saddr;
    for (unsigned i = 0; i < num; i++)
        in->src[1 + i] = v[i];
}

void pg_elect_sync(pg_kernel *k, pg_reg p, pg_val mask)
{
    if (!begin(k, OP_ELECT) || !reg_is(k, OP_ELECT, p, T_(PRED), "the result") ||
        !u32_is(k, OP_ELECT, mask, 0, UINT32_MAX, "the member mask"))
        return;
    instr *in = push(k, OP_ELECT, PG_PRED);
    if (!in)
        return;
    in->ndst = 1;
    in->dst[0] = p;
    in->nsrc = 1;
    in->src[0] = mask;
}

/* ---------------------------------------------------------------- mma.sync bf16 */

void pg_mma_m16n8k16_bf16_f32(pg_kernel *k, const pg_reg *d, const pg_reg *a, const pg_reg *b,
                              const pg_reg *c)
{
    pg_mma_m16n8k16_f32(k, PG_BF16, d, a, b, c);
}

/* ---------------------------------------------------------------- wgmma */

void pg_wgmma_fence(pg_kernel *k)
{
    if (begin(k, OP_WGMMA_FENCE))
        (void)push(k, OP_WGMMA_FENCE, PG_PRED);
}

void pg_wgmma_commit(pg_kernel *k)
{
    if (begin(k, OP_WGMMA_COMMIT))
        (void)push(k, OP_WGMMA_COMMIT, PG_PRED);
}

void pg_wgmma_wait(pg_kernel *k, uint32_t n)
{
    if (!begin(k, OP_WGMMA_WAIT))
        return;
    if (n > 7) {
        pg_fail(k, PG_ERANGE, "wgmma.wait_group %u: at most 7 groups can be left pending", n);
        return;
    }
    instr *in = push(k, OP_WGMMA_WAIT, PG_PRED);
    if (in)
        in->imm = n;
}

uint64_t pg_wgmma_desc_bits(uint32_t saddr, uint32_t lbo, uint32_t sbo, unsigned base_offset,
                            pg_swizzle sw)
{
    return (uint64_t)((saddr >> 4) & 0x3fffu) | (uint64_t)((lbo >> 4) & 0x3fffu) << 16 |
           (uint64_t)((sbo >> 4) & 0x3fffu) << 32 | (uint64_t)(base_offset & 7u) << 49 |
           (uint64_t)((unsigned)sw & 3u) << 62;
}

pg_reg pg_wgmma_desc(pg_kernel *k, pg_val saddr, uint32_t lbo, uint32_t sbo, unsigned base_offset,
                     pg_swizzle sw)
{
    if (!k || k->err)
        return pg_none();
    if (lbo % 16 || sbo % 16 || lbo >= (1u << 18) || sbo >= (1u << 18)) {
        pg_fail(k, PG_ERANGE, "wgmma descriptor: leading %u and stride %u byte offsets are "
                "multiples of 16 below 2^18", lbo, sbo);
        return pg_none();
    }
    if (base_offset > 7 || (unsigned)sw > PG_SWIZZLE_32B) {
        pg_fail(k, PG_ERANGE, "wgmma descriptor: base offset %u (0..7), swizzle %d (0..3)",
                base_offset, (int)sw);
        return pg_none();
    }
    if (saddr.kind != PG_VAL_SHARED && !(saddr.kind == PG_VAL_REG &&
                                         reg_is(k, OP_WGMMA, saddr, T_U32, "the tile address"))) {
        if (!k->err)
            pg_fail(k, PG_EINVAL, "wgmma descriptor: the tile address is a u32 register or a "
                    "shared symbol");
        return pg_none();
    }
    /* The address is 18 bits of shared memory: bits 4..17 are the field. */
    pg_reg a = saddr.kind == PG_VAL_SHARED ? pgv_mov(k, PG_U32, saddr) : saddr;
    pg_reg f = pgv_shr(k, PG_U32, a, pg_u32(4));
    pg_and(k, PG_U32, f, f, pg_u32(0x3fff));
    pg_reg d = pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, f);
    pg_or(k, PG_B64, d, d, pg_u64(pg_wgmma_desc_bits(0, lbo, sbo, base_offset, sw)));
    return k->err ? pg_none() : d;
}

void pg_wgmma_mma_async(pg_kernel *k, const pg_wgmma *w)
{
    if (!begin(k, OP_WGMMA))
        return;
    if (!w || !w->d) {
        pg_fail(k, PG_EINVAL, "wgmma.mma_async: NULL parameters or accumulators");
        return;
    }
    if (w->n < 8 || w->n > 256 || w->n % 8) {
        pg_fail(k, PG_ERANGE, "wgmma.mma_async: n = %u (8..256, a multiple of 8)", w->n);
        return;
    }
    if (w->ab != PG_F16 && w->ab != PG_BF16) {
        pg_fail(k, PG_ETYPE, "wgmma.mma_async: A and B are f16 or bf16, not .%s",
                pg_type_name(w->ab) ? pg_type_name(w->ab) : "?");
        return;
    }
    int sa = w->scale_a ? w->scale_a : 1, sb = w->scale_b ? w->scale_b : 1;
    if ((sa != 1 && sa != -1) || (sb != 1 && sb != -1)) {
        pg_fail(k, PG_ERANGE, "wgmma.mma_async: imm-scale-a %d and imm-scale-b %d are 1 or -1",
                w->scale_a, w->scale_b);
        return;
    }
    bool a_regs = w->a_desc.kind == PG_VAL_NONE;
    if (a_regs && !w->a) {
        pg_fail(k, PG_EINVAL, "wgmma.mma_async: A is neither a descriptor nor registers");
        return;
    }
    if (a_regs && w->trans_a) {
        pg_fail(k, PG_EINVAL, "wgmma.mma_async: A from registers has no transpose");
        return;
    }
    if (!a_regs && !reg_is(k, OP_WGMMA, w->a_desc, T_U64, "the A descriptor"))
        return;
    if (!reg_is(k, OP_WGMMA, w->b_desc, T_U64, "the B descriptor"))
        return;
    if (w->scale_d.kind == PG_VAL_IMM_INT) {
        if (w->scale_d.bits > 1) {
            pg_fail(k, PG_ERANGE, "wgmma.mma_async: scale-d %llu is 0 or 1",
                    (unsigned long long)w->scale_d.bits);
            return;
        }
    } else if (!reg_is(k, OP_WGMMA, w->scale_d, T_(PRED), "scale-d")) {
        return;
    }
    unsigned nacc = w->n / 2;
    for (unsigned i = 0; i < nacc; i++)
        if (!reg_is(k, OP_WGMMA, w->d[i], T_(F32), "an accumulator"))
            return;
    if (a_regs)
        for (unsigned i = 0; i < 4; i++)
            if (!reg_is(k, OP_WGMMA, w->a[i], T_U32, "an A fragment"))
                return;
    pg_val *acc = arena_alloc(&k->mem, sizeof(pg_val) * nacc);
    if (!acc) {
        pg_fail(k, PG_ENOMEM, "out of memory");
        return;
    }
    memcpy(acc, w->d, sizeof(pg_val) * nacc);
    instr *in = push(k, OP_WGMMA, PG_F32);
    if (!in)
        return;
    in->type2 = (uint8_t)w->ab;
    in->imm = w->n;
    in->mod = sa < 0;
    in->mod2 = sb < 0;
    in->offset = (w->trans_a ? 1 : 0) | (w->trans_b ? 2 : 0) | (a_regs ? 4 : 0);
    in->acc = acc;
    in->nacc = nacc;
    unsigned s = 0;
    if (a_regs)
        for (unsigned i = 0; i < 4; i++)
            in->src[s++] = w->a[i];
    else
        in->src[s++] = w->a_desc;
    in->src[s++] = w->b_desc;
    in->src[s++] = w->scale_d;
    in->nsrc = (uint8_t)s;
}
