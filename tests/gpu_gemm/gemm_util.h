/* SPDX-License-Identifier: MIT */
/*
 * Shared by the GEMM test and benchmark: opening a context or skipping, a
 * seeded generator, f16 conversion on the host, one launch of a GEMM
 * kernel by name, and a parallel for over host threads (the
 * double-precision references of the big shapes are the slow part of the
 * test).
 */
#ifndef PTXGEN_GEMM_UTIL_H
#define PTXGEN_GEMM_UTIL_H

#include "pgrt.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A context on device 0, or exit 77 (skip) when the machine has no driver
 * or no device; any other failure exits 1. */
static inline pgrt_ctx *gemm_gpu_open(void)
{
    pgrt_ctx *ctx = NULL;
    int rc = pgrt_ctx_create(&ctx, NULL);
    if (pgrt_err_unavailable(rc)) {
        fprintf(stderr, "skip: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        exit(77); /* what meson counts as skipped */
    }
    if (rc) {
        fprintf(stderr, "pgrt_ctx_create: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        exit(1);
    }
    pgrt_device_info info;
    pgrt_ctx_device_info(ctx, &info);
    fprintf(stderr, "device: %s, compute capability %d.%d, target %s, driver %d.%d, %d SMs\n",
            info.name, info.cc_major, info.cc_minor, pg_target_name(info.target),
            info.driver_version / 1000, (info.driver_version % 1000) / 10, info.sm_count);
    return ctx;
}

/* Die with the runtime's message: for steps a test cannot go on without. */
#define GPU_CHECK(call)                                                        \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_) {                                                             \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,  \
                    pgrt_err_name(rc_), pgrt_last_message());                  \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* splitmix64. */
typedef struct rng {
    uint64_t s;
} rng;

static inline uint64_t rng_next(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static inline float rng_unit(rng *r)
{
    return (float)((double)(rng_next(r) >> 40) * (2.0 / 16777216.0) - 1.0);
}

/* $PGRT_TEST_SEED, else the clock; printed so that a failure can be
 * replayed. */
static inline uint64_t gemm_seed(const char *what)
{
    const char *env = getenv("PGRT_TEST_SEED");
    uint64_t seed = env && *env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
    fprintf(stderr, "%s: seed=%llu (set PGRT_TEST_SEED to replay)\n", what,
            (unsigned long long)seed);
    return seed;
}

/* $PGRT_GPU_QUICK set (and not 0): small shapes, for compute-sanitizer. */
static inline bool gemm_quick(void)
{
    const char *q = getenv("PGRT_GPU_QUICK");
    return q && *q && strcmp(q, "0") != 0;
}

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* f32 -> f16 bits, round to nearest even (the conversion cast_f32_to_f16
 * and cuBLAS's inputs use). */
static inline uint16_t f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf, nan */
        return (uint16_t)(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (ax >= 0x477ff000u) /* rounds past 65504 */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: a subnormal (or zero) in f16 */
        float v;
        memcpy(&v, &ax, 4);
        return (uint16_t)(sign | (uint32_t)lrintf(v * 16777216.0f)); /* exact scaling by 2^24 */
    }
    uint32_t h = ((ax >> 23) - 112u) << 10 | (ax & 0x7fffffu) >> 13;
    uint32_t rest = ax & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

static inline float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0) {
        float v = (float)m * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (e == 31)
        x = sign | 0x7f800000u | (m << 13);
    else
        x = sign | ((e + 112u) << 23) | (m << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* Knobs for a GEMM kernel: m, n, k and (when >= 0 and the kernel has it)
 * the variant. */
static inline pgk_knobs gemm_knobs(const pgk_desc *d, uint32_t m, uint32_t n, uint32_t k,
                                   int variant)
{
    pgk_knobs kn;
    pgk_knobs_default(d, &kn);
    kn.v[pgk_knob_index(d, "m")] = m;
    kn.v[pgk_knob_index(d, "n")] = n;
    kn.v[pgk_knob_index(d, "k")] = k;
    int vi = pgk_knob_index(d, "variant");
    if (variant >= 0 && vi >= 0)
        kn.v[vi] = (uint32_t)variant;
    return kn;
}

/* One launch of `kernel` (b0, b1, out, m, n, k) on stream s. */
static inline int gemm_launch(pgrt_ctx *ctx, pgrt_stream *s, const char *kernel, int variant,
                              uint32_t m, uint32_t n, uint32_t k, const pgrt_buf *b0,
                              const pgrt_buf *b1, const pgrt_buf *out)
{
    pgk_knobs kn = gemm_knobs(pgk_find(kernel), m, n, k, variant);
    pgrt_arg a[6] = {pgrt_arg_buf(b0), pgrt_arg_buf(b1), pgrt_arg_buf(out),
                     pgrt_arg_u32(m),  pgrt_arg_u32(n),  pgrt_arg_u32(k)};
    return pgrt_launch(ctx, s, kernel, &kn, a, 6);
}

/* body(i, arg) for i in [0, n), split over the machine's cores. */
typedef struct pfor_job {
    void (*body)(size_t i, void *arg);
    void *arg;
    size_t lo, hi;
} pfor_job;

static void *pfor_run_(void *p)
{
    pfor_job *j = p;
    for (size_t i = j->lo; i < j->hi; i++)
        j->body(i, j->arg);
    return NULL;
}

static inline void parallel_for(size_t n, void (*body)(size_t i, void *arg), void *arg)
{
    enum { MAXT = 64 };
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    size_t nt = cores < 1 ? 1 : cores > MAXT ? MAXT : (size_t)cores;
    if (nt > n)
        nt = n ? n : 1;
    pthread_t th[MAXT];
    pfor_job job[MAXT];
    size_t started = 0;
    for (size_t t = 0; t < nt; t++) {
        job[t] = (pfor_job){body, arg, n * t / nt, n * (t + 1) / nt};
        if (t > 0 && pthread_create(&th[t], NULL, pfor_run_, &job[t]) == 0)
            started |= (size_t)1 << t;
        else if (t > 0)
            pfor_run_(&job[t]);
    }
    pfor_run_(&job[0]);
    for (size_t t = 1; t < nt; t++)
        if (started & ((size_t)1 << t))
            pthread_join(th[t], NULL);
}

#endif /* PTXGEN_GEMM_UTIL_H */
