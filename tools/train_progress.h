/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-train --model: what a run says as it goes. The progress line on
 * stderr (rewritten in place on a terminal, else a plain line every
 * --log-every steps) and the JSONL log of --log-json, one object a line,
 * written and flushed as each optimizer step and each evaluation ends.
 */
#ifndef PTXGEN_TRAIN_PROGRESS_H
#define PTXGEN_TRAIN_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ log */

/* One optimizer step. */
typedef struct train_step_rec {
    uint64_t step;     /* 1-based */
    double epoch;      /* at the step's end */
    double loss;       /* the mean over the step's targets (every micro-batch) */
    double lr;         /* the learning rate the step used */
    double grad_norm;  /* before clipping */
    uint64_t tokens;   /* ids the step read: grad-accum x batch x seq */
    double ms;         /* the step's wall time */
    double elapsed_s;  /* since the run (this process) started training */
    bool skipped;      /* a non-finite gradient: nothing moved */
    /* rows passed over before the step's micro-batches for holding no
     * target (train_source_next_trained); in the log only when not 0 */
    uint64_t rows_without_targets;
} train_step_rec;

/* One evaluation, after optimizer step `step`. */
typedef struct train_eval_rec {
    uint64_t step;
    double epoch;
    double loss;       /* the mean over every target of the batches */
    uint64_t targets;
    uint64_t batches;
    double elapsed_s;
} train_eval_rec;

typedef struct train_log train_log;

/* --log-json PATH. Fresh (keep_bytes < 0): the path is replaced by an
 * empty file first (a link there is replaced, not written through), then
 * appended to. Resumed (keep_bytes >= 0): the existing file is cut to
 * keep_bytes (the lines an interrupted run wrote past its checkpoint go)
 * and appended to; a file shorter than that, or not ending a line there,
 * is appended to as it is, with a line on stderr saying so. 0, or -1 with
 * msg. */
int train_log_open(const char *path, long long keep_bytes, train_log **out, char *msg,
                   size_t msglen);
/* One line, written with one write(2): 0 or -1 with errno. */
int train_log_step(train_log *l, const train_step_rec *r);
int train_log_eval(train_log *l, const train_eval_rec *r);
/* Bytes in the file after the last line written (a checkpoint keeps it). */
uint64_t train_log_bytes(const train_log *l);
void train_log_close(train_log **l);

/* The lines as train_log_* writes them, into buf (for the tests). */
size_t train_log_step_line(char *buf, size_t cap, const train_step_rec *r);
size_t train_log_eval_line(char *buf, size_t cap, const train_eval_rec *r);

/* ------------------------------------------------------------- progress */

typedef struct train_progress {
    const char *name; /* "eager", "graph" */
    bool tty;         /* rewrite one line with \r */
    long long every;  /* --log-every: a plain line every K steps */
    uint64_t first, total; /* the session's first step (1-based) and the run's last */
    double t0_ms;     /* when the session's first step began */
    double last_ms;   /* the last time a line was printed (tty) */
    size_t width;     /* of the line on screen (tty), to blank its tail */
} train_progress;

void train_progress_init(train_progress *p, const char *name, bool tty, long long every,
                         uint64_t first, uint64_t total, double now_ms);
/* Is a line due after step (1-based) at now_ms? The caller then asks the
 * device its memory (only then: a driver call) and prints. */
bool train_progress_due(train_progress *p, uint64_t step, double now_ms);
/* The line for step: loss, lr, tokens/s, ETA, memory (mem_total 0: not
 * known). */
void train_progress_print(train_progress *p, const train_step_rec *r, double tokens_per_s,
                          size_t mem_used, size_t mem_total, double now_ms);
/* A line of its own (an evaluation, a checkpoint), after the progress
 * line is ended on a terminal. */
void train_progress_note(train_progress *p, const char *line);
/* The run's last line ended (tty). */
void train_progress_end(train_progress *p);

/* The progress line into buf (no line end). */
size_t train_progress_line(char *buf, size_t cap, const char *name, const train_step_rec *r,
                           uint64_t total, double tokens_per_s, double eta_s, size_t mem_used,
                           size_t mem_total);
/* A duration as "45s", "3m12s", "2h05m", "3d04h". */
void train_fmt_duration(double s, char *buf, size_t cap);

#endif
