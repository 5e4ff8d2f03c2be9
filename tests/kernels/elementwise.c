/* SPDX-License-Identifier: MIT */
/*
 * The element-wise kernels of kernels/elementwise.c on a GPU against a
 * double-precision CPU reference: residual_add, cast_f32_to_f16, transpose
 * and mse_loss.
 *
 * Every output is poisoned with NaN before the launch (so an element the
 * kernel skips shows), every launch is run twice and must give the same
 * bits, and fp32 results must be within 1e-5 of the reference norm-wise
 * (|out - ref| / |ref|, 2-norms). transpose must move bits exactly; the f16
 * cast must match a CPU round-to-nearest-even conversion bit for bit. The
 * data are fresh random numbers each run; the seed is printed and can be
 * given back.
 *
 * Usage: test_elementwise [--small] [--seed N]
 *   --small  smaller shapes (for compute-sanitizer); also PGTEST_SMALL=1
 *   --seed   replay a run; without it $PGRT_TEST_SEED, else the clock
 * Exit 77 when there is no driver or no device.
 */
#define REL_TOL 1e-5

#include "gpu_check.h"

/* ---------------------------------------------------------------- residual_add */

static void test_residual(uint32_t n)
{
    row *r = add_row("residual_add", "n=%u (+ in place)", n);
    float *a = fill_normal(n, 1.0, 0.0), *b = fill_normal(n, 1.0, 0.0);
    double *ref = xmalloc(n * sizeof *ref);
    for (uint32_t i = 0; i < n; i++)
        ref[i] = (double)a[i] + (double)b[i];
    pgrt_buf *ba = dev_upload(a, n), *bb = dev_upload(b, n), *bo = dev_alloc(PG_F32, n);
    float *out[3] = {xmalloc(n * 4), xmalloc(n * 4), xmalloc(n * 4)};
    pgk_knobs kn = knobs_of("residual_add", "n", n, NULL);
    pgrt_arg args[] = {pgrt_arg_buf(ba), pgrt_arg_buf(bb), pgrt_arg_buf(bo), pgrt_arg_u32(n)};
    for (int run = 0; run < 2; run++) {
        poison(bo);
        if (!launch("residual_add", &kn, args, 4))
            r->bad++;
        dev_download(bo, out[run], n);
    }
    /* out aliasing a: a += b */
    pgrt_arg inplace[] = {pgrt_arg_buf(ba), pgrt_arg_buf(bb), pgrt_arg_buf(ba), pgrt_arg_u32(n)};
    if (!launch("residual_add", &kn, inplace, 4))
        r->bad++;
    dev_download(ba, out[2], n);
    compare(r, out[0], ref, n);
    same_bits(r, out[0], out[1], n * 4);
    same_bits(r, out[0], out[2], n * 4);
    /* one rounded add: exactly the CPU's float sum */
    for (uint32_t i = 0; i < n; i++) {
        float s = a[i] + b[i];
        if (memcmp(&s, &out[0][i], 4) != 0)
            r->bad++;
    }
    finish(r);
    pgrt_buf_destroy(&ba);
    pgrt_buf_destroy(&bb);
    pgrt_buf_destroy(&bo);
    free(a), free(b), free(ref), free(out[0]), free(out[1]), free(out[2]);
}

/* ---------------------------------------------------------------- cast_f32_to_f16 */

/* IEEE binary32 to binary16, round to nearest even, subnormals kept. */
static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u)
        return (uint16_t)(sign | 0x7E00u | ((ax >> 13) & 0x3FFu));
    if (ax >= 0x477FF000u) /* 65520 and up (and inf): inf */
        return (uint16_t)(sign | 0x7C00u);
    if (ax < 0x38800000u) { /* below 2^-14: an f16 subnormal or zero */
        if (ax < 0x33000000u) /* below 2^-25: zero */
            return (uint16_t)sign;
        uint32_t e = ax >> 23, m = (ax & 0x7FFFFFu) | 0x800000u;
        uint32_t shift = 126 - e; /* value / 2^-24 = m / 2^shift, shift 14..24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t rb = ax - 0x38000000u; /* exponent bias 127 -> 15 */
    uint32_t q = rb >> 13, rem = rb & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1)))
        q++;
    return (uint16_t)(sign | q);
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_cast_f16(uint32_t n)
{
    row *r = add_row("cast_f32_to_f16", "n=%u (exact)", n);
    float *src = xmalloc(n * 4);
    for (uint32_t i = 0; i < n; i++) {
        switch (i % 4) {
        case 0: /* ordinary values */
            src[i] = (float)(normal() * 100.0);
            break;
        case 1: /* any exponent from f16-subnormal to overflow, random bits */
            src[i] = bits_f32((uint32_t)(next_u64() & 0x80000000u) |
                              ((uint32_t)(0x30000000u + (next_u64() % 0x17800000u))));
            break;
        case 2: /* exact ties of f16 normals and subnormals */
            src[i] = bits_f32((uint32_t)((0x38800000u + (next_u64() % 0x0EF00000u)) & ~0x1FFFu) |
                              0x1000u);
            break;
        default: /* ties in the f16 subnormal range */
            src[i] = (float)(((double)(next_u64() % 2048) + 0.5) * 0x1p-24);
            break;
        }
    }
    static const float specials[] = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f,
                                      1e-8f, 0x1p-25f, 0x1.000002p-25f, 0x1p-24f, 0x1.8p-24f,
                                      1.0f + 0x1p-11f, 1.0f + 0x3p-11f, INFINITY, -INFINITY,
                                      1e30f, 0x1p-140f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0] && i < n; i++)
        src[(i * 7919u) % n] = specials[i];
    pgrt_buf *bs = dev_upload(src, n), *bd = dev_alloc(PG_U16, n);
    uint16_t *out[2] = {xmalloc(n * 2), xmalloc(n * 2)};
    pgk_knobs kn = knobs_of("cast_f32_to_f16", "n", n, NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bs), pgrt_arg_buf(bd), pgrt_arg_u32(n)};
    for (int run = 0; run < 2; run++) {
        int rc = pgrt_buf_memset(bd, 0xFF); /* 0xFFFF: an f16 NaN */
        if (rc)
            die_rt("pgrt_buf_memset", rc);
        if (!launch("cast_f32_to_f16", &kn, args, 3))
            r->bad++;
        dev_download(bd, out[run], n);
    }
    size_t shown = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint16_t want = f32_to_f16(src[i]);
        if (out[0][i] != want) {
            r->bad++;
            if (shown++ < 5)
                fprintf(stderr, "  cast[%u]: %a (0x%08X) gave 0x%04X, want 0x%04X\n", i,
                        (double)src[i], (unsigned)f32_bits(src[i]),
                        out[0][i], want);
        }
    }
    same_bits(r, out[0], out[1], n * 2);
    finish(r);
    pgrt_buf_destroy(&bs);
    pgrt_buf_destroy(&bd);
    free(src), free(out[0]), free(out[1]);
}

/* ---------------------------------------------------------------- transpose */

static void test_transpose(uint32_t rows, uint32_t cols)
{
    size_t n = (size_t)rows * cols;
    float *x = fill_normal(n, 1.0, 0.0);
    float *out = xmalloc(n * sizeof *out), *want = xmalloc(n * sizeof *want);
    for (uint32_t i = 0; i < rows; i++)
        for (uint32_t j = 0; j < cols; j++)
            want[(size_t)j * rows + i] = x[(size_t)i * cols + j];
    pgrt_buf *dx = dev_upload(x, n), *dy = dev_alloc(PG_F32, n);
    pgk_knobs kn = knobs_of("transpose", "rows", rows, "cols", cols, NULL);
    pgrt_arg a[4] = {pgrt_arg_buf(dx), pgrt_arg_buf(dy), pgrt_arg_u32(rows), pgrt_arg_u32(cols)};
    row *r = add_row("transpose", "%u x %u", rows, cols);
    poison(dy);
    if (launch("transpose", &kn, a, 4)) {
        dev_download(dy, out, n);
        for (size_t i = 0; i < n; i++)
            if (memcmp(&out[i], &want[i], sizeof *out) != 0)
                r->bad++;
    }
    finish(r);
    pgrt_buf_destroy(&dx);
    pgrt_buf_destroy(&dy);
    free(x), free(out), free(want);
}

/* ---------------------------------------------------------------- mse_loss */

static void test_mse_loss(uint32_t n)
{
    float *p = fill_normal(n, 1.0, 0.0), *t = fill_normal(n, 1.0, 0.3);
    uint32_t nb = pgk_squared_sum_num_blocks(n);
    float *grad = xmalloc(n * sizeof *grad), *grad2 = xmalloc(n * sizeof *grad2);
    float *part = xmalloc(nb * sizeof *part), *part2 = xmalloc(nb * sizeof *part2);
    double *ref = xmalloc(n * sizeof *ref), loss_ref = 0;
    for (uint32_t i = 0; i < n; i++) {
        double d = (double)p[i] - t[i];
        loss_ref += d * d;
        ref[i] = 2.0 * d / n;
    }
    loss_ref /= n;
    pgrt_buf *dp = dev_upload(p, n), *dt = dev_upload(t, n), *dg = dev_alloc(PG_F32, n),
             *dpart = dev_alloc(PG_F32, nb);
    pgk_knobs kn = knobs_of("mse_loss", "n", n, NULL);
    pgk_launch cfg;
    REQUIRE_INT_EQ(pgk_launch_for(pgk_find("mse_loss"), &kn, &cfg, NULL, 0), 0);
    REQUIRE_INT_EQ(cfg.grid[0], nb);
    pgrt_arg a[5] = {pgrt_arg_buf(dp), pgrt_arg_buf(dt), pgrt_arg_buf(dg), pgrt_arg_buf(dpart),
                     pgrt_arg_u32(n)};
    row *r = add_row("mse_loss", "n %u (grad)", n);
    row *rl = add_row("mse_loss", "n %u (loss)", n);
    for (int rep = 0; rep < 2; rep++) {
        poison(dg);
        poison(dpart);
        if (!launch("mse_loss", &kn, a, 5))
            break;
        dev_download(dg, rep ? grad2 : grad, n);
        dev_download(dpart, rep ? part2 : part, nb);
    }
    compare(r, grad, ref, n);
    same_bits(r, grad, grad2, n * sizeof *grad);
    finish(r);
    double loss = 0;
    for (uint32_t b = 0; b < nb; b++) {
        if (!isfinite(part[b]))
            rl->bad++;
        loss += part[b];
    }
    float lf = (float)(loss / n);
    compare(rl, &lf, &loss_ref, 1);
    same_bits(rl, part, part2, nb * sizeof *part);
    finish(rl);
    pgrt_buf_destroy(&dp);
    pgrt_buf_destroy(&dt);
    pgrt_buf_destroy(&dg);
    pgrt_buf_destroy(&dpart);
    free(p), free(t), free(grad), free(grad2), free(part), free(part2), free(ref);
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_elementwise");
    for (int i = 0; i < CHECK_NSIZES; i++)
        test_residual(check_sizes(small)[i]);
    for (int i = 0; i < CHECK_NSIZES; i++)
        test_cast_f16(check_sizes(small)[i]);
    test_transpose(1, 1);
    test_transpose(33, 65);
    test_transpose(128, 256);
    test_transpose(small ? 100 : 1000, 3);
    test_mse_loss(1);
    test_mse_loss(1000);
    test_mse_loss(small ? 5000 : (1u << 20) + 3);
    print_table("rel_l2 must be <= 1e-5; cast_f32_to_f16 and transpose must be bit-exact");
    pgrt_ctx_destroy(&check_ctx);
    TEST_DONE();
}
