/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-train's outputs compared with each other and with its inputs,
 * before anything is written: `--save-adapter X --save-grads X` left X
 * holding the gradients and the trained adapter gone; `--log-json` naming
 * the tokens file, or a model's config.json, replaced the data. Paths are
 * compared resolved (relative or absolute, through links, "." and "..")
 * and, for what exists, by device and inode (hard links, bind mounts).
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include "train_paths.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

/* A name as the file system sees it. */
typedef struct place {
    char path[PATH_MAX + 256];
    bool exists;
    dev_t dev;
    ino_t ino;
} place;

/* p made absolute against the working directory, as written. */
static void absolute(const char *p, char *out, size_t cap)
{
    char cwd[PATH_MAX];
    if (p[0] == '/' || !getcwd(cwd, sizeof cwd))
        snprintf(out, cap, "%s", p);
    else
        snprintf(out, cap, "%s/%s", cwd, p);
}

/* The place of p. follow: the file it reaches (an input is read through a
 * link; an output directory is written into through one); else the name
 * itself: its directory resolved, the last component as written (an
 * output file is replaced by a rename, a link there included). */
static void place_of(const char *p, bool follow, place *out)
{
    memset(out, 0, sizeof *out);
    struct stat st;
    char *real = NULL;
    if (follow && (real = realpath(p, NULL)) != NULL) {
        snprintf(out->path, sizeof out->path, "%s", real);
        free(real);
        if (stat(out->path, &st) == 0) {
            out->exists = true;
            out->dev = st.st_dev;
            out->ino = st.st_ino;
        }
        return;
    }
    /* the directory resolved, then the last component */
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && p[b - 1] != '/')
        b--;
    char dir[PATH_MAX], base[PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s", (int)(b == 0 ? 1 : b), b == 0 ? "." : p);
    snprintf(base, sizeof base, "%.*s", (int)(n - b), p + b);
    if (!strcmp(base, ".") || !strcmp(base, "..") || !base[0] ||
        !(real = realpath(dir, NULL))) {
        /* "." or "..": the directory itself; a missing directory: as written */
        if (!(real = realpath(p, NULL)))
            absolute(p, out->path, sizeof out->path);
        else
            snprintf(out->path, sizeof out->path, "%s", real);
    } else {
        snprintf(out->path, sizeof out->path, "%s%s%s", real,
                 real[strlen(real) - 1] == '/' ? "" : "/", base);
    }
    free(real);
    if (lstat(out->path, &st) == 0) {
        out->exists = true;
        out->dev = st.st_dev;
        out->ino = st.st_ino;
    }
}

static bool same_place(const place *a, const place *b)
{
    return !strcmp(a->path, b->path) ||
           (a->exists && b->exists && a->dev == b->dev && a->ino == b->ino);
}

/* Every name an option stands for. */
typedef struct names {
    const char *opt;
    place *p;
    size_t n;
} names;

/* An output: the path and the files it writes (as names); a directory is
 * followed into. An input: the path and the files it reads, each both as
 * written and as reached. */
static int collect(const train_path *t, bool output, names *out)
{
    out->opt = t->opt;
    out->n = 0;
    out->p = calloc(2 * (1 + t->nfiles), sizeof *out->p);
    if (!out->p)
        return -1;
    if (output) {
        place_of(t->path, t->dir, &out->p[out->n++]);
        for (size_t i = 0; i < t->nfiles; i++) {
            char f[sizeof out->p[0].path + PATH_MAX];
            snprintf(f, sizeof f, "%s/%s", out->p[0].path, t->files[i]);
            place_of(f, false, &out->p[out->n++]);
        }
        return 0;
    }
    place_of(t->path, true, &out->p[out->n++]);
    place_of(t->path, false, &out->p[out->n++]);
    for (size_t i = 0; i < t->nfiles; i++) {
        place_of(t->files[i], true, &out->p[out->n++]);
        place_of(t->files[i], false, &out->p[out->n++]);
    }
    return 0;
}

/* Does any name of a equal any name of b? The pair in *x, *y. */
static bool clash(const names *a, const names *b, const place **x, const place **y)
{
    for (size_t i = 0; i < a->n; i++)
        for (size_t j = 0; j < b->n; j++)
            if (same_place(&a->p[i], &b->p[j])) {
                *x = &a->p[i];
                *y = &b->p[j];
                return true;
            }
    return false;
}

static void say(char *msg, size_t len, const char *oa, const char *ob, const place *x,
                const place *y)
{
    if (!strcmp(x->path, y->path))
        snprintf(msg, len,
                 "%s and %s both name %s: an output may not replace another output or an "
                 "input",
                 oa, ob, x->path);
    else
        snprintf(msg, len,
                 "%s and %s name the same file (%s is %s): an output may not replace another "
                 "output or an input",
                 oa, ob, x->path, y->path);
}

int train_paths_clash(const train_path *outs, size_t nout, const train_path *ins, size_t nin,
                      const char *inplace_out, const char *inplace_in, char *msg,
                      size_t msglen)
{
    names *o = calloc(nout ? nout : 1, sizeof *o), *in = calloc(nin ? nin : 1, sizeof *in);
    int found = 0;
    if (!o || !in) {
        snprintf(msg, msglen, "out of host memory comparing the paths");
        found = 1;
        goto done;
    }
    for (size_t i = 0; i < nout && !found; i++)
        if (outs[i].path && collect(&outs[i], true, &o[i]))
            found = 1;
    for (size_t i = 0; i < nin && !found; i++)
        if (ins[i].path && collect(&ins[i], false, &in[i]))
            found = 1;
    if (found) {
        snprintf(msg, msglen, "out of host memory comparing the paths");
        goto done;
    }
    const place *x, *y;
    for (size_t i = 0; i < nout && !found; i++) {
        if (!outs[i].path)
            continue;
        for (size_t j = i + 1; j < nout && !found; j++)
            if (outs[j].path && clash(&o[i], &o[j], &x, &y)) {
                say(msg, msglen, outs[i].opt, outs[j].opt, x, y);
                found = 1;
            }
        for (size_t j = 0; j < nin && !found; j++) {
            if (!ins[j].path)
                continue;
            /* the adapter saved over the one it was loaded from: allowed
             * when the two are the same directory */
            if (inplace_out && inplace_in && !strcmp(outs[i].opt, inplace_out) &&
                !strcmp(ins[j].opt, inplace_in) && same_place(&o[i].p[0], &in[j].p[0]))
                continue;
            if (clash(&o[i], &in[j], &x, &y)) {
                say(msg, msglen, outs[i].opt, ins[j].opt, x, y);
                found = 1;
            }
        }
    }
done:
    for (size_t i = 0; o && i < nout; i++)
        free(o[i].p);
    for (size_t i = 0; in && i < nin; i++)
        free(in[i].p);
    free(o);
    free(in);
    return found;
}
