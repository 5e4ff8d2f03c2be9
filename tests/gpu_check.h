/* SPDX-License-Identifier: MIT */
/*
 * The harness of the kernel-against-reference GPU tests (tests/kernels):
 * normal random data, device buffers that die on error,
 * launches that fail the test instead, and a table of result rows, one per
 * kernel and shape, each folded from norm-wise and elementwise errors,
 * non-finite outputs and a bitwise repeat.
 *
 * The including file defines REL_TOL, the norm-wise tolerance every row is
 * held to, first: it is the test's contract, so it stays in the test.
 * One context and one generator per test, hence the file-scope state.
 */
#ifndef PTXGEN_GPU_CHECK_H
#define PTXGEN_GPU_CHECK_H

#ifndef REL_TOL
#error "define REL_TOL (the norm-wise tolerance of every row) before including gpu_check.h"
#endif

#include "gpu_util.h"
#include "test.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Written over every output before a launch: an element the kernel skips
 * stays a NaN and shows. */
#define POISON 0xFFC0DEADu /* a quiet NaN */

static pgrt_ctx *check_ctx;
static rng check_rng;

/* ---------------------------------------------------------------- start */

/* The start of main: --small (or PGTEST_SMALL set and not 0) for the
 * compute-sanitizer shapes, --seed N to replay a run (else test_seed's),
 * then the context (exit 77 without a driver or a device). The seed goes to
 * stdout, where tests/gpu-check.sh's logs keep it. Returns whether small
 * shapes were asked for; exits 2 on an unknown argument. */
static inline bool check_start(int argc, char **argv, const char *name)
{
    const char *env = getenv("PGTEST_SMALL");
    bool small = env && env[0] && strcmp(env, "0") != 0;
    bool have_seed = false;
    uint64_t seed = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--small") == 0)
            small = true;
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 0);
            have_seed = true;
        } else {
            fprintf(stderr, "usage: %s [--small] [--seed N]\n", argv[0]);
            exit(2);
        }
    }
    check_ctx = gpu_open();
    if (!have_seed)
        seed = test_seed(name);
    check_rng.s = seed;
    printf("seed: %llu%s (rerun with --seed %llu)\n", (unsigned long long)seed,
           small ? ", small shapes" : "", (unsigned long long)seed);
    return small;
}

/* The element counts of the element-wise rows: around a 256-thread block
 * and a 1024-element chunk, and past 2^20; --small keeps the last under
 * compute-sanitizer's patience. */
#define CHECK_NSIZES 7
static inline const uint32_t *check_sizes(bool small)
{
    static const uint32_t full[CHECK_NSIZES] = {1, 255, 256, 257, 1023, 1025, (1u << 20) + 3};
    static const uint32_t smaller[CHECK_NSIZES] = {1, 255, 256, 257, 1023, 1025, 65539};
    return small ? smaller : full;
}

/* ---------------------------------------------------------------- random data */

static inline uint64_t next_u64(void) { return rng_next(&check_rng); }

/* Uniform in (0, 1): never 0, so log() below stays finite. */
static inline double uniform(void) { return ((double)(next_u64() >> 11) + 0.5) * 0x1p-53; }

static inline double normal(void)
{
    return sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform());
}

static inline void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    return p;
}

static inline float *fill_normal(size_t n, double scale, double offset)
{
    float *p = xmalloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(offset + scale * normal());
    return p;
}

/* ---------------------------------------------------------------- device helpers */

/* For setup steps the test cannot go on without. */
static inline void die_rt(const char *what, int rc)
{
    fprintf(stderr, "%s: %s: %s\n", what, pgrt_err_name(rc), pgrt_last_message());
    exit(1);
}

static inline pgrt_buf *dev_alloc(pg_type t, size_t n)
{
    pgrt_buf *b = NULL;
    int rc = pgrt_buf_alloc(check_ctx, t, n, &b);
    if (rc)
        die_rt("pgrt_buf_alloc", rc);
    return b;
}

static inline pgrt_buf *dev_upload(const float *src, size_t n)
{
    pgrt_buf *b = dev_alloc(PG_F32, n);
    int rc = pgrt_buf_upload(b, 0, src, n);
    if (rc)
        die_rt("pgrt_buf_upload", rc);
    return b;
}

static inline void dev_download(const pgrt_buf *b, void *dst, size_t n)
{
    int rc = pgrt_buf_download(b, 0, dst, n);
    if (rc)
        die_rt("pgrt_buf_download", rc);
}

static inline void poison(pgrt_buf *b)
{
    int rc = pgrt_buf_fill32(b, POISON);
    if (rc)
        die_rt("pgrt_buf_fill32", rc);
}

/* Knobs by name, in any order: pairs of (name, uint32_t value), then NULL. */
#if defined(__GNUC__)
__attribute__((sentinel))
#endif
static inline pgk_knobs knobs_of(const char *kernel, ...)
{
    const pgk_desc *d = pgk_find(kernel);
    if (!d) {
        fprintf(stderr, "no kernel %s in the catalog\n", kernel);
        exit(1);
    }
    pgk_knobs kn;
    pgk_knobs_default(d, &kn);
    va_list ap;
    va_start(ap, kernel);
    const char *name;
    while ((name = va_arg(ap, const char *))) {
        uint32_t v = va_arg(ap, uint32_t);
        int i = pgk_knob_index(d, name);
        if (i < 0) {
            fprintf(stderr, "%s has no knob %s\n", kernel, name);
            exit(1);
        }
        kn.v[i] = v;
    }
    va_end(ap);
    return kn;
}

/* Whether the context's target lacks a catalog kernel: under a target
 * override below sm_80 (PTXGEN_TARGET=sm_75 on an H100) the bf16 kernels
 * are not there. Their rows are skipped, not failed; said once a kernel. */
static inline bool target_lacks(const char *kernel)
{
    const pgk_desc *d = pgk_find(kernel);
    pg_target t = pgrt_ctx_target(check_ctx);
    if (!d || pgk_supports(d, t))
        return false;
    static const pgk_desc *said[64];
    for (size_t i = 0; i < 64; i++) {
        if (said[i] == d)
            break;
        if (!said[i]) {
            said[i] = d;
            printf("skip: %s needs %s; the target is %s\n", kernel, pg_target_name(d->min_target),
                   pg_target_name(t));
            break;
        }
    }
    return true;
}

/* A failed launch is a failed check, not the end of the test: the row it
 * belongs to shows it and the other rows still run. A kernel the target
 * lacks is no failure: its row is skipped. */
static inline bool launch(const char *kernel, const pgk_knobs *kn, const pgrt_arg *args,
                          size_t nargs)
{
    if (target_lacks(kernel))
        return false;
    int rc = pgrt_launch(check_ctx, NULL, kernel, kn, args, nargs);
    if (!rc)
        rc = pgrt_ctx_sync(check_ctx);
    if (rc) {
        TEST_FAIL_("%s: %s: %s", kernel, pgrt_err_name(rc), pgrt_last_message());
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------- comparison and the table */

typedef struct row {
    char kernel[32];
    char shape[48];
    double rel;      /* |out - ref| / |ref| (2-norms); |out - ref| when ref is 0 */
    double max_abs;  /* max |out_i - ref_i| */
    double max_rel;  /* max |out_i - ref_i| / max(|ref_i|, 1e-6 max|ref|) */
    size_t bad;      /* non-finite outputs (poison left) or bit mismatches */
    bool repeat;     /* second run bitwise identical */
    bool skipped;    /* the kernel needs a newer target than the context's */
    double elem_tol; /* when > 0, max_rel must not pass it */
    bool pass;
} row;

static row table[512];
static size_t nrows;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static inline row *add_row(const char *kernel, const char *fmt, ...)
{
    /* past the end, the last row is reused: its checks still count */
    row *r = &table[nrows < 511 ? nrows++ : 511];
    memset(r, 0, sizeof *r);
    snprintf(r->kernel, sizeof r->kernel, "%s", kernel);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->shape, sizeof r->shape, fmt, ap);
    va_end(ap);
    r->repeat = true;
    r->skipped = target_lacks(r->kernel);
    return r;
}

/* Fold out vs ref (n elements) into r: norm-wise and elementwise errors,
 * non-finite outputs. Called more than once, a row keeps the worst. */
static inline void compare(row *r, const float *out, const double *ref, size_t n)
{
    double num = 0, den = 0, refmax = 0;
    for (size_t i = 0; i < n; i++)
        refmax = fmax(refmax, fabs(ref[i]));
    double floor_ = refmax * 1e-6;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(out[i])) {
            r->bad++;
            continue;
        }
        double e = (double)out[i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
        r->max_abs = fmax(r->max_abs, fabs(e));
        double m = fabs(ref[i]) > floor_ ? fabs(ref[i]) : floor_;
        if (m > 0)
            r->max_rel = fmax(r->max_rel, fabs(e) / m);
        else if (e != 0)
            r->max_rel = INFINITY;
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    r->rel = fmax(r->rel, rel);
}

static inline void same_bits(row *r, const void *a, const void *b, size_t bytes)
{
    if (memcmp(a, b, bytes) != 0)
        r->repeat = false;
}

static inline void finish(row *r)
{
    if (r->skipped) {
        r->pass = true;
        return;
    }
    r->pass = r->bad == 0 && r->repeat && r->rel <= REL_TOL &&
              (r->elem_tol <= 0 || r->max_rel <= r->elem_tol);
    if (!r->pass)
        TEST_FAIL_("%s %s: rel %.3g (tol %.0e), max_rel %.3g (tol %.0e), %zu bad, repeat %s",
                   r->kernel, r->shape, r->rel, REL_TOL, r->max_rel, r->elem_tol, r->bad,
                   r->repeat ? "identical" : "DIFFERENT");
    test_checks_++;
}

/* One f32 output checked whole: kernel launched twice on args, out poisoned
 * before each launch and its n floats read back; the first against ref,
 * the two for the same bits; then the row is finished. A failed launch
 * (already a failed check) marks the row bad; a kernel the target lacks
 * leaves it skipped. */
static inline void check_twice(row *r, const char *kernel, const pgk_knobs *kn,
                               const pgrt_arg *args, size_t nargs, pgrt_buf *out,
                               const double *ref, size_t n)
{
    float *got[2] = {xmalloc(n * sizeof(float)), xmalloc(n * sizeof(float))};
    bool ran = true;
    for (int rep = 0; rep < 2 && ran; rep++) {
        poison(out);
        ran = launch(kernel, kn, args, nargs);
        if (ran)
            dev_download(out, got[rep], n);
    }
    if (ran) {
        compare(r, got[0], ref, n);
        same_bits(r, got[0], got[1], n * sizeof(float));
    } else if (!r->skipped) {
        r->bad++;
    }
    finish(r);
    free(got[0]);
    free(got[1]);
}

/* The rows, one a line, then what the columns mean and the test's own notes. */
static inline void print_table(const char *notes)
{
    printf("\n%-28s %-34s %10s %10s %5s %7s %s\n", "kernel", "shape", "rel_l2", "max_rel", "bad",
           "repeat", "");
    for (size_t i = 0; i < nrows; i++) {
        const row *t = &table[i];
        printf("%-28s %-34s %10.2e %10.2e %5zu %7s %s\n", t->kernel, t->shape, t->rel, t->max_rel,
               t->bad, t->repeat ? "same" : "DIFF",
               t->skipped ? "skip (target)" : t->pass ? "ok" : "FAIL");
    }
    printf("rel_l2  = |out - ref| / |ref| (2-norms) against double\n"
           "max_rel = max |out_i - ref_i| / max(|ref_i|, 1e-6 max|ref|)\n"
           "bad     = elements left unwritten (NaN poison), non-finite, or wrong where exact\n"
           "%s\n",
           notes);
}

#endif /* PTXGEN_GPU_CHECK_H */
