/* SPDX-License-Identifier: MIT */
/*
 * The training data reader and batcher (tools/train_data.h) on files this
 * test writes itself, byte by byte from docs/data.md: packed rows of one
 * to five documents, documents cut across rows, padded rows, targets,
 * position ids and document starts as computed by hand; epoch orders;
 * saving and restoring the stream position; and every malformed file with
 * its message.
 */
#include "train_data.h"

#include "model/model_util.h"
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define X TD_IGNORE

static char dir[4096];

/* ---------------------------------------------------------------- writing files */

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

typedef struct file_spec {
    int docs;
    const int *lens;
    const int32_t *ids;   /* all documents' ids one after another */
    const uint8_t *mask;  /* NULL: every byte 1 */
    uint32_t vocab;
    int32_t eos, pad;
    uint32_t flags;
    uint8_t sha[32];
} file_spec;

typedef struct bytes {
    uint8_t *p;
    size_t n;
    size_t ids_at, mask_at; /* where the sections start */
} bytes;

/* The .pgtok of spec, laid out as docs/data.md says. */
static bytes build(const file_spec *f)
{
    uint64_t tokens = 0;
    for (int d = 0; d < f->docs; d++)
        tokens += (uint64_t)f->lens[d];
    size_t ids_at = 128 + 8 * ((size_t)f->docs + 1);
    size_t mask_at = ids_at + (4 * tokens + 7) / 8 * 8;
    size_t n = mask_at + (tokens + 7) / 8 * 8;
    bytes b = {calloc(1, n), n, ids_at, mask_at};
    memcpy(b.p, "PGTOKENS", 8);
    put32(b.p + 8, 1);
    put32(b.p + 12, 128);
    put32(b.p + 16, f->flags);
    put32(b.p + 20, f->vocab);
    put64(b.p + 24, (uint64_t)f->docs);
    put64(b.p + 32, tokens);
    put32(b.p + 40, (uint32_t)f->eos);
    put32(b.p + 44, (uint32_t)f->pad);
    memcpy(b.p + 48, f->sha, 32);
    uint64_t at = 0;
    for (int d = 0; d <= f->docs; d++) {
        put64(b.p + 128 + 8 * (size_t)d, at);
        if (d < f->docs)
            at += (uint64_t)f->lens[d];
    }
    for (uint64_t i = 0; i < tokens; i++) {
        put32(b.p + ids_at + 4 * i, (uint32_t)f->ids[i]);
        b.p[mask_at + i] = f->mask ? f->mask[i] : 1;
    }
    return b;
}

/* The path lives in a static buffer until the next call. */
static const char *file_path(const char *name)
{
    static char p[4200];
    path_in(p, sizeof p, dir, name);
    return p;
}

static const char *write_file(const char *name, const void *p, size_t n)
{
    const char *path = file_path(name);
    if (write_bytes(path, p, n) != 0)
        fprintf(stderr, "cannot write %s\n", path);
    return path;
}

static td_set *open_spec(const file_spec *f, const char *name)
{
    bytes b = build(f);
    const char *path = write_file(name, b.p, b.n);
    free(b.p);
    td_set *s = NULL;
    if (td_open(path, TD_FORMAT_PREPARED, &s) != 0)
        fprintf(stderr, "td_open: %s\n", td_last_message());
    return s;
}

/* ---------------------------------------------------------------- batches */

typedef struct arrays {
    int32_t ids[4096], targets[4096], pos[4096], doc_start[4096];
    td_batch b;
} arrays;

static td_batch *arr_batch(arrays *a)
{
    memset(a, 0x55, sizeof *a);
    a->b = (td_batch){a->ids, a->targets, a->pos, a->doc_start, 0, 0, 0};
    return &a->b;
}

#define REQUIRE_ROW(what, got, want, S)                                        \
    do {                                                                       \
        const int32_t *g_ = (got), *w_ = (want);                               \
        test_checks_++;                                                        \
        for (int i_ = 0; i_ < (S); i_++)                                       \
            if (g_[i_] != w_[i_]) {                                            \
                TEST_FAIL_("%s[%d] == %d, expected %d", what, i_, g_[i_], w_[i_]); \
                break;                                                         \
            }                                                                  \
    } while (0)

/* Row r of a batch against the hand-computed row. */
static void check_row(const arrays *a, int r, int S, const int32_t *ids, const int32_t *targets,
                      const int32_t *pos, const int32_t *ds)
{
    fprintf(stderr, "  row %d\n", r);
    REQUIRE_ROW("ids", a->ids + r * S, ids, S);
    REQUIRE_ROW("targets", a->targets + r * S, targets, S);
    REQUIRE_ROW("pos", a->pos + r * S, pos, S);
    REQUIRE_ROW("doc_start", a->doc_start + r * S, ds, S);
}

static td_batcher *batcher(const td_set *s, int64_t B, int64_t S, td_mode mode, bool shuffle,
                           uint64_t seed, uint64_t epochs)
{
    td_batch_params p = {B, S, mode, shuffle, seed, epochs};
    td_batcher *b = NULL;
    if (td_batcher_create(s, &p, &b) != 0)
        fprintf(stderr, "td_batcher_create: %s\n", td_last_message());
    return b;
}

static void pos_is(const td_batcher *b, uint64_t epoch, uint64_t index, uint64_t offset)
{
    td_pos p;
    td_batcher_tell(b, &p);
    REQUIRE_INT_EQ(p.epoch, epoch);
    REQUIRE_INT_EQ(p.index, index);
    REQUIRE_INT_EQ(p.offset, offset);
}

/* A = 10 11 12 (mask 0 1 1), B = 20 21 (0 1), C = 30 .. 34 (0 0 1 1 1). */
static const int abc_lens[] = {3, 2, 5};
static const int32_t abc_ids[] = {10, 11, 12, 20, 21, 30, 31, 32, 33, 34};
static const uint8_t abc_mask[] = {0, 1, 1, 0, 1, 0, 0, 1, 1, 1};

static file_spec abc_spec(void)
{
    file_spec f = {3, abc_lens, abc_ids, abc_mask, 100, 99, 0, TD_FLAG_EOS, {0}};
    for (int i = 0; i < 32; i++)
        f.sha[i] = (uint8_t)i;
    return f;
}

/* Two documents a row, B cut at the end of row 0, C at the end of row 1. */
static void test_pack_cut(void)
{
    fprintf(stderr, "pack, documents cut across rows\n");
    file_spec f = abc_spec();
    td_set *s = open_spec(&f, "abc.pgtok");
    REQUIRE(s != NULL);
    if (!s)
        return;
    const td_info *in = td_set_info(s);
    REQUIRE_INT_EQ(in->format, TD_FORMAT_PREPARED);
    REQUIRE_INT_EQ(in->version, 1);
    REQUIRE_INT_EQ(in->flags, TD_FLAG_EOS);
    REQUIRE_INT_EQ(in->docs, 3);
    REQUIRE_INT_EQ(in->tokens, 10);
    REQUIRE_INT_EQ(in->targets, 6);
    REQUIRE_INT_EQ(in->longest, 5);
    REQUIRE_INT_EQ(in->vocab, 100);
    REQUIRE_INT_EQ(in->eos_id, 99);
    REQUIRE_INT_EQ(in->pad_id, 0);
    REQUIRE(in->has_tokenizer && in->tokenizer_sha256[31] == 31);
    uint64_t begin = 9, len = 9;
    REQUIRE_INT_EQ(td_doc(s, 2, &begin, &len), 0);
    REQUIRE_INT_EQ(begin, 5);
    REQUIRE_INT_EQ(len, 5);
    REQUIRE_INT_EQ(td_doc(s, 3, &begin, &len), TD_ERANGE);
    REQUIRE_INT_EQ(td_token(s, 9), 34);
    REQUIRE_INT_EQ(td_target(s, 6), 0);
    REQUIRE_INT_EQ(td_target(s, 7), 1);
    REQUIRE_INT_EQ(td_rows_per_epoch(s, TD_PACK, 4), 3);
    REQUIRE_INT_EQ(td_rows_per_epoch(s, TD_PACK, 5), 2);
    REQUIRE_INT_EQ(td_rows_per_epoch(s, TD_PAD, 4), 3);

    td_batcher *b = batcher(s, 2, 4, TD_PACK, false, 0, 1);
    REQUIRE_INT_EQ(td_batcher_batches(b), 2);
    static arrays a;
    REQUIRE_INT_EQ(td_batcher_next(b, arr_batch(&a)), 1);
    REQUIRE_INT_EQ(a.b.n_rows, 2);
    REQUIRE_INT_EQ(a.b.n_targets, 3);
    REQUIRE_INT_EQ(a.b.n_truncated, 0);
    check_row(&a, 0, 4, (int32_t[]){10, 11, 12, 20}, (int32_t[]){11, 12, X, X},
              (int32_t[]){0, 1, 2, 0}, (int32_t[]){0, 0, 0, 3});
    check_row(&a, 1, 4, (int32_t[]){21, 30, 31, 32}, (int32_t[]){X, X, 32, X},
              (int32_t[]){0, 0, 1, 2}, (int32_t[]){0, 1, 1, 1});
    pos_is(b, 0, 2, 3);
    REQUIRE_INT_EQ(td_batcher_rows_done(b), 2);
    REQUIRE_INT_EQ(td_batcher_next(b, arr_batch(&a)), 1);
    REQUIRE_INT_EQ(a.b.n_rows, 1);
    REQUIRE_INT_EQ(a.b.n_targets, 1);
    check_row(&a, 0, 4, (int32_t[]){33, 34, 0, 0}, (int32_t[]){34, X, X, X},
              (int32_t[]){0, 1, 0, 1}, (int32_t[]){0, 0, 2, 2});
    check_row(&a, 1, 4, (int32_t[]){0, 0, 0, 0}, (int32_t[]){X, X, X, X},
              (int32_t[]){0, 1, 2, 3}, (int32_t[]){0, 0, 0, 0});
    pos_is(b, 1, 0, 0);
    REQUIRE_INT_EQ(td_batcher_rows_done(b), 3);
    REQUIRE_INT_EQ(td_batcher_next(b, arr_batch(&a)), 0);
    REQUIRE_INT_EQ(a.b.n_rows, 0);
    td_batcher_destroy(&b);
    REQUIRE(b == NULL);

    /* Only ids asked for: the same ids. */
    b = batcher(s, 1, 4, TD_PACK, false, 0, 0);
    int32_t ids[4];
    td_batch only = {ids, NULL, NULL, NULL, 0, 0, 0};
    REQUIRE_INT_EQ(td_batcher_next(b, &only), 1);
    REQUIRE_ROW("ids", ids, ((int32_t[]){10, 11, 12, 20}), 4);
    REQUIRE_INT_EQ(only.n_targets, 2);
    REQUIRE_INT_EQ(td_batcher_batches(b), 0); /* endless */
    td_batcher_destroy(&b);

    /* Pad mode: one document a row, C truncated to 4. */
    fprintf(stderr, "pad\n");
    b = batcher(s, 3, 4, TD_PAD, false, 0, 1);
    REQUIRE_INT_EQ(td_batcher_batches(b), 1);
    REQUIRE_INT_EQ(td_batcher_next(b, arr_batch(&a)), 1);
    REQUIRE_INT_EQ(a.b.n_rows, 3);
    REQUIRE_INT_EQ(a.b.n_truncated, 1);
    REQUIRE_INT_EQ(a.b.n_targets, 2 + 1 + 2);
    check_row(&a, 0, 4, (int32_t[]){10, 11, 12, 0}, (int32_t[]){11, 12, X, X},
              (int32_t[]){0, 1, 2, 0}, (int32_t[]){0, 0, 0, 3});
    check_row(&a, 1, 4, (int32_t[]){20, 21, 0, 0}, (int32_t[]){21, X, X, X},
              (int32_t[]){0, 1, 0, 1}, (int32_t[]){0, 0, 2, 2});
    check_row(&a, 2, 4, (int32_t[]){30, 31, 32, 33}, (int32_t[]){X, 32, 33, X},
              (int32_t[]){0, 1, 2, 3}, (int32_t[]){0, 0, 0, 0});
    pos_is(b, 1, 0, 0);
    REQUIRE_INT_EQ(td_batcher_next(b, arr_batch(&a)), 0);
    td_batcher_destroy(&b);

    /* S = 5: C fills row 1 exactly; the epoch ends with no padding. */
    b = batcher(s, 2, 5, TD_PAD, false, 0, 2);
    REQUIRE_INT_EQ(td_batcher_batches(b), 3);
    REQUIRE_INT_EQ(td_batcher_next(b, arr_batch(&a)), 1);
    REQUIRE_INT_EQ(td_batcher_next(b, arr_batch(&a)), 1);
    /* rows: C of epoch 0, then A of epoch 1 */
    REQUIRE_INT_EQ(a.b.n_truncated, 0);
    check_row(&a, 0, 5, (int32_t[]){30, 31, 32, 33, 34}, (int32_t[]){X, 32, 33, 34, X},
              (int32_t[]){0, 1, 2, 3, 4}, (int32_t[]){0, 0, 0, 0, 0});
    check_row(&a, 1, 5, (int32_t[]){10, 11, 12, 0, 0}, (int32_t[]){11, 12, X, X, X},
              (int32_t[]){0, 1, 2, 0, 1}, (int32_t[]){0, 0, 0, 3, 3});
    pos_is(b, 1, 1, 0);
    REQUIRE_INT_EQ(td_batcher_rows_done(b), 4);
    td_batcher_destroy(&b);
    td_close(&s);
    REQUIRE(s == NULL);
}

/* Rows of five, one, three and four documents, then one and padding. */
static void test_pack_many(void)
{
    fprintf(stderr, "pack, 1 to 5 documents a row, two epochs\n");
    static const int lens[] = {1, 1, 2, 1, 1, 6, 2, 2, 2, 1, 2, 1, 2, 3};
    static const int32_t ids[] = {1,  2,  3,  4,  5,  6,  11, 12, 13, 14, 15, 16, 21, 22,
                                  23, 24, 25, 26, 31, 32, 33, 34, 35, 36, 41, 42, 43};
    file_spec f = {14, lens, ids, NULL, 50, -1, 7, 0, {0}};
    td_set *s = open_spec(&f, "many.pgtok");
    REQUIRE(s != NULL);
    if (!s)
        return;
    REQUIRE_INT_EQ(td_set_info(s)->targets, 27 - 14); /* first tokens never count */
    REQUIRE_INT_EQ(td_set_info(s)->eos_id, -1);
    REQUIRE_INT_EQ(td_rows_per_epoch(s, TD_PACK, 6), 5);
    td_batcher *b = batcher(s, 2, 6, TD_PACK, false, 0, 2);
    REQUIRE_INT_EQ(td_batcher_batches(b), 5);
    static arrays a;
    const int S = 6;
    REQUIRE_INT_EQ(td_batcher_next(b, arr_batch(&a)), 1);
    REQUIRE_INT_EQ(a.b.n_targets, 1 + 5);
    check_row(&a, 0, S, (int32_t[]){1, 2, 3, 4, 5, 6}, (int32_t[]){X, X, 4, X, X, X},
              (int32_t[]){0, 0, 0, 1, 0, 0}, (int32_t[]){0, 1, 2, 2, 4, 5});
    check_row(&a, 1, S, (int32_t[]){11, 12, 13, 14, 15, 16}, (int32_t[]){12, 13, 14, 15, 16, X},
              (int32_t[]){0, 1, 2, 3, 4, 5}, (int32_t[]){0, 0, 0, 0, 0, 0});
    REQUIRE_INT_EQ(td_batcher_next(b, arr_batch(&a)), 1);
    REQUIRE_INT_EQ(a.b.n_targets, 3 + 2);
    check_row(&a, 0, S, (int32_t[]){21, 22, 23, 24, 25, 26}, (int32_t[]){22, X, 24, X, 26, X},
              (int32_t[]){0, 1, 0, 1, 0, 1}, (int32_t[]){0, 0, 2, 2, 4, 4});
    check_row(&a, 1, S, (int32_t[]){31, 32, 33, 34, 35, 36}, (int32_t[]){X, 33, X, X, 36, X},
              (int32_t[]){0, 0, 1, 0, 0, 1}, (int32_t[]){0, 1, 1, 3, 4, 4});
    /* The epoch's last row, then epoch 1's first in the same batch. */
    REQUIRE_INT_EQ(td_batcher_next(b, arr_batch(&a)), 1);
    REQUIRE_INT_EQ(a.b.n_rows, 2);
    REQUIRE_INT_EQ(a.b.n_targets, 2 + 1);
    check_row(&a, 0, S, (int32_t[]){41, 42, 43, 7, 7, 7}, (int32_t[]){42, 43, X, X, X, X},
              (int32_t[]){0, 1, 2, 0, 1, 2}, (int32_t[]){0, 0, 0, 3, 3, 3});
    check_row(&a, 1, S, (int32_t[]){1, 2, 3, 4, 5, 6}, (int32_t[]){X, X, 4, X, X, X},
              (int32_t[]){0, 0, 0, 1, 0, 0}, (int32_t[]){0, 1, 2, 2, 4, 5});
    pos_is(b, 1, 5, 0);
    REQUIRE_INT_EQ(td_batcher_rows_done(b), 6);
    REQUIRE_INT_EQ(td_batcher_next(b, arr_batch(&a)), 1);
    REQUIRE_INT_EQ(td_batcher_next(b, arr_batch(&a)), 1);
    REQUIRE_INT_EQ(a.b.n_rows, 2);
    REQUIRE_INT_EQ(a.ids[S], 41);
    REQUIRE_INT_EQ(td_batcher_next(b, arr_batch(&a)), 0);
    REQUIRE_INT_EQ(td_batcher_rows_done(b), 10);
    td_batcher_destroy(&b);

    /* A piece longer than a row: document 5 over rows of 4. */
    b = batcher(s, 4, 4, TD_PACK, false, 0, 1);
    REQUIRE_INT_EQ(td_batcher_next(b, arr_batch(&a)), 1);
    check_row(&a, 1, 4, (int32_t[]){5, 6, 11, 12}, (int32_t[]){X, X, 12, X},
              (int32_t[]){0, 0, 0, 1}, (int32_t[]){0, 1, 2, 2});
    check_row(&a, 2, 4, (int32_t[]){13, 14, 15, 16}, (int32_t[]){14, 15, 16, X},
              (int32_t[]){0, 1, 2, 3}, (int32_t[]){0, 0, 0, 0});
    pos_is(b, 0, 8, 0);
    td_batcher_destroy(&b);
    td_close(&s);
}

/* The legacy flat file: one document, every token a target. */
static void test_raw(void)
{
    fprintf(stderr, "raw\n");
    uint8_t buf[40];
    for (int i = 0; i < 10; i++)
        put32(buf + 4 * i, (uint32_t)(i + 1));
    const char *path = write_file("flat.bin", buf, sizeof buf);
    td_set *s = NULL;
    REQUIRE_INT_EQ(td_open(path, TD_FORMAT_RAW, &s), 0);
    if (!s)
        return;
    const td_info *in = td_set_info(s);
    REQUIRE_INT_EQ(in->format, TD_FORMAT_RAW);
    REQUIRE_INT_EQ(in->docs, 1);
    REQUIRE_INT_EQ(in->tokens, 10);
    REQUIRE_INT_EQ(in->targets, 9);
    REQUIRE_INT_EQ(in->vocab, 11);
    REQUIRE(!in->has_tokenizer);
    td_batcher *b = batcher(s, 3, 4, TD_PACK, true, 5, 1);
    static arrays a;
    REQUIRE_INT_EQ(td_batcher_next(b, arr_batch(&a)), 1);
    REQUIRE_INT_EQ(a.b.n_rows, 3);
    REQUIRE_INT_EQ(a.b.n_targets, 3 + 3 + 1);
    check_row(&a, 0, 4, (int32_t[]){1, 2, 3, 4}, (int32_t[]){2, 3, 4, X},
              (int32_t[]){0, 1, 2, 3}, (int32_t[]){0, 0, 0, 0});
    check_row(&a, 1, 4, (int32_t[]){5, 6, 7, 8}, (int32_t[]){6, 7, 8, X},
              (int32_t[]){0, 1, 2, 3}, (int32_t[]){0, 0, 0, 0});
    check_row(&a, 2, 4, (int32_t[]){9, 10, 0, 0}, (int32_t[]){10, X, X, X},
              (int32_t[]){0, 1, 0, 1}, (int32_t[]){0, 0, 2, 2});
    td_batcher_destroy(&b);
    REQUIRE_INT_EQ(td_check_model(s, 11, "/nonexistent/tokenizer.json"), 0);
    REQUIRE_INT_EQ(td_check_model(s, 10, NULL), TD_EMISMATCH);
    REQUIRE_CONTAINS(td_last_message(), "flat.bin: token 9 (byte 36) has id 10, outside the "
                                        "model's vocabulary [0, 10)");
    td_close(&s);
}

/* ---------------------------------------------------------------- order and resuming */

/* 40 one-token documents in pad mode with S 2: a batch of 40 rows is an
 * epoch's order. */
static void epoch_order(const td_set *s, uint64_t seed, bool shuffle, int epochs, int32_t *out)
{
    td_batcher *b = batcher(s, 40, 2, TD_PAD, shuffle, seed, 0);
    static arrays a;
    for (int e = 0; e < epochs; e++) {
        REQUIRE_INT_EQ(td_batcher_next(b, arr_batch(&a)), 1);
        for (int r = 0; r < 40; r++)
            out[40 * e + r] = a.ids[2 * r];
    }
    td_batcher_destroy(&b);
}

static bool is_permutation(const int32_t *v)
{
    int seen[40] = {0};
    for (int i = 0; i < 40; i++) {
        if (v[i] < 100 || v[i] >= 140 || seen[v[i] - 100]++)
            return false;
    }
    return true;
}

static void test_shuffle(void)
{
    fprintf(stderr, "shuffle\n");
    int lens[40];
    int32_t ids[40];
    for (int i = 0; i < 40; i++) {
        lens[i] = 1;
        ids[i] = 100 + i;
    }
    file_spec f = {40, lens, ids, NULL, 200, -1, 0, 0, {0}};
    td_set *s = open_spec(&f, "forty.pgtok");
    if (!s)
        return;
    int32_t a[120], b[120], c[80], plain[40];
    epoch_order(s, 7, true, 3, a);
    epoch_order(s, 7, true, 3, b);
    epoch_order(s, 8, true, 2, c);
    epoch_order(s, 7, false, 1, plain);
    REQUIRE(memcmp(a, b, sizeof a) == 0);         /* the same seed, the same orders */
    for (int e = 0; e < 3; e++)
        REQUIRE(is_permutation(a + 40 * e));
    REQUIRE(memcmp(a, a + 40, 40 * 4) != 0);      /* epochs differ */
    REQUIRE(memcmp(a + 40, a + 80, 40 * 4) != 0);
    REQUIRE(memcmp(a, c, 40 * 4) != 0);           /* seeds differ */
    REQUIRE(memcmp(a, plain, 40 * 4) != 0);
    for (int i = 0; i < 40; i++)
        REQUIRE_INT_EQ(plain[i], 100 + i);        /* file order */
    td_close(&s);
}

/* Run n batches straight; then again, stopping after k, saving the position
 * as text, and continuing with a new batcher from it: the same batches. */
static void resume_case(const td_set *s, int64_t B, int64_t S, td_mode mode, bool shuffle,
                        uint64_t epochs, int k, int n)
{
    static arrays a, r;
    td_batcher *straight = batcher(s, B, S, mode, shuffle, 3, epochs);
    td_batcher *first = batcher(s, B, S, mode, shuffle, 3, epochs);
    char text[TD_POS_TEXT_MAX];
    for (int i = 0; i < k; i++) {
        td_batcher_next(first, arr_batch(&r));
        td_batcher_next(straight, arr_batch(&a));
    }
    td_pos p, q;
    td_batcher_tell(first, &p);
    uint64_t rows = td_batcher_rows_done(first);
    REQUIRE(td_pos_format(&p, text, sizeof text) > 0);
    td_batcher_destroy(&first);
    REQUIRE_INT_EQ(td_pos_parse(text, &q), 0);
    td_batcher *resumed = batcher(s, B, S, mode, shuffle, 3, epochs);
    REQUIRE_INT_EQ(td_batcher_seek(resumed, &q), 0);
    REQUIRE_INT_EQ(td_batcher_rows_done(resumed), rows);
    bool same = true;
    for (int i = k; i < n; i++) {
        int ra = td_batcher_next(straight, arr_batch(&a));
        int rr = td_batcher_next(resumed, arr_batch(&r));
        size_t sz = (size_t)(B * S) * 4;
        same = same && ra == rr && a.b.n_rows == r.b.n_rows && a.b.n_targets == r.b.n_targets &&
               a.b.n_truncated == r.b.n_truncated && !memcmp(a.ids, r.ids, sz) &&
               !memcmp(a.targets, r.targets, sz) && !memcmp(a.pos, r.pos, sz) &&
               !memcmp(a.doc_start, r.doc_start, sz);
    }
    if (!same)
        TEST_FAIL_("resumed at %s (B %lld, S %lld, %s, shuffle %d): other batches", text,
                   (long long)B, (long long)S, mode == TD_PACK ? "pack" : "pad", shuffle);
    test_checks_++;
    td_batcher_destroy(&straight);
    td_batcher_destroy(&resumed);
}

static void test_resume(void)
{
    fprintf(stderr, "resume\n");
    /* 30 documents of 1 to 7 tokens */
    int lens[30];
    int32_t ids[200];
    int n = 0;
    for (int d = 0; d < 30; d++) {
        lens[d] = 1 + (d * 5) % 7;
        for (int j = 0; j < lens[d]; j++)
            ids[n++] = (int32_t)(d * 10 + j);
    }
    file_spec f = {30, lens, ids, NULL, 400, -1, 0, 0, {0}};
    td_set *s = open_spec(&f, "thirty.pgtok");
    if (!s)
        return;
    for (int k = 0; k <= 12; k += 3) {
        resume_case(s, 2, 5, TD_PACK, true, 0, k, 40);
        resume_case(s, 3, 4, TD_PACK, false, 3, k, 40);
        resume_case(s, 4, 3, TD_PAD, true, 2, k, 30);
        resume_case(s, 1, 8, TD_PAD, false, 0, k, 50);
    }

    /* Positions that cannot be: nothing changes. */
    td_batcher *b = batcher(s, 2, 5, TD_PACK, false, 3, 2);
    static arrays a, c;
    td_batcher_next(b, arr_batch(&a));
    td_pos at, p;
    td_batcher_tell(b, &at);
    p = (td_pos){0, 1, 0};
    REQUIRE_INT_EQ(td_batcher_seek(b, &p), TD_ERANGE);
    REQUIRE_CONTAINS(td_last_message(), "is token 1 of the epoch, not a row boundary of seq 5");
    p = (td_pos){0, 30, 0};
    REQUIRE_INT_EQ(td_batcher_seek(b, &p), TD_ERANGE);
    REQUIRE_CONTAINS(td_last_message(), "position index 30 is outside the 30 documents");
    p = (td_pos){0, 0, 7};
    REQUIRE_INT_EQ(td_batcher_seek(b, &p), TD_ERANGE);
    REQUIRE_CONTAINS(td_last_message(),
                     "position offset 7 is outside document 0 (index 0) of 1 tokens");
    p = (td_pos){3, 0, 0};
    REQUIRE_INT_EQ(td_batcher_seek(b, &p), TD_ERANGE);
    REQUIRE_CONTAINS(td_last_message(), "is past the last of 2 epochs");
    p = (td_pos){2, 1, 0};
    REQUIRE_INT_EQ(td_batcher_seek(b, &p), TD_ERANGE);
    pos_is(b, at.epoch, at.index, at.offset);
    td_batcher *ref = batcher(s, 2, 5, TD_PACK, false, 3, 2);
    td_batcher_next(ref, arr_batch(&c));
    td_batcher_next(ref, arr_batch(&c));
    td_batcher_next(b, arr_batch(&a));
    REQUIRE(memcmp(a.ids, c.ids, 10 * 4) == 0);
    /* The end of the last epoch: no more batches. */
    p = (td_pos){2, 0, 0};
    REQUIRE_INT_EQ(td_batcher_seek(b, &p), 0);
    REQUIRE_INT_EQ(td_batcher_next(b, arr_batch(&a)), 0);
    td_batcher_destroy(&b);
    td_batcher_destroy(&ref);
    b = batcher(s, 2, 5, TD_PAD, false, 0, 0);
    p = (td_pos){0, 1, 1};
    REQUIRE_INT_EQ(td_batcher_seek(b, &p), TD_ERANGE);
    REQUIRE_CONTAINS(td_last_message(), "(padded rows start documents at 0)");
    td_batcher_destroy(&b);
    td_close(&s);
}

static void test_pos_text(void)
{
    fprintf(stderr, "positions as text\n");
    char t[TD_POS_TEXT_MAX];
    td_pos p = {UINT64_MAX, 12, 0}, q;
    int n = td_pos_format(&p, t, sizeof t);
    REQUIRE_STR_EQ(t, "{\"epoch\":18446744073709551615,\"index\":12,\"offset\":0}");
    REQUIRE_INT_EQ(n, (int)strlen(t));
    REQUIRE_INT_EQ(td_pos_format(&p, t, 20), TD_ERANGE);
    REQUIRE_INT_EQ(td_pos_parse(" { \"offset\" : 3 ,\"epoch\":1, \"index\":2 }\n", &q), 0);
    REQUIRE(q.epoch == 1 && q.index == 2 && q.offset == 3);
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"", "not a JSON object"},
        {"[1]", "not a JSON object"},
        {"{}", "no member \"epoch\""},
        {"{\"epoch\":1,\"index\":2}", "no member \"offset\""},
        {"{\"epoch\":1,\"index\":2,\"offset\":3,\"x\":4}", "unknown member \"x\""},
        {"{\"epoch\":1,\"epoch\":2,\"index\":2,\"offset\":3}", "\"epoch\" given twice"},
        {"{\"epoch\":-1,\"index\":2,\"offset\":3}", "\"epoch\" is not a non-negative integer"},
        {"{\"epoch\":1.0,\"index\":2,\"offset\":3}", "\"epoch\" is not a non-negative integer"},
        {"{\"epoch\":1e3,\"index\":2,\"offset\":3}", "\"epoch\" is not a non-negative integer"},
        {"{\"epoch\":01,\"index\":2,\"offset\":3}", "\"epoch\" is not a non-negative integer"},
        {"{\"epoch\":\"1\",\"index\":2,\"offset\":3}", "\"epoch\" is not a non-negative integer"},
        {"{\"epoch\":18446744073709551616,\"index\":2,\"offset\":3}", "\"epoch\" is 2^64 or more"},
        {"{\"epoch\":1,\"index\":2,\"offset\":3} x", "text after the object"},
        {"{\"epoch\":1,\"index\":2,\"offset\":3,}", "a member name was expected"},
        {"{\"epoch\" 1}", "':' expected after \"epoch\""},
        {"{\"epoch\":1 \"index\":2}", "',' or '}' expected"},
        {"{\"ep\\u006fch\":1}", "a member name is not a plain string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        REQUIRE_INT_EQ(td_pos_parse(bad[i].text, &q), TD_EINVAL);
        REQUIRE_CONTAINS(td_last_message(), bad[i].want);
    }
}

/* ---------------------------------------------------------------- bad files */

/* open must fail with code and a one-line message containing want (after
 * the file's path). */
static void refused(const char *name, const void *p, size_t n, td_format fmt, int code,
                    const char *want)
{
    const char *path = write_file(name, p, n);
    td_set *s = (td_set *)1;
    int rc = td_open(path, fmt, &s);
    REQUIRE_INT_EQ(rc, code);
    REQUIRE(s == NULL);
    const char *m = td_last_message();
    if (printable_line(path))
        REQUIRE(strncmp(m, path, strlen(path)) == 0);
    REQUIRE_CONTAINS(m, want);
    REQUIRE(printable_line(m));
    if (rc == 0)
        td_close(&s);
}

#define MUTATE(name, code, want, ...)                                          \
    do {                                                                       \
        bytes m_ = build(&f);                                                  \
        uint8_t *p = m_.p;                                                     \
        size_t n = m_.n;                                                       \
        (void)p;                                                               \
        __VA_ARGS__;                                                           \
        refused(name, p, n, TD_FORMAT_PREPARED, code, want);                   \
        free(m_.p);                                                            \
    } while (0)

static void test_bad_files(void)
{
    fprintf(stderr, "bad files\n");
    td_set *s = NULL;
    REQUIRE_INT_EQ(td_open(file_path("missing.pgtok"), TD_FORMAT_PREPARED, &s), TD_EIO);
    REQUIRE_CONTAINS(td_last_message(), "missing.pgtok: No such file or directory");
    REQUIRE_INT_EQ(td_open(dir, TD_FORMAT_PREPARED, &s), TD_EIO);
    REQUIRE_CONTAINS(td_last_message(), ": not a regular file");
    REQUIRE_INT_EQ(td_open(NULL, TD_FORMAT_PREPARED, &s), TD_EINVAL);
    REQUIRE_INT_EQ(td_open("x", (td_format)7, &s), TD_EINVAL);

    static const char jsonl[] = "{\"text\": \"hello\"}\n{\"text\": \"world\"}\n";
    refused("data.jsonl", jsonl, strlen(jsonl), TD_FORMAT_PREPARED, TD_EFORMAT,
            "data.jsonl: JSON text, not prepared training data: run ptxgen-prepare --model DIR "
            "--input ");
    refused("data.jsonl", jsonl, strlen(jsonl), TD_FORMAT_RAW, TD_EFORMAT,
            "JSON text, not int32 token ids: run ptxgen-prepare");
    uint8_t flat[16] = {1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0};
    refused("flat.bin", flat, sizeof flat, TD_FORMAT_PREPARED, TD_EFORMAT,
            "not a ptxgen-prepare file (it does not start with PGTOKENS); a flat int32 token "
            "file is read only as legacy raw tokens");
    refused("odd.bin", flat, 15, TD_FORMAT_PREPARED, TD_EFORMAT,
            "not a ptxgen-prepare file (it does not start with PGTOKENS): run ptxgen-prepare");
    refused("empty.pgtok", "", 0, TD_FORMAT_PREPARED, TD_EFORMAT,
            "empty file, not prepared training data");
    refused("empty.bin", "", 0, TD_FORMAT_RAW, TD_EFORMAT, "empty token file");
    refused("odd.bin", flat, 15, TD_FORMAT_RAW, TD_EFORMAT,
            "15 bytes, not a whole number of int32 ids");
    put32(flat + 8, (uint32_t)-3);
    refused("neg.bin", flat, sizeof flat, TD_FORMAT_RAW, TD_EFORMAT,
            "token 2 (byte 8) has id -3, a negative id");

    file_spec f = abc_spec();
    {
        bytes b = build(&f);
        refused("prepared.pgtok", b.p, b.n, TD_FORMAT_RAW, TD_EFORMAT,
                "a ptxgen-prepare data file (it starts with PGTOKENS), not flat int32 tokens");
        free(b.p);
    }
    MUTATE("short.pgtok", TD_EFORMAT, "short.pgtok: 100 bytes, shorter than the 128-byte header",
           n = 100);
    MUTATE("v2.pgtok", TD_EFORMAT, "format version 2; this reader knows version 1",
           put32(p + 8, 2));
    MUTATE("hdr.pgtok", TD_EFORMAT, "header size 64, not 128", put32(p + 12, 64));
    MUTATE("flags.pgtok", TD_EFORMAT, "flags 0x5 have bits this reader does not know",
           put32(p + 16, 5));
    MUTATE("vocab0.pgtok", TD_EFORMAT, "vocabulary size 0 is outside [1, 2^31)",
           put32(p + 20, 0));
    MUTATE("vocabbig.pgtok", TD_EFORMAT, "vocabulary size 2147483648 is outside [1, 2^31)",
           put32(p + 20, 0x80000000u));
    MUTATE("reserved.pgtok", TD_EFORMAT, "reserved header byte 100 is not zero", p[100] = 1);
    MUTATE("eos.pgtok", TD_EFORMAT, "eos id 100 is outside [-1, 100)", put32(p + 40, 100));
    MUTATE("eosneg.pgtok", TD_EFORMAT, "eos id -2 is outside [-1, 100)",
           put32(p + 40, (uint32_t)-2));
    MUTATE("pad.pgtok", TD_EFORMAT, "pad id -1 is outside [0, 100)",
           put32(p + 44, (uint32_t)-1));
    MUTATE("nodocs.pgtok", TD_EFORMAT, "no documents", put64(p + 24, 0));
    MUTATE("notokens.pgtok", TD_EFORMAT, "no tokens", put64(p + 32, 0));
    MUTATE("docs.pgtok", TD_EFORMAT, "11 documents but only 10 tokens", put64(p + 24, 11));
    MUTATE("huge.pgtok", TD_EFORMAT,
           "1152921504606846976 documents and 1152921504606846976 tokens overflow a file size",
           put64(p + 24, 1ull << 60), put64(p + 32, 1ull << 60));
    MUTATE("cut.pgtok", TD_EFORMAT,
           "cut.pgtok: 199 bytes, but 3 documents of 10 tokens make a file of 216 bytes "
           "(cut short?)",
           n = 199);
    {
        bytes b = build(&f);
        uint8_t *p = realloc(b.p, b.n + 8);
        memset(p + b.n, 0, 8);
        refused("long.pgtok", p, b.n + 8, TD_FORMAT_PREPARED, TD_EFORMAT,
                "224 bytes, but 3 documents of 10 tokens make a file of 216 bytes (bytes after "
                "the end)");
        free(p);
    }
    MUTATE("more.pgtok", TD_EFORMAT, "make a file of 224 bytes", put64(p + 32, 11));
    MUTATE("off0.pgtok", TD_EFORMAT, "the first document starts at token 1, not 0",
           put64(p + 128, 1));
    MUTATE("emptydoc.pgtok", TD_EFORMAT, "document 1 is empty (offsets 3 and 3)",
           put64(p + 136 + 8, 3));
    MUTATE("back.pgtok", TD_EFORMAT, "document 1 ends before it starts (offsets 3 and 2)",
           put64(p + 136 + 8, 2));
    MUTATE("past.pgtok", TD_EFORMAT, "document 1 ends at token 11, past the 10 tokens",
           put64(p + 136 + 8, 11));
    MUTATE("last.pgtok", TD_EFORMAT, "the last document ends at token 9, not at the 10 tokens",
           put64(p + 136 + 16, 9));
    MUTATE("id.pgtok", TD_EFORMAT,
           "token 7 (document 2) has id 100, outside the vocabulary [0, 100)",
           put32(p + m_.ids_at + 28, 100));
    MUTATE("idneg.pgtok", TD_EFORMAT, "token 0 (document 0) has id -5",
           put32(p + m_.ids_at, (uint32_t)-5));
    MUTATE("mask.pgtok", TD_EFORMAT, "the mask byte of token 4 is 2, not 0 or 1",
           p[m_.mask_at + 4] = 2);
    MUTATE("maskpad.pgtok", TD_EFORMAT, "the padding after the mask is not zero",
           p[m_.mask_at + 12] = 1);
    MUTATE("ctl\x1b]0;x\x07.pgtok", TD_EFORMAT, "ctl\\x1b]0;x\\x07.pgtok: format version 9",
           put32(p + 8, 9));
    /* Three tokens: the ids are padded with 4 bytes. */
    static const int one_len[] = {3};
    f = (file_spec){1, one_len, abc_ids, NULL, 100, -1, 0, 0, {0}};
    MUTATE("idpad.pgtok", TD_EFORMAT, "the padding after the ids is not zero",
           p[m_.ids_at + 13] = 1);
}

/* ---------------------------------------------------------------- the model */

static void test_check_model(void)
{
    fprintf(stderr, "check_model\n");
    char tok[4200], other[4200];
    snprintf(tok, sizeof tok, "%s", write_file("tokenizer.json", "abc", 3));
    uint8_t sum[32];
    REQUIRE_INT_EQ(td_file_sha256(tok, sum), 0);
    static const uint8_t abc[32] = {
        0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea, 0x41, 0x41, 0x40,
        0xde, 0x5d, 0xae, 0x22, 0x23, 0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17,
        0x7a, 0x9c, 0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad};
    REQUIRE(memcmp(sum, abc, 32) == 0);
    file_spec f = abc_spec();
    memcpy(f.sha, abc, 32);
    td_set *s = open_spec(&f, "abc.pgtok");
    if (!s)
        return;
    REQUIRE_INT_EQ(td_check_model(s, 100, tok), 0);
    REQUIRE_INT_EQ(td_check_model(s, 151936, NULL), 0);
    REQUIRE_INT_EQ(td_check_model(s, 99, tok), TD_EMISMATCH);
    REQUIRE_CONTAINS(td_last_message(),
                     "abc.pgtok: prepared with a tokenizer of 100 tokens, more than the "
                     "model's vocabulary of 99");
    REQUIRE_INT_EQ(td_check_model(s, 0, tok), TD_EINVAL);
    snprintf(other, sizeof other, "%s", write_file("other.json", "abd", 3));
    REQUIRE_INT_EQ(td_check_model(s, 100, other), TD_EMISMATCH);
    REQUIRE_CONTAINS(td_last_message(),
                     "abc.pgtok: prepared with another tokenizer (tokenizer.json sha256 "
                     "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad) than ");
    REQUIRE_CONTAINS(td_last_message(), "other.json (sha256 ");
    REQUIRE_INT_EQ(td_check_model(s, 100, file_path("nope.json")), TD_EIO);
    REQUIRE_CONTAINS(td_last_message(), "nope.json: No such file or directory");
    td_close(&s);
}

static void test_params(void)
{
    fprintf(stderr, "batcher parameters\n");
    file_spec f = abc_spec();
    td_set *s = open_spec(&f, "abc.pgtok");
    if (!s)
        return;
    td_batcher *b = NULL;
    static const struct {
        td_batch_params p;
        int code;
        const char *want;
    } bad[] = {
        {{0, 4, TD_PACK, false, 0, 0}, TD_ERANGE, "batch 0 is outside [1, 1073741824]"},
        {{1, 1, TD_PACK, false, 0, 0}, TD_ERANGE, "seq 1 is outside [2, 1073741824]"},
        {{1, (1 << 30) + 1, TD_PACK, false, 0, 0}, TD_ERANGE, "seq 1073741825 is outside"},
        {{1, 4, (td_mode)9, false, 0, 0}, TD_EINVAL, "mode 9 is neither pack nor pad"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        REQUIRE_INT_EQ(td_batcher_create(s, &bad[i].p, &b), bad[i].code);
        REQUIRE(b == NULL);
        REQUIRE_CONTAINS(td_last_message(), bad[i].want);
    }
    REQUIRE_INT_EQ(td_batcher_create(NULL, &bad[0].p, &b), TD_EINVAL);
    REQUIRE_INT_EQ(td_batcher_next(NULL, NULL), TD_EINVAL);
    REQUIRE_STR_EQ(td_err_name(TD_EFORMAT), "TD_EFORMAT");
    REQUIRE_STR_EQ(td_strerror(TD_EMISMATCH), "the data does not fit the model");
    REQUIRE_STR_EQ(td_err_name(-99), "TD_UNKNOWN");
    td_close(&s);
    td_close(&s); /* a no-op */
}

int main(void)
{
    if (!scratch_dir(dir, sizeof dir)) {
        fprintf(stderr, "cannot make a scratch directory\n");
        return 1;
    }
    test_pack_cut();
    test_pack_many();
    test_raw();
    test_shuffle();
    test_resume();
    test_pos_text();
    test_bad_files();
    test_check_model();
    test_params();
    remove_tree(dir);
    TEST_DONE();
}
