/* SPDX-License-Identifier: MIT */
/*
 * --data as a train_source: train_data.h's batcher over a .pgtok (or a
 * flat token file as one document), one row a call, so that a batch of any
 * row count is filled and a one-pass source (evaluation) completes its
 * last batch with padding rows. The batcher does the packing, the
 * padding, the targets and the epoch orders; this file turns its position
 * into the seam's text and back.
 *
 * Pad mode sets packed off. td gives a padded row the document at columns
 * 0 .. n-1 with positions 0 .. n-1 and doc_start 0, then the padding as a
 * piece of its own (positions from 0, doc_start n, targets -100). With
 * pgrt_lm's unpacked rows (positions 0 .. S-1, causal attention over the
 * row) every document token has the same position and sees the same keys
 * (columns 0 .. i, all of the document), so the loss and the gradients
 * are those of the packed form; the padding after the document differs,
 * but nothing attends to it and it has no target. The plain rows skip the
 * position and document-start arrays and the bounded attention.
 */
#include "train_source.h"

#include "ptxgen/pgrt.h"
#include "ptxgen/pgrt_gemm.h"
#include "ptxgen/ptxgen.h"
#include "train_data.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct data_src {
    td_set *set;
    td_batcher *b;
    const td_info *info;
    bool pad, shuffle;
    uint64_t rows; /* rows per epoch */
} data_src;

static const char *kind_name(const data_src *d)
{
    return d->info->format == TD_FORMAT_RAW ? "raw" : "pgtok";
}

/* A row of padding with no target: what a one-pass source gives after
 * its pass, as td pads a row (positions from 0, one piece). */
static void pad_row(const train_source *s, const data_src *d, train_batch *b, size_t at)
{
    for (int j = 0; j < s->seq; j++) {
        b->ids[at + (size_t)j] = d->info->pad_id;
        b->targets[at + (size_t)j] = TD_IGNORE;
        if (s->packed) {
            b->pos[at + (size_t)j] = j;
            b->doc_start[at + (size_t)j] = 0;
        }
    }
}

static int data_next(train_source *s, train_batch *b, char *msg, size_t msglen)
{
    data_src *d = s->impl;
    b->ntargets = 0;
    for (int r = 0; r < b->rows; r++) {
        size_t at = (size_t)r * (size_t)s->seq;
        td_batch tb = {
            .ids = b->ids + at,
            .targets = b->targets + at,
            .pos = s->packed ? b->pos + at : NULL,
            .doc_start = s->packed ? b->doc_start + at : NULL,
        };
        int rc = td_batcher_next(d->b, &tb);
        if (rc < 0) {
            snprintf(msg, msglen, "%s", td_last_message());
            return PGRT_EINVAL;
        }
        if (rc == 0 || tb.n_rows == 0)
            pad_row(s, d, b, at);
        else
            b->ntargets += (uint64_t)tb.n_targets;
    }
    return 0;
}

static uint64_t data_rows(const train_source *s)
{
    return ((const data_src *)s->impl)->rows;
}

static double data_epoch(const train_source *s)
{
    const data_src *d = s->impl;
    td_pos p;
    td_batcher_tell(d->b, &p);
    uint64_t done = td_batcher_rows_done(d->b);
    uint64_t base = p.epoch * d->rows;
    return (double)p.epoch + (double)(done >= base ? done - base : 0) / (double)d->rows;
}

static void data_pos_get(const train_source *s, char text[TRAIN_POS_MAX])
{
    const data_src *d = s->impl;
    td_pos p;
    char at[TD_POS_TEXT_MAX];
    td_batcher_tell(d->b, &p);
    if (td_pos_format(&p, at, sizeof at) < 0)
        at[0] = '\0';
    /* the seam's text goes into JSON as it is: no '"' */
    for (char *c = at; *c; c++)
        if (*c == '"')
            *c = '\'';
    snprintf(text, TRAIN_POS_MAX,
             "%s docs=%" PRIu64 " tokens=%" PRIu64 " targets=%" PRIu64
             " seq=%d packing=%s order=%s at=%s",
             kind_name(d), d->info->docs, d->info->tokens, d->info->targets, s->seq,
             d->pad ? "pad" : "pack", d->shuffle ? "shuffle" : "sequential", at);
}

static int data_pos_set(train_source *s, const char *text, char *msg, size_t msglen)
{
    data_src *d = s->impl;
    char kind[16], packing[16], order[16];
    uint64_t docs, tokens, targets;
    int seq, n = 0;
    if (sscanf(text,
               "%15[a-z] docs=%" SCNu64 " tokens=%" SCNu64 " targets=%" SCNu64
               " seq=%d packing=%15[a-z] order=%15[a-z] at=%n",
               kind, &docs, &tokens, &targets, &seq, packing, order, &n) != 7 ||
        !n || strlen(text + n) >= TD_POS_TEXT_MAX) {
        snprintf(msg, msglen, "'%s' is not a position in a %s file", text, s->opt);
        return -1;
    }
    if (strcmp(kind, kind_name(d)) || docs != d->info->docs || tokens != d->info->tokens ||
        targets != d->info->targets) {
        snprintf(msg, msglen,
                 "the position '%s' is in %s data of %" PRIu64 " documents, %" PRIu64
                 " tokens and %" PRIu64 " targets; %s now holds %s data of %" PRIu64 ", %" PRIu64
                 " and %" PRIu64 " (another file)",
                 text, kind, docs, tokens, targets, s->opt, kind_name(d), d->info->docs,
                 d->info->tokens, d->info->targets);
        return -1;
    }
    const char *want_p = d->pad ? "pad" : "pack", *want_o = d->shuffle ? "shuffle" : "sequential";
    if (seq != s->seq || strcmp(packing, want_p) || strcmp(order, want_o)) {
        snprintf(msg, msglen,
                 "the position '%s' is in rows of --seq %d, --packing %s, --data-order %s; this "
                 "run's are %d, %s, %s",
                 text, seq, packing, order, s->seq, want_p, want_o);
        return -1;
    }
    char at[TD_POS_TEXT_MAX];
    snprintf(at, sizeof at, "%s", text + n);
    for (char *c = at; *c; c++)
        if (*c == '\'')
            *c = '"';
    td_pos p;
    if (td_pos_parse(at, &p) || td_batcher_seek(d->b, &p)) {
        snprintf(msg, msglen, "the position '%s': %s", text, td_last_message());
        return -1;
    }
    return 0;
}

static void data_close(train_source *s)
{
    data_src *d = s->impl;
    if (d) {
        td_batcher_destroy(&d->b);
        td_close(&d->set);
        free(d);
    }
    free(s);
}

static const train_source_ops data_ops = {
    .next = data_next,
    .rows_per_epoch = data_rows,
    .epoch = data_epoch,
    .position_get = data_pos_get,
    .position_set = data_pos_set,
    .close = data_close,
};

int train_source_data(const train_data_params *p, train_source **out, char *note,
                      size_t notelen, char *msg, size_t msglen)
{
    *out = NULL;
    if (notelen)
        note[0] = '\0';
    train_source *s = calloc(1, sizeof *s);
    data_src *d = calloc(1, sizeof *d);
    if (!s || !d) {
        free(s);
        free(d);
        snprintf(msg, msglen, "%s: out of host memory", p->opt);
        return PGRT_ENOMEM;
    }
    s->ops = &data_ops;
    s->opt = p->opt;
    s->seq = p->seq;
    s->has_targets = true;
    s->packed = !p->pad;
    s->impl = d;
    d->pad = p->pad;
    d->shuffle = p->shuffle;
    char path[1024];
    pg_text_escape(path, sizeof path, p->path);
    /* JSON opened as prepared data: td's message says to run
     * ptxgen-prepare; a file without the magic is legacy flat ids */
    td_format fmt = train_file_kind(p->path) == TRAIN_FILE_OTHER ? TD_FORMAT_RAW
                                                                  : TD_FORMAT_PREPARED;
    int rc = PGRT_EINVAL;
    if (td_open(p->path, fmt, &d->set) ||
        td_check_model(d->set, p->vocab, p->tokenizer_json)) {
        snprintf(msg, msglen, "%s: %s", p->opt, td_last_message());
        goto fail;
    }
    d->info = td_set_info(d->set);
    if (!d->info->targets) {
        snprintf(msg, msglen,
                 "%s %s: no token of its %" PRIu64 " documents is a training target (a "
                 "document's first token never is): nothing to %s",
                 p->opt, path, d->info->docs, p->one_pass ? "evaluate" : "train on");
        goto fail;
    }
    if (p->pad && d->info->format == TD_FORMAT_RAW) {
        snprintf(msg, msglen,
                 "%s %s: flat int32 tokens are one document, and --packing pad puts one "
                 "document a row (its first --seq tokens): use --packing pack, or ptxgen-prepare "
                 "for documents",
                 p->opt, path);
        goto fail;
    }
    td_batch_params bp = {
        .batch = 1,
        .seq = p->seq,
        .mode = p->pad ? TD_PAD : TD_PACK,
        .shuffle = p->shuffle,
        .seed = p->seed,
        .epochs = p->one_pass ? 1 : 0,
    };
    if (td_batcher_create(d->set, &bp, &d->b)) {
        snprintf(msg, msglen, "%s %s: %s", p->opt, path, td_last_message());
        rc = PGRT_ENOMEM;
        goto fail;
    }
    d->rows = td_rows_per_epoch(d->set, bp.mode, p->seq);
    if (p->pad && d->info->longest > (uint64_t)p->seq)
        snprintf(note, notelen,
                 "%s %s: --packing pad cuts the documents longer than --seq %d to their first "
                 "%d tokens (the longest has %" PRIu64 "); what follows is not trained on",
                 p->opt, path, p->seq, p->seq, d->info->longest);
    else if (d->info->format == TD_FORMAT_RAW && p->shuffle)
        snprintf(note, notelen,
                 "%s %s: flat int32 tokens, read as one document: its rows come in file order "
                 "every epoch (--data-order shuffles documents; --tokens shuffles rows)",
                 p->opt, path);
    *out = s;
    return 0;
fail:
    data_close(s);
    return rc;
}
