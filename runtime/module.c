/* SPDX-License-Identifier: MIT */
/*
 * Module loading and the module cache.
 *
 * A cache entry is keyed by kernel name, target and the values of the
 * knobs the descriptor bakes (most bake none, so one module serves every
 * shape). A miss inserts a "loading" entry and builds and JITs outside the
 * lock: hits on other kernels never wait for a JIT, and concurrent misses on
 * the same key wait on a condition variable for the one load.
 */
#include "rt_internal.h"

#include <stdio.h>
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

int rt_module_load_ptx(pgrt_ctx *ctx, const char *ptx, const char *what, CUmodule *out)
{
    char err[512];
    const char *target = pg_target_name(ctx->info.target);
    pgrt_ptx_info info;
    int rc = pgrt_ptx_parse(ptx, 0, &info, err, sizeof err);
    if (rc == 0)
        rc = pgrt_ptx_check_device(&info, &ctx->info, err, sizeof err);
    if (rc) {
        if (what)
            return rt_fail(rc, "%s (%s): %s", what, target, err);
        return rt_fail(rc, "%s", err);
    }
    if ((rc = rt_ctx_bind(ctx)))
        return rc;

    rt_driver *d = &ctx->drv;
    CUmodule mod = NULL;
    if (ctx->info.direct_load) {
        CUresult r = d->ModuleLoadData(&mod, ptx);
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
    /* Sizes travel in the pointer-sized option slots, as the driver API
     * defines it. */
    void *vals[] = {elog, (void *)(uintptr_t)(RT_JIT_LOG_BYTES - 1), ilog,
                    (void *)(uintptr_t)(RT_JIT_LOG_BYTES - 1)};
    CUresult r = d->ModuleLoadDataEx(&mod, ptx, 4, opts, vals);
    if (r != CUDA_SUCCESS) {
        elog[RT_JIT_LOG_BYTES - 1] = ilog[RT_JIT_LOG_BYTES - 1] = '\0';
        const char *raw = elog[0] ? elog : ilog;
        char *flat = malloc(RT_JIT_LOG_BYTES + 64);
        if (flat)
            log_flatten(raw, flat, RT_JIT_LOG_BYTES + 64);
        const char *log = !flat ? raw : flat[0] ? flat : "(the JIT left no log)";
        rc = rt_cu_fail(d, r, "cuModuleLoadDataEx", "%s", log);
        if (what)
            rt_msg_append(" (kernel %s, %s)", what, target);
        free(flat);
        free(logs);
        return rc;
    }
    free(logs);
    *out = mod;
    return 0;
}

/* ---------------------------------------------------------------- cache keys */

/* Which knobs the descriptor bakes, as a bit mask over its knob indices. */
static int baked_mask(const pgk_desc *d, uint32_t *mask)
{
    *mask = 0;
    if (!d->baked || !*d->baked)
        return 0;
    const char *p = d->baked;
    while (*p) {
        while (*p == ',' || *p == ' ')
            p++;
        size_t n = strcspn(p, ", ");
        if (n == 0)
            break;
        char name[64];
        if (n >= sizeof name)
            return rt_fail(PGRT_EKERNEL, "%s: baked knob list \"%s\" is malformed", d->name,
                           d->baked);
        memcpy(name, p, n);
        name[n] = '\0';
        int k = pgk_knob_index(d, name);
        if (k < 0 || k >= PGK_MAX_KNOBS)
            return rt_fail(PGRT_EKERNEL, "%s bakes knob \"%s\", which it does not have", d->name,
                           name);
        *mask |= 1u << k;
        p += n;
    }
    return 0;
}

static char *make_key(const pgk_desc *d, pg_target t, uint32_t mask, const pgk_knobs *kn)
{
    char buf[512];
    int n = snprintf(buf, sizeof buf, "%s@%s", d->name, pg_target_name(t));
    for (size_t k = 0; k < d->nknobs && k < PGK_MAX_KNOBS && n > 0 && (size_t)n < sizeof buf; k++)
        if (mask & (1u << k))
            n += snprintf(buf + n, sizeof buf - (size_t)n, ",%s=%u", d->knobs[k].name, kn->v[k]);
    if (n < 0 || (size_t)n >= sizeof buf)
        return NULL;
    size_t len = (size_t)n + 1;
    char *key = malloc(len);
    if (key)
        memcpy(key, buf, len);
    return key;
}

/* The target a catalog kernel is built for on this device: its own "a"
 * target for a kernel that needs one (wgmma: sm_90a on 9.0), else the
 * device's plain target. */
static pg_target build_target(const pgrt_ctx *ctx, const pgk_desc *d)
{
    return pg_target_is_arch_specific(d->min_target) ? ctx->info.arch_target : ctx->info.target;
}

/* Build the kernel's PTX and load it. Runs without the cache lock. */
static int build_and_load(pgrt_ctx *ctx, const pgk_desc *d, const pgk_knobs *kn, CUmodule *mod,
                          double *emit_ms, double *jit_ms)
{
    char err[512] = "";
    char *ptx = NULL;
    double t0 = rt_now_ms();
    int rc = pgk_emit(d, build_target(ctx, d), kn, &ptx, NULL, err, sizeof err);
    double t1 = rt_now_ms();
    *emit_ms = t1 - t0;
    if (rc) {
        return rt_fail(rc == PG_ETARGET  ? PGRT_ETARGET
                       : rc == PG_ERANGE ? PGRT_ERANGE
                                         : PGRT_EKERNEL,
                       "%s (%s): building the PTX failed: %s: %s", d->name,
                       pg_target_name(ctx->info.target), pg_err_name(rc),
                       err[0] ? err : pg_strerror(rc));
    }
    rc = rt_module_load_ptx(ctx, ptx, d->name, mod);
    *jit_ms = rt_now_ms() - t1;
    pgk_free(ptx);
    return rc;
}

static int get_function(pgrt_ctx *ctx, CUmodule mod, const pgk_desc *d, CUfunction *fn)
{
    CUresult r = ctx->drv.ModuleGetFunction(fn, mod, d->name);
    if (r != CUDA_SUCCESS)
        return rt_cu_fail(&ctx->drv, r, "cuModuleGetFunction", "entry \"%s\"", d->name);
    return 0;
}

static cache_entry *find_entry(pgrt_ctx *ctx, const char *key)
{
    for (cache_entry *e = ctx->cache; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

static void unlink_entry(pgrt_ctx *ctx, cache_entry *dead)
{
    for (cache_entry **pp = &ctx->cache; *pp; pp = &(*pp)->next)
        if (*pp == dead) {
            *pp = dead->next;
            return;
        }
}

static int capture_refusal(pgrt_ctx *ctx, const pgk_desc *d, CUstream check)
{
    if (atomic_load(&ctx->capturing) > 0)
        return rt_fail(PGRT_ECAPTURE,
                       "%s (%s) is not loaded and a stream is capturing: loading a module during "
                       "capture is refused; pre-warm it (pgrt_prewarm) before pgrt_capture_begin",
                       d->name, pg_target_name(ctx->info.target));
    if (check && ctx->drv.StreamIsCapturing) {
        int status = CU_STREAM_CAPTURE_STATUS_NONE;
        int rc = RT_CU(&ctx->drv, StreamIsCapturing, (check, &status));
        if (rc)
            return rc;
        if (status != CU_STREAM_CAPTURE_STATUS_NONE)
            return rt_fail(PGRT_ECAPTURE,
                           "%s (%s) is not loaded and its stream is capturing: loading a module "
                           "during capture is refused; pre-warm it first",
                           d->name, pg_target_name(ctx->info.target));
    }
    return 0;
}

int rt_kernel_get(pgrt_ctx *ctx, const pgk_desc *d, const pgk_knobs *kn, CUstream check,
                  pgrt_kernel **out)
{
    if (!ctx || !d || !out)
        return rt_fail(PGRT_EINVAL, "pgrt_kernel_get: %s is NULL",
                       !ctx ? "ctx" : !d ? "descriptor" : "out");
    *out = NULL;
    pgk_knobs defaults;
    if (!kn) {
        pgk_knobs_default(d, &defaults);
        kn = &defaults;
    }
    if (!pgk_supports(d, build_target(ctx, d)))
        return rt_fail(PGRT_ETARGET, "%s does not support %s (its lowest target is %s)", d->name,
                       pg_target_name(build_target(ctx, d)), pg_target_name(d->min_target));
    uint32_t mask;
    int rc = baked_mask(d, &mask);
    if (rc)
        return rc;
    char *key = make_key(d, build_target(ctx, d), mask, kn);
    if (!key)
        return rt_fail(PGRT_ENOMEM, "%s: cache key: out of memory", d->name);

    pthread_mutex_lock(&ctx->lock);
    cache_entry *e;
    for (;;) {
        e = find_entry(ctx, key);
        if (!e || e->ready)
            break;
        /* Another thread is loading this key: wait for its outcome. If it
         * failed the entry is gone and this thread tries (and reports)
         * for itself. */
        pthread_cond_wait(&ctx->loaded, &ctx->lock);
    }
    if (e) {
        ctx->stats.hits++;
        pthread_mutex_unlock(&ctx->lock);
        free(key);
        *out = &e->kern;
        return 0;
    }
    rc = capture_refusal(ctx, d, check);
    if (rc) {
        pthread_mutex_unlock(&ctx->lock);
        free(key);
        return rc;
    }
    e = calloc(1, sizeof *e);
    if (!e) {
        pthread_mutex_unlock(&ctx->lock);
        free(key);
        return rt_fail(PGRT_ENOMEM, "%s: cache entry: out of memory", d->name);
    }
    e->key = key;
    e->kern.ctx = ctx;
    e->kern.desc = d;
    e->kern.baked_mask = mask;
    if (mask)
        e->kern.baked = *kn;
    e->next = ctx->cache;
    ctx->cache = e;
    ctx->stats.misses++;
    pthread_mutex_unlock(&ctx->lock);

    double emit_ms = 0, jit_ms = 0;
    CUmodule mod = NULL;
    rc = build_and_load(ctx, d, kn, &mod, &emit_ms, &jit_ms);
    if (rc == 0) {
        rc = get_function(ctx, mod, d, &e->kern.fn);
        if (rc)
            (void)ctx->drv.ModuleUnload(mod); /* the lookup's error is the one reported */
    }

    pthread_mutex_lock(&ctx->lock);
    ctx->stats.emit_ms += emit_ms;
    ctx->stats.jit_ms += jit_ms;
    if (rc) {
        ctx->stats.failures++;
        unlink_entry(ctx, e);
    } else {
        e->mod = mod;
        e->ready = true;
        ctx->stats.modules++;
    }
    pthread_cond_broadcast(&ctx->loaded);
    pthread_mutex_unlock(&ctx->lock);
    if (rc) {
        free(e->key);
        free(e);
        return rc;
    }
    *out = &e->kern;
    return 0;
}

int pgrt_kernel_get(pgrt_ctx *ctx, const pgk_desc *d, const pgk_knobs *kn, pgrt_kernel **out)
{
    return rt_kernel_get(ctx, d, kn, NULL, out);
}

void rt_cache_clear(pgrt_ctx *ctx)
{
    cache_entry *e = ctx->cache;
    ctx->cache = NULL;
    while (e) {
        cache_entry *next = e->next;
        /* Teardown has no caller to return to; a failure still lands in
         * this thread's message. */
        if (e->mod)
            (void)RT_CU(&ctx->drv, ModuleUnload, (e->mod));
        free(e->key);
        free(e);
        e = next;
    }
    ctx->stats.modules = 0;
}

int pgrt_prewarm(pgrt_ctx *ctx, const pgrt_warm *list, size_t n)
{
    if (!ctx || (n > 0 && !list))
        return rt_fail(PGRT_EINVAL, "pgrt_prewarm: %s is NULL", !ctx ? "ctx" : "list");
    for (size_t i = 0; i < n; i++) {
        if (!list[i].kernel)
            return rt_fail(PGRT_EINVAL, "pgrt_prewarm: entry %zu has no kernel name", i);
        const pgk_desc *d = pgk_find(list[i].kernel);
        if (!d)
            return rt_fail(PGRT_ENOTFOUND, "pgrt_prewarm: unknown kernel \"%s\"", list[i].kernel);
        pgrt_kernel *k;
        int rc = pgrt_kernel_get(ctx, d, list[i].knobs, &k);
        if (rc)
            return rc;
    }
    return 0;
}

int pgrt_cache_stats_get(pgrt_ctx *ctx, pgrt_cache_stats *out)
{
    if (!ctx || !out)
        return rt_fail(PGRT_EINVAL, "pgrt_cache_stats_get: %s is NULL", !ctx ? "ctx" : "out");
    pthread_mutex_lock(&ctx->lock);
    *out = ctx->stats;
    pthread_mutex_unlock(&ctx->lock);
    return 0;
}

const pgk_desc *pgrt_kernel_desc(const pgrt_kernel *k) { return k ? k->desc : NULL; }

/* ---------------------------------------------------------------- uncached modules */

struct module_kernel {
    module_kernel *next;
    pgrt_kernel kern;
};

int pgrt_module_load(pgrt_ctx *ctx, const char *ptx, pgrt_module **out)
{
    if (!ctx || !ptx || !out)
        return rt_fail(PGRT_EINVAL, "pgrt_module_load: %s is NULL",
                       !ctx ? "ctx" : !ptx ? "ptx" : "out");
    *out = NULL;
    if (atomic_load(&ctx->capturing) > 0)
        return rt_fail(PGRT_ECAPTURE, "pgrt_module_load: a stream is capturing: loading a module "
                       "during capture is refused");
    pgrt_module *m = calloc(1, sizeof *m);
    if (!m)
        return rt_fail(PGRT_ENOMEM, "pgrt_module_load: out of memory");
    int rc = rt_module_load_ptx(ctx, ptx, NULL, &m->mod);
    if (rc) {
        free(m);
        return rc;
    }
    m->ctx = ctx;
    *out = m;
    return 0;
}

void pgrt_module_destroy(pgrt_module **pm)
{
    if (!pm || !*pm)
        return;
    pgrt_module *m = *pm;
    *pm = NULL;
    /* Nothing to return to; a failure lands in this thread's message. */
    if (rt_ctx_bind(m->ctx) == 0)
        (void)RT_CU(&m->ctx->drv, ModuleUnload, (m->mod));
    module_kernel *k = m->kernels;
    while (k) {
        module_kernel *next = k->next;
        free(k);
        k = next;
    }
    free(m);
}

int pgrt_module_kernel(pgrt_module *m, const pgk_desc *d, pgrt_kernel **out)
{
    if (!m || !d || !out)
        return rt_fail(PGRT_EINVAL, "pgrt_module_kernel: %s is NULL",
                       !m ? "module" : !d ? "descriptor" : "out");
    *out = NULL;
    int rc = rt_ctx_bind(m->ctx);
    if (rc)
        return rc;
    module_kernel *k = calloc(1, sizeof *k);
    if (!k)
        return rt_fail(PGRT_ENOMEM, "pgrt_module_kernel: out of memory");
    if ((rc = get_function(m->ctx, m->mod, d, &k->kern.fn))) {
        free(k);
        return rc;
    }
    k->kern.ctx = m->ctx;
    k->kern.desc = d;
    k->next = m->kernels;
    m->kernels = k;
    *out = &k->kern;
    return 0;
}
