/* SPDX-License-Identifier: MIT */
/*
 * The checks that need no driver: PTX header parsing, F-PTX-001, the
 * ISA/driver rule and launch arguments against descriptors. Pure functions,
 * so they are tested on machines without a GPU. Pure, but like every public
 * function that fails they set the thread's pgrt_last_message() too: a
 * caller that passes no err buffer still learns why.
 */
#include "rt_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* A failed check: the one-line message goes to err and, as for every
 * public function that fails, to the thread's pgrt_last_message(). */
RT_PRINTF(4, 5)
static int check_fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    rt_errf(err, errlen, "%s", msg);
    return rt_fail(code, "%s", msg);
}

/* RT_NONNULL for these functions, whose messages go to err too. */
#define CHECK_NONNULL(fn, p, name)                                                      \
    do {                                                                                \
        if (!(p))                                                                       \
            return check_fail(err, errlen, PGRT_EINVAL, "%s: %s is NULL", (fn), (name)); \
    } while (0)

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_word(char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* Whether line [p, e) starts with directive d followed by a blank. */
static const char *directive(const char *p, const char *e, const char *d)
{
    size_t n = strlen(d);
    if ((size_t)(e - p) <= n || memcmp(p, d, n) != 0 || !is_space(p[n]))
        return NULL;
    p += n;
    while (p < e && is_space(*p))
        p++;
    return p;
}

/* A decimal number at p (at most 9 digits). */
static const char *number(const char *p, const char *e, unsigned *out)
{
    unsigned v = 0;
    int digits = 0;
    while (p < e && is_digit(*p) && digits < 9) {
        v = v * 10 + (unsigned)(*p - '0');
        p++;
        digits++;
    }
    if (digits == 0 || (p < e && is_digit(*p)))
        return NULL;
    *out = v;
    return p;
}

int pgrt_ptx_parse(const char *ptx, size_t len, pgrt_ptx_info *out, char *err, size_t errlen)
{
    CHECK_NONNULL(__func__, ptx, "ptx");
    CHECK_NONNULL(__func__, out, "out");
    memset(out, 0, sizeof *out);
    if (len == 0)
        len = strlen(ptx);
    const char *p = ptx, *end = ptx + len;
    bool have_version = false, have_target = false, in_comment = false;

    /* The header directives come before any other statement (PTX ISA,
     * "Module Directives"), so the scan ends at the first line that is not
     * blank, a comment or one of them. */
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        const char *s = p;
        p = nl ? nl + 1 : end;
        while (s < e && is_space(*s))
            s++;
        if (in_comment) {
            const char *close = NULL;
            for (const char *q = s; q + 1 < e; q++)
                if (q[0] == '*' && q[1] == '/') {
                    close = q;
                    break;
                }
            if (!close)
                continue;
            in_comment = false;
            s = close + 2;
            while (s < e && is_space(*s))
                s++;
        }
        if (s == e || (e - s >= 2 && s[0] == '/' && s[1] == '/'))
            continue;
        if (e - s >= 2 && s[0] == '/' && s[1] == '*') {
            in_comment = true;
            for (const char *q = s + 2; q + 1 < e; q++)
                if (q[0] == '*' && q[1] == '/')
                    in_comment = false;
            continue;
        }

        const char *v;
        if ((v = directive(s, e, ".version")) != NULL) {
            unsigned major, minor;
            const char *q = number(v, e, &major);
            if (!q || q >= e || *q != '.' || !(q = number(q + 1, e, &minor)) || minor > 9 ||
                (q < e && !is_space(*q) && *q != '/'))
                return check_fail(err, errlen, PGRT_EPTX,
                                  "PTX .version is not MAJOR.MINOR: \"%.*s\"", (int)(e - s), s);
            /* No PTX ISA has a three-digit major; a larger one would also
             * wrap major * 10 into some real ISA. */
            if (major > 99)
                return check_fail(err, errlen, PGRT_EPTX,
                                  "PTX .version major %u is out of range: \"%.*s\"", major,
                                  (int)(e - s), s);
            out->isa = major * 10 + minor;
            have_version = true;
        } else if ((v = directive(s, e, ".target")) != NULL) {
            size_t n = 0;
            while (v + n < e && is_word(v[n]))
                n++;
            if (n == 0 || n >= sizeof out->target)
                return check_fail(err, errlen, PGRT_EPTX, "PTX .target is malformed: \"%.*s\"",
                                  (int)(e - s), s);
            memcpy(out->target, v, n);
            out->target[n] = '\0';
            have_target = true;
        } else if ((v = directive(s, e, ".address_size")) != NULL) {
            if (!number(v, e, &out->addrsize))
                return check_fail(err, errlen, PGRT_EPTX,
                                  "PTX .address_size is malformed: \"%.*s\"", (int)(e - s), s);
        } else {
            break;
        }
    }
    if (!have_version || !have_target)
        return check_fail(err, errlen, PGRT_EPTX,
                          "PTX has no %s directive before its first statement",
                          !have_version ? ".version" : ".target");
    return 0;
}

int pgrt_ptx_check(const pgrt_ptx_info *info, pg_target device, int driver_version, char *err,
                   size_t errlen)
{
    const char *dev_name = pg_target_name(device);
    CHECK_NONNULL(__func__, info, "info");
    if (!dev_name)
        return check_fail(err, errlen, PGRT_EINVAL, "pgrt_ptx_check: invalid device target");
    /* The PTX's own target sets its minimum ISA: sm_90a needs 8.0 where
     * sm_90 needs 7.8. */
    pg_target ptx_target = device;
    if (strcmp(info->target, dev_name) != 0) {
        /* An "a" target loads on the device of its own compute capability
         * only; that device's plain target has the same sm number. */
        pg_target t;
        if (pg_target_parse(info->target, &t) != 0 || !pg_target_is_arch_specific(t) ||
            pg_target_is_arch_specific(device) || pg_target_sm(t) != pg_target_sm(device)) {
            unsigned sm = pg_target_parse(info->target, &t) == 0 ? pg_target_sm(t) : 0;
            if (sm && pg_target_is_arch_specific(t))
                return check_fail(err, errlen, PGRT_ETARGET, "F-PTX-001 violated: PTX target %s "
                                  "!= device target %s (%s loads only on a compute capability "
                                  "%u.%u device)", info->target, dev_name, info->target, sm / 10,
                                  sm % 10);
            return check_fail(err, errlen, PGRT_ETARGET,
                              "F-PTX-001 violated: PTX target %s != device target %s",
                              info->target, dev_name);
        }
        ptx_target = t;
    }
    unsigned need = pg_isa_min_driver(info->isa);
    if (need == 0)
        return check_fail(err, errlen, PGRT_EISA, "PTX ISA %u.%u is not one ptxgen knows: no "
                          "driver version to check it against", info->isa / 10, info->isa % 10);
    if (info->isa < pg_target_min_isa(ptx_target))
        return check_fail(err, errlen, PGRT_EISA, "PTX ISA %u.%u is below %s's minimum %u.%u",
                          info->isa / 10, info->isa % 10, pg_target_name(ptx_target),
                          pg_target_min_isa(ptx_target) / 10, pg_target_min_isa(ptx_target) % 10);
    if (driver_version < 0 || (unsigned)driver_version < need)
        return check_fail(err, errlen, PGRT_EISA,
                          "PTX ISA %u.%u needs a CUDA %u.%u driver or newer; this driver is CUDA "
                          "%d.%d (cuDriverGetVersion %d)",
                          info->isa / 10, info->isa % 10, need / 1000, (need % 1000) / 10,
                          driver_version / 1000, (driver_version % 1000) / 10, driver_version);
    return 0;
}

int pgrt_ptx_check_device(const pgrt_ptx_info *info, const pgrt_device_info *dev, char *err,
                          size_t errlen)
{
    CHECK_NONNULL(__func__, info, "info");
    CHECK_NONNULL(__func__, dev, "dev");
    pg_target t;
    if (pg_target_parse(info->target, &t) == 0 && pg_target_is_arch_specific(t)) {
        unsigned sm = pg_target_sm(t);
        /* sm_100a does not load on 10.3 although 10.3 runs sm_100 PTX. The
         * capability is compared in parts: major * 10 overflows for a
         * caller's struct with a huge major. */
        if (dev->cc_major < 0 || dev->cc_minor < 0 || (unsigned)dev->cc_major != sm / 10 ||
            (unsigned)dev->cc_minor != sm % 10)
            return check_fail(err, errlen, PGRT_ETARGET,
                              "F-PTX-001 violated: PTX target %s loads only on a compute "
                              "capability %u.%u device; this device is %d.%d (target %s)",
                              info->target, sm / 10, sm % 10, dev->cc_major, dev->cc_minor,
                              pg_target_name(dev->target) ? pg_target_name(dev->target) : "none");
    }
    return pgrt_ptx_check(info, dev->target, dev->driver_version, err, errlen);
}

static const char *type_text(uint32_t t, char *buf, size_t len)
{
    if (t == PGRT_ARG_TENSOR_MAP)
        return "a tensor map";
    const char *n = t < PG_TYPE_COUNT ? pg_type_name((pg_type)t) : NULL;
    if (n)
        return n;
    snprintf(buf, len, "type #%u", t);
    return buf;
}

int pgrt_args_check(const pgk_desc *d, const pgk_knobs *kn, const pgrt_arg *args, size_t nargs,
                    char *err, size_t errlen)
{
    CHECK_NONNULL(__func__, d, "descriptor");
    if (nargs > 0)
        CHECK_NONNULL(__func__, args, "args");
    if (nargs != d->nparams) {
        char list[256] = "";
        size_t used = 0;
        for (size_t i = 0; i < d->nparams && used < sizeof list; i++) {
            int n = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "",
                             d->params[i].name);
            if (n < 0)
                break;
            used += (size_t)n;
        }
        return check_fail(err, errlen, PGRT_EARGS, "%s takes %zu argument%s (%s), got %zu",
                          d->name, d->nparams, d->nparams == 1 ? "" : "s", list, nargs);
    }
    for (size_t i = 0; i < nargs; i++) {
        const pgk_param *p = &d->params[i];
        const pgrt_arg *a = &args[i];
        char b1[32], b2[32];
        if (p->tensor_map) {
            if (a->type != PGRT_ARG_TENSOR_MAP)
                return check_fail(err, errlen, PGRT_EARGS,
                                  "%s argument %zu (%s): expected a tensor map "
                                  "(pgrt_arg_tensor_map), got %s", d->name, i, p->name,
                                  a->pointer ? "a device pointer"
                                             : type_text(a->type, b1, sizeof b1));
            if (!a->v.tmap)
                return check_fail(err, errlen, PGRT_EARGS, "%s argument %zu (%s): null tensor map",
                                  d->name, i, p->name);
            if ((uintptr_t)(const void *)a->v.tmap % 64)
                return check_fail(err, errlen, PGRT_EARGS,
                                  "%s argument %zu (%s): the tensor map is not 64-byte aligned",
                                  d->name, i, p->name);
            if (a->v.tmap->encoded != PGRT_TENSOR_MAP_ENCODED)
                return check_fail(err, errlen, PGRT_EARGS,
                                  "%s argument %zu (%s): the tensor map was never encoded "
                                  "(pgrt_tensor_map_encode)", d->name, i, p->name);
            continue;
        }
        if (a->type == PGRT_ARG_TENSOR_MAP)
            return check_fail(err, errlen, PGRT_EARGS,
                              "%s argument %zu (%s): expected %s, got a tensor map", d->name, i,
                              p->name,
                              p->pointer ? "a device pointer" : type_text(p->type, b1, sizeof b1));
        if (p->pointer) {
            if (!a->pointer)
                return check_fail(err, errlen, PGRT_EARGS,
                                  "%s argument %zu (%s): expected a device pointer, got %s",
                                  d->name, i, p->name, type_text(a->type, b1, sizeof b1));
            if (a->v.u64 == 0)
                return check_fail(err, errlen, PGRT_EARGS,
                                  "%s argument %zu (%s): null device pointer", d->name, i,
                                  p->name);
            continue;
        }
        if (a->pointer)
            return check_fail(err, errlen, PGRT_EARGS,
                              "%s argument %zu (%s): expected a %s value, got a device pointer",
                              d->name, i, p->name, type_text(p->type, b1, sizeof b1));
        if (a->type != (uint32_t)p->type)
            return check_fail(err, errlen, PGRT_EARGS, "%s argument %zu (%s): expected %s, got %s",
                              d->name, i, p->name, type_text(p->type, b1, sizeof b1),
                              type_text(a->type, b2, sizeof b2));
        /* A size parameter that is also a knob: the grid was computed from
         * the knob, the kernel bounds its loop by the parameter; if they
         * differ, part of the data goes untouched or out of bounds. */
        if (kn && (p->type == PG_U32 || p->type == PG_S32)) {
            int k = pgk_knob_index(d, p->name);
            if (k >= 0 && k < PGK_MAX_KNOBS && kn->v[k] != a->v.u32)
                return check_fail(err, errlen, PGRT_EARGS,
                                  "%s argument %zu (%s) = %u, but the launch is sized for knob "
                                  "%s = %u", d->name, i, p->name, a->v.u32, p->name, kn->v[k]);
        }
    }
    return 0;
}
