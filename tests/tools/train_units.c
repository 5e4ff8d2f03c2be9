/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-train --model's parts that need no device, called directly: the
 * options (layers of defaults, a --config file and the command line; the
 * learning-rate schedule and the step count they make; run_config.json
 * read back as a --config file), checkpoint directories (names, listing,
 * the choice --resume makes, the whole-or-nothing write, pruning,
 * trainer_state.json), the token-file data source (its order and its
 * position as text, round trip), the --data source over .pgtok files the
 * test writes (packed and padded rows, the position round trip, a last
 * batch completed with padding, micro-batches without a target passed
 * over, the model checks and the files of the wrong kind) and the log's
 * lines.
 */
#include "model/model_util.h"
#include "test.h"
#include "train_ckpt.h"
#include "train_opts.h"
#include "train_progress.h"
#include "train_data.h"
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
                             "--log-every", "5", "--rank-pattern",
                             "q_proj=8,model\\.layers\\.1\\.mlp\\.down_proj=4",
                             "--alpha-pattern", "q_proj=32,o=p=2.5", NULL};
    REQUIRE_INT_EQ(load(&o, ck, sizeof ck, a), 0);
    char *js = train_opts_json(&o);
    REQUIRE(js != NULL);
    REQUIRE_CONTAINS(js, "\"lr\": 0.0002,");
    REQUIRE_CONTAINS(js, "\"grad-accum\": 4,");
    REQUIRE_CONTAINS(js, "\"targets\": \"q,v,down\"");
    REQUIRE_CONTAINS(js, "\"epochs\": 3");
    REQUIRE_CONTAINS(js, "\"warmup-ratio\": 0.1");
    REQUIRE_CONTAINS(js, "\"profile\": true");
    REQUIRE_CONTAINS(js, "\"rank-pattern\": \"q_proj=8,model\\\\.layers\\\\.1\\\\.mlp\\\\."
                         "down_proj=4\",");
    REQUIRE_CONTAINS(js, "\"alpha-pattern\": \"q_proj=32,o=p=2.5\",");
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
    /* the patterns as given, then into a fresh adapter's config in order
     * (a key ends at its entry's last '=') */
    REQUIRE_STR_EQ(p.rank_pattern, "q_proj=8,model\\.layers\\.1\\.mlp\\.down_proj=4");
    REQUIRE_STR_EQ(p.alpha_pattern, "q_proj=32,o=p=2.5");
    pgrt_adapter_config *ac = calloc(1, sizeof *ac);
    REQUIRE(ac != NULL);
    if (ac) {
        REQUIRE_INT_EQ(train_opts_patterns(&p, ac), 0);
        REQUIRE(ac->n_rank_pattern == 2 && ac->n_alpha_pattern == 2);
        REQUIRE_STR_EQ(ac->rank_pattern[1].key, "model\\.layers\\.1\\.mlp\\.down_proj");
        REQUIRE(ac->rank_pattern[0].value == 8 && ac->rank_pattern[1].value == 4);
        REQUIRE_STR_EQ(ac->alpha_pattern[1].key, "o=p");
        REQUIRE(ac->alpha_pattern[0].value == 32 && ac->alpha_pattern[1].value == 2.5);
        free(ac);
    }
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
                      .seed = 7, .log_bytes = 4096, .tokens = 123456, .epoch = 1.25,
                      .world = 4};
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
            back.tokens == 123456 && back.epoch == 1.25 && back.world == 4);
    REQUIRE_STR_EQ(back.position, st.position);
    REQUIRE_STR_EQ(back.log_json, st.log_json);
    /* a checkpoint from before several GPUs has no "world": one process */
    char *old = train_state_json(&(train_state){.step = 3, .total_steps = 5, .epoch = 0.5});
    REQUIRE(old != NULL);
    char *w = old ? strstr(old, "  \"world\": 1,\n") : NULL;
    REQUIRE(w != NULL);
    if (w)
        memmove(w, w + strlen("  \"world\": 1,\n"), strlen(w + strlen("  \"world\": 1,\n")) + 1);
    REQUIRE(write_text(d, TRAIN_CKPT_STATE, old) == 0);
    free(old);
    REQUIRE_INT_EQ(train_state_read(d, &back, msg, sizeof msg), 0);
    REQUIRE(back.world == 1 && back.step == 3);
    REQUIRE(write_text(d, TRAIN_CKPT_STATE, "{\"step\": 1, \"total_steps\": 2, \"seed\": 0, "
                       "\"optimizer_steps\": 1, \"skipped\": 0, \"tokens\": 0, "
                       "\"log_bytes\": 0, \"epoch\": 0, \"data_position\": \"\", "
                       "\"log_json\": \"\", \"world\": 0}") == 0);
    REQUIRE_INT_EQ(train_state_read(d, &back, msg, sizeof msg), -1);
    REQUIRE_CONTAINS(msg, "world is missing or not valid");
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

/* ------------------------------------------------------------ --data */

#define X TD_IGNORE

/* The example of docs/data.md and two more: A = 5 6 7 (text), B = 8 9 3 4
 * (prompt 8 9), C = 10 11 12 (a prompt only: no target), D = 13 .. 17;
 * 15 tokens, 8 targets. */
static const int doc_lens[4] = {3, 4, 3, 5};
static const int32_t doc_ids[15] = {5, 6, 7, 8, 9, 3, 4, 10, 11, 12, 13, 14, 15, 16, 17};
static const uint8_t doc_mask[15] = {0, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1};

static void write_docs(const char *path, const uint8_t *sha)
{
    REQUIRE(write_pgtok(path, 4, doc_lens, doc_ids, doc_mask, 32, 1, 0, sha) == 0);
}

typedef struct arrays {
    int32_t ids[64], targets[64], pos[64], doc_start[64];
    train_batch b;
} arrays;

static train_batch *batch_of(arrays *a, int rows, int seq)
{
    memset(a, 0x55, sizeof *a);
    a->b = (train_batch){rows, seq, a->ids, a->targets, a->pos, a->doc_start, 0};
    return &a->b;
}

static void next_ok(train_source *s, train_batch *b)
{
    char msg[1024] = "";
    REQUIRE_INT_EQ(s->ops->next(s, b, msg, sizeof msg), 0);
    REQUIRE_STR_EQ(msg, "");
}

#define REQUIRE_ARR(got, ...)                                                  \
    do {                                                                       \
        const int32_t w_[] = {__VA_ARGS__};                                    \
        for (size_t i_ = 0; i_ < sizeof w_ / sizeof w_[0]; i_++)               \
            REQUIRE_INT_EQ((got)[i_], w_[i_]);                                 \
    } while (0)

static train_source *open_data(const char *path, int seq, bool pad, bool shuffle,
                               bool one_pass, char *note, char *msg)
{
    train_data_params p = {.opt = "--data", .path = path, .vocab = 32, .seq = seq, .pad = pad,
                           .shuffle = shuffle, .seed = 3, .one_pass = one_pass};
    train_source *s = NULL;
    char nb[1024];
    msg[0] = '\0';
    int rc = train_source_data(&p, &s, note ? note : nb, 1024, msg, 8192);
    REQUIRE((rc == 0) == (s != NULL));
    return s;
}

static void test_data_packed(void)
{
    char dp[4200], msg[8192], note[1024];
    path_in(dp, sizeof dp, dir, "docs.pgtok");
    write_docs(dp, NULL);
    train_source *s = open_data(dp, 8, false, false, false, note, msg);
    REQUIRE(s != NULL);
    if (!s)
        return;
    REQUIRE(s->has_targets && s->packed);
    REQUIRE_STR_EQ(note, "");
    REQUIRE_INT_EQ(s->ops->rows_per_epoch(s), 2); /* ceil(15 / 8) */
    arrays a;
    train_batch *b = batch_of(&a, 2, 8);
    next_ok(s, b);
    /* the row of docs/data.md, then C's first token, which predicts
     * nothing (its next token is in the next row, and a prompt's) */
    REQUIRE_ARR(a.ids, 5, 6, 7, 8, 9, 3, 4, 10);
    REQUIRE_ARR(a.targets, 6, 7, X, X, 3, 4, X, X);
    REQUIRE_ARR(a.pos, 0, 1, 2, 0, 1, 2, 3, 0);
    REQUIRE_ARR(a.doc_start, 0, 0, 0, 3, 3, 3, 3, 7);
    /* C's rest, D, the epoch's last row padded */
    REQUIRE_ARR(a.ids + 8, 11, 12, 13, 14, 15, 16, 17, 0);
    REQUIRE_ARR(a.targets + 8, X, X, 14, 15, 16, 17, X, X);
    REQUIRE_ARR(a.pos + 8, 0, 1, 0, 1, 2, 3, 4, 0);
    REQUIRE_ARR(a.doc_start + 8, 0, 0, 2, 2, 2, 2, 2, 7);
    REQUIRE_INT_EQ(b->ntargets, 8);
    REQUIRE(s->ops->epoch(s) == 1.0);
    /* the stream goes on into the next epoch, in file order again */
    b = batch_of(&a, 1, 8);
    next_ok(s, b);
    REQUIRE_ARR(a.ids, 5, 6, 7, 8, 9, 3, 4, 10);
    REQUIRE(s->ops->epoch(s) == 1.5);
    char pos[TRAIN_POS_MAX];
    s->ops->position_get(s, pos);
    REQUIRE_STR_EQ(pos, "pgtok docs=4 tokens=15 targets=8 seq=8 packing=pack order=sequential "
                        "at={'epoch':1,'index':2,'offset':1}");
    train_source_close(&s);
}

/* The position as text brings another source to the same place in a
 * shuffled stream; text of another kind, file or setting is refused. */
static void test_data_position(void)
{
    char dp[4200], msg[8192];
    path_in(dp, sizeof dp, dir, "docs.pgtok");
    train_source *a = open_data(dp, 4, false, true, false, NULL, msg);
    train_source *b = open_data(dp, 4, false, true, false, NULL, msg);
    REQUIRE(a && b);
    if (!a || !b)
        return;
    arrays x, y;
    for (int k = 0; k < 3; k++)
        next_ok(a, batch_of(&x, 3, 4)); /* 9 rows: the second epoch (4 rows each) */
    char pos[TRAIN_POS_MAX];
    a->ops->position_get(a, pos);
    REQUIRE(strlen(pos) < TRAIN_POS_MAX && !strchr(pos, '"') && !strchr(pos, '\\'));
    REQUIRE_CONTAINS(pos, "pgtok docs=4 tokens=15 targets=8 seq=4 packing=pack order=shuffle "
                          "at={'epoch':2,");
    REQUIRE(fabs(a->ops->epoch(a) - 2.25) < 1e-12);
    REQUIRE_INT_EQ(b->ops->position_set(b, pos, msg, sizeof msg), 0);
    for (int k = 0; k < 6; k++) {
        next_ok(a, batch_of(&x, 2, 4));
        next_ok(b, batch_of(&y, 2, 4));
        REQUIRE(!memcmp(x.ids, y.ids, 8 * sizeof x.ids[0]));
        REQUIRE(!memcmp(x.targets, y.targets, 8 * sizeof x.ids[0]));
        REQUIRE(!memcmp(x.pos, y.pos, 8 * sizeof x.ids[0]));
        REQUIRE(!memcmp(x.doc_start, y.doc_start, 8 * sizeof x.ids[0]));
        REQUIRE_INT_EQ(x.b.ntargets, y.b.ntargets);
    }
    /* epochs differ in order; every epoch holds every target once */
    train_source *c = open_data(dp, 4, false, true, false, NULL, msg);
    uint64_t sum = 0;
    for (int k = 0; k < 4; k++) {
        next_ok(c, batch_of(&x, 4, 4));
        sum += x.b.ntargets;
    }
    REQUIRE(sum <= 4 * 8 && sum >= 4 * 8 - 4 * 3); /* a target at a row start is lost */
    train_source_close(&c);
    REQUIRE_INT_EQ(b->ops->position_set(b, "tokens rows=10 seq=4 order=shuffle epoch=0 row=2",
                                        msg, sizeof msg),
                   -1);
    REQUIRE_CONTAINS(msg, "is not a position in a --data file");
    REQUIRE_INT_EQ(b->ops->position_set(b, "pgtok docs=5 tokens=15 targets=8 seq=4 "
                                           "packing=pack order=shuffle at={'epoch':0,'index':0,"
                                           "'offset':0}",
                                        msg, sizeof msg),
                   -1);
    REQUIRE_CONTAINS(msg, "(another file)");
    REQUIRE_INT_EQ(b->ops->position_set(b, "pgtok docs=4 tokens=15 targets=8 seq=4 "
                                           "packing=pad order=shuffle at={'epoch':0,'index':0,"
                                           "'offset':0}",
                                        msg, sizeof msg),
                   -1);
    REQUIRE_CONTAINS(msg, "--packing pad, --data-order shuffle; this run's are 4, pack, shuffle");
    REQUIRE_INT_EQ(b->ops->position_set(b, "pgtok docs=4 tokens=15 targets=8 seq=4 "
                                           "packing=pack order=shuffle at={'epoch':0,'index':0,"
                                           "'offset':1}",
                                        msg, sizeof msg),
                   -1);
    REQUIRE_CONTAINS(msg, "not a row boundary of seq 4");
    REQUIRE_INT_EQ(b->ops->position_set(b, "pgtok docs=4 tokens=15 targets=8 seq=4 "
                                           "packing=pack order=shuffle at={'epoch':0}",
                                        msg, sizeof msg),
                   -1);
    REQUIRE_CONTAINS(msg, "no member");
    /* after the refusals b is where it was */
    next_ok(a, batch_of(&x, 2, 4));
    next_ok(b, batch_of(&y, 2, 4));
    REQUIRE(!memcmp(x.ids, y.ids, 8 * sizeof x.ids[0]));
    train_source_close(&a);
    train_source_close(&b);
}

/* Pad mode: one document a row at positions 0 .. S-1, no pos or
 * doc_start (packed off), long documents cut, said once. */
static void test_data_padded(void)
{
    char dp[4200], msg[8192], note[1024];
    path_in(dp, sizeof dp, dir, "docs.pgtok");
    train_source *s = open_data(dp, 4, true, false, false, note, msg);
    REQUIRE(s != NULL);
    if (!s)
        return;
    REQUIRE(s->has_targets && !s->packed);
    REQUIRE_CONTAINS(note, "--packing pad cuts the documents longer than --seq 4 to their first "
                           "4 tokens (the longest has 5)");
    REQUIRE_INT_EQ(s->ops->rows_per_epoch(s), 4);
    arrays a;
    train_batch *b = batch_of(&a, 4, 4);
    next_ok(s, b);
    REQUIRE_ARR(a.ids, 5, 6, 7, 0, 8, 9, 3, 4, 10, 11, 12, 0, 13, 14, 15, 16);
    REQUIRE_ARR(a.targets, 6, 7, X, X, X, 3, 4, X, X, X, X, X, 14, 15, 16, X);
    REQUIRE_INT_EQ(b->ntargets, 7);
    REQUIRE(a.pos[0] == 0x55555555 && a.doc_start[0] == 0x55555555); /* untouched */
    train_source_close(&s);
}

/* A one-pass source (evaluation): the batch that runs out is completed
 * with padding rows, later batches are padding; back to the start, the
 * same again. */
static void test_data_short_batches(void)
{
    char dp[4200], msg[8192], start[TRAIN_POS_MAX];
    path_in(dp, sizeof dp, dir, "docs.pgtok");
    train_source *s = open_data(dp, 8, false, false, true, NULL, msg);
    REQUIRE(s != NULL);
    if (!s)
        return;
    s->ops->position_get(s, start);
    for (int pass = 0; pass < 2; pass++) {
        arrays a;
        train_batch *b = batch_of(&a, 3, 8);
        next_ok(s, b);
        REQUIRE_INT_EQ(b->ntargets, 8);
        REQUIRE_ARR(a.ids + 8, 11, 12, 13, 14, 15, 16, 17, 0);
        for (int i = 16; i < 24; i++) {
            REQUIRE_INT_EQ(a.ids[i], 0);
            REQUIRE_INT_EQ(a.targets[i], X);
            REQUIRE_INT_EQ(a.pos[i], i - 16);
            REQUIRE_INT_EQ(a.doc_start[i], 0);
        }
        REQUIRE(s->ops->epoch(s) == 1.0);
        b = batch_of(&a, 2, 8);
        next_ok(s, b);
        REQUIRE_INT_EQ(b->ntargets, 0);
        for (int i = 0; i < 16; i++)
            REQUIRE(a.ids[i] == 0 && a.targets[i] == X);
        REQUIRE_INT_EQ(s->ops->position_set(s, start, msg, sizeof msg), 0);
    }
    train_source_close(&s);
}

/* A micro-batch without a target is passed over, its rows counted; data
 * in which no row at this seq holds one is refused after an epoch. */
static void test_data_zero_targets(void)
{
    char dp[4200], msg[8192];
    path_in(dp, sizeof dp, dir, "docs.pgtok");
    train_source *s = open_data(dp, 4, true, false, false, NULL, msg);
    REQUIRE(s != NULL);
    if (!s)
        return;
    arrays a;
    uint64_t passed = 0, got[4];
    for (int k = 0; k < 4; k++) {
        train_batch *b = batch_of(&a, 1, 4);
        REQUIRE_INT_EQ(train_source_next_trained(s, b, &passed, msg, sizeof msg), 0);
        got[k] = (uint64_t)a.ids[0];
        REQUIRE(b->ntargets > 0);
    }
    /* A, B, (C passed over), D, then the next epoch's A */
    REQUIRE(got[0] == 5 && got[1] == 8 && got[2] == 13 && got[3] == 5);
    REQUIRE_INT_EQ(passed, 1);
    train_source_close(&s);

    /* the only target is the third token, and pad mode at seq 2 keeps
     * two: nothing to train on at this seq */
    int len[1] = {3};
    int32_t ids[3] = {5, 6, 7};
    uint8_t mask[3] = {0, 0, 1};
    path_in(dp, sizeof dp, dir, "late.pgtok");
    REQUIRE(write_pgtok(dp, 1, len, ids, mask, 32, -1, 0, NULL) == 0);
    s = open_data(dp, 2, true, false, false, NULL, msg);
    REQUIRE(s != NULL);
    if (!s)
        return;
    train_batch *b = batch_of(&a, 1, 2);
    passed = 0;
    REQUIRE(train_source_next_trained(s, b, &passed, msg, sizeof msg) != 0);
    REQUIRE_CONTAINS(msg, "rows one after another hold no target, more than an epoch (1 rows): "
                          "at --seq 2 nothing of the data is trained on");
    train_source_close(&s);
    /* a file without any target is refused at open */
    uint8_t none[3] = {0, 0, 0};
    REQUIRE(write_pgtok(dp, 1, len, ids, none, 32, -1, 0, NULL) == 0);
    REQUIRE(open_data(dp, 2, false, false, false, NULL, msg) == NULL);
    REQUIRE_CONTAINS(msg, "no token of its 1 documents is a training target");
}

/* The model's vocabulary and tokenizer; files of the other kind given to
 * either option. */
static void test_data_checks(void)
{
    char dp[4200], tj[4200], msg[8192], note[1024];
    path_in(tj, sizeof tj, dir, "tokenizer.json");
    REQUIRE(write_text(dir, "tokenizer.json", "{\"model\": {}}") == 0);
    uint8_t sha[32];
    REQUIRE_INT_EQ(td_file_sha256(tj, sha), 0);
    path_in(dp, sizeof dp, dir, "same.pgtok");
    write_docs(dp, sha);
    train_data_params p = {.opt = "--data", .path = dp, .vocab = 32, .tokenizer_json = tj,
                           .seq = 4};
    train_source *s = NULL;
    REQUIRE_INT_EQ(train_source_data(&p, &s, note, sizeof note, msg, sizeof msg), 0);
    train_source_close(&s);
    /* another tokenizer: td's message, both hashes */
    path_in(dp, sizeof dp, dir, "docs.pgtok");
    p.path = dp;
    REQUIRE(train_source_data(&p, &s, note, sizeof note, msg, sizeof msg) != 0 && !s);
    REQUIRE_CONTAINS(msg, "--data: ");
    REQUIRE_CONTAINS(msg, "docs.pgtok: prepared with another tokenizer (tokenizer.json sha256 "
                          "0000000000000000000000000000000000000000000000000000000000000000) "
                          "than ");
    /* a model with a smaller vocabulary */
    p.tokenizer_json = NULL;
    p.vocab = 16;
    REQUIRE(train_source_data(&p, &s, note, sizeof note, msg, sizeof msg) != 0);
    REQUIRE_CONTAINS(msg, "prepared with a tokenizer of 32 tokens, more than the model's "
                          "vocabulary of 16");
    /* a JSONL to --data; to --tokens; a .pgtok to --tokens */
    char jp[4200];
    path_in(jp, sizeof jp, dir, "train.jsonl");
    REQUIRE(write_text(dir, "train.jsonl", "{\"text\": \"hello\"}\n") == 0);
    p.vocab = 32;
    p.path = jp;
    REQUIRE(train_source_data(&p, &s, note, sizeof note, msg, sizeof msg) != 0);
    REQUIRE_CONTAINS(msg, "train.jsonl: JSON text, not prepared training data: run "
                          "ptxgen-prepare --model DIR --input ");
    REQUIRE(train_source_tokens("--tokens", jp, 32, 4, true, 0, &s, msg, sizeof msg) != 0);
    REQUIRE_CONTAINS(msg, "--tokens ");
    REQUIRE_CONTAINS(msg, "train.jsonl: JSON text, not int32 token ids: run ptxgen-prepare "
                          "--model DIR --input ");
    REQUIRE_CONTAINS(msg, "and train with --data DATA.pgtok");
    REQUIRE(train_source_tokens("--tokens", dp, 32, 4, true, 0, &s, msg, sizeof msg) != 0);
    REQUIRE_CONTAINS(msg, "docs.pgtok: a ptxgen-prepare file (it starts with PGTOKENS), not "
                          "flat int32 tokens: train on it with --data ");
    REQUIRE(train_file_kind(dp) == TRAIN_FILE_PGTOK && train_file_kind(jp) == TRAIN_FILE_JSON);

    /* flat int32 ids to --data: one document, packed rows of the file in
     * its order (said when shuffle was asked for); --packing pad refused */
    int32_t ids[10];
    for (int i = 0; i < 10; i++)
        ids[i] = 20 + i;
    path_in(dp, sizeof dp, dir, "flat.bin");
    REQUIRE(write_bytes(dp, ids, sizeof ids) == 0);
    REQUIRE(train_file_kind(dp) == TRAIN_FILE_OTHER);
    p.path = dp;
    p.shuffle = true;
    REQUIRE_INT_EQ(train_source_data(&p, &s, note, sizeof note, msg, sizeof msg), 0);
    REQUIRE_CONTAINS(note, "flat int32 tokens, read as one document: its rows come in file order");
    REQUIRE_INT_EQ(s->ops->rows_per_epoch(s), 3); /* the last row padded, not dropped */
    arrays a;
    train_batch *b = batch_of(&a, 3, 4);
    next_ok(s, b);
    REQUIRE_ARR(a.ids, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 0, 0);
    REQUIRE_ARR(a.targets, 21, 22, 23, X, 25, 26, 27, X, 29, X, X, X);
    REQUIRE_INT_EQ(b->ntargets, 7);
    char pos[TRAIN_POS_MAX];
    s->ops->position_get(s, pos);
    REQUIRE_STR_EQ(pos, "raw docs=1 tokens=10 targets=9 seq=4 packing=pack order=shuffle "
                        "at={'epoch':1,'index':0,'offset':0}");
    train_source_close(&s);
    p.pad = true;
    REQUIRE(train_source_data(&p, &s, note, sizeof note, msg, sizeof msg) != 0);
    REQUIRE_CONTAINS(msg, "flat int32 tokens are one document, and --packing pad puts one "
                          "document a row");
    /* flat ids past the model's vocabulary */
    p.pad = false;
    p.vocab = 25;
    REQUIRE(train_source_data(&p, &s, note, sizeof note, msg, sizeof msg) != 0);
    REQUIRE_CONTAINS(msg, "--data: ");
    REQUIRE_CONTAINS(msg, "25");
}

/* --data and --packing among the options: exactly one of --data and
 * --tokens, --packing only with --data, both in run_config.json. */
static void test_data_options(void)
{
    train_opts o;
    char ck[4096];
    const char *const both[] = {"--model", "m", "--data", "d", "--tokens", "t", "--batch", "2",
                                "--seq", "4", "--steps", "1", NULL};
    REQUIRE_INT_EQ(load(&o, ck, sizeof ck, both), 2);
    train_opts_free(&o);
    const char *const neither[] = {"--model", "m", "--batch", "2", "--seq", "4", "--steps", "1",
                                   NULL};
    REQUIRE_INT_EQ(load(&o, ck, sizeof ck, neither), 2);
    train_opts_free(&o);
    const char *const packtok[] = {"--model", "m", "--tokens", "t", "--packing", "pad",
                                   "--batch", "2", "--seq", "4", "--steps", "1", NULL};
    REQUIRE_INT_EQ(load(&o, ck, sizeof ck, packtok), 2);
    train_opts_free(&o);
    const char *const ok[] = {"--model", "m", "--data", "d.pgtok", "--packing", "pad",
                              "--batch", "2", "--seq", "4", "--steps", "1", NULL};
    REQUIRE_INT_EQ(load(&o, ck, sizeof ck, ok), 0);
    REQUIRE(o.packing == TRAIN_PACKING_PAD && o.data && !o.tokens);
    char *js = train_opts_json(&o);
    REQUIRE(js != NULL);
    REQUIRE_CONTAINS(js, "\"packing\": \"pad\"");
    REQUIRE_CONTAINS(js, "/d.pgtok\"");
    REQUIRE(!strstr(js, "\"tokens\""));
    char cfg[4200];
    path_in(cfg, sizeof cfg, dir, "data_config.json");
    REQUIRE(write_bytes(cfg, js, strlen(js)) == 0);
    free(js);
    train_opts_free(&o);
    /* the file's --data gives way to --tokens on the command line, and
     * its --packing, which needs --data, is then refused */
    const char *const over[] = {"--config", cfg, "--tokens", "t", NULL};
    REQUIRE_INT_EQ(load(&o, ck, sizeof ck, over), 2);
    train_opts_free(&o);
    const char *const back[] = {"--config", cfg, NULL};
    REQUIRE_INT_EQ(load(&o, ck, sizeof ck, back), 0);
    REQUIRE(o.packing == TRAIN_PACKING_PAD && o.data && o.data[0] == '/');
    train_opts_free(&o);
    /* the default is pack, not written without --data */
    const char *const tok[] = {"--model", "m", "--tokens", "t", "--batch", "2", "--seq", "4",
                               "--steps", "1", NULL};
    REQUIRE_INT_EQ(load(&o, ck, sizeof ck, tok), 0);
    REQUIRE(o.packing == TRAIN_PACKING_PACK);
    js = train_opts_json(&o);
    REQUIRE(js && !strstr(js, "\"packing\"") && !strstr(js, "\"data\""));
    free(js);
    train_opts_free(&o);
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
    r.rows_without_targets = 6;
    train_log_step_line(b, sizeof b, &r);
    REQUIRE_CONTAINS(b, "\"skipped\": false, \"rows_without_targets\": 6}\n");
    r.rows_without_targets = 0;
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
    test_data_packed();
    test_data_position();
    test_data_padded();
    test_data_short_batches();
    test_data_zero_targets();
    test_data_checks();
    test_data_options();
    test_log_lines();
    remove_tree(dir);
    TEST_DONE();
}
