/* SPDX-License-Identifier: MIT */
/*
 * The module cache, and modules loaded whole (pgrt_module_load). The
 * PTX becomes a module in jit.c, or through the disk cache (cubin_cache.c).
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

/* ---------------------------------------------------------------- cache keys */

/* Which knobs the descriptor bakes, as a bit mask over its knob indices. */
static uint32_t baked_mask(const pgk_desc *d)
{
    uint32_t mask = 0;
    for (size_t k = 0; k < d->nknobs; k++)
        if (d->knobs[k].baked)
            mask |= 1u << k;
    return mask;
}

/* The key pgk_cache_key() gives, malloc'd; NULL when out of memory. */
static char *make_key(const pgk_desc *d, pg_target t, const pgk_knobs *kn)
{
    char buf[512];
    int n = pgk_cache_key(d, t, kn, buf, sizeof buf);
    if (n < 0)
        return NULL;
    char *key = malloc((size_t)n + 1);
    if (key)
        memcpy(key, buf, (size_t)n + 1);
    return key;
}

/* The target a catalog kernel is built for on this device: its own "a"
 * target for a kernel that needs one (wgmma: sm_90a on 9.0), else the
 * device's plain target. */
pg_target rt_build_target(const pgrt_ctx *ctx, const pgk_desc *d)
{
    return pg_target_is_arch_specific(d->min_target) ? ctx->info.arch_target : ctx->info.target;
}

/* Build the kernel's PTX (unless the caller built it) and load it: through
 * the on-disk cubin cache when it is on, else JIT-compiled here. Runs
 * without the cache lock. */
static int build_and_load(pgrt_ctx *ctx, const pgk_desc *d, const pgk_knobs *kn, const char *built,
                          CUmodule *mod, rt_load_info *info)
{
    char err[512] = "";
    char *ptx = NULL;
    if (!built) {
        double t0 = rt_now_ms();
        int rc = pgk_emit(d, rt_build_target(ctx, d), kn, &ptx, NULL, err, sizeof err);
        info->emit_ms = rt_now_ms() - t0;
        if (rc) {
            return rt_fail(rc == PG_ETARGET  ? PGRT_ETARGET
                           : rc == PG_ERANGE ? PGRT_ERANGE
                                             : PGRT_EKERNEL,
                           "%s (%s): building the PTX failed: %s: %s", d->name,
                           pg_target_name(rt_build_target(ctx, d)), pg_err_name(rc),
                           err[0] ? err : pg_strerror(rc));
        }
        built = ptx;
    }
    int rc;
    info->whole = d->whole_program;
    if (ctx->disk && !d->whole_program) { /* a whole program gives no cubin to keep */
        rc = rt_ptx_precheck(ctx, built, d->name);
        if (rc == 0)
            rc = rt_cubin_load(ctx, built, d->name, mod, info);
    } else {
        rc = rt_module_load_ptx_timed(ctx, built, d->name, mod, info);
    }
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
    return rt_kernel_load(ctx, d, kn, check, out, NULL);
}

/* What pgrt_kernel_get refuses before the cache is looked at. */
static int check_request(pgrt_ctx *ctx, const pgk_desc *d)
{
    char bad[256];
    if (pgk_desc_check(d, bad, sizeof bad))
        return rt_fail(PGRT_EINVAL, "pgrt_kernel_get: %s", bad);
    if (!d->build)
        return rt_fail(PGRT_EINVAL,
                       "pgrt_kernel_get: kernel descriptor %s has no build function (load its "
                       "PTX with pgrt_module_load)", d->name);
    if (!pgk_supports(d, rt_build_target(ctx, d)))
        return rt_fail(PGRT_ETARGET, "%s does not support %s (its lowest target is %s)", d->name,
                       pg_target_name(rt_build_target(ctx, d)), pg_target_name(d->min_target));
    return 0;
}

/* Under the lock: the ready entry for key (*loaded false), or a new
 * "loading" entry this thread must fill (*loaded true), which owns key.
 * Waits while another thread loads the same key. On a hit or an error
 * key is freed. */
static int claim_entry(pgrt_ctx *ctx, const pgk_desc *d, const pgk_knobs *kn, char *key,
                       CUstream check, cache_entry **out, bool *loaded)
{
    *loaded = false;
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
    int rc = 0;
    if (e) {
        ctx->stats.hits++;
    } else if ((rc = capture_refusal(ctx, d, check)) == 0) {
        e = calloc(1, sizeof *e);
        if (!e) {
            rc = rt_fail(PGRT_ENOMEM, "%s: cache entry: out of memory", d->name);
        } else {
            e->key = key;
            e->kern.ctx = ctx;
            e->kern.desc = d;
            e->kern.baked_mask = baked_mask(d);
            if (e->kern.baked_mask)
                e->kern.baked = *kn;
            e->next = ctx->cache;
            ctx->cache = e;
            ctx->stats.misses++;
            *loaded = true;
        }
    }
    pthread_mutex_unlock(&ctx->lock);
    if (!*loaded)
        free(key);
    *out = e;
    return rc;
}

/* Under the lock: the load's outcome into the statistics, the entry made
 * ready (or dropped, rc != 0), and the threads waiting on it woken. */
static void publish_entry(pgrt_ctx *ctx, cache_entry *e, int rc, CUmodule mod,
                          const rt_load_info *info)
{
    pthread_mutex_lock(&ctx->lock);
    ctx->stats.emit_ms += info->emit_ms;
    ctx->stats.jit_ms += info->jit_ms;
    if (rc == 0) {
        ctx->stats.load_ms += info->load_ms;
        ctx->stats.cubin_bytes += info->cubin_bytes;
    }
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
}

int rt_kernel_load(pgrt_ctx *ctx, const pgk_desc *d, const pgk_knobs *kn, CUstream check,
                   pgrt_kernel **out, rt_load_info *info)
{
    rt_load_info scratch;
    if (!info)
        info = &scratch;
    /* The caller's inputs survive the reset of the outputs. */
    const char *built = info == &scratch ? NULL : info->ptx;
    bool defer = info != &scratch && info->defer;
    memset(info, 0, sizeof *info);
    RT_NONNULL("pgrt_kernel_get", ctx, "ctx");
    RT_NONNULL("pgrt_kernel_get", d, "descriptor");
    RT_NONNULL("pgrt_kernel_get", out, "out");
    *out = NULL;
    int rc = check_request(ctx, d);
    if (rc)
        return rc;
    pgk_knobs defaults;
    if (!kn) {
        pgk_knobs_default(d, &defaults);
        kn = &defaults;
    }
    char *key = make_key(d, rt_build_target(ctx, d), kn);
    if (!key)
        return rt_fail(PGRT_ENOMEM, "%s: cache key: out of memory", d->name);

    cache_entry *e;
    bool loaded;
    if ((rc = claim_entry(ctx, d, kn, key, check, &e, &loaded)))
        return rc;
    if (!loaded) {
        *out = &e->kern;
        return 0;
    }

    /* Outside the lock: hits on other kernels never wait for this JIT. */
    CUmodule mod = NULL;
    info->loaded = true;
    info->defer = defer;
    rc = build_and_load(ctx, d, kn, built, &mod, info);
    if (rc == 0) {
        rc = get_function(ctx, mod, d, &e->kern.fn);
        if (rc)
            (void)ctx->drv.ModuleUnload(mod); /* the lookup's error is the one reported */
    }
    publish_entry(ctx, e, rc, mod, info);
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

int pgrt_cache_stats_get(pgrt_ctx *ctx, pgrt_cache_stats *out)
{
    RT_NONNULL(__func__, ctx, "ctx");
    RT_NONNULL(__func__, out, "out");
    pthread_mutex_lock(&ctx->lock);
    *out = ctx->stats;
    pthread_mutex_unlock(&ctx->lock);
    rt_cubin_cache_stats(ctx, out);
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
    RT_NONNULL(__func__, ctx, "ctx");
    RT_NONNULL(__func__, ptx, "ptx");
    RT_NONNULL(__func__, out, "out");
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
    RT_NONNULL(__func__, m, "module");
    RT_NONNULL(__func__, d, "descriptor");
    RT_NONNULL(__func__, out, "out");
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
