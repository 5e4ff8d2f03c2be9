/* SPDX-License-Identifier: MIT */
/*
 * Contexts: the ptxgen target a compute capability runs, and a device's
 * context made (the driver opened, the device queried, a target override
 * applied, its primary context retained) and torn down with all it owns:
 * the module cache, GEMM plans, cuBLAS and the disk cache. This file sits
 * above those rooms; they reach the driver through rt_ctx_bind (driver.c).
 */
#include "rt_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int pgrt_target_for_cc(int major, int minor, pg_target *out)
{
    RT_NONNULL(__func__, out, "out");
    if (major < 0 || minor < 0 || minor > 9)
        return rt_fail(PGRT_EINVAL, "pgrt_target_for_cc: compute capability %d.%d is not a "
                       "capability (major >= 0, minor 0 to 9)", major, minor);
    /* No target reaches sm_1000: a larger major has none, and major * 10
     * would overflow int on the way. */
    if (major > 99)
        return rt_fail(PGRT_ETARGET, "pgrt_target_for_cc: no ptxgen target serves compute "
                       "capability %d.%d", major, minor);
    unsigned want = (unsigned)(major * 10 + minor);
    int best = -1;
    unsigned best_sm = 0;
    for (int t = 0; t < PG_TARGET_COUNT; t++) {
        /* "a" targets run on exactly one architecture and lose forward
         * compatibility; the runtime never picks them. */
        if (pg_target_is_arch_specific((pg_target)t))
            continue;
        unsigned sm = pg_target_sm((pg_target)t);
        if (sm == want) {
            *out = (pg_target)t;
            return 0;
        }
        /* Same major, older minor: PTX JIT-compiles forward within the
         * family (an 8.8 part runs sm_87 PTX). */
        if (sm / 10 == (unsigned)major && sm < want && sm > best_sm) {
            best = t;
            best_sm = sm;
        }
    }
    if (best < 0)
        return rt_fail(PGRT_ETARGET, "pgrt_target_for_cc: no ptxgen target serves compute "
                       "capability %d.%d", major, minor);
    *out = (pg_target)best;
    return 0;
}

/* Fill ctx->info from the device. */
static int query_device(pgrt_ctx *ctx)
{
    rt_driver *d = &ctx->drv;
    pgrt_device_info *info = &ctx->info;
    int err;
    if ((err = RT_CU(d, DeviceGetName, (info->name, (int)sizeof info->name - 1, ctx->dev))))
        return err;
    info->name[sizeof info->name - 1] = '\0';
    if ((err = RT_CU(d, DeviceGetAttribute,
                     (&info->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ctx->dev))) ||
        (err = RT_CU(d, DeviceGetAttribute,
                     (&info->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ctx->dev))) ||
        (err = RT_CU(d, DeviceGetAttribute,
                     (&info->sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ctx->dev))) ||
        (err = RT_CU(d, DeviceTotalMem, (&info->total_bytes, ctx->dev))))
        return err;
    info->driver_version = d->version;
    /* Blackwell consumer parts: loading through cuModuleLoadDataEx with JIT
     * options left the context unusable for the seed, so those devices load
     * with plain cuModuleLoadData and give up the JIT log. */
    info->direct_load = info->cc_major >= 12;
    if (pgrt_target_for_cc(info->cc_major, info->cc_minor, &info->target) != 0)
        return rt_fail(PGRT_ETARGET, "device %d (%s) has compute capability %d.%d, which no ptxgen "
                       "target serves", ctx->ordinal, info->name,
                       info->cc_major, info->cc_minor);
    info->arch_target = info->target;
    for (int t = 0; t < PG_TARGET_COUNT; t++)
        if (pg_target_is_arch_specific((pg_target)t) &&
            pg_target_sm((pg_target)t) == (unsigned)(info->cc_major * 10 + info->cc_minor))
            info->arch_target = (pg_target)t;
    /* A driver that does not answer (before CUDA 9.0) has no opt-in
     * either: the default limit stands. */
    int optin = 0;
    if (d->DeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                              ctx->dev) != CUDA_SUCCESS ||
        optin < (int)RT_DEFAULT_SHARED_LIMIT)
        optin = (int)RT_DEFAULT_SHARED_LIMIT;
    info->shared_optin_bytes = optin;
    info->native_target = info->target;
    info->native_arch_target = info->arch_target;
    info->target_override = false;
    return 0;
}

/* Build for an older target than the device's: want from the caller, else
 * $PTXGEN_TARGET. The device must run the target's PTX: a plain target of
 * the device's capability or below (PTX JIT-compiles forward, across
 * majors too), or the device's own "a" target. target and arch_target both
 * become the chosen one, so the catalog takes that target's code path
 * (sm_90 on a 9.0 device: mma.sync, not wgmma). */
static int override_target(pgrt_ctx *ctx, const char *want)
{
    const char *from = "pgrt_ctx_params.target";
    if (!want) {
        want = getenv("PTXGEN_TARGET");
        from = "PTXGEN_TARGET";
        if (!want || !*want)
            return 0;
    }
    pgrt_device_info *info = &ctx->info;
    unsigned cc = (unsigned)(info->cc_major * 10 + info->cc_minor);
    pg_target t;
    if (pg_target_parse(want, &t) != 0)
        return rt_fail(PGRT_ETARGET, "%s=%.32s%s is not a ptxgen target (ptxgen-dump --targets "
                       "lists them)", from, want, strlen(want) > 32 ? "..." : "");
    bool runs = pg_target_is_arch_specific(t) ? t == info->native_arch_target
                                              : pg_target_sm(t) <= cc;
    if (!runs)
        return rt_fail(PGRT_ETARGET, "%s=%s: device %d (%s, compute capability %d.%d) cannot "
                       "run %s PTX; a target override must be %s or older%s%s", from, want,
                       ctx->ordinal, info->name, info->cc_major, info->cc_minor, want,
                       pg_target_name(info->native_target),
                       info->native_arch_target != info->native_target ? ", or " : "",
                       info->native_arch_target != info->native_target
                           ? pg_target_name(info->native_arch_target) : "");
    if (t == info->native_arch_target || (t == info->native_target && t == info->arch_target))
        return 0; /* what the device gets anyway */
    info->target = info->arch_target = t;
    info->target_override = true;
    rt_log("%s=%s: building for %s on device %d (%s, compute capability %d.%d, whose own "
           "target is %s); F-PTX-001 now holds against %s", from, want, pg_target_name(t),
           ctx->ordinal, info->name, info->cc_major, info->cc_minor,
           pg_target_name(info->native_arch_target), pg_target_name(t));
    return 0;
}

/* The pre-warm's threads: the field, else $PTXGEN_JIT_THREADS, else the
 * online CPUs. The driver's JIT is CPU-bound and each thread holds a
 * compiler's working set, so more than 16 buys little. */
static int jit_threads(int want)
{
    long n = want;
    const char *env = getenv("PTXGEN_JIT_THREADS");
    if (n <= 0 && env && *env) {
        char *end;
        n = strtol(env, &end, 10);
        if (*end != '\0')
            n = 0;
    }
    if (n <= 0) {
        n = sysconf(_SC_NPROCESSORS_ONLN);
        n = n > 16 ? 16 : n;
    }
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

int pgrt_ctx_create(pgrt_ctx **out, const pgrt_ctx_params *params)
{
    RT_NONNULL(__func__, out, "out");
    *out = NULL;
    pgrt_ctx_params def = {NULL, 0, NULL};
    if (!params)
        params = &def;
    if (params->device < 0)
        return rt_fail(PGRT_EINVAL, "pgrt_ctx_create: device ordinal %d is negative",
                       params->device);

    pgrt_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return rt_fail(PGRT_ENOMEM, "pgrt_ctx_create: out of memory");
    int err = rt_driver_open(&ctx->drv, params->libcuda);
    if (err) {
        free(ctx);
        return err;
    }
    rt_driver *d = &ctx->drv;

    CUresult r = d->Init(0);
    if (r != CUDA_SUCCESS) {
        err = rt_cu_fail(d, r, "cuInit", "%s",
                         r == CUDA_ERROR_NO_DEVICE ? "no CUDA-capable device is present"
                         : r == CUDA_ERROR_STUB_LIBRARY
                             ? "the toolkit's stub libcuda was loaded, not the driver's"
                             : "the driver could not be initialised");
        goto fail;
    }
    int count = 0;
    if ((err = RT_CU(d, DeviceGetCount, (&count))))
        goto fail;
    if (count == 0) {
        err = rt_fail(PGRT_ENODEVICE, "no CUDA device: the driver reports 0 devices");
        goto fail;
    }
    if (params->device >= count) {
        err = rt_fail(PGRT_ENODEVICE, "no CUDA device %d: the driver reports %d device%s",
                      params->device, count, count == 1 ? "" : "s");
        goto fail;
    }
    ctx->ordinal = params->device;
    if ((err = RT_CU(d, DeviceGet, (&ctx->dev, params->device))))
        goto fail;
    if ((err = query_device(ctx)) || (err = override_target(ctx, params->target)))
        goto fail;
    if ((err = RT_CU(d, DevicePrimaryCtxRetain, (&ctx->cu, ctx->dev))))
        goto fail;
    if ((err = RT_CU(d, CtxSetCurrent, (ctx->cu)))) {
        (void)d->DevicePrimaryCtxRelease(ctx->dev); /* the first error is the one reported */
        goto fail;
    }
    if (pthread_mutex_init(&ctx->lock, NULL) != 0) {
        (void)d->DevicePrimaryCtxRelease(ctx->dev);
        err = rt_fail(PGRT_ENOMEM, "pgrt_ctx_create: pthread_mutex_init failed");
        goto fail;
    }
    if (pthread_cond_init(&ctx->loaded, NULL) != 0) {
        pthread_mutex_destroy(&ctx->lock);
        (void)d->DevicePrimaryCtxRelease(ctx->dev);
        err = rt_fail(PGRT_ENOMEM, "pgrt_ctx_create: pthread_cond_init failed");
        goto fail;
    }
    atomic_init(&ctx->capturing, 0);
    ctx->jit_threads = jit_threads(0);
    rt_cubin_cache_open(ctx);
    *out = ctx;
    return 0;

fail:
    rt_driver_close(d);
    free(ctx);
    return err;
}

void pgrt_ctx_destroy(pgrt_ctx **pctx)
{
    if (!pctx || !*pctx)
        return;
    pgrt_ctx *ctx = *pctx;
    *pctx = NULL;
    /* Teardown has no caller to report to: unload and release as far as
     * the driver lets us. */
    if (rt_ctx_bind(ctx) == 0)
        rt_cache_clear(ctx);
    for (unsigned i = 0; i < RT_GEMM_PLANS; i++)
        pgrt_gemm_plan_destroy(&ctx->gemm_plans[i]);
    while (ctx->gemm_retired) {
        pgrt_gemm_plan *p = ctx->gemm_retired;
        ctx->gemm_retired = p->retired;
        pgrt_gemm_plan_destroy(&p);
    }
    rt_blas_destroy(ctx);
    rt_cubin_cache_close(ctx);
    (void)RT_CU(&ctx->drv, DevicePrimaryCtxRelease, (ctx->dev));
    pthread_cond_destroy(&ctx->loaded);
    pthread_mutex_destroy(&ctx->lock);
    rt_driver_close(&ctx->drv);
    free(ctx);
}

int pgrt_ctx_device_info(const pgrt_ctx *ctx, pgrt_device_info *out)
{
    RT_NONNULL(__func__, ctx, "ctx");
    RT_NONNULL(__func__, out, "out");
    *out = ctx->info;
    return 0;
}

pg_target pgrt_ctx_target(const pgrt_ctx *ctx)
{
    return ctx ? ctx->info.target : PG_TARGET_COUNT;
}

int pgrt_ctx_set_jit_threads(pgrt_ctx *ctx, int n)
{
    RT_NONNULL(__func__, ctx, "ctx");
    if (n < 0)
        return rt_fail(PGRT_EINVAL, "pgrt_ctx_set_jit_threads: the thread count is negative");
    ctx->jit_threads = jit_threads(n);
    return ctx->jit_threads;
}

int pgrt_ctx_mem_info(pgrt_ctx *ctx, size_t *free_bytes, size_t *total_bytes)
{
    RT_NONNULL(__func__, ctx, "ctx");
    RT_NONNULL(__func__, free_bytes, "free_bytes");
    RT_NONNULL(__func__, total_bytes, "total_bytes");
    int err = rt_ctx_bind(ctx);
    if (err)
        return err;
    return RT_CU(&ctx->drv, MemGetInfo, (free_bytes, total_bytes));
}

int pgrt_ctx_sync(pgrt_ctx *ctx)
{
    RT_NONNULL(__func__, ctx, "ctx");
    int err = rt_ctx_bind(ctx);
    if (err)
        return err;
    return RT_CU(&ctx->drv, CtxSynchronize, ());
}
