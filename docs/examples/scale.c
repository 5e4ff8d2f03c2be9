/* SPDX-License-Identifier: MIT */
/*
 * A kernel in a few lines: x[i] *= s for every i < n, built with the
 * public builder API (ptxgen.h) and printed as PTX for sm_90. The README
 * and docs/builder.md show this file, and the docs test checks both that
 * they show it as it is and that the PTX docs/builder.md prints is what
 * this program prints.
 */
#include <ptxgen/ptxgen.h>

#include <stdio.h>

/* The kernel: parameters first (every one before the first instruction),
 * then the code. Errors are sticky: one check at emit covers every call. */
static void build_scale(pg_kernel *k)
{
    pg_param px = pg_param_add(k, PG_U64, "x");
    pg_param pn = pg_param_add(k, PG_U32, "n");
    pg_param ps = pg_param_add(k, PG_F32, "s");
    pg_reg x = pg_param_load(k, px);
    pg_reg n = pg_param_load(k, pn);
    pg_reg s = pg_param_load(k, ps);
    pg_label done = pg_label_new(k, "done");
    pg_reg i = pg_global_tid_x(k);
    pg_bounds_guard(k, i, n, done);              /* threads past n leave */
    pg_reg off = pgv_mul_wide(k, PG_U32, i, pg_u32(4)); /* byte offset, 64-bit */
    pg_reg at = pgv_add(k, PG_U64, x, off);
    pg_reg v = pgv_ld(k, PG_SPACE_GLOBAL, PG_F32, at, 0);
    pg_st(k, PG_SPACE_GLOBAL, PG_F32, at, 0, pgv_mul(k, PG_F32, v, s));
    pg_label_bind(k, done);
    pg_ret(k);
}

int main(void)
{
    pg_kernel *k = NULL;
    if (pg_kernel_create(&k, "scale", PG_SM_90) != PG_OK)
        return 1;
    build_scale(k);
    const char *ptx = NULL;
    if (pg_kernel_emit(k, &ptx, NULL) != PG_OK) {
        fprintf(stderr, "%s\n", pg_kernel_message(k));
        pg_kernel_destroy(&k);
        return 1;
    }
    fputs(ptx, stdout);
    pg_kernel_destroy(&k);
    return 0;
}
