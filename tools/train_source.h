/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-train --model: where the batches come from. The loop sees a
 * train_source only: a stream of rows of seq tokens that fills one
 * micro-batch at a time, knows how many rows an epoch holds, and can say
 * where it is as one line of text and go back there (a checkpoint keeps
 * the text; --resume hands it back). One implementation today, the flat
 * token file of --tokens (train_source_tokens); a reader of another
 * format is a second train_source_ops.
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

#endif
