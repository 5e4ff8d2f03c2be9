/* SPDX-License-Identifier: MIT */
#include "rt_internal.h"

#include <string.h>

int rt_kernel_launch_cfg(pgrt_kernel *k, pgrt_stream *s, const pgk_launch *cfg,
                         const pgk_knobs *kn, const pgrt_arg *args, size_t nargs)
{
    const pgk_desc *d = k->desc;
    char err[512];
    int rc = pgrt_args_check(d, kn, args, nargs, err, sizeof err);
    if (rc)
        return rt_fail(rc, "%s", err);
    for (int i = 0; i < 3; i++)
        if (cfg->grid[i] == 0 || cfg->block[i] == 0)
            return rt_fail(PGRT_EARGS, "%s: launch grid (%u,%u,%u) block (%u,%u,%u) has a zero "
                           "dimension", d->name, cfg->grid[0], cfg->grid[1], cfg->grid[2],
                           cfg->block[0], cfg->block[1], cfg->block[2]);
    if (s && s->ctx != k->ctx)
        return rt_fail(PGRT_EINVAL, "%s: stream belongs to another context", d->name);
    if ((rc = rt_ctx_bind(k->ctx)))
        return rc;

    /* cuLaunchKernel reads each parameter through a pointer with the size
     * the kernel declares; every member of the value union starts at
     * offset 0, and the check above made the types agree. */
    void *params[PGK_MAX_PARAMS];
    pgrt_arg slots[PGK_MAX_PARAMS];
    if (nargs > PGK_MAX_PARAMS)
        return rt_fail(PGRT_EARGS, "%s: %zu arguments, at most %d", d->name, nargs,
                       PGK_MAX_PARAMS);
    for (size_t i = 0; i < nargs; i++) {
        slots[i] = args[i];
        params[i] = &slots[i].v;
    }

    rt_driver *drv = &k->ctx->drv;
    if (cfg->shared_bytes > RT_DEFAULT_SHARED_LIMIT) {
        if (!drv->FuncSetAttribute)
            return rt_fail(PGRT_EDRIVER, "%s needs %u bytes of dynamic shared memory; the driver "
                           "lacks cuFuncSetAttribute (CUDA 9.0) to allow more than %u",
                           d->name, cfg->shared_bytes, RT_DEFAULT_SHARED_LIMIT);
        rc = RT_CU(drv, FuncSetAttribute,
                   (k->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)cfg->shared_bytes));
        if (rc) {
            rt_msg_append(" (kernel %s, %u bytes of dynamic shared memory)", d->name,
                          cfg->shared_bytes);
            return rc;
        }
    }
    CUresult r = drv->LaunchKernel(k->fn, cfg->grid[0], cfg->grid[1], cfg->grid[2], cfg->block[0],
                                   cfg->block[1], cfg->block[2], cfg->shared_bytes, rt_stream_cu(s),
                                   nargs ? params : NULL, NULL);
    if (r != CUDA_SUCCESS)
        return rt_cu_fail(drv, r, "cuLaunchKernel", "%s grid (%u,%u,%u) block (%u,%u,%u) shared %u",
                          d->name, cfg->grid[0], cfg->grid[1], cfg->grid[2], cfg->block[0],
                          cfg->block[1], cfg->block[2], cfg->shared_bytes);
    return 0;
}

int pgrt_kernel_launch(pgrt_kernel *k, pgrt_stream *s, const pgk_knobs *kn, const pgrt_arg *args,
                       size_t nargs)
{
    if (!k)
        return rt_fail(PGRT_EINVAL, "pgrt_kernel_launch: kernel is NULL");
    const pgk_desc *d = k->desc;
    pgk_knobs defaults;
    if (!kn) {
        pgk_knobs_default(d, &defaults);
        kn = &defaults;
    }
    for (size_t i = 0; i < d->nknobs && i < PGK_MAX_KNOBS; i++)
        if ((k->baked_mask & (1u << i)) && kn->v[i] != k->baked.v[i])
            return rt_fail(PGRT_EARGS, "%s was built for %s = %u (a baked knob) but is launched "
                           "with %s = %u; get the kernel for these knobs",
                           d->name, d->knobs[i].name, k->baked.v[i], d->knobs[i].name, kn->v[i]);
    pgk_launch cfg;
    char err[512] = "";
    int rc = pgk_launch_for(d, kn, &cfg, err, sizeof err);
    if (rc)
        return rt_fail(rc == PG_ERANGE ? PGRT_ERANGE : PGRT_EARGS, "%s: no launch for these knobs: %s",
                       d->name, err[0] ? err : pg_strerror(rc));
    return rt_kernel_launch_cfg(k, s, &cfg, kn, args, nargs);
}

int pgrt_launch(pgrt_ctx *ctx, pgrt_stream *s, const char *kernel, const pgk_knobs *kn,
                const pgrt_arg *args, size_t nargs)
{
    if (!ctx || !kernel)
        return rt_fail(PGRT_EINVAL, "pgrt_launch: %s is NULL", !ctx ? "ctx" : "kernel");
    const pgk_desc *d = pgk_find(kernel);
    if (!d)
        return rt_fail(PGRT_ENOTFOUND, "pgrt_launch: unknown kernel \"%s\"", kernel);
    pgrt_kernel *k;
    int rc = rt_kernel_get(ctx, d, kn, rt_stream_cu(s), &k);
    if (rc)
        return rc;
    return pgrt_kernel_launch(k, s, kn, args, nargs);
}
