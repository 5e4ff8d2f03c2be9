/* SPDX-License-Identifier: MIT */
/*
 * cross_entropy_fwd_bwd_f32 / _bf16 on a GPU against a double reference:
 * per-row loss = logsumexp - x[label] and, in place, dlogits = (softmax -
 * onehot) * scale, scale = 1 / (rows not ignored). Ragged row counts and
 * vocab sizes up to Qwen2's 151936, logits spread wide and shifted far
 * from zero (a logsumexp without the max would overflow), ignored labels
 * (-100 and another negative), one label past the row (its loss must
 * be NaN), and confident rows: labels at the row's max with a wide spread,
 * where p is near 1, the loss tiny and 1 - p would cancel. The loss is poisoned before each launch; the logits are
 * overwritten in place, so the repeat runs on a fresh upload and must give
 * the same bits. The loss (f32 in both variants) must be within 1e-5 of
 * the reference norm-wise; dlogits within 1e-5 (f32) or 5e-3 (bf16, one
 * rounding of the stored gradient).
 *
 * Usage: test_cross_entropy [--small] [--seed N]; exit 77 without a GPU.
 */
static double cur_tol;
#define REL_TOL cur_tol

#include "model_check.h"

static uint32_t argmax(const float *x, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t j = 1; j < n; j++)
        if (x[j] > x[best])
            best = j;
    return best;
}

static void test_ce(bool bf16, uint32_t rows, uint32_t vocab, double spread, double shift,
                    bool bad_label, bool confident)
{
    const char *name = bf16 ? "cross_entropy_fwd_bwd_bf16" : "cross_entropy_fwd_bwd_f32";
    size_t n = (size_t)rows * vocab;
    float *x = fill_normal(n, spread, shift);
    pgrt_buf *bx = act_upload(x, n, bf16); /* rounds x for bf16 */
    int32_t *lab = xmalloc(rows * sizeof *lab);
    uint32_t counted = 0;
    for (uint32_t r = 0; r < rows; r++) {
        uint64_t u = next_u64();
        lab[r] = (int32_t)(confident ? argmax(x + (size_t)r * vocab, vocab) : u % vocab);
        if (rows > 2 && u % 7 == 0)
            lab[r] = (u >> 32) & 1 ? -100 : -3;
        counted += lab[r] >= 0;
    }
    uint32_t bad_row = UINT32_MAX;
    if (bad_label && rows > 1) {
        bad_row = rows - 1;
        counted -= lab[bad_row] >= 0;
        lab[bad_row] = (int32_t)vocab;
    }
    float scale = 1.0f / (float)(counted ? counted : 1);
    pgrt_buf *bl = s32_upload(lab, rows), *bloss = dev_alloc(PG_F32, rows);
    double *rloss = ref_alloc(rows), *rgrad = ref_alloc(n);
    ce_reference(x, lab, rows, vocab, bad_row, scale, rloss, rgrad);
    float *loss[2] = {xmalloc(rows * 4), xmalloc(rows * 4)};
    float *grad[2] = {xmalloc(n * 4), xmalloc(n * 4)};
    pgk_knobs kn = knobs_of(name, "rows", rows, "cols", vocab, NULL);
    bool ok = true;
    for (int run = 0; run < 2; run++) {
        if (run) {
            pgrt_buf_destroy(&bx);
            bx = act_upload(x, n, bf16);
        }
        poison(bloss);
        pgrt_arg args[] = {pgrt_arg_buf(bx),   pgrt_arg_buf(bl),     pgrt_arg_buf(bloss),
                           pgrt_arg_u32(rows), pgrt_arg_u32(vocab), pgrt_arg_f32(scale)};
        ok &= launch(name, &kn, args, 6);
        dev_download(bloss, loss[run], rows);
        act_download(bx, grad[run], n, bf16);
    }
    const char *what = bad_label ? " +bad label" : confident ? " confident" : "";
    cur_tol = 1e-5;
    row *rl = add_row(name, "loss R=%u V=%u sd=%g%s", rows, vocab, spread, what);
    if (!ok)
        rl->bad++;
    if (bad_row != UINT32_MAX) {
        if (!isnan(loss[0][bad_row]))
            rl->bad++;
        loss[0][bad_row] = loss[1][bad_row] = 0; /* checked; out of the norm */
        rloss[bad_row] = 0;
    }
    compare(rl, loss[0], rloss, rows);
    same_bits(rl, loss[0], loss[1], rows * 4);
    finish(rl);
    cur_tol = bf16 ? 5e-3 : 1e-5;
    row *rg = add_row(name, "dlogits R=%u V=%u sd=%g%s", rows, vocab, spread, what);
    compare(rg, grad[0], rgrad, n);
    same_bits(rg, grad[0], grad[1], n * 4);
    finish(rg);
    pgrt_buf_destroy(&bx);
    pgrt_buf_destroy(&bl);
    pgrt_buf_destroy(&bloss);
    free(x), free(lab), free(rloss), free(rgrad);
    free(loss[0]), free(loss[1]), free(grad[0]), free(grad[1]);
}

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_cross_entropy");
    struct {
        uint32_t rows, vocab;
        double spread, shift;
    } shapes[] = {
        {1, 1, 1.0, 0.0},        {3, 2, 2.0, 0.0},       {37, 33, 3.0, 1.0},
        {11, 1000, 5.0, 80.0},   {9, 32000, 4.0, -60.0}, {5, 151936, 3.0, 0.0},
        {2, 4097, 30.0, 200.0},
    };
    for (int bf = 0; bf < 2; bf++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            uint32_t v = shapes[i].vocab;
            if (small && v > 40000)
                v = 40001;
            test_ce(bf, shapes[i].rows, v, shapes[i].spread, shapes[i].shift, false, false);
        }
    for (int bf = 0; bf < 2; bf++) {
        test_ce(bf, 4, 777, 2.0, 0.0, true, false);
        /* labels at the row's max with a wide spread: p near 1, tiny losses */
        test_ce(bf, 13, 4097, 25.0, 10.0, false, true);
        test_ce(bf, 7, 32000, 8.0, 0.0, false, true);
    }
    print_table("loss: rel_l2 <= 1e-5 (both); dlogits: f32 <= 1e-5, bf16 <= 5e-3; a label "
                "past the row must give a NaN loss");
    TEST_DONE();
}
