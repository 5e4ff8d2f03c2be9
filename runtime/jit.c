/* SPDX-License-Identifier: MIT */
/*
 * PTX to a loaded module: the header checks, the driver's JIT (through its
 * linker, which hands the cubin over, or cuModuleLoadDataEx on a driver
 * without one, and for PTX that must be compiled whole: below) and its logs
 * folded into one message line.
 *
 * Below both caches: the module cache (module.c) loads through here when
 * the disk cache is off, the disk cache (cubin_cache.c) JITs and loads its
 * cubins through here on a miss.
 */
#include "rt_internal.h"

#include <stdlib.h>
#include <string.h>

#define RT_JIT_LOG_BYTES 16384

/* JIT logs carry several lines ending in newlines; the message is one line,
 * with "; " between the log's lines. */
static void log_flatten(const char *in, char *out, size_t outlen)
{
    size_t o = 0;
    bool sep = false;
    for (const char *p = in; *p && o + 3 < outlen; p++) {
        if (*p == '\n' || *p == '\r') {
            sep = o > 0;
            continue;
        }
        if (sep) {
            out[o++] = ';';
            out[o++] = ' ';
            sep = false;
        }
        out[o++] = *p;
    }
    out[o] = '\0';
}

int rt_ptx_precheck(pgrt_ctx *ctx, const char *ptx, const char *what)
{
    char err[512];
    pgrt_ptx_info info;
    int rc = pgrt_ptx_parse(ptx, 0, &info, err, sizeof err);
    if (rc == 0)
        rc = pgrt_ptx_check_device(&info, &ctx->info, err, sizeof err);
    if (rc && what)
        return rt_fail(rc, "%s (%s): %s", what, pg_target_name(ctx->info.target), err);
    if (rc)
        return rt_fail(rc, "%s", err);
    return 0;
}

/* One line from a JIT log of several, "; " between its lines. */
static int jit_fail(pgrt_ctx *ctx, CUresult r, const char *call, const char *elog,
                    const char *ilog, const char *what)
{
    const char *raw = elog && elog[0] ? elog : ilog ? ilog : "";
    char *flat = malloc(RT_JIT_LOG_BYTES + 64);
    if (flat)
        log_flatten(raw, flat, RT_JIT_LOG_BYTES + 64);
    const char *log = !flat ? raw : flat[0] ? flat : "(the JIT left no log)";
    int rc = rt_cu_fail(&ctx->drv, r, call, "%s", log);
    if (what)
        rt_msg_append(" (kernel %s, %s)", what, pg_target_name(ctx->info.target));
    free(flat);
    return rc;
}

bool rt_have_linker(const pgrt_ctx *ctx)
{
    const rt_driver *d = &ctx->drv;
    return d->LinkCreate && d->LinkAddData && d->LinkComplete && d->LinkDestroy;
}

/* The driver's linker compiles on the calling thread without holding the
 * context's lock for the whole JIT, as cuModuleLoadDataEx does: pre-warm
 * threads JIT side by side instead of queueing (16 threads on an H200:
 * 3.0 s through cuModuleLoadDataEx against 0.35 s through the linker for
 * the same 64 modules). It also hands the cubin over, for the disk cache. */
int rt_jit_link(pgrt_ctx *ctx, const char *ptx, const char *what, void **cubin, size_t *len)
{
    rt_driver *d = &ctx->drv;
    char *logs = NULL;
    CUjit_option opts[4] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                            CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
    void *vals[4] = {0};
    unsigned nopts = 0;
    /* Direct-load devices take no JIT options (context.c says why). */
    if (!ctx->info.direct_load) {
        logs = calloc(2, RT_JIT_LOG_BYTES);
        if (!logs)
            return rt_fail(PGRT_ENOMEM, "module load: out of memory for JIT logs");
        /* Sizes travel in the pointer-sized option slots, as the driver
         * API defines it. */
        vals[0] = logs;
        vals[1] = (void *)(uintptr_t)(RT_JIT_LOG_BYTES - 1);
        vals[2] = logs + RT_JIT_LOG_BYTES;
        vals[3] = (void *)(uintptr_t)(RT_JIT_LOG_BYTES - 1);
        nopts = 4;
    }
    CUlinkState st = NULL;
    CUresult r = d->LinkCreate(nopts, opts, vals, &st);
    const char *call = "cuLinkCreate";
    if (r == CUDA_SUCCESS) {
        call = "cuLinkAddData";
        r = d->LinkAddData(st, CU_JIT_INPUT_PTX, (void *)(uintptr_t)ptx, strlen(ptx) + 1,
                           what ? what : "ptx", 0, NULL, NULL);
    }
    void *out = NULL;
    size_t n = 0;
    if (r == CUDA_SUCCESS) {
        call = "cuLinkComplete";
        r = d->LinkComplete(st, &out, &n);
    }
    int rc = 0;
    if (r == CUDA_SUCCESS) {
        /* The link state owns its copy. */
        *cubin = malloc(n ? n : 1);
        if (*cubin) {
            memcpy(*cubin, out, n);
            *len = n;
        } else {
            rc = rt_fail(PGRT_ENOMEM, "module load: out of memory for the cubin");
        }
    } else {
        if (logs)
            logs[RT_JIT_LOG_BYTES - 1] = logs[2 * RT_JIT_LOG_BYTES - 1] = '\0';
        rc = jit_fail(ctx, r, call, logs, logs ? logs + RT_JIT_LOG_BYTES : NULL, what);
    }
    if (st)
        (void)d->LinkDestroy(st);
    free(logs);
    return rc;
}

int rt_module_load_cubin(pgrt_ctx *ctx, const void *cubin, const char *what, CUmodule *out)
{
    CUresult r = ctx->drv.ModuleLoadData(out, cubin);
    if (r == CUDA_SUCCESS)
        return 0;
    int rc = rt_cu_fail(&ctx->drv, r, "cuModuleLoadData", "loading the cubin the JIT made");
    if (what)
        rt_msg_append(" (kernel %s, %s)", what, pg_target_name(ctx->info.target));
    return rc;
}

int rt_module_load_ptx(pgrt_ctx *ctx, const char *ptx, const char *what, CUmodule *out)
{
    return rt_module_load_ptx_timed(ctx, ptx, what, out, NULL);
}

int rt_module_load_ptx_timed(pgrt_ctx *ctx, const char *ptx, const char *what, CUmodule *out,
                             rt_load_info *info)
{
    const char *target = pg_target_name(ctx->info.target);
    int rc = rt_ptx_precheck(ctx, ptx, what);
    if (rc)
        return rc;
    if ((rc = rt_ctx_bind(ctx)))
        return rc;

    rt_driver *d = &ctx->drv;
    CUmodule mod = NULL;
    double t0 = rt_now_ms();
    if (rt_have_linker(ctx) && !(info && info->whole)) {
        void *cubin = NULL;
        size_t len = 0;
        rc = rt_jit_link(ctx, ptx, what, &cubin, &len);
        double t1 = rt_now_ms();
        if (rc == 0)
            rc = rt_module_load_cubin(ctx, cubin, what, &mod);
        if (info) {
            info->jit_ms = t1 - t0;
            info->load_ms = rc == 0 ? rt_now_ms() - t1 : 0;
            info->cubin_bytes = rc == 0 ? len : 0;
        }
        free(cubin);
        if (rc == 0)
            *out = mod;
        return rc;
    }

    /* A driver without the linker (before CUDA 5.5): the module straight
     * from the PTX. */
    if (ctx->info.direct_load) {
        CUresult r = d->ModuleLoadData(&mod, ptx);
        if (info)
            info->jit_ms = rt_now_ms() - t0;
        if (r != CUDA_SUCCESS) {
            rc = rt_cu_fail(d, r, "cuModuleLoadData", "direct load on compute capability %d.%d "
                            "gives no JIT log",
                            ctx->info.cc_major, ctx->info.cc_minor);
            if (what)
                rt_msg_append(" (kernel %s, %s)", what, target);
            return rc;
        }
        *out = mod;
        return 0;
    }

    char *logs = malloc(2 * RT_JIT_LOG_BYTES);
    if (!logs)
        return rt_fail(PGRT_ENOMEM, "module load: out of memory for JIT logs");
    char *elog = logs, *ilog = logs + RT_JIT_LOG_BYTES;
    elog[0] = ilog[0] = '\0';
    CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                           CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
    void *vals[] = {elog, (void *)(uintptr_t)(RT_JIT_LOG_BYTES - 1), ilog,
                    (void *)(uintptr_t)(RT_JIT_LOG_BYTES - 1)};
    CUresult r = d->ModuleLoadDataEx(&mod, ptx, 4, opts, vals);
    if (info)
        info->jit_ms = rt_now_ms() - t0;
    if (r != CUDA_SUCCESS) {
        elog[RT_JIT_LOG_BYTES - 1] = ilog[RT_JIT_LOG_BYTES - 1] = '\0';
        rc = jit_fail(ctx, r, "cuModuleLoadDataEx", elog, ilog, what);
        free(logs);
        return rc;
    }
    free(logs);
    *out = mod;
    return 0;
}
