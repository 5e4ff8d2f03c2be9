/* SPDX-License-Identifier: MIT */
/*
 * Shared by the GEMM test and benchmark, on top of gpu_util.h (context,
 * generator, seed, quick mode): f16 conversion on the host, one launch of a
 * GEMM kernel by name, and a parallel for over host threads (the
 * double-precision references of the big shapes are the slow part of the
 * test).
 */
#ifndef PTXGEN_GEMM_UTIL_H
#define PTXGEN_GEMM_UTIL_H

#include "gpu_util.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

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

/* f32 -> bf16 bits, round to nearest even (NaN stays a quiet NaN). */
static inline uint16_t f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static inline float bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
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

/* gemm_thin's knobs for a layout, input and output types and a shape, as
 * its pick hook sets the baked ones (form, j) for that shape. */
static inline pgk_knobs gemm_thin_knobs(pgk_gemm_layout layout, pg_type it, pg_type ot,
                                        uint32_t m, uint32_t n, uint32_t k)
{
    const pgk_desc *d = pgk_find("gemm_thin");
    pgk_knobs kn = gemm_knobs(d, m, n, k, -1);
    kn.v[pgk_knob_index(d, "layout")] = layout;
    kn.v[pgk_knob_index(d, "in")] = it == PG_F32 ? 2 : it == PG_BF16 ? 1 : 0;
    kn.v[pgk_knob_index(d, "out")] = ot == PG_F32 ? 0 : ot == PG_F16 ? 1 : 2;
    pgk_pick(d, &kn);
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
