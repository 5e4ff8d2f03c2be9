/* SPDX-License-Identifier: MIT */
/*
 * pgrt_adapter_save writes adapter_model.safetensors and
 * adapter_config.json as a pair, and pgrt_adapter_save_check /
 * pgrt_file_write_check refuse a destination before a run. The test
 * interposes renameat and fsync (the runtime library calls them through
 * the dynamic linker) to fail each one in turn, and to crash (_exit in a
 * child) before each rename: after every failure the directory holds the
 * old pair, after every crash the old pair, the new pair, or no config;
 * never new weights beside an old config.
 */
#define _GNU_SOURCE /* RTLD_NEXT */
#include "model_util.h"
#include "ptxgen/pgrt_model.h"
#include "test.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define CRASHED 3

enum { HOOK_RENAME, HOOK_FSYNC, HOOK_COUNT };
static int hook_calls[HOOK_COUNT]; /* since the last arm() */
static int fail_at[HOOK_COUNT];    /* the n-th call fails with EIO (0: none) */
static int crash_at;               /* _exit(CRASHED) before the n-th rename */

static void arm(int hook, int n, int crash)
{
    memset(hook_calls, 0, sizeof hook_calls);
    memset(fail_at, 0, sizeof fail_at);
    if (hook >= 0)
        fail_at[hook] = n;
    crash_at = crash;
}

/* ISO C has no conversion between object and function pointers */
#define FN_FROM_PTR(fn, p) memcpy(&(fn), &(p), sizeof(fn))

int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath)
{
    static int (*real)(int, const char *, int, const char *);
    if (!real) {
        void *p = dlsym(RTLD_NEXT, "renameat");
        FN_FROM_PTR(real, p);
    }
    int n = ++hook_calls[HOOK_RENAME];
    if (crash_at && n == crash_at)
        _exit(CRASHED);
    if (fail_at[HOOK_RENAME] && n == fail_at[HOOK_RENAME]) {
        errno = EIO;
        return -1;
    }
    return real(olddirfd, oldpath, newdirfd, newpath);
}

int fsync(int fd)
{
    static int (*real)(int);
    if (!real) {
        void *p = dlsym(RTLD_NEXT, "fsync");
        FN_FROM_PTR(real, p);
    }
    int n = ++hook_calls[HOOK_FSYNC];
    if (fail_at[HOOK_FSYNC] && n == fail_at[HOOK_FSYNC]) {
        errno = EIO;
        return -1;
    }
    return real(fd);
}

#define AST "adapter_model.safetensors"
#define ACFG "adapter_config.json"

typedef struct blob {
    char *p;
    size_t n;
} blob;

/* A whole file, or {NULL, 0} when there is none. */
static blob slurp(const char *dir, const char *name)
{
    char path[4096];
    path_in(path, sizeof path, dir, name);
    blob b = {0};
    FILE *f = fopen(path, "rb");
    if (!f)
        return b;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    b.p = malloc(n > 0 ? (size_t)n : 1);
    b.n = b.p && n > 0 ? fread(b.p, 1, (size_t)n, f) : 0;
    fclose(f);
    return b;
}

static bool same(blob a, blob b)
{
    return a.p && b.p && a.n == b.n && !memcmp(a.p, b.p, a.n);
}

typedef struct pair {
    blob w, c;
} pair;

static pair read_pair(const char *dir)
{
    return (pair){slurp(dir, AST), slurp(dir, ACFG)};
}

static void free_pair(pair *p)
{
    free(p->w.p);
    free(p->c.p);
    memset(p, 0, sizeof *p);
}

static bool is_pair(pair got, pair want)
{
    return same(got.w, want.w) && same(got.c, want.c);
}

/* dir holds exactly the two files of want */
static void put_pair(const char *dir, pair want)
{
    remove_tree(dir);
    REQUIRE(mkdir(dir, 0755) == 0);
    char p[4096];
    path_in(p, sizeof p, dir, AST);
    REQUIRE(write_bytes(p, want.w.p, want.w.n) == 0);
    path_in(p, sizeof p, dir, ACFG);
    REQUIRE(write_bytes(p, want.c.p, want.c.n) == 0);
}

static const char cfg[] =
    "{\"model_type\":\"qwen2\",\"hidden_size\":16,\"intermediate_size\":24,"
    "\"num_hidden_layers\":2,\"num_attention_heads\":2,\"num_key_value_heads\":1,"
    "\"vocab_size\":32,\"rms_norm_eps\":1e-6,\"tie_word_embeddings\":true}";

static pgrt_model_config mc;
static char root[4096];

static pgrt_adapter *make(int r, double alpha, uint64_t seed)
{
    pgrt_adapter_config ac = {.r = r, .alpha = alpha, .targets = 0x7f};
    pgrt_adapter *a = NULL;
    REQUIRE_INT_EQ(pgrt_adapter_init(&mc, &ac, seed, &a), 0);
    for (size_t i = 0; a && i < a->count; i++)
        for (int k = 0; k < r * a->w[i].out; k++)
            a->w[i].b[k] = (float)(seed * 3 + (uint64_t)k % 5);
    return a;
}

/* The reference bytes of an adapter, as pgrt_adapter_save writes them. */
static pair reference(const pgrt_adapter *a, const char *name)
{
    char d[4096];
    path_in(d, sizeof d, root, name);
    arm(-1, 0, 0);
    REQUIRE_INT_EQ(pgrt_adapter_save(a, d), 0);
    pair p = read_pair(d);
    REQUIRE(p.w.p && p.c.p);
    return p;
}

/* Every rename, then every fsync, failed in turn while `next` replaces
 * `old` in dir (old NULL: dir does not exist): a failure leaves the old
 * pair (or no dir) and nothing else; the first run that no failure hits
 * writes the new pair. Returns the renames a clean save took. */
static int fail_each(const char *what, const pgrt_adapter *next, const pair *old, pair want)
{
    char dir[4096];
    path_in(dir, sizeof dir, root, "t");
    int clean = 0;
    for (int hook = 0; hook < HOOK_COUNT; hook++) {
        for (int n = 1; n < 64; n++) {
            remove_tree(dir);
            if (old)
                put_pair(dir, *old);
            int before = dir_entries(root);
            arm(hook, n, 0);
            int rc = pgrt_adapter_save(next, dir);
            int calls = hook_calls[HOOK_RENAME];
            arm(-1, 0, 0);
            pair got = read_pair(dir);
            if (rc == 0) {
                if (!is_pair(got, want))
                    TEST_FAIL_("%s: %s %d: saved, but not the new pair", what,
                               hook == HOOK_RENAME ? "rename" : "fsync", n);
                clean = calls;
                free_pair(&got);
                break;
            }
            REQUIRE_CONTAINS(pgrt_last_message(), "Input/output error");
            if (old ? !is_pair(got, *old) || dir_entries(dir) != 2 : access(dir, F_OK) == 0)
                TEST_FAIL_("%s: %s %d failed: the directory is not the old pair alone", what,
                           hook == HOOK_RENAME ? "rename" : "fsync", n);
            REQUIRE_INT_EQ(dir_entries(root), before); /* no temporary beside it */
            free_pair(&got);
        }
    }
    remove_tree(dir);
    return clean;
}

/* A crash (the process gone) before each rename in turn: the directory
 * holds the old pair, the new one, or no config at all. */
static void crash_each(const char *what, const pgrt_adapter *next, const pair *old, pair want)
{
    char dir[4096];
    path_in(dir, sizeof dir, root, "t");
    for (int n = 1; n < 64; n++) {
        remove_tree(dir);
        if (old)
            put_pair(dir, *old);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            arm(-1, 0, n);
            _exit(pgrt_adapter_save(next, dir) == 0 ? 0 : 1);
        }
        int st = 0;
        waitpid(pid, &st, 0);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        pair got = read_pair(dir);
        bool ok = !got.c.p || is_pair(got, want) || (old && is_pair(got, *old));
        if (!ok)
            TEST_FAIL_("%s: a crash before rename %d leaves a config beside weights of "
                       "another save",
                       what, n);
        free_pair(&got);
        if (code != CRASHED) {
            REQUIRE_INT_EQ(code, 0);
            break;
        }
    }
    remove_tree(dir);
    /* the crashes' leftovers beside it (a half-built directory) */
    DIR *d = opendir(root);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[4096];
        path_in(p, sizeof p, root, e->d_name);
        if (!strncmp(e->d_name, ".ptxgen-", 8) && unlink(p) != 0)
            remove_tree(p);
    }
    if (d)
        closedir(d);
}

static void test_pair(void)
{
    pgrt_adapter *old = make(2, 4, 1), *next = make(4, 8, 2), *same_cfg = make(2, 4, 3);
    if (!old || !next || !same_cfg)
        return;
    pair po = reference(old, "ref-old"), pn = reference(next, "ref-new"),
         ps = reference(same_cfg, "ref-same");
    REQUIRE(!same(po.c, pn.c) && same(po.c, ps.c) && !same(po.w, ps.w));

    /* another configuration over an old pair: the config is the commit */
    int renames = fail_each("new config", next, &po, pn);
    REQUIRE(renames >= 2); /* every rename of the protocol was failed once */
    crash_each("new config", next, &po, pn);
    /* the same configuration (trained in place): one rename of the weights */
    renames = fail_each("same config", same_cfg, &po, ps);
    REQUIRE_INT_EQ(renames, 1);
    crash_each("same config", same_cfg, &po, ps);
    /* a new directory appears whole or not at all */
    fail_each("new directory", next, NULL, pn);
    crash_each("new directory", next, NULL, pn);

    /* other files in the directory are left alone */
    char dir[4096];
    path_in(dir, sizeof dir, root, "t");
    put_pair(dir, po);
    REQUIRE(write_text(dir, "README.md", "mine") == 0);
    REQUIRE_INT_EQ(pgrt_adapter_save(next, dir), 0);
    pair got = read_pair(dir);
    REQUIRE(is_pair(got, pn));
    free_pair(&got);
    REQUIRE_INT_EQ(dir_entries(dir), 3);
    remove_tree(dir);

    free_pair(&po);
    free_pair(&pn);
    free_pair(&ps);
    pgrt_adapter_destroy(&old);
    pgrt_adapter_destroy(&next);
    pgrt_adapter_destroy(&same_cfg);
}

/* The checks a run makes before its first step: every refusal leaves
 * nothing behind, every acceptance creates nothing. */
static void test_checks(void)
{
    char p[4096], q[4200];
    int before = dir_entries(root);
    path_in(p, sizeof p, root, "new");
    REQUIRE_INT_EQ(pgrt_adapter_save_check(p), 0);
    REQUIRE_INT_EQ(pgrt_file_write_check(p), 0);
    REQUIRE_INT_EQ(dir_entries(root), before);
    REQUIRE_INT_EQ(pgrt_adapter_save_check(root), 0);
    REQUIRE_INT_EQ(dir_entries(root), before);
    REQUIRE_INT_EQ(pgrt_adapter_save_check("/nonexistent/dir"), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "/nonexistent/dir: cannot create it: the directory it "
                                          "would go in does not exist");
    REQUIRE_INT_EQ(pgrt_file_write_check("/nonexistent/log.jsonl"), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "/nonexistent/log.jsonl: cannot write there: No such");
    REQUIRE_INT_EQ(pgrt_file_write_check(root), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "is a directory, not a file");
    snprintf(q, sizeof q, "%s/", p);
    REQUIRE_INT_EQ(pgrt_file_write_check(q), PGRT_EINVAL);
    /* a file where the directory should be */
    REQUIRE(write_text(root, "file", "x") == 0);
    path_in(p, sizeof p, root, "file");
    REQUIRE_INT_EQ(pgrt_adapter_save_check(p), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "file: not a directory");
    path_in(q, sizeof q, p, "log.jsonl");
    REQUIRE_INT_EQ(pgrt_file_write_check(q), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "Not a directory");
    unlink(p);
    /* a directory at one of the two names */
    path_in(p, sizeof p, root, "d");
    REQUIRE(mkdir(p, 0755) == 0);
    path_in(q, sizeof q, p, ACFG);
    REQUIRE(mkdir(q, 0755) == 0);
    REQUIRE_INT_EQ(pgrt_adapter_save_check(p), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), ACFG " in it is a directory");
    remove_tree(p);
    /* a link to nothing */
    path_in(p, sizeof p, root, "dangling");
    REQUIRE(symlink("/nonexistent/target", p) == 0);
    REQUIRE_INT_EQ(pgrt_adapter_save_check(p), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "a symbolic link to nothing");
    unlink(p);
    /* a directory that takes no new file (root ignores permissions) */
    if (geteuid() != 0) {
        path_in(p, sizeof p, root, "ro");
        REQUIRE(mkdir(p, 0555) == 0);
        REQUIRE_INT_EQ(pgrt_adapter_save_check(p), PGRT_EINVAL);
        REQUIRE_CONTAINS(pgrt_last_message(), "cannot write there: Permission denied");
        path_in(q, sizeof q, p, "sub");
        REQUIRE_INT_EQ(pgrt_adapter_save_check(q), PGRT_EINVAL);
        REQUIRE_CONTAINS(pgrt_last_message(), "cannot write there: Permission denied");
        path_in(q, sizeof q, p, "log.jsonl");
        REQUIRE_INT_EQ(pgrt_file_write_check(q), PGRT_EINVAL);
        REQUIRE_CONTAINS(pgrt_last_message(), "cannot write there: Permission denied");
        rmdir(p);
    }
    REQUIRE_INT_EQ(dir_entries(root), before);
}

int main(void)
{
    REQUIRE_INT_EQ(pgrt_model_config_parse(cfg, strlen(cfg), &mc), 0);
    if (!scratch_dir(root, sizeof root)) {
        fprintf(stderr, "no scratch directory\n");
        return 1;
    }
    test_pair();
    test_checks();
    remove_tree(root);
    TEST_DONE();
}
