/* SPDX-License-Identifier: MIT */
#include "kernels.h"

#include "../ptxgen/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const pgk_desc *const catalog[] = {
    &pgk_desc_squared_sum_reduce,
    &pgk_desc_clip_scale_reduce,
    &pgk_desc_gradient_clip_gpu_scale,
    &pgk_desc_gradient_clip,
    &pgk_desc_silu_backward,
    &pgk_desc_batched_softmax_backward,
    &pgk_desc_batched_rms_norm_backward,
    &pgk_desc_rms_norm_gamma_reduce,
    &pgk_desc_cast_f32_to_f16,
    &pgk_desc_residual_add,
    &pgk_desc_adamw_step,
    &pgk_desc_adamw_step_dev,
    &pgk_desc_gemm_backward_a,
    &pgk_desc_gemm_backward_a_accumulate,
    &pgk_desc_gemm_backward_b,
    &pgk_desc_gemm_f16_backward_a,
    &pgk_desc_rms_norm_forward,
    &pgk_desc_gemm_forward,
    &pgk_desc_gemm_forward_accumulate,
    &pgk_desc_silu_forward,
    &pgk_desc_batched_softmax_forward,
    &pgk_desc_transpose,
    &pgk_desc_mse_loss,
    &pgk_desc_adamw_hyper_advance,
    &pgk_desc_squared_sum_reduce_multi,
    &pgk_desc_gradient_clip_gpu_scale_multi,
    &pgk_desc_gemm_sm90,
};

size_t pgk_count(void) { return sizeof catalog / sizeof catalog[0]; }

const pgk_desc *pgk_at(size_t i) { return i < pgk_count() ? catalog[i] : NULL; }

const pgk_desc *pgk_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < pgk_count(); i++)
        if (strcmp(catalog[i]->name, name) == 0)
            return catalog[i];
    return NULL;
}

bool pgk_supports(const pgk_desc *d, pg_target t)
{
    if (!d || (unsigned)t >= PG_TARGET_COUNT)
        return false;
    /* an "a" kernel (wgmma) runs on its own architecture only */
    if (pg_target_is_arch_specific(d->min_target))
        return t == d->min_target;
    return pg_target_sm(t) >= pg_target_sm(d->min_target);
}

void pgk_knobs_default(const pgk_desc *d, pgk_knobs *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!d)
        return;
    for (size_t i = 0; i < d->nknobs && i < PGK_MAX_KNOBS; i++)
        out->v[i] = d->knobs[i].def;
}

int pgk_knob_index(const pgk_desc *d, const char *name)
{
    if (!d || !name)
        return -1;
    for (size_t i = 0; i < d->nknobs; i++)
        if (strcmp(d->knobs[i].name, name) == 0)
            return (int)i;
    return -1;
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int say(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return 0;
}

int pgk_knob_set(const pgk_desc *d, pgk_knobs *kn, const char *name, const char *value, char *err,
                 size_t errlen)
{
    if (!d || !kn || !name || !value) {
        say(err, errlen, "pgk_knob_set: NULL argument");
        return PG_EINVAL;
    }
    int i = pgk_knob_index(d, name);
    if (i < 0) {
        char names[256] = "";
        for (size_t j = 0; j < d->nknobs; j++) {
            strncat(names, j ? ", " : "", sizeof names - strlen(names) - 1);
            strncat(names, d->knobs[j].name, sizeof names - strlen(names) - 1);
        }
        say(err, errlen, "unknown knob '%s' for %s (knobs: %s)", name, d->name,
            d->nknobs ? names : "none");
        return PG_ENOTFOUND;
    }
    const pgk_knob *kb = &d->knobs[i];
    const char *s = value;
    int base = 10;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
    }
    bool digits = *s != '\0';
    for (const char *p = s; *p; p++)
        if (!(base == 16 ? ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') ||
                            (*p >= 'A' && *p <= 'F'))
                         : (*p >= '0' && *p <= '9')))
            digits = false;
    if (!digits) {
        say(err, errlen, "knob %s: '%s' is not a non-negative integer", name, value);
        return PG_EINVAL;
    }
    errno = 0;
    unsigned long long v = strtoull(s, NULL, base);
    if (errno == ERANGE || v > kb->max || v < kb->min) {
        say(err, errlen, "knob %s=%s is out of range [%u, %u]", name, value, kb->min, kb->max);
        return PG_ERANGE;
    }
    kn->v[i] = (uint32_t)v;
    return PG_OK;
}

int pgk_knob_assign(const pgk_desc *d, pgk_knobs *kn, const char *assignment, char *err,
                    size_t errlen)
{
    if (!assignment) {
        say(err, errlen, "pgk_knob_assign: NULL argument");
        return PG_EINVAL;
    }
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment) {
        say(err, errlen, "'%s' is not KNOB=VALUE", assignment);
        return PG_EINVAL;
    }
    char name[64];
    size_t n = (size_t)(eq - assignment);
    if (n >= sizeof name) {
        say(err, errlen, "knob name '%.*s...' is too long", 16, assignment);
        return PG_ENOTFOUND;
    }
    memcpy(name, assignment, n);
    name[n] = '\0';
    return pgk_knob_set(d, kn, name, eq + 1, err, errlen);
}

void pgk_free(void *p) { pg_mem_free(p); }

/* pgk_knobs is a plain struct a caller may fill without pgk_knob_set: a
 * value outside the knob's range would index a build's tables or pass the
 * limits its index arithmetic relies on. */
static int knobs_in_range(const pgk_desc *d, const pgk_knobs *kn, char *err, size_t errlen)
{
    for (size_t i = 0; i < d->nknobs && i < PGK_MAX_KNOBS; i++) {
        const pgk_knob *kb = &d->knobs[i];
        if (kn->v[i] < kb->min || kn->v[i] > kb->max) {
            say(err, errlen, "%s: knob %s=%u is out of range [%u, %u]", d->name, kb->name,
                kn->v[i], kb->min, kb->max);
            return PG_ERANGE;
        }
    }
    return PG_OK;
}

int pgk_emit(const pgk_desc *d, pg_target t, const pgk_knobs *kn, char **ptx, size_t *len,
             char *err, size_t errlen)
{
    if (ptx)
        *ptx = NULL;
    if (len)
        *len = 0;
    if (!d || !ptx) {
        say(err, errlen, "pgk_emit: NULL argument");
        return PG_EINVAL;
    }
    if (!pg_target_name(t)) {
        say(err, errlen, "pgk_emit: invalid target %d", (int)t);
        return PG_EINVAL;
    }
    if (!pgk_supports(d, t)) {
        say(err, errlen, "%s needs %s or newer; %s was asked for", d->name,
            pg_target_name(d->min_target), pg_target_name(t));
        return PG_ETARGET;
    }
    pgk_knobs def;
    if (!kn) {
        pgk_knobs_default(d, &def);
        kn = &def;
    }
    int rc = knobs_in_range(d, kn, err, errlen);
    if (rc)
        return rc;
    pg_kernel *k = NULL;
    rc = pg_kernel_create(&k, d->name, t);
    if (rc) {
        say(err, errlen, "%s: %s", d->name, pg_strerror(rc));
        return rc;
    }
    pg_param p[PGK_MAX_PARAMS];
    for (size_t i = 0; i < d->nparams && i < PGK_MAX_PARAMS; i++)
        p[i] = d->params[i].tensor_map ? pg_param_tensor_map(k, d->params[i].name)
                                       : pg_param_add(k, d->params[i].type, d->params[i].name);
    if (!pg_kernel_error(k))
        d->build(k, p, kn->v);
    const char *text = NULL;
    size_t n = 0;
    rc = pg_kernel_emit(k, &text, &n);
    if (rc) {
        say(err, errlen, "%s", pg_kernel_message(k));
        pg_kernel_destroy(&k);
        return rc;
    }
    char *copy = pg_mem_alloc(n + 1);
    if (!copy) {
        say(err, errlen, "%s: out of memory", d->name);
        pg_kernel_destroy(&k);
        return PG_ENOMEM;
    }
    memcpy(copy, text, n + 1);
    pg_kernel_destroy(&k);
    *ptx = copy;
    if (len)
        *len = n;
    return PG_OK;
}

int pgk_launch_for(const pgk_desc *d, const pgk_knobs *kn, pgk_launch *out, char *err,
                   size_t errlen)
{
    if (!d || !out) {
        say(err, errlen, "pgk_launch_for: NULL argument");
        return PG_EINVAL;
    }
    pgk_knobs def;
    if (!kn) {
        pgk_knobs_default(d, &def);
        kn = &def;
    }
    memset(out, 0, sizeof *out);
    int rc = knobs_in_range(d, kn, err, errlen);
    if (rc)
        return rc;
    rc = d->launch(kn->v, out);
    if (rc)
        say(err, errlen, "%s: the knobs give a launch the GPU cannot run (%s)", d->name,
            pg_strerror(rc));
    return rc;
}

int pgk_launch_1d(uint32_t n, uint32_t threads, pgk_launch *out)
{
    if (n == 0 || threads == 0)
        return PG_ERANGE;
    uint64_t blocks = ((uint64_t)n + threads - 1) / threads;
    if (blocks > INT32_MAX)
        return PG_ERANGE;
    *out = (pgk_launch){{(uint32_t)blocks, 1, 1}, {threads, 1, 1}, 0};
    return PG_OK;
}
