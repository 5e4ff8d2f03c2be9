/* SPDX-License-Identifier: MIT */
/*
 * Golden PTX check: every kernel of the catalog that supports a target is
 * emitted with default knobs and compared byte for byte with
 * GOLDEN_ROOT/<target>/<kernel>.ptx.
 *
 *   golden_check GOLDEN_ROOT TARGET
 *       one target (meson registers one test per target, so a failure
 *       names the target in the test list).
 *   golden_check GOLDEN_ROOT --registered TARGET...
 *       the build's list of per-target tests covers every target the
 *       library knows, and GOLDEN_ROOT holds no directory for another one;
 *       without it a new target would pass by never being checked.
 *
 * A golden file that is missing, or one left over for a kernel that no
 * longer exists (or no longer supports the target), fails: both mean the
 * goldens no longer describe the catalog. Emission must also be
 * deterministic: every kernel is emitted twice, the second time in reverse
 * catalog order so that state leaking from one kernel to the next shows.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The whole file, or NULL with errno set. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 0, n = 0;
    char *buf = NULL;
    int e = 0;
    for (;;) {
        if (n == cap) {
            char *nb = realloc(buf, cap = cap ? cap * 2 : 1 << 16);
            if (!nb) {
                e = ENOMEM;
                break;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f))
                e = errno ? errno : EIO;
            break;
        }
    }
    fclose(f);
    if (e) {
        free(buf);
        errno = e;
        return NULL;
    }
    *len = n;
    return buf;
}

/* Print the line starting at p, up to its newline. */
static void print_line(const char *label, const char *p, const char *end)
{
    if (p >= end) {
        fprintf(stderr, "  %-8s (end of file)\n", label);
        return;
    }
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    size_t n = (size_t)((nl ? nl : end) - p);
    fprintf(stderr, "  %-8s \"%.*s\"%s\n", label, (int)n, p, nl ? "" : " (no newline at end)");
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

typedef struct emitted {
    const pgk_desc *d;
    char *ptx;
    size_t len;
} emitted;

static bool emit_one(const pgk_desc *d, pg_target t, emitted *e)
{
    pgk_knobs kn;
    char msg[512] = "";
    pgk_knobs_default(d, &kn);
    e->d = d;
    e->ptx = NULL;
    e->len = 0;
    int rc = pgk_emit(d, t, &kn, &e->ptx, &e->len, msg, sizeof msg);
    if (rc) {
        fail("%s for %s: emission failed: %s (%s)", d->name, pg_target_name(t), msg,
             pg_err_name(rc));
        e->ptx = NULL;
        return false;
    }
    if (!e->ptx || strlen(e->ptx) != e->len) {
        fail("%s for %s: emitted length %zu does not match the text", d->name,
             pg_target_name(t), e->len);
        return false;
    }
    return true;
}

static bool is_expected(const char *file, const emitted *em, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t k = strlen(em[i].d->name);
        if (strncmp(file, em[i].d->name, k) == 0 && strcmp(file + k, ".ptx") == 0)
            return true;
    }
    return false;
}

static void check_target(const char *root, pg_target t)
{
    const char *tname = pg_target_name(t);
    size_t count = pgk_count();
    emitted *first = calloc(count ? count : 1, sizeof *first);
    emitted *second = calloc(count ? count : 1, sizeof *second);
    size_t n = 0;
    if (!first || !second) {
        fail("out of memory");
        goto out;
    }

    for (size_t i = 0; i < count; i++) {
        const pgk_desc *d = pgk_at(i);
        if (!d) {
            fail("pgk_at(%zu) is NULL but pgk_count() is %zu", i, count);
            continue;
        }
        if (pgk_supports(d, t))
            emit_one(d, t, &first[n++]);
    }
    for (size_t i = n; i-- > 0;)
        emit_one(first[i].d, t, &second[i]);

    for (size_t i = 0; i < n; i++) {
        if (!first[i].ptx || !second[i].ptx)
            continue;
        if (first[i].len != second[i].len || memcmp(first[i].ptx, second[i].ptx, first[i].len)) {
            fail("%s for %s is not deterministic: two emissions differ", first[i].d->name,
                 tname);
            show_diff("first:", first[i].ptx, first[i].len, "second:", second[i].ptx,
                      second[i].len);
        }
    }

    size_t plen = strlen(root) + strlen(tname) + 2;
    for (size_t i = 0; i < n; i++) {
        if (!first[i].ptx)
            continue;
        size_t len = plen + strlen(first[i].d->name) + 6;
        char *path = malloc(len);
        if (!path) {
            fail("out of memory");
            continue;
        }
        snprintf(path, len, "%s/%s/%s.ptx", root, tname, first[i].d->name);
        size_t glen = 0;
        char *golden = read_file(path, &glen);
        if (!golden) {
            fail("%s: %s (%s for %s has no golden file); " REGEN_HINT, path, strerror(errno),
                 first[i].d->name, tname);
        } else if (glen != first[i].len || memcmp(golden, first[i].ptx, glen) != 0) {
            fail("%s differs from the emitted PTX; " REGEN_HINT, path);
            show_diff("golden:", golden, glen, "emitted:", first[i].ptx, first[i].len);
        } else {
            fprintf(stderr, "ok   %s/%s.ptx\n", tname, first[i].d->name);
        }
        free(golden);
        free(path);
    }

    /* Files the catalog no longer produces. */
    char *dir = malloc(plen);
    if (dir) {
        snprintf(dir, plen, "%s/%s", root, tname);
        DIR *dp = opendir(dir);
        if (dp) {
            struct dirent *de;
            while ((de = readdir(dp)) != NULL) {
                size_t k = strlen(de->d_name);
                if (k > 4 && strcmp(de->d_name + k - 4, ".ptx") == 0 &&
                    !is_expected(de->d_name, first, n))
                    fail("%s/%s: stale golden file: no kernel of the catalog emits it for %s; "
                         REGEN_HINT,
                         dir, de->d_name, tname);
            }
            closedir(dp);
        }
        free(dir);
    }
    if (n == 0)
        fprintf(stderr, "note: no kernel of the catalog supports %s\n", tname);

out:
    for (size_t i = 0; first && second && i < n; i++) {
        pgk_free(first[i].ptx);
        pgk_free(second[i].ptx);
    }
    free(first);
    free(second);
}

static void check_registered(const char *root, int argc, char **argv)
{
    for (int t = 0; t < PG_TARGET_COUNT; t++) {
        const char *name = pg_target_name((pg_target)t);
        bool found = false;
        for (int i = 0; i < argc && !found; i++)
            found = strcmp(argv[i], name) == 0;
        if (!found)
            fail("target %s has no golden test: add it to the target list in "
                 "tests/golden/meson.build",
                 name);
    }
    for (int i = 0; i < argc; i++) {
        pg_target t;
        if (pg_target_parse(argv[i], &t) != 0)
            fail("tests/golden/meson.build lists '%s', which is not a ptxgen target", argv[i]);
    }

    DIR *dp = opendir(root);
    if (!dp) {
        fail("%s: %s", root, strerror(errno));
        return;
    }
    struct dirent *de;
    while ((de = readdir(dp)) != NULL) {
        pg_target t;
        if (strncmp(de->d_name, "sm_", 3) == 0 && pg_target_parse(de->d_name, &t) != 0)
            fail("%s/%s: golden directory for a target ptxgen does not know", root,
                 de->d_name);
    }
    closedir(dp);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: golden_check GOLDEN_ROOT TARGET\n"
                        "       golden_check GOLDEN_ROOT --registered TARGET...\n");
        return 2;
    }
    const char *root = argv[1];
    if (strcmp(argv[2], "--registered") == 0) {
        check_registered(root, argc - 3, argv + 3);
    } else {
        pg_target t;
        if (argc != 3 || pg_target_parse(argv[2], &t) != 0) {
            fprintf(stderr, "golden_check: unknown target '%s'\n", argv[2]);
            return 2;
        }
        check_target(root, t);
    }
    fprintf(stderr, "%s\n", failures ? "golden check FAILED" : "golden check passed");
    return failures ? 1 : 0;
}
