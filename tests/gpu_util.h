/* SPDX-License-Identifier: MIT */
/*
 * Shared by the GPU tests and benchmarks of every tests/ directory: opening
 * a context or skipping, a seeded generator, quick mode, and the gradient
 * shapes the clip pipeline is tried on.
 */
#ifndef PTXGEN_GPU_UTIL_H
#define PTXGEN_GPU_UTIL_H

#include "ptxgen/pgrt.h"
#include "ptxgen/pgrt_attention.h"
#include "ptxgen/pgrt_clip.h"
#include "ptxgen/pgrt_gemm.h"
#include "ptxgen/pgrt_kernel.h"
#include "ptxgen/pgrt_prewarm.h"
#include "ptxgen/pgrt_train.h"
#include "ptxgen/ptxgen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* What meson counts as "skipped". */
#define GPU_SKIP 77

/* A context on device 0, or exit 77 (skip) when the machine has no driver
 * or no device; any other failure exits 1. */
static inline pgrt_ctx *gpu_open(void)
{
    pgrt_ctx *ctx = NULL;
    int rc = pgrt_ctx_create(&ctx, NULL);
    if (pgrt_err_unavailable(rc)) {
        fprintf(stderr, "skip: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
        exit(GPU_SKIP);
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

/* Die with the runtime's message: for setup steps a test cannot go on
 * without. */
#define GPU_CHECK(call)                                                        \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_) {                                                             \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,  \
                    pgrt_err_name(rc_), pgrt_last_message());                  \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* Milliseconds a call of fn(arg) takes on the legacy stream: the best of
 * 3 runs of iters calls, after 3 calls of warm-up. For benchmarks. */
typedef int (*gpu_call_fn)(void *arg);
static inline double gpu_time_ms(pgrt_ctx *ctx, gpu_call_fn fn, void *arg, int iters)
{
    pgrt_event *e0, *e1;
    GPU_CHECK(pgrt_event_create(ctx, &e0));
    GPU_CHECK(pgrt_event_create(ctx, &e1));
    for (int i = 0; i < 3; i++)
        GPU_CHECK(fn(arg));
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        GPU_CHECK(pgrt_event_record(e0, NULL));
        for (int i = 0; i < iters; i++)
            GPU_CHECK(fn(arg));
        GPU_CHECK(pgrt_event_record(e1, NULL));
        GPU_CHECK(pgrt_event_sync(e1));
        float ms;
        GPU_CHECK(pgrt_event_elapsed_ms(e0, e1, &ms));
        if (ms / iters < best)
            best = ms / iters;
    }
    pgrt_event_destroy(&e0);
    pgrt_event_destroy(&e1);
    return best;
}

/* splitmix64: small, seedable, good enough for test data. */
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

/* The seed: $PGRT_TEST_SEED, else the clock; printed so a failure can be
 * replayed. */
static inline uint64_t test_seed(const char *what)
{
    const char *env = getenv("PGRT_TEST_SEED");
    uint64_t seed = env && *env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
    fprintf(stderr, "%s: seed=%llu (set PGRT_TEST_SEED to replay)\n", what,
            (unsigned long long)seed);
    return seed;
}

/* Gradients of different magnitudes per buffer, as layers have. */
static inline void fill_grads(rng *r, float *g, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        g[i] = rng_unit(r) * scale;
}

static inline double rel_err(double got, double want)
{
    if (got == want)
        return 0.0;
    double d = fabs(want);
    return fabs(got - want) / (d > 0 ? d : 1.0);
}

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Quick mode (under compute-sanitizer): skip the 350M-parameter cases. */
static inline bool gpu_quick(void)
{
    const char *q = getenv("PGRT_GPU_QUICK");
    return q && *q && strcmp(q, "0") != 0;
}

/* The seed's per-layer LoRA gradient buffers (rank 16, hidden 1536, a
 * 256-wide v projection) and the two norm weights. */
#define LORA_NBUF 6
static const size_t lora_sizes[LORA_NBUF] = {
    16 * 1536, /* lora_a_q */
    1536 * 16, /* lora_b_q */
    16 * 1536, /* lora_a_v */
    256 * 16,  /* lora_b_v */
    1536,      /* input_layernorm */
    1536,      /* post_attention_layernorm */
};

/* A 350M-parameter decoder's gradients as 216 buffers: 24 layers of
 * q, k, v, o (1024 x 1024), gate, up, down (1024 x 3392) and two RMSNorm
 * weights (1024). 350,797,824 parameters in all. */
#define M350_LAYERS 24
#define M350_NBUF (M350_LAYERS * 9)
static inline void m350_sizes(size_t *sizes)
{
    for (int l = 0; l < M350_LAYERS; l++) {
        size_t *s = sizes + 9 * l;
        s[0] = s[1] = s[2] = s[3] = (size_t)1024 * 1024;
        s[4] = s[5] = s[6] = (size_t)1024 * 3392;
        s[7] = s[8] = 1024;
    }
}

/* The sm_90a programs' guard: when ctx's device is not compute capability
 * 9.0 (no wgmma, no TMA), say which kernel needs it, destroy ctx and exit
 * 77 (skip). */
static inline void gpu_require_sm90a(pgrt_ctx **ctx, const char *program, const char *kernel)
{
    pgrt_device_info info;
    if (pgrt_ctx_device_info(*ctx, &info) == 0 && info.arch_target == PG_SM_90A)
        return;
    fprintf(stderr, "%s: skip: %s needs a compute capability 9.0 device (sm_90a)\n", program,
            kernel);
    pgrt_ctx_destroy(ctx);
    exit(GPU_SKIP);
}

#endif /* PTXGEN_GPU_UTIL_H */
