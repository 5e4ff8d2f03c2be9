/* SPDX-License-Identifier: MIT */
/*
 * AdamW (DESIGN §3) with torch.optim.AdamW's decoupled weight decay:
 *     m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *     p = p (1 - lr wd) - lr m bc1 / (sqrt(v bc2) + eps),  bc = 1 / (1 - beta^t)
 * adamw_step takes the hyper-parameters as kernel arguments; adamw_step_dev
 * reads them from seven floats in device memory, [lr, beta1, beta2, eps,
 * weight_decay, bias_correction1, bias_correction2], so that a captured
 * graph replayed step after step sees the values of each step.
 *
 * The multi-tensor optimizer folds the gradient clip into the update: one
 * pass reads the gradients for their squared sums (adamw_multi_norm, in
 * clip.c), one block turns them into a coefficient a norm group and
 * advances the step (adamw_multi_finalize), one pass reads p, g, m, v and
 * writes p, m, v with g scaled by its group's coefficient
 * (adamw_multi_step): 32 bytes an f32 parameter. A non-finite norm skips
 * the step: finalize leaves the step counter alone and counts the skip,
 * the update pass writes nothing.
 *
 * Every kernel here computes an element with adamw_elem: same inputs, same
 * bits, whichever kernel and whichever (vector or scalar) path.
 */
#include "kernels.h"

/* The per-thread constants of the update, from h[PGK_HYPER_STEP_ARGS]. */
typedef struct adamw_consts {
    pg_reg b1, b2, eps, bc1, bc2;
    pg_reg omb1, omb2; /* 1 - beta */
    pg_reg decay;      /* 1 - lr wd */
    pg_reg nlr;        /* -lr */
} adamw_consts;

static adamw_consts adamw_consts_of(pg_kernel *k, const pg_reg *h)
{
    adamw_consts c;
    c.b1 = h[PGK_HYPER_BETA1];
    c.b2 = h[PGK_HYPER_BETA2];
    c.eps = h[PGK_HYPER_EPS];
    c.bc1 = h[PGK_HYPER_BC1];
    c.bc2 = h[PGK_HYPER_BC2];
    c.omb1 = pgv_sub(k, PG_F32, pg_f32(1.0f), c.b1);
    c.omb2 = pgv_sub(k, PG_F32, pg_f32(1.0f), c.b2);
    pg_reg lw = pgv_mul(k, PG_F32, h[PGK_HYPER_LR], h[PGK_HYPER_WD]);
    c.decay = pgv_sub(k, PG_F32, pg_f32(1.0f), lw);
    c.nlr = pgv_neg(k, PG_F32, h[PGK_HYPER_LR]);
    return c;
}

/* One element, in registers: p, m, v updated in place from g (scaled by
 * coef first unless coef is PG_VAL_NONE). */
static void adamw_elem(pg_kernel *k, const adamw_consts *c, pg_val coef, pg_reg p, pg_reg g,
                       pg_reg m, pg_reg v)
{
    if (coef.kind != PG_VAL_NONE)
        pg_mul(k, PG_F32, g, g, coef);
    pg_reg t = pgv_mul(k, PG_F32, c->omb1, g);
    pg_fma(k, PG_F32, m, c->b1, m, t);
    pg_reg gg = pgv_mul(k, PG_F32, g, g);
    pg_mul(k, PG_F32, t, c->omb2, gg);
    pg_fma(k, PG_F32, v, c->b2, v, t);
    pg_reg den = pgv_mul(k, PG_F32, v, c->bc2);
    pg_sqrt(k, PG_F32, den, den);
    pg_add(k, PG_F32, den, den, c->eps);
    pg_reg upd = pgv_mul(k, PG_F32, m, c->bc1);
    pg_div(k, PG_F32, upd, upd, den);
    pg_mul(k, PG_F32, p, p, c->decay);
    pg_fma(k, PG_F32, p, c->nlr, upd, p);
}

/* Update element gid of params, grads, m, v (buf[0..3]) with the
 * hyper-parameters h[PGK_HYPER_STEP_ARGS] (f32 registers, enum pgk_hyper). */
static void adamw_body(pg_kernel *k, const pg_reg *buf, const pg_reg *h, pg_reg gid)
{
    adamw_consts c = adamw_consts_of(k, h);
    pg_reg off = pgv_mul_wide(k, PG_U32, gid, pg_u32(4));
    pg_reg addr[4], val[4];
    for (int i = 0; i < 4; i++) {
        addr[i] = pgv_add(k, PG_U64, buf[i], off);
        val[i] = pgv_ld(k, PG_SPACE_GLOBAL, PG_F32, addr[i], 0);
    }
    adamw_elem(k, &c, pg_none(), val[0], val[1], val[2], val[3]);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr[2], 0, val[2]);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr[3], 0, val[3]);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, addr[0], 0, val[0]);
}

static int build_adamw(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_reg buf[4], h[PGK_HYPER_STEP_ARGS];
    for (int i = 0; i < 4; i++)
        buf[i] = pg_param_load(k, p[i]);
    for (int i = 0; i < PGK_HYPER_STEP_ARGS; i++)
        h[i] = pg_param_load(k, p[4 + i]);
    pg_reg n = pg_param_load(k, p[4 + PGK_HYPER_STEP_ARGS]);
    pg_label out = pg_label_new(k, "exit");
    pg_reg gid = pgk_guarded_gid(k, n, out);
    adamw_body(k, buf, h, gid);
    return pgk_finish(k, out);
}

static int build_adamw_dev(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                           const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_reg buf[4], h[PGK_HYPER_STEP_ARGS];
    for (int i = 0; i < 4; i++)
        buf[i] = pg_param_load(k, p[i]);
    pg_reg hyper = pg_param_load(k, p[4]);
    pg_reg n = pg_param_load(k, p[5]);
    pg_label out = pg_label_new(k, "exit");
    pg_reg gid = pgk_guarded_gid(k, n, out);
    pg_comment(k, "hyper-parameters from device memory, read when the kernel runs");
    for (int i = 0; i < PGK_HYPER_STEP_ARGS; i++)
        h[i] = pgv_ld(k, PG_SPACE_GLOBAL, PG_F32, hyper, 4 * i);
    adamw_body(k, buf, h, gid);
    return pgk_finish(k, out);
}

static const pgk_param adamw_params[] = {
    {"params", PG_U64, true},
    {"grads", PG_U64, true},
    {"m", PG_U64, true},
    {"v", PG_U64, true},
    {"lr", PG_F32, false},
    {"beta1", PG_F32, false},
    {"beta2", PG_F32, false},
    {"eps", PG_F32, false},
    {"weight_decay", PG_F32, false},
    {"bias_correction1", PG_F32, false},
    {"bias_correction2", PG_F32, false},
    {"n", PG_U32, false},
};

const pgk_desc pgk_desc_adamw_step = {
    .name = "adamw_step",
    .summary = "AdamW update of params, m, v in place; hyper-parameters as arguments",
    PGK_PARAMS(adamw_params),
    PGK_KNOBS(pgk_knob_n),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_adamw,
    .launch = pgk_launch_elementwise,
};

static const pgk_param adamw_dev_params[] = {
    {"params", PG_U64, true},
    {"grads", PG_U64, true},
    {"m", PG_U64, true},
    {"v", PG_U64, true},
    {"hyper_ptr", PG_U64, true},
    {"n", PG_U32, false},
};

const pgk_desc pgk_desc_adamw_step_dev = {
    .name = "adamw_step_dev",
    .summary = "AdamW as adamw_step, hyper-parameters read from 7 f32 in device memory",
    PGK_PARAMS(adamw_dev_params),
    PGK_KNOBS(pgk_knob_n),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_adamw_dev,
    .launch = pgk_launch_elementwise,
};

/* ---------------------------------------------------------------- adamw_hyper_advance */

/* The AdamW step counter kept on the device, so that a captured training
 * step replayed N times takes N optimizer steps. hyper holds the
 * PGK_HYPER_COUNT f32 of enum pgk_hyper (pgk.h): adamw_step_dev's seven,
 * then beta1^t, beta2^t and t.
 * One thread: p1 = beta1^(t-1) * beta1, p2 likewise, bc = 1 / (1 - p), t + 1.
 * The powers are running products in f32, the same a host can mirror. */
/* Advance the step in hyper (a u64 register): what adamw_hyper_advance
 * does, and adamw_multi_finalize for a step it does not skip. */
static void hyper_advance(pg_kernel *k, pg_reg h)
{
    pg_reg b1 = pg_reg_new(k, PG_F32);
    pg_reg b2 = pg_reg_new(k, PG_F32);
    pg_reg p1 = pg_reg_new(k, PG_F32);
    pg_reg p2 = pg_reg_new(k, PG_F32);
    pg_reg t = pg_reg_new(k, PG_F32);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_BETA1, b1);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_BETA2, b2);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_BETA1_POW, p1);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_BETA2_POW, p2);
    pg_ld(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_STEP, t);
    pg_comment(k, "p = p * beta; bc = 1 / (1 - p); t = t + 1");
    pg_mul(k, PG_F32, p1, p1, b1);
    pg_mul(k, PG_F32, p2, p2, b2);
    pg_reg bc1 = pgv_sub(k, PG_F32, pg_f32(1.0f), p1);
    pg_div(k, PG_F32, bc1, pg_f32(1.0f), bc1);
    pg_reg bc2 = pgv_sub(k, PG_F32, pg_f32(1.0f), p2);
    pg_div(k, PG_F32, bc2, pg_f32(1.0f), bc2);
    pg_add(k, PG_F32, t, t, pg_f32(1.0f));
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_BC1, bc1);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_BC2, bc2);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_BETA1_POW, p1);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_BETA2_POW, p2);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, h, 4 * PGK_HYPER_STEP, t);
}

static int build_hyper_advance(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                               const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    hyper_advance(k, pg_param_load(k, p[0]));
    pg_ret(k);
    return pg_kernel_error(k);
}

static const pgk_param hyper_params[] = {
    {"hyper_ptr", PG_U64, true},
};

const pgk_desc pgk_desc_adamw_hyper_advance = {
    .name = "adamw_hyper_advance",
    .summary = "one AdamW step on the device: t += 1, bias corrections 1/(1 - beta^t) in "
               "hyper[5..6]",
    PGK_PARAMS(hyper_params),
    .min_target = PG_SM_70,
    .threads = 1,
    .build = build_hyper_advance,
    .launch = pgk_launch_single,
};

/* ---------------------------------------------------------------- adamw_multi_finalize */

uint32_t pgk_adamw_multi_blocks(uint32_t n)
{
    uint32_t b = pgk_ceil_div(n, 4096u);
    return b ? b : 1;
}

/* Blocks of 1024 elements (squared_sum_reduce's) cost a table search and
 * a block reduction for 4 KiB of reads: a model of many small tensors
 * (LoRA adapters) spent more time in them than reading. */
uint32_t pgk_adamw_norm_blocks(uint32_t n)
{
    uint32_t b = pgk_ceil_div(n, 4096u);
    return b == 0 ? 1 : b > 256 ? 256 : b;
}

/* One block of 1024 threads. Norm group g owns the partial sums
 * partials[groups[g] .. groups[g+1]); its norm is sqrt(their sum) and its
 * coefficient min(1, max_norm / (norm + norm_eps)), 1 for a non-finite
 * norm. One group (the global norm): the whole block sums it, thread t
 * the partials t, t + 1024, ... in order, then a fixed-order block
 * reduction. Several (one a layer): warp w takes groups w, w + 32, ...,
 * lane l the partials l, l + 32, ..., then a butterfly: no barrier a group.
 * Either way eight of a thread's loads are in flight and its additions
 * keep their order. Then thread 0 decides the step: any non-finite norm
 * skips it (SKIP = 1, SKIPPED += 1, the hyper buffer untouched); otherwise
 * SKIP = 0 and the step advances as adamw_hyper_advance does. With no
 * groups (no clipping) group 0 reads coefficient 1 and norm 0. */
#define FINALIZE_THREADS 1024u

/* acc += base[i] for i = start, start + stride, ... < count, in that order,
 * eight loads in flight while i + 7 stride < count. */
static void sum_in_order(pg_kernel *k, pg_reg acc, pg_reg base, pg_reg start, pg_val stride,
                         pg_reg count)
{
    pg_reg pe = pg_reg_new(k, PG_PRED);
    pg_reg i = pgv_mov(k, PG_U32, start);
    pg_reg far = pgv_mul(k, PG_U32, stride, pg_u32(7));
    pg_reg stride8 = pgv_shl(k, PG_U32, stride, pg_u32(3));
    pg_reg stride_b = pgv_mul_wide(k, PG_U32, stride, pg_u32(4));
    pg_reg last = pg_reg_new(k, PG_U32);
    pg_label unrolled = pg_label_new(k, "sum8");
    pg_label one = pg_label_new(k, "sum1");
    pg_label summed = pg_label_new(k, "summed");
    pg_label_bind(k, unrolled);
    pg_add(k, PG_U32, last, i, far);
    pg_setp(k, PG_CMP_GE, PG_U32, pe, last, count);
    pg_bra_if(k, pe, false, one);
    pg_reg a = pgk_elem_addr(k, base, i, 4);
    pg_reg x8[8];
    for (int u = 0; u < 8; u++) {
        x8[u] = pgk_ld_f32(k, a);
        if (u < 7)
            pg_add(k, PG_U64, a, a, stride_b);
    }
    for (int u = 0; u < 8; u++)
        pg_add(k, PG_F32, acc, acc, x8[u]);
    pg_add(k, PG_U32, i, i, stride8);
    pg_bra(k, unrolled);
    pg_label_bind(k, one);
    pg_setp(k, PG_CMP_GE, PG_U32, pe, i, count);
    pg_bra_if(k, pe, false, summed);
    pg_reg x = pgk_ld_f32(k, pgk_elem_addr(k, base, i, 4));
    pg_add(k, PG_F32, acc, acc, x);
    pg_add(k, PG_U32, i, i, stride);
    pg_bra(k, one);
    pg_label_bind(k, summed);
}

/* Group g's partials: their base address and count. */
static pg_reg group_partials(pg_kernel *k, pg_reg partials, pg_reg groups, pg_reg g,
                             pg_reg *count)
{
    pg_reg lo = pgv_ld(k, PG_SPACE_GLOBAL, PG_U32, pgk_elem_addr(k, groups, g, 4), 0);
    pg_reg hi = pgv_ld(k, PG_SPACE_GLOBAL, PG_U32, pgk_elem_addr(k, groups, g, 4), 4);
    *count = pgv_sub(k, PG_U32, hi, lo);
    return pgk_elem_addr(k, partials, lo, 4);
}

/* Group g's coefficient and norm from its sum, stored where `store` holds
 * (one thread); bad = 1 when the norm is not finite. */
static void group_result(pg_kernel *k, pg_reg sum, pg_reg max_norm, pg_reg norm_eps,
                         pg_reg state, pg_reg g, pg_reg store, pg_reg bad)
{
    pg_comment(k, "coefficient = min(1, max_norm / (norm + norm_eps)); 1 for a non-finite norm");
    pg_reg pe = pg_reg_new(k, PG_PRED);
    pg_reg norm = pgv_sqrt(k, PG_F32, sum);
    pg_reg den = pgv_add(k, PG_F32, norm, norm_eps);
    pg_reg coef = pgv_div(k, PG_F32, max_norm, den); /* norm 0 gives +inf: 1 */
    pg_min(k, PG_F32, coef, coef, pg_f32(1.0f));
    pg_reg mag = pgv_abs(k, PG_F32, norm);
    pg_setp(k, PG_CMP_LT, PG_F32, pe, mag, pg_f32(__builtin_inff()));
    pg_selp(k, PG_F32, coef, coef, pg_f32(1.0f), pe);
    pg_selp(k, PG_U32, bad, bad, pg_u32(1), pe);
    pg_reg slot = pgk_elem_addr(k, state, g, 8);
    pg_guard(k, store, false);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, slot, 4 * PGK_OPTIM_GROUPS, coef);
    pg_guard(k, store, false);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, slot, 4 * PGK_OPTIM_GROUPS + 4, norm);
}

static int build_multi_finalize(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                                const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_shared scratch = pg_shared_static(k, PG_F32, 32, 4, "warp_sums");
    pg_shared flags = pg_shared_static(k, PG_U32, 32, 4, "warp_bad");
    pg_reg partials = pg_param_load(k, p[0]);
    pg_reg groups = pg_param_load(k, p[1]);
    pg_reg ngroups = pg_param_load(k, p[2]);
    pg_reg max_norm = pg_param_load(k, p[3]);
    pg_reg norm_eps = pg_param_load(k, p[4]);
    pg_reg state = pg_param_load(k, p[5]);
    pg_reg hyper = pg_param_load(k, p[6]);

    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg ntid = pg_sreg_read(k, PG_SREG_NTID_X);
    pg_reg first = pgv_setp(k, PG_CMP_EQ, PG_U32, tid, pg_u32(0));
    pg_reg bad = pgv_mov(k, PG_U32, pg_u32(0));
    pg_reg pe = pg_reg_new(k, PG_PRED);
    pg_label per_warp = pg_label_new(k, "warp_a_group");
    pg_label decide = pg_label_new(k, "decide");
    pg_reg several = pgv_setp(k, PG_CMP_GT, PG_U32, ngroups, pg_u32(1));
    pg_bra_if(k, several, false, per_warp);

    pg_comment(k, "no group or one: the block sums it");
    pg_loop G;
    pg_reg g = pg_for_begin(k, &G, pg_u32(0), ngroups, pg_u32(1));
    pg_reg count;
    pg_reg base = group_partials(k, partials, groups, g, &count);
    pg_reg acc = pgk_zero_f32(k);
    sum_in_order(k, acc, base, tid, ntid, count);
    pg_reg sum = pg_block_reduce(k, PG_REDUCE_SUM, PG_F32, acc, scratch);
    group_result(k, sum, max_norm, norm_eps, state, g, first, bad);
    pg_for_end(k, &G);
    pg_bra(k, decide);

    pg_comment(k, "groups a layer: warp w sums groups w, w + 32, ...");
    pg_label_bind(k, per_warp);
    pg_reg lane = pgv_and(k, PG_B32, tid, pg_u32(31));
    pg_reg warp = pgv_shr(k, PG_U32, tid, pg_u32(5));
    pg_reg nwarps = pgv_shr(k, PG_U32, ntid, pg_u32(5));
    pg_reg lane0 = pgv_setp(k, PG_CMP_EQ, PG_U32, lane, pg_u32(0));
    pg_loop W;
    pg_reg gw = pg_for_begin(k, &W, warp, ngroups, nwarps);
    pg_reg wcount;
    pg_reg wbase = group_partials(k, partials, groups, gw, &wcount);
    pg_reg wacc = pgk_zero_f32(k);
    sum_in_order(k, wacc, wbase, lane, pg_u32(32), wcount);
    pg_reg wsum = pg_warp_reduce(k, PG_REDUCE_SUM, PG_F32, wacc);
    group_result(k, wsum, max_norm, norm_eps, state, gw, lane0, bad);
    pg_for_end(k, &W);
    pg_comment(k, "each warp's verdict to shared memory; thread 0 takes them all");
    pg_reg fa = pgv_mov(k, PG_U32, pg_shared_addr(flags));
    pg_reg fslot = pgv_mad(k, PG_U32, warp, pg_u32(4), fa);
    pg_guard(k, lane0, false);
    pg_st(k, PG_SPACE_SHARED, PG_U32, fslot, 0, bad);
    pg_bar_sync(k, 0);
    pg_bra_if(k, first, true, decide);
    pg_loop F;
    pg_reg w = pg_for_begin(k, &F, pg_u32(1), nwarps, pg_u32(1));
    pg_reg fw = pgv_ld(k, PG_SPACE_SHARED, PG_U32, pgv_mad(k, PG_U32, w, pg_u32(4), fa), 0);
    pg_or(k, PG_B32, bad, bad, fw);
    pg_for_end(k, &F);

    pg_comment(k, "thread 0: skip the step on a non-finite norm, else advance it");
    pg_label_bind(k, decide);
    pg_guard(k, first, true);
    pg_ret(k);
    pg_label have = pg_label_new(k, "have_groups");
    pg_setp(k, PG_CMP_NE, PG_U32, pe, ngroups, pg_u32(0));
    pg_bra_if(k, pe, false, have);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, state, 4 * PGK_OPTIM_GROUPS, pg_f32(1.0f));
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, state, 4 * PGK_OPTIM_GROUPS + 4, pg_f32(0.0f));
    pg_label_bind(k, have);
    pg_st(k, PG_SPACE_GLOBAL, PG_U32, state, 4 * PGK_OPTIM_SKIP, bad);
    pg_label advance = pg_label_new(k, "advance");
    pg_setp(k, PG_CMP_EQ, PG_U32, pe, bad, pg_u32(0));
    pg_bra_if(k, pe, false, advance);
    pg_reg skipped = pgv_ld(k, PG_SPACE_GLOBAL, PG_U32, state, 4 * PGK_OPTIM_SKIPPED);
    pg_add(k, PG_U32, skipped, skipped, pg_u32(1));
    pg_st(k, PG_SPACE_GLOBAL, PG_U32, state, 4 * PGK_OPTIM_SKIPPED, skipped);
    pg_ret(k);
    pg_label_bind(k, advance);
    hyper_advance(k, hyper);
    pg_ret(k);
    return pg_kernel_error(k);
}

static int launch_one_block(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out)
{
    (void)knobs;
    *out = (pgk_launch){{1, 1, 1}, {d->threads, 1, 1}, 0};
    return PG_OK;
}

static const pgk_param finalize_params[] = {
    {"partials", PG_U64, true},
    {"groups", PG_U64, true},
    {"ngroups", PG_U32, false},
    {"max_norm", PG_F32, false},
    {"norm_eps", PG_F32, false},
    {"state", PG_U64, true},
    {"hyper_ptr", PG_U64, true},
};

const pgk_desc pgk_desc_adamw_multi_finalize = {
    .name = "adamw_multi_finalize",
    .summary = "one block: a clip coefficient a norm group; a non-finite norm skips the step, "
               "else the step advances",
    PGK_PARAMS(finalize_params),
    .min_target = PG_SM_70,
    .threads = FINALIZE_THREADS,
    .build = build_multi_finalize,
    .launch = launch_one_block,
};

/* ---------------------------------------------------------------- adamw_multi_step */

/* Block b of a tensor updates elements [4096 b, 4096 b + 4096): thread t
 * the float4 chunks 1024 b + t + 256 j, j < 4, when p, g, m, v are 16-byte
 * aligned (and the copy 8-byte), or the elements 4096 b + t + 256 j, j < 16,
 * one at a time otherwise. Only a whole block's four chunks are unrolled
 * (their loads in flight together); a tensor's last block walks its chunks
 * in a loop and its n % 4 leftover elements go through the unaligned
 * path's loop: every copy of the element body (a div.rn and a sqrt.rn that
 * the JIT expands) costs compile time in every process, and the last block
 * is one of a tensor's. */
#define STEP_ELEMS 4096u
#define STEP_CHUNKS 4

typedef struct step_ctx {
    adamw_consts c;
    pg_reg coef;
    pg_reg buf[4];    /* u64 p, g, m, v */
    pg_reg copy;      /* u64 */
    pg_reg copy_type; /* u32 */
} step_ctx;

/* The bits of x rounded to bf16 (nearest even), in a u32; NaN stays a
 * (quiet) NaN. Integer arithmetic: every target has it. */
static pg_reg bf16_bits(pg_kernel *k, pg_reg x)
{
    pg_reg b = pgv_mov(k, PG_B32, x);
    pg_reg hi = pgv_shr(k, PG_U32, b, pg_u32(16));
    pg_reg lsb = pgv_and(k, PG_B32, hi, pg_u32(1));
    pg_reg r = pgv_add(k, PG_U32, b, pg_u32(0x7fff));
    pg_add(k, PG_U32, r, r, lsb);
    pg_shr(k, PG_U32, r, r, pg_u32(16));
    pg_reg q = pgv_or(k, PG_B32, hi, pg_u32(0x40));
    pg_reg num = pgv_setp(k, PG_CMP_NUM, PG_F32, x, x);
    pg_selp(k, PG_U32, r, r, q, num);
    return r;
}

/* The copy of the w values p[] at byte offset off of the copy (w 1 or 4):
 * nothing for PGK_COPY_NONE. */
static void store_copy(pg_kernel *k, const step_ctx *s, pg_reg off, const pg_reg *p, unsigned w)
{
    pg_label none = pg_label_new(k, "no_copy");
    pg_label half = pg_label_new(k, "f16_copy");
    pg_reg pc = pg_reg_new(k, PG_PRED);
    pg_reg a = pgv_add(k, PG_U64, s->copy, off);
    pg_setp(k, PG_CMP_EQ, PG_U32, pc, s->copy_type, pg_u32(PGK_COPY_NONE));
    pg_bra_if(k, pc, false, none);
    pg_setp(k, PG_CMP_EQ, PG_U32, pc, s->copy_type, pg_u32(PGK_COPY_F16));
    pg_bra_if(k, pc, false, half);
    pg_val h[4];
    for (unsigned c = 0; c < w; c++)
        h[c] = pgv_cvt(k, PG_U16, PG_U32, PG_RND_NONE, bf16_bits(k, p[c]));
    if (w == 1)
        pg_st(k, PG_SPACE_GLOBAL, PG_U16, a, 0, h[0]);
    else
        pg_st_v(k, PG_SPACE_GLOBAL, PG_U16, w, a, 0, h);
    pg_bra(k, none);
    pg_label_bind(k, half);
    for (unsigned c = 0; c < w; c++)
        h[c] = pgv_cvt(k, PG_F16, PG_F32, PG_RND_RN, p[c]);
    if (w == 1)
        pg_st(k, PG_SPACE_GLOBAL, PG_B16, a, 0, h[0]);
    else
        pg_st_v(k, PG_SPACE_GLOBAL, PG_B16, w, a, 0, h);
    pg_label_bind(k, none);
}

/* nch float4 chunks at chunk indices ch[] (u64): all loads first (16
 * bytes of each of four tensors a chunk in flight), then the math, then
 * the stores. */
static void step_chunks(pg_kernel *k, const step_ctx *s, const pg_reg *ch, int nch)
{
    pg_reg off[STEP_CHUNKS], x[STEP_CHUNKS][4][4];
    for (int j = 0; j < nch; j++) {
        off[j] = pgv_shl(k, PG_U64, ch[j], pg_u32(4));
        for (int b = 0; b < 4; b++) {
            for (int c = 0; c < 4; c++)
                x[j][b][c] = pg_reg_new(k, PG_F32);
            pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, pgv_add(k, PG_U64, s->buf[b], off[j]), 0,
                    x[j][b]);
        }
    }
    for (int j = 0; j < nch; j++)
        for (int c = 0; c < 4; c++)
            adamw_elem(k, &s->c, s->coef, x[j][0][c], x[j][1][c], x[j][2][c], x[j][3][c]);
    static const int stored[3] = {2, 3, 0}; /* m, v, p */
    for (int j = 0; j < nch; j++)
        for (int i = 0; i < 3; i++)
            pg_st_v(k, PG_SPACE_GLOBAL, PG_F32, 4, pgv_add(k, PG_U64, s->buf[stored[i]], off[j]),
                    0, x[j][stored[i]]);
    for (int j = 0; j < nch; j++)
        store_copy(k, s, pgv_shl(k, PG_U64, ch[j], pg_u32(3)), x[j][0], 4);
}

/* One element at index e (u64). */
static void step_scalar(pg_kernel *k, const step_ctx *s, pg_reg e)
{
    pg_reg off = pgv_shl(k, PG_U64, e, pg_u32(2));
    pg_reg a[4], x[4];
    for (int b = 0; b < 4; b++) {
        a[b] = pgv_add(k, PG_U64, s->buf[b], off);
        x[b] = pgv_ld(k, PG_SPACE_GLOBAL, PG_F32, a[b], 0);
    }
    adamw_elem(k, &s->c, s->coef, x[0], x[1], x[2], x[3]);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, a[2], 0, x[2]);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, a[3], 0, x[3]);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, a[0], 0, x[0]);
    store_copy(k, s, pgv_shl(k, PG_U64, e, pg_u32(1)), x, 1);
}

static int build_multi_step(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                            const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_reg table = pg_param_load(k, p[0]);
    pg_reg nbufs = pg_param_load(k, p[1]);
    pg_reg state = pg_param_load(k, p[2]);
    pg_reg hyper = pg_param_load(k, p[3]);
    pg_label out = pg_label_new(k, "exit");
    pg_reg pe = pg_reg_new(k, PG_PRED);

    pg_comment(k, "a skipped step (non-finite norm) writes nothing");
    pg_reg skip = pgv_ld(k, PG_SPACE_GLOBAL, PG_U32, state, 4 * PGK_OPTIM_SKIP);
    pg_setp(k, PG_CMP_NE, PG_U32, pe, skip, pg_u32(0));
    pg_bra_if(k, pe, false, out);

    pgk_table_entry e = pgk_table_find(k, table, nbufs, (uint32_t)sizeof(pgk_optim_entry),
                                       offsetof(pgk_optim_entry, first_block));
    step_ctx s;
    s.buf[1] = e.ptr;
    s.buf[0] = pgv_ld(k, PG_SPACE_GLOBAL, PG_U64, e.addr, offsetof(pgk_optim_entry, param));
    s.buf[2] = pgv_ld(k, PG_SPACE_GLOBAL, PG_U64, e.addr, offsetof(pgk_optim_entry, m));
    s.buf[3] = pgv_ld(k, PG_SPACE_GLOBAL, PG_U64, e.addr, offsetof(pgk_optim_entry, v));
    s.copy = pgv_ld(k, PG_SPACE_GLOBAL, PG_U64, e.addr, offsetof(pgk_optim_entry, copy));
    s.copy_type = pgv_ld(k, PG_SPACE_GLOBAL, PG_U32, e.addr, offsetof(pgk_optim_entry, copy_type));
    pg_reg group = pgv_ld(k, PG_SPACE_GLOBAL, PG_U32, e.addr, offsetof(pgk_optim_entry, group));
    s.coef = pgv_ld(k, PG_SPACE_GLOBAL, PG_F32, pgk_elem_addr(k, state, group, 8),
                    4 * PGK_OPTIM_GROUPS);
    pg_reg h[PGK_HYPER_STEP_ARGS];
    for (int i = 0; i < PGK_HYPER_STEP_ARGS; i++)
        h[i] = pgv_ld(k, PG_SPACE_GLOBAL, PG_F32, hyper, 4 * i);
    s.c = adamw_consts_of(k, h);

    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg tid64 = pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, tid);
    pg_reg n64 = pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, e.n);
    pg_reg base = pgv_mul_wide(k, PG_U32, e.local, pg_u32(STEP_ELEMS));
    pg_reg bend = pgv_add(k, PG_U64, base, pg_u64(STEP_ELEMS));
    pg_label scalar = pg_label_new(k, "scalar");
    pg_comment(k, "float4 path: p, g, m, v 16-byte aligned, the copy 8-byte");
    pg_reg al = pgv_or(k, PG_B64, s.buf[0], s.buf[1]);
    pg_or(k, PG_B64, al, al, s.buf[2]);
    pg_or(k, PG_B64, al, al, s.buf[3]);
    pg_and(k, PG_B64, al, al, pg_u64(15));
    pg_reg cl = pgv_and(k, PG_B64, s.copy, pg_u64(7));
    pg_or(k, PG_B64, al, al, cl);
    pg_setp(k, PG_CMP_NE, PG_U64, pe, al, pg_u64(0));
    pg_bra_if(k, pe, false, scalar);

    pg_reg n4 = pgv_shr(k, PG_U64, n64, pg_u32(2));
    pg_reg c0 = pgv_shr(k, PG_U64, base, pg_u32(2));
    pg_add(k, PG_U64, c0, c0, tid64);
    pg_reg ch[STEP_CHUNKS];
    for (int j = 0; j < STEP_CHUNKS; j++)
        ch[j] = pgv_add(k, PG_U64, c0, pg_u64(256u * (unsigned)j));
    pg_label partial = pg_label_new(k, "partial");
    pg_label tail = pg_label_new(k, "tail");
    pg_reg bend4 = pgv_shr(k, PG_U64, bend, pg_u32(2));
    pg_setp(k, PG_CMP_GT, PG_U64, pe, bend4, n4);
    pg_bra_if(k, pe, false, partial);
    pg_comment(k, "a whole block of float4 chunks");
    step_chunks(k, &s, ch, STEP_CHUNKS);
    pg_bra(k, out);

    pg_comment(k, "the tensor's last block: the chunks below n/4, then the last n % 4 elements");
    pg_label_bind(k, partial);
    pg_reg cj = pgv_mov(k, PG_U64, c0);
    pg_label ploop = pg_label_new(k, "partial_loop");
    pg_label_bind(k, ploop);
    pg_setp(k, PG_CMP_GE, PG_U64, pe, cj, n4);
    pg_bra_if(k, pe, false, tail);
    step_chunks(k, &s, &cj, 1);
    pg_add(k, PG_U64, cj, cj, pg_u64(256));
    pg_bra(k, ploop);
    pg_comment(k, "the last n % 4 elements: at most one a thread, through the scalar loop");
    pg_label_bind(k, tail);
    pg_reg i = pg_reg_new(k, PG_U64), end = pg_reg_new(k, PG_U64);
    pg_shl(k, PG_U64, i, n4, pg_u32(2));
    pg_add(k, PG_U64, i, i, tid64);
    pg_mov(k, PG_U64, end, n64);
    pg_label sloop = pg_label_new(k, "scalar_loop");
    pg_bra(k, sloop);

    pg_comment(k, "unaligned: one element at a time, i = base + tid + 256 j < min(n, base + 4096)");
    pg_label_bind(k, scalar);
    pg_min(k, PG_U64, end, n64, bend);
    pg_add(k, PG_U64, i, base, tid64);
    pg_label_bind(k, sloop);
    pg_setp(k, PG_CMP_GE, PG_U64, pe, i, end);
    pg_bra_if(k, pe, false, out);
    step_scalar(k, &s, i);
    pg_add(k, PG_U64, i, i, pg_u64(PGK_THREADS));
    pg_bra(k, sloop);

    return pgk_finish(k, out);
}

static const pgk_param multi_step_params[] = {
    {"table", PG_U64, true},
    {"nbufs", PG_U32, false},
    {"state", PG_U64, true},
    {"hyper_ptr", PG_U64, true},
};

const pgk_desc pgk_desc_adamw_multi_step = {
    .name = "adamw_multi_step",
    .summary = "AdamW over a table of tensors in one launch, each gradient scaled by its norm "
               "group's clip coefficient; 16-bit copies of the parameters written with them",
    PGK_PARAMS(multi_step_params),
    PGK_KNOBS(pgk_knobs_table),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_multi_step,
    .launch = pgk_launch_table,
};
