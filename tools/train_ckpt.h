/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-train --model: checkpoints. A checkpoint is a directory
 * OUT/checkpoint-<step> holding
 *
 *   adapter_model.safetensors, adapter_config.json   the PEFT adapter
 *   optimizer.safetensors                            pgrt_lm_state_save
 *   run_config.json                                  the options (--config's keys)
 *   trainer_state.json                               step, epoch, data position, ...
 *
 * written into a fresh temporary directory of OUT (.ptxgen-XXXXXXXXXX.tmp),
 * every file synced, then renamed to its name in one step: a crash leaves
 * the temporary (which nothing reads) or the whole checkpoint, never a
 * checkpoint-<step> without one of its files. The reader checks anyway
 * (train_ckpt_missing): a directory copied by hand or cut short by another
 * program is skipped, not resumed from.
 */
#ifndef PTXGEN_TRAIN_CKPT_H
#define PTXGEN_TRAIN_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TRAIN_CKPT_PREFIX "checkpoint-"
#define TRAIN_CKPT_STATE "trainer_state.json"
#define TRAIN_CKPT_CONFIG "run_config.json"
#define TRAIN_CKPT_OPTIMIZER "optimizer.safetensors"
/* The trained adapter at the end of a run, besides the last checkpoint. */
#define TRAIN_FINAL_DIR "final"

/* The files of a complete checkpoint, trainer_state.json last. */
extern const char *const train_ckpt_files[5];

/* "checkpoint-<step>" into buf. */
void train_ckpt_name(uint64_t step, char *buf, size_t cap);
/* Is name "checkpoint-<step>", step in decimal without a sign or leading
 * zero? Its step in *step. */
bool train_ckpt_parse_name(const char *name, uint64_t *step);
/* NULL when dir holds every file of a checkpoint as a regular file and
 * trainer_state.json is not empty, else the first name missing. */
const char *train_ckpt_missing(const char *dir);

/* The checkpoint directories of dir (by name), ascending by step. */
typedef struct train_ckpt_entry {
    uint64_t step;
    bool complete; /* train_ckpt_missing is NULL */
} train_ckpt_entry;
/* 0 with *out malloc'd (n entries, may be 0; NULL when n is 0); -1 with
 * errno when dir cannot be read (ENOENT: it does not exist). */
int train_ckpt_list(const char *dir, train_ckpt_entry **out, size_t *n);

/* Of n complete checkpoints (ascending), how many of the oldest go to keep
 * the newest `limit` (0: keep all). */
size_t train_ckpt_prune_count(size_t n, long long limit);

/* The checkpoint --resume ARG names: ARG itself when it is a checkpoint
 * directory (complete, else refused), else the complete checkpoint of ARG
 * with the highest step; incomplete ones above it are skipped with a line
 * on stderr. 0 with the path in out; else a one-line reason in msg and -1. */
int train_ckpt_resolve(const char *arg, char *out, size_t cap, char *msg, size_t msglen);

/* Writing one: begin makes the temporary directory in outdir (outdir made
 * first when missing, its parent existing) and gives its path; the caller
 * writes the files into it; commit syncs them and the directory, renames
 * it to outdir/checkpoint-<step> (an existing one of that step is moved
 * aside first and removed after) and syncs outdir; abort removes the
 * temporary. 0, or -1 with a one-line reason in msg. */
int train_ckpt_begin(const char *outdir, char *tmp, size_t cap, char *msg, size_t msglen);
int train_ckpt_commit(const char *outdir, const char *tmp, uint64_t step, char *final,
                      size_t cap, char *msg, size_t msglen);
void train_ckpt_abort(const char *tmp);

/* After a save: the oldest complete checkpoints of outdir beyond the
 * newest `limit` removed (0: none). Returns how many were removed, or -1
 * with msg. */
int train_ckpt_prune(const char *outdir, long long limit, char *msg, size_t msglen);

/* Does dir hold any checkpoint-<step> entry? Its name into name. */
bool train_ckpt_any(const char *dir, char *name, size_t cap);

/* A file's bytes written to dir/name (synced): 0 or -1 with msg. */
int train_ckpt_write_file(const char *dir, const char *name, const char *text, size_t len,
                          char *msg, size_t msglen);

/* trainer_state.json: where the run was when the checkpoint was made. */
typedef struct train_state {
    uint64_t step;            /* optimizer steps done (the checkpoint's name) */
    uint64_t total_steps;     /* the run's total when it was written */
    uint64_t optimizer_steps; /* pgrt_lm_steps: steps taken, skipped ones not counted */
    uint64_t skipped;         /* steps skipped for a non-finite gradient */
    uint64_t seed;
    uint64_t log_bytes;       /* bytes of --log-json at the checkpoint */
    uint64_t tokens;          /* tokens trained on */
    uint64_t world;           /* the run's ranks (1: one process; absent in older files) */
    double epoch;             /* train_source epoch() */
    char position[256];       /* train_source position_get() */
    char log_json[4096];      /* --log-json, absolute ("" without one) */
} train_state;

/* The JSON text (malloc'd, or NULL when out of memory). */
char *train_state_json(const train_state *st);
/* dir/trainer_state.json read and checked: 0, or -1 with msg. */
int train_state_read(const char *dir, train_state *st, char *msg, size_t msglen);

/* A file's bytes (at most max; NUL-terminated), malloc'd: 0, or -1 with
 * errno (EFBIG over max). */
int train_read_file(const char *path, size_t max, char **text, size_t *len);

#endif
