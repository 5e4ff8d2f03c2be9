/* SPDX-License-Identifier: MIT */
/*
 * The flat token file as a train_source: rows of seq consecutive ids, one
 * document each, every epoch in its own order from the seed. The order of
 * an epoch is a permutation array made when the stream enters the epoch
 * (O(rows) once an epoch); a batch is O(rows x seq) copying.
 */
#include "train_source.h"

#include "ptxgen/pgrt_model.h"
#include "ptxgen/ptxgen.h"
#include "train_data.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tokens_src {
    pgrt_tokens *tok;
    uint64_t rows;
    bool shuffle;
    uint64_t seed;
    uint64_t epoch, index; /* the next row: index `index` of epoch `epoch`'s order */
    uint64_t *perm;        /* epoch `perm_epoch`'s order (shuffle only) */
    uint64_t perm_epoch;
    bool perm_valid;
} tokens_src;

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A uniform integer in [0, n) (n >= 1), by rejection: no modulo bias. */
static uint64_t below(uint64_t *s, uint64_t n)
{
    uint64_t lim = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = splitmix64(s);
    while (x >= lim);
    return x % n;
}

/* Epoch e's order: Fisher-Yates over 0 .. rows-1 from a generator seeded
 * by (seed, e), so that an epoch's order depends on nothing else (a
 * resumed run makes the same one). */
static void make_perm(tokens_src *t, uint64_t e)
{
    uint64_t st = t->seed ^ 0x6a09e667f3bcc908ull;
    (void)splitmix64(&st);
    st ^= e * 0xd1b54a32d192ed03ull;
    for (uint64_t i = 0; i < t->rows; i++)
        t->perm[i] = i;
    for (uint64_t i = t->rows; i > 1; i--) {
        uint64_t j = below(&st, i);
        uint64_t x = t->perm[i - 1];
        t->perm[i - 1] = t->perm[j];
        t->perm[j] = x;
    }
    t->perm_epoch = e;
    t->perm_valid = true;
}

static uint64_t row_at(tokens_src *t, uint64_t e, uint64_t i)
{
    if (!t->shuffle)
        return i;
    if (!t->perm_valid || t->perm_epoch != e)
        make_perm(t, e);
    return t->perm[i];
}

static int tokens_next(train_source *s, train_batch *b, char *msg, size_t msglen)
{
    (void)msg;
    (void)msglen;
    tokens_src *t = s->impl;
    for (int r = 0; r < b->rows; r++) {
        uint64_t row = row_at(t, t->epoch, t->index);
        pgrt_tokens_batch(t->tok, row, (size_t)s->seq, b->ids + (size_t)r * (size_t)s->seq);
        if (++t->index == t->rows) {
            t->index = 0;
            t->epoch++;
        }
    }
    b->ntargets = (uint64_t)b->rows * (uint64_t)(s->seq - 1);
    return 0;
}

static uint64_t tokens_rows(const train_source *s)
{
    return ((const tokens_src *)s->impl)->rows;
}

static double tokens_epoch(const train_source *s)
{
    const tokens_src *t = s->impl;
    return (double)t->epoch + (double)t->index / (double)t->rows;
}

static void tokens_pos_get(const train_source *s, char text[TRAIN_POS_MAX])
{
    const tokens_src *t = s->impl;
    snprintf(text, TRAIN_POS_MAX, "tokens rows=%" PRIu64 " seq=%d order=%s epoch=%" PRIu64
                                  " row=%" PRIu64,
             t->rows, s->seq, t->shuffle ? "shuffle" : "sequential", t->epoch, t->index);
}

static int tokens_pos_set(train_source *s, const char *text, char *msg, size_t msglen)
{
    tokens_src *t = s->impl;
    uint64_t rows, epoch, index;
    int seq, n = 0;
    char order[16];
    if (sscanf(text, "tokens rows=%" SCNu64 " seq=%d order=%15[a-z] epoch=%" SCNu64
                     " row=%" SCNu64 "%n",
               &rows, &seq, order, &epoch, &index, &n) != 5 ||
        text[n]) {
        snprintf(msg, msglen, "'%s' is not a position in a %s file", text, s->opt);
        return -1;
    }
    const char *want = t->shuffle ? "shuffle" : "sequential";
    if (rows != t->rows || seq != s->seq) {
        snprintf(msg, msglen,
                 "the position '%s' is in %" PRIu64 " rows of %d ids; %s now makes %" PRIu64
                 " rows of %d (another file, or another --seq)",
                 text, rows, seq, s->opt, t->rows, s->seq);
        return -1;
    }
    if (strcmp(order, want)) {
        snprintf(msg, msglen, "the position '%s' is in a %s order, this run's is %s", text,
                 order, want);
        return -1;
    }
    if (index >= t->rows) {
        snprintf(msg, msglen, "the position '%s' is past the last row (%" PRIu64 ")", text,
                 t->rows - 1);
        return -1;
    }
    t->epoch = epoch;
    t->index = index;
    return 0;
}

static void tokens_close(train_source *s)
{
    tokens_src *t = s->impl;
    if (t) {
        pgrt_tokens_close(&t->tok);
        free(t->perm);
        free(t);
    }
    free(s);
}

static const train_source_ops tokens_ops = {
    .next = tokens_next,
    .rows_per_epoch = tokens_rows,
    .epoch = tokens_epoch,
    .position_get = tokens_pos_get,
    .position_set = tokens_pos_set,
    .close = tokens_close,
};

int train_file_kind(const char *path)
{
    unsigned char buf[256];
    FILE *f = fopen(path, "rb");
    if (!f)
        return TRAIN_FILE_OTHER;
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    if (n >= 8 && !memcmp(buf, TD_MAGIC, 8))
        return TRAIN_FILE_PGTOK;
    /* as td_open tells JSON from ids: no NUL in the first bytes (an id
     * below 2^24 has a zero byte) and an object or array first */
    if (memchr(buf, 0, n))
        return TRAIN_FILE_OTHER;
    size_t i = 0;
    while (i < n && strchr(" \t\r\n", buf[i]))
        i++;
    return i < n && (buf[i] == '{' || buf[i] == '[') ? TRAIN_FILE_JSON : TRAIN_FILE_OTHER;
}

int train_source_next_trained(train_source *s, train_batch *b, uint64_t *passed, char *msg,
                              size_t msglen)
{
    /* a whole epoch and a batch without a target: in this order and at
     * this seq no row of the data holds one (packed rows lose a target
     * whose token begins a row) */
    uint64_t run = 0, limit = s->ops->rows_per_epoch(s) + (uint64_t)b->rows;
    for (;;) {
        int rc = s->ops->next(s, b, msg, msglen);
        if (rc)
            return rc;
        if (b->ntargets) {
            *passed += run;
            return 0;
        }
        run += (uint64_t)b->rows;
        if (run >= limit) {
            snprintf(msg, msglen,
                     "%" PRIu64 " rows one after another hold no target, more than an epoch "
                     "(%" PRIu64 " rows): at --seq %d nothing of the data is trained on",
                     run, s->ops->rows_per_epoch(s), s->seq);
            return PGRT_EINVAL;
        }
    }
}

/* A file of another kind than flat ids, refused with what to do. */
static int refuse_kind(const char *opt, const char *path, char *msg, size_t msglen)
{
    char p[1024];
    int kind = train_file_kind(path);
    if (kind == TRAIN_FILE_OTHER)
        return 0;
    pg_text_escape(p, sizeof p, path);
    if (kind == TRAIN_FILE_PGTOK)
        snprintf(msg, msglen,
                 "%s %s: a ptxgen-prepare file (it starts with %s), not flat int32 tokens: "
                 "train on it with --data %s (--eval-data then reads prepared data too)",
                 opt, p, TD_MAGIC, p);
    else
        snprintf(msg, msglen,
                 "%s %s: JSON text, not int32 token ids: run ptxgen-prepare --model DIR "
                 "--input %s --output DATA.pgtok and train with --data DATA.pgtok",
                 opt, p, p);
    return PGRT_EINVAL;
}

int train_source_tokens(const char *opt, const char *path, int64_t vocab, int seq,
                        bool shuffle, uint64_t seed, train_source **out, char *msg,
                        size_t msglen)
{
    *out = NULL;
    train_source *s = calloc(1, sizeof *s);
    tokens_src *t = calloc(1, sizeof *t);
    if (!s || !t) {
        free(s);
        free(t);
        snprintf(msg, msglen, "%s: out of host memory", opt);
        return PGRT_ENOMEM;
    }
    s->ops = &tokens_ops;
    s->opt = opt;
    s->seq = seq;
    s->impl = t;
    t->shuffle = shuffle;
    t->seed = seed;
    int rc = refuse_kind(opt, path, msg, msglen);
    if (rc) {
        tokens_close(s);
        return rc;
    }
    rc = pgrt_tokens_open(path, vocab, &t->tok);
    if (rc) {
        /* escaped already (the model layer's messages are) */
        snprintf(msg, msglen, "%s", pgrt_last_message());
        tokens_close(s);
        return rc;
    }
    t->rows = pgrt_tokens_count(t->tok) / (uint64_t)seq;
    if (!t->rows) {
        snprintf(msg, msglen, "%s: %zu ids make no row of --seq %d", opt,
                 pgrt_tokens_count(t->tok), seq);
        tokens_close(s);
        return PGRT_ERANGE;
    }
    if (shuffle && !(t->perm = malloc(t->rows * sizeof *t->perm))) {
        snprintf(msg, msglen, "%s: out of host memory for the order of %" PRIu64 " rows", opt,
                 t->rows);
        tokens_close(s);
        return PGRT_ENOMEM;
    }
    *out = s;
    return 0;
}

uint64_t train_source_tokens_row(train_source *s, uint64_t epoch, uint64_t i)
{
    return row_at(s->impl, epoch, i);
}
