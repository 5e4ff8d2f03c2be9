/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-train --model: its options. One table (train_opts.c) drives the
 * command line, --help, --config files and the run_config.json of a
 * checkpoint, so that a key means the same everywhere: the long flag's
 * name without its dashes ("grad-accum"). Every value is checked in the
 * type and range the run uses it in; a bad one is one line on stderr
 * naming the option and its range, and exit 2.
 */
#ifndef PTXGEN_TRAIN_OPTS_H
#define PTXGEN_TRAIN_OPTS_H

#include "ptxgen/pgrt_lm.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define TRAIN_EXIT_USAGE 2
#define TRAIN_EXIT_FAIL 1

enum { TRAIN_MODE_EAGER = 1, TRAIN_MODE_GRAPH = 2, TRAIN_MODE_BOTH = 3 };
enum { TRAIN_ORDER_SHUFFLE, TRAIN_ORDER_SEQUENTIAL };
enum { TRAIN_PACKING_PACK, TRAIN_PACKING_PAD };

/* The most optimizer steps a run takes (--steps, or what --epochs makes). */
#define TRAIN_MAX_STEPS 100000000LL

typedef struct train_opts {
    /* model and data: exactly one of data and tokens */
    char *model, *adapter, *data, *tokens;
    int packing; /* TRAIN_PACKING_*, for data */
    int data_order;
    long long batch, seq, seed;
    int dtype; /* pgrt_lm_dtype */
    /* LoRA */
    long long rank;
    double alpha;
    unsigned targets; /* bit (1u << pgrt_linear) per module */
    /* --rank-pattern, --alpha-pattern as given (KEY=R,...; NULL: none) */
    char *rank_pattern, *alpha_pattern;
    /* optimisation: exactly one of steps and epochs is > 0 */
    long long steps, epochs, grad_accum;
    double lr, weight_decay, max_norm;
    /* schedule: warmup_steps >= 0 or warmup_ratio >= 0, not both */
    int schedule; /* pgrt_lm_sched_kind */
    long long warmup_steps;
    double warmup_ratio, min_lr_ratio;
    /* evaluation */
    char *eval_data;
    long long eval_every, eval_batches; /* eval_batches 0: the whole set */
    /* checkpoints */
    char *output_dir, *resume;
    long long save_every, save_total_limit; /* 0: only at the end; 0: keep all */
    /* output */
    char *save_adapter, *save_grads, *log_json, *config;
    long long log_every;
    /* performance */
    int modes; /* TRAIN_MODE_* */
    long long head_chunk;
    bool profile;
    int recompute; /* pgrt_lm_recompute */
    double max_memory;
    /* several GPUs: --gpus, --dist-init, --dist-timeout */
    long long gpus;
    char *dist_init;
    double dist_timeout;
    bool shard_optimizer;
    /* not options: the run's ranks (1: one process) and this one's, set
     * from the environment before the run (a step takes world x batch
     * rows of the data) */
    int world, dist_rank;
    /* bit (1 << option index) per option that was given, by the command
     * line or a file, rather than left at its default */
    uint64_t given;
} train_opts;

/* The defaults (docs/model.md); strings NULL, nothing given. */
void train_opts_default(train_opts *o);
/* Frees the strings (o stays usable: they become NULL). */
void train_opts_free(train_opts *o);

/* Everything ptxgen-train --model takes, in order: defaults, then the
 * run_config.json of the checkpoint --resume names (every key), then a
 * --config file, then the command line; a later one overrides (giving
 * --steps drops an earlier --epochs, --warmup-steps an earlier
 * --warmup-ratio, --data an earlier --tokens, and the other way round).
 * On --resume a value from --config or the command line must equal the
 * checkpoint's, except those a resumed run may change
 * (train_opt_resume_free). ckpt_dir receives the checkpoint directory
 * --resume resolved to (cap bytes; "" without --resume). Returns 0;
 * TRAIN_EXIT_USAGE after one line on stderr; -1 after --help or --version
 * printed to stdout (exit 0). */
int train_opts_load(int argc, char **argv, train_opts *o, char *ckpt_dir, size_t cap);

/* Whether arg is an option of the command line that a value follows. */
bool train_opts_takes_value(const char *arg);

/* A fresh adapter's rank_pattern and alpha_pattern: --rank-pattern's and
 * --alpha-pattern's entries appended to ac's, in their order. 0, or
 * TRAIN_EXIT_USAGE after one line on stderr. */
int train_opts_patterns(const train_opts *o, pgrt_adapter_config *ac);

/* The options as a JSON object of the keys --config reads (one a line,
 * every option with its value, paths absolute), for run_config.json;
 * malloc'd, NUL-terminated, or NULL when out of memory. */
char *train_opts_json(const train_opts *o);

/* The run's optimizer steps: --steps, or --epochs over rows_per_epoch
 * rows at batch x grad_accum rows a step (the last step of an epoch takes
 * the next epoch's first rows). Checks the result against
 * TRAIN_MAX_STEPS: TRAIN_EXIT_USAGE and one line, else 0. */
int train_opts_total_steps(const train_opts *o, uint64_t rows_per_epoch, uint64_t *total);

/* The learning-rate schedule of a run of total optimizer steps:
 * pgrt_lm_params.schedule. --warmup-ratio X gives ceil(X x total) warmup
 * steps, as transformers does; a constant schedule without warmup is all
 * zero (the earlier, fixed learning rate). */
pgrt_lm_schedule train_opts_schedule(const train_opts *o, uint64_t total);

/* The lr schedule_lr(s) that pgrt_lm_schedule gives step s (0-based): the
 * host's copy of the formula in pgrt_lm.h, for the tests and for the
 * progress line of a runtime that lacks the device schedule. */
double train_schedule_lr(const pgrt_lm_schedule *sc, double lr, uint64_t s);

/* s as a JSON string, quotes included, into buf (cap bytes; cut short
 * when it does not fit). Control characters are escaped; other bytes
 * pass as they are. */
void train_json_quote(char *buf, size_t cap, const char *s);

/* The project's version (meson's project version). */
const char *train_version(void);

/* --help's text (the model mode, then the demo's section) to f. */
void train_opts_help(FILE *f);
/* The version line to f. */
void train_opts_version(FILE *f);

/* One line "ptxgen-train: ..." on stderr, the whole text escaped
 * (pg_text_escape); returns TRAIN_EXIT_USAGE. */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
int train_bad(const char *fmt, ...);
/* The same line, for a failure of the run (no exit status implied). */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
void train_say(const char *fmt, ...);

/* Is an argument list one for the synthetic demo (every option one of
 * its own, or none)? Else it is the model mode's. */
bool train_opts_is_demo(int argc, char **argv);

/* p made absolute without following its last component (realpath of its
 * directory when that exists, else joined to the working directory);
 * into out (cap bytes). */
void train_path_absolute(const char *p, char *out, size_t cap);

#endif
