/* SPDX-License-Identifier: MIT */
/*
 * The tensor-core attention kernels (attention_mma_forward, _backward_dq,
 * _backward_dkv: f32 in and out, bf16 operands) on a GPU against a double
 * reference on the f32 inputs: the forward's O and LSE, then dQ and delta,
 * then dK and dV, on the kernel's own forward outputs (the backward
 * reference is the exact gradient as a function of the O and LSE it is
 * given, as in test_attention).
 *
 * Shapes: sequence lengths 1, 17, 100, 512 (and 130, 300), head_dim 64 and
 * 128 (and 80, padded to 128; and 30, not a multiple of 4: the scalar
 * staging path), group sizes 1, 3 and 6 (Hq/Hkv 12/2, 4/4, 3/1), batches 1
 * and 2, a peaky softmax. Outputs NaN-poisoned before each launch, each
 * launch twice: the same bits. Tolerances are those of bf16 operands (8
 * significant bits) with f32 accumulation, norm-wise: O 1e-2, LSE 5e-3,
 * gradients 2e-2; delta (f32 from the f32 O and dO) 1e-5. At S = 1 (one key
 * a row) dQ and dK are exactly 0 and delta is dO.O, and the kernels' values
 * are rounding: held to a bound of it (attention_check.h, s1_ds_bound and
 * s1_delta_bound), not to their size.
 * A summary gives each output's worst norm-wise error and worst
 * max|err| / max|ref| over the shapes.
 *
 * Usage: test_attention_mma [--small] [--seed N]; exit 77 without a GPU or
 * on one below sm_80.
 */
#include "attention_check.h"


static const att_case mma = {"attention_mma_forward", "attention_mma_backward_dq",
                             "attention_mma_backward_dkv", false, 1e-2, 5e-3, 2e-2, true};

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_attention_mma");
    pgrt_device_info di;
    if (pgrt_ctx_device_info(check_ctx, &di) || pg_target_sm(di.target) < 80) {
        printf("test_attention_mma: the device is below sm_80: skipped\n");
        return 77;
    }
    static const shp shapes[] = {
        {2, 1, 12, 2, 64, 1.0},    {2, 17, 12, 2, 128, 1.0}, {1, 100, 4, 4, 64, 1.0},
        {2, 100, 12, 2, 128, 1.0}, {1, 130, 3, 1, 80, 1.0},  {1, 65, 4, 4, 30, 1.0},
        {1, 64, 4, 4, 128, 4.0},   {1, 300, 12, 2, 64, 1.0}, {1, 512, 12, 2, 128, 1.0},
        {2, 512, 4, 4, 64, 1.0},
    };
    /* compute-sanitizer's: every path (D 64, 128, padded, scalar; GQA;
     * ragged tiles) on few blocks */
    static const shp small_shapes[] = {
        {1, 1, 12, 2, 64, 1.0}, {1, 17, 12, 2, 128, 1.0}, {1, 67, 3, 1, 80, 1.0},
        {1, 65, 2, 2, 30, 1.0}, {1, 100, 4, 2, 64, 1.0},
    };
    const shp *list = small ? small_shapes : shapes;
    size_t n = small ? sizeof small_shapes / sizeof small_shapes[0]
                     : sizeof shapes / sizeof shapes[0];
    for (size_t i = 0; i < n; i++)
        attention_case(&mma, list[i]);
    print_table("O <= 1e-2, LSE <= 5e-3, dQ dK dV <= 2e-2 (bf16 operands), delta <= 1e-5; "
                "every output bitwise the same on a second launch; S = 1 dQ, dK (exactly 0) "
                "and delta within a bound of their rounding");
    const char *what[6] = {"O", "LSE", "dQ", "delta", "dK", "dV"};
    printf("\nworst over the shapes:  rel_l2  max|err|/max|ref|\n");
    for (int w = 0; w < 6; w++) {
        double rel = 0, a = 0;
        size_t len = strlen(what[w]);
        for (size_t i = 0; i < nrows; i++)
            if (!strncmp(table[i].shape, what[w], len) && table[i].shape[len] == ' ') {
                rel = fmax(rel, table[i].rel);
                a = fmax(a, abs_rel[i]);
            }
        printf("  %-6s %16.2e %12.2e\n", what[w], rel, a);
    }
    TEST_DONE();
}
