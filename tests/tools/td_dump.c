/* SPDX-License-Identifier: MIT */
/*
 * td_dump: a data file through the C reader and batcher, printed as JSON
 * lines, for tests/tools/prepare.py to hold against what Python reads
 * from the same file.
 *
 *   td_dump FILE [--raw] [--batch B --seq S] [--pad] [--shuffle SEED]
 *           [--epochs E] [--max-batches N] [--from POS] [--check-model VOCAB [TOKENIZER]]
 *
 * First line: the set's info and rows per epoch. Then one line a batch:
 * {"batch", "rows", "targets", "truncated", "ids", "labels", "pos",
 * "doc_start", "next"} until the epochs end or N batches. A failure is one
 * line on stderr and exit 2.
 */
#include "train_data.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int die(const char *what)
{
    fprintf(stderr, "td_dump: %s\n", what);
    return 2;
}

static bool number(const char *s, uint64_t *out)
{
    char *end;
    if (!s || *s < '0' || *s > '9')
        return false;
    *out = strtoull(s, &end, 10);
    return *end == '\0';
}

static void print_array(const char *name, const int32_t *v, int64_t n)
{
    printf(", \"%s\": [", name);
    for (int64_t i = 0; i < n; i++)
        printf(i ? ", %" PRId32 : "%" PRId32, v[i]);
    printf("]");
}

int main(int argc, char **argv)
{
    const char *path = NULL, *from = NULL, *tokenizer = NULL;
    td_batch_params p = {1, 2, TD_PACK, false, 0, 1};
    td_format fmt = TD_FORMAT_PREPARED;
    uint64_t max_batches = UINT64_MAX, v, check_vocab = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--raw"))
            fmt = TD_FORMAT_RAW;
        else if (!strcmp(a, "--pad"))
            p.mode = TD_PAD;
        else if (!strcmp(a, "--batch") && number(next, &v) && ++i)
            p.batch = (int64_t)v;
        else if (!strcmp(a, "--seq") && number(next, &v) && ++i)
            p.seq = (int64_t)v;
        else if (!strcmp(a, "--shuffle") && number(next, &v) && ++i)
            p.shuffle = true, p.seed = v;
        else if (!strcmp(a, "--epochs") && number(next, &v) && ++i)
            p.epochs = v;
        else if (!strcmp(a, "--max-batches") && number(next, &v) && ++i)
            max_batches = v;
        else if (!strcmp(a, "--from") && next && ++i)
            from = next;
        else if (!strcmp(a, "--check-model") && number(next, &check_vocab) && ++i) {
            if (i + 1 < argc && argv[i + 1][0] != '-')
                tokenizer = argv[++i];
        } else if (a[0] != '-' && !path)
            path = a;
        else
            return die("usage: td_dump FILE [--raw] [--batch B --seq S] [--pad] [--shuffle SEED] "
                       "[--epochs E] [--max-batches N] [--from POS] [--check-model VOCAB "
                       "[TOKENIZER]]");
    }
    if (!path)
        return die("no FILE");
    td_set *s = NULL;
    if (td_open(path, fmt, &s))
        return die(td_last_message());
    if (check_vocab && td_check_model(s, (int64_t)check_vocab, tokenizer)) {
        td_close(&s);
        return die(td_last_message());
    }
    const td_info *in = td_set_info(s);
    char sha[65] = "";
    for (int i = 0; in->has_tokenizer && i < 32; i++)
        snprintf(sha + 2 * i, 3, "%02x", in->tokenizer_sha256[i]);
    printf("{\"docs\": %" PRIu64 ", \"tokens\": %" PRIu64 ", \"targets\": %" PRIu64
           ", \"longest\": %" PRIu64 ", \"vocab\": %" PRId64 ", \"eos\": %" PRId32
           ", \"pad\": %" PRId32 ", \"flags\": %" PRIu32 ", \"sha256\": \"%s\", "
           "\"rows_per_epoch\": %" PRIu64 "}\n",
           in->docs, in->tokens, in->targets, in->longest, in->vocab, in->eos_id, in->pad_id,
           in->flags, sha, td_rows_per_epoch(s, p.mode, p.seq));

    td_batcher *b = NULL;
    if (td_batcher_create(s, &p, &b)) {
        td_close(&s);
        return die(td_last_message());
    }
    td_pos at;
    if (from && (td_pos_parse(from, &at) || td_batcher_seek(b, &at))) {
        td_batcher_destroy(&b);
        td_close(&s);
        return die(td_last_message());
    }
    size_t n = (size_t)(p.batch * p.seq);
    int32_t *ids = malloc(n * 4), *targets = malloc(n * 4), *pos = malloc(n * 4),
            *ds = malloc(n * 4);
    int rc = ids && targets && pos && ds ? 0 : TD_ENOMEM;
    for (uint64_t k = 0; !rc && k < max_batches; k++) {
        td_batch bt = {ids, targets, pos, ds, 0, 0, 0};
        int got = td_batcher_next(b, &bt);
        if (got <= 0) {
            rc = got;
            break;
        }
        char next[TD_POS_TEXT_MAX];
        td_batcher_tell(b, &at);
        td_pos_format(&at, next, sizeof next);
        printf("{\"batch\": %" PRIu64 ", \"rows\": %" PRId64 ", \"targets\": %" PRId64
               ", \"truncated\": %" PRId64,
               k, bt.n_rows, bt.n_targets, bt.n_truncated);
        print_array("ids", ids, (int64_t)n);
        print_array("labels", targets, (int64_t)n);
        print_array("pos", pos, (int64_t)n);
        print_array("doc_start", ds, (int64_t)n);
        printf(", \"next\": %s}\n", next);
    }
    free(ids);
    free(targets);
    free(pos);
    free(ds);
    td_batcher_destroy(&b);
    td_close(&s);
    if (rc)
        return die(rc == TD_ENOMEM ? "out of memory" : td_last_message());
    return fflush(stdout) == 0 ? 0 : 1;
}
