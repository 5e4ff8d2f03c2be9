/* SPDX-License-Identifier: MIT */
/*
 * Causal GQA attention on a GPU against a double reference, f32 and bf16:
 * attention_forward (O and the row logsumexp), then attention_backward_dq
 * (dQ and delta) and attention_backward_dkv (dK, dV), on the kernels' own
 * forward outputs as Hugging Face's backward would use them. The backward
 * reference is the exact gradient as a function of those inputs: P =
 * exp(scale q.k - LSE) from the LSE it is given, delta = dO . O from the O
 * it is given, dS = P (dO.v - delta).
 *
 * Shapes: ragged sequence lengths up to 4096, head_dim 64 and 128 (and a
 * ragged 80 and a tiny 1), group sizes 1, 2, 3 and 6, batches of 1 and 2,
 * peaky softmaxes too. Outputs NaN-poisoned before each launch, each launch
 * twice (same bits). f32: forward and LSE within 1e-5 norm-wise, gradients
 * within 5e-5; bf16 (one rounding of each stored result): 5e-3 and 1e-2.
 *
 * Usage: test_attention [--small] [--seed N]; exit 77 without a GPU.
 */
#include "attention_check.h"

/* f32 storage: O, LSE, delta 1e-5, gradients 5e-5; bf16 (one rounding of
 * each stored result): O 5e-3, gradients 1e-2, LSE and delta (f32) 1e-5. */
static const att_case simt[2] = {
    {"attention_forward_f32", "attention_backward_dq_f32", "attention_backward_dkv_f32", false,
     1e-5, 1e-5, 5e-5, false},
    {"attention_forward_bf16", "attention_backward_dq_bf16", "attention_backward_dkv_bf16", true,
     5e-3, 1e-5, 1e-2, false},
};

int main(int argc, char **argv)
{
    bool small = check_start(argc, argv, "test_attention");
    static const shp shapes[] = {
        {1, 1, 1, 1, 1, 1.0},    {2, 7, 4, 2, 64, 1.0},    {1, 33, 3, 1, 128, 1.0},
        {2, 130, 6, 2, 64, 1.0}, {1, 45, 4, 4, 80, 1.0},   {1, 257, 12, 2, 128, 1.0},
        {2, 65, 2, 1, 64, 4.0},  {1, 1024, 2, 1, 128, 1.0}, {1, 4096, 2, 1, 64, 1.0},
    };
    for (int bf = 0; bf < 2; bf++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            shp x = shapes[i];
            if (small && x.s > 256)
                x.s = 131;
            attention_case(&simt[bf], x);
        }
    print_table("f32: O, LSE, delta <= 1e-5, dQ dK dV <= 5e-5; bf16: O <= 5e-3, gradients <= "
                "1e-2, LSE and delta (f32) <= 1e-5");
    TEST_DONE();
}
