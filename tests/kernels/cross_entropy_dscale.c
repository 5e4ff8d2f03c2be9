/* SPDX-License-Identifier: MIT */
/*
 * cross_entropy_fwd_bwd_dscale_f32 / _bf16 on a GPU: the loss and the
 * in-place gradient with the scale read from device memory. Against a
 * double reference (as tests/kernels/cross_entropy.c: loss within
 * 1e-5 norm-wise, dlogits 1e-5 for f32 and 5e-3 for bf16) and, the
 * kernels' contract, bit for bit against cross_entropy_fwd_bwd_f32 /
 * _bf16 given the same scale as an immediate. Then the scale in device
 * memory is changed and the same argument list launched again, as a graph
 * replay would: the new scale must be the one applied, again bit for bit
 * with the immediate kernel. Shapes: ragged rows and vocab sizes up to
 * Qwen2's 151936, logits shifted far from zero, ignored labels, one label
 * past the row (its loss NaN in both), confident rows. The logits are
 * overwritten in place, so each launch runs on a fresh upload; the loss is
 * poisoned before each one, and every dscale launch runs twice for the
 * same bits.
 *
 * Usage: test_cross_entropy_dscale [--small] [--seed N]; exit 77 without a GPU.
 */
static double cur_tol;
#define REL_TOL cur_tol

#include "model_check.h"

typedef struct ce_out {
    float *loss, *grad;
} ce_out;

/* One launch of `kernel` on a fresh upload of x; scale is an f32 argument
 * (immediate) or the device buffer bscale. */
static bool run_ce(const char *kernel, bool bf16, float *x, size_t n, pgrt_buf *bl,
                   pgrt_buf *bloss, uint32_t rows, uint32_t vocab, float scale, pgrt_buf *bscale,
                   ce_out out)
{
    pgrt_buf *bx = act_upload(x, n, bf16);
    poison(bloss);
    pgk_knobs kn = knobs_of(kernel, "rows", rows, "cols", vocab, NULL);
    pgrt_arg args[] = {pgrt_arg_buf(bx),   pgrt_arg_buf(bl),    pgrt_arg_buf(bloss),
                       pgrt_arg_u32(rows), pgrt_arg_u32(vocab), pgrt_arg_f32(scale)};
    if (bscale)
        args[5] = pgrt_arg_buf(bscale);
    bool ok = launch(kernel, &kn, args, 6);
    dev_download(bloss, out.loss, rows);
    act_download(bx, out.grad, n, bf16);
    pgrt_buf_destroy(&bx);
    return ok;
}

static bool same_f32(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * 4) == 0;
}

static void test_dscale(bool bf16, uint32_t rows, uint32_t vocab, double spread, double shift,
                        bool bad_label, bool confident)
{
    const char *name =
        bf16 ? "cross_entropy_fwd_bwd_dscale_bf16" : "cross_entropy_fwd_bwd_dscale_f32";
    const char *imm = bf16 ? "cross_entropy_fwd_bwd_bf16" : "cross_entropy_fwd_bwd_f32";
    size_t n = (size_t)rows * vocab;
    float *x = fill_normal(n, spread, shift);
    if (bf16)
        round_bf16(x, n); /* the reference sees what the device is given */
    int32_t *lab = xmalloc(rows * sizeof *lab);
    uint32_t counted = 0;
    for (uint32_t r = 0; r < rows; r++) {
        uint64_t u = next_u64();
        uint32_t best = 0;
        for (uint32_t j = 1; confident && j < vocab; j++)
            if (x[(size_t)r * vocab + j] > x[(size_t)r * vocab + best])
                best = j;
        lab[r] = (int32_t)(confident ? best : u % vocab);
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
    pgrt_buf *bscale = dev_upload(&scale, 1);

    double *rloss = ref_alloc(rows), *rgrad = ref_alloc(n);
    ce_reference(x, lab, rows, vocab, bad_row, scale, rloss, rgrad);

    ce_out dev[2], ref_imm, again, again_imm;
    ce_out *all[] = {&dev[0], &dev[1], &ref_imm, &again, &again_imm};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        all[i]->loss = xmalloc(rows * 4);
        all[i]->grad = xmalloc(n * 4);
    }
    bool ok = true;
    for (int run = 0; run < 2; run++)
        ok &= run_ce(name, bf16, x, n, bl, bloss, rows, vocab, 0.0f, bscale, dev[run]);
    ok &= run_ce(imm, bf16, x, n, bl, bloss, rows, vocab, scale, NULL, ref_imm);
    /* a new scale in the same buffer, the same arguments: what a replayed
     * graph sees */
    float scale2 = scale * 0.37f;
    int rc = pgrt_buf_upload(bscale, 0, &scale2, 1);
    if (rc)
        die_rt("pgrt_buf_upload", rc);
    ok &= run_ce(name, bf16, x, n, bl, bloss, rows, vocab, 0.0f, bscale, again);
    ok &= run_ce(imm, bf16, x, n, bl, bloss, rows, vocab, scale2, NULL, again_imm);

    const char *what = bad_label ? " +bad label" : confident ? " confident" : "";
    cur_tol = 1e-5;
    row *rl = add_row(name, "loss R=%u V=%u sd=%g%s", rows, vocab, spread, what);
    rl->skipped = target_lacks(name); /* the row's name is cut to 31 characters */
    if (!ok)
        rl->bad++;
    if (bad_row != UINT32_MAX) {
        if (!isnan(dev[0].loss[bad_row]))
            rl->bad++;
        /* checked; out of the norm (the immediate kernel's NaN is compared
         * bit for bit below) */
        rloss[bad_row] = 0;
    }
    float *loss0 = xmalloc(rows * 4);
    memcpy(loss0, dev[0].loss, rows * 4);
    if (bad_row != UINT32_MAX)
        loss0[bad_row] = 0;
    compare(rl, loss0, rloss, rows);
    same_bits(rl, dev[0].loss, dev[1].loss, rows * 4);
    if (!same_f32(dev[0].loss, ref_imm.loss, rows) || !same_f32(again.loss, again_imm.loss, rows))
        rl->bad++; /* not the immediate kernel's bits */
    finish(rl);

    cur_tol = bf16 ? 5e-3 : 1e-5;
    row *rg = add_row(name, "dlogits R=%u V=%u sd=%g%s", rows, vocab, spread, what);
    rg->skipped = target_lacks(name);
    compare(rg, dev[0].grad, rgrad, n);
    same_bits(rg, dev[0].grad, dev[1].grad, n * 4);
    if (!same_f32(dev[0].grad, ref_imm.grad, n) || !same_f32(again.grad, again_imm.grad, n))
        rg->bad++;
    bool nonzero = false;
    for (size_t i = 0; i < n && !nonzero; i++)
        nonzero = dev[0].grad[i] != 0.0f;
    if (nonzero && same_f32(again.grad, dev[0].grad, n))
        rg->bad++; /* the new scale was not read */
    finish(rg);

    pgrt_buf_destroy(&bl);
    pgrt_buf_destroy(&bloss);
    pgrt_buf_destroy(&bscale);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]->loss), free(all[i]->grad);
    free(x), free(lab), free(rloss), free(rgrad), free(loss0);
}

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_cross_entropy_dscale");
    struct {
        uint32_t rows, vocab;
        double spread, shift;
    } shapes[] = {
        {1, 1, 1.0, 0.0},      {3, 2, 2.0, 0.0},       {37, 33, 3.0, 1.0},
        {11, 1000, 5.0, 80.0}, {9, 32000, 4.0, -60.0}, {5, 151936, 3.0, 0.0},
    };
    for (int bf = 0; bf < 2; bf++) {
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            uint32_t v = shapes[i].vocab;
            if (small && v > 40000)
                v = 40001;
            test_dscale(bf, shapes[i].rows, v, shapes[i].spread, shapes[i].shift, false, false);
        }
        test_dscale(bf, 4, 777, 2.0, 0.0, true, false);
        test_dscale(bf, 13, 4097, 25.0, 10.0, false, true);
    }
    print_table("loss: rel_l2 <= 1e-5 (both); dlogits: f32 <= 1e-5, bf16 <= 5e-3; bad counts "
                "any bit that differs from the immediate-scale kernel's (two scales, the second "
                "written to the same buffer)");
    pgrt_ctx_destroy(&check_ctx);
    TEST_DONE();
}
