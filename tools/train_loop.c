/* SPDX-License-Identifier: MIT */
/*
 * The training loop of ptxgen-train --model. An optimizer step first takes
 * its --grad-accum micro-batches from the source, so that every one is
 * told the whole step's target count (pgrt_lm_batch.step_targets: the
 * loss is the mean over the step), then trains on them in turn; the last
 * call updates. Host work a step: the source's copy of the ids, one log
 * line, a flag read, and a progress line when one is due.
 */
#include "train_loop.h"
#include "train_hf.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

static volatile sig_atomic_t stop_signal;

/* The first signal asks for a stop at the next step boundary; a second
 * exits at once. Under the --gpus launcher a signal can arrive twice for
 * one stop (a scheduler that signals every process, and the launcher, or
 * torchrun's agent, passing it on): a repeat from the parent process is
 * not a second request. A terminal's second Ctrl-C comes from the kernel;
 * under --gpus it reaches the launcher, which kills the ranks. */
static void on_signal(int sig, siginfo_t *info, void *ctx)
{
    (void)ctx;
    if (stop_signal) {
        if (info && info->si_pid != 0 && info->si_pid == getppid())
            return;
        _exit(128 + sig);
    }
    stop_signal = sig;
}

/* Several GPUs under the --gpus launcher: SIGUSR1 says another rank has
 * failed, so no collective can finish and no stop can be agreed. The
 * watchdog ends the rank at once (after a checkpoint being written is
 * whole); before it runs, the handler does. */
static volatile sig_atomic_t peer_lost;
static atomic_bool watching;

static void on_peer_lost(int sig)
{
    (void)sig;
    peer_lost = 1;
    if (!atomic_load(&watching)) {
        static const char msg[] = "ptxgen-train: another rank failed (the launcher says so); "
                                  "exiting\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        _exit(TRAIN_EXIT_FAIL);
    }
}

void train_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    struct sigaction su;
    memset(&su, 0, sizeof su);
    su.sa_handler = on_peer_lost;
    sigemptyset(&su.sa_mask);
    su.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &su, NULL);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Several GPUs: the last bound of the run's waits. Every wait of a rank on
 * the others is bounded (pgrt_comm_wait, --dist-timeout), but a rank whose
 * peer died mid-collective can still be held where no bound reaches: in
 * the driver or in NCCL's own abort. The watchdog is the bound behind the
 * bounds: a rank that has not passed a step, an evaluation batch or a
 * checkpoint for --dist-timeout says so and exits; so does one whose
 * launcher reports a failed rank (SIGUSR1), at once unless a checkpoint is
 * being written. */
typedef struct watchdog {
    pthread_t th;
    bool running;
    atomic_llong beat_ms; /* now_ms() at the last progress */
    atomic_bool stop;
    atomic_bool writing; /* a checkpoint: no exit on peer_lost until it is whole */
    double limit_ms;
    int rank, world;
} watchdog;

static void watchdog_beat(watchdog *w)
{
    if (w->running)
        atomic_store(&w->beat_ms, (long long)now_ms());
}

static void *watchdog_run(void *arg)
{
    watchdog *w = arg;
    while (!atomic_load(&w->stop)) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        if (peer_lost && !atomic_load(&w->writing) && !atomic_load(&w->stop)) {
            fprintf(stderr, "ptxgen-train: rank %d of %d: another rank failed (the launcher says "
                            "so); exiting\n", w->rank, w->world);
            fflush(stderr);
            _exit(TRAIN_EXIT_FAIL);
        }
        double idle = now_ms() - (double)atomic_load(&w->beat_ms);
        if (idle > w->limit_ms && !atomic_load(&w->stop)) {
            fprintf(stderr, "ptxgen-train: rank %d of %d: no progress for %.0f s (the other ranks "
                            "stopped or a collective cannot be aborted); exiting\n",
                    w->rank, w->world, idle / 1e3);
            fflush(stderr);
            _exit(TRAIN_EXIT_FAIL);
        }
    }
    return NULL;
}

static void watchdog_start(watchdog *w, double timeout_s, int rank, int world)
{
    /* a second early (half of a short bound), so that the rank is gone,
     * its context torn down by the driver (0.2 s measured), within the
     * bound */
    w->limit_ms = (timeout_s - (timeout_s >= 2 ? 1 : timeout_s / 2)) * 1e3;
    w->rank = rank;
    w->world = world;
    atomic_store(&w->stop, false);
    atomic_store(&w->writing, false);
    atomic_store(&w->beat_ms, (long long)now_ms());
    w->running = pthread_create(&w->th, NULL, watchdog_run, w) == 0;
    atomic_store(&watching, w->running);
}

static void watchdog_stop(watchdog *w)
{
    if (!w->running)
        return;
    atomic_store(&w->stop, true);
    pthread_join(w->th, NULL);
    w->running = false;
    atomic_store(&watching, false);
}

/* The run's state between steps. */
typedef struct loop {
    const train_run_in *in;
    const train_opts *o;
    pgrt_lm *lm;
    pgrt_stream *s;
    int rows, seq, accum;
    size_t n; /* rows x seq */
    /* several GPUs: a micro-batch is world x rows rows of the source, this
     * rank's the rows from rank x rows on (one process: world 1, rank 0) */
    int world, rank;
    bool writes; /* rank 0: the log, progress and checkpoints */
    watchdog dog; /* several GPUs */
    train_batch *mb; /* accum micro-batches (world x rows rows each) */
    train_batch ev;  /* an evaluation batch (its targets always there) */
    uint64_t step, skipped, tokens, opt_steps;
    double t0_ms;
    train_progress prog;
    pgrt_adapter *scratch; /* the adapter a checkpoint writes */
    char msg[2 * PATH_MAX + 512];
} loop;

/* This rank's rows of a micro-batch of the source. */
static pgrt_lm_batch rank_rows(const loop *L, const train_batch *b, bool targets, bool packed,
                               uint64_t step_targets)
{
    size_t at = (size_t)L->rank * L->n;
    return (pgrt_lm_batch){.ids = b->ids + at,
                           .targets = targets ? b->targets + at : NULL,
                           .pos = packed ? b->pos + at : NULL,
                           .doc_start = packed ? b->doc_start + at : NULL,
                           .step_targets = step_targets};
}

/* Several GPUs: the stop signal any rank got, so that all stop after the
 * same step (a launcher's Ctrl-C reaches each at its own moment). */
static int agreed_stop(loop *L, int *sig)
{
    *sig = stop_signal;
    if (!L->in->comm)
        return 0;
    double v = *sig;
    int rc = pgrt_comm_all_reduce_host(L->in->comm, L->s, &v, 1, PGRT_COMM_MAX);
    *sig = (int)v;
    return rc;
}

static int alloc_batch(train_batch *b, int rows, int seq, bool targets, bool packed)
{
    size_t n = (size_t)rows * (size_t)seq;
    memset(b, 0, sizeof *b);
    b->rows = rows;
    b->seq = seq;
    b->ids = malloc(n * sizeof *b->ids);
    if (targets)
        b->targets = malloc(n * sizeof *b->targets);
    if (packed) {
        b->pos = malloc(n * sizeof *b->pos);
        b->doc_start = malloc(n * sizeof *b->doc_start);
    }
    return b->ids && (!targets || b->targets) && (!packed || (b->pos && b->doc_start)) ? 0 : -1;
}

static void free_batch(train_batch *b)
{
    free(b->ids);
    free(b->targets);
    free(b->pos);
    free(b->doc_start);
    memset(b, 0, sizeof *b);
}

static int fail_rt(loop *L, const char *what, int rc)
{
    train_progress_end(&L->prog);
    fprintf(stderr, "ptxgen-train: %s: %s: %s\n", what, pgrt_err_name(rc), train_last_message());
    return TRAIN_EXIT_FAIL;
}

/* Evaluation: the first --eval-batches micro-batches of the eval source
 * from its start (every row once when not given: the rows of a last
 * partial batch past the set's end have no target). */
static int evaluate(loop *L, train_eval_rec *rec)
{
    const train_run_in *in = L->in;
    train_source *ev = in->eval;
    if (ev->ops->position_set(ev, in->eval_start, L->msg, sizeof L->msg)) {
        train_say("--eval-data: %s", L->msg);
        return TRAIN_EXIT_FAIL;
    }
    uint64_t rows = ev->ops->rows_per_epoch(ev), all = (uint64_t)L->rows * (uint64_t)L->world;
    uint64_t nb = L->o->eval_batches ? (uint64_t)L->o->eval_batches : (rows + all - 1) / all;
    double sum = 0;
    uint64_t targets = 0;
    for (uint64_t i = 0; i < nb; i++) {
        train_batch *b = &L->ev;
        int rc = ev->ops->next(ev, b, L->msg, sizeof L->msg);
        if (rc) {
            train_progress_end(&L->prog);
            train_say("--eval-data: %s", L->msg);
            return TRAIN_EXIT_FAIL;
        }
        uint64_t valid = L->o->eval_batches ? all : rows - i * all;
        bool own = ev->has_targets;
        if (valid < all) {
            /* the set ends inside this batch: the targets made explicit
             * (the next id in the row), the rows past the end without */
            size_t S = (size_t)L->seq;
            for (size_t r = 0; r < (size_t)all; r++)
                for (size_t t = 0; t < S; t++) {
                    int32_t *x = &b->targets[r * S + t];
                    if (r >= valid)
                        *x = -100;
                    else if (!ev->has_targets)
                        *x = t + 1 < S ? b->ids[r * S + t + 1] : -100;
                }
            own = true;
        }
        pgrt_lm_batch lb = rank_rows(L, b, own, ev->packed, 0);
        pgrt_lm_result r;
        if ((rc = pgrt_lm_eval(L->lm, L->s, &lb, &r)))
            return fail_rt(L, "evaluation", rc);
        sum += r.loss_sum;
        targets += r.targets;
        watchdog_beat(&L->dog);
    }
    memset(rec, 0, sizeof *rec);
    rec->step = L->step;
    rec->epoch = in->src->ops->epoch(in->src);
    rec->loss = targets ? sum / (double)targets : NAN;
    rec->targets = targets;
    rec->batches = nb;
    rec->elapsed_s = (now_ms() - L->t0_ms) / 1e3;
    return 0;
}

static int save_checkpoint(loop *L, char *where, size_t cap)
{
    const train_run_in *in = L->in;
    const char *out = L->o->output_dir;
    char tmp[PATH_MAX + 64] = "", p[PATH_MAX + 128];
    const char *lib = NULL; /* a library call that failed: its message */
    int rc;
    if (pgrt_lm_pending(L->lm) != 0) {
        fprintf(stderr, "ptxgen-train: checkpoint at step %" PRIu64 ": inside an optimizer "
                        "step\n", L->step);
        return TRAIN_EXIT_FAIL;
    }
    if (train_ckpt_begin(out, tmp, sizeof tmp, L->msg, sizeof L->msg))
        goto failed;
    if ((rc = pgrt_lm_adapter_get(L->lm, L->scratch)) || (rc = pgrt_adapter_save(L->scratch, tmp))) {
        lib = "the adapter";
        goto failed;
    }
    snprintf(p, sizeof p, "%s/%s", tmp, TRAIN_CKPT_OPTIMIZER);
    if ((rc = pgrt_lm_state_save(L->lm, L->s, p))) {
        lib = "the optimizer state";
        goto failed;
    }
    uint64_t opt_steps = L->opt_steps;
    if ((rc = pgrt_lm_steps(L->lm, L->s, &opt_steps))) {
        lib = "pgrt_lm_steps";
        goto failed;
    }
    train_state st = {
        .step = L->step,
        .total_steps = in->total,
        .optimizer_steps = opt_steps,
        .skipped = L->skipped,
        .seed = (uint64_t)L->o->seed,
        .log_bytes = train_log_bytes(in->log),
        .tokens = L->tokens,
        .world = (uint64_t)L->world,
        .epoch = in->src->ops->epoch(in->src),
    };
    in->src->ops->position_get(in->src, st.position);
    if (in->log && L->o->log_json)
        train_path_absolute(L->o->log_json, st.log_json, sizeof st.log_json);
    char *state = train_state_json(&st);
    if (!state) {
        snprintf(L->msg, sizeof L->msg, "out of host memory");
        goto failed;
    }
    rc = train_ckpt_write_file(tmp, TRAIN_CKPT_CONFIG, in->run_config, strlen(in->run_config),
                               L->msg, sizeof L->msg) ||
         train_ckpt_write_file(tmp, TRAIN_CKPT_STATE, state, strlen(state), L->msg,
                               sizeof L->msg);
    free(state);
    if (rc || train_ckpt_commit(out, tmp, L->step, where, cap, L->msg, sizeof L->msg))
        goto failed;
    int pruned = train_ckpt_prune(out, L->o->save_total_limit, L->msg, sizeof L->msg);
    if (pruned < 0) {
        /* the new checkpoint is whole: say so, and go on */
        train_progress_end(&L->prog);
        train_say("--save-total-limit: %s", L->msg);
    }
    return 0;
failed:
    train_progress_end(&L->prog);
    /* the library's messages are escaped already */
    if (lib)
        fprintf(stderr, "ptxgen-train: checkpoint at step %" PRIu64 " failed: %s: %s\n",
                L->step, lib, train_last_message());
    else
        train_say("checkpoint at step %" PRIu64 " failed: %s", L->step, L->msg);
    train_ckpt_abort(tmp);
    return TRAIN_EXIT_FAIL;
}

/* One optimizer step: its micro-batches fetched, then trained on. */
static int one_step(loop *L, train_step_rec *rec)
{
    const train_run_in *in = L->in;
    train_source *src = in->src;
    double t0 = now_ms();
    uint64_t step_targets = 0, passed = 0;
    /* pgrt_lm_train refuses a micro-batch with no target, and every call
     * counts toward the step's --grad-accum: such a micro-batch (masked
     * data: rows of prompts only) is passed over for the next one, its
     * rows counted in the log, so that each step still has its
     * micro-batches and the loss is the mean over the targets they hold.
     * The position moves past them: a resumed run passes over the same. */
    for (int m = 0; m < L->accum; m++) {
        int rc = train_source_next_trained(src, &L->mb[m], &passed, L->msg, sizeof L->msg);
        if (rc) {
            train_progress_end(&L->prog);
            train_say("%s: %s", src->opt, L->msg);
            return TRAIN_EXIT_FAIL;
        }
        step_targets += L->mb[m].ntargets;
    }
    double sum = 0;
    uint64_t targets = 0;
    pgrt_lm_result r = {0};
    for (int m = 0; m < L->accum; m++) {
        pgrt_lm_batch lb = rank_rows(L, &L->mb[m], src->has_targets, src->packed, step_targets);
        int rc = pgrt_lm_train(L->lm, L->s, &lb, &r);
        if (rc)
            return fail_rt(L, "training step", rc);
        watchdog_beat(&L->dog);
        sum += r.loss_sum;
        targets += r.targets;
    }
    if (!r.updated) {
        train_progress_end(&L->prog);
        fprintf(stderr, "ptxgen-train: step %" PRIu64 ": %d micro-batches did not end an "
                        "optimizer step (--grad-accum %d)\n",
                L->step + 1, L->accum, L->accum);
        return TRAIN_EXIT_FAIL;
    }
    L->step++;
    uint64_t tokens = (uint64_t)L->accum * L->n * (uint64_t)L->world;
    L->tokens += tokens;
    if (r.skipped)
        L->skipped++;
    else
        L->opt_steps++;
    double ms = now_ms() - t0;
    *rec = (train_step_rec){
        .step = L->step,
        .epoch = src->ops->epoch(src),
        .loss = targets ? sum / (double)targets : NAN,
        .lr = r.lr,
        .grad_norm = r.grad_norm,
        .tokens = tokens,
        .ms = ms,
        .elapsed_s = (now_ms() - L->t0_ms) / 1e3,
        .skipped = r.skipped,
        .rows_without_targets = passed,
    };
    return 0;
}

static const char *signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGTERM";
}

/* The model for the run (the plan and the memory it takes said by rank
 * 0). 0, or the exit status after one line. */
static int create_model(loop *L)
{
    const train_run_in *in = L->in;
    const train_opts *o = L->o;
    pgrt_lm_params p = {
        .model = in->mf,
        .adapter = in->start,
        .batch = L->rows,
        .seq = L->seq,
        .dtype = (pgrt_lm_dtype)o->dtype,
        .lr = (float)o->lr,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .eps = 1e-8f,
        .weight_decay = (float)o->weight_decay,
        .max_norm = (float)o->max_norm,
        .graph = in->graph,
        .keep_grads = in->keep_grads,
        .head_chunk = (int)o->head_chunk,
        .profile = o->profile,
        .grad_accum = L->accum,
        .packed = in->src->packed,
        .schedule = train_opts_schedule(o, in->total),
        /* --seed fixes the data order and, with lora_dropout, the masks */
        .dropout_seed = (uint32_t)o->seed,
        .comm = in->comm,
        .shard_optimizer = in->comm && o->shard_optimizer,
        .recompute = (pgrt_lm_recompute)o->recompute,
        .max_memory_gib = o->max_memory,
    };
    int rc = pgrt_lm_create(in->ctx, &p, &L->lm);
    if (rc) {
        fprintf(stderr, "ptxgen-train: %s\n",
                pgrt_last_message()[0] ? train_last_message() : pgrt_strerror(rc));
        return rc == PGRT_ENOMEM || rc == PGRT_ERANGE || rc == PGRT_EINVAL ? TRAIN_EXIT_USAGE
                                                                            : TRAIN_EXIT_FAIL;
    }
    size_t fb = 0, tb = 0;
    pgrt_lm_stats ms;
    if (L->writes && !pgrt_lm_stats_get(L->lm, &ms))
        fprintf(stderr, "memory plan: weights %.2f GiB, activations %.2f GiB (%d of %d layers "
                        "recomputed), LoRA state %.2f GiB\n",
                ms.weight_bytes / 1073741824.0, ms.arena_bytes / 1073741824.0,
                ms.recompute_layers, pgrt_model_files_config(in->mf)->layers,
                ms.lora_bytes / 1073741824.0);
    if (L->writes && !pgrt_ctx_mem_info(in->ctx, &fb, &tb))
        fprintf(stderr, "device memory in use after create: %.2f GiB of %.2f GiB (a step "
                        "allocates nothing)\n",
                (tb - fb) / 1073741824.0, tb / 1073741824.0);
    return 0;
}

/* The host batches, the checkpoint's adapter, the stream, and on --resume
 * the optimizer state. 0, or the exit status after one line. */
static int prepare(loop *L)
{
    const train_run_in *in = L->in;
    const train_state *rs = in->resume;
    int rc;
    L->mb = calloc((size_t)L->accum, sizeof *L->mb);
    bool ok = L->mb != NULL;
    for (int m = 0; ok && m < L->accum; m++)
        ok = alloc_batch(&L->mb[m], L->rows * L->world, L->seq, in->src->has_targets,
                         in->src->packed) == 0;
    if (ok && in->eval)
        ok = alloc_batch(&L->ev, L->rows * L->world, L->seq, true, in->eval->packed) == 0;
    if (ok && L->o->output_dir && L->writes)
        ok = pgrt_adapter_init(pgrt_model_files_config(in->mf), &in->start->cfg, 0, &L->scratch) ==
             0;
    if (!ok) {
        fprintf(stderr, "ptxgen-train: out of host memory for %d micro-batches of %d x %d\n",
                L->accum, L->rows, L->seq);
        return TRAIN_EXIT_FAIL;
    }
    if ((rc = pgrt_stream_create(in->ctx, &L->s)))
        return fail_rt(L, "creating a stream", rc);
    if (!rs)
        return 0;
    char p2[PATH_MAX + 64];
    snprintf(p2, sizeof p2, "%s/%s", in->resume_dir, TRAIN_CKPT_OPTIMIZER);
    if ((rc = pgrt_lm_state_load(L->lm, L->s, p2))) {
        fprintf(stderr, "ptxgen-train: --resume: %s\n", train_last_message());
        return rc == PGRT_EINVAL ? TRAIN_EXIT_USAGE : TRAIN_EXIT_FAIL;
    }
    uint64_t done = 0;
    if (!pgrt_lm_steps(L->lm, L->s, &done) && done != rs->optimizer_steps) {
        train_say("--resume %s: its optimizer state has taken %" PRIu64
                  " steps, trainer_state.json says %" PRIu64,
                  in->resume_dir, done, rs->optimizer_steps);
        return TRAIN_EXIT_USAGE;
    }
    return 0;
}

/* A step's record: kept, checked, logged and shown. 0, or the exit
 * status. */
static int record_step(loop *L, train_run_out *out, const train_step_rec *rec)
{
    const train_run_in *in = L->in;
    int rc;
    uint64_t i = out->steps++;
    if (out->loss)
        out->loss[i] = rec->loss;
    if (i > 0)
        out->steady_ms += rec->ms;
    if (i == 0 && out->grads && (rc = pgrt_lm_grads_get(L->lm, out->grads)))
        return fail_rt(L, "the gradients", rc);
    if (!isfinite(rec->loss)) {
        train_progress_end(&L->prog);
        fprintf(stderr, "ptxgen-train: step %" PRIu64 ": the loss is %g\n", rec->step,
                rec->loss);
        return TRAIN_EXIT_FAIL;
    }
    if (in->log && train_log_step(in->log, rec)) {
        train_progress_end(&L->prog);
        perror("ptxgen-train: --log-json");
        return TRAIN_EXIT_FAIL;
    }
    double t = now_ms();
    if (L->writes && train_progress_due(&L->prog, rec->step, t)) {
        size_t f = 0, tot = 0;
        if (pgrt_ctx_mem_info(in->ctx, &f, &tot))
            f = tot = 0;
        double tps = rec->ms > 0 ? (double)rec->tokens / rec->ms * 1e3 : 0;
        train_progress_print(&L->prog, rec, tps, tot - f, tot, t);
    }
    return 0;
}

/* An evaluation when one is due: logged and shown. 0, or the exit
 * status. */
static int maybe_evaluate(loop *L, bool last, const char *name)
{
    const train_run_in *in = L->in;
    const train_opts *o = L->o;
    if (!in->eval || !((o->eval_every && L->step % (uint64_t)o->eval_every == 0) || last))
        return 0;
    train_eval_rec ev;
    int status = evaluate(L, &ev);
    if (status)
        return status;
    char line[256];
    snprintf(line, sizeof line,
             "%s eval at step %" PRIu64 ": loss %.6f, perplexity %.4g (%" PRIu64
             " targets, %" PRIu64 " batches)",
             name, ev.step, ev.loss, exp(ev.loss), ev.targets, ev.batches);
    if (L->writes)
        train_progress_note(&L->prog, line);
    if (in->log && train_log_eval(in->log, &ev)) {
        perror("ptxgen-train: --log-json");
        return TRAIN_EXIT_FAIL;
    }
    return 0;
}

/* A checkpoint when one is due (every --save-every steps, at the end, and
 * on a stop): rank 0 writes it; with a sharded optimizer every rank
 * gathers the moments for it. 0, or the exit status. */
static int maybe_checkpoint(loop *L, bool last, int sig)
{
    const train_opts *o = L->o;
    int rc;
    bool due = o->output_dir &&
               ((o->save_every && L->step % (uint64_t)o->save_every == 0) || last || sig);
    if (!due)
        return 0;
    if (!L->writes) {
        if (L->in->comm && o->shard_optimizer && (rc = pgrt_lm_state_save(L->lm, L->s, NULL)))
            return fail_rt(L, "gathering the optimizer state for rank 0's checkpoint", rc);
        return 0;
    }
    char where[PATH_MAX + 64];
    atomic_store(&L->dog.writing, true);
    int status = save_checkpoint(L, where, sizeof where);
    atomic_store(&L->dog.writing, false);
    if (status)
        return status;
    watchdog_beat(&L->dog);
    char line[PATH_MAX + 128], safe[4 * sizeof line];
    snprintf(line, sizeof line, "checkpoint: %s", where);
    pg_text_escape(safe, sizeof safe, line);
    train_progress_note(&L->prog, safe);
    return 0;
}

/* A stop by signal sig after its checkpoint: said by rank 0; every rank
 * waits for rank 0's checkpoint to be whole. The exit status, 128 + sig
 * (or the failure of that wait). */
static int stop_for_signal(loop *L, train_run_out *out, int sig)
{
    const train_run_in *in = L->in;
    train_progress_end(&L->prog);
    out->signal = sig;
    if (!L->writes)
        ;
    else if (L->o->output_dir)
        fprintf(stderr, "ptxgen-train: %s at step %" PRIu64 " of %" PRIu64
                        ": stopped after the checkpoint above; --resume continues "
                        "the run\n",
                signal_name(sig), L->step, in->total);
    else
        fprintf(stderr, "ptxgen-train: %s at step %" PRIu64 " of %" PRIu64
                        ": stopped; nothing saved (no --output-dir)\n",
                signal_name(sig), L->step, in->total);
    /* several GPUs: no rank leaves before rank 0's checkpoint is whole (a
     * launcher stops the rest once one has exited) */
    int rc;
    if (in->comm && (rc = agreed_stop(L, &sig)))
        return fail_rt(L, "waiting for rank 0's checkpoint", rc);
    return 128 + out->signal;
}

/* The run's end: the trained adapter, and rank 0's summary (and
 * profile). 0, or the exit status. */
static int finish_run(loop *L, train_run_out *out, const char *name)
{
    int rc;
    train_progress_end(&L->prog);
    if (out->final && (rc = pgrt_lm_adapter_get(L->lm, out->final)))
        return fail_rt(L, "the trained adapter", rc);
    pgrt_lm_stats st;
    if (L->writes && !pgrt_lm_stats_get(L->lm, &st))
        fprintf(stderr,
                "%s: %llu eager and %llu graphed steps, %llu captures (%llu failed); arena %.2f "
                "GiB, weights %.2f GiB, LoRA state %.1f MiB\n",
                name, (unsigned long long)st.eager_steps, (unsigned long long)st.graph_steps,
                (unsigned long long)st.captures, (unsigned long long)st.capture_failures,
                st.arena_bytes / 1073741824.0, st.weight_bytes / 1073741824.0,
                st.lora_bytes / 1048576.0);
    if (L->writes && L->o->profile && !L->in->graph && out->steps)
        train_print_profile(&st, out->steps);
    return 0;
}

/* Everything the run holds given back. Several GPUs and a failure (often
 * the other ranks gone): kernels of a collective may never end, and a
 * stream sync or a free behind them would wait for ever; every file this
 * run writes is whole (written aside and renamed) and the log flushed line
 * by line, so the rank leaves now and the driver takes the device back. */
static int leave(loop *L, int status)
{
    train_progress_end(&L->prog);
    if (L->in->comm && status == TRAIN_EXIT_FAIL) {
        pgrt_comm_abort(L->in->comm);
        fflush(stdout);
        fflush(stderr);
        _exit(status);
    }
    if (L->s)
        pgrt_stream_sync(L->s);
    watchdog_stop(&L->dog);
    pgrt_stream_destroy(&L->s);
    pgrt_lm_destroy(&L->lm);
    for (int m = 0; L->mb && m < L->accum; m++)
        free_batch(&L->mb[m]);
    free(L->mb);
    free_batch(&L->ev);
    pgrt_adapter_destroy(&L->scratch);
    return status;
}

int train_run(const train_run_in *in, train_run_out *out)
{
    const train_opts *o = in->o;
    loop L_ = {0}, *L = &L_;
    L->in = in;
    L->o = o;
    L->rows = (int)o->batch;
    L->seq = (int)o->seq;
    L->accum = (int)o->grad_accum;
    L->n = (size_t)L->rows * (size_t)L->seq;
    L->world = in->comm ? o->world : 1;
    L->rank = in->comm ? o->dist_rank : 0;
    L->writes = L->rank == 0;
    const train_state *rs = in->resume;
    L->step = rs ? rs->step : 0;
    L->skipped = rs ? rs->skipped : 0;
    L->tokens = rs ? rs->tokens : 0;
    L->opt_steps = rs ? rs->optimizer_steps : 0;
    out->steps = 0;
    out->steady_ms = 0;
    out->signal = 0;

    int status = create_model(L);
    if (status)
        return status;
    if ((status = prepare(L)))
        return leave(L, status);
    const char *name = in->graph ? "graph" : "eager";
    if (in->comm)
        watchdog_start(&L->dog, o->dist_timeout, L->rank, L->world);
    L->t0_ms = now_ms();
    train_progress_init(&L->prog, name, isatty(STDERR_FILENO), o->log_every, L->step + 1,
                        in->total, L->t0_ms);
    while (L->step < in->total) {
        train_step_rec rec;
        int sig = 0, rc;
        if ((status = one_step(L, &rec)) || (status = record_step(L, out, &rec)))
            return leave(L, status);
        bool last = L->step == in->total;
        if ((status = maybe_evaluate(L, last, name)))
            return leave(L, status);
        if ((rc = agreed_stop(L, &sig)))
            return leave(L, fail_rt(L, "agreeing on a stop", rc));
        if ((status = maybe_checkpoint(L, last, sig)))
            return leave(L, status);
        if (sig)
            return leave(L, stop_for_signal(L, out, sig));
    }
    return leave(L, finish_run(L, out, name));
}
