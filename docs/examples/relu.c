/* SPDX-License-Identifier: MIT */
/* ReLU, forward: y = max(x, 0), one thread an element. */
#include "kernels.h"

static int build_relu_fwd(pg_kernel *k, const pgk_desc *d, const pg_param *p,
                          const uint32_t *knobs)
{
    (void)d;
    (void)knobs;
    pg_reg input = pg_param_load(k, p[0]);
    pg_reg output = pg_param_load(k, p[1]);
    pg_reg n = pg_param_load(k, p[2]);
    pg_label out = pg_label_new(k, "exit");
    pg_reg gid = pgk_guarded_gid(k, n, out); /* threads past n leave */

    pg_reg off = pgk_f32_offset(k, gid);
    pg_reg y = pgv_max(k, PG_F32, pgk_ld_f32_at(k, input, off), pg_f32(0.0f));
    pgk_st_f32_at(k, output, off, y);
    return pgk_finish(k, out);
}

static const pgk_param relu_params[] = {
    {"input", PG_U64, true},
    {"output", PG_U64, true},
    {"n", PG_U32, false},
};

const pgk_desc pgk_desc_relu_forward = {
    .name = "relu_forward",
    .summary = "output = max(input, 0)",
    PGK_PARAMS(relu_params),
    PGK_KNOBS(pgk_knob_n), /* n, 1 .. 2^32 - 1 */
    .min_target = PG_SM_70,
    .threads = PGK_THREADS,
    .build = build_relu_fwd,
    .launch = pgk_launch_elementwise,
};
