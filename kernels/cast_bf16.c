/* SPDX-License-Identifier: MIT */
/*
 * cast_f32_to_bf16 (round to nearest even; NaN stays NaN, overflow gives
 * inf, subnormals kept; four elements a thread) and cast_bf16_to_f32
 * (exact). Elementwise, 1-D.
 *
 * cast_f32_to_bf16_scaled2: the two bf16 copies of f32 master weights a
 * LoRA step multiplies on the tensor cores, dst = bf16(src) and dst_s =
 * bf16(scale * src) (the product rounded once, as f32 multiply then the
 * cast would), in one pass.
 */
#include "model.h"

static int build_cast(pg_kernel *k, const pg_param *p, pgk_dtype from, pgk_dtype to)
{
    pg_kernel_set_maxntid(k, PGK_THREADS, 1, 1);
    pg_reg src = pg_param_load(k, p[0]);
    pg_reg dst = pg_param_load(k, p[1]);
    pg_reg n = pg_param_load(k, p[2]);
    pg_label done = pg_label_new(k, "exit");
    pg_reg i = pg_global_tid_x(k);
    pg_bounds_guard(k, i, n, done);
    pg_reg v = pgk_ld_act(k, from, pgk_addr_add(k, src, i, pgk_dtype_size(from)), true);
    pgk_st_act(k, to, pgk_addr_add(k, dst, i, pgk_dtype_size(to)), v);
    pg_label_bind(k, done);
    pg_ret(k);
    return pg_kernel_error(k);
}

/* f32 to bf16, into one or two outputs (dst[1] = bf16(scale * x)), four
 * elements a thread: one 16-byte load and one 8-byte store of two bf16
 * pairs an output where the four lie inside n and every address is
 * aligned (always, for whole buffers); element by element otherwise (the
 * tail, a misaligned view), with the same rounding. */
static int build_narrow(pg_kernel *k, const pg_param *p, bool two)
{
    pg_kernel_set_maxntid(k, PGK_THREADS, 1, 1);
    int nout = two ? 2 : 1;
    pg_reg src = pg_param_load(k, p[0]);
    pg_reg dst[2] = {pg_param_load(k, p[1]), two ? pg_param_load(k, p[2]) : pg_none()};
    pg_reg n = pg_param_load(k, p[two ? 3 : 2]);
    pg_reg scale = two ? pg_param_load(k, p[4]) : pg_none();
    pg_label done = pg_label_new(k, "exit"), scalar = pg_label_new(k, "scalar");
    pg_reg i = pg_global_tid_x(k);
    /* ceil(n / 4) quads, without wrapping */
    pg_reg whole = pgv_shr(k, PG_U32, n, pg_u32(2));
    pg_reg part = pgv_setp(k, PG_CMP_NE, PG_U32, pgv_and(k, PG_U32, n, pg_u32(3)), pg_u32(0));
    pg_reg quads = pgv_add(k, PG_U32, whole, pgv_selp(k, PG_U32, pg_u32(1), pg_u32(0), part));
    pg_bounds_guard(k, i, quads, done);
    pg_reg e0 = pgv_mul_wide(k, PG_U32, i, pg_u32(4));
    pg_reg sa = pgv_add(k, PG_U64, src, pgv_shl(k, PG_U64, e0, pg_u32(2)));
    pg_reg da[2], bits = pgv_and(k, PG_B64, src, pg_u64(15));
    for (int o = 0; o < nout; o++) {
        da[o] = pgv_add(k, PG_U64, dst[o], pgv_shl(k, PG_U64, e0, pg_u32(1)));
        bits = pgv_or(k, PG_B64, bits, pgv_and(k, PG_B64, dst[o], pg_u64(7)));
    }
    /* one builder call an argument at most: C leaves their order open */
    pg_reg inside = pgv_setp(k, PG_CMP_LT, PG_U32, i, whole);
    pg_reg ok = pgv_and(k, PG_PRED, inside, pgv_setp(k, PG_CMP_EQ, PG_U64, bits, pg_u64(0)));
    pg_bra_if(k, ok, true, scalar);
    pg_reg v[4];
    for (int e = 0; e < 4; e++)
        v[e] = pg_reg_new(k, PG_F32);
    pg_ld_v(k, PG_SPACE_GLOBAL, PG_F32, 4, sa, 0, v);
    for (int o = 0; o < nout; o++) {
        pg_reg x[4];
        for (int e = 0; e < 4; e++)
            x[e] = o ? pgv_mul(k, PG_F32, v[e], scale) : v[e];
        pg_val pk[2];
        pk[0] = pgv_cvt_pack(k, PG_BF16, x[0], x[1]);
        pk[1] = pgv_cvt_pack(k, PG_BF16, x[2], x[3]);
        pg_st_v(k, PG_SPACE_GLOBAL, PG_B32, 2, da[o], 0, pk);
    }
    pg_bra(k, done);
    pg_label_bind(k, scalar);
    for (uint32_t e = 0; e < 4; e++) {
        pg_label skip = pg_label_new(k, "tail");
        pg_reg ei = pgv_add(k, PG_U64, e0, pg_u64(e));
        pg_bra_if(k, pgv_setp(k, PG_CMP_LT, PG_U64, ei, pgv_cvt(k, PG_U64, PG_U32, PG_RND_NONE, n)),
                  true, skip);
        pg_reg x = pgk_ld_act(k, PGK_F32, pgv_add(k, PG_U64, sa, pg_u64(4 * e)), true);
        for (int o = 0; o < nout; o++) {
            pg_reg y = o ? pgv_mul(k, PG_F32, x, scale) : x;
            pgk_st_act(k, PGK_BF16, pgv_add(k, PG_U64, da[o], pg_u64(2 * e)), y);
        }
        pg_label_bind(k, skip);
    }
    pg_label_bind(k, done);
    pg_ret(k);
    return pg_kernel_error(k);
}

static int build_scaled2(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    (void)kn;
    return build_narrow(k, p, true);
}

/* The narrowing casts' grid: a thread for every four elements. */
static int launch_quads(const pgk_desc *d, const uint32_t *knobs, pgk_launch *out)
{
    uint32_t n = knobs[PGK_N];
    return pgk_launch_1d(n / 4 + (n % 4 != 0), d->threads, out);
}

static int to_bf16(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    (void)kn;
    return build_narrow(k, p, false);
}
static int to_f32(pg_kernel *k, const pgk_desc *d, const pg_param *p, const uint32_t *kn)
{
    (void)d;
    (void)kn;
    return build_cast(k, p, PGK_BF16, PGK_F32);
}

static const pgk_param cast_params[] = {
    {"src", PG_U64, true},
    {"dst", PG_U64, true},
    {"n", PG_U32, false},
};

const pgk_desc pgk_desc_cast_f32_to_bf16 = {
    .name = "cast_f32_to_bf16",
    .summary = "dst (bf16) = src (f32), round to nearest even",
    .params = cast_params, .nparams = 3, .knobs = pgk_knob_n, .nknobs = 1,
    .min_target = PG_SM_80, .build = to_bf16, .threads = PGK_THREADS, .launch = launch_quads,
};
const pgk_desc pgk_desc_cast_bf16_to_f32 = {
    .name = "cast_bf16_to_f32",
    .summary = "dst (f32) = src (bf16), exact",
    .params = cast_params, .nparams = 3, .knobs = pgk_knob_n, .nknobs = 1,
    .min_target = PG_SM_70, .build = to_f32, .threads = PGK_THREADS, .launch = pgk_launch_elementwise,
};

static const pgk_param scaled2_params[] = {
    {"src", PG_U64, true}, {"dst", PG_U64, true}, {"dst_s", PG_U64, true},
    {"n", PG_U32, false},  {"scale", PG_F32, false},
};

const pgk_desc pgk_desc_cast_f32_to_bf16_scaled2 = {
    .name = "cast_f32_to_bf16_scaled2",
    .summary = "dst = bf16(src), dst_s = bf16(scale * src): LoRA weights for the tensor cores",
    .params = scaled2_params, .nparams = 5, .knobs = pgk_knob_n, .nknobs = 1,
    .min_target = PG_SM_80, .build = build_scaled2, .threads = PGK_THREADS,
    .launch = launch_quads,
};
