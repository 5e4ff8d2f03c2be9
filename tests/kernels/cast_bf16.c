/* SPDX-License-Identifier: MIT */
/*
 * cast_f32_to_bf16 and cast_bf16_to_f32 on a GPU. The narrowing cast must
 * match a host round-to-nearest-even conversion bit for bit (ties, values
 * that round up to inf, subnormals, +-0 and infinities included; a NaN
 * must stay a NaN); the widening cast must be exact for every bf16 bit
 * pattern. cast_f32_to_bf16_scaled2 must give both copies, bf16(x) and
 * bf16(s x) with s x rounded to f32 first, bit for bit. Outputs
 * NaN-poisoned; every launch twice (same bits).
 *
 * Usage: test_cast_bf16 [--small] [--seed N]; exit 77 without a GPU.
 */
static double cur_tol;
#define REL_TOL cur_tol

#include "model_check.h"

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_narrow(uint32_t n)
{
    const char *name = "cast_f32_to_bf16";
    cur_tol = 4e-3; /* one rounding to 8 significant bits */
    row *r = add_row(name, "n=%u", n);
    float *x = fill_normal(n, 10.0, 0.0);
    static const uint32_t special[] = {
        0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x3F808000u,
        0x3F818000u, 0x3F808001u, 0x7F7FFFFFu, 0x7F7F8000u, 0x00000001u, 0x00018000u,
        0x80400000u, 0x007FFFFFu, 0x7F7F7FFFu, 0xFFFFFFFFu,
    };
    for (uint32_t i = 0; i < n && i < 16; i++)
        x[i] = bits_f32(special[i]);
    for (uint32_t i = 16; i < n; i += 13) /* exact ties: even and odd */
        x[i] = bits_f32((f32_bits(x[i]) & 0xFFFF0000u) | 0x8000u);
    pgrt_buf *bx = dev_upload(x, n), *bo = act_alloc(n, true);
    float *out[2] = {xmalloc(n * 4), xmalloc(n * 4)};
    pgk_knobs kn = knobs_of(name, "n", n, NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bx), pgrt_arg_buf(bo), pgrt_arg_u32(n)};
    for (int run = 0; run < 2; run++) {
        act_poison(bo, true);
        if (!launch(name, &kn, args, 3))
            r->bad++;
        act_download(bo, out[run], n, true);
    }
    double *ref = ref_alloc(n);
    float *gfin = xmalloc(n * 4);
    size_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        float want = f32_of_bf16(bf16_of(x[i]));
        if (isnan(x[i])) {
            if (!isnan(out[0][i]))
                r->bad++;
            continue;
        }
        if (memcmp(&want, &out[0][i], 4) != 0)
            r->bad++;
        if (isfinite(want)) { /* the norm over the finite ones */
            ref[m] = x[i];
            gfin[m++] = out[0][i];
        }
    }
    compare(r, gfin, ref, m);
    same_bits(r, out[0], out[1], n * 4);
    finish(r);
    pgrt_buf_destroy(&bx);
    pgrt_buf_destroy(&bo);
    free(x), free(ref), free(gfin), free(out[0]), free(out[1]);
}

/* Views off the vector alignment (src 4 bytes past 16, dst 2 bytes past
 * 8): the element-by-element path, the same bits. */
static void test_narrow_misaligned(uint32_t n)
{
    const char *name = "cast_f32_to_bf16";
    cur_tol = 4e-3;
    row *r = add_row(name, "n=%u, misaligned views", n);
    float *x = fill_normal(n + 1, 10.0, 0.0);
    pgrt_buf *bx = dev_upload(x, n + 1), *bo = act_alloc(n + 2, true);
    float *out = xmalloc((n + 2) * 4);
    pgk_knobs kn = knobs_of(name, "n", n, NULL);
    pgrt_arg args[] = {pgrt_arg_ptr(pgrt_buf_ptr(bx) + 4), pgrt_arg_ptr(pgrt_buf_ptr(bo) + 2),
                       pgrt_arg_u32(n)};
    act_poison(bo, true);
    if (!launch(name, &kn, args, 3))
        r->bad++;
    act_download(bo, out, n + 2, true);
    double *ref = ref_alloc(n);
    for (uint32_t i = 0; i < n; i++) {
        float want = f32_of_bf16(bf16_of(x[i + 1]));
        if (memcmp(&want, &out[i + 1], 4) != 0)
            r->bad++;
        ref[i] = x[i + 1];
    }
    compare(r, out + 1, ref, n);
    r->repeat = true;
    finish(r);
    pgrt_buf_destroy(&bx);
    pgrt_buf_destroy(&bo);
    free(x), free(ref), free(out);
}

static void test_widen(void)
{
    const char *name = "cast_bf16_to_f32";
    cur_tol = 0;
    uint32_t n = 65536; /* every bf16 bit pattern */
    row *r = add_row(name, "all 65536 bf16 values");
    uint16_t *h = xmalloc(n * 2);
    for (uint32_t i = 0; i < n; i++)
        h[i] = (uint16_t)i;
    pgrt_buf *bx = dev_alloc(PG_U32, n / 2), *bo = dev_alloc(PG_F32, n);
    GPU_CHECK(pgrt_buf_upload(bx, 0, h, n / 2));
    float *out[2] = {xmalloc(n * 4), xmalloc(n * 4)};
    pgk_knobs kn = knobs_of(name, "n", n, NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bx), pgrt_arg_buf(bo), pgrt_arg_u32(n)};
    for (int run = 0; run < 2; run++) {
        poison(bo);
        if (!launch(name, &kn, args, 3))
            r->bad++;
        dev_download(bo, out[run], n);
    }
    for (uint32_t i = 0; i < n; i++)
        if (f32_bits(out[0][i]) != (uint32_t)h[i] << 16)
            r->bad++;
    same_bits(r, out[0], out[1], n * 4);
    r->pass = r->bad == 0 && r->repeat;
    if (!r->pass)
        TEST_FAIL_("%s: %zu values not widened exactly", name, r->bad);
    test_checks_++;
    pgrt_buf_destroy(&bx);
    pgrt_buf_destroy(&bo);
    free(h), free(out[0]), free(out[1]);
}

static void test_scaled2(uint32_t n, float s)
{
    const char *name = "cast_f32_to_bf16_scaled2";
    cur_tol = 4e-3;
    row *r = add_row(name, "n=%u s=%g", n, (double)s);
    float *x = fill_normal(n, 1.0, 0.0);
    pgrt_buf *bx = dev_upload(x, n), *b0 = act_alloc(n, true), *b1 = act_alloc(n, true);
    float *out[2][2] = {{xmalloc(n * 4), xmalloc(n * 4)}, {xmalloc(n * 4), xmalloc(n * 4)}};
    pgk_knobs kn = knobs_of(name, "n", n, NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bx), pgrt_arg_buf(b0), pgrt_arg_buf(b1), pgrt_arg_u32(n),
                       pgrt_arg_f32(s)};
    for (int run = 0; run < 2; run++) {
        act_poison(b0, true);
        act_poison(b1, true);
        if (!launch(name, &kn, args, 5))
            r->bad++;
        act_download(b0, out[run][0], n, true);
        act_download(b1, out[run][1], n, true);
    }
    double *ref = ref_alloc(n);
    for (uint32_t i = 0; i < n; i++) {
        float w0 = f32_of_bf16(bf16_of(x[i])), w1 = f32_of_bf16(bf16_of(s * x[i]));
        if (memcmp(&w0, &out[0][0][i], 4) != 0 || memcmp(&w1, &out[0][1][i], 4) != 0)
            r->bad++;
        ref[i] = (double)s * x[i];
    }
    compare(r, out[0][1], ref, n);
    same_bits(r, out[0][0], out[1][0], n * 4);
    same_bits(r, out[0][1], out[1][1], n * 4);
    finish(r);
    pgrt_buf_destroy(&bx);
    pgrt_buf_destroy(&b0);
    pgrt_buf_destroy(&b1);
    free(x), free(ref);
    for (int i = 0; i < 4; i++)
        free(out[i / 2][i % 2]);
}

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_cast_bf16");
    static const uint32_t sizes[] = {1, 17, 255, 257, 1025, 65539, (1u << 20) + 3};
    for (int i = 0; i < 7; i++)
        test_narrow(small && sizes[i] > 65539 ? 65539 : sizes[i]);
    test_narrow_misaligned(1);
    test_narrow_misaligned(1027);
    test_widen();
    test_scaled2(1, 2.0f);
    test_scaled2(65539, 2.0f);
    test_scaled2(small ? 65539 : (1u << 20) + 3, 0.3f);
    print_table("bad counts results that differ from the host's conversion (bit for bit)");
    TEST_DONE();
}
