/* SPDX-License-Identifier: MIT */
/*
 * The forward GEMMs of kernels/gemm_f32.c, gemm_forward and
 * gemm_forward_accumulate, on a GPU against a double-precision CPU
 * reference (the backward ones are gemm_f32.c's, with their own harness).
 *
 * Every output is poisoned with NaN before the launch (so an element the
 * kernel skips shows), every launch is run twice and must give the same
 * bits, and fp32 results must be within 1e-5 of the reference norm-wise
 * (|out - ref| / |ref|, 2-norms). The data are fresh random numbers each
 * run; the seed is printed and can be given back.
 *
 * Usage: test_gemm_f32_forward [--small] [--seed N]
 *   --small  smaller shapes (for compute-sanitizer); also PGTEST_SMALL=1
 *   --seed   replay a run; without it $PGRT_TEST_SEED, else the clock
 * Exit 77 when there is no driver or no device.
 */
#define REL_TOL 1e-5

#include "gpu_check.h"

/* ---------------------------------------------------------------- gemm_forward */

static void test_forward(uint32_t M, uint32_t N, uint32_t K, bool acc)
{
    const char *name = acc ? "gemm_forward_accumulate" : "gemm_forward";
    size_t na = (size_t)M * K, nb = (size_t)K * N, nc = (size_t)M * N;
    float *a = fill_normal(na, 1.0, 0.0), *b = fill_normal(nb, 1.0, 0.0);
    float *c0 = fill_normal(nc, 1.0, 0.0);
    float *out = xmalloc(nc * sizeof *out), *out2 = xmalloc(nc * sizeof *out2);
    double *ref = xmalloc(nc * sizeof *ref);
    for (uint32_t i = 0; i < M; i++)
        for (uint32_t j = 0; j < N; j++) {
            double s = acc ? c0[(size_t)i * N + j] : 0.0;
            for (uint32_t k = 0; k < K; k++)
                s += (double)a[(size_t)i * K + k] * b[(size_t)k * N + j];
            ref[(size_t)i * N + j] = s;
        }
    pgrt_buf *da = dev_upload(a, na), *db = dev_upload(b, nb), *dc = dev_alloc(PG_F32, nc);
    pgk_knobs kn = knobs_of(name, "m", M, "n", N, "k", K, NULL);
    pgrt_arg args[6] = {pgrt_arg_buf(da), pgrt_arg_buf(db), pgrt_arg_buf(dc), pgrt_arg_u32(M),
                        pgrt_arg_u32(N), pgrt_arg_u32(K)};
    row *r = add_row(name, "%ux%ux%u", M, N, K);
    for (int rep = 0; rep < 2; rep++) {
        int rc = acc ? pgrt_buf_upload(dc, 0, c0, nc) : pgrt_buf_fill32(dc, POISON);
        if (rc)
            die_rt("preparing C", rc);
        if (!launch(name, &kn, args, 6))
            break;
        dev_download(dc, rep ? out2 : out, nc);
    }
    compare(r, out, ref, nc);
    same_bits(r, out, out2, nc * sizeof *out);
    finish(r);
    pgrt_buf_destroy(&da);
    pgrt_buf_destroy(&db);
    pgrt_buf_destroy(&dc);
    free(a), free(b), free(c0), free(out), free(out2), free(ref);
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_gemm_f32_forward");
    test_forward(1, 1, 1, false);
    test_forward(17, 33, 5, false);
    test_forward(64, 300, 47, false);
    test_forward(130, 16, 128, true);
    test_forward(small ? 64 : 256, 128, 128, false);
    test_forward(small ? 64 : 256, 128, 16, true);
    print_table("rel_l2 must be <= 1e-5");
    pgrt_ctx_destroy(&check_ctx);
    TEST_DONE();
}
