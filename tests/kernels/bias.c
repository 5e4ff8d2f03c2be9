/* SPDX-License-Identifier: MIT */
/*
 * bias_add_f32 / _bf16 on a GPU: x += bias per row, in place, over ragged
 * shapes. One rounded f32 add (then, for bf16, one rounding to bf16): the
 * result must equal the host's, bit for bit, and a double reference
 * norm-wise. The kernel works in place, so the repeat runs on a fresh
 * upload and must give the same bits.
 *
 * Usage: test_bias [--small] [--seed N]; exit 77 without a GPU.
 */
static double cur_tol;
#define REL_TOL cur_tol

#include "model_check.h"

static void test_bias(bool bf16, uint32_t rows, uint32_t cols)
{
    const char *name = bf16 ? "bias_add_bf16" : "bias_add_f32";
    cur_tol = bf16 ? 5e-3 : 1e-6;
    row *r = add_row(name, "rows=%u cols=%u", rows, cols);
    size_t n = (size_t)rows * cols;
    float *x = fill_normal(n, 1.0, 0.0), *b = fill_normal(cols, 0.5, 0.1);
    pgrt_buf *bx = act_upload(x, n, bf16), *bb = act_upload(b, cols, bf16);
    double *ref = ref_alloc(n);
    for (size_t i = 0; i < n; i++)
        ref[i] = (double)x[i] + b[i % cols];
    float *out[2] = {xmalloc(n * 4), xmalloc(n * 4)};
    pgk_knobs kn = knobs_of(name, "rows", rows, "cols", cols, NULL);
    for (int run = 0; run < 2; run++) {
        if (run) {
            pgrt_buf_destroy(&bx);
            bx = act_upload(x, n, bf16);
        }
        pgrt_arg args[] = {pgrt_arg_buf(bx), pgrt_arg_buf(bb), pgrt_arg_u32(rows),
                           pgrt_arg_u32(cols)};
        if (!launch(name, &kn, args, 4))
            r->bad++;
        act_download(bx, out[run], n, bf16);
    }
    for (size_t i = 0; i < n; i++) {
        float s = x[i] + b[i % cols];
        if (bf16)
            s = f32_of_bf16(bf16_of(s));
        if (memcmp(&s, &out[0][i], 4) != 0)
            r->bad++;
    }
    compare(r, out[0], ref, n);
    same_bits(r, out[0], out[1], n * 4);
    finish(r);
    pgrt_buf_destroy(&bx);
    pgrt_buf_destroy(&bb);
    free(x), free(b), free(ref), free(out[0]), free(out[1]);
}

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_bias");
    static const uint32_t rows[] = {1, 3, 77, 2049, 513};
    static const uint32_t cols[] = {1, 255, 257, 1536, 8960};
    for (int bf = 0; bf < 2; bf++)
        for (int i = 0; i < 5; i++)
            test_bias(bf, small && rows[i] > 100 ? 33 : rows[i], cols[i]);
    print_table("bad counts results that differ from the host's rounded sum; "
                "f32: rel_l2 <= 1e-6, bf16: <= 5e-3");
    TEST_DONE();
}
