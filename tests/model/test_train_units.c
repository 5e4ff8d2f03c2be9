/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-train --model's parts that need no device, called directly: the
 * options (layers of defaults, a --config file and the command line; the
 * learning-rate schedule and the step count they make; run_config.json
 * read back as a --config file), checkpoint directories (names, listing,
 * the choice --resume makes, the whole-or-nothing write, pruning,
 * trainer_state.json), the token-file data source (its order and its
 * position as text, round trip) and the log's lines.
 */
#include "model_util.h"
#include "test.h"
#include "train_ckpt.h"
#include "train_opts.h"
#include "train_progress.h"
#include "train_source.h"

#include <math.h>
#include <sys/stat.h>

static char dir[4096];

/* train_opts_load on a NULL-terminated argument list (stderr to a file:
 * the messages are the CLI test's business). */
static int load(train_opts *o, char *ckpt, size_t cap, const char *const *args)
{
    char *argv[64] = {"ptxgen-train"};
    int argc = 1;
    while (args[argc - 1] && argc < 63) {
        argv[argc] = (char *)(uintptr_t)args[argc - 1];
        argc++;
    }
    fflush(stderr);
    char errp[4200];
    path_in(errp, sizeof errp, dir, "stderr.txt");
    FILE *keep = fdopen(dup(2), "w");
    REQUIRE(freopen(errp, "w", stderr) != NULL);
    int rc = train_opts_load(argc, argv, o, ckpt, cap);
    fflush(stderr);
    dup2(fileno(keep), 2);
    fclose(keep);
    return rc;
}

static void test_schedule(void)
{
    train_opts o;
    char ck[4096];
    const char *const lin[] = {"--model", "m", "--tokens", "t", "--batch", "2", "--seq", "4",
                               "--steps", "100", "--lr-schedule", "linear", "--warmup-ratio",
                               "0.055", "--min-lr-ratio", "0.1", NULL};
    REQUIRE_INT_EQ(load(&o, ck, sizeof ck, lin), 0);
    pgrt_lm_schedule sc = train_opts_schedule(&o, 100);
    REQUIRE_INT_EQ(sc.kind, PGRT_LM_SCHED_LINEAR);
    REQUIRE_INT_EQ(sc.warmup_steps, 6); /* ceil(5.5), as transformers */
    REQUIRE_INT_EQ(sc.total_steps, 100);
    REQUIRE(sc.floor == 0.1f);
    REQUIRE(train_schedule_lr(&sc, 1e-3, 0) == 0);
    REQUIRE(fabs(train_schedule_lr(&sc, 1e-3, 3) - 0.5e-3) < 1e-15);
    /* the floor is a float: 0.1 to about 1e-8 */
    REQUIRE(fabs(train_schedule_lr(&sc, 1e-3, 6) - 1e-3) < 1e-12);
    REQUIRE(fabs(train_schedule_lr(&sc, 1e-3, 100) - 1e-4) < 1e-11);
    REQUIRE(fabs(train_schedule_lr(&sc, 1e-3, 53) - 1e-3 * (0.1 + 0.9 * 0.5)) < 1e-11);
    REQUIRE(fabs(train_schedule_lr(&sc, 1e-3, 200) - 1e-4) < 1e-11); /* clamped */
    train_opts_free(&o);

    const char *const cosv[] = {"--model", "m", "--tokens", "t", "--batch", "2", "--seq", "4",
                                "--steps", "10", "--lr-schedule", "cosine", NULL};
    REQUIRE_INT_EQ(load(&o, ck, sizeof ck, cosv), 0);
    sc = train_opts_schedule(&o, 10);
    REQUIRE_INT_EQ(sc.kind, PGRT_LM_SCHED_COSINE);
    REQUIRE_INT_EQ(sc.warmup_steps, 0);
    REQUIRE(sc.floor == 0);
    REQUIRE(fabs(train_schedule_lr(&sc, 2.0, 5) - 1.0) < 1e-12);
    REQUIRE(fabs(train_schedule_lr(&sc, 2.0, 10)) < 1e-12);
    train_opts_free(&o);

    /* the default: all zero, the fixed lr of before */
    const char *const con[] = {"--model", "m", "--tokens", "t", "--batch", "2", "--seq", "4",
                               "--steps", "10", NULL};
    REQUIRE_INT_EQ(load(&o, ck, sizeof ck, con), 0);
    sc = train_opts_schedule(&o, 10);
    REQUIRE(sc.kind == PGRT_LM_SCHED_CONSTANT && !sc.warmup_steps && !sc.total_steps &&
            sc.floor == 0);
    train_opts_free(&o);
    /* constant with warmup */
    const char *const cw[] = {"--model", "m", "--tokens", "t", "--batch", "2", "--seq", "4",
                              "--steps", "10", "--warmup-steps", "4", "--min-lr-ratio", "0.5",
                              NULL};
    REQUIRE_INT_EQ(load(&o, ck, sizeof ck, cw), 0);
    sc = train_opts_schedule(&o, 10);
    REQUIRE(sc.kind == PGRT_LM_SCHED_CONSTANT && sc.warmup_steps == 4 && sc.total_steps == 10);
    REQUIRE(sc.floor == 0); /* no decay, no floor */
    REQUIRE(train_schedule_lr(&sc, 1.0, 2) == 0.5 && train_schedule_lr(&sc, 1.0, 9) == 1.0);
    train_opts_free(&o);
}

static void test_total_steps(void)
{
    train_opts o;
    char ck[4096];
    const char *const ep[] = {"--model", "m", "--tokens", "t", "--batch", "3", "--seq", "4",
                              "--epochs", "2", "--grad-accum", "4", NULL};
    REQUIRE_INT_EQ(load(&o, ck, sizeof ck, ep), 0);
    uint64_t total = 0;
    REQUIRE_INT_EQ(train_opts_total_steps(&o, 100, &total), 0);
    REQUIRE_INT_EQ(total, 17); /* ceil(200 / 12) */
    REQUIRE_INT_EQ(train_opts_total_steps(&o, 1, &total), 0);
    REQUIRE_INT_EQ(total, 1);
    REQUIRE_INT_EQ(train_opts_total_steps(&o, 1000000000000ull, &total), 2);
    train_opts_free(&o);
}

/* run_config.json is a --config file that gives the same options back. */
static void test_config_round_trip(void)
{
    train_opts o, p;
    char ck[4096], cfg[4200];
    const char *const a[] = {"--model", "m", "--tokens", "t", "--batch", "2", "--seq", "4",
                             "--epochs", "3", "--lr", "2e-4", "--grad-accum", "4",
                             "--targets", "q,v,down", "--warmup-ratio", "0.1", "--dtype", "f32",
                             "--lr-schedule", "cosine", "--profile", "--mode", "graph",
                             "--log-every", "5", NULL};
    REQUIRE_INT_EQ(load(&o, ck, sizeof ck, a), 0);
    char *js = train_opts_json(&o);
    REQUIRE(js != NULL);
    REQUIRE_CONTAINS(js, "\"lr\": 0.0002,");
    REQUIRE_CONTAINS(js, "\"grad-accum\": 4,");
    REQUIRE_CONTAINS(js, "\"targets\": \"q,v,down\"");
    REQUIRE_CONTAINS(js, "\"epochs\": 3");
    REQUIRE_CONTAINS(js, "\"warmup-ratio\": 0.1");
    REQUIRE_CONTAINS(js, "\"profile\": true");
    REQUIRE(!strstr(js, "\"steps\"") && !strstr(js, "\"warmup-steps\""));
    REQUIRE(!strstr(js, "\"eval-every\"") && !strstr(js, "\"save-every\""));
    REQUIRE(!strstr(js, "\"resume\"") && !strstr(js, "\"config\""));
    path_in(cfg, sizeof cfg, dir, "run_config.json");
    REQUIRE(write_bytes(cfg, js, strlen(js)) == 0);
    /* read back; the command line wins, --steps drops the file's --epochs */
    const char *const b[] = {"--config", cfg, "--steps", "7", "--lr", "1e-4", NULL};
    REQUIRE_INT_EQ(load(&p, ck, sizeof ck, b), 0);
    REQUIRE(p.steps == 7 && p.epochs == 0 && p.lr == 1e-4 && p.grad_accum == 4);
    REQUIRE(p.targets == ((1u << PGRT_LINEAR_Q) | (1u << PGRT_LINEAR_V) |
                          (1u << PGRT_LINEAR_DOWN)));
    REQUIRE(p.warmup_ratio == 0.1 && p.dtype == PGRT_LM_F32 && p.profile);
    REQUIRE(p.schedule == PGRT_LM_SCHED_COSINE && p.modes == TRAIN_MODE_GRAPH);
    REQUIRE(p.log_every == 5 && p.batch == 2 && p.seq == 4);
    /* paths come back absolute */
    REQUIRE(p.model && p.model[0] == '/');
    train_opts_free(&p);
    /* the same text back without overrides */
    const char *const c[] = {"--config", cfg, NULL};
    REQUIRE_INT_EQ(load(&p, ck, sizeof ck, c), 0);
    char *js2 = train_opts_json(&p);
    REQUIRE(js2 != NULL);
    REQUIRE_STR_EQ(js2, js);
    free(js2);
    train_opts_free(&p);
    free(js);
    train_opts_free(&o);
}

static void mk_ckpt(const char *out, uint64_t step, bool complete)
{
    char d[4200], name[64];
    train_ckpt_name(step, name, sizeof name);
    path_in(d, sizeof d, out, name);
    mkdir(out, 0755);
    REQUIRE(mkdir(d, 0755) == 0);
    for (size_t i = 0; i < 5; i++)
        if (complete || i < 2)
            REQUIRE(write_text(d, train_ckpt_files[i], "x") == 0);
}

static void test_ckpt_names(void)
{
    char b[64];
    uint64_t s = 0;
    train_ckpt_name(120, b, sizeof b);
    REQUIRE_STR_EQ(b, "checkpoint-120");
    REQUIRE(train_ckpt_parse_name("checkpoint-120", &s) && s == 120);
    REQUIRE(train_ckpt_parse_name("checkpoint-0", &s) && s == 0);
    REQUIRE(!train_ckpt_parse_name("checkpoint-", &s));
    REQUIRE(!train_ckpt_parse_name("checkpoint-012", &s));
    REQUIRE(!train_ckpt_parse_name("checkpoint-1a", &s));
    REQUIRE(!train_ckpt_parse_name("checkpoint--1", &s));
    REQUIRE(!train_ckpt_parse_name("checkpoint-99999999999999999999", &s));
    REQUIRE(!train_ckpt_parse_name("final", &s));
    REQUIRE(!train_ckpt_parse_name(".ptxgen-abcdefghij.tmp", &s));
    REQUIRE_INT_EQ(train_ckpt_prune_count(5, 0), 0);
    REQUIRE_INT_EQ(train_ckpt_prune_count(5, 2), 3);
    REQUIRE_INT_EQ(train_ckpt_prune_count(2, 2), 0);
    REQUIRE_INT_EQ(train_ckpt_prune_count(1, 3), 0);
}

static void test_ckpt_dirs(void)
{
    char out[4200], p[4300], got[4300], msg[8192];
    path_in(out, sizeof out, dir, "out");
    mk_ckpt(out, 10, true);
    mk_ckpt(out, 2, true);
    mk_ckpt(out, 30, false); /* cut short: skipped */
    mk_ckpt(out, 20, true);
    path_in(p, sizeof p, out, "checkpoint-x");
    REQUIRE(mkdir(p, 0755) == 0);
    train_ckpt_entry *e;
    size_t n;
    REQUIRE_INT_EQ(train_ckpt_list(out, &e, &n), 0);
    REQUIRE_INT_EQ(n, 4);
    REQUIRE(e[0].step == 2 && e[1].step == 10 && e[2].step == 20 && e[3].step == 30);
    REQUIRE(e[0].complete && e[2].complete && !e[3].complete);
    free(e);
    REQUIRE_INT_EQ(train_ckpt_resolve(out, got, sizeof got, msg, sizeof msg), 0);
    path_in(p, sizeof p, out, "checkpoint-20");
    REQUIRE_STR_EQ(got, p);
    /* a checkpoint named itself, with a trailing slash */
    char q[4400];
    snprintf(q, sizeof q, "%s/", p);
    REQUIRE_INT_EQ(train_ckpt_resolve(q, got, sizeof got, msg, sizeof msg), 0);
    REQUIRE_STR_EQ(got, p);
    path_in(p, sizeof p, out, "checkpoint-30");
    REQUIRE_INT_EQ(train_ckpt_resolve(p, got, sizeof got, msg, sizeof msg), -1);
    REQUIRE_CONTAINS(msg, "not a complete checkpoint (no optimizer.safetensors)");
    REQUIRE(train_ckpt_missing(p) && !strcmp(train_ckpt_missing(p), "optimizer.safetensors"));
    /* pruning keeps the newest complete ones; the incomplete one stays */
    REQUIRE_INT_EQ(train_ckpt_prune(out, 2, msg, sizeof msg), 1);
    REQUIRE_INT_EQ(train_ckpt_list(out, &e, &n), 0);
    REQUIRE(n == 3 && e[0].step == 10 && e[1].step == 20 && e[2].step == 30);
    free(e);
    REQUIRE_INT_EQ(train_ckpt_prune(out, 0, msg, sizeof msg), 0);
    /* nothing complete */
    char only[4200];
    path_in(only, sizeof only, dir, "only-partial");
    mk_ckpt(only, 5, false);
    REQUIRE_INT_EQ(train_ckpt_resolve(only, got, sizeof got, msg, sizeof msg), -1);
    REQUIRE_CONTAINS(msg, "no complete checkpoint in it (checkpoint-5 has no "
                          "optimizer.safetensors)");
    char empty[4200];
    path_in(empty, sizeof empty, dir, "empty");
    REQUIRE(mkdir(empty, 0755) == 0);
    REQUIRE_INT_EQ(train_ckpt_resolve(empty, got, sizeof got, msg, sizeof msg), -1);
    REQUIRE_CONTAINS(msg, "no checkpoint-<step> directory in it");
    REQUIRE(!train_ckpt_any(empty, got, sizeof got));
    REQUIRE(train_ckpt_any(only, got, sizeof got) && !strcmp(got, "checkpoint-5"));

    /* a write: nothing named checkpoint-<step> until the commit; a step
     * already there is replaced */
    char tmp[4300], fin[4300];
    REQUIRE_INT_EQ(train_ckpt_begin(out, tmp, sizeof tmp, msg, sizeof msg), 0);
    for (size_t i = 0; i < 4; i++)
        REQUIRE_INT_EQ(train_ckpt_write_file(tmp, train_ckpt_files[i], "new", 3, msg,
                                             sizeof msg),
                       0);
    /* not complete yet: refused, nothing renamed */
    REQUIRE_INT_EQ(train_ckpt_commit(out, tmp, 20, fin, sizeof fin, msg, sizeof msg), -1);
    REQUIRE_CONTAINS(msg, "trainer_state.json was not written");
    REQUIRE_INT_EQ(train_ckpt_write_file(tmp, TRAIN_CKPT_STATE, "{}", 2, msg, sizeof msg), 0);
    REQUIRE_INT_EQ(train_ckpt_write_file(tmp, TRAIN_CKPT_STATE, "{}", 2, msg, sizeof msg), -1);
    REQUIRE_INT_EQ(train_ckpt_commit(out, tmp, 20, fin, sizeof fin, msg, sizeof msg), 0);
    path_in(p, sizeof p, out, "checkpoint-20");
    REQUIRE_STR_EQ(fin, p);
    path_in(q, sizeof q, p, "run_config.json");
    char *text;
    size_t len;
    REQUIRE(train_read_file(q, 100, &text, &len) == 0 && !strcmp(text, "new"));
    free(text);
    REQUIRE_INT_EQ(dir_entries(out), 4); /* 10, 20, 30, -x: no temporary left */
    /* abort */
    REQUIRE_INT_EQ(train_ckpt_begin(out, tmp, sizeof tmp, msg, sizeof msg), 0);
    REQUIRE_INT_EQ(train_ckpt_write_file(tmp, "x", "1", 1, msg, sizeof msg), 0);
    train_ckpt_abort(tmp);
    REQUIRE_INT_EQ(dir_entries(out), 4);
    /* begin makes a missing output directory */
    char fresh[4200];
    path_in(fresh, sizeof fresh, dir, "fresh-out");
    REQUIRE_INT_EQ(train_ckpt_begin(fresh, tmp, sizeof tmp, msg, sizeof msg), 0);
    train_ckpt_abort(tmp);
    REQUIRE_INT_EQ(dir_entries(fresh), 0);
    REQUIRE_INT_EQ(train_ckpt_begin("/nonexistent/out", tmp, sizeof tmp, msg, sizeof msg), -1);
    REQUIRE_CONTAINS(msg, "--output-dir /nonexistent/out: ");
}

static void test_state(void)
{
    train_state st = {.step = 30, .total_steps = 50, .optimizer_steps = 29, .skipped = 1,
                      .seed = 7, .log_bytes = 4096, .tokens = 123456, .epoch = 1.25};
    snprintf(st.position, sizeof st.position, "tokens rows=4 seq=4 order=shuffle epoch=1 row=1");
    snprintf(st.log_json, sizeof st.log_json, "/runs/a \"b\"/log.jsonl");
    char *js = train_state_json(&st);
    REQUIRE(js != NULL);
    char d[4200], msg[8192];
    path_in(d, sizeof d, dir, "state");
    REQUIRE(mkdir(d, 0755) == 0);
    REQUIRE(write_text(d, TRAIN_CKPT_STATE, js) == 0);
    free(js);
    train_state back;
    REQUIRE_INT_EQ(train_state_read(d, &back, msg, sizeof msg), 0);
    REQUIRE(back.step == 30 && back.total_steps == 50 && back.optimizer_steps == 29 &&
            back.skipped == 1 && back.seed == 7 && back.log_bytes == 4096 &&
            back.tokens == 123456 && back.epoch == 1.25);
    REQUIRE_STR_EQ(back.position, st.position);
    REQUIRE_STR_EQ(back.log_json, st.log_json);
    REQUIRE(write_text(d, TRAIN_CKPT_STATE, "{\"step\": 1}") == 0);
    REQUIRE_INT_EQ(train_state_read(d, &back, msg, sizeof msg), -1);
    REQUIRE_CONTAINS(msg, "total_steps is missing or not valid");
}

static void rows_of(train_source *s, int rows, int seq, int32_t *ids)
{
    train_batch b = {.rows = rows, .seq = seq, .ids = ids};
    char msg[256];
    REQUIRE_INT_EQ(s->ops->next(s, &b, msg, sizeof msg), 0);
    REQUIRE_INT_EQ(b.ntargets, (uint64_t)rows * (uint64_t)(seq - 1));
}

static void test_source(void)
{
    char tp[4200], msg[8192];
    path_in(tp, sizeof tp, dir, "tokens.bin");
    int32_t ids[42];
    for (int i = 0; i < 42; i++)
        ids[i] = i;
    REQUIRE(write_bytes(tp, ids, sizeof ids) == 0);
    train_source *a = NULL, *b = NULL, *c = NULL;
    REQUIRE_INT_EQ(train_source_tokens("--tokens", tp, 64, 4, true, 5, &a, msg, sizeof msg), 0);
    REQUIRE_INT_EQ(a->ops->rows_per_epoch(a), 10); /* 42 / 4: the last 2 ids unused */
    REQUIRE(!a->has_targets && !a->packed);
    /* each epoch a permutation, epochs in their own orders, one seed one order */
    bool differ = false;
    for (uint64_t e = 0; e < 3; e++) {
        unsigned seen = 0;
        for (uint64_t i = 0; i < 10; i++) {
            uint64_t r = train_source_tokens_row(a, e, i);
            REQUIRE(r < 10);
            seen |= 1u << r;
            if (e == 1 && r != train_source_tokens_row(a, 0, i))
                differ = true;
        }
        REQUIRE_INT_EQ(seen, 0x3ff);
    }
    REQUIRE(differ);
    REQUIRE_INT_EQ(train_source_tokens("--tokens", tp, 64, 4, true, 5, &b, msg, sizeof msg), 0);
    for (uint64_t i = 0; i < 10; i++)
        REQUIRE_INT_EQ(train_source_tokens_row(a, 2, i), train_source_tokens_row(b, 2, i));
    /* batches cross epochs; the position text brings another source to the
     * same place */
    int32_t x[3 * 4], y[3 * 4];
    for (int k = 0; k < 4; k++)
        rows_of(a, 3, 4, x); /* 12 rows: into the second epoch */
    char pos[TRAIN_POS_MAX];
    a->ops->position_get(a, pos);
    REQUIRE_STR_EQ(pos, "tokens rows=10 seq=4 order=shuffle epoch=1 row=2");
    REQUIRE(fabs(a->ops->epoch(a) - 1.2) < 1e-12);
    REQUIRE_INT_EQ(b->ops->position_set(b, pos, msg, sizeof msg), 0);
    for (int k = 0; k < 5; k++) {
        rows_of(a, 3, 4, x);
        rows_of(b, 3, 4, y);
        REQUIRE(!memcmp(x, y, sizeof x));
    }
    /* a row is 4 consecutive ids of the file */
    for (int r = 0; r < 3; r++)
        REQUIRE(x[4 * r] % 4 == 0 && x[4 * r + 3] == x[4 * r] + 3);
    /* refused: other text, another seq or file, another order, past the end */
    REQUIRE_INT_EQ(b->ops->position_set(b, "epoch 3", msg, sizeof msg), -1);
    REQUIRE_CONTAINS(msg, "is not a position in a --tokens file");
    REQUIRE_INT_EQ(b->ops->position_set(b, "tokens rows=11 seq=4 order=shuffle epoch=0 row=0",
                                        msg, sizeof msg),
                   -1);
    REQUIRE_CONTAINS(msg, "another file, or another --seq");
    REQUIRE_INT_EQ(b->ops->position_set(b, "tokens rows=10 seq=4 order=sequential epoch=0 "
                                           "row=0",
                                        msg, sizeof msg),
                   -1);
    REQUIRE_CONTAINS(msg, "in a sequential order, this run's is shuffle");
    REQUIRE_INT_EQ(b->ops->position_set(b, "tokens rows=10 seq=4 order=shuffle epoch=0 row=10",
                                        msg, sizeof msg),
                   -1);
    REQUIRE_CONTAINS(msg, "past the last row (9)");
    REQUIRE_INT_EQ(b->ops->position_set(b, "tokens rows=10 seq=4 order=shuffle epoch=0 row=1x",
                                        msg, sizeof msg),
                   -1);
    /* file order */
    REQUIRE_INT_EQ(train_source_tokens("--eval-data", tp, 64, 4, false, 0, &c, msg, sizeof msg),
                   0);
    rows_of(c, 3, 4, x);
    for (int i = 0; i < 12; i++)
        REQUIRE_INT_EQ(x[i], i);
    c->ops->position_get(c, pos);
    REQUIRE_STR_EQ(pos, "tokens rows=10 seq=4 order=sequential epoch=0 row=3");
    train_source_close(&a);
    train_source_close(&b);
    train_source_close(&c);
    REQUIRE(a == NULL);
    /* too short for a row; an id outside the vocabulary */
    REQUIRE(train_source_tokens("--tokens", tp, 64, 43, true, 0, &a, msg, sizeof msg) != 0);
    REQUIRE_CONTAINS(msg, "--tokens: 42 ids make no row of --seq 43");
    REQUIRE(train_source_tokens("--tokens", tp, 40, 4, true, 0, &a, msg, sizeof msg) != 0);
    REQUIRE_CONTAINS(msg, "token id 40 at byte 160");
}

static void test_log_lines(void)
{
    char b[512], d[64];
    train_step_rec r = {.step = 3, .epoch = 0.5, .loss = 2.25, .lr = 1e-4f, .grad_norm = 0.5f,
                        .tokens = 2048, .ms = 20, .elapsed_s = 1.5};
    train_log_step_line(b, sizeof b, &r);
    REQUIRE_STR_EQ(b, "{\"step\": 3, \"epoch\": 0.500000, \"loss\": 2.25, \"lr\": 0.0001, "
                      "\"grad_norm\": 0.5, \"tokens\": 2048, \"tokens_per_s\": 102400.0, "
                      "\"ms\": 20.0000, \"elapsed_s\": 1.500, \"skipped\": false}\n");
    r.skipped = true;
    r.grad_norm = INFINITY;
    train_log_step_line(b, sizeof b, &r);
    REQUIRE_CONTAINS(b, "\"grad_norm\": null");
    REQUIRE_CONTAINS(b, "\"skipped\": true}");
    train_eval_rec e = {.step = 10, .epoch = 1, .loss = log(8.0), .targets = 12, .batches = 2,
                        .elapsed_s = 3};
    train_log_eval_line(b, sizeof b, &e);
    /* losses as the shortest text that reads back as the same double */
    REQUIRE_STR_EQ(b, "{\"step\": 10, \"epoch\": 1.000000, \"eval_loss\": 2.0794415416798357, "
                      "\"eval_perplexity\": 7.999999999999998, \"eval_targets\": 12, "
                      "\"eval_batches\": 2, "
                      "\"elapsed_s\": 3.000}\n");
    train_fmt_duration(45, d, sizeof d);
    REQUIRE_STR_EQ(d, "45s");
    train_fmt_duration(192, d, sizeof d);
    REQUIRE_STR_EQ(d, "3m12s");
    train_fmt_duration(7500, d, sizeof d);
    REQUIRE_STR_EQ(d, "2h05m");
    train_fmt_duration(3 * 86400 + 4 * 3600, d, sizeof d);
    REQUIRE_STR_EQ(d, "3d04h");
    train_fmt_duration(NAN, d, sizeof d);
    REQUIRE_STR_EQ(d, "?");
    train_step_rec p = {.step = 12, .loss = 2.5, .lr = 1e-4, .grad_norm = 1.5};
    train_progress_line(b, sizeof b, "eager", &p, 500, 41000, 192, (size_t)3 << 30,
                        (size_t)80 << 30);
    REQUIRE_STR_EQ(b, "eager step 12/500  loss 2.500000  lr 1.000e-04  grad_norm 1.5  41000 "
                      "tokens/s  ETA 3m12s  mem 3.0/80.0 GiB");

    /* the log file: fresh, a link replaced, resumed and cut */
    char lp[4200], tgt[4200], msg[8192];
    path_in(lp, sizeof lp, dir, "log.jsonl");
    path_in(tgt, sizeof tgt, dir, "precious");
    REQUIRE(write_text(dir, "precious", "keep") == 0);
    REQUIRE(symlink(tgt, lp) == 0);
    train_log *l = NULL;
    REQUIRE_INT_EQ(train_log_open(lp, -1, &l, msg, sizeof msg), 0);
    r.skipped = false;
    for (uint64_t s = 1; s <= 3; s++) {
        r.step = s;
        REQUIRE_INT_EQ(train_log_step(l, &r), 0);
    }
    uint64_t at2 = 0;
    train_log_close(&l);
    char *text;
    size_t len;
    REQUIRE(train_read_file(tgt, 100, &text, &len) == 0 && !strcmp(text, "keep"));
    free(text);
    REQUIRE(train_read_file(lp, 1 << 20, &text, &len) == 0);
    at2 = (uint64_t)(strstr(text, "{\"step\": 3") - text);
    free(text);
    REQUIRE_INT_EQ(train_log_open(lp, (long long)at2, &l, msg, sizeof msg), 0);
    REQUIRE_INT_EQ(train_log_bytes(l), at2);
    r.step = 30;
    REQUIRE_INT_EQ(train_log_step(l, &r), 0);
    train_log_close(&l);
    REQUIRE(train_read_file(lp, 1 << 20, &text, &len) == 0);
    REQUIRE(strstr(text, "{\"step\": 2") && !strstr(text, "{\"step\": 3,") &&
            strstr(text, "{\"step\": 30"));
    free(text);
}

int main(void)
{
    REQUIRE(scratch_dir(dir, sizeof dir) != NULL);
    test_schedule();
    test_total_steps();
    test_config_round_trip();
    test_ckpt_names();
    test_ckpt_dirs();
    test_state();
    test_source();
    test_log_lines();
    remove_tree(dir);
    TEST_DONE();
}
