/* SPDX-License-Identifier: MIT */
/*
 * Validation time against kernel size: straight-line kernels of 1k .. 128k
 * predicated branches in three shapes, milliseconds for pg_validate alone
 * and for building the kernel and a whole pg_kernel_emit (which validates
 * again), best of a few runs, in process CPU time (steadier than wall time
 * on a shared machine). Time per branch should stay flat as the size
 * doubles. Figures only; nothing here passes or fails on time.
 *
 *   plain   @p bra over one add, p from %tid.x: a small divergent region each
 *   bar64   the same with a bar.sync after every 64 branches (accepted: each
 *           region joins before the barrier)
 *   regs    three fresh registers a branch, one written only under the
 *           branch and read after the join
 *   warp    @q bra over one add and a counted bar.sync 1, 64, q from the
 *           warp index %tid.x >> 5 (accepted: a split between warps); every
 *           64th is preceded by a %tid.x branch that joins first: both
 *           levels of divergence in one kernel
 *
 *   bench_validate [MAX_BRANCHES] [RUNS]     (default 131072, 3)
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef enum shape { PLAIN, BAR64, REGS, WARP, NSHAPE } shape;
static const char *const shape_name[NSHAPE] = {"plain", "bar64", "regs", "warp"};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static pg_kernel *build(shape s, uint32_t n)
{
    pg_kernel *k = NULL;
    if (pg_kernel_create(&k, "bench", PG_SM_90))
        return NULL;
    pg_reg data = pg_param_load(k, pg_param_add(k, PG_U64, "data"));
    pg_reg tid = pg_sreg_read(k, PG_SREG_TID_X);
    pg_reg acc = pg_reg_new(k, PG_U32);
    pg_mov(k, PG_U32, acc, pg_u32(0));
    pg_reg warp = s == WARP ? pgv_shr(k, PG_U32, tid, pg_u32(5)) : pg_none();
    for (uint32_t i = 0; i < n; i++) {
        pg_reg p = pg_reg_new(k, PG_PRED);
        pg_label skip = pg_label_new(k, "skip");
        pg_setp(k, PG_CMP_LT, PG_U32, p, tid, pg_u32(i));
        if (s == REGS) {
            pg_reg x = pg_reg_new(k, PG_U32), y = pg_reg_new(k, PG_U32);
            pg_mov(k, PG_U32, x, pg_u32(i));
            pg_mov(k, PG_U32, y, x);
            pg_bra_if(k, p, false, skip);
            pg_add(k, PG_U32, y, x, acc);
            pg_label_bind(k, skip);
            pg_add(k, PG_U32, acc, acc, y);
        } else if (s == WARP) {
            /* the counted barrier sits under the warp-level branch only:
             * the lane-level one around every 64th joins before it */
            if (i % 64 == 0) {
                pg_label lane_skip = pg_label_new(k, "lane");
                pg_bra_if(k, p, false, lane_skip);
                pg_add(k, PG_U32, acc, acc, pg_u32(2));
                pg_label_bind(k, lane_skip);
            }
            pg_reg q = pgv_setp(k, PG_CMP_LT, PG_U32, warp, pg_u32(i));
            pg_bra_if(k, q, false, skip);
            pg_add(k, PG_U32, acc, acc, pg_u32(1));
            pg_bar_sync_count(k, 1, 64);
            pg_label_bind(k, skip);
        } else {
            pg_bra_if(k, p, false, skip);
            pg_add(k, PG_U32, acc, acc, pg_u32(1));
            pg_label_bind(k, skip);
            if (s == BAR64 && i % 64 == 63)
                pg_bar_sync(k, 0);
        }
    }
    pg_st(k, PG_SPACE_GLOBAL, PG_U32, data, 0, acc);
    pg_ret(k);
    return k;
}

/* Best of `runs`: validation alone, then build + validate + emit. */
static int measure(shape s, uint32_t n, int runs, double *val_ms, double *emit_ms)
{
    *val_ms = *emit_ms = 1e30;
    for (int r = 0; r < runs; r++) {
        pg_kernel *k = build(s, n);
        if (!k || pg_kernel_error(k)) {
            fprintf(stderr, "bench_validate: building: %s\n", k ? pg_kernel_message(k) : "no kernel");
            pg_kernel_destroy(&k);
            return 1;
        }
        double t0 = now_ms();
        int rc = pg_validate(k);
        double t1 = now_ms();
        pg_kernel_destroy(&k);
        if (rc) {
            fprintf(stderr, "bench_validate: %s x%u rejected\n", shape_name[s], n);
            return 1;
        }
        if (t1 - t0 < *val_ms)
            *val_ms = t1 - t0;
        t0 = now_ms();
        k = build(s, n);
        const char *ptx = NULL;
        rc = k ? pg_kernel_emit(k, &ptx, NULL) : PG_ENOMEM;
        t1 = now_ms();
        if (rc) {
            fprintf(stderr, "bench_validate: %s x%u: %s\n", shape_name[s], n,
                    k ? pg_kernel_message(k) : "no kernel");
            pg_kernel_destroy(&k);
            return 1;
        }
        pg_kernel_destroy(&k);
        if (t1 - t0 < *emit_ms)
            *emit_ms = t1 - t0;
    }
    return 0;
}

int main(int argc, char **argv)
{
    long max = argc > 1 ? strtol(argv[1], NULL, 10) : 131072;
    long runs = argc > 2 ? strtol(argv[2], NULL, 10) : 3;
    if (max < 1024 || max > (1L << 24) || runs < 1 || runs > 1000) {
        fprintf(stderr, "bench_validate: MAX_BRANCHES must be 1024..16777216, RUNS 1..1000\n");
        return 2;
    }
    printf("validate / build+validate+emit in CPU ms, best of %ld; ns/br: validate ns per branch\n",
           runs);
    printf("%8s", "branches");
    for (int s = 0; s < NSHAPE; s++)
        printf("  %9s %9s %6s", shape_name[s], "+emit", "ns/br");
    printf("\n");
    for (long n = 1024; n <= max; n *= 2) {
        printf("%8ld", n);
        for (int s = 0; s < NSHAPE; s++) {
            double v, e;
            if (measure((shape)s, (uint32_t)n, (int)runs, &v, &e))
                return 1;
            printf("  %9.2f %9.2f %6.0f", v, e, v * 1e6 / (double)n);
        }
        printf("\n");
        fflush(stdout);
    }
    return 0;
}
