/* SPDX-License-Identifier: MIT */
/*
 * LoRA dropout with a counter-based mask: nothing is stored, the backward
 * makes the forward's mask again from the same numbers.
 *
 *   dropout_f32       out[i]  = keep(i) ? x[i] * scale : 0
 *   dropout_add_f32   out[i] += keep(i) ? x[i] * scale : 0
 *   counter_inc_u32   ctr[0] += 1 (one thread: a graph-safe step counter)
 *
 * keep(i) = h(i) >= keep_min, with
 *
 *   key  = fmix32(seed ^ (c * 0x9E3779B9) ^ (stream * 0x85EBCA6B))
 *   h(i) = fmix32(i ^ key)
 *
 * in u32 arithmetic (products modulo 2^32), c = ctr[0] read from device
 * memory (so a replayed graph takes a new mask each micro-batch), i the
 * element's flat index (row * cols + col) and fmix32 MurmurHash3's
 * finaliser: h ^= h >> 16; h *= 0x85EBCA6B; h ^= h >> 13; h *= 0xC2B2AE35;
 * h ^= h >> 16. The caller sets keep_min = round(p 2^32) (the drop
 * probability p) and scale = f32(1 / (1 - p)); the product x * scale is
 * one f32 rounding (.rn), as torch's x * mask * (1 / (1 - p)) with a 0/1
 * mask. A reference in any language reproduces the mask from these lines
 * (tests/model/reference.py does).
 */
#include "kernels.h"

static pg_reg fmix32(pg_kernel *k, pg_reg h)
{
    pg_reg a = pgv_shr(k, PG_U32, h, pg_u32(16));
    pg_reg b = pgv_xor(k, PG_B32, h, a);
    pg_reg c = pgv_mul(k, PG_U32, b, pg_u32(0x85EBCA6Bu));
    pg_reg d = pgv_shr(k, PG_U32, c, pg_u32(13));
    pg_reg e = pgv_xor(k, PG_B32, c, d);
    pg_reg f = pgv_mul(k, PG_U32, e, pg_u32(0xC2B2AE35u));
    pg_reg g = pgv_shr(k, PG_U32, f, pg_u32(16));
    return pgv_xor(k, PG_B32, f, g);
}

static int build_dropout(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)kn;
    bool add = d->variant != 0;
    pg_reg x = pg_param_load(k, p[0]);
    pg_reg o = pg_param_load(k, p[1]);
    pg_reg n = pg_param_load(k, p[2]);
    pg_reg seed = pg_param_load(k, p[3]);
    pg_reg stream = pg_param_load(k, p[4]);
    pg_reg ctr = pg_param_load(k, p[5]);
    pg_reg keep_min = pg_param_load(k, p[6]);
    pg_reg scale = pg_param_load(k, p[7]);
    pg_label out = pg_label_new(k, "exit");
    pg_reg gid = pgk_guarded_gid(k, n, out);
    pg_comment(k, "the mask: fmix32(i ^ fmix32(seed ^ c * golden ^ stream * m1)) >= keep_min");
    pg_reg c = pg_reg_new(k, PG_U32);
    pg_ld(k, PG_SPACE_GLOBAL, PG_U32, ctr, 0, c);
    pg_reg cm = pgv_mul(k, PG_U32, c, pg_u32(0x9E3779B9u));
    pg_reg sm = pgv_mul(k, PG_U32, stream, pg_u32(0x85EBCA6Bu));
    pg_reg k0 = pgv_xor(k, PG_B32, seed, cm);
    pg_reg k1 = pgv_xor(k, PG_B32, k0, sm);
    pg_reg key = fmix32(k, k1);
    pg_reg hi = pgv_xor(k, PG_B32, gid, key);
    pg_reg h = fmix32(k, hi);
    pg_reg keep = pg_reg_new(k, PG_PRED);
    pg_setp(k, PG_CMP_GE, PG_U32, keep, h, keep_min);
    pg_reg xa = pgk_elem_addr(k, x, gid, 4);
    pg_reg xv = pgk_ld_f32(k, xa);
    pg_reg sv = pgv_mul(k, PG_F32, xv, scale);
    pg_reg v = pg_reg_new(k, PG_F32);
    pg_selp(k, PG_F32, v, sv, pg_f32(0.0f), keep);
    pg_reg oa = pgk_elem_addr(k, o, gid, 4);
    if (add) {
        pg_reg ov = pgk_ld_f32(k, oa);
        pg_reg s = pgv_add(k, PG_F32, ov, v);
        pg_st(k, PG_SPACE_GLOBAL, PG_F32, oa, 0, s);
    } else {
        pg_st(k, PG_SPACE_GLOBAL, PG_F32, oa, 0, v);
    }
    return pgk_finish(k, out);
}

static const pgk_param dropout_params[] = {
    {"x", PG_U64, true},      {"out", PG_U64, true},      {"n", PG_U32, false},
    {"seed", PG_U32, false},  {"stream", PG_U32, false},  {"ctr", PG_U64, true},
    {"keep_min", PG_U32, false}, {"scale", PG_F32, false},
};

const pgk_desc pgk_desc_dropout_f32 = {
    .name = "dropout_f32",
    .summary = "out = x * scale where the counter-based mask keeps it, else 0",
    PGK_PARAMS(dropout_params),
    PGK_KNOBS(pgk_knob_n),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_dropout,
    .launch = pgk_launch_elementwise,
};

const pgk_desc pgk_desc_dropout_add_f32 = {
    .name = "dropout_add_f32",
    .summary = "out += x * scale where the counter-based mask keeps it (dropout's backward)",
    PGK_PARAMS(dropout_params),
    PGK_KNOBS(pgk_knob_n),
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .variant = 1,
    .build = build_dropout,
    .launch = pgk_launch_elementwise,
};

/* ---------------------------------------------------------------- counter_inc_u32 */

static int build_counter(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    (void)kn;
    pg_reg ctr = pg_param_load(k, p[0]);
    pg_reg c = pg_reg_new(k, PG_U32);
    pg_ld(k, PG_SPACE_GLOBAL, PG_U32, ctr, 0, c);
    pg_reg c1 = pgv_add(k, PG_U32, c, pg_u32(1));
    pg_st(k, PG_SPACE_GLOBAL, PG_U32, ctr, 0, c1);
    return pgk_finish(k, pg_label_new(k, "exit"));
}

static const pgk_param counter_params[] = {
    {"ctr", PG_U64, true},
};

const pgk_desc pgk_desc_counter_inc_u32 = {
    .name = "counter_inc_u32",
    .summary = "ctr[0] += 1, one thread (a step counter a graph advances)",
    PGK_PARAMS(counter_params),
    .min_target = PG_SM_70,
    .threads = 1,
    .build = build_counter,
    .launch = pgk_launch_single,
};
