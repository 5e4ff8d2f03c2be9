/* SPDX-License-Identifier: MIT */
/*
 * Time to build and emit the whole catalog for one target: microseconds per
 * kernel, the median of many runs. Figures only; nothing here passes or
 * fails on time.
 *
 *   bench_emit [TARGET] [RUNS] [KERNEL]    (default sm_90, 501, every kernel)
 */
#include "ptxgen/pgk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    pg_target t = PG_TARGET_DEFAULT;
    if (argc > 1 && pg_target_parse(argv[1], &t) != 0) {
        fprintf(stderr, "bench_emit: unknown target '%s'\n", argv[1]);
        return 2;
    }
    long runs = argc > 2 ? strtol(argv[2], NULL, 10) : 501;
    if (runs < 1 || runs > 1000000) {
        fprintf(stderr, "bench_emit: RUNS must be 1..1000000\n");
        return 2;
    }
    double *sample = malloc(sizeof(double) * (size_t)runs);
    if (!sample)
        return 1;
    printf("build+emit, target %s, median of %ld runs\n", pg_target_name(t), runs);
    printf("%-28s %10s %10s\n", "kernel", "us", "bytes");
    double total = 0;
    size_t count = 0;
    for (size_t i = 0; i < pgk_count(); i++) {
        const pgk_desc *d = pgk_at(i);
        if (!pgk_supports(d, t) || (argc > 3 && strcmp(d->name, argv[3]) != 0))
            continue;
        size_t len = 0;
        for (long r = 0; r < runs; r++) {
            char *ptx = NULL, err[256];
            double t0 = now_us();
            int rc = pgk_emit(d, t, NULL, &ptx, &len, err, sizeof err);
            sample[r] = now_us() - t0;
            if (rc) {
                fprintf(stderr, "bench_emit: %s\n", err);
                free(sample);
                return 1;
            }
            pgk_free(ptx);
        }
        qsort(sample, (size_t)runs, sizeof(double), cmp_double);
        double med = sample[runs / 2];
        printf("%-28s %10.1f %10zu\n", d->name, med, len);
        total += med;
        count++;
    }
    printf("%-28s %10.1f  (%zu kernels, %.1f us per kernel)\n", "catalog", total, count,
           count ? total / (double)count : 0.0);
    free(sample);
    return 0;
}
