/* SPDX-License-Identifier: MIT */
/*
 * Launches: arguments checked against the descriptor (and its baked
 * knobs), dynamic shared memory opted into once a size, the cluster rules
 * checked before the driver sees them, then cuLaunchKernel(Ex). rt_launch
 * resolves a kernel and knob set once, for a step that launches it again
 * and again without looking a name up.
 */
#include "rt_internal.h"

#include <stddef.h>
#include <string.h>

/* Make room for `bytes` of dynamic shared memory on the function. The
 * default allows 48 KiB less the static shared memory; more needs
 * cuFuncSetAttribute, set once a size and cached with the kernel, up to the
 * device's opt-in maximum. The fast path is one atomic load. */
static int shared_allow(pgrt_kernel *k, uint32_t bytes)
{
    if (bytes == 0 || bytes <= atomic_load(&k->smem_allowed))
        return 0;
    pgrt_ctx *ctx = k->ctx;
    rt_driver *drv = &ctx->drv;
    const char *name = k->desc->name;
    int rc = 0;
    pthread_mutex_lock(&ctx->lock);
    if (bytes <= atomic_load(&k->smem_allowed))
        goto out;
    if (atomic_load(&k->smem_allowed) == 0) {
        /* First look at this function: its static shared memory counts
         * against both limits. A driver without cuFuncGetAttribute leaves
         * the check to the launch. */
        int st = 0;
        if (drv->FuncGetAttribute &&
            drv->FuncGetAttribute(&st, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, k->fn) != CUDA_SUCCESS)
            st = 0;
        k->smem_static = st > 0 ? st : 0;
        uint32_t def = RT_DEFAULT_SHARED_LIMIT > (uint32_t)k->smem_static
                           ? RT_DEFAULT_SHARED_LIMIT - (uint32_t)k->smem_static
                           : 1;
        atomic_store(&k->smem_allowed, def);
        if (bytes <= def)
            goto out;
    }
    uint32_t st = (uint32_t)k->smem_static;
    uint32_t optin = (uint32_t)ctx->info.shared_optin_bytes;
    uint32_t limit = optin > st ? optin - st : 0;
    if (bytes > limit) {
        rc = rt_fail(PGRT_ERANGE, "%s asks for %u bytes of dynamic shared memory%s; the device "
                     "allows at most %u bytes a block (%u opt-in maximum%s): nothing launched",
                     name, bytes, st ? " on top of its static shared memory" : "", limit, optin,
                     st ? " less the static bytes" : "");
        goto out;
    }
    if (!drv->FuncSetAttribute) {
        rc = rt_fail(PGRT_EDRIVER, "%s needs %u bytes of dynamic shared memory; the driver lacks "
                     "cuFuncSetAttribute (CUDA 9.0) to allow more than %u", name, bytes,
                     atomic_load(&k->smem_allowed));
        goto out;
    }
    rc = RT_CU(drv, FuncSetAttribute,
               (k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)bytes));
    if (rc)
        rt_msg_append(" (kernel %s, %u bytes of dynamic shared memory, opt-in maximum %u)", name,
                      bytes, optin);
    else
        atomic_store(&k->smem_allowed, bytes);
out:
    pthread_mutex_unlock(&ctx->lock);
    return rc;
}

/* The cluster rules checked before the driver: a capability and a driver
 * that have clusters, dims that tile the grid, at most 8 blocks (the
 * portable size; more needs a non-portable opt-in this runtime does not
 * make). */
static int cluster_check(const pgrt_kernel *k, const pgk_launch *cfg)
{
    const char *name = k->desc->name;
    const pgrt_device_info *info = &k->ctx->info;
    const uint32_t *c = cfg->cluster;
    for (int i = 0; i < 3; i++)
        if (c[i] == 0)
            return rt_fail(PGRT_EARGS, "%s: cluster (%u,%u,%u) has a zero dimension (all three "
                           "zero: no cluster)", name, c[0], c[1], c[2]);
    if (info->cc_major < 9)
        return rt_fail(PGRT_ETARGET, "%s: a cluster launch (%u,%u,%u) needs compute capability "
                       "9.0 or newer; this device is %d.%d", name, c[0], c[1], c[2],
                       info->cc_major, info->cc_minor);
    if (!k->ctx->drv.LaunchKernelEx)
        return rt_fail(PGRT_EDRIVER, "%s: a cluster launch needs cuLaunchKernelEx (CUDA 11.8); "
                       "this driver is CUDA %d.%d", name, info->driver_version / 1000,
                       (info->driver_version % 1000) / 10);
    for (int i = 0; i < 3; i++)
        if (cfg->grid[i] % c[i])
            return rt_fail(PGRT_EARGS, "%s: cluster (%u,%u,%u) does not divide grid (%u,%u,%u)",
                           name, c[0], c[1], c[2], cfg->grid[0], cfg->grid[1], cfg->grid[2]);
    uint64_t blocks = (uint64_t)c[0] * c[1] * c[2];
    if (blocks > 8)
        return rt_fail(PGRT_EARGS, "%s: cluster (%u,%u,%u) holds %llu blocks; at most 8 (the "
                       "portable cluster size)", name, c[0], c[1], c[2],
                       (unsigned long long)blocks);
    return 0;
}

/* The launch shape's own rules: no zero dimension, and a cluster's. */
static int shape_check(const pgrt_kernel *k, const pgk_launch *cfg)
{
    for (int i = 0; i < 3; i++)
        if (cfg->grid[i] == 0 || cfg->block[i] == 0)
            return rt_fail(PGRT_EARGS, "%s: launch grid (%u,%u,%u) block (%u,%u,%u) has a zero "
                           "dimension", k->desc->name, cfg->grid[0], cfg->grid[1], cfg->grid[2],
                           cfg->block[0], cfg->block[1], cfg->block[2]);
    bool cluster = cfg->cluster[0] || cfg->cluster[1] || cfg->cluster[2];
    return cluster ? cluster_check(k, cfg) : 0;
}

/* The launch itself, arguments and shape checked. */
static int launch_checked(pgrt_kernel *k, pgrt_stream *s, const pgk_launch *cfg,
                          const pgrt_arg *args, size_t nargs)
{
    const pgk_desc *d = k->desc;
    bool cluster = cfg->cluster[0] || cfg->cluster[1] || cfg->cluster[2];
    int rc;
    if (s && s->ctx != k->ctx)
        return rt_fail(PGRT_EINVAL, "%s: stream belongs to another context", d->name);
    if ((rc = rt_ctx_bind(k->ctx)))
        return rc;

    /* cuLaunchKernel reads each parameter through a pointer with the size
     * the kernel declares; every member of the value union starts at
     * offset 0, and the check above made the types agree. A tensor map is
     * copied into an aligned slot of its own: the driver reads its 128
     * bytes now, so the caller's map need not outlive the call. */
    void *params[PGK_MAX_PARAMS];
    pgrt_arg slots[PGK_MAX_PARAMS];
    CUtensorMap maps[PGK_MAX_PARAMS];
    if (nargs > PGK_MAX_PARAMS)
        return rt_fail(PGRT_EARGS, "%s: %zu arguments, at most %d", d->name, nargs,
                       PGK_MAX_PARAMS);
    for (size_t i = 0; i < nargs; i++) {
        if (d->params[i].tensor_map) {
            /* by bytes: the caller's map may be under-aligned */
            memcpy(&maps[i],
                   (const unsigned char *)(const void *)args[i].v.tmap +
                       offsetof(pgrt_tensor_map, opaque),
                   sizeof maps[i]);
            params[i] = &maps[i];
            continue;
        }
        slots[i] = args[i];
        params[i] = &slots[i].v;
    }

    rt_driver *drv = &k->ctx->drv;
    if ((rc = shared_allow(k, cfg->shared_bytes)))
        return rc;
    CUresult r;
    if (cluster) {
        CUlaunchAttribute attr;
        memset(&attr, 0, sizeof attr);
        attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr.value.clusterDim.x = cfg->cluster[0];
        attr.value.clusterDim.y = cfg->cluster[1];
        attr.value.clusterDim.z = cfg->cluster[2];
        CUlaunchConfig lc = {cfg->grid[0],  cfg->grid[1],    cfg->grid[2],     cfg->block[0],
                             cfg->block[1], cfg->block[2],   cfg->shared_bytes, rt_stream_cu(s),
                             &attr,         1};
        r = drv->LaunchKernelEx(&lc, k->fn, nargs ? params : NULL, NULL);
        if (r != CUDA_SUCCESS)
            return rt_cu_fail(drv, r, "cuLaunchKernelEx", "%s grid (%u,%u,%u) block (%u,%u,%u) "
                              "cluster (%u,%u,%u) shared %u", d->name, cfg->grid[0], cfg->grid[1],
                              cfg->grid[2], cfg->block[0], cfg->block[1], cfg->block[2],
                              cfg->cluster[0], cfg->cluster[1], cfg->cluster[2],
                              cfg->shared_bytes);
        return 0;
    }
    r = drv->LaunchKernel(k->fn, cfg->grid[0], cfg->grid[1], cfg->grid[2], cfg->block[0],
                          cfg->block[1], cfg->block[2], cfg->shared_bytes, rt_stream_cu(s),
                          nargs ? params : NULL, NULL);
    if (r != CUDA_SUCCESS)
        return rt_cu_fail(drv, r, "cuLaunchKernel", "%s grid (%u,%u,%u) block (%u,%u,%u) shared %u",
                          d->name, cfg->grid[0], cfg->grid[1], cfg->grid[2], cfg->block[0],
                          cfg->block[1], cfg->block[2], cfg->shared_bytes);
    return 0;
}

int rt_kernel_launch_cfg(pgrt_kernel *k, pgrt_stream *s, const pgk_launch *cfg,
                         const pgk_knobs *kn, const pgrt_arg *args, size_t nargs)
{
    char err[512];
    int rc = pgrt_args_check(k->desc, kn, args, nargs, err, sizeof err);
    if (rc)
        return rt_fail(rc, "%s", err);
    if ((rc = shape_check(k, cfg)))
        return rc;
    return launch_checked(k, s, cfg, args, nargs);
}

/* The baked knobs of k against kn, and kn's launch shape. */
static int launch_for_knobs(const pgrt_kernel *k, const pgk_knobs *kn, pgk_launch *cfg)
{
    const pgk_desc *d = k->desc;
    for (size_t i = 0; i < d->nknobs && i < PGK_MAX_KNOBS; i++)
        if ((k->baked_mask & (1u << i)) && kn->v[i] != k->baked.v[i])
            return rt_fail(PGRT_EARGS, "%s was built for %s = %u (a baked knob) but is launched "
                           "with %s = %u; get the kernel for these knobs",
                           d->name, d->knobs[i].name, k->baked.v[i], d->knobs[i].name, kn->v[i]);
    char err[512] = "";
    int rc = pgk_launch_for(d, kn, cfg, err, sizeof err);
    if (rc)
        return rt_fail(rc == PG_ERANGE ? PGRT_ERANGE : PGRT_EARGS, "%s: no launch for these knobs: %s",
                       d->name, err[0] ? err : pg_strerror(rc));
    return 0;
}

int rt_launch_resolve(pgrt_ctx *ctx, const pgk_desc *d, const pgk_knobs *kn, rt_launch *out)
{
    memset(out, 0, sizeof *out);
    if (d->nparams > PGK_MAX_PARAMS)
        return rt_fail(PGRT_EKERNEL, "%s: %zu parameters, at most %d", d->name, d->nparams,
                       PGK_MAX_PARAMS);
    int rc = pgrt_kernel_get(ctx, d, kn, &out->k);
    if (rc || (rc = launch_for_knobs(out->k, kn, &out->cfg)) || (rc = shape_check(out->k, &out->cfg)))
        return rc;
    out->kn = *kn;
    for (size_t i = 0; i < d->nparams; i++) {
        const pgk_param *p = &d->params[i];
        int j = p->tensor_map || p->pointer || (p->type != PG_U32 && p->type != PG_S32)
                    ? -1
                    : pgk_knob_index(d, p->name);
        out->knob_of[i] = (int8_t)(j >= 0 && j < PGK_MAX_KNOBS ? j : -1);
    }
    return 0;
}

/* pgrt_args_check's rules with the knob of each size parameter known:
 * no name is looked up. False sends the launch the checked way, which
 * says what is wrong. */
static bool args_fit(const rt_launch *l, const pgrt_arg *args, size_t nargs)
{
    const pgk_desc *d = l->k->desc;
    if (nargs != d->nparams || (nargs && !args))
        return false;
    for (size_t i = 0; i < nargs; i++) {
        const pgk_param *p = &d->params[i];
        const pgrt_arg *a = &args[i];
        if (p->tensor_map) {
            if (a->type != PGRT_ARG_TENSOR_MAP || !a->v.tmap ||
                (uintptr_t)(const void *)a->v.tmap % 64 ||
                a->v.tmap->encoded != PGRT_TENSOR_MAP_ENCODED)
                return false;
            continue;
        }
        if (a->type == PGRT_ARG_TENSOR_MAP)
            return false;
        if (p->pointer) {
            if (!a->pointer || a->v.u64 == 0)
                return false;
            continue;
        }
        if (a->pointer || a->type != (uint32_t)p->type)
            return false;
        if (l->knob_of[i] >= 0 && l->kn.v[l->knob_of[i]] != a->v.u32)
            return false;
    }
    return true;
}

int rt_launch_run(const rt_launch *l, pgrt_stream *s, const pgrt_arg *args, size_t nargs)
{
    if (!args_fit(l, args, nargs))
        return rt_kernel_launch_cfg(l->k, s, &l->cfg, &l->kn, args, nargs);
    return launch_checked(l->k, s, &l->cfg, args, nargs);
}

int pgrt_kernel_launch(pgrt_kernel *k, pgrt_stream *s, const pgk_knobs *kn, const pgrt_arg *args,
                       size_t nargs)
{
    RT_NONNULL(__func__, k, "kernel");
    const pgk_desc *d = k->desc;
    pgk_knobs defaults;
    if (!kn) {
        pgk_knobs_default(d, &defaults);
        kn = &defaults;
    }
    pgk_launch cfg;
    int rc = launch_for_knobs(k, kn, &cfg);
    return rc ? rc : rt_kernel_launch_cfg(k, s, &cfg, kn, args, nargs);
}

int pgrt_launch(pgrt_ctx *ctx, pgrt_stream *s, const char *kernel, const pgk_knobs *kn,
                const pgrt_arg *args, size_t nargs)
{
    RT_NONNULL(__func__, ctx, "ctx");
    RT_NONNULL(__func__, kernel, "kernel");
    const pgk_desc *d = pgk_find(kernel);
    if (!d)
        return rt_fail(PGRT_ENOTFOUND, "pgrt_launch: unknown kernel \"%s\"", kernel);
    pgrt_kernel *k;
    int rc = rt_kernel_get(ctx, d, kn, rt_stream_cu(s), &k);
    if (rc)
        return rc;
    return pgrt_kernel_launch(k, s, kn, args, nargs);
}
