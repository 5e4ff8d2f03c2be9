/* SPDX-License-Identifier: MIT */
/*
 * Golden PTX check. Every kernel of the catalog is emitted with default
 * knobs for every target it supports and compared byte for byte with its
 * golden file:
 *
 *   GOLDEN_ROOT/<kernel>.ptx            the kernel's PTX for its reference
 *                                       target (sm_90, or its lowest target
 *                                       when it does not support sm_90)
 *   GOLDEN_ROOT/<kernel>@<target>.ptx   the PTX for <target>, only where
 *                                       the body differs from the above
 *
 * A kernel's body (everything but the .version, .target and .address_size
 * lines) is the same for every target unless it chooses instructions by
 * target, so one file per distinct body is stored, not one per target: a
 * change to a kernel shows as one diff. For a target without its own file
 * the expected text is <kernel>.ptx with those three lines taken from the
 * target table: `.target` is pg_target_name(), `.version` is the ISA the
 * kernel needs (pg_kernel_isa() of a second build through the builder API,
 * which must not be below pg_target_min_isa()), `.address_size` is 64.
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
 * A golden file that is missing, a per-target file whose body equals the
 * shared one, or a file no kernel emits (a kernel that left the catalog, a
 * directory of the old one-copy-per-target layout) fails: each means the
 * goldens no longer describe the catalog. Emission must also be
 * deterministic: the second build runs in reverse order, so that state
 * leaking from one kernel to the next shows.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pgk.h"

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

static char *path_of(const char *root, const char *name, const char *target)
{
    size_t n = strlen(root) + strlen(name) + (target ? strlen(target) + 1 : 0) + 6;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s%s%s.ptx", root, name, target ? "@" : "", target ? target : "");
    return p;
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

/* Build e's kernel again through the builder API, as a user would: the
 * text must be pgk_emit's (determinism), and the kernel tells the ISA its
 * .version line must carry. */
static void rebuild(emitted *e)
{
    const char *name = e->d->name, *tname = pg_target_name(e->t);
    pgk_knobs kn;
    pgk_knobs_default(e->d, &kn);
    pg_kernel *k = NULL;
    int rc = pg_kernel_create(&k, name, e->t);
    if (rc) {
        fail("%s for %s: pg_kernel_create: %s", name, tname, pg_strerror(rc));
        return;
    }
    pg_param p[PGK_MAX_PARAMS];
    for (size_t i = 0; i < e->d->nparams && i < PGK_MAX_PARAMS; i++)
        p[i] = pg_param_add(k, e->d->params[i].type, e->d->params[i].name);
    if (!pg_kernel_error(k))
        e->d->build(k, p, kn.v);
    const char *ptx = NULL;
    size_t len = 0;
    rc = pg_kernel_emit(k, &ptx, &len);
    if (rc) {
        fail("%s for %s: second build failed: %s", name, tname, pg_kernel_message(k));
    } else {
        e->isa = pg_kernel_isa(k);
        if (e->ptx && !same(e->ptx, e->len, ptx, len)) {
            fail("%s for %s is not deterministic: a second build gives other text", name,
                 tname);
            show_diff("pgk_emit:", e->ptx, e->len, "second:", ptx, len);
        }
        if (e->isa < pg_target_min_isa(e->t))
            fail("%s for %s: pg_kernel_isa() is %u.%u, below the target's minimum %u.%u",
                 name, tname, e->isa / 10, e->isa % 10, pg_target_min_isa(e->t) / 10,
                 pg_target_min_isa(e->t) % 10);
    }
    pg_kernel_destroy(&k);
}

/* Every kernel for every target it supports, grouped by kernel. */
typedef struct catalog {
    emitted *e;
    size_t n;
} catalog;

static bool emit_all(catalog *c)
{
    size_t count = pgk_count();
    c->n = 0;
    c->e = calloc(count * PG_TARGET_COUNT + 1, sizeof *c->e);
    if (!c->e) {
        fail("out of memory");
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
    return true;
}

static void catalog_free(catalog *c)
{
    for (size_t i = 0; i < c->n; i++)
        pgk_free(c->e[i].ptx);
    free(c->e);
}

/* The target whose PTX <kernel>.ptx holds. */
static pg_target reference_target(const pgk_desc *d)
{
    return pgk_supports(d, PG_TARGET_DEFAULT) ? PG_TARGET_DEFAULT : d->min_target;
}

/* The emission of e's kernel for its reference target, or NULL. */
static const emitted *reference_of(const catalog *c, const emitted *e)
{
    pg_target ref = reference_target(e->d);
    for (size_t i = 0; i < c->n; i++)
        if (c->e[i].d == e->d && c->e[i].t == ref)
            return &c->e[i];
    return NULL;
}

/* Whether e's text is the shared body with e's header lines. Sets *oom on
 * allocation failure. */
static bool matches_shared(const char *shared, size_t slen, const emitted *e, bool *oom)
{
    text want = retarget(shared, slen, e->t, e->isa);
    if (!want.p) {
        *oom = true;
        return false;
    }
    bool r = same(want.p, want.len, e->ptx, e->len);
    free(want.p);
    return r;
}

/* ---------------------------------------------------------- the files */

/* The name of a golden file's kernel and target ("" for none) from
 * "<kernel>[@<target>].ptx"; false for any other name. */
static bool parse_name(const char *file, char *kernel, size_t kcap, char *target, size_t tcap)
{
    size_t n = strlen(file);
    if (n <= 4 || strcmp(file + n - 4, ".ptx") != 0 || file[0] == '.')
        return false;
    n -= 4;
    const char *at = memchr(file, '@', n);
    size_t kn = at ? (size_t)(at - file) : n;
    size_t tn = at ? n - kn - 1 : 0;
    if (kn >= kcap || tn >= tcap)
        return false;
    memcpy(kernel, file, kn);
    kernel[kn] = '\0';
    if (at)
        memcpy(target, at + 1, tn);
    target[tn] = '\0';
    return true;
}

/* Whether the layout of c wants the file "<kernel>[@<target>].ptx". */
static bool wanted(const catalog *c, const char *kernel, const char *target, bool *oom)
{
    const pgk_desc *d = pgk_find(kernel);
    if (!d)
        return false;
    if (!target[0])
        return true;
    pg_target t;
    if (pg_target_parse(target, &t) != 0 || !pgk_supports(d, t) || t == reference_target(d))
        return false;
    for (size_t i = 0; i < c->n; i++) {
        const emitted *e = &c->e[i], *ref;
        if (e->d == d && e->t == t && e->ptx && (ref = reference_of(c, e)) && ref->ptx)
            return !matches_shared(ref->ptx, ref->len, e, oom);
    }
    return false;
}

/* Why wanted() said no, for the message. */
static const char *why_unwanted(const char *kernel, const char *target)
{
    const pgk_desc *d = pgk_find(kernel);
    pg_target t;
    if (!d)
        return "no kernel of the catalog has that name";
    if (pg_target_parse(target, &t) != 0)
        return "no ptxgen target has that name";
    if (!pgk_supports(d, t))
        return "the kernel does not support that target";
    if (t == reference_target(d))
        return "that target's PTX is the kernel's <kernel>.ptx";
    return "the body is the shared one, which <kernel>.ptx holds";
}

/* Golden files and directories no kernel emits: report each (check) or
 * remove it (update). Returns how many. */
static int sweep(const char *root, const catalog *c, bool remove_them)
{
    DIR *dp = opendir(root);
    if (!dp) {
        fail("%s: %s", root, strerror(errno));
        return 0;
    }
    int n = 0;
    struct dirent *de;
    bool oom = false;
    while ((de = readdir(dp)) != NULL) {
        char kernel[256], target[64];
        size_t plen = strlen(root) + strlen(de->d_name) + 2;
        char *path = malloc(plen);
        if (!path) {
            oom = true;
            break;
        }
        snprintf(path, plen, "%s/%s", root, de->d_name);
        struct stat st;
        if (strncmp(de->d_name, "sm_", 3) == 0 && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            /* The layout before one body per kernel: a copy per target. */
            n++;
            if (!remove_them) {
                fail("%s: a golden directory per target is the old layout; " REGEN_HINT, path);
            } else {
                DIR *sub = opendir(path);
                struct dirent *se;
                while (sub && (se = readdir(sub)) != NULL) {
                    size_t k = strlen(se->d_name);
                    if (k > 4 && strcmp(se->d_name + k - 4, ".ptx") == 0) {
                        size_t flen = plen + k + 1;
                        char *f = malloc(flen);
                        if (f) {
                            snprintf(f, flen, "%s/%s", path, se->d_name);
                            remove(f);
                            free(f);
                        }
                    }
                }
                if (sub)
                    closedir(sub);
                if (rmdir(path) != 0)
                    fprintf(stderr, "update-golden: could not remove %s: %s\n", path,
                            strerror(errno));
            }
        } else if (parse_name(de->d_name, kernel, sizeof kernel, target, sizeof target) &&
                   !wanted(c, kernel, target, &oom)) {
            n++;
            if (remove_them) {
                if (remove(path) != 0)
                    fail("%s: %s", path, strerror(errno));
            } else {
                fail("%s: stale golden file: %s; " REGEN_HINT, path, why_unwanted(kernel, target));
            }
        }
        free(path);
    }
    closedir(dp);
    if (oom)
        fail("out of memory");
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

/* Check one kernel's emissions e[0..n) against its golden files. A change
 * to a shared body shows once, with the targets it fails for. */
static void check_kernel(const char *root, const emitted *e, size_t n, size_t *files,
                         size_t *checked)
{
    const char *name = e[0].d->name;
    pg_target ref = reference_target(e[0].d);
    char *shared = path_of(root, name, NULL);
    if (!shared) {
        fail("out of memory");
        return;
    }
    size_t slen = 0;
    char *stext = read_file(shared, &slen);
    if (!stext)
        fail("%s: %s (%s has no golden file); " REGEN_HINT, shared, strerror(errno), name);
    else
        ++*files;
    bool shared_failed = false;
    char others[PG_TARGET_COUNT * 12] = ""; /* " sm_75 sm_80" */
    for (size_t i = 0; i < n; i++) {
        const char *tname = pg_target_name(e[i].t);
        if (!e[i].ptx || !e[i].isa || !header_ok(&e[i]))
            continue;
        char *own = e[i].t == ref ? NULL : path_of(root, name, tname);
        size_t olen = 0;
        char *otext = own ? read_file(own, &olen) : NULL;
        text want = {0};
        const char *file = otext ? own : shared;
        if (otext) {
            /* The target's own file: exactly its PTX. */
            ++*files;
            want.p = otext;
            want.len = olen;
            otext = NULL;
        } else if (stext && e[i].t == ref) {
            want.p = stext; /* the reference target's PTX, headers included */
            want.len = slen;
        } else if (stext) {
            want = retarget(stext, slen, e[i].t, e[i].isa);
            if (!want.p)
                fail("out of memory");
        }
        if (want.p && same(want.p, want.len, e[i].ptx, e[i].len)) {
            ++*checked;
        } else if (want.p && file == shared && shared_failed) {
            /* The shared file already failed: name the target only. */
            size_t k = strlen(others);
            snprintf(others + k, sizeof others - k, " %s", tname);
        } else if (want.p) {
            fail("%s for %s differs from %s%s; " REGEN_HINT, name, tname, file,
                 file == shared && e[i].t != ref ? " (with the target's header lines)" : "");
            show_diff("golden:", want.p, want.len, "emitted:", e[i].ptx, e[i].len);
            shared_failed = shared_failed || file == shared;
        }
        if (want.p != stext)
            free(want.p);
        free(otext);
        free(own);
    }
    if (others[0])
        fprintf(stderr, "  %s differs for%s too\n", shared, others);
    free(stext);
    free(shared);
}

static void check(const char *root)
{
    catalog c;
    if (!emit_all(&c))
        return;
    size_t files = 0, checked = 0;
    for (size_t i = 0, j; i < c.n; i = j) {
        for (j = i + 1; j < c.n && c.e[j].d == c.e[i].d;)
            j++;
        check_kernel(root, &c.e[i], j - i, &files, &checked);
    }
    sweep(root, &c, false);
    fprintf(stderr, "%zu kernel x target emissions, %zu match; %zu golden files\n", c.n,
            checked, files);
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
    size_t tlen = strlen(path) + 5;
    char *tmp = malloc(tlen);
    if (!tmp) {
        fail("out of memory");
        return false;
    }
    snprintf(tmp, tlen, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(ptx, 1, len, f) == len;
    if (f && fclose(f) != 0)
        ok = false;
    if (!ok || rename(tmp, path) != 0) {
        fail("%s: %s", path, strerror(errno));
        remove(tmp);
        free(tmp);
        return false;
    }
    free(tmp);
    return true;
}

static void update(const char *root)
{
    catalog c;
    if (!emit_all(&c))
        return;
    /* Nothing is written unless every kernel emitted for every target. */
    for (size_t i = 0; i < c.n; i++)
        if (!c.e[i].ptx || !c.e[i].isa)
            failures++;
    if (failures) {
        fprintf(stderr, "update-golden: nothing written\n");
        catalog_free(&c);
        return;
    }
    size_t files = 0, written = 0;
    bool oom = false;
    for (size_t i = 0; i < c.n; i++) {
        const emitted *e = &c.e[i], *ref = reference_of(&c, e);
        if (!ref) {
            fail("%s: not emitted for %s, its reference target", e->d->name,
                 pg_target_name(reference_target(e->d)));
            continue;
        }
        bool is_ref = e == ref;
        if (!is_ref && matches_shared(ref->ptx, ref->len, e, &oom))
            continue;
        char *path = path_of(root, e->d->name, is_ref ? NULL : pg_target_name(e->t));
        if (!path) {
            oom = true;
            continue;
        }
        files++;
        written += write_if_changed(path, e->ptx, e->len);
        free(path);
    }
    if (oom)
        fail("out of memory");
    int removed = sweep(root, &c, true);
    fprintf(stderr, "update-golden: %zu golden files (%zu kernel x target emissions) under %s; "
                    "%zu written, %d removed\n",
            files, c.n, root, written, removed);
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
