/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-train --model on bad input: each case is one line on stderr
 * naming the problem, exit 2, and no output file (log, adapter, gradients)
 * written. Every case here is refused before a GPU is needed, so the test
 * runs anywhere (with no driver: a case that got as far as the GPU would
 * fail). With the fake driver of tests/runtime, tiny runs check that the
 * outputs are written whole. The options of a run (schedule, gradient
 * accumulation, evaluation, checkpoints, --config, --resume) are refused
 * the same way; --help and --version answer. With the stand-in for the
 * trainer's API (lm_train_shim.c, preloaded), runs against the fake driver
 * write checkpoints, stop on a signal and resume to the losses of an
 * uninterrupted run; with --data, the same over a .pgtok, packed and
 * padded, micro-batches without a target passed over and logged. Usage:
 * test_train_cli_model PTXGEN_TRAIN [FAKE_LIBCUDA [SHIM [VERSION]]]
 */
#include "model/model_util.h"
#include "ptxgen/pgrt_model.h"
#include "test.h"

#include <sys/stat.h>
#include <sys/wait.h>

static int train_read_file_(const char *path, char **text, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    *text = strdup(buf);
    *len = n;
    return *text ? 0 : -1;
}

static const char *exe;
static char dir[4096];
static const char *child_cwd; /* where the run starts (NULL: here) */
static const char *child_preload; /* LD_PRELOAD of the run (NULL: none) */
static const char *const *child_env; /* more "NAME=value" of the run (NULL: none) */
static const char *child_out; /* the run's stdout goes there (NULL: /dev/null) */

static const char cfg_ok[] =
    "{\"model_type\":\"qwen2\",\"hidden_size\":16,\"intermediate_size\":24,"
    "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"num_key_value_heads\":1,"
    "\"vocab_size\":32,\"rms_norm_eps\":1e-6,\"tie_word_embeddings\":true}";

/* The model's tensors, bf16 zeros; victim gets one more row. */
static void write_weights(const char *sub, const char *victim)
{
    pgrt_model_config c;
    REQUIRE_INT_EQ(pgrt_model_config_parse(cfg_ok, strlen(cfg_ok), &c), 0);
    pgrt_weight_spec *s;
    size_t n;
    REQUIRE_INT_EQ(pgrt_model_weight_specs(&c, &s, &n), 0);
    pgrt_st_out t[64];
    static uint8_t zeros[64 * 64 * 2];
    for (size_t i = 0; i < n; i++) {
        t[i] = (pgrt_st_out){.name = s[i].name, .dtype = PGRT_ST_BF16, .ndim = s[i].ndim,
                             .shape = {s[i].shape[0], s[i].shape[1]}, .data = zeros};
        if (victim && !strcmp(victim, s[i].name))
            t[i].shape[0]++;
    }
    char p[4096], d[4096];
    path_in(d, sizeof d, dir, sub);
    path_in(p, sizeof p, d, "model.safetensors");
    REQUIRE_INT_EQ(pgrt_st_write(p, t, n, NULL, NULL, 0), 0);
    free(s);
}

static void make_model(const char *sub, const char *cfg, const char *victim)
{
    char d[4096];
    path_in(d, sizeof d, dir, sub);
    mkdir(d, 0700);
    REQUIRE(write_text(d, "config.json", cfg) == 0);
    write_weights(sub, victim);
}

/* Run ptxgen-train with args (a NULL-terminated list) against driver (the
 * fake one, or NULL: none, so that a case not refused before the first
 * launch fails here even on a machine with a GPU); returns the exit
 * status, the first stderr line in line, the number of lines in *nlines. */
static int run_with(const char *driver, char *line, size_t len, const char *const *args,
                    int *nlines)
{
    char errp[4096];
    path_in(errp, sizeof errp, dir, "stderr.txt");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(errp, "w", stderr);
        (void)f;
        f = freopen(child_out ? child_out : "/dev/null", "w", stdout);
        setenv("PGRT_LIBCUDA", driver ? driver : "/nonexistent/libcuda.so.1", 1);
        if (child_preload) {
            setenv("LD_PRELOAD", child_preload, 1);
            /* in an ASan build the shim is loaded ahead of the sanitizer's
             * runtime, which refuses to start unless told the order is
             * meant (the shim interposes a few pgrt_lm_* symbols, nothing
             * ASan intercepts) */
            char asan[512];
            const char *prev = getenv("ASAN_OPTIONS");
            snprintf(asan, sizeof asan, "%s%sverify_asan_link_order=0", prev ? prev : "",
                     prev && *prev ? ":" : "");
            setenv("ASAN_OPTIONS", asan, 1);
        }
        for (const char *const *e = child_env; e && *e; e++) {
            char name[64];
            size_t eq = strcspn(*e, "=");
            snprintf(name, sizeof name, "%.*s", (int)eq, *e);
            setenv(name, (*e)[eq] ? *e + eq + 1 : "", 1);
        }
        if (child_cwd && chdir(child_cwd) != 0)
            _exit(126);
        const char *argv[80] = {exe};
        int i = 1;
        for (; args[i - 1] && i < 79; i++)
            argv[i] = args[i - 1];
        argv[i] = NULL;
        execv(exe, (char *const *)(void *)argv);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    FILE *f = fopen(errp, "r");
    line[0] = '\0';
    int lines = 0;
    char buf[1024];
    while (f && fgets(buf, sizeof buf, f)) {
        if (!lines)
            memcpy(line, buf, len < sizeof buf ? len : sizeof buf);
        lines++;
    }
    if (f)
        fclose(f);
    line[strcspn(line, "\n")] = '\0';
    /* the line echoes paths and file contents: nothing a terminal acts on */
    REQUIRE(printable_line(line));
    *nlines = lines;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A run refused before a GPU is needed: one line. */
static int run(char *line, size_t len, const char *const *args)
{
    int lines = 0;
    int rc = run_with(NULL, line, len, args, &lines);
    REQUIRE_INT_EQ(lines, 1);
    return rc;
}

static char mp[4096], tp[4096], tbad[4096], logp[4096], outa[4096], outg[4096], adp[4096];

#define CASE(want, ...)                                                        \
    do {                                                                       \
        const char *const args_[] = {__VA_ARGS__, "--log-json", logp, "--save-adapter", outa, \
                                  "--save-grads", outg, "--batch", "1", "--seq", "4",      \
                                  "--steps", "1", NULL};                                     \
        char line_[1024];                                                      \
        REQUIRE_INT_EQ(run(line_, sizeof line_, args_), 2);                       \
        REQUIRE_CONTAINS(line_, want);                                         \
        REQUIRE(access(logp, F_OK) != 0 && access(outa, F_OK) != 0 &&          \
                access(outg, F_OK) != 0);                                      \
    } while (0)

/* Exactly the args (and a tiny run's sizes): exit 2, one line naming want. */
#define REFUSED(want, ...)                                                     \
    do {                                                                       \
        const char *const args_[] = {__VA_ARGS__, "--batch", "1", "--seq", "4", "--steps", "1", \
                                     NULL};                                    \
        char line_[1024];                                                      \
        REQUIRE_INT_EQ(run(line_, sizeof line_, args_), 2);                    \
        REQUIRE_CONTAINS(line_, want);                                         \
    } while (0)

/* Every destination is checked before the first launch: a typo in an
 * output path is refused at once, not after the run. */
static void test_destinations(void)
{
    char p[4096], q[4096];
    REFUSED("--save-adapter: /nonexistent/dir: cannot create it: the directory it would go in "
            "does not exist",
            "--model", mp, "--tokens", tp, "--save-adapter", "/nonexistent/dir");
    REFUSED("--save-grads: /nonexistent/dir: cannot create it", "--model", mp, "--tokens", tp,
            "--save-grads", "/nonexistent/dir");
    REFUSED("--log-json: /nonexistent/log.jsonl: cannot write there: No such file", "--model",
            mp, "--tokens", tp, "--log-json", "/nonexistent/log.jsonl");
    /* a file where a directory goes, a directory where a file goes */
    REQUIRE(write_text(dir, "plain", "keep") == 0);
    path_in(p, sizeof p, dir, "plain");
    REFUSED("--save-adapter: ", "--model", mp, "--tokens", tp, "--save-adapter", p);
    REFUSED("plain: not a directory", "--model", mp, "--tokens", tp, "--save-grads", p);
    path_in(q, sizeof q, p, "log.jsonl");
    REFUSED("--log-json: ", "--model", mp, "--tokens", tp, "--log-json", q);
    REFUSED("--log-json: ", "--model", mp, "--tokens", tp, "--log-json", dir);
    path_in(p, sizeof p, dir, "a-directory");
    REQUIRE(mkdir(p, 0755) == 0);
    REFUSED("a-directory: is a directory, not a file", "--model", mp, "--tokens", tp,
            "--log-json", p);
    rmdir(p);
    /* the first bad one is named; nothing is created for the good ones */
    path_in(q, sizeof q, dir, "fresh-out");
    REFUSED("--log-json: /nonexistent", "--model", mp, "--tokens", tp, "--save-adapter", q,
            "--log-json", "/nonexistent/log.jsonl");
    REQUIRE(access(q, F_OK) != 0);
    /* a directory that takes no new file (root ignores permissions) */
    if (geteuid() != 0) {
        path_in(p, sizeof p, dir, "ro");
        REQUIRE(mkdir(p, 0555) == 0);
        path_in(q, sizeof q, p, "out");
        REFUSED("--save-adapter: ", "--model", mp, "--tokens", tp, "--save-adapter", q);
        REFUSED("Permission denied", "--model", mp, "--tokens", tp, "--save-adapter", p);
        path_in(q, sizeof q, p, "log.jsonl");
        REFUSED("Permission denied", "--model", mp, "--tokens", tp, "--log-json", q);
        rmdir(p);
    }
    path_in(p, sizeof p, dir, "plain");
    unlink(p);
}

/* No output may replace another output or an input, however the paths
 * are spelled; the run is refused before anything is read twice. */
static void test_aliases(const char *good)
{
    char p[4096], q[4096], d2[4200];
    /* two outputs, relative and absolute, "." and "..", a trailing slash */
    snprintf(d2, sizeof d2, "%s/./ok/../out-adapter/", dir);
    REFUSED("--save-adapter and --save-grads both name ", "--model", mp, "--tokens", tp,
            "--save-adapter", outa, "--save-grads", d2);
    REQUIRE(access(outa, F_OK) != 0);
    child_cwd = dir;
    REFUSED("--save-adapter and --save-grads both name ", "--model", mp, "--tokens", tp,
            "--save-adapter", "out-adapter", "--save-grads", outa);
    REFUSED("--save-adapter and --log-json both name ", "--model", "ok", "--tokens",
            "tokens.bin", "--save-adapter", "x", "--log-json", "./x");
    /* the log over an input: the tokens, the model's files, relative */
    REFUSED("--log-json and --tokens both name ", "--model", "ok", "--tokens", "tokens.bin",
            "--log-json", tp);
    REFUSED("--log-json and --model both name ", "--model", "ok", "--tokens", "tokens.bin",
            "--log-json", "ok/config.json");
    child_cwd = NULL;
    path_in(p, sizeof p, mp, "model.safetensors");
    REFUSED("--log-json and --model both name ", "--model", mp, "--tokens", tp, "--log-json", p);
    REFUSED("--log-json and --model both name ", "--model", mp, "--tokens", tp, "--log-json", mp);
    /* through a link to the model directory, and a hard link to the tokens */
    path_in(p, sizeof p, dir, "mlink");
    REQUIRE(symlink(mp, p) == 0);
    path_in(q, sizeof q, p, "config.json");
    REFUSED("--log-json and --model both name ", "--model", mp, "--tokens", tp, "--log-json", q);
    REFUSED("--save-grads and --model both name ", "--model", p, "--tokens", tp, "--save-grads",
            mp);
    unlink(p);
    path_in(p, sizeof p, dir, "tokens-hard");
    REQUIRE(link(tp, p) == 0);
    REFUSED("--log-json and --tokens name the same file", "--model", mp, "--tokens", tp,
            "--log-json", p);
    unlink(p);
    /* an output directory over an input */
    REFUSED("--save-adapter and --model both name ", "--model", mp, "--tokens", tp,
            "--save-adapter", mp);
    REFUSED("--save-grads and --tokens both name ", "--model", mp, "--tokens", tp,
            "--save-grads", tp);
    /* a file an output directory gets, named by another output */
    path_in(p, sizeof p, outg, "adapter_config.json");
    REFUSED("--save-grads and --log-json both name ", "--model", mp, "--tokens", tp,
            "--save-grads", outg, "--log-json", p);
    REQUIRE(access(outg, F_OK) != 0);
    /* the adapter loaded: the gradients or the log may not replace it ... */
    REFUSED("--save-grads and --adapter both name ", "--model", mp, "--adapter", good,
            "--tokens", tp, "--save-grads", good);
    path_in(p, sizeof p, good, "adapter_model.safetensors");
    REFUSED("--log-json and --adapter both name ", "--model", mp, "--adapter", good, "--tokens",
            tp, "--log-json", p);
    /* ... but the trained adapter may (in place, atomically), and past the
     * checks the run needs the GPU this test does not give it */
    const char *const inplace[] = {"--model", mp, "--adapter", good, "--tokens", tp,
                                   "--save-adapter", good, "--batch", "1", "--seq", "4",
                                   "--steps", "1", NULL};
    char line[1024];
    REQUIRE_INT_EQ(run(line, sizeof line, inplace), 1);
    REQUIRE_CONTAINS(line, "no CUDA driver");
    /* a runtime message that quotes a path from the environment: escaped */
    int lines = 0;
    REQUIRE_INT_EQ(run_with("/nonexistent/\x1b]0;pwned\x07/libcuda.so", line, sizeof line,
                            inplace, &lines),
                   1);
    REQUIRE_INT_EQ(lines, 1);
    REQUIRE_CONTAINS(line, "/nonexistent/\\x1b]0;pwned\\x07/libcuda.so");
    /* nothing was touched */
    int32_t ids[16];
    FILE *f = fopen(tp, "rb");
    REQUIRE(f && fread(ids, 1, sizeof ids + 1, f) == sizeof ids && ids[15] == 15);
    if (f)
        fclose(f);
    pgrt_model_files *m = NULL;
    REQUIRE_INT_EQ(pgrt_model_open(mp, &m), 0);
    pgrt_model_close(&m);
}

/* Runs against the fake driver (kernels recorded, not run): the outputs
 * are written whole, a refused destination costs no step. */
static void test_fake_runs(const char *fake)
{
    char line[1024], a1[4096], g1[4096], l1[4096];
    int lines = 0;
    path_in(a1, sizeof a1, dir, "run-adapter");
    path_in(g1, sizeof g1, dir, "run-grads");
    path_in(l1, sizeof l1, dir, "run.jsonl");
    int before = dir_entries(dir);
    const char *const all[] = {"--model", mp, "--tokens", tp, "--batch", "1", "--seq", "4",
                               "--steps", "2", "--save-adapter", a1, "--save-grads", g1,
                               "--log-json", l1, NULL};
    REQUIRE_INT_EQ(run_with(fake, line, sizeof line, all, &lines), 0);
    REQUIRE(lines > 2);
    REQUIRE_INT_EQ(dir_entries(a1), 2);
    REQUIRE_INT_EQ(dir_entries(g1), 2);
    REQUIRE(access(l1, F_OK) == 0);
    REQUIRE_INT_EQ(dir_entries(dir), before + 3); /* and no temporary */
    pgrt_model_files *m = NULL;
    pgrt_adapter *ad = NULL;
    REQUIRE_INT_EQ(pgrt_model_open(mp, &m), 0);
    REQUIRE_INT_EQ(pgrt_adapter_load(a1, pgrt_model_files_config(m), &ad), 0);
    pgrt_adapter_destroy(&ad);

    /* a typo in a destination: refused before the first step */
    const char *const typo[] = {"--model", mp, "--tokens", tp, "--batch", "1", "--seq", "4",
                                "--steps", "2", "--save-adapter", "/nonexistent/dir", NULL};
    REQUIRE_INT_EQ(run_with(fake, line, sizeof line, typo, &lines), 2);
    REQUIRE_INT_EQ(lines, 1);
    REQUIRE_CONTAINS(line, "--save-adapter: /nonexistent/dir: cannot create it");
    /* two outputs on one directory: refused, not the adapter lost */
    const char *const twice[] = {"--model", mp, "--tokens", tp, "--batch", "1", "--seq", "4",
                                 "--steps", "2", "--save-adapter", a1, "--save-grads", a1,
                                 NULL};
    REQUIRE_INT_EQ(run_with(fake, line, sizeof line, twice, &lines), 2);
    REQUIRE_INT_EQ(lines, 1);
    REQUIRE_CONTAINS(line, "--save-adapter and --save-grads both name ");
    /* the log over the tokens: refused, the tokens kept */
    const char *const over[] = {"--model", mp, "--tokens", tp, "--batch", "1", "--seq", "4",
                                "--steps", "2", "--log-json", tp, NULL};
    REQUIRE_INT_EQ(run_with(fake, line, sizeof line, over, &lines), 2);
    REQUIRE_CONTAINS(line, "--log-json and --tokens both name ");
    pgrt_tokens *tok = NULL;
    REQUIRE_INT_EQ(pgrt_tokens_open(tp, 32, &tok), 0);
    REQUIRE_INT_EQ(pgrt_tokens_count(tok), 16);
    pgrt_tokens_close(&tok);
    /* a link at the log's path is replaced, not written through */
    char tl[4096];
    path_in(tl, sizeof tl, dir, "tokens-link");
    REQUIRE(symlink(tp, tl) == 0);
    const char *const vialink[] = {"--model", mp, "--tokens", tp, "--batch", "1", "--seq", "4",
                                   "--steps", "2", "--log-json", tl, NULL};
    REQUIRE_INT_EQ(run_with(fake, line, sizeof line, vialink, &lines), 0);
    struct stat st;
    REQUIRE(lstat(tl, &st) == 0 && S_ISREG(st.st_mode));
    REQUIRE(stat(tp, &st) == 0 && st.st_size == 16 * 4);
    unlink(tl);
    /* in place: the adapter saved over the one it was loaded from */
    const char *const inplace[] = {"--model", mp, "--adapter", a1, "--tokens", tp, "--batch",
                                   "1", "--seq", "4", "--steps", "2", "--save-adapter", a1,
                                   NULL};
    before = dir_entries(dir);
    REQUIRE_INT_EQ(run_with(fake, line, sizeof line, inplace, &lines), 0);
    REQUIRE_INT_EQ(dir_entries(a1), 2);
    REQUIRE_INT_EQ(dir_entries(dir), before);
    REQUIRE_INT_EQ(pgrt_adapter_load(a1, pgrt_model_files_config(m), &ad), 0);
    pgrt_adapter_destroy(&ad);
    /* a fresh adapter from --rank-pattern and --alpha-pattern: each pair of
     * its rank, and saved with the patterns (the gradients too) */
    remove_tree(a1);
    remove_tree(g1);
    const char *const pat[] = {"--model", mp, "--tokens", tp, "--batch", "1", "--seq", "4",
                               "--steps", "2", "--rank-pattern",
                               "q_proj=4,layers\\.0\\.self_attn\\.k_proj=6",
                               "--alpha-pattern", "o_proj=3", "--save-adapter", a1,
                               "--save-grads", g1, NULL};
    REQUIRE_INT_EQ(run_with(fake, line, sizeof line, pat, &lines), 0);
    for (int k = 0; k < 2; k++) {
        REQUIRE_INT_EQ(pgrt_adapter_load(k ? g1 : a1, pgrt_model_files_config(m), &ad), 0);
        if (!ad)
            continue;
        REQUIRE(ad->cfg.n_rank_pattern == 2 && ad->cfg.n_alpha_pattern == 1);
        REQUIRE_STR_EQ(ad->cfg.rank_pattern[1].key, "layers\\.0\\.self_attn\\.k_proj");
        REQUIRE(ad->count == 7 && ad->w[0].r == 4 && ad->w[1].r == 6 && ad->w[2].r == 16);
        REQUIRE(ad->w[3].alpha == 3 && ad->w[3].scale == 3.0 / 16 && ad->w[4].scale == 2);
        pgrt_adapter_destroy(&ad);
    }
    pgrt_model_close(&m);
    remove_tree(a1);
    remove_tree(g1);
    unlink(l1);
}


/* The options of a run: each out of range or without what it needs is one
 * line naming the option and its range, exit 2, nothing written. */
static void test_new_options(void)
{
    CASE("--lr-schedule takes constant, linear or cosine", "--model", mp, "--tokens", tp,
         "--lr-schedule", "step");
    CASE("--warmup-steps -1 is out of range (0 to 100000000)", "--model", mp, "--tokens", tp,
         "--warmup-steps", "-1");
    CASE("--warmup-ratio 1.5 is out of range (0 to 1)", "--model", mp, "--tokens", tp,
         "--warmup-ratio", "1.5");
    CASE("--warmup-ratio: 'nan' is not a finite number", "--model", mp, "--tokens", tp,
         "--warmup-ratio", "nan");
    CASE("--warmup-steps and --warmup-ratio: give one of them", "--model", mp, "--tokens", tp,
         "--warmup-steps", "3", "--warmup-ratio", "0.1");
    CASE("--min-lr-ratio 2 is out of range (0 to 1)", "--model", mp, "--tokens", tp,
         "--min-lr-ratio", "2");
    CASE("--min-lr-ratio -0.5 is out of range (0 to 1)", "--model", mp, "--tokens", tp,
         "--min-lr-ratio", "-0.5");
    CASE("--grad-accum 0 is out of range (1 to 1024)", "--model", mp, "--tokens", tp,
         "--grad-accum", "0");
    CASE("--grad-accum 1025 is out of range (1 to 1024)", "--model", mp, "--tokens", tp,
         "--grad-accum", "1025");
    CASE("--grad-accum: '2x' is not an integer", "--model", mp, "--tokens", tp, "--grad-accum",
         "2x");
    CASE("--epochs 0 is out of range (1 to 1000000)", "--model", mp, "--tokens", tp,
         "--epochs", "0");
    CASE("--steps and --epochs: give one of them", "--model", mp, "--tokens", tp, "--epochs",
         "2");
    CASE("--eval-every needs --eval-data", "--model", mp, "--tokens", tp, "--eval-every", "5");
    CASE("--eval-batches needs --eval-data", "--model", mp, "--tokens", tp, "--eval-batches",
         "5");
    CASE("--eval-every -1 is out of range (0 to 100000000)", "--model", mp, "--tokens", tp,
         "--eval-data", tp, "--eval-every", "-1");
    CASE("--eval-batches: 'all' is not an integer", "--model", mp, "--tokens", tp, "--eval-data",
         tp, "--eval-batches", "all");
    CASE("--eval-data needs a value", "--model", mp, "--tokens", tp, "--eval-data", "");
    CASE("token id 32 at byte 20", "--model", mp, "--tokens", tp, "--eval-data", tbad);
    CASE("--save-every needs --output-dir", "--model", mp, "--tokens", tp, "--save-every", "5");
    CASE("--save-total-limit needs --output-dir", "--model", mp, "--tokens", tp,
         "--save-total-limit", "2");
    CASE("--save-total-limit -1 is out of range (0 to 1000000)", "--model", mp, "--tokens", tp,
         "--output-dir", dir, "--save-total-limit", "-1");
    CASE("--save-every: '1e3' is not an integer", "--model", mp, "--tokens", tp, "--save-every",
         "1e3");
    CASE("--log-every 0 is out of range (1 to 1000000)", "--model", mp, "--tokens", tp,
         "--log-every", "0");
    CASE("--data-order takes shuffle or sequential", "--model", mp, "--tokens", tp,
         "--data-order", "random");
    CASE("--mode takes eager, graph or both", "--model", mp, "--tokens", tp, "--mode", "fast");
    CASE("--mode both trains twice", "--model", mp, "--tokens", tp, "--mode", "both",
         "--output-dir", dir);
    CASE("--head-chunk -1 is out of range (0 to 1048576)", "--model", mp, "--tokens", tp,
         "--head-chunk", "-1");
    CASE("--seq 5000000 is out of range (2 to 131072)", "--model", mp, "--tokens", tp, "--seq",
         "5000000");
    /* a file too short for one row */
    char p[4096];
    path_in(p, sizeof p, dir, "short.bin");
    int32_t three[3] = {1, 2, 3};
    REQUIRE(write_bytes(p, three, sizeof three) == 0);
    CASE("--tokens: 3 ids make no row of --seq 4", "--model", mp, "--tokens", p);
    unlink(p);
    /* the output directory: where a directory can go, not over an input,
     * not holding its own final adapter's place twice */
    REFUSED("--output-dir: /nonexistent/out: cannot create it", "--model", mp, "--tokens", tp,
            "--output-dir", "/nonexistent/out");
    REFUSED("--output-dir and --model both name ", "--model", mp, "--tokens", tp,
            "--output-dir", mp);
    char fin[4200], od[4096];
    path_in(od, sizeof od, dir, "od");
    path_in(fin, sizeof fin, od, "final");
    REFUSED("--save-adapter and --output-dir both name ", "--model", mp, "--tokens", tp,
            "--output-dir", od, "--save-adapter", fin);
    path_in(p, sizeof p, dir, "eval-ok.bin");
    int32_t ids[8] = {0};
    REQUIRE(write_bytes(p, ids, sizeof ids) == 0);
    REFUSED("--log-json and --eval-data both name ", "--model", mp, "--tokens", tp,
            "--eval-data", p, "--log-json", p);
    unlink(p);
    /* another run's checkpoints there: refused, --resume named */
    REQUIRE(mkdir(od, 0755) == 0);
    path_in(p, sizeof p, od, "checkpoint-4");
    REQUIRE(mkdir(p, 0755) == 0);
    REFUSED("holds checkpoints of another run (checkpoint-4): --resume ", "--model", mp,
            "--tokens", tp, "--output-dir", od);
    rmdir(p);
    rmdir(od);
}

/* --config: a JSON object of the long names; the command line wins. */
static void test_config(void)
{
    char c[4096], line[1024], js[16384];
    path_in(c, sizeof c, dir, "run.json");
    struct {
        const char *json, *want;
    } bad[] = {
        {"{\"lrr\": 1}", "unknown key 'lrr'"},
        {"{\"lr\": 1e300}", "run.json: --lr 1e300 is out of range (0, or 1e-12 to 1)"},
        {"{\"lr\": \"1e-4\"}", "'lr' takes a number"},
        {"{\"grad-accum\": 2.5}", "--grad-accum: '2.5' is not an integer"},
        {"{\"grad-accum\": 0}", "--grad-accum 0 is out of range (1 to 1024)"},
        {"{\"dtype\": 16}", "'dtype' takes a string"},
        {"{\"dtype\": \"f64\"}", "--dtype takes bf16 or f32"},
        {"{\"profile\": 1}", "'profile' takes true or false"},
        {"{\"config\": \"x.json\"}", "'config' is not taken from a file"},
        {"{\"resume\": \"out\"}", "'resume' is not taken from a file"},
        {"{\"steps\": 3, \"epochs\": 2}", "--steps and --epochs: give one of them"},
        {"[1, 2]", "not a JSON object"},
        {"{\"lr\": 1e-4,}", "run.json: "},
        {"{\"lr\": 1, \"lr\": 2}", "duplicate key"},
        {"{\"\\u001b]0;pwned\\u0007\": 1}", "unknown key '\\x1b]0;pwned\\x07'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        REQUIRE(write_text(dir, "run.json", bad[i].json) == 0);
        const char *const args[] = {"--model", mp, "--tokens", tp, "--config", c, "--batch",
                                    "1", "--seq", "4", "--steps", "1", NULL};
        REQUIRE_INT_EQ(run(line, sizeof line, args), 2);
        REQUIRE_CONTAINS(line, bad[i].want);
        REQUIRE_CONTAINS(line, "--config ");
    }
    const char *const missing[] = {"--config", "/nonexistent/run.json", NULL};
    REQUIRE_INT_EQ(run(line, sizeof line, missing), 2);
    REQUIRE_CONTAINS(line, "--config /nonexistent/run.json: No such file or directory");
    /* the file gives what the command line does not; the command line
     * wins: the file's --steps gives way to --epochs, its --eval-every
     * finds the --eval-data given here; past the checks the run needs the
     * GPU this test does not give it */
    snprintf(js, sizeof js,
             "{\"model\": \"%s\", \"tokens\": \"%s\", \"batch\": 1, \"seq\": 4, \"steps\": 3, "
             "\"lr\": 1e-4, \"eval-every\": 2, \"grad-accum\": 1, \"profile\": false}",
             mp, tp);
    REQUIRE(write_text(dir, "run.json", js) == 0);
    const char *const over[] = {"--config", c, "--epochs", "2", "--eval-data", tp, NULL};
    int lines = 0;
    REQUIRE(run_with(NULL, line, sizeof line, over, &lines) != 0);
    REQUIRE(strstr(line, "give one of them") == NULL &&
            strstr(line, "--eval-every needs") == NULL);
    /* without them: the file's --eval-every is refused */
    const char *const plain[] = {"--config", c, NULL};
    REQUIRE_INT_EQ(run(line, sizeof line, plain), 2);
    REQUIRE_CONTAINS(line, "--eval-every needs --eval-data");
    unlink(c);
}

/* stdout of a run with args, into buf. */
static int run_out(const char *const *args, char *buf, size_t cap)
{
    char op[4096], line[1024];
    path_in(op, sizeof op, dir, "stdout.txt");
    child_out = op;
    int lines = 0;
    int rc = run_with(NULL, line, sizeof line, args, &lines);
    child_out = NULL;
    FILE *f = fopen(op, "r");
    size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    unlink(op);
    REQUIRE_INT_EQ(lines, 0);
    return rc;
}

static void test_help_version(const char *version)
{
    static char help[65536];
    const char *const h[] = {"--help", NULL};
    REQUIRE_INT_EQ(run_out(h, help, sizeof help), 0);
    /* the model mode first, the demo after */
    REQUIRE(strncmp(help, "usage: ptxgen-train --model DIR", 31) == 0);
    REQUIRE(strstr(help, "synthetic demo") > strstr(help, "--profile"));
    static const char *const opts[] = {
        "model", "adapter", "data", "tokens", "packing", "data-order", "batch", "seq", "seed",
        "dtype", "rank", "alpha", "targets", "rank-pattern", "alpha-pattern", "steps", "epochs",
        "grad-accum", "lr",
        "weight-decay", "max-norm", "lr-schedule", "warmup-steps", "warmup-ratio",
        "min-lr-ratio", "eval-data", "eval-every", "eval-batches", "output-dir", "save-every",
        "save-total-limit", "resume", "save-adapter", "save-grads", "log-json", "log-every",
        "config", "mode", "head-chunk", "profile", "help", "version"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        /* its entry: from "\n  --name" to the next option's */
        char key[64];
        snprintf(key, sizeof key, "\n  --%s", opts[i]);
        const char *at = strstr(help, key);
        size_t kl = strlen(key);
        while (at && at[kl] != ' ' && at[kl] != '\n' && at[kl] != ',')
            at = strstr(at + 1, key);
        REQUIRE(at != NULL);
        if (!at) {
            fprintf(stderr, "--help does not list --%s\n", opts[i]);
            continue;
        }
        const char *end = strstr(at + 1, "\n  --");
        char entry[1024];
        size_t n = end ? (size_t)(end - at) : strlen(at);
        snprintf(entry, sizeof entry, "%.*s", (int)(n < sizeof entry ? n : sizeof entry - 1),
                 at);
        REQUIRE_CONTAINS(entry, "default");
    }
    /* groups, ranges */
    REQUIRE_CONTAINS(help, "\nlearning-rate schedule:\n");
    REQUIRE_CONTAINS(help, "\ncheckpoints and resume:\n");
    REQUIRE_CONTAINS(help, "(1 to 1024; default 1)");
    REQUIRE_CONTAINS(help, "1e-12 to 1; default 1e-3)");
    REQUIRE_CONTAINS(help, "usage: ptxgen-train [--layers N]");
    /* --help wins over anything else, the demo's options included */
    const char *const h2[] = {"--layers", "3", "-h", NULL};
    static char again[65536];
    REQUIRE_INT_EQ(run_out(h2, again, sizeof again), 0);
    REQUIRE_STR_EQ(again, help);
    char v[256];
    const char *const vv[] = {"--version", NULL};
    REQUIRE_INT_EQ(run_out(vv, v, sizeof v), 0);
    REQUIRE(strncmp(v, "ptxgen-train ", 13) == 0);
    if (version) {
        char want[128];
        snprintf(want, sizeof want, "ptxgen-train %s\n", version);
        REQUIRE_STR_EQ(v, want);
    }
}

/* A checkpoint directory made by hand: step, complete or not, a
 * run_config.json of the tiny run. */
static void fake_ckpt(const char *out, int step, bool complete, const char *lr)
{
    char d[4200], name[64], cfg[16384];
    snprintf(name, sizeof name, "checkpoint-%d", step);
    mkdir(out, 0755);
    path_in(d, sizeof d, out, name);
    REQUIRE(mkdir(d, 0755) == 0);
    pgrt_model_config hc;
    REQUIRE_INT_EQ(pgrt_model_config_parse(cfg_ok, strlen(cfg_ok), &hc), 0);
    pgrt_adapter_config ac = {.r = 2, .alpha = 4, .targets = 1u << PGRT_LINEAR_Q};
    pgrt_adapter *a = NULL;
    REQUIRE_INT_EQ(pgrt_adapter_init(&hc, &ac, 1, &a), 0);
    REQUIRE_INT_EQ(pgrt_adapter_save(a, d), 0);
    pgrt_adapter_destroy(&a);
    if (!complete)
        return;
    REQUIRE(write_text(d, "optimizer.safetensors", "1 0") == 0);
    snprintf(cfg, sizeof cfg,
             "{\"model\": \"%s\", \"tokens\": \"%s\", \"batch\": 1, \"seq\": 4, \"steps\": 5, "
             "\"lr\": %s, \"output-dir\": \"%s\"}",
             mp, tp, lr, out);
    REQUIRE(write_text(d, "run_config.json", cfg) == 0);
    snprintf(cfg, sizeof cfg,
             "{\"step\": %d, \"total_steps\": 5, \"epoch\": 0.5, \"data_position\": \"tokens "
             "rows=4 seq=4 order=shuffle epoch=0 row=%d\", \"seed\": 0, \"optimizer_steps\": "
             "%d, \"skipped\": 0, \"tokens\": 8, \"log_json\": \"\", \"log_bytes\": 0}",
             step, step % 4, step);
    REQUIRE(write_text(d, "trainer_state.json", cfg) == 0);
}

/* --resume refused before the GPU: nothing to resume from, a checkpoint
 * cut short, a flag that would change the run, a run already done. The
 * stand-in gives the runtime the functions --resume needs. */
static void test_resume_refused(const char *shim)
{
    char out[4096], p[4200], line[1024];
    int lines = 0;
    child_preload = shim;
    path_in(out, sizeof out, dir, "resume-out");
    REQUIRE(mkdir(out, 0755) == 0);
    const char *const none[] = {"--resume", out, NULL};
    REQUIRE_INT_EQ(run(line, sizeof line, none), 2);
    REQUIRE_CONTAINS(line, "no checkpoint-<step> directory in it");
    fake_ckpt(out, 3, false, "0.001");
    REQUIRE_INT_EQ(run(line, sizeof line, none), 2);
    REQUIRE_CONTAINS(line, "no complete checkpoint in it (checkpoint-3 has no "
                           "optimizer.safetensors)");
    path_in(p, sizeof p, out, "checkpoint-3");
    const char *const one[] = {"--resume", p, NULL};
    REQUIRE_INT_EQ(run(line, sizeof line, one), 2);
    REQUIRE_CONTAINS(line, "not a complete checkpoint (no optimizer.safetensors): an "
                           "interrupted save");
    /* a complete one below the cut one: taken, the cut one named; past the
     * checks the run needs the GPU */
    fake_ckpt(out, 2, true, "0.001");
    REQUIRE_INT_EQ(run_with(NULL, line, sizeof line, none, &lines), 1);
    REQUIRE_INT_EQ(lines, 2);
    REQUIRE_CONTAINS(line, "checkpoint-3 is incomplete (no optimizer.safetensors), skipped: "
                           "resuming from checkpoint-2");
    /* flags given again must agree, but for those a resumed run may change */
    path_in(p, sizeof p, out, "checkpoint-3");
    remove_tree(p);
    const char *const lr[] = {"--resume", out, "--lr", "0.5", NULL};
    REQUIRE_INT_EQ(run(line, sizeof line, lr), 2);
    REQUIRE_CONTAINS(line, "--lr 0.5 differs from the run being resumed (0.001 in ");
    const char *const same[] = {"--resume", out, "--lr", "1e-3", "--tokens", tp, "--steps",
                                "9", "--log-every", "3", NULL};
    REQUIRE_INT_EQ(run_with(NULL, line, sizeof line, same, &lines), 1);
    REQUIRE_INT_EQ(lines, 1);
    REQUIRE_CONTAINS(line, "no GPU: ");
    const char *const acc[] = {"--resume", out, "--grad-accum", "2", NULL};
    REQUIRE_INT_EQ(run(line, sizeof line, acc), 2);
    REQUIRE_CONTAINS(line, "--grad-accum 2 differs from the run being resumed (1 in ");
    const char *const wr[] = {"--resume", out, "--warmup-ratio", "0.1", NULL};
    REQUIRE_INT_EQ(run(line, sizeof line, wr), 2);
    REQUIRE_CONTAINS(line, "--warmup-ratio 0.1 differs from the run being resumed ((not set) "
                           "in ");
    /* already at its last step */
    const char *const done[] = {"--resume", out, "--steps", "2", NULL};
    REQUIRE_INT_EQ(run(line, sizeof line, done), 2);
    REQUIRE_CONTAINS(line, "the run is at step 2 of 2 already; a larger --steps or --epochs "
                           "extends it");
    /* a data position of another file */
    remove_tree(out);
    fake_ckpt(out, 2, true, "0.001");
    path_in(p, sizeof p, out, "checkpoint-2");
    REQUIRE(write_text(p, "trainer_state.json",
                       "{\"step\": 2, \"total_steps\": 5, \"epoch\": 0.5, \"data_position\": "
                       "\"tokens rows=9 seq=4 order=shuffle epoch=0 row=2\", \"seed\": 0, "
                       "\"optimizer_steps\": 2, \"skipped\": 0, \"tokens\": 8, \"log_json\": "
                       "\"\", \"log_bytes\": 0}") == 0);
    REQUIRE_INT_EQ(run(line, sizeof line, none), 2);
    REQUIRE_CONTAINS(line, "the position 'tokens rows=9 seq=4 order=shuffle epoch=0 row=2' is "
                           "in 9 rows of 4 ids");
    REQUIRE(write_text(p, "trainer_state.json", "{\"step\": 2}") == 0);
    REQUIRE_INT_EQ(run(line, sizeof line, none), 2);
    REQUIRE_CONTAINS(line, "trainer_state.json: total_steps is missing or not valid");
    remove_tree(out);
    child_preload = NULL;
}

/* The log's lines without their times: what two runs must agree on. */
static int log_keys(const char *path, char keys[][160], int max)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[1024];
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        const char *t = strstr(line, ", \"tokens");
        const char *e = strstr(line, ", \"eval_targets");
        const char *cut = t ? t : e ? e : line + strlen(line);
        snprintf(keys[n++], 160, "%.*s", (int)(cut - line), line);
    }
    fclose(f);
    return n;
}

static bool has(const char *d, const char *name)
{
    char p[4200];
    path_in(p, sizeof p, d, name);
    return access(p, F_OK) == 0;
}

/* Against the fake driver with the stand-in: checkpoints every K steps
 * and at the end, the final adapter; a signal stops at a step boundary
 * with a checkpoint, a second one at once; a crash inside a save leaves
 * the checkpoints before it; resuming any of them gives the log of the
 * uninterrupted run (losses, learning rates, evaluations), and the
 * checkpoint's run_config.json as --config repeats the run. */
static void test_checkpoint_runs(const char *fake, const char *shim)
{
    char ev[4096], line[1024];
    char od[6][4096], lg[6][4096];
    static char keys[6][64][160];
    int lines = 0;
    path_in(ev, sizeof ev, dir, "eval.bin");
    int32_t e[30];
    for (int i = 0; i < 30; i++)
        e[i] = (i * 5) % 32;
    REQUIRE(write_bytes(ev, e, sizeof e) == 0);
    for (int i = 0; i < 6; i++) {
        char n[32];
        snprintf(n, sizeof n, "ck%d", i);
        path_in(od[i], sizeof od[i], dir, n);
        snprintf(n, sizeof n, "ck%d.jsonl", i);
        path_in(lg[i], sizeof lg[i], dir, n);
    }
    child_preload = shim;
#define RUN(k, ...)                                                                            \
    do {                                                                                       \
        const char *const a_[] = {"--model", mp, "--tokens", tp, "--batch", "1", "--seq", "4", \
                                  "--steps", "6", "--grad-accum", "2", "--save-every", "2",    \
                                  "--lr-schedule", "linear", "--warmup-steps", "2",            \
                                  "--eval-data", ev, "--eval-every", "3", "--lr", "0.1",       \
                                  "--output-dir", od[k], "--log-json", lg[k], __VA_ARGS__,     \
                                  NULL};                                                       \
        rc_ = run_with(fake, line, sizeof line, a_, &lines);                                   \
    } while (0)
    int rc_;
    /* uninterrupted */
    RUN(0, "--mode", "eager");
    REQUIRE_INT_EQ(rc_, 0);
    REQUIRE(has(od[0], "checkpoint-2") && has(od[0], "checkpoint-4") &&
            has(od[0], "checkpoint-6") && has(od[0], "final/adapter_model.safetensors"));
    REQUIRE_INT_EQ(dir_entries(od[0]), 4);
    char c6[4200];
    path_in(c6, sizeof c6, od[0], "checkpoint-6");
    REQUIRE_INT_EQ(dir_entries(c6), 5);
    int n0 = log_keys(lg[0], keys[0], 64);
    REQUIRE_INT_EQ(n0, 8); /* six steps, evaluations after 3 and 6 */
    /* the schedule: warmup 0, 0.05, then linear to 0 at step 6 */
    REQUIRE_CONTAINS(keys[0][0], "\"lr\": 0,");
    REQUIRE_CONTAINS(keys[0][1], "\"lr\": 0.05,");
    REQUIRE_CONTAINS(keys[0][2], "\"lr\": 0.1,");
    REQUIRE_CONTAINS(keys[0][3], "{\"step\": 3, \"epoch\": 1.500000, \"eval_loss\": ");
    REQUIRE_CONTAINS(keys[0][4], "\"lr\": 0.075,");
    REQUIRE_CONTAINS(keys[0][7], "\"eval_perplexity\": ");
    /* the evaluation took every row of the set once: 7 rows of 4 */
    char *text;
    size_t len;
    REQUIRE(train_read_file_(lg[0], &text, &len) == 0);
    REQUIRE_CONTAINS(text, "\"eval_targets\": 21, \"eval_batches\": 7");
    free(text);
    char rcfg[4300];
    path_in(rcfg, sizeof rcfg, c6, "run_config.json");
    REQUIRE(train_read_file_(rcfg, &text, &len) == 0);
    REQUIRE_CONTAINS(text, "\"grad-accum\": 2,");
    REQUIRE_CONTAINS(text, "\"lr-schedule\": \"linear\",");
    free(text);

    /* SIGINT as step 3 ends: a checkpoint of step 3, exit 130; resumed */
    const char *sigint[] = {"SHIM_SIGNAL_AT=3", NULL};
    child_env = sigint;
    RUN(1, "--mode", "graph");
    child_env = NULL;
    REQUIRE_INT_EQ(rc_, 130);
    REQUIRE(has(od[1], "checkpoint-2") && has(od[1], "checkpoint-3") &&
            !has(od[1], "checkpoint-4") && !has(od[1], "final"));
    const char *const res1[] = {"--resume", od[1], NULL};
    REQUIRE_INT_EQ(run_with(fake, line, sizeof line, res1, &lines), 0);
    REQUIRE_INT_EQ(log_keys(lg[1], keys[1], 64), n0);
    for (int i = 0; i < n0; i++)
        REQUIRE_STR_EQ(keys[1][i], keys[0][i]);
    REQUIRE(has(od[1], "checkpoint-6") && has(od[1], "final"));

    /* a crash inside the save after step 4: checkpoint-2 and a temporary
     * are left, the log runs past the checkpoint; resumed, the log is cut
     * back to it and continues as the uninterrupted run's */
    const char *crash[] = {"SHIM_CRASH_SAVE_AT=4", NULL};
    child_env = crash;
    RUN(2, "--save-total-limit", "1");
    child_env = NULL;
    REQUIRE_INT_EQ(rc_, 9);
    REQUIRE(has(od[2], "checkpoint-2") && !has(od[2], "checkpoint-4"));
    REQUIRE_INT_EQ(dir_entries(od[2]), 2); /* and the temporary */
    REQUIRE_INT_EQ(log_keys(lg[2], keys[2], 64), 5);
    const char *const res2[] = {"--resume", od[2], NULL};
    REQUIRE_INT_EQ(run_with(fake, line, sizeof line, res2, &lines), 0);
    REQUIRE_INT_EQ(log_keys(lg[2], keys[2], 64), n0);
    for (int i = 0; i < n0; i++)
        REQUIRE_STR_EQ(keys[2][i], keys[0][i]);
    /* --save-total-limit 1: the newest only (the temporary of the crash
     * stays: nothing reads it) */
    REQUIRE(has(od[2], "checkpoint-6") && !has(od[2], "checkpoint-2") &&
            !has(od[2], "checkpoint-4") && has(od[2], "final"));
    REQUIRE_INT_EQ(dir_entries(od[2]), 3);

    /* a second signal exits at once: no checkpoint of that step; SIGTERM
     * is 143 */
    const char *twice[] = {"SHIM_SIGNAL_AT=3", "SHIM_SIGNAL_TWICE=1", NULL};
    child_env = twice;
    RUN(3, "--mode", "eager");
    REQUIRE_INT_EQ(rc_, 130);
    REQUIRE(has(od[3], "checkpoint-2") && !has(od[3], "checkpoint-3"));
    const char *term[] = {"SHIM_SIGNAL_AT=1", "SHIM_SIGNAL=15", NULL};
    child_env = term;
    RUN(4, "--mode", "eager");
    child_env = NULL;
    REQUIRE_INT_EQ(rc_, 143);
    REQUIRE(has(od[4], "checkpoint-1") && !has(od[4], "checkpoint-2"));
    /* the interrupted one resumed, and extended past its end */
    const char *const res3[] = {"--resume", od[3], "--steps", "8", NULL};
    REQUIRE_INT_EQ(run_with(fake, line, sizeof line, res3, &lines), 0);
    REQUIRE(has(od[3], "checkpoint-8"));
    REQUIRE_INT_EQ(log_keys(lg[3], keys[3], 64), n0 + 3); /* 7, 8, and an evaluation at 8 */
    for (int i = 0; i < 3; i++)
        REQUIRE_STR_EQ(keys[3][i], keys[0][i]);
    const char *const res4[] = {"--resume", od[3], "--steps", "8", NULL};
    REQUIRE_INT_EQ(run(line, sizeof line, res4), 2);
    REQUIRE_CONTAINS(line, "the run is at step 8 of 8 already");

    /* run_config.json as --config repeats the run elsewhere */
    const char *const again[] = {"--config", rcfg, "--output-dir", od[5], "--log-json", lg[5],
                                 NULL};
    REQUIRE_INT_EQ(run_with(fake, line, sizeof line, again, &lines), 0);
    REQUIRE_INT_EQ(log_keys(lg[5], keys[5], 64), n0);
    for (int i = 0; i < n0; i++)
        REQUIRE_STR_EQ(keys[5][i], keys[0][i]);
    /* and not into a directory that holds that run's checkpoints */
    const char *const into[] = {"--config", rcfg, NULL};
    REQUIRE_INT_EQ(run(line, sizeof line, into), 2);
    REQUIRE_CONTAINS(line, "holds checkpoints of another run");

    /* --epochs: 4 rows of 4 ids, 1 x 2 rows a step: 3 epochs, 6 steps */
    const char *const ep[] = {"--model", mp, "--tokens", tp, "--batch", "1", "--seq", "4",
                              "--epochs", "3", "--grad-accum", "2", "--log-json", lg[4],
                              "--data-order", "sequential", NULL};
    REQUIRE_INT_EQ(run_with(fake, line, sizeof line, ep, &lines), 0);
    REQUIRE_INT_EQ(log_keys(lg[4], keys[4], 64), 6);
    REQUIRE_CONTAINS(keys[4][5], "{\"step\": 6, \"epoch\": 3.000000,");
    child_preload = NULL;
    for (int i = 0; i < 6; i++) {
        remove_tree(od[i]);
        unlink(lg[i]);
    }
    unlink(ev);
#undef RUN
}

/* The prepared data of the runs: six documents of the 32-token model,
 * two of them prompts only (no target). */
static const int data_lens[6] = {5, 3, 4, 6, 2, 3};
static const int32_t data_ids[23] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12,
                                     13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23};
static const uint8_t data_mask[23] = {0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1,
                                      0, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1};
static char pgp[4096];

/* --data, --packing and the data's checks: each bad input one line, exit
 * 2, nothing written, before the GPU. */
static void test_data_refused(void)
{
    char jp[4096], tokdir[4096], big[4096], none[4096], p[4096];
    path_in(jp, sizeof jp, dir, "train.jsonl");
    REQUIRE(write_text(dir, "train.jsonl", "{\"prompt\": \"a\", \"completion\": \"b\"}\n") == 0);
    CASE("--data: ", "--model", mp, "--data", jp);
    CASE("train.jsonl: JSON text, not prepared training data: run ptxgen-prepare --model DIR "
         "--input ",
         "--model", mp, "--data", jp);
    CASE("train.jsonl: JSON text, not int32 token ids: run ptxgen-prepare", "--model", mp,
         "--tokens", jp);
    CASE("and train with --data DATA.pgtok", "--model", mp, "--tokens", jp);
    CASE("--tokens ", "--model", mp, "--tokens", pgp);
    CASE("data.pgtok: a ptxgen-prepare file (it starts with PGTOKENS), not flat int32 tokens: "
         "train on it with --data ",
         "--model", mp, "--tokens", pgp);
    /* the evaluation's data is read as the training data is */
    CASE("--eval-data ", "--model", mp, "--tokens", tp, "--eval-data", pgp);
    CASE("--eval-data: ", "--model", mp, "--data", pgp, "--eval-data", jp);
    /* a model whose tokenizer.json is not the one the data was prepared
     * with (the data's hash is zeros) */
    make_model("tok", cfg_ok, NULL);
    path_in(tokdir, sizeof tokdir, dir, "tok");
    REQUIRE(write_text(tokdir, "tokenizer.json", "{\"model\": {}}") == 0);
    CASE("data.pgtok: prepared with another tokenizer (tokenizer.json sha256 0000", "--model",
         tokdir, "--data", pgp);
    CASE("prepare it again with ptxgen-prepare --model", "--model", tokdir, "--data", pgp);
    /* a larger vocabulary than the model's 32 */
    path_in(big, sizeof big, dir, "big.pgtok");
    REQUIRE(write_pgtok(big, 6, data_lens, data_ids, data_mask, 64, -1, 0, NULL) == 0);
    CASE("prepared with a tokenizer of 64 tokens, more than the model's vocabulary of 32",
         "--model", mp, "--data", big);
    /* no target at all */
    path_in(none, sizeof none, dir, "none.pgtok");
    uint8_t zeros[23] = {0};
    REQUIRE(write_pgtok(none, 6, data_lens, data_ids, zeros, 32, -1, 0, NULL) == 0);
    CASE("no token of its 6 documents is a training target", "--model", mp, "--data", none);
    /* options */
    CASE("--packing takes pack or pad", "--model", mp, "--data", pgp, "--packing", "tight");
    CASE("--data and --tokens: give one of them", "--model", mp, "--data", pgp, "--tokens", tp);
    CASE("--packing needs --data", "--model", mp, "--tokens", tp, "--packing", "pad");
    CASE("--model, --data (or --tokens), --batch, --seq and --steps (or --epochs) are required",
         "--model", mp);
    CASE("flat int32 tokens are one document, and --packing pad puts one document a row",
         "--model", mp, "--data", tp, "--packing", "pad");
    CASE("token 5 (byte 20) has id 32", "--model", mp, "--data", tbad);
    REFUSED("--log-json and --data both name ", "--model", mp, "--data", pgp, "--log-json", pgp);
    /* a --data run past the checks needs the GPU this test does not give */
    const char *const ok[] = {"--model", tokdir, "--data", pgp, "--batch", "1", "--seq", "4",
                              "--steps", "1", NULL};
    char line[1024];
    int lines = 0;
    REQUIRE_INT_EQ(run_with(NULL, line, sizeof line, ok, &lines), 2);
    path_in(p, sizeof p, tokdir, "tokenizer.json");
    unlink(p);
    REQUIRE_INT_EQ(run_with(NULL, line, sizeof line, ok, &lines), 1);
    REQUIRE_CONTAINS(line, "no GPU: ");
    unlink(jp);
    unlink(big);
    unlink(none);
    remove_tree(tokdir);
}

/* A file's text, "" when it cannot be read (malloc'd). */
static char *read_or_empty(const char *path)
{
    char *text = NULL;
    size_t len;
    bool ok = train_read_file_(path, &text, &len) == 0;
    REQUIRE(ok);
    return ok ? text : strdup("");
}

/* --data runs against the fake driver with the stand-in: packed and
 * padded; checkpoints, a signal and --resume give the uninterrupted run's
 * log; micro-batches without a target are passed over and counted; a
 * .pgtok evaluation counts its targets. */
static void test_data_runs(const char *fake, const char *shim)
{
    char od[3][4096], lg[3][4096], line[1024], *text;
    static char keys[3][64][160];
    int lines = 0, rc_;
    for (int i = 0; i < 3; i++) {
        char n[32];
        snprintf(n, sizeof n, "dk%d", i);
        path_in(od[i], sizeof od[i], dir, n);
        snprintf(n, sizeof n, "dk%d.jsonl", i);
        path_in(lg[i], sizeof lg[i], dir, n);
    }
    child_preload = shim;
#define RUN(k, ...)                                                                            \
    do {                                                                                       \
        const char *const a_[] = {"--model", mp, "--data", pgp, "--batch", "1", "--seq", "4",  \
                                  "--steps", "6", "--grad-accum", "2", "--save-every", "2",    \
                                  "--eval-data", pgp, "--eval-every", "3", "--lr", "0.1",      \
                                  "--output-dir", od[k], "--log-json", lg[k], __VA_ARGS__,     \
                                  NULL};                                                       \
        rc_ = run_with(fake, line, sizeof line, a_, &lines);                                   \
    } while (0)
    RUN(0, "--mode", "eager");
    REQUIRE_INT_EQ(rc_, 0);
    int n0 = log_keys(lg[0], keys[0], 64);
    REQUIRE_INT_EQ(n0, 8);
    /* packed at seq 4 in file order: 23 tokens, 6 rows; the 13 targets
     * but the two whose tokens begin a row (5 and 17) */
    text = read_or_empty(lg[0]);
    REQUIRE_CONTAINS(text, "\"eval_targets\": 11, \"eval_batches\": 6");
    free(text);
    char rcfg[4300];
    path_in(rcfg, sizeof rcfg, od[0], "checkpoint-6/run_config.json");
    text = read_or_empty(rcfg);
    REQUIRE_CONTAINS(text, "\"packing\": \"pack\",");
    REQUIRE_CONTAINS(text, "data.pgtok\",");
    free(text);
    path_in(rcfg, sizeof rcfg, od[0], "checkpoint-6/trainer_state.json");
    text = read_or_empty(rcfg);
    REQUIRE_CONTAINS(text, "\"data_position\": \"pgtok docs=6 tokens=23 targets=13 seq=4 "
                           "packing=pack order=shuffle at={'epoch':");
    free(text);
    /* SIGINT as step 3 ends; resumed: the same log */
    const char *sigint[] = {"SHIM_SIGNAL_AT=3", NULL};
    child_env = sigint;
    RUN(1, "--mode", "eager");
    child_env = NULL;
    REQUIRE_INT_EQ(rc_, 130);
    const char *const res[] = {"--resume", od[1], NULL};
    REQUIRE_INT_EQ(run_with(fake, line, sizeof line, res, &lines), 0);
    REQUIRE_INT_EQ(log_keys(lg[1], keys[1], 64), n0);
    for (int i = 0; i < n0; i++)
        REQUIRE_STR_EQ(keys[1][i], keys[0][i]);
    /* on --resume the data may not change */
    const char *const other[] = {"--resume", od[1], "--packing", "pad", "--steps", "8", NULL};
    REQUIRE_INT_EQ(run(line, sizeof line, other), 2);
    REQUIRE_CONTAINS(line, "--packing pad differs from the run being resumed (pack in ");

    /* padded, in file order: D0, (D1: no target) D2, D3, (D4) D5 */
    const char *const pad[] = {"--model", mp, "--data", pgp, "--packing", "pad", "--batch", "1",
                               "--seq", "4", "--steps", "4", "--data-order", "sequential",
                               "--eval-data", pgp, "--log-json", lg[2], NULL};
    REQUIRE_INT_EQ(run_with(fake, line, sizeof line, pad, &lines), 0);
    text = read_or_empty(lg[2]);
    REQUIRE_CONTAINS(text, "{\"step\": 1, \"epoch\": 0.166667,");
    REQUIRE_CONTAINS(text, "\"skipped\": false}\n{\"step\": 2, \"epoch\": 0.500000,");
    REQUIRE_CONTAINS(text, "\"skipped\": false, \"rows_without_targets\": 1}\n{\"step\": 3,");
    REQUIRE_CONTAINS(text, "{\"step\": 4, \"epoch\": 1.000000,");
    /* padded rows cut D0 and D3 to 4 tokens: 3 + 2 + 3 + 2 targets */
    REQUIRE_CONTAINS(text, "{\"step\": 3, \"epoch\": 0.666667,");
    REQUIRE_CONTAINS(text, "\"rows_without_targets\": 1}\n{\"step\": 4, \"epoch\": 1.000000, "
                           "\"eval_loss\": ");
    REQUIRE_CONTAINS(text, "\"eval_targets\": 10, \"eval_batches\": 6");
    free(text);
    child_preload = NULL;
    for (int i = 0; i < 3; i++) {
        remove_tree(od[i]);
        unlink(lg[i]);
    }
#undef RUN
}

/* Several GPUs: the options and torchrun's variables, refused in one line
 * before anything is read. */
static void test_dist_options(void)
{
    REFUSED("--gpus 0 is out of range (1 to 64)", "--model", mp, "--tokens", tp, "--gpus", "0");
    REFUSED("--gpus 65 is out of range (1 to 64)", "--model", mp, "--tokens", tp, "--gpus", "65");
    REFUSED("--dist-timeout 0 is out of range (1 to 86400)", "--model", mp, "--tokens", tp,
            "--dist-timeout", "0");
    REFUSED("--dist-init tcp://127.0.0.1:29500 names where the ranks meet, but RANK and "
            "WORLD_SIZE are not set", "--model", mp, "--tokens", tp, "--dist-init",
            "tcp://127.0.0.1:29500");
    REFUSED("--dist-init bogus:x: an init method is tcp://HOST:PORT or file:PATH", "--model", mp,
            "--tokens", tp, "--dist-init", "bogus:x");
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "2", 1);
    REFUSED("RANK=3 is not below WORLD_SIZE=2", "--model", mp, "--tokens", tp);
    setenv("RANK", "0", 1);
    REFUSED("WORLD_SIZE=2 but neither MASTER_ADDR/MASTER_PORT nor an init method", "--model", mp,
            "--tokens", tp);
    REFUSED("--gpus 2: this process is a rank of a launched run already (WORLD_SIZE=2)",
            "--model", mp, "--tokens", tp, "--gpus", "2");
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PTXGEN_TRAIN [FAKE_LIBCUDA]\n", argv[0]);
        return 2;
    }
    /* one process: a launcher's variables around the test would make every
     * run a rank */
    static const char *const dist_env[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                           "MASTER_PORT"};
    for (size_t i = 0; i < sizeof dist_env / sizeof dist_env[0]; i++)
        unsetenv(dist_env[i]);
    /* absolute: some runs start in the scratch directory */
    static char exe_abs[4096];
    char cwd[2048];
    if (argv[1][0] != '/' && getcwd(cwd, sizeof cwd))
        snprintf(exe_abs, sizeof exe_abs, "%s/%s", cwd, argv[1]);
    else
        snprintf(exe_abs, sizeof exe_abs, "%s", argv[1]);
    exe = exe_abs;
    REQUIRE(scratch_dir(dir, sizeof dir) != NULL);
    path_in(logp, sizeof logp, dir, "log.jsonl");
    path_in(outa, sizeof outa, dir, "out-adapter");
    path_in(outg, sizeof outg, dir, "out-grads");
    path_in(mp, sizeof mp, dir, "ok");
    path_in(tp, sizeof tp, dir, "tokens.bin");
    path_in(tbad, sizeof tbad, dir, "tokens-bad.bin");
    path_in(adp, sizeof adp, dir, "adapter");
    make_model("ok", cfg_ok, NULL);
    int32_t ids[16];
    for (int i = 0; i < 16; i++)
        ids[i] = i;
    REQUIRE(write_bytes(tp, ids, sizeof ids) == 0);
    ids[5] = 32;
    REQUIRE(write_bytes(tbad, ids, sizeof ids) == 0);
    path_in(pgp, sizeof pgp, dir, "data.pgtok");
    REQUIRE(write_pgtok(pgp, 6, data_lens, data_ids, data_mask, 32, -1, 0, NULL) == 0);

    /* config */
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "%s", cfg_ok);
    char *at = strstr(cfg, "\"intermediate_size\":24,");
    memmove(at, at + strlen("\"intermediate_size\":24,"), strlen(at + 23) + 1);
    make_model("noint", cfg, NULL);
    char p[4096];
    path_in(p, sizeof p, dir, "noint");
    CASE("intermediate_size: missing", "--model", p, "--tokens", tp);
    make_model("scaling", "{\"model_type\":\"qwen2\",\"hidden_size\":16,\"intermediate_size\":24,"
                          "\"num_hidden_layers\":1,\"num_attention_heads\":2,"
                          "\"vocab_size\":32,\"rms_norm_eps\":1e-6,"
                          "\"rope_scaling\":{\"type\":\"linear\",\"factor\":2.0}}",
               NULL);
    path_in(p, sizeof p, dir, "scaling");
    CASE("rope_scaling", "--model", p, "--tokens", tp);
    /* weights: a wrong shape, a truncated file */
    make_model("shape", cfg_ok, "model.layers.0.mlp.up_proj.weight");
    path_in(p, sizeof p, dir, "shape");
    CASE("model.layers.0.mlp.up_proj.weight", "--model", p, "--tokens", tp);
    make_model("trunc", cfg_ok, NULL);
    char st[4096];
    path_in(p, sizeof p, dir, "trunc");
    path_in(st, sizeof st, p, "model.safetensors");
    REQUIRE(truncate(st, 100) == 0);
    CASE("model.safetensors", "--model", p, "--tokens", tp);
    /* tokens outside the vocabulary: the id and its byte offset */
    CASE("token id 32 at byte 20", "--model", mp, "--tokens", tbad);
    /* an adapter naming a module the model lacks */
    mkdir(adp, 0700);
    REQUIRE(write_text(adp, "adapter_config.json",
                       "{\"peft_type\":\"LORA\",\"r\":2,\"lora_alpha\":4,"
                       "\"target_modules\":[\"q_proj\",\"w1\"]}") == 0);
    CASE("w1", "--model", mp, "--adapter", adp, "--tokens", tp);
    /* options */
    CASE("--dtype takes bf16 or f32", "--model", mp, "--tokens", tp, "--dtype", "f64");
    CASE("--targets: 'qq'", "--model", mp, "--tokens", tp, "--targets", "q,qq");
    CASE("--lr: 'x' is not a finite number", "--model", mp, "--tokens", tp, "--lr", "x");
    /* float options are checked as the floats the run uses, with their ranges */
    CASE("--alpha 0 is out of range (1e-06 to 1e+06)", "--model", mp, "--tokens", tp,
         "--alpha", "0");
    CASE("--alpha 1e300 is out of range (1e-06 to 1e+06)", "--model", mp, "--tokens", tp,
         "--alpha", "1e300");
    CASE("--alpha: 'nan' is not a finite number", "--model", mp, "--tokens", tp, "--alpha",
         "nan");
    CASE("--lr 1e300 is out of range (0, or 1e-12 to 1)", "--model", mp, "--tokens", tp, "--lr",
         "1e300");
    CASE("--lr 1e-50 is out of range (0, or 1e-12 to 1)", "--model", mp, "--tokens", tp, "--lr",
         "1e-50");
    CASE("--lr 1e-400 is out of range", "--model", mp, "--tokens", tp, "--lr", "1e-400");
    CASE("--lr -0.001 is out of range", "--model", mp, "--tokens", tp, "--lr", "-0.001");
    CASE("--max-norm 1e-50 is out of range (0, or 1e-12 to 1e+12)", "--model", mp, "--tokens",
         tp, "--max-norm", "1e-50");
    CASE("--max-norm 1e39 is out of range", "--model", mp, "--tokens", tp, "--max-norm", "1e39");
    CASE("--weight-decay 1e39 is out of range (0, or 1e-12 to 1)", "--model", mp, "--tokens", tp,
         "--weight-decay", "1e39");
    CASE("--weight-decay 1e-40 is out of range", "--model", mp, "--tokens", tp,
         "--weight-decay", "1e-40");
    /* --rank-pattern, --alpha-pattern: KEY=VALUE entries, named when refused */
    CASE("--rank-pattern: 'q_proj' is not KEY=R", "--model", mp, "--tokens", tp,
         "--rank-pattern", "q_proj");
    CASE("--rank-pattern: '' is not KEY=R", "--model", mp, "--tokens", tp, "--rank-pattern",
         "k_proj=4,,q_proj=8");
    CASE("--alpha-pattern: '=4' is not KEY=A", "--model", mp, "--tokens", tp, "--alpha-pattern",
         "=4");
    CASE("--rank-pattern: 'q_proj': '0' is not a rank from 1 to 4096", "--model", mp,
         "--tokens", tp, "--rank-pattern", "k_proj=4,q_proj=0");
    CASE("--rank-pattern: 'q_proj': '8.5' is not a rank", "--model", mp, "--tokens", tp,
         "--rank-pattern", "q_proj=8.5");
    CASE("--alpha-pattern: 'o_proj': '2e6' is not a lora_alpha from 1e-06 to 1e+06", "--model",
         mp, "--tokens", tp, "--alpha-pattern", "o_proj=2e6");
    CASE("--rank-pattern: 'q_proj' is given twice", "--model", mp, "--tokens", tp,
         "--rank-pattern", "q_proj=4,v_proj=2,q_proj=8");
    CASE("--alpha-pattern: 'layers.(0' is not a regular expression", "--model", mp, "--tokens",
         tp, "--alpha-pattern", "layers.(0=4");

    /* text from the model's files and from the command line is escaped */
    make_model("esc", "{\"model_type\":\"\\u001b]0;pwned\\u0007\"}", NULL);
    path_in(p, sizeof p, dir, "esc");
    CASE("model_type: '\\x1b]0;pwned\\x07' is not supported", "--model", p, "--tokens", tp);
    CASE("unknown option '--\\x1b[2J'", "--model", mp, "--tokens", tp, "--\x1b[2J");
    CASE("--dtype takes bf16 or f32", "--model", mp, "--tokens", tp, "--dtype", "\x1b[2J");
    CASE("--targets: '\\x1b]0;pwned\\x07' is not one of", "--model", mp, "--tokens", tp,
         "--targets", "q,\x1b]0;pwned\x07");
    path_in(p, sizeof p, dir, "tokens\x1b]0;pwned\x07.bin");
    CASE("tokens\\x1b]0;pwned\\x07.bin: No such file", "--model", mp, "--tokens", p);
    test_destinations();
    /* a valid adapter for the model, to load */
    char good[4096];
    path_in(good, sizeof good, dir, "good-adapter");
    pgrt_model_config hc;
    REQUIRE_INT_EQ(pgrt_model_config_parse(cfg_ok, strlen(cfg_ok), &hc), 0);
    pgrt_adapter_config gac = {.r = 2, .alpha = 4, .targets = 1u << PGRT_LINEAR_Q};
    pgrt_adapter *ga = NULL;
    REQUIRE_INT_EQ(pgrt_adapter_init(&hc, &gac, 1, &ga), 0);
    REQUIRE_INT_EQ(pgrt_adapter_save(ga, good), 0);
    pgrt_adapter_destroy(&ga);
    test_aliases(good);
    test_new_options();
    test_dist_options();
    test_data_refused();
    test_config();
    test_help_version(argc > 4 ? argv[4] : NULL);
    if (argc > 2)
        test_fake_runs(argv[2]);
    if (argc > 3) {
        test_resume_refused(argv[3]);
        test_checkpoint_runs(argv[2], argv[3]);
        test_data_runs(argv[2], argv[3]);
    }
    remove_tree(dir);
    TEST_DONE();
}
