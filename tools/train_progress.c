/* SPDX-License-Identifier: MIT */
/*
 * The progress line and the JSONL log. A log line is formatted whole and
 * written with one write(2) on a descriptor opened O_APPEND, so a crash
 * leaves whole lines (or, at worst, one cut short at the end, which a
 * resume cuts away with everything after its checkpoint).
 */
#include "train_progress.h"

#include "safe_write.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct train_log {
    int fd;
    uint64_t bytes;
};

/* A number as JSON, the shortest text that reads back as the same
 * double (so that two runs' logs are equal exactly when their losses are
 * bit for bit); non-finite ones (a diverged loss) are null. */
static void num(char *buf, size_t cap, double x)
{
    if (!isfinite(x)) {
        snprintf(buf, cap, "null");
        return;
    }
    for (int prec = 9; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            return;
    }
}

/* A float (lr, grad_norm) as the shortest text that reads back as it. */
static void num_f(char *buf, size_t cap, double x)
{
    if (!isfinite(x)) {
        snprintf(buf, cap, "null");
        return;
    }
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, cap, "%.*g", prec, x);
        if ((float)strtod(buf, NULL) == (float)x)
            return;
    }
}

size_t train_log_step_line(char *buf, size_t cap, const train_step_rec *r)
{
    char loss[32], lr[32], gn[32];
    num(loss, sizeof loss, r->loss);
    num_f(lr, sizeof lr, r->lr);
    num_f(gn, sizeof gn, r->grad_norm);
    int n = snprintf(buf, cap,
                     "{\"step\": %" PRIu64 ", \"epoch\": %.6f, \"loss\": %s, \"lr\": %s, "
                     "\"grad_norm\": %s, \"tokens\": %" PRIu64 ", \"tokens_per_s\": %.1f, "
                     "\"ms\": %.4f, \"elapsed_s\": %.3f, \"skipped\": %s",
                     r->step, r->epoch, loss, lr, gn, r->tokens,
                     r->ms > 0 ? (double)r->tokens / r->ms * 1e3 : 0.0, r->ms, r->elapsed_s,
                     r->skipped ? "true" : "false");
    if (n < 0)
        return 0;
    size_t at = (size_t)n < cap ? (size_t)n : cap - 1;
    if (r->rows_without_targets)
        n = snprintf(buf + at, cap - at, ", \"rows_without_targets\": %" PRIu64 "}\n",
                     r->rows_without_targets);
    else
        n = snprintf(buf + at, cap - at, "}\n");
    if (n < 0)
        return at;
    at += (size_t)n;
    return at < cap ? at : cap - 1;
}

size_t train_log_eval_line(char *buf, size_t cap, const train_eval_rec *r)
{
    char loss[32], ppl[32];
    num(loss, sizeof loss, r->loss);
    num(ppl, sizeof ppl, exp(r->loss));
    int n = snprintf(buf, cap,
                     "{\"step\": %" PRIu64 ", \"epoch\": %.6f, \"eval_loss\": %s, "
                     "\"eval_perplexity\": %s, \"eval_targets\": %" PRIu64
                     ", \"eval_batches\": %" PRIu64 ", \"elapsed_s\": %.3f}\n",
                     r->step, r->epoch, loss, ppl, r->targets, r->batches, r->elapsed_s);
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

int train_log_open(const char *path, long long keep_bytes, train_log **out, char *msg,
                   size_t msglen)
{
    *out = NULL;
    int fd = -1, e;
    struct stat st;
    if (keep_bytes < 0 || lstat(path, &st) != 0) {
        /* fresh, or the resumed run's log gone: an empty file by a rename,
         * so that a link at the path is replaced rather than written
         * through */
        if ((e = pgrt_file_replace(path, NULL, 0, false))) {
            snprintf(msg, msglen, "--log-json %s: %s", path, strerror(e));
            return -1;
        }
        if (keep_bytes > 0)
            fprintf(stderr, "ptxgen-train: --log-json: the log was gone; a new one begins at "
                            "the checkpoint\n");
        keep_bytes = 0;
    }
    fd = open(path, O_RDWR | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(msg, msglen, "--log-json %s: %s", path,
                 fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    uint64_t at = (uint64_t)st.st_size;
    if ((uint64_t)keep_bytes <= at) {
        /* the checkpoint's bytes must end a line */
        char c = '\n';
        if (keep_bytes > 0 && pread(fd, &c, 1, (off_t)keep_bytes - 1) != 1)
            c = 0;
        if (c == '\n') {
            if (ftruncate(fd, (off_t)keep_bytes) != 0) {
                snprintf(msg, msglen, "--log-json %s: %s", path, strerror(errno));
                close(fd);
                return -1;
            }
            at = (uint64_t)keep_bytes;
        } else {
            fprintf(stderr, "ptxgen-train: --log-json: the log does not end a line where the "
                            "checkpoint left it; appended to as it is\n");
        }
    } else {
        fprintf(stderr, "ptxgen-train: --log-json: the log is shorter than at the checkpoint; "
                        "appended to as it is\n");
    }
    train_log *l = malloc(sizeof *l);
    if (!l) {
        close(fd);
        snprintf(msg, msglen, "--log-json: out of host memory");
        return -1;
    }
    l->fd = fd;
    l->bytes = at;
    *out = l;
    return 0;
}

static int put(train_log *l, const char *line, size_t n)
{
    int e = pgrt_fd_write_all(l->fd, line, n);
    if (e) {
        errno = e;
        return -1;
    }
    l->bytes += n;
    return 0;
}

int train_log_step(train_log *l, const train_step_rec *r)
{
    char line[512];
    return put(l, line, train_log_step_line(line, sizeof line, r));
}

int train_log_eval(train_log *l, const train_eval_rec *r)
{
    char line[512];
    return put(l, line, train_log_eval_line(line, sizeof line, r));
}

uint64_t train_log_bytes(const train_log *l) { return l ? l->bytes : 0; }

void train_log_close(train_log **l)
{
    if (!l || !*l)
        return;
    close((*l)->fd);
    free(*l);
    *l = NULL;
}

void train_fmt_duration(double s, char *buf, size_t cap)
{
    if (!isfinite(s) || s < 0) {
        snprintf(buf, cap, "?");
        return;
    }
    unsigned long long t = (unsigned long long)(s + 0.5);
    if (t < 60)
        snprintf(buf, cap, "%llus", t);
    else if (t < 3600)
        snprintf(buf, cap, "%llum%02llus", t / 60, t % 60);
    else if (t < 86400)
        snprintf(buf, cap, "%lluh%02llum", t / 3600, t / 60 % 60);
    else
        snprintf(buf, cap, "%llud%02lluh", t / 86400, t / 3600 % 24);
}

size_t train_progress_line(char *buf, size_t cap, const char *name, const train_step_rec *r,
                           uint64_t total, double tokens_per_s, double eta_s, size_t mem_used,
                           size_t mem_total)
{
    char eta[32], mem[64] = "";
    train_fmt_duration(eta_s, eta, sizeof eta);
    if (mem_total)
        snprintf(mem, sizeof mem, "  mem %.1f/%.1f GiB", mem_used / 1073741824.0,
                 mem_total / 1073741824.0);
    int n = snprintf(buf, cap,
                     "%s step %" PRIu64 "/%" PRIu64 "  loss %.6f  lr %.3e  grad_norm %.4g  "
                     "%.0f tokens/s  ETA %s%s%s",
                     name, r->step, total, r->loss, r->lr, r->grad_norm, tokens_per_s, eta, mem,
                     r->skipped ? "  (skipped: non-finite gradient)" : "");
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}

void train_progress_init(train_progress *p, const char *name, bool tty, long long every,
                         uint64_t first, uint64_t total, double now_ms)
{
    memset(p, 0, sizeof *p);
    p->name = name;
    p->tty = tty;
    p->every = every > 0 ? every : 1;
    p->first = first;
    p->total = total;
    p->t0_ms = now_ms;
    p->last_ms = -1e30;
}

bool train_progress_due(train_progress *p, uint64_t step, double now_ms)
{
    if (step == p->first || step == p->total)
        return true;
    /* a terminal: at most five rewrites a second, however fast the steps */
    if (p->tty)
        return now_ms - p->last_ms >= 200;
    return step % (uint64_t)p->every == 0;
}

void train_progress_print(train_progress *p, const train_step_rec *r, double tokens_per_s,
                          size_t mem_used, size_t mem_total, double now_ms)
{
    uint64_t done = r->step - p->first + 1;
    double per = (now_ms - p->t0_ms) / 1e3 / (double)done;
    double eta = per * (double)(p->total - r->step);
    char line[512];
    size_t n = train_progress_line(line, sizeof line, p->name, r, p->total, tokens_per_s, eta,
                                   mem_used, mem_total);
    if (p->tty) {
        /* blank what a longer line before left */
        fprintf(stderr, "\r%s%*s", line, p->width > n ? (int)(p->width - n) : 0, "");
        p->width = n;
    } else {
        fprintf(stderr, "%s\n", line);
    }
    fflush(stderr);
    p->last_ms = now_ms;
}

void train_progress_note(train_progress *p, const char *line)
{
    if (p->tty && p->width) {
        fputc('\n', stderr);
        p->width = 0;
    }
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
}

void train_progress_end(train_progress *p)
{
    if (p->tty && p->width) {
        fputc('\n', stderr);
        p->width = 0;
    }
}
