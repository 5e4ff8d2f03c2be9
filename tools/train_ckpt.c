/* SPDX-License-Identifier: MIT */
/*
 * Checkpoint directories: named, listed, checked, written whole by one
 * rename, pruned. The library writes the adapter (pgrt_adapter_save) and
 * the optimizer state (pgrt_lm_state_save) into the temporary directory;
 * this file does the rest with plain POSIX calls.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include "train_ckpt.h"
#include "train_opts.h"

#include "pgrt_json.h"
#include "ptxgen/pgrt_model.h"
#include "safe_write.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const train_ckpt_files[5] = {
    "adapter_model.safetensors", "adapter_config.json", TRAIN_CKPT_OPTIMIZER,
    TRAIN_CKPT_CONFIG, TRAIN_CKPT_STATE,
};

void train_ckpt_name(uint64_t step, char *buf, size_t cap)
{
    snprintf(buf, cap, TRAIN_CKPT_PREFIX "%" PRIu64, step);
}

bool train_ckpt_parse_name(const char *name, uint64_t *step)
{
    size_t pl = strlen(TRAIN_CKPT_PREFIX);
    if (strncmp(name, TRAIN_CKPT_PREFIX, pl))
        return false;
    const char *d = name + pl;
    if (!*d || (d[0] == '0' && d[1]) || strlen(d) > 19)
        return false;
    uint64_t x = 0;
    for (; *d; d++) {
        if (*d < '0' || *d > '9')
            return false;
        x = x * 10 + (uint64_t)(*d - '0');
    }
    *step = x;
    return true;
}

const char *train_ckpt_missing(const char *dir)
{
    for (size_t i = 0; i < sizeof train_ckpt_files / sizeof train_ckpt_files[0]; i++) {
        char p[PATH_MAX + 64];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, train_ckpt_files[i]);
        if (lstat(p, &st) != 0 || !S_ISREG(st.st_mode) ||
            (!strcmp(train_ckpt_files[i], TRAIN_CKPT_STATE) && st.st_size == 0))
            return train_ckpt_files[i];
    }
    return NULL;
}

static int by_step(const void *a, const void *b)
{
    uint64_t x = ((const train_ckpt_entry *)a)->step, y = ((const train_ckpt_entry *)b)->step;
    return (x > y) - (x < y);
}

int train_ckpt_list(const char *dir, train_ckpt_entry **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        uint64_t step;
        if (!train_ckpt_parse_name(e->d_name, &step))
            continue;
        char p[PATH_MAX + 64];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (lstat(p, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            train_ckpt_entry *g = realloc(*out, cap * sizeof *g);
            if (!g) {
                closedir(d);
                free(*out);
                *out = NULL;
                *n = 0;
                errno = ENOMEM;
                return -1;
            }
            *out = g;
        }
        (*out)[(*n)++] = (train_ckpt_entry){step, train_ckpt_missing(p) == NULL};
    }
    closedir(d);
    if (*n)
        qsort(*out, *n, sizeof **out, by_step);
    return 0;
}

size_t train_ckpt_prune_count(size_t n, long long limit)
{
    if (limit <= 0 || n <= (size_t)limit)
        return 0;
    return n - (size_t)limit;
}

bool train_ckpt_any(const char *dir, char *name, size_t cap)
{
    DIR *d = opendir(dir);
    if (!d)
        return false;
    struct dirent *e;
    bool any = false;
    uint64_t step;
    while (!any && (e = readdir(d)))
        if (train_ckpt_parse_name(e->d_name, &step)) {
            snprintf(name, cap, "%s", e->d_name);
            any = true;
        }
    closedir(d);
    return any;
}

int train_ckpt_resolve(const char *given, char *out, size_t cap, char *msg, size_t msglen)
{
    /* without a trailing slash, so that the last component is the name */
    char arg[PATH_MAX];
    snprintf(arg, sizeof arg, "%s", given);
    for (size_t l = strlen(arg); l > 1 && arg[l - 1] == '/'; l--)
        arg[l - 1] = '\0';
    struct stat st;
    if (stat(arg, &st) != 0) {
        snprintf(msg, msglen, "--resume %s: %s", arg, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(msg, msglen, "--resume %s: not a directory", arg);
        return -1;
    }
    /* a checkpoint itself: by its files (a directory renamed by hand is
     * still one) */
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", arg, TRAIN_CKPT_STATE);
    const char *base = strrchr(arg, '/');
    uint64_t step;
    bool named = train_ckpt_parse_name(base ? base + 1 : arg, &step);
    if (named || access(p, F_OK) == 0) {
        const char *miss = train_ckpt_missing(arg);
        if (miss) {
            snprintf(msg, msglen,
                     "--resume %s: not a complete checkpoint (no %s): an interrupted save; "
                     "--resume the directory above it takes the latest complete one",
                     arg, miss);
            return -1;
        }
        snprintf(out, cap, "%s", arg);
        return 0;
    }
    train_ckpt_entry *e;
    size_t n;
    if (train_ckpt_list(arg, &e, &n) != 0) {
        snprintf(msg, msglen, "--resume %s: %s", arg, strerror(errno));
        return -1;
    }
    size_t i = n;
    while (i > 0 && !e[i - 1].complete)
        i--;
    if (i == 0) {
        if (n) {
            char c[PATH_MAX + 64];
            snprintf(c, sizeof c, "%s/" TRAIN_CKPT_PREFIX "%" PRIu64, arg, e[n - 1].step);
            const char *miss = train_ckpt_missing(c);
            snprintf(msg, msglen,
                     "--resume %s: no complete checkpoint in it (checkpoint-%" PRIu64
                     " has no %s)",
                     arg, e[n - 1].step, miss ? miss : "?");
        }
        else
            snprintf(msg, msglen, "--resume %s: no checkpoint-<step> directory in it", arg);
        free(e);
        return -1;
    }
    for (size_t j = i; j < n; j++) {
        char c[PATH_MAX + 64];
        snprintf(c, sizeof c, "%s/" TRAIN_CKPT_PREFIX "%" PRIu64, arg, e[j].step);
        const char *miss = train_ckpt_missing(c);
        char line[PATH_MAX + 256];
        snprintf(line, sizeof line,
                 "--resume: %s is incomplete (no %s), skipped: resuming from "
                 "checkpoint-%" PRIu64,
                 c, miss ? miss : "?", e[i - 1].step);
        char safe[sizeof line * 4];
        pg_text_escape(safe, sizeof safe, line);
        fprintf(stderr, "ptxgen-train: %s\n", safe);
    }
    snprintf(out, cap, "%s/" TRAIN_CKPT_PREFIX "%" PRIu64, arg, e[i - 1].step);
    free(e);
    return 0;
}

static int sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Remove dir and the plain files in it (a checkpoint holds nothing else;
 * a subdirectory left by hand makes rmdir fail, and the caller says so). */
static int remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
    return rmdir(dir);
}

int train_ckpt_begin(const char *outdir, char *tmp, size_t cap, char *msg, size_t msglen)
{
    if (mkdir(outdir, 0777) != 0 && errno != EEXIST) {
        snprintf(msg, msglen, "--output-dir %s: %s", outdir, strerror(errno));
        return -1;
    }
    int dfd = open(outdir, O_RDONLY | O_DIRECTORY);
    if (dfd < 0) {
        snprintf(msg, msglen, "--output-dir %s: %s", outdir, strerror(errno));
        return -1;
    }
    char name[PGRT_TEMP_NAME_MAX];
    int e = pgrt_temp_dir_create(dfd, name);
    close(dfd);
    if (e) {
        snprintf(msg, msglen, "--output-dir %s: cannot make a directory there: %s", outdir,
                 strerror(e));
        return -1;
    }
    snprintf(tmp, cap, "%s/%s", outdir, name);
    return 0;
}

void train_ckpt_abort(const char *tmp)
{
    if (tmp && *tmp)
        remove_dir(tmp);
}

int train_ckpt_write_file(const char *dir, const char *name, const char *text, size_t len,
                          char *msg, size_t msglen)
{
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0666);
    int e = 0;
    if (fd < 0)
        e = errno;
    else if ((e = pgrt_fd_write_all(fd, text, len)) == 0 && fsync(fd) != 0)
        e = errno;
    if (fd >= 0 && close(fd) != 0 && !e)
        e = errno;
    if (e) {
        snprintf(msg, msglen, "%s: %s", p, strerror(e));
        if (fd >= 0)
            unlink(p);
        return -1;
    }
    return 0;
}

int train_ckpt_commit(const char *outdir, const char *tmp, uint64_t step, char *final,
                      size_t cap, char *msg, size_t msglen)
{
    const char *miss = train_ckpt_missing(tmp);
    if (miss) {
        snprintf(msg, msglen, "%s: %s was not written", tmp, miss);
        return -1;
    }
    if (sync_dir(tmp) != 0) {
        snprintf(msg, msglen, "%s: %s", tmp, strerror(errno));
        return -1;
    }
    char name[64];
    train_ckpt_name(step, name, sizeof name);
    snprintf(final, cap, "%s/%s", outdir, name);
    /* a checkpoint of this step already there (a run resumed from an
     * earlier one): aside first, since rename does not replace a
     * directory that holds files */
    char old[PATH_MAX + 64] = "";
    struct stat st;
    if (lstat(final, &st) == 0) {
        int dfd = open(outdir, O_RDONLY | O_DIRECTORY);
        char aside[PGRT_TEMP_NAME_MAX];
        int e = dfd < 0 ? errno : pgrt_temp_dir_create(dfd, aside);
        if (dfd >= 0)
            close(dfd);
        if (e || (snprintf(old, sizeof old, "%s/%s", outdir, aside), rename(final, old) != 0)) {
            snprintf(msg, msglen, "%s: cannot move the old one aside: %s", final,
                     strerror(e ? e : errno));
            if (!e)
                rmdir(old);
            return -1;
        }
    }
    if (rename(tmp, final) != 0) {
        int e = errno;
        if (*old)
            rename(old, final);
        snprintf(msg, msglen, "%s: %s", final, strerror(e));
        return -1;
    }
    if (*old)
        remove_dir(old);
    if (sync_dir(outdir) != 0) {
        snprintf(msg, msglen, "%s: %s", outdir, strerror(errno));
        return -1;
    }
    return 0;
}

int train_ckpt_prune(const char *outdir, long long limit, char *msg, size_t msglen)
{
    if (limit <= 0)
        return 0;
    train_ckpt_entry *e;
    size_t n;
    if (train_ckpt_list(outdir, &e, &n) != 0) {
        snprintf(msg, msglen, "%s: %s", outdir, strerror(errno));
        return -1;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (e[i].complete)
            e[m++] = e[i];
    size_t drop = train_ckpt_prune_count(m, limit);
    int removed = 0;
    for (size_t i = 0; i < drop; i++) {
        char p[PATH_MAX + 64];
        snprintf(p, sizeof p, "%s/" TRAIN_CKPT_PREFIX "%" PRIu64, outdir, e[i].step);
        if (remove_dir(p) != 0) {
            snprintf(msg, msglen, "%s: cannot remove it: %s", p, strerror(errno));
            free(e);
            return -1;
        }
        removed++;
    }
    free(e);
    return removed;
}

int train_read_file(const char *path, size_t max, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        if (n == cap) {
            if (cap >= max) {
                free(buf);
                fclose(f);
                errno = EFBIG;
                return -1;
            }
            cap = cap * 2 > max ? max : cap * 2;
            char *g = realloc(buf, cap + 1);
            if (!g) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = g;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        free(buf);
        errno = buf ? EIO : ENOMEM;
        return -1;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return 0;
}

char *train_state_json(const train_state *st)
{
    char pos[2 * sizeof st->position + 8], log[6 * sizeof st->log_json + 8];
    train_json_quote(pos, sizeof pos, st->position);
    train_json_quote(log, sizeof log, st->log_json);
    size_t cap = sizeof pos + sizeof log + 512;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    snprintf(buf, cap,
             "{\n  \"step\": %" PRIu64 ",\n  \"total_steps\": %" PRIu64
             ",\n  \"epoch\": %.17g,\n  \"data_position\": %s,\n  \"seed\": %" PRIu64
             ",\n  \"optimizer_steps\": %" PRIu64 ",\n  \"skipped\": %" PRIu64
             ",\n  \"tokens\": %" PRIu64 ",\n  \"world\": %" PRIu64
             ",\n  \"log_json\": %s,\n  \"log_bytes\": %" PRIu64
             ",\n  \"rng\": null,\n  \"version\": \"%s\"\n}\n",
             st->step, st->total_steps, st->epoch, pos, st->seed, st->optimizer_steps,
             st->skipped, st->tokens, st->world ? st->world : 1, log, st->log_bytes,
             train_version());
    return buf;
}

int train_state_read(const char *dir, train_state *st, char *msg, size_t msglen)
{
    memset(st, 0, sizeof *st);
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/%s", dir, TRAIN_CKPT_STATE);
    char *text;
    size_t len;
    if (train_read_file(p, 1 << 20, &text, &len) != 0) {
        snprintf(msg, msglen, "%s: %s", p, strerror(errno));
        return -1;
    }
    pgrt_json *doc = NULL;
    int rc = pgrt_json_parse(text, len, NULL, p, &doc);
    free(text);
    if (rc) {
        snprintf(msg, msglen, "%s", pgrt_last_message());
        return -1;
    }
    const pgrt_jval *root = pgrt_json_root(doc);
    static const char *const ints[] = {"step", "total_steps", "seed", "optimizer_steps",
                                       "skipped", "tokens", "log_bytes"};
    uint64_t *dst[] = {&st->step, &st->total_steps, &st->seed, &st->optimizer_steps,
                       &st->skipped, &st->tokens, &st->log_bytes};
    const char *bad = NULL;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0] && !bad; i++) {
        int64_t v;
        if (pgrt_jval_int64(pgrt_jval_member(root, ints[i]), 0, INT64_MAX, &v))
            bad = ints[i];
        else
            *dst[i] = (uint64_t)v;
    }
    /* the ranks of the run: absent before several GPUs (one process) */
    const pgrt_jval *w = pgrt_jval_member(root, "world");
    int64_t world = 1;
    if (!bad && w && pgrt_jval_int64(w, 1, 1 << 20, &world))
        bad = "world";
    st->world = (uint64_t)world;
    const char *pos = pgrt_jval_string(pgrt_jval_member(root, "data_position"), NULL);
    if (!bad && pgrt_jval_double(pgrt_jval_member(root, "epoch"), &st->epoch))
        bad = "epoch";
    if (!bad && (!pos || strlen(pos) >= sizeof st->position))
        bad = "data_position";
    const char *log = pgrt_jval_string(pgrt_jval_member(root, "log_json"), NULL);
    if (!bad && (!log || strlen(log) >= sizeof st->log_json))
        bad = "log_json";
    if (!bad) {
        snprintf(st->position, sizeof st->position, "%s", pos);
        snprintf(st->log_json, sizeof st->log_json, "%s", log);
    }
    pgrt_json_destroy(&doc);
    if (bad) {
        snprintf(msg, msglen, "%s: %s is missing or not valid", p, bad);
        return -1;
    }
    return 0;
}
