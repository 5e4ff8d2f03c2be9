/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-train --model: where the batches come from. The loop sees a
 * train_source only: a stream of rows of seq tokens that fills one
 * micro-batch at a time, knows how many rows an epoch holds, and can say
 * where it is as one line of text and go back there (a checkpoint keeps
 * the text; --resume hands it back). Two implementations: the flat
 * token file of --tokens (train_source_tokens, train_source.c) and the
 * prepared data of --data (train_source_data, train_source_td.c: a
 * .pgtok, or a flat token file as one document, through train_data.h).
 */
#ifndef PTXGEN_TRAIN_SOURCE_H
#define PTXGEN_TRAIN_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One micro-batch: rows x seq entries in each array, row-major, owned by
 * the loop. next() fills ids always, targets only when the source sets
 * has_targets, pos and doc_start only when it sets packed; it sets
 * ntargets to the count of targets >= 0 (with has_targets off, the
 * next-token targets: rows x (seq - 1)). */
typedef struct train_batch {
    int rows, seq;
    int32_t *ids, *targets, *pos, *doc_start;
    uint64_t ntargets;
} train_batch;

/* The longest position text, NUL included. */
#define TRAIN_POS_MAX 256

typedef struct train_source train_source;

typedef struct train_source_ops {
    /* The next rows of the stream into b (b->rows x b->seq, the seq the
     * source was opened for), the position moved past them. The stream
     * has no end: after an epoch's last row comes the next epoch's first.
     * 0, or a negative PGRT_E* code with a one-line message in msg. */
    int (*next)(train_source *s, train_batch *b, char *msg, size_t msglen);
    /* Rows in one epoch (>= 1). */
    uint64_t (*rows_per_epoch)(const train_source *s);
    /* Epochs done at the position, with the fraction of the current one
     * (1.5: half way through the second). */
    double (*epoch)(const train_source *s);
    /* The position as one line of printable text (< TRAIN_POS_MAX bytes,
     * no '"' or '\\': it goes into JSON as it is). */
    void (*position_get)(const train_source *s, char text[TRAIN_POS_MAX]);
    /* Back to a position position_get gave, on a source opened on the
     * same data with the same settings: 0, or -1 with a one-line message
     * in msg naming what does not match (another file, another seq, a
     * row past the end, text of another kind of source). */
    int (*position_set)(train_source *s, const char *text, char *msg, size_t msglen);
    void (*close)(train_source *s);
} train_source_ops;

struct train_source {
    const train_source_ops *ops;
    const char *opt; /* the option it was opened for ("--tokens"), for messages */
    int seq;
    bool has_targets; /* next() writes targets (else the loop passes NULL) */
    bool packed;      /* next() writes pos and doc_start (pgrt_lm_params.packed) */
    void *impl;
};


static inline void train_source_close(train_source **s)
{
    if (s && *s) {
        (*s)->ops->close(*s);
        *s = NULL;
    }
}

/* --tokens FILE: little-endian int32 ids (pgrt_tokens_open: each checked
 * against [0, vocab)), cut into rows of seq consecutive ids (a last
 * partial row is not used; a file shorter than one row is refused). One
 * document a row, targets the next token (has_targets and packed off).
 * shuffle: each epoch visits the rows in its own order, a Fisher-Yates
 * permutation from a generator seeded with (seed, epoch); else in file
 * order. The position is the epoch and the index in its order:
 * "tokens rows=R seq=S order=shuffle epoch=E row=I". 0, or a negative
 * PGRT_E* code with a one-line message in msg (escaped: it may name the
 * path). opt ("--tokens") must outlive the source. */
int train_source_tokens(const char *opt, const char *path, int64_t vocab, int seq,
                        bool shuffle, uint64_t seed, train_source **out, char *msg,
                        size_t msglen);

/* The row the tokens source visits at index i of epoch e (its order):
 * for the tests. */
uint64_t train_source_tokens_row(train_source *s, uint64_t epoch, uint64_t i);

/* What train_source_data opens. */
typedef struct train_data_params {
    const char *opt;            /* "--data", "--eval-data": for messages; outlives the source */
    const char *path;
    int64_t vocab;              /* the model's vocabulary */
    const char *tokenizer_json; /* the model's tokenizer.json, or NULL: not compared */
    int seq;
    bool pad;                   /* --packing pad: one document a row; else packed rows */
    bool shuffle;               /* each epoch's documents in an order from (seed, epoch) */
    uint64_t seed;
    /* Evaluation: one pass over the data, after which every row is padding
     * with no target (a last batch is completed so, and a batch past the
     * end is all padding); false: the endless stream of training. */
    bool one_pass;
} train_data_params;

/* --data FILE: a .pgtok of ptxgen-prepare (train_data.h), or a file that
 * does not start with its magic read as legacy flat int32 tokens (one
 * document, every token but the first a target). Checked against the
 * model (td_check_model: the vocabulary, and the tokenizer's SHA-256 when
 * tokenizer_json is given) and refused when no token is a target.
 * Rows of seq tokens from td's batcher: packed (has_targets and packed
 * on: next() writes targets, position ids and document starts) or padded
 * (has_targets on, packed off: a padded row is one document at positions
 * 0 .. seq-1 whose padding comes after it, so pgrt_lm's plain causal
 * attention sees exactly the document; see train_source_td.c). The
 * position is "pgtok docs=D tokens=T targets=N seq=S packing=pack
 * order=shuffle at=" and td_pos_format's line with its '"' written as
 * '\''. note (notelen bytes) receives a line worth saying before the
 * run, or "" (pad mode cutting documents longer than seq; a flat file's
 * one document not shuffled). 0, or a negative PGRT_E* code with a
 * one-line message in msg (escaped). */
int train_source_data(const train_data_params *p, train_source **out, char *note,
                      size_t notelen, char *msg, size_t msglen);

/* What a data file holds, from its first bytes: TRAIN_FILE_PGTOK (it
 * starts with ptxgen-prepare's magic), TRAIN_FILE_JSON (text whose first
 * character not white space opens a JSON object or array: a JSONL given
 * by mistake), else TRAIN_FILE_OTHER (ids; or unreadable, which the
 * reader then says). */
enum { TRAIN_FILE_OTHER, TRAIN_FILE_PGTOK, TRAIN_FILE_JSON };
int train_file_kind(const char *path);

/* s->ops->next() until a micro-batch holds a target (a micro-batch of
 * masked data may hold none: rows of prompts only, a padded epoch end),
 * the rows of those passed over added to *passed. After more rows
 * without a target than an epoch and a batch hold, the data gives none
 * at this seq: PGRT_EINVAL with msg. */
int train_source_next_trained(train_source *s, train_batch *b, uint64_t *passed, char *msg,
                              size_t msglen);

#endif
