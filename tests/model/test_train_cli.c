/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-train --model on bad input: each case is one line on stderr
 * naming the problem, exit 2, and no output file (log, adapter, gradients)
 * written. Every case here is refused before a GPU is needed, so the test
 * runs anywhere (with no driver: a case that got as far as the GPU would
 * fail). With the fake driver of tests/runtime, tiny runs check that the
 * outputs are written whole. Usage: test_train_cli PTXGEN_TRAIN
 * [FAKE_LIBCUDA]
 */
#include "model_util.h"
#include "pgrt_model.h"
#include "test.h"

#include <sys/stat.h>
#include <sys/wait.h>

static const char *exe;
static char dir[4096];
static const char *child_cwd; /* where the run starts (NULL: here) */

static const char cfg_ok[] =
    "{\"model_type\":\"qwen2\",\"hidden_size\":16,\"intermediate_size\":24,"
    "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"num_key_value_heads\":1,"
    "\"vocab_size\":32,\"rms_norm_eps\":1e-6,\"tie_word_embeddings\":true}";

/* The model's tensors, bf16 zeros; victim gets one more row. */
static void write_weights(const char *sub, const char *victim)
{
    pgrt_hf_config c;
    REQUIRE_INT_EQ(pgrt_hf_config_parse(cfg_ok, strlen(cfg_ok), &c), 0);
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
        f = freopen("/dev/null", "w", stdout);
        setenv("PGRT_LIBCUDA", driver ? driver : "/nonexistent/libcuda.so.1", 1);
        if (child_cwd && chdir(child_cwd) != 0)
            _exit(126);
        const char *argv[40] = {exe};
        int i = 1;
        for (; args[i - 1] && i < 39; i++)
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
    REQUIRE_INT_EQ(pgrt_adapter_load(a1, pgrt_model_hf_config(m), &ad), 0);
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
    REQUIRE_INT_EQ(pgrt_adapter_load(a1, pgrt_model_hf_config(m), &ad), 0);
    pgrt_adapter_destroy(&ad);
    pgrt_model_close(&m);
    remove_tree(a1);
    remove_tree(g1);
    unlink(l1);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PTXGEN_TRAIN [FAKE_LIBCUDA]\n", argv[0]);
        return 2;
    }
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
    pgrt_hf_config hc;
    REQUIRE_INT_EQ(pgrt_hf_config_parse(cfg_ok, strlen(cfg_ok), &hc), 0);
    pgrt_adapter_config gac = {.r = 2, .alpha = 4, .targets = 1u << PGRT_LINEAR_Q};
    pgrt_adapter *ga = NULL;
    REQUIRE_INT_EQ(pgrt_adapter_init(&hc, &gac, 1, &ga), 0);
    REQUIRE_INT_EQ(pgrt_adapter_save(ga, good), 0);
    pgrt_adapter_destroy(&ga);
    test_aliases(good);
    if (argc > 2)
        test_fake_runs(argv[2]);
    remove_tree(dir);
    TEST_DONE();
}
