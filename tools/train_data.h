/* SPDX-License-Identifier: MIT */
/*
 * Training data for ptxgen-train: the .pgtok files that ptxgen-prepare
 * writes (docs/data.md has the format), the legacy flat int32 token files,
 * and the batcher that turns either into rows of B x S tokens with
 * targets, position ids and document starts.
 *
 * Errors: every function returning int returns 0 (or the count it
 * promises) or a negative TD_E* code, and td_last_message() is then a
 * one-line message naming the file and the problem. Paths and other text
 * from outside are escaped in it (pg_text_escape).
 *
 * Ownership and threads: td_open's set owns the file's mapping until
 * td_close; it is read-only and may be shared by threads. A batcher reads
 * its set (which must outlive it) and belongs to one thread at a time.
 * Batch arrays are the caller's.
 *
 * Sizes that can pass 2^31 (documents, tokens, rows, positions in the
 * stream) are 64-bit; ids, targets, position ids and document starts are
 * int32 (a row holds at most TD_SEQ_MAX tokens).
 */
#ifndef PTXGEN_TRAIN_DATA_H
#define PTXGEN_TRAIN_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TD_MAGIC "PGTOKENS"   /* a .pgtok file's first 8 bytes */
#define TD_VERSION 1u         /* the format version this reader knows */
#define TD_HEADER_BYTES 128u
#define TD_FLAG_EOS 1u        /* EOS was appended to text and completion documents */
#define TD_FLAG_TRAIN_ALL 2u  /* prepared with --train-on all */
#define TD_FLAGS_KNOWN 3u
#define TD_IGNORE (-100)      /* a target the loss skips (PyTorch's ignore_index) */
#define TD_SEQ_MAX (1 << 30)
#define TD_BATCH_MAX (1 << 30)
#define TD_POS_TEXT_MAX 96    /* td_pos_format's longest line, with its NUL */

/* One table: code, value, message. */
#define TD_ERRNO_MAP(X)                                                        \
    X(EINVAL, -1, "invalid argument")                                          \
    X(ENOMEM, -2, "out of memory")                                             \
    X(EIO, -3, "cannot read the file")                                         \
    X(EFORMAT, -4, "not a valid training data file")                           \
    X(ERANGE, -5, "out of range")                                              \
    X(EMISMATCH, -6, "the data does not fit the model")

typedef enum td_errno {
    TD_OK = 0,
#define TD_X_(name, val, msg) TD_##name = (val),
    TD_ERRNO_MAP(TD_X_)
#undef TD_X_
} td_errno;

/* "not a valid training data file"; never NULL. */
const char *td_strerror(int err);
/* "TD_EFORMAT"; never NULL. */
const char *td_err_name(int err);
/* The message of the last failed call on this thread ("" before any); valid
 * until the next failing call on the same thread. */
const char *td_last_message(void);

/* ---------------------------------------------------------------- data sets */

typedef struct td_set td_set;

typedef enum td_format {
    TD_FORMAT_PREPARED, /* a .pgtok file of ptxgen-prepare */
    TD_FORMAT_RAW,      /* legacy: little-endian int32 ids, one document, every token a target */
} td_format;

typedef struct td_info {
    td_format format;
    uint32_t version;   /* the file's format version; 0 for raw */
    uint32_t flags;     /* TD_FLAG_*; 0 for raw */
    uint64_t docs;
    uint64_t tokens;
    uint64_t targets;   /* tokens a document's earlier tokens may predict: mask bits
                         * set, a document's first token not counted (raw: tokens - 1) */
    uint64_t longest;   /* tokens of the longest document */
    int64_t vocab;      /* the tokenizer's vocabulary size; raw: the largest id + 1 */
    int32_t eos_id;     /* -1: none (raw: none) */
    int32_t pad_id;     /* what pads rows (raw: 0) */
    bool has_tokenizer; /* tokenizer_sha256 is known (not for raw) */
    uint8_t tokenizer_sha256[32];
} td_info;

/* Open and check path as fmt: for a .pgtok, the header (magic, version,
 * flags, sizes against the file's length with no overflow, eos and pad ids),
 * offsets (0 first, strictly increasing, the token count last), every id in
 * [0, vocab), every mask byte 0 or 1, zero padding; for raw, a non-empty
 * whole number of ids, none negative. A file of the other kind, or a JSONL
 * file given by mistake, is refused with a message that says so and what to
 * run (ptxgen-prepare). The file is mapped read-only; *out owns it. */
int td_open(const char *path, td_format fmt, td_set **out);
/* Frees *set and sets it NULL; NULL and *set == NULL are no-ops. */
void td_close(td_set **set);
/* Owned by set. */
const td_info *td_set_info(const td_set *set);
/* Document d's first token index and length; TD_ERANGE past the last. */
int td_doc(const td_set *set, uint64_t d, uint64_t *begin, uint64_t *len);
/* Token i's id and mask bit (1: a training target); i < tokens. */
int32_t td_token(const td_set *set, uint64_t i);
int td_target(const td_set *set, uint64_t i);

/* The SHA-256 of a file (the tokenizer.json a .pgtok was prepared with). */
int td_file_sha256(const char *path, uint8_t out[32]);
/* Refuse data the model cannot train on: a vocabulary larger than
 * model_vocab (TD_EMISMATCH; for raw, an id >= model_vocab, named with its
 * index), and, when tokenizer_json is not NULL and the set knows its
 * tokenizer, a tokenizer.json whose SHA-256 differs from the one the data
 * was prepared with (TD_EMISMATCH, both hashes in the message), or that
 * cannot be read (TD_EIO). */
int td_check_model(const td_set *set, int64_t model_vocab, const char *tokenizer_json);

/* ---------------------------------------------------------------- batches */

typedef enum td_mode {
    TD_PACK, /* documents concatenated into full rows, cut across rows */
    TD_PAD,  /* one document a row, truncated to S and padded */
} td_mode;

typedef struct td_batch_params {
    int64_t batch;   /* B rows, 1 to TD_BATCH_MAX */
    int64_t seq;     /* S tokens a row, 2 to TD_SEQ_MAX; B x S ids must fit memory */
    td_mode mode;
    bool shuffle;    /* documents in a seeded permutation each epoch; false: file order */
    uint64_t seed;
    uint64_t epochs; /* batches end after this many passes; 0: never */
} td_batch_params;

/* Where the stream stands: before document index (of the epoch's order)
 * of epoch, offset tokens into it. Plain data: save it, restore it with
 * td_batcher_seek, and the batches that follow are the ones an
 * uninterrupted run would have given. */
typedef struct td_pos {
    uint64_t epoch;
    uint64_t index;
    uint64_t offset;
} td_pos;

/* The caller's arrays, B x S each, row after row; only ids is required.
 * td_batcher_next fills them and the counts. */
typedef struct td_batch {
    int32_t *ids;
    int32_t *targets;   /* the id to predict at each position, or TD_IGNORE */
    int32_t *pos;       /* position ids: 0 at each piece's first token */
    int32_t *doc_start; /* index in the row of the first token of the piece */
    int64_t n_rows;     /* rows holding data: B, fewer only at the end of the last epoch */
    int64_t n_targets;  /* targets that are not TD_IGNORE */
    int64_t n_truncated; /* TD_PAD: documents cut to S in this batch */
} td_batch;

typedef struct td_batcher td_batcher;

/* A batcher at the start of epoch 0. set must outlive it. TD_EINVAL or
 * TD_ERANGE for params, naming the field. */
int td_batcher_create(const td_set *set, const td_batch_params *params, td_batcher **out);
void td_batcher_destroy(td_batcher **b);
/* The next B rows: 1, or 0 when the epochs are done (nothing written). A
 * batch that runs out of data part way has its remaining rows padded
 * (ids pad_id, targets TD_IGNORE) and n_rows < B. */
int td_batcher_next(td_batcher *b, td_batch *batch);
/* The position of the next row. */
void td_batcher_tell(const td_batcher *b, td_pos *pos);
/* Continue from a position td_batcher_tell gave, under the same set and
 * params. Refused (TD_ERANGE, the batcher unchanged) when pos cannot be one:
 * an epoch past the last, an index or offset outside the epoch's documents,
 * or (TD_PACK) a point that is not a row boundary. */
int td_batcher_seek(td_batcher *b, const td_pos *pos);
/* Rows given since the start of epoch 0 (for progress). */
uint64_t td_batcher_rows_done(const td_batcher *b);
/* Batches until the epochs are done, counted from the start; 0 when the
 * batcher is endless (epochs 0); UINT64_MAX if that overflows. */
uint64_t td_batcher_batches(const td_batcher *b);
/* Rows a pass over set gives with S = seq: ceil(tokens / S) packed (only an
 * epoch's last row is padded), the document count padded; 0 for bad
 * arguments. */
uint64_t td_rows_per_epoch(const td_set *set, td_mode mode, int64_t seq);

/* pos as one JSON line without its newline, {"epoch":E,"index":I,"offset":O},
 * into buf (TD_POS_TEXT_MAX bytes suffice); the length, or TD_ERANGE when
 * it did not fit. */
int td_pos_format(const td_pos *pos, char *buf, size_t len);
/* The inverse: one JSON object with exactly those three members, each a
 * non-negative integer below 2^64 written without sign, fraction or
 * exponent, in any order, whitespace around tokens allowed; TD_EINVAL
 * otherwise, naming the problem. */
int td_pos_parse(const char *text, td_pos *out);

#endif
