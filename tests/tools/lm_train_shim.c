/* SPDX-License-Identifier: MIT */
/*
 * A stand-in for the trainer's API (pgrt_lm_train and the functions around
 * it in pgrt_lm.h), preloaded (LD_PRELOAD) into ptxgen-train by
 * train_cli_model.c, so that the command's loop, checkpoints and resume are
 * tested on the CPU against the fake driver, whose steps compute nothing.
 * Test-local: it is never linked into the library or the tool, and it
 * replaces the runtime's own functions while preloaded.
 *
 * Its "model" is one number w, moved by every optimizer step and kept in
 * the optimizer state file; a micro-batch's loss is a function of its ids,
 * its targets and w. So a resumed run gives the losses of an uninterrupted
 * one only if it resumes with the state, the data position and the step
 * count all right. It checks what the tool passes: step_targets against
 * the step's micro-batches, and that state is saved at step boundaries.
 *
 * Environment (N counts the steps the optimizer took, as pgrt_lm_steps):
 * SHIM_SIGNAL_AT=N raises SIGINT (SHIM_SIGNAL=15: SIGTERM) as step N ends,
 * twice with SHIM_SIGNAL_TWICE; SHIM_CRASH_SAVE_AT=N exits (status 9, as
 * a crash) inside the save of the optimizer state after step N;
 * SHIM_SKIP_AT=N skips the step after N-1 once (a non-finite gradient).
 */
#define _GNU_SOURCE /* RTLD_NEXT */
#include "ptxgen/pgrt_lm.h"

#include <dlfcn.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SHIM_API __attribute__((visibility("default")))

static struct {
    pgrt_lm *lm;
    int accum, batch, seq;
    float lr;
    pgrt_lm_schedule sc;
    double w;
    unsigned long long steps, calls, step_targets_seen, step_targets;
} S;

static long long env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? atoll(v) : -1;
}

SHIM_API int pgrt_lm_create(pgrt_ctx *ctx, const pgrt_lm_params *p, pgrt_lm **out)
{
    /* ISO C has no conversion between object and function pointers */
    int (*real)(pgrt_ctx *, const pgrt_lm_params *, pgrt_lm **);
    void *sym = dlsym(RTLD_NEXT, "pgrt_lm_create");
    memcpy(&real, &sym, sizeof real);
    if (!real)
        return PGRT_EINVAL;
    int rc = real(ctx, p, out);
    if (rc)
        return rc;
    memset(&S, 0, sizeof S);
    S.lm = *out;
    S.accum = p->grad_accum > 1 ? p->grad_accum : 1;
    S.batch = p->batch;
    S.seq = p->seq;
    S.lr = p->lr;
    S.sc = p->schedule;
    S.w = 1.0;
    return 0;
}

static double sched_lr(unsigned long long s)
{
    const pgrt_lm_schedule *sc = &S.sc;
    if (s < sc->warmup_steps)
        return S.lr * (double)s / sc->warmup_steps;
    if (sc->kind == PGRT_LM_SCHED_CONSTANT)
        return S.lr;
    double span = sc->total_steps > sc->warmup_steps ? sc->total_steps - sc->warmup_steps : 1;
    double p = ((double)s - sc->warmup_steps) / span;
    p = p < 0 ? 0 : p > 1 ? 1 : p;
    double g = sc->kind == PGRT_LM_SCHED_LINEAR ? 1 - p : (1 + cos(3.14159265358979323846 * p)) / 2;
    return S.lr * (sc->floor + (1 - sc->floor) * g);
}

/* The batch's loss under w: each target's id weighs in. */
static void batch_loss(const pgrt_lm_batch *b, double *sum, unsigned long long *targets)
{
    *sum = 0;
    *targets = 0;
    for (int r = 0; r < S.batch; r++)
        for (int t = 0; t < S.seq; t++) {
            size_t i = (size_t)r * (size_t)S.seq + (size_t)t;
            int32_t y = b->targets ? b->targets[i] : t + 1 < S.seq ? b->ids[i + 1] : -100;
            if (y < 0)
                continue;
            *sum += log(2.0 + (double)((y * 7 + b->ids[i]) % 13)) * S.w;
            (*targets)++;
        }
}

SHIM_API int pgrt_lm_train(pgrt_lm *lm, pgrt_stream *s, const pgrt_lm_batch *b,
                           pgrt_lm_result *r)
{
    (void)s;
    if (lm != S.lm)
        return PGRT_EINVAL;
    double sum;
    unsigned long long n;
    batch_loss(b, &sum, &n);
    if (!n || !b->step_targets)
        return PGRT_EINVAL;
    if (S.calls % (unsigned long long)S.accum == 0) {
        S.step_targets = b->step_targets;
        S.step_targets_seen = 0;
    } else if (b->step_targets != S.step_targets) {
        fprintf(stderr, "shim: step_targets changed inside a step\n");
        return PGRT_EINVAL;
    }
    S.step_targets_seen += n;
    S.calls++;
    pgrt_lm_result res = {.loss_sum = sum, .targets = n};
    if (S.calls % (unsigned long long)S.accum == 0) {
        if (S.step_targets_seen != S.step_targets) {
            fprintf(stderr, "shim: step_targets %llu, the micro-batches held %llu\n",
                    S.step_targets, S.step_targets_seen);
            return PGRT_EINVAL;
        }
        res.updated = true;
        static bool skipped_once;
        if (env("SHIM_SKIP_AT") == (long long)S.steps + 1 && !skipped_once) {
            skipped_once = true;
            res.skipped = true;
            res.grad_norm = INFINITY;
            res.lr = (float)sched_lr(S.steps);
        } else {
            res.lr = (float)sched_lr(S.steps);
            S.w = S.w * (1 - res.lr) + 0.25 * res.lr * sum / (double)n;
            res.grad_norm = (float)S.w;
            S.steps++;
        }
        if (env("SHIM_SIGNAL_AT") == (long long)S.steps) {
            int sig = env("SHIM_SIGNAL") == 15 ? SIGTERM : SIGINT;
            raise(sig);
            if (env("SHIM_SIGNAL_TWICE") > 0)
                raise(sig);
        }
    }
    if (r)
        *r = res;
    return 0;
}

SHIM_API int pgrt_lm_eval(pgrt_lm *lm, pgrt_stream *s, const pgrt_lm_batch *b,
                          pgrt_lm_result *r)
{
    (void)s;
    if (lm != S.lm || S.calls % (unsigned long long)S.accum)
        return PGRT_ESTATE;
    double sum;
    unsigned long long n;
    batch_loss(b, &sum, &n);
    if (r)
        *r = (pgrt_lm_result){.loss_sum = sum, .targets = n};
    return 0;
}

SHIM_API int pgrt_lm_pending(const pgrt_lm *lm)
{
    return lm == S.lm ? (int)(S.calls % (unsigned long long)S.accum) : PGRT_EINVAL;
}

SHIM_API int pgrt_lm_steps(pgrt_lm *lm, pgrt_stream *s, uint64_t *steps)
{
    (void)s;
    if (lm != S.lm)
        return PGRT_EINVAL;
    *steps = S.steps;
    return 0;
}

SHIM_API int pgrt_lm_state_save(pgrt_lm *lm, pgrt_stream *s, const char *path)
{
    (void)s;
    if (lm != S.lm || S.calls % (unsigned long long)S.accum)
        return PGRT_ESTATE;
    if (env("SHIM_CRASH_SAVE_AT") == (long long)S.steps)
        _exit(9);
    FILE *f = fopen(path, "w");
    if (!f)
        return PGRT_EINVAL;
    fprintf(f, "%a %llu\n", S.w, S.steps);
    return fclose(f) ? PGRT_EINVAL : 0;
}

SHIM_API int pgrt_lm_state_load(pgrt_lm *lm, pgrt_stream *s, const char *path)
{
    (void)s;
    if (lm != S.lm)
        return PGRT_EINVAL;
    FILE *f = fopen(path, "r");
    if (!f)
        return PGRT_EINVAL;
    int n = fscanf(f, "%la %llu", &S.w, &S.steps);
    fclose(f);
    S.calls = 0;
    return n == 2 ? 0 : PGRT_EINVAL;
}
