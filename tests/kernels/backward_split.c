/* SPDX-License-Identifier: MIT */
/*
 * The backward and optimizer kernels on a GPU against a double-precision CPU
 * reference: silu_backward, batched_softmax_backward, batched_rms_norm_backward,
 * rms_norm_gamma_reduce, cast_f32_to_f16, residual_add, adamw_step and
 * adamw_step_dev.
 *
 * Every output is poisoned with NaN before the launch (so an element the
 * kernel skips shows), every launch is run twice and must give the same
 * bits, and fp32 results must be within 1e-5 of the reference norm-wise
 * (|out - ref| / |ref|, 2-norms). The f16 cast must match a CPU
 * round-to-nearest-even conversion bit for bit. The data are fresh random
 * numbers each run; the seed is printed and can be given back.
 *
 * Usage: test_backward [--small] [--seed N]
 *   --small  smaller shapes (for compute-sanitizer); also PGTEST_SMALL=1
 *   --seed   replay a run; without it $PGRT_TEST_SEED, else the clock
 * Exit 77 when there is no driver or no device.
 */
#define REL_TOL 1e-5

#include "gpu_check.h"

static bool small;

/* ---------------------------------------------------------------- elementwise sizes */

static const uint32_t sizes_full[] = {1, 255, 256, 257, 1023, 1025, (1u << 20) + 3};
static const uint32_t sizes_small[] = {1, 255, 256, 257, 1023, 1025, 65539};
#define NSIZES 7

static const uint32_t *sizes(void) { return small ? sizes_small : sizes_full; }

/* ---------------------------------------------------------------- silu_backward */

static void test_silu(uint32_t n)
{
    row *r = add_row("silu_backward", "n=%u", n);
    float *x = fill_normal(n, 3.0, 0.0);
    /* the tails too: large |x| where exp over- or underflows */
    for (uint32_t i = 0; i < n; i += 97)
        x[i] = (float)((i & 1 ? -1 : 1) * (10.0 + 100.0 * uniform()));
    float *dy = fill_normal(n, 1.0, 0.0);
    double *ref = xmalloc(n * sizeof *ref);
    for (uint32_t i = 0; i < n; i++) {
        double xv = x[i], s = 1.0 / (1.0 + exp(-xv));
        ref[i] = (double)dy[i] * s * (1.0 + xv * (1.0 - s));
    }
    pgrt_buf *bx = dev_upload(x, n), *bdy = dev_upload(dy, n), *bdx = dev_alloc(PG_F32, n);
    float *out[2] = {xmalloc(n * 4), xmalloc(n * 4)};
    pgk_knobs kn = knobs_of("silu_backward", "n", n, NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bx), pgrt_arg_buf(bdy), pgrt_arg_buf(bdx), pgrt_arg_u32(n)};
    for (int run = 0; run < 2; run++) {
        poison(bdx);
        if (!launch("silu_backward", &kn, args, 4))
            r->bad++;
        dev_download(bdx, out[run], n);
    }
    compare(r, out[0], ref, n);
    same_bits(r, out[0], out[1], n * 4);
    finish(r);
    pgrt_buf_destroy(&bx);
    pgrt_buf_destroy(&bdy);
    pgrt_buf_destroy(&bdx);
    free(x), free(dy), free(ref), free(out[0]), free(out[1]);
}

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

static void test_cast(uint32_t n)
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

/* ---------------------------------------------------------------- batched_softmax_backward */

static void test_softmax(uint32_t rows, uint32_t width)
{
    row *r = add_row("batched_softmax_backward", "%u rows x %u", rows, width);
    size_t n = (size_t)rows * width;
    float *y = xmalloc(n * 4);
    float *dy = fill_normal(n, 1.0, 0.0);
    double *logit = xmalloc(width * sizeof *logit), *ref = xmalloc(n * sizeof *ref);
    for (uint32_t i = 0; i < rows; i++) {
        double mx = -INFINITY, sum = 0;
        for (uint32_t j = 0; j < width; j++) {
            logit[j] = 2.0 * normal();
            mx = fmax(mx, logit[j]);
        }
        for (uint32_t j = 0; j < width; j++)
            sum += exp(logit[j] - mx);
        for (uint32_t j = 0; j < width; j++)
            y[(size_t)i * width + j] = (float)(exp(logit[j] - mx) / sum);
        double dot = 0;
        for (uint32_t j = 0; j < width; j++)
            dot += (double)y[(size_t)i * width + j] * dy[(size_t)i * width + j];
        for (uint32_t j = 0; j < width; j++) {
            size_t e = (size_t)i * width + j;
            ref[e] = (double)y[e] * ((double)dy[e] - dot);
        }
    }
    pgrt_buf *by = dev_upload(y, n), *bdy = dev_upload(dy, n), *bdx = dev_alloc(PG_F32, n);
    float *out[2] = {xmalloc(n * 4), xmalloc(n * 4)};
    pgk_knobs kn = knobs_of("batched_softmax_backward", "total_rows", rows, "row_size", width,
                            NULL);
    pgrt_arg args[] = {pgrt_arg_buf(by), pgrt_arg_buf(bdy), pgrt_arg_buf(bdx),
                       pgrt_arg_u32(rows), pgrt_arg_u32(width)};
    for (int run = 0; run < 2; run++) {
        poison(bdx);
        if (!launch("batched_softmax_backward", &kn, args, 5))
            r->bad++;
        dev_download(bdx, out[run], n);
    }
    compare(r, out[0], ref, n);
    same_bits(r, out[0], out[1], n * 4);
    finish(r);
    pgrt_buf_destroy(&by);
    pgrt_buf_destroy(&bdy);
    pgrt_buf_destroy(&bdx);
    free(y), free(dy), free(logit), free(ref), free(out[0]), free(out[1]);
}

/* ---------------------------------------------------------------- rms norm backward + gamma reduce */

static void gamma_reduce_check(row *r, const pgrt_buf *bpart, const float *part, uint32_t rows,
                               uint32_t hidden, const double *ref_e2e, row *r_e2e)
{
    double *ref = xmalloc(hidden * sizeof *ref);
    for (uint32_t h = 0; h < hidden; h++)
        ref[h] = 0;
    for (uint32_t i = 0; i < rows; i++)
        for (uint32_t h = 0; h < hidden; h++)
            ref[h] += part[(size_t)i * hidden + h];
    pgrt_buf *bg = dev_alloc(PG_F32, hidden);
    float *out[2] = {xmalloc(hidden * 4), xmalloc(hidden * 4)};
    pgk_knobs kn = knobs_of("rms_norm_gamma_reduce", "num_rows", rows, "hidden_dim", hidden, NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bpart), pgrt_arg_buf(bg), pgrt_arg_u32(rows),
                       pgrt_arg_u32(hidden)};
    for (int run = 0; run < 2; run++) {
        poison(bg);
        if (!launch("rms_norm_gamma_reduce", &kn, args, 4))
            r->bad++;
        dev_download(bg, out[run], hidden);
    }
    compare(r, out[0], ref, hidden);
    same_bits(r, out[0], out[1], (size_t)hidden * 4);
    if (r_e2e)
        compare(r_e2e, out[0], ref_e2e, hidden);
    pgrt_buf_destroy(&bg);
    free(ref), free(out[0]), free(out[1]);
}

static void test_rms(uint32_t rows, uint32_t hidden)
{
    row *r = add_row("batched_rms_norm_backward", "%u rows x %u", rows, hidden);
    /* f64 inside: every element, not only the norm, is close (the formula
     * cancels, at hidden 1 always) */
    r->elem_tol = 1e-6;
    size_t n = (size_t)rows * hidden;
    const float eps = 1e-5f;
    float *x = fill_normal(n, 1.0, 0.0), *dy = fill_normal(n, 1.0, 0.0);
    float *gamma = fill_normal(hidden, 0.1, 1.0);
    double *ref_dx = xmalloc(n * sizeof *ref_dx), *ref_p = xmalloc(n * sizeof *ref_p);
    double *ref_gg = xmalloc(hidden * sizeof *ref_gg);
    for (uint32_t h = 0; h < hidden; h++)
        ref_gg[h] = 0;
    for (uint32_t i = 0; i < rows; i++) {
        const float *xr = x + (size_t)i * hidden, *dyr = dy + (size_t)i * hidden;
        double ss = 0, sg = 0;
        for (uint32_t h = 0; h < hidden; h++) {
            ss += (double)xr[h] * xr[h];
            sg += (double)xr[h] * gamma[h] * dyr[h];
        }
        double rr = sqrt(ss / hidden + (double)eps), c = sg / hidden;
        for (uint32_t h = 0; h < hidden; h++) {
            size_t e = (size_t)i * hidden + h;
            ref_dx[e] = (double)gamma[h] * dyr[h] / rr - (double)xr[h] * c / (rr * rr * rr);
            ref_p[e] = (double)dyr[h] * xr[h] / rr;
            ref_gg[h] += ref_p[e];
        }
    }
    pgrt_buf *bx = dev_upload(x, n), *bgm = dev_upload(gamma, hidden), *bdy = dev_upload(dy, n);
    pgrt_buf *bdx = dev_alloc(PG_F32, n), *bp = dev_alloc(PG_F32, n);
    float *dx[2] = {xmalloc(n * 4), xmalloc(n * 4)}, *pp[2] = {xmalloc(n * 4), xmalloc(n * 4)};
    pgk_knobs kn = knobs_of("batched_rms_norm_backward", "num_rows", rows, "hidden_dim", hidden,
                            NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bx),  pgrt_arg_buf(bgm),   pgrt_arg_buf(bdy),
                       pgrt_arg_buf(bdx), pgrt_arg_buf(bp),    pgrt_arg_u32(rows),
                       pgrt_arg_u32(hidden), pgrt_arg_f32(eps)};
    for (int run = 0; run < 2; run++) {
        poison(bdx);
        poison(bp);
        if (!launch("batched_rms_norm_backward", &kn, args, 8))
            r->bad++;
        dev_download(bdx, dx[run], n);
        dev_download(bp, pp[run], n);
    }
    compare(r, dx[0], ref_dx, n);
    compare(r, pp[0], ref_p, n);
    same_bits(r, dx[0], dx[1], n * 4);
    same_bits(r, pp[0], pp[1], n * 4);
    finish(r);

    /* the reduction of these partials: against the double sum of the very
     * floats it was given, and end to end against the double gamma grad */
    row *rg = add_row("rms_norm_gamma_reduce", "%u rows x %u (partials)", rows, hidden);
    row *re = add_row("rms grad_gamma end to end", "%u rows x %u", rows, hidden);
    gamma_reduce_check(rg, bp, pp[0], rows, hidden, ref_gg, re);
    finish(rg);
    finish(re);

    pgrt_buf_destroy(&bx);
    pgrt_buf_destroy(&bgm);
    pgrt_buf_destroy(&bdy);
    pgrt_buf_destroy(&bdx);
    pgrt_buf_destroy(&bp);
    free(x), free(dy), free(gamma), free(ref_dx), free(ref_p), free(ref_gg);
    free(dx[0]), free(dx[1]), free(pp[0]), free(pp[1]);
}

static void test_gamma(uint32_t rows, uint32_t hidden)
{
    row *r = add_row("rms_norm_gamma_reduce", "%u rows x %u", rows, hidden);
    size_t n = (size_t)rows * hidden;
    float *part = fill_normal(n, 1.0, 0.25);
    pgrt_buf *bp = dev_upload(part, n);
    gamma_reduce_check(r, bp, part, rows, hidden, NULL, NULL);
    finish(r);
    pgrt_buf_destroy(&bp);
    free(part);
}

/* ---------------------------------------------------------------- adamw */

static void test_adamw(uint32_t n, int steps)
{
    row *r = add_row("adamw_step", "n=%u, %d steps", n, steps);
    row *rd = add_row("adamw_step_dev", "n=%u, %d steps", n, steps);
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
    float *p0 = fill_normal(n, 1.0, 0.0);
    float *zero = xmalloc(n * 4);
    for (uint32_t i = 0; i < n; i++)
        zero[i] = 0.0f;
    double *p = xmalloc(n * sizeof *p), *m = xmalloc(n * sizeof *m), *v = xmalloc(n * sizeof *v);
    for (uint32_t i = 0; i < n; i++)
        p[i] = p0[i], m[i] = 0, v[i] = 0;
    /* two copies of the state: one per kernel */
    pgrt_buf *bp[2], *bm[2], *bv[2];
    for (int c = 0; c < 2; c++) {
        bp[c] = dev_upload(p0, n);
        bm[c] = dev_upload(zero, n);
        bv[c] = dev_upload(zero, n);
    }
    pgrt_buf *bg = dev_alloc(PG_F32, n), *bh = dev_alloc(PG_F32, 7);
    pgk_knobs kn = knobs_of("adamw_step", "n", n, NULL);
    pgk_knobs knd = knobs_of("adamw_step_dev", "n", n, NULL);
    for (int t = 1; t <= steps; t++) {
        float *g = fill_normal(n, 0.1, 0.0);
        int rc = pgrt_buf_upload(bg, 0, g, n);
        if (rc)
            die_rt("pgrt_buf_upload", rc);
        float bc1 = (float)(1.0 / (1.0 - pow(b1, t))), bc2 = (float)(1.0 / (1.0 - pow(b2, t)));
        float hyper[7] = {lr, b1, b2, eps, wd, bc1, bc2};
        if ((rc = pgrt_buf_upload(bh, 0, hyper, 7)))
            die_rt("pgrt_buf_upload", rc);
        pgrt_arg args[] = {pgrt_arg_buf(bp[0]), pgrt_arg_buf(bg),   pgrt_arg_buf(bm[0]),
                           pgrt_arg_buf(bv[0]), pgrt_arg_f32(lr),   pgrt_arg_f32(b1),
                           pgrt_arg_f32(b2),    pgrt_arg_f32(eps),  pgrt_arg_f32(wd),
                           pgrt_arg_f32(bc1),   pgrt_arg_f32(bc2),  pgrt_arg_u32(n)};
        if (!launch("adamw_step", &kn, args, 12))
            r->bad++;
        pgrt_arg dargs[] = {pgrt_arg_buf(bp[1]), pgrt_arg_buf(bg), pgrt_arg_buf(bm[1]),
                            pgrt_arg_buf(bv[1]), pgrt_arg_buf(bh), pgrt_arg_u32(n)};
        if (!launch("adamw_step_dev", &knd, dargs, 6))
            rd->bad++;
        for (uint32_t i = 0; i < n; i++) {
            double gi = g[i];
            m[i] = (double)b1 * m[i] + (1.0 - (double)b1) * gi;
            v[i] = (double)b2 * v[i] + (1.0 - (double)b2) * gi * gi;
            p[i] -= (double)lr * (m[i] * bc1 / (sqrt(v[i] * bc2) + (double)eps) + (double)wd * p[i]);
        }
        free(g);
    }
    float *out[2][3];
    for (int c = 0; c < 2; c++) {
        for (int j = 0; j < 3; j++)
            out[c][j] = xmalloc(n * 4);
        dev_download(bp[c], out[c][0], n);
        dev_download(bm[c], out[c][1], n);
        dev_download(bv[c], out[c][2], n);
    }
    const double *refs[3] = {p, m, v};
    for (int j = 0; j < 3; j++) {
        compare(r, out[0][j], refs[j], n);
        compare(rd, out[1][j], refs[j], n);
        /* the same body: the same bits from either kernel */
        same_bits(rd, out[0][j], out[1][j], n * 4);
    }
    finish(r);
    finish(rd);
    for (int c = 0; c < 2; c++) {
        pgrt_buf_destroy(&bp[c]);
        pgrt_buf_destroy(&bm[c]);
        pgrt_buf_destroy(&bv[c]);
        for (int j = 0; j < 3; j++)
            free(out[c][j]);
    }
    pgrt_buf_destroy(&bg);
    pgrt_buf_destroy(&bh);
    free(p0), free(zero), free(p), free(m), free(v);
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    small = check_start(argc, argv, "test_backward");

    for (int i = 0; i < NSIZES; i++)
        test_silu(sizes()[i]);
    for (int i = 0; i < NSIZES; i++)
        test_residual(sizes()[i]);
    for (int i = 0; i < NSIZES; i++)
        test_cast(sizes()[i]);

    static const uint32_t widths[] = {1, 31, 32, 33, 512, 4096};
    static const uint32_t wrows[] = {37, 37, 37, 37, 19, 9};
    for (int i = 0; i < 6; i++)
        test_softmax(small ? 3 : wrows[i], widths[i]);

    static const uint32_t hiddens[] = {1, 17, 255, 256, 1536, 4095, 8960};
    static const uint32_t hrows[] = {3, 13, 11, 11, 7, 5, 5};
    for (int i = 0; i < 7; i++)
        test_rms(small ? 2 : hrows[i], hiddens[i]);

    /* the reduction alone, over row counts that take every path of its loop */
    static const uint32_t grows[] = {1, 31, 97, 128, 129, 1000, 4099};
    static const uint32_t gcols[] = {1, 7, 9, 255, 1536, 257, 1536};
    for (int i = 0; i < 7; i++)
        test_gamma(small && grows[i] > 200 ? 200 : grows[i], gcols[i]);

    for (int i = 0; i < NSIZES; i++)
        test_adamw(sizes()[i], 5);

    printf("\n%-28s %-30s %10s %10s %5s %7s %s\n", "kernel", "shape", "rel_l2", "max_rel",
           "bad", "repeat", "");
    for (size_t i = 0; i < nrows; i++) {
        const row *t = &table[i];
        printf("%-28s %-30s %10.2e %10.2e %5zu %7s %s\n", t->kernel, t->shape, t->rel, t->max_rel,
               t->bad, t->repeat ? "same" : "DIFF", t->pass ? "ok" : "FAIL");
    }
    printf("rel_l2  = |out - ref| / |ref| (2-norms) against double; must be <= %.0e\n"
           "max_rel = max |out_i - ref_i| / max(|ref_i|, 1e-6 max|ref|); "
           "batched_rms_norm_backward: must be <= 1e-6\n"
           "bad     = elements left unwritten (NaN poison), non-finite, or not bit-exact where "
           "exact is required\n",
           REL_TOL);
    pgrt_ctx_destroy(&check_ctx);
    fflush(stdout);
    TEST_DONE();
}
