/* SPDX-License-Identifier: MIT */
/*
 * Golden PTX check. Every kernel of the catalog is emitted with default
 * knobs for every target it supports and compared byte for byte with its
 * golden file:
 *
 *   GOLDEN_ROOT/<kernel>.ptx    the kernel's PTX for its reference target
 *                               (sm_90, or its lowest target when it does
 *                               not support sm_90), and the body of every
 *                               target without a file of its own
 *   GOLDEN_ROOT/<kernel>@<target>[,<target>...].ptx
 *                               only for a body that differs from the
 *                               above: the PTX of the first target named,
 *                               and the body of every target named
 *
 * A kernel's body (everything but the .version, .target and .address_size
 * lines) is the same for every target unless it chooses instructions by
 * target, so one file per distinct body is stored, not one per target: a
 * change to a kernel shows as one diff. For a target other than the one a
 * file holds, the expected text is that file with those three lines taken
 * from the target table: `.target` is pg_target_name(), `.version` is the
 * ISA the kernel needs (pg_kernel_isa() of a second build through the
 * builder API, never below pg_target_min_isa()), `.address_size` is 64;
 * every emission's own header lines are checked the same way.
 *
 *   golden_check GOLDEN_ROOT
 *       check every kernel for every target.
 *   golden_check GOLDEN_ROOT --update
 *       write the files the check expects and remove the others
 *       ('ninja -C build update-golden').
 *   golden_check GOLDEN_ROOT --registered TARGET...
 *       the build's list of per-target ptxas tests covers every target the
 *       library knows; without it a new target would never be assembled.
 *
 * A golden file that is missing, one whose targets no longer share a body
 * (or share it with another file), or one no kernel emits (a kernel that
 * left the catalog, a directory of the old one-copy-per-target layout)
 * fails: each means the goldens no longer describe the catalog. Emission
 * must also be deterministic: the second build runs in reverse order, so
 * that state leaking from one kernel to the next shows.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ptxgen/pgk.h"
#include "safe_write.h"

#define REGEN_HINT "regenerate with 'ninja -C build update-golden' and review the diff"

static int failures;

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static void fail(const char *fmt, ...)
{
    va_list ap;
    failures++;
    fputs("FAIL: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* A growable string; on allocation failure it stays NULL and the caller
 * reports it once. */
typedef struct text {
    char *p;
    size_t len, cap;
} text;

static bool text_add(text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap < t->len + n + 1)
            cap *= 2;
        char *np = realloc(t->p, cap);
        if (!np)
            return false;
        t->p = np;
        t->cap = cap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
    return true;
}

/* The whole file, or NULL with errno set (ENOENT for a missing one). */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    text t = {0};
    char buf[1 << 16];
    int e = 0;
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        if (!text_add(&t, buf, got)) {
            e = ENOMEM;
            break;
        }
    }
    if (!e && ferror(f))
        e = errno ? errno : EIO;
    fclose(f);
    if (!e && !t.p && !text_add(&t, "", 0))
        e = ENOMEM;
    if (e) {
        free(t.p);
        errno = e;
        return NULL;
    }
    *len = t.len;
    return t.p;
}

/* Print the line starting at p, up to its newline. */
static void print_line(const char *label, const char *p, const char *end)
{
    if (p >= end) {
        fprintf(stderr, "  %-9s (end of file)\n", label);
        return;
    }
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = (size_t)((nl ? nl : end) - p);
    fprintf(stderr, "  %-9s \"%.*s\"%s\n", label, (int)n, p, nl ? "" : " (no newline at end)");
}

/* Show the first line that differs, with both sides; the byte offset too,
 * for a difference the line view hides (a missing final newline, a NUL). */
static void show_diff(const char *wlabel, const char *want, size_t wlen, const char *glabel,
                      const char *got, size_t glen)
{
    size_t i = 0, line = 1, bol = 0;
    while (i < wlen && i < glen && want[i] == got[i]) {
        if (want[i] == '\n') {
            line++;
            bol = i + 1;
        }
        i++;
    }
    fprintf(stderr, "  first difference at line %zu (byte %zu; %zu bytes against %zu)\n", line,
            i, wlen, glen);
    print_line(wlabel, want + bol, want + wlen);
    print_line(glabel, got + bol, got + glen);
}

static bool same(const char *a, size_t alen, const char *b, size_t blen)
{
    return alen == blen && memcmp(a, b, alen) == 0;
}

/* ------------------------------------------------------------ headers */

/* The lines that name the target: PTX allows each once, before the body. */
static const char *const header_keys[] = {".version ", ".target ", ".address_size "};
#define NHEADER (sizeof header_keys / sizeof header_keys[0])

static int header_key(const char *line)
{
    for (size_t i = 0; i < NHEADER; i++)
        if (strncmp(line, header_keys[i], strlen(header_keys[i])) == 0)
            return (int)i;
    return -1;
}

/* src with its header lines replaced by those of target t at ISA isa. A
 * NULL p in the result means out of memory. */
static text retarget(const char *src, size_t len, pg_target t, unsigned isa)
{
    char lines[NHEADER][64];
    snprintf(lines[0], sizeof lines[0], ".version %u.%u", isa / 10, isa % 10);
    snprintf(lines[1], sizeof lines[1], ".target %s", pg_target_name(t));
    snprintf(lines[2], sizeof lines[2], ".address_size 64");
    text out = {0};
    bool ok = true;
    for (size_t i = 0; i < len && ok;) {
        const char *nl = memchr(src + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - src) : len;
        int h = header_key(src + i);
        if (h >= 0)
            ok = text_add(&out, lines[h], strlen(lines[h]));
        else
            ok = text_add(&out, src + i, end - i);
        if (ok && nl)
            ok = text_add(&out, "\n", 1);
        i = end + 1;
    }
    if (ok && !out.p)
        ok = text_add(&out, "", 0);
    if (!ok) {
        free(out.p);
        out.p = NULL;
    }
    return out;
}

/* ---------------------------------------------------------- emission */

typedef struct emitted {
    const pgk_desc *d;
    pg_target t;
    char *ptx; /* pgk_emit's text; NULL if it failed */
    size_t len;
    unsigned isa; /* pg_kernel_isa() of the second build; 0 if it failed */
} emitted;

static bool emit_one(emitted *e)
{
    pgk_knobs kn;
    char msg[512] = "";
    pgk_knobs_default(e->d, &kn);
    int rc = pgk_emit(e->d, e->t, &kn, &e->ptx, &e->len, msg, sizeof msg);
    if (rc) {
        fail("%s for %s: emission failed: %s (%s)", e->d->name, pg_target_name(e->t), msg,
             pg_err_name(rc));
        e->ptx = NULL;
        return false;
    }
    if (!e->ptx || strlen(e->ptx) != e->len) {
        fail("%s for %s: emitted length %zu does not match the text", e->d->name,
             pg_target_name(e->t), e->len);
        pgk_free(e->ptx);
        e->ptx = NULL;
        return false;
    }
    return true;
}

/* Emit e's kernel a second time: the text must be the first emission's
 * (determinism), and the ISA the emission reports is what its .version
 * line must carry. */
static void rebuild(emitted *e)
{
    const char *name = e->d->name, *tname = pg_target_name(e->t);
    char msg[512];
    pgk_ptx again;
    int rc = pgk_emit_ptx(e->d, e->t, NULL, &again, msg, sizeof msg);
    if (rc) {
        fail("%s for %s: second emission failed: %s", name, tname, msg);
        return;
    }
    e->isa = again.isa;
    if (e->ptx && !same(e->ptx, e->len, again.text, again.len)) {
        fail("%s for %s is not deterministic: a second emission gives other text", name, tname);
        show_diff("first:", e->ptx, e->len, "second:", again.text, again.len);
    }
    if (e->isa < pg_target_min_isa(e->t))
        fail("%s for %s: the emitted ISA is %u.%u, below the target's minimum %u.%u", name,
             tname, e->isa / 10, e->isa % 10, pg_target_min_isa(e->t) / 10,
             pg_target_min_isa(e->t) % 10);
    pgk_free(again.text);
}

/* One golden file: the targets whose PTX it gives and the emission it
 * holds, that of its first target (<kernel>.ptx: the reference target). */
typedef struct golden {
    const pgk_desc *d;
    uint32_t targets; /* bit t for pg_target t */
    const emitted *rep;
    char name[512]; /* "<kernel>.ptx" or "<kernel>@sm_100,sm_120.ptx" */
} golden;

_Static_assert(PG_TARGET_COUNT <= 32, "a golden file's targets are a 32-bit set");

/* Every kernel for every target it supports (grouped by kernel) and the
 * golden files that describe them. */
typedef struct catalog {
    emitted *e;
    size_t n;
    golden *g;
    size_t ng;
} catalog;

static void catalog_free(catalog *c)
{
    for (size_t i = 0; i < c->n; i++)
        pgk_free(c->e[i].ptx);
    free(c->e);
    free(c->g);
}

/* The target whose PTX <kernel>.ptx holds. */
static pg_target reference_target(const pgk_desc *d)
{
    return pgk_supports(d, PG_TARGET_DEFAULT) ? PG_TARGET_DEFAULT : d->min_target;
}

/* Whether e's text is src with e's header lines. */
static bool same_body(const char *src, size_t len, const emitted *e, bool *oom)
{
    text want = retarget(src, len, e->t, e->isa);
    if (!want.p) {
        *oom = true;
        return false;
    }
    bool r = same(want.p, want.len, e->ptx, e->len);
    free(want.p);
    return r;
}

/* Group one kernel's emissions e[0..n) by body into c->g: the reference
 * target's group first, then one per other distinct body, in target
 * order. */
static void plan(catalog *c, const emitted *e, size_t n, bool *oom)
{
    const char *name = e[0].d->name;
    pg_target ref = reference_target(e[0].d);
    golden *first = c->g + c->ng;
    for (size_t i = 0; i < n; i++)
        if (e[i].t == ref && e[i].ptx && e[i].isa)
            first[0] = (golden){.d = e[i].d, .targets = 1u << ref, .rep = &e[i]};
    if (!first[0].rep) {
        fail("%s: not emitted for %s, its reference target", name, pg_target_name(ref));
        return;
    }
    size_t ng = 1;
    snprintf(first[0].name, sizeof first[0].name, "%s.ptx", name);
    for (size_t i = 0; i < n; i++) {
        if (e[i].t == ref || !e[i].ptx || !e[i].isa)
            continue;
        size_t k = 0;
        while (k < ng && !same_body(first[k].rep->ptx, first[k].rep->len, &e[i], oom))
            k++;
        if (k == ng)
            first[ng++] = (golden){.d = e[i].d, .rep = &e[i]};
        first[k].targets |= 1u << e[i].t;
    }
    for (size_t k = 1; k < ng; k++) {
        size_t len = (size_t)snprintf(first[k].name, sizeof first[k].name, "%s@", name);
        for (int t = 0; t < PG_TARGET_COUNT && len < sizeof first[k].name; t++)
            if (first[k].targets & (1u << t))
                len += (size_t)snprintf(first[k].name + len, sizeof first[k].name - len, "%s%s",
                                        first[k].name[len - 1] == '@' ? "" : ",",
                                        pg_target_name((pg_target)t));
        if (len + 4 < sizeof first[k].name)
            memcpy(first[k].name + len, ".ptx", 5);
    }
    c->ng += ng;
}

static bool emit_all(catalog *c)
{
    size_t count = pgk_count();
    *c = (catalog){0};
    c->e = calloc(count * PG_TARGET_COUNT + 1, sizeof *c->e);
    c->g = calloc(count * PG_TARGET_COUNT + 1, sizeof *c->g);
    if (!c->e || !c->g) {
        fail("out of memory");
        catalog_free(c);
        return false;
    }
    for (size_t i = 0; i < count; i++) {
        const pgk_desc *d = pgk_at(i);
        if (!d) {
            fail("pgk_at(%zu) is NULL but pgk_count() is %zu", i, count);
            continue;
        }
        bool any = false;
        for (int t = 0; t < PG_TARGET_COUNT; t++) {
            if (!pgk_supports(d, (pg_target)t))
                continue;
            emitted *e = &c->e[c->n++];
            e->d = d;
            e->t = (pg_target)t;
            emit_one(e);
            any = true;
        }
        if (!any)
            fail("%s supports no target", d->name);
    }
    for (size_t i = c->n; i-- > 0;)
        rebuild(&c->e[i]);
    bool oom = false;
    for (size_t i = 0, j; i < c->n; i = j) {
        for (j = i + 1; j < c->n && c->e[j].d == c->e[i].d;)
            j++;
        plan(c, &c->e[i], j - i, &oom);
    }
    if (oom)
        fail("out of memory");
    return true;
}

/* ---------------------------------------------------------- the files */

/* The kernel and the targets of a golden file's name,
 * "<kernel>[@<target>[,<target>...]].ptx"; *targets is 0 for none. Returns
 * false for a name of another shape, or naming a target ptxgen does not
 * know (*bad_target then set). */
static bool parse_name(const char *file, char *kernel, size_t kcap, uint32_t *targets,
                       bool *bad_target)
{
    size_t n = strlen(file);
    *targets = 0;
    *bad_target = false;
    if (n <= 4 || strcmp(file + n - 4, ".ptx") != 0 || file[0] == '.')
        return false;
    n -= 4;
    const char *at = memchr(file, '@', n);
    size_t kn = at ? (size_t)(at - file) : n;
    if (kn >= kcap)
        return false;
    memcpy(kernel, file, kn);
    kernel[kn] = '\0';
    for (const char *p = at ? at + 1 : NULL, *end = file + n; p && p <= end;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        size_t tn = (size_t)((comma ? comma : end) - p);
        char tname[32];
        pg_target t;
        if (tn >= sizeof tname) {
            *bad_target = true;
            break;
        }
        memcpy(tname, p, tn);
        tname[tn] = '\0';
        if (pg_target_parse(tname, &t) != 0) {
            *bad_target = true;
            break;
        }
        *targets |= 1u << t;
        p = comma ? comma + 1 : NULL;
    }
    return !*bad_target;
}

static const golden *planned(const catalog *c, const char *file)
{
    for (size_t i = 0; i < c->ng; i++)
        if (strcmp(c->g[i].name, file) == 0)
            return &c->g[i];
    return NULL;
}

/* Golden files and directories the plan does not hold: report each
 * (check) or remove it (update). Returns how many. */
static int sweep(const char *root, const catalog *c, bool remove_them)
{
    DIR *dp = opendir(root);
    if (!dp) {
        fail("%s: %s", root, strerror(errno));
        return 0;
    }
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dp)) != NULL) {
        char kernel[256], path[1024];
        uint32_t targets;
        bool bad_target;
        snprintf(path, sizeof path, "%s/%s", root, de->d_name);
        struct stat st;
        if (strncmp(de->d_name, "sm_", 3) == 0 && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            /* The layout before one body per kernel: a copy per target. */
            n++;
            if (!remove_them) {
                fail("%s: a golden directory per target is the old layout; " REGEN_HINT, path);
                continue;
            }
            DIR *sub = opendir(path);
            struct dirent *se;
            while (sub && (se = readdir(sub)) != NULL) {
                size_t k = strlen(se->d_name);
                char f[2048];
                if (k > 4 && strcmp(se->d_name + k - 4, ".ptx") == 0 &&
                    (size_t)snprintf(f, sizeof f, "%s/%s", path, se->d_name) < sizeof f)
                    remove(f);
            }
            if (sub)
                closedir(sub);
            if (rmdir(path) != 0)
                fail("%s: %s", path, strerror(errno));
            continue;
        }
        bool golden_shaped = parse_name(de->d_name, kernel, sizeof kernel, &targets, &bad_target);
        if ((!golden_shaped && !bad_target) || planned(c, de->d_name))
            continue;
        n++;
        if (remove_them) {
            if (remove(path) != 0)
                fail("%s: %s", path, strerror(errno));
            continue;
        }
        const pgk_desc *d = pgk_find(kernel);
        char why[1024] = "";
        if (!d) {
            snprintf(why, sizeof why, "no kernel of the catalog is called %s", kernel);
        } else if (bad_target) {
            snprintf(why, sizeof why, "it names a target ptxgen does not know");
        } else {
            /* Same kernel, other grouping: name the files it should be. */
            size_t len = (size_t)snprintf(why, sizeof why, "%s's golden files are now", kernel);
            for (size_t i = 0; i < c->ng && len < sizeof why; i++)
                if (c->g[i].d == d)
                    len += (size_t)snprintf(why + len, sizeof why - len, " %s", c->g[i].name);
        }
        fail("%s: stale golden file: %s; " REGEN_HINT, path, why);
    }
    closedir(dp);
    return n;
}

/* e's header lines must be the target table's. */
static bool header_ok(const emitted *e)
{
    text want = retarget(e->ptx, e->len, e->t, e->isa);
    if (!want.p) {
        fail("out of memory");
        return false;
    }
    bool ok = same(want.p, want.len, e->ptx, e->len);
    if (!ok) {
        fail("%s for %s: the .version/.target/.address_size lines are not %s's at ISA %u.%u",
             e->d->name, pg_target_name(e->t), pg_target_name(e->t), e->isa / 10, e->isa % 10);
        show_diff("expected:", want.p, want.len, "emitted:", e->ptx, e->len);
    }
    free(want.p);
    return ok;
}

/* The golden file in root that gives e's target: a <kernel>@... file
 * listing it, else <kernel>.ptx. *own is the target whose PTX the file
 * holds as is (its first); the name goes to file[cap]. */
static bool covering(const char *root, const emitted *e, char *file, size_t cap, pg_target *own)
{
    DIR *dp = opendir(root);
    bool found = false;
    struct dirent *de;
    while (dp && (de = readdir(dp)) != NULL) {
        char kernel[256];
        uint32_t targets;
        bool bad;
        if (!parse_name(de->d_name, kernel, sizeof kernel, &targets, &bad) ||
            strcmp(kernel, e->d->name) != 0 || !(targets & (1u << e->t)))
            continue;
        if (found) {
            fail("%s for %s: both %s and %s give its PTX; " REGEN_HINT, e->d->name,
                 pg_target_name(e->t), file, de->d_name);
            continue;
        }
        found = true;
        snprintf(file, cap, "%s", de->d_name);
        for (int t = 0; t < PG_TARGET_COUNT; t++)
            if (targets & (1u << t)) {
                *own = (pg_target)t;
                break;
            }
    }
    if (dp)
        closedir(dp);
    if (!found) {
        snprintf(file, cap, "%s.ptx", e->d->name);
        *own = reference_target(e->d);
    }
    return found;
}

/* Check one kernel's emissions e[0..n). A file that fails for several
 * targets shows its first difference once, then the other targets. */
static void check_kernel(const char *root, const catalog *c, const emitted *e, size_t n,
                         size_t *checked)
{
    struct failed {
        char file[512];
        char others[PG_TARGET_COUNT * 12];
    } failed[PG_TARGET_COUNT + 1];
    size_t nfailed = 0;
    bool shared_missing = false;
    for (size_t i = 0; i < n; i++) {
        const char *tname = pg_target_name(e[i].t);
        if (!e[i].ptx || !e[i].isa || !header_ok(&e[i]))
            continue;
        char file[512], path[1024];
        pg_target own;
        bool is_own_file = covering(root, &e[i], file, sizeof file, &own);
        snprintf(path, sizeof path, "%s/%s", root, file);
        size_t glen = 0;
        char *gtext = read_file(path, &glen);
        if (!gtext) {
            if (!shared_missing)
                fail("%s: %s (%s has no golden file); " REGEN_HINT, path, strerror(errno),
                     e[i].d->name);
            shared_missing = !is_own_file;
            continue;
        }
        text want = {gtext, glen, glen};
        if (e[i].t != own) {
            want = retarget(gtext, glen, e[i].t, e[i].isa);
            free(gtext);
            if (!want.p) {
                fail("out of memory");
                continue;
            }
        }
        if (same(want.p, want.len, e[i].ptx, e[i].len)) {
            ++*checked;
            free(want.p);
            continue;
        }
        size_t k = 0;
        while (k < nfailed && strcmp(failed[k].file, file) != 0)
            k++;
        if (k < nfailed) {
            size_t len = strlen(failed[k].others);
            snprintf(failed[k].others + len, sizeof failed[k].others - len, " %s", tname);
        } else {
            fail("%s for %s differs from %s%s; " REGEN_HINT, e[i].d->name, tname, path,
                 e[i].t != own ? " (with the target's header lines)" : "");
            show_diff("golden:", want.p, want.len, "emitted:", e[i].ptx, e[i].len);
            snprintf(failed[nfailed].file, sizeof failed[nfailed].file, "%s", file);
            failed[nfailed++].others[0] = '\0';
        }
        free(want.p);
    }
    for (size_t k = 0; k < nfailed; k++)
        if (failed[k].others[0])
            fprintf(stderr, "  %s/%s differs for%s too\n", root, failed[k].file,
                    failed[k].others);
    /* Every distinct body has its file (the shared one is reported above). */
    for (size_t k = 0; k < c->ng; k++) {
        char path[1024];
        struct stat st;
        if (c->g[k].d != e[0].d || c->g[k].rep->t == reference_target(e[0].d))
            continue;
        snprintf(path, sizeof path, "%s/%s", root, c->g[k].name);
        if (stat(path, &st) != 0)
            fail("%s is missing: those targets' body differs from %s.ptx; " REGEN_HINT, path,
                 e[0].d->name);
    }
}

static void check(const char *root)
{
    catalog c;
    if (!emit_all(&c))
        return;
    size_t checked = 0;
    for (size_t i = 0, j; i < c.n; i = j) {
        for (j = i + 1; j < c.n && c.e[j].d == c.e[i].d;)
            j++;
        check_kernel(root, &c, &c.e[i], j - i, &checked);
    }
    sweep(root, &c, false);
    fprintf(stderr, "%zu kernel x target emissions, %zu match; the layout has %zu golden files\n", c.n,
            checked, c.ng);
    if (checked == 0)
        fail("nothing was checked"); /* never pass by checking nothing */
    catalog_free(&c);
}

/* Write path atomically, unless it already holds text. Returns whether it
 * was written. */
static bool write_if_changed(const char *path, const char *ptx, size_t len)
{
    size_t olen = 0;
    char *old = read_file(path, &olen);
    bool unchanged = old && same(old, olen, ptx, len);
    free(old);
    if (unchanged)
        return false;
    /* An exclusive, no-follow temporary beside the file (safe_write.c):
     * a predictable "<path>.tmp" could be a planted link. */
    pgrt_span part = {ptx, len};
    int e = pgrt_file_replace(path, &part, 1, false);
    if (e) {
        fail("%s: %s", path, strerror(e));
        return false;
    }
    return true;
}

static void update(const char *root)
{
    catalog c;
    if (!emit_all(&c))
        return;
    /* Nothing is written unless every kernel emitted for every target. */
    if (failures) {
        fprintf(stderr, "update-golden: nothing written\n");
        catalog_free(&c);
        return;
    }
    size_t written = 0;
    for (size_t k = 0; k < c.ng; k++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", root, c.g[k].name);
        written += write_if_changed(path, c.g[k].rep->ptx, c.g[k].rep->len);
    }
    int removed = sweep(root, &c, true);
    fprintf(stderr, "update-golden: %zu golden files (%zu kernel x target emissions) under %s; "
                    "%zu written, %d removed\n",
            c.ng, c.n, root, written, removed);
    fprintf(stderr, "update-golden: review the change (git diff --stat -- tests/golden) before "
                    "committing\n");
    catalog_free(&c);
}

static void check_registered(int argc, char **argv)
{
    for (int t = 0; t < PG_TARGET_COUNT; t++) {
        const char *name = pg_target_name((pg_target)t);
        bool found = false;
        for (int i = 0; i < argc && !found; i++)
            found = strcmp(argv[i], name) == 0;
        if (!found)
            fail("target %s has no ptxas test: add it to the target list in "
                 "tests/golden/meson.build",
                 name);
    }
    for (int i = 0; i < argc; i++) {
        pg_target t;
        if (pg_target_parse(argv[i], &t) != 0)
            fail("tests/golden/meson.build lists '%s', which is not a ptxgen target", argv[i]);
    }
}

int main(int argc, char **argv)
{
    const char *usage = "usage: golden_check GOLDEN_ROOT\n"
                        "       golden_check GOLDEN_ROOT --update\n"
                        "       golden_check GOLDEN_ROOT --registered TARGET...\n";
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *root = argv[1];
    if (argc == 2) {
        check(root);
    } else if (strcmp(argv[2], "--update") == 0 && argc == 3) {
        update(root);
        return failures ? 1 : 0;
    } else if (strcmp(argv[2], "--registered") == 0) {
        check_registered(argc - 3, argv + 3);
    } else {
        fputs(usage, stderr);
        return 2;
    }
    fprintf(stderr, "%s\n", failures ? "golden check FAILED" : "golden check passed");
    return failures ? 1 : 0;
}
