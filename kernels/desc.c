/* SPDX-License-Identifier: MIT */
/* The descriptor contract: the checks every entry point makes on a
 * descriptor, knobs, cache keys, emission and launches. It names no
 * descriptor, so the kernels' own files (a GEMM's chooser filling in
 * default knobs) can call it while catalog.c, which names them all, stays
 * on top. */
#include "kernels.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* What the knob functions rely on: a name and a well-formed knob table. */
static int knobs_check(const pgk_desc *d, char *err, size_t errlen)
{
    if (!d) {
        say(err, errlen, "kernel descriptor is NULL");
        return PG_EINVAL;
    }
    if (!d->name || !d->name[0]) {
        say(err, errlen, "kernel descriptor has no name");
        return PG_EINVAL;
    }
    const char *name = d->name;
    if (d->nknobs && !d->knobs) {
        say(err, errlen, "kernel descriptor %s has nknobs > 0 but knobs is NULL", name);
        return PG_EINVAL;
    }
    if (d->nknobs > PGK_MAX_KNOBS) {
        say(err, errlen, "kernel descriptor %s has %zu knobs; at most %d are supported", name,
            d->nknobs, PGK_MAX_KNOBS);
        return PG_EINVAL;
    }
    for (size_t i = 0; i < d->nknobs; i++) {
        const pgk_knob *kb = &d->knobs[i];
        if (!kb->name || !kb->name[0]) {
            say(err, errlen, "kernel descriptor %s: knob %zu has no name", name, i);
            return PG_EINVAL;
        }
        if (kb->min > kb->max || kb->def < kb->min || kb->def > kb->max) {
            say(err, errlen, "kernel descriptor %s: knob %s has default %u outside its range "
                "[%u, %u]", name, kb->name, kb->def, kb->min, kb->max);
            return PG_EINVAL;
        }
    }
    return PG_OK;
}

int pgk_desc_check(const pgk_desc *d, char *err, size_t errlen)
{
    int rc = knobs_check(d, err, errlen);
    if (rc)
        return rc;
    const char *bad = NULL;
    if (!d->launch)
        bad = "has no launch function";
    else if (d->nparams && !d->params)
        bad = "has nparams > 0 but params is NULL";
    else if ((unsigned)d->min_target >= PG_TARGET_COUNT)
        bad = "has an invalid min_target";
    if (bad) {
        say(err, errlen, "kernel descriptor %s %s", d->name, bad);
        return PG_EINVAL;
    }
    if (d->nparams > PGK_MAX_PARAMS) {
        say(err, errlen, "kernel descriptor %s has %zu params; at most %d are supported",
            d->name, d->nparams, PGK_MAX_PARAMS);
        return PG_EINVAL;
    }
    for (size_t i = 0; i < d->nparams; i++)
        if (!d->params[i].name || !d->params[i].name[0]) {
            say(err, errlen, "kernel descriptor %s: param %zu has no name", d->name, i);
            return PG_EINVAL;
        }
    return PG_OK;
}

bool pgk_supports(const pgk_desc *d, pg_target t)
{
    if (knobs_check(d, NULL, 0) || (unsigned)t >= PG_TARGET_COUNT ||
        (unsigned)d->min_target >= PG_TARGET_COUNT)
        return false;
    /* An "a" target's instructions (wgmma, setmaxnreg) exist on that one
     * architecture only: neither an older nor a newer one runs them. */
    if (pg_target_is_arch_specific(d->min_target))
        return t == d->min_target;
    return pg_target_sm(t) >= pg_target_sm(d->min_target);
}

int pgk_knobs_default(const pgk_desc *d, pgk_knobs *out)
{
    if (!out)
        return PG_EINVAL;
    memset(out, 0, sizeof *out);
    int rc = knobs_check(d, NULL, 0);
    if (rc)
        return rc;
    for (size_t i = 0; i < d->nknobs; i++)
        out->v[i] = d->knobs[i].def;
    return PG_OK;
}

int pgk_knob_index(const pgk_desc *d, const char *name)
{
    if (!name || knobs_check(d, NULL, 0))
        return -1;
    for (size_t i = 0; i < d->nknobs; i++)
        if (strcmp(d->knobs[i].name, name) == 0)
            return (int)i;
    return -1;
}

int pgk_knob_set(const pgk_desc *d, pgk_knobs *kn, const char *name, const char *value, char *err,
                 size_t errlen)
{
    if (!d || !kn || !name || !value) {
        say(err, errlen, "pgk_knob_set: NULL argument");
        return PG_EINVAL;
    }
    int rc = knobs_check(d, err, errlen);
    if (rc)
        return rc;
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

void pgk_pick(const pgk_desc *d, pgk_knobs *kn)
{
    if (kn && !knobs_check(d, NULL, 0) && d->pick)
        d->pick(d, kn->v);
}

int pgk_cache_key(const pgk_desc *d, pg_target t, const pgk_knobs *kn, char *buf, size_t len)
{
    if (buf && len)
        buf[0] = '\0';
    if (!buf || !len || !kn || !pg_target_name(t) || knobs_check(d, NULL, 0))
        return PG_EINVAL;
    int n = snprintf(buf, len, "%s@%s", d->name, pg_target_name(t));
    for (size_t i = 0; i < d->nknobs && n >= 0 && (size_t)n < len; i++)
        if (d->knobs[i].baked)
            n += snprintf(buf + n, len - (size_t)n, ",%s=%u", d->knobs[i].name, kn->v[i]);
    if (n < 0 || (size_t)n >= len) {
        buf[0] = '\0';
        return PG_EINVAL;
    }
    return n;
}

void pgk_free(void *p) { pg_free(p); }

/* pgk_knobs is a plain struct a caller may fill without pgk_knob_set: a
 * value outside the knob's range would index a build's tables or pass the
 * limits its index arithmetic relies on. */
static int knobs_in_range(const pgk_desc *d, const pgk_knobs *kn, char *err, size_t errlen)
{
    for (size_t i = 0; i < d->nknobs; i++) {
        const pgk_knob *kb = &d->knobs[i];
        if (kn->v[i] < kb->min || kn->v[i] > kb->max) {
            say(err, errlen, "%s: knob %s=%u is out of range [%u, %u]", d->name, kb->name,
                kn->v[i], kb->min, kb->max);
            return PG_ERANGE;
        }
    }
    return PG_OK;
}

/* The checks pgk_emit and pgk_launch_for open with: clear the result,
 * refuse NULL and a descriptor pgk_desc_check() refuses; *kn NULL becomes
 * the defaults (in *def), and the knobs must be in range. */
static int enter(const char *who, const pgk_desc *d, void *out, size_t outlen,
                 const pgk_knobs **kn, pgk_knobs *def, char *err, size_t errlen)
{
    if (out)
        memset(out, 0, outlen);
    if (!d || !out) {
        say(err, errlen, "%s: NULL argument", who);
        return PG_EINVAL;
    }
    int rc = pgk_desc_check(d, err, errlen);
    if (rc)
        return rc;
    if (!*kn) {
        pgk_knobs_default(d, def);
        *kn = def;
    }
    return knobs_in_range(d, *kn, err, errlen);
}

int pgk_emit_ptx(const pgk_desc *d, pg_target t, const pgk_knobs *kn, pgk_ptx *out, char *err,
                 size_t errlen)
{
    pgk_knobs def;
    int rc = enter("pgk_emit", d, out, sizeof *out, &kn, &def, err, errlen);
    if (rc)
        return rc;
    if (!pg_target_name(t)) {
        say(err, errlen, "pgk_emit: invalid target %d", (int)t);
        return PG_EINVAL;
    }
    if (!pgk_supports(d, t)) {
        if (pg_target_is_arch_specific(d->min_target))
            say(err, errlen, "%s runs on %s only; %s was asked for", d->name,
                pg_target_name(d->min_target), pg_target_name(t));
        else
            say(err, errlen, "%s needs %s or newer; %s was asked for", d->name,
                pg_target_name(d->min_target), pg_target_name(t));
        return PG_ETARGET;
    }
    if (!d->build) {
        say(err, errlen, "kernel descriptor %s has no build function: it describes PTX made "
            "elsewhere and cannot be emitted", d->name);
        return PG_EINVAL;
    }
    pg_kernel *k = NULL;
    rc = pg_kernel_create(&k, d->name, t);
    if (rc) {
        say(err, errlen, "%s: %s", d->name, pg_strerror(rc));
        return rc;
    }
    pg_param p[PGK_MAX_PARAMS];
    for (size_t i = 0; i < d->nparams; i++)
        p[i] = d->params[i].tensor_map ? pg_param_tensor_map(k, d->params[i].name)
                                       : pg_param_add(k, d->params[i].type, d->params[i].name);
    if (d->threads)
        pg_kernel_set_maxntid(k, d->threads, 1, 1);
    if (!pg_kernel_error(k))
        d->build(k, d, p, kn->v);
    /* the kernel's own buffer, not a copy: the kernel goes next */
    char *text = NULL;
    size_t n = 0;
    rc = pg_kernel_take_ptx(k, &text, &n);
    if (rc) {
        say(err, errlen, "%s", pg_kernel_message(k));
        pg_kernel_destroy(&k);
        return rc;
    }
    *out = (pgk_ptx){text, n, pg_kernel_isa(k)};
    pg_kernel_destroy(&k);
    return PG_OK;
}

int pgk_emit(const pgk_desc *d, pg_target t, const pgk_knobs *kn, char **ptx, size_t *len,
             char *err, size_t errlen)
{
    if (ptx)
        *ptx = NULL;
    if (len)
        *len = 0;
    if (!ptx) {
        say(err, errlen, "pgk_emit: NULL argument");
        return PG_EINVAL;
    }
    pgk_ptx out;
    int rc = pgk_emit_ptx(d, t, kn, &out, err, errlen);
    *ptx = out.text;
    if (len)
        *len = out.len;
    return rc;
}

int pgk_launch_for(const pgk_desc *d, const pgk_knobs *kn, pgk_launch *out, char *err,
                   size_t errlen)
{
    pgk_knobs def;
    int rc = enter("pgk_launch_for", d, out, sizeof *out, &kn, &def, err, errlen);
    if (rc)
        return rc;
    rc = d->launch(d, kn->v, out);
    if (rc)
        say(err, errlen, "%s: the knobs give a launch the GPU cannot run (%s)", d->name,
            pg_strerror(rc));
    return rc;
}
