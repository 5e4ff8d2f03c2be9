/* SPDX-License-Identifier: MIT */
/*
 * Start-up without a GPU, against the fake driver (fakecuda.h, whose linker
 * makes checkable "cubins"):
 *
 *  - the on-disk cubin cache: a miss JIT-compiles and writes one entry a
 *    module, a new context loads them without a JIT; a changed driver
 *    version or compute capability misses; entries corrupted, truncated,
 *    cut to less than a header or swapped under another key are never
 *    handed to the driver but recompiled and replaced; concurrent writers
 *    (threads of two contexts, and processes) leave only whole entries and
 *    no temporaries; the size cap evicts the least recently used (a hit
 *    counts as a use); the sweep deletes stale temporaries and entries of
 *    exactly the cache's names, no user file beside them; a directory that cannot be created or written, or a
 *    write cut short by a file size limit, gives one line on stderr and no
 *    error; PTXGEN_CACHE=0 and a driver without the linker use the old path;
 *  - whose files: a directory the runtime makes is 0700; a directory others
 *    may write (sticky or not) is not used and an entry others may write, a
 *    link or a FIFO is not loaded, with one line; with --owner, the same
 *    for a directory, a link to it and entries of another user's (given
 *    away with chown as root; 77 after the part that runs without);
 *  - the parallel pre-warm: N modules of FAKECUDA_JIT_US each on T threads
 *    take about N/T of the serial time; an unknown entry fails alone, the
 *    others load, and pgrt_prewarm_each gives each outcome;
 *  - pgrt_prewarm_model's report: disk hits, cubin bytes, threads.
 *
 * Usage: test_cubin_cache FAKE_LIBCUDA
 *        test_cubin_cache FAKE_LIBCUDA --owner
 *        test_cubin_cache FAKE_LIBCUDA --child MODE   (run by the test itself)
 */
#include "fake_util.h"
#include "fakecuda.h"
#include "ptxgen/pgrt.h"
#include "ptxgen/pgrt_gemm.h"
#include "ptxgen/pgrt_kernel.h"
#include "ptxgen/pgrt_prewarm.h"
#include "test.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static fake_fixture fk;
static const char *self;
static char root[256];


static pgrt_ctx *open_ctx(void) { return fake_open_ctx(fk.path); }

static const pgrt_warm kernels[] = {
    {"squared_sum_reduce", NULL}, {"clip_scale_reduce", NULL}, {"gradient_clip_gpu_scale", NULL},
    {"residual_add", NULL},       {"silu_backward", NULL},     {"adamw_step_dev", NULL},
};
#define NK (sizeof kernels / sizeof kernels[0])

/* Pre-warm list[0..n) on a fresh context; the stats after. */
static int warm(const pgrt_warm *list, size_t n, pgrt_cache_stats *st)
{
    pgrt_ctx *ctx = open_ctx();
    int rc = pgrt_prewarm(ctx, list, n);
    if (rc)
        fprintf(stderr, "pgrt_prewarm: %s\n", pgrt_last_message());
    if (st)
        pgrt_cache_stats_get(ctx, st);
    pgrt_ctx_destroy(&ctx);
    return rc;
}

static void use_dir(const char *name, char *out, size_t len)
{
    snprintf(out, len, "%s/%s", root, name);
    setenv("PTXGEN_CACHE_DIR", out, 1);
}

/* Entry files in dir (names), and temporaries left. */
static int list_dir(const char *dir, char names[][128], int max, int *tmps)
{
    int n = 0;
    if (tmps)
        *tmps = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (l > 6 && strcmp(de->d_name + l - 6, ".cubin") == 0) {
            if (n < max)
                snprintf(names[n], 128, "%s/%s", dir, de->d_name);
            n++;
        } else if (strstr(de->d_name, ".tmp") && tmps) {
            (*tmps)++;
        }
    }
    closedir(d);
    return n;
}

static long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

/* Every entry loads without a JIT and none is refused. */
static void require_all_valid(const char *what)
{
    fk.reset();
    pgrt_cache_stats st;
    REQUIRE_INT_EQ(warm(kernels, NK, &st), 0);
    if (fk.links() != 0 || st.disk_hits != NK || st.disk_rejected != 0)
        fprintf(stderr, "after %s: links %d, disk hits %llu, rejected %llu\n", what, fk.links(),
                (unsigned long long)st.disk_hits, (unsigned long long)st.disk_rejected);
    REQUIRE_INT_EQ(fk.links(), 0);
    REQUIRE_INT_EQ(st.disk_hits, NK);
    REQUIRE_INT_EQ(st.disk_rejected, 0);
    REQUIRE_INT_EQ(fk.bad_cubins(), 0);
}

/* ---------------------------------------------------------------- hit and miss */

static void test_hit_miss(void)
{
    char dir[512], names[16][128];
    use_dir("hitmiss", dir, sizeof dir);
    fk.reset();
    pgrt_cache_stats st;
    REQUIRE_INT_EQ(warm(kernels, NK, &st), 0);
    REQUIRE_INT_EQ(fk.links(), NK);
    REQUIRE_INT_EQ(fk.cubin_loads(), NK);
    REQUIRE_INT_EQ(fk.ex_loads(), 0); /* no cuModuleLoadDataEx of PTX */
    REQUIRE_INT_EQ(st.misses, NK);
    REQUIRE_INT_EQ(st.disk_misses, NK);
    REQUIRE_INT_EQ(st.disk_hits, 0);
    REQUIRE_INT_EQ(st.disk_writes, NK);
    REQUIRE(st.cubin_bytes > 1000 && st.jit_ms >= 0.0 && st.load_ms >= 0.0);
    int tmps = -1;
    REQUIRE_INT_EQ(list_dir(dir, names, 16, &tmps), NK);
    REQUIRE_INT_EQ(tmps, 0);

    /* The entry is the header and the cubin: magic first. */
    FILE *f = fopen(names[0], "rb");
    char magic[8] = "";
    REQUIRE(f && fread(magic, 1, 8, f) == 8);
    if (f)
        fclose(f);
    REQUIRE(memcmp(magic, "PGCUBIN", 8) == 0);

    /* A new context (a new process, as far as the cache knows). */
    fk.reset();
    uint64_t bytes = st.cubin_bytes;
    REQUIRE_INT_EQ(warm(kernels, NK, &st), 0);
    REQUIRE_INT_EQ(fk.links(), 0);
    REQUIRE_INT_EQ(fk.cubin_loads(), NK);
    REQUIRE_INT_EQ(st.disk_hits, NK);
    REQUIRE_INT_EQ(st.disk_misses, 0);
    REQUIRE_INT_EQ(st.disk_writes, 0);
    REQUIRE(st.jit_ms == 0.0);
    REQUIRE_INT_EQ(st.cubin_bytes, bytes);

    /* Another driver or device: other keys. */
    fk.reset();
    setenv("FAKECUDA_VERSION", "12090", 1);
    REQUIRE_INT_EQ(warm(kernels, 2, &st), 0);
    REQUIRE_INT_EQ(fk.links(), 2);
    unsetenv("FAKECUDA_VERSION");
    fk.reset();
    setenv("FAKECUDA_CC", "91", 1); /* an sm_90 target on a 9.1 part */
    REQUIRE_INT_EQ(warm(kernels, 2, &st), 0);
    REQUIRE_INT_EQ(fk.links(), 2);
    unsetenv("FAKECUDA_CC");
    REQUIRE_INT_EQ(list_dir(dir, names, 16, NULL), NK + 4);

    /* A direct-load device (compute capability 12): the linker without
     * options, cached all the same. */
    setenv("FAKECUDA_CC", "120", 1);
    fk.reset();
    REQUIRE_INT_EQ(warm(kernels, 2, &st), 0);
    REQUIRE_INT_EQ(fk.links(), 2);
    fk.reset();
    REQUIRE_INT_EQ(warm(kernels, 2, &st), 0);
    REQUIRE_INT_EQ(fk.links(), 0);
    REQUIRE_INT_EQ(st.disk_hits, 2);
    unsetenv("FAKECUDA_CC");
    REQUIRE_INT_EQ(list_dir(dir, names, 16, NULL), NK + 6);
}

/* A JIT error through the linker: its log in the message, nothing written. */
static void test_jit_error(void)
{
    char dir[512], names[16][128];
    use_dir("jit-error", dir, sizeof dir);
    pgk_desc bad = *pgk_find("residual_add");
    bad.name = "residual_add_BROKEN"; /* the fake's JIT refuses it */
    pgrt_ctx *ctx = open_ctx();
    pgrt_kernel *k = NULL;
    REQUIRE_INT_EQ(pgrt_kernel_get(ctx, &bad, NULL, &k), PGRT_EJIT);
    REQUIRE_CONTAINS(pgrt_last_message(), "cuLinkAddData: CUDA_ERROR_INVALID_PTX: ptxas");
    REQUIRE_CONTAINS(pgrt_last_message(), "line 7; error");
    REQUIRE_CONTAINS(pgrt_last_message(), "; ptxas fatal");
    REQUIRE_CONTAINS(pgrt_last_message(), "(kernel residual_add_BROKEN, sm_90)");
    REQUIRE_INT_EQ(pgrt_last_cuda_error(), 218);
    pgrt_cache_stats st;
    pgrt_cache_stats_get(ctx, &st);
    REQUIRE_INT_EQ(st.failures, 1);
    REQUIRE_INT_EQ(st.disk_writes, 0);
    pgrt_ctx_destroy(&ctx);
    REQUIRE_INT_EQ(list_dir(dir, names, 16, NULL), 0);
}

/* ---------------------------------------------------------------- damaged entries */

static void damage(const char *path, const char *how)
{
    long size = file_size(path);
    if (!strcmp(how, "flip")) {
        int fd = open(path, O_RDWR);
        unsigned char b = 0;
        REQUIRE(fd >= 0 && pread(fd, &b, 1, size - 40) == 1);
        b ^= 0x20;
        REQUIRE(pwrite(fd, &b, 1, size - 40) == 1);
        close(fd);
    } else if (!strcmp(how, "half")) {
        REQUIRE_INT_EQ(truncate(path, size / 2), 0);
    } else if (!strcmp(how, "short")) {
        REQUIRE_INT_EQ(truncate(path, 10), 0);
    } else if (!strcmp(how, "empty")) {
        REQUIRE_INT_EQ(truncate(path, 0), 0);
    } else if (!strcmp(how, "header")) {
        int fd = open(path, O_RDWR);
        REQUIRE(fd >= 0 && pwrite(fd, "X", 1, 0) == 1);
        close(fd);
    }
}

static void test_damaged(void)
{
    static const char *hows[] = {"flip", "half", "short", "empty", "header"};
    char dir[512], names[16][128];
    use_dir("damaged", dir, sizeof dir);
    fk.reset();
    REQUIRE_INT_EQ(warm(kernels, NK, NULL), 0);
    REQUIRE_INT_EQ(list_dir(dir, names, 16, NULL), NK);
    for (size_t i = 0; i < sizeof hows / sizeof hows[0]; i++) {
        long size = file_size(names[i]);
        damage(names[i], hows[i]);
        fk.reset();
        pgrt_cache_stats st;
        REQUIRE_INT_EQ(warm(kernels, NK, &st), 0);
        if (fk.links() != 1)
            fprintf(stderr, "damage %s: %d JITs\n", hows[i], fk.links());
        REQUIRE_INT_EQ(fk.links(), 1);
        REQUIRE_INT_EQ(st.disk_rejected, 1);
        REQUIRE_INT_EQ(st.disk_hits, NK - 1);
        REQUIRE_INT_EQ(st.disk_writes, 1);
        REQUIRE_INT_EQ(fk.bad_cubins(), 0); /* never handed to the driver */
        REQUIRE_INT_EQ(file_size(names[i]), size); /* replaced, whole */
    }

    /* An intact entry under another entry's name: its key does not match. */
    char buf[1 << 16];
    FILE *in = fopen(names[0], "rb"), *out = fopen(names[1], "wb");
    size_t n = in ? fread(buf, 1, sizeof buf, in) : 0;
    REQUIRE(n > 0 && out && fwrite(buf, 1, n, out) == n);
    if (in)
        fclose(in);
    if (out)
        fclose(out);
    fk.reset();
    pgrt_cache_stats st;
    REQUIRE_INT_EQ(warm(kernels, NK, &st), 0);
    REQUIRE_INT_EQ(fk.links(), 1);
    REQUIRE_INT_EQ(st.disk_rejected, 1);
    require_all_valid("damage");
}

/* ---------------------------------------------------------------- concurrent writers */

static void *warm_thread(void *arg)
{
    (void)arg;
    pgrt_ctx *ctx = open_ctx();
    pgrt_ctx_set_jit_threads(ctx, 3);
    intptr_t rc = pgrt_prewarm(ctx, kernels, NK);
    pgrt_ctx_destroy(&ctx);
    return (void *)rc;
}

static void test_concurrent_threads(void)
{
    char dir[512], names[16][128];
    use_dir("threads", dir, sizeof dir);
    setenv("FAKECUDA_JIT_US", "2000", 1);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        REQUIRE_INT_EQ(pthread_create(&t[i], NULL, warm_thread, NULL), 0);
    for (int i = 0; i < 4; i++) {
        void *rc = NULL;
        pthread_join(t[i], &rc);
        REQUIRE(rc == NULL);
    }
    unsetenv("FAKECUDA_JIT_US");
    int tmps = -1;
    REQUIRE_INT_EQ(list_dir(dir, names, 16, &tmps), NK);
    REQUIRE_INT_EQ(tmps, 0);
    require_all_valid("concurrent threads");
}

static pid_t spawn_child(const char *mode)
{
    pid_t pid = fork();
    if (pid == 0) {
        execl(self, self, fk.path, "--child", mode, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static int wait_child(pid_t pid)
{
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_concurrent_processes(void)
{
    char dir[512], names[16][128];
    use_dir("processes", dir, sizeof dir);
    setenv("FAKECUDA_JIT_US", "3000", 1);
    pid_t pids[6];
    for (int i = 0; i < 6; i++)
        pids[i] = spawn_child("warm");
    for (int i = 0; i < 6; i++)
        REQUIRE_INT_EQ(wait_child(pids[i]), 0);
    unsetenv("FAKECUDA_JIT_US");
    int tmps = -1;
    REQUIRE_INT_EQ(list_dir(dir, names, 16, &tmps), NK);
    REQUIRE_INT_EQ(tmps, 0);
    require_all_valid("concurrent processes");
}

/* ---------------------------------------------------------------- eviction */

static void set_age(const char *path, int seconds_ago)
{
    struct timespec ts[2];
    clock_gettime(CLOCK_REALTIME, &ts[0]);
    ts[0].tv_sec -= seconds_ago;
    ts[1] = ts[0];
    REQUIRE_INT_EQ(utimensat(AT_FDCWD, path, ts, 0), 0);
}

/* The entry kernel i wrote: the one file that appeared. */
static void add_one(const char *dir, size_t i, char *path)
{
    char before[16][128], after[16][128];
    int nb = list_dir(dir, before, 16, NULL);
    REQUIRE_INT_EQ(warm(&kernels[i], 1, NULL), 0);
    int na = list_dir(dir, after, 16, NULL);
    REQUIRE_INT_EQ(na, nb + 1);
    for (int a = 0; a < na; a++) {
        bool old = false;
        for (int b = 0; b < nb; b++)
            old |= strcmp(after[a], before[b]) == 0;
        if (!old)
            memcpy(path, after[a], 128);
    }
}

static void test_eviction(void)
{
    char dir[512], e[5][128], names[16][128];
    use_dir("evict", dir, sizeof dir);
    for (size_t i = 0; i < 4; i++)
        add_one(dir, i, e[i]);
    /* Oldest first: A (0), B, C, D; then a hit makes A the newest. */
    set_age(e[0], 500);
    set_age(e[1], 400);
    set_age(e[2], 300);
    set_age(e[3], 200);
    fk.reset();
    REQUIRE_INT_EQ(warm(&kernels[0], 1, NULL), 0);
    REQUIRE_INT_EQ(fk.links(), 0);

    /* Room for A, D and the new E (plus less than any entry): B and C go. */
    long sa = file_size(e[0]), sd = file_size(e[3]);
    /* E's size is known only once written; write it first with a large
     * cap, drop it, and add it again under the real cap. */
    add_one(dir, 4, e[4]);
    long se = file_size(e[4]);
    REQUIRE(se > 0 && sa > 0 && sd > 0);
    REQUIRE_INT_EQ(unlink(e[4]), 0);
    char cap[64];
    snprintf(cap, sizeof cap, "%.9f", (double)(sa + sd + se + 100) / 1048576.0);
    setenv("PTXGEN_CACHE_MAX_MB", cap, 1);
    REQUIRE_INT_EQ(warm(&kernels[4], 1, NULL), 0);
    unsetenv("PTXGEN_CACHE_MAX_MB");
    REQUIRE_INT_EQ(list_dir(dir, names, 16, NULL), 3);
    REQUIRE(file_size(e[0]) == sa);
    REQUIRE(file_size(e[1]) < 0);
    REQUIRE(file_size(e[2]) < 0);
    REQUIRE(file_size(e[3]) == sd);
    REQUIRE(file_size(e[4]) == se);
}

/* A file of the given name in dir holding "data\n", its mtime seconds_ago
 * in the past (0: now). */
static void plant(const char *dir, const char *name, int seconds_ago)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    REQUIRE(f != NULL);
    if (!f)
        return;
    fputs("data\n", f);
    fclose(f);
    if (seconds_ago)
        set_age(path, seconds_ago);
}

static bool present(const char *dir, const char *name)
{
    char path[700];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return lstat(path, &sb) == 0;
}

/* The sweep deletes the cache's own files and nothing else, wherever the
 * directory is ($HOME, "."): stale temporaries of exactly the name a writer
 * gives them (".ptxgen-cubin-" + the entry's first 16 hex digits + "." + 10
 * hex digits + ".tmp", docs/runtime.md) and, past the cap, entries of
 * exactly "<64 hex digits>.cubin". A user's dot-files ending in .tmp, the
 * temporaries of pgrt_file_replace (".ptxgen-XXXXXXXXXX.tmp") and names
 * that only resemble the cache's stay, however old. */
static void test_sweep_names(void)
{
    static const char *user[] = {
        ".notes.tmp", ".bashrc.tmp", "..tmp", ".x.tmp", "notes.tmp",
        ".deadbeef.1.0.tmp",                                /* the cache's names before */
        ".ptxgen-AbCdEfGhIj.tmp",                           /* pgrt_file_replace's */
        ".ptxgen-cubin-0123456789abcdef.0123456789.tmp.bak",
        ".ptxgen-cubin-0123456789ABCDEF.0123456789.tmp",    /* upper case */
        ".ptxgen-cubin-0123456789abcdef.012345678.tmp",     /* a digit short */
        ".ptxgen-cubin-0123456789abcdef.0123456789a.tmp",   /* a digit long */
        ".ptxgen-cubin-0123456789abcdef-0123456789.tmp",
        "ptxgen-cubin-0123456789abcdef.0123456789.tmp",
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde.cubin",   /* 63 */
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0.cubin", /* 65 */
        "0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF.cubin",
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.cubin.bak",
        ".0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.cubin",
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdeg.cubin",
        "notes.cubin",
    };
    static const char *stale[] = {
        ".ptxgen-cubin-0123456789abcdef.0123456789.tmp",
        ".ptxgen-cubin-ffffffffffffffff.abcdef0123.tmp",
    };
    const char *fresh = ".ptxgen-cubin-0123456789abcdef.9876543210.tmp";
    const char *link = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210.cubin";
    char dir[512], names[16][128], entry[128];
    use_dir("sweep", dir, sizeof dir);
    add_one(dir, 0, entry);
    set_age(entry, 7200);
    for (size_t i = 0; i < sizeof user / sizeof user[0]; i++)
        plant(dir, user[i], 7200);
    for (size_t i = 0; i < sizeof stale / sizeof stale[0]; i++)
        plant(dir, stale[i], 7200);
    plant(dir, fresh, 0);
    /* A link with an entry's name is not an entry: neither it nor its
     * target goes. */
    char target[600], at[700];
    snprintf(target, sizeof target, "%s/notes.cubin", dir);
    snprintf(at, sizeof at, "%s/%s", dir, link);
    REQUIRE_INT_EQ(symlink(target, at), 0);

    /* A cap of nothing: every entry goes, the new one with them. */
    setenv("PTXGEN_CACHE_MAX_MB", "0", 1);
    REQUIRE_INT_EQ(warm(&kernels[1], 1, NULL), 0);
    unsetenv("PTXGEN_CACHE_MAX_MB");

    REQUIRE(file_size(entry) < 0);
    for (size_t i = 0; i < sizeof user / sizeof user[0]; i++) {
        if (!present(dir, user[i]))
            fprintf(stderr, "the sweep deleted %s\n", user[i]);
        REQUIRE(present(dir, user[i]));
    }
    for (size_t i = 0; i < sizeof stale / sizeof stale[0]; i++) {
        if (present(dir, stale[i]))
            fprintf(stderr, "the sweep left %s\n", stale[i]);
        REQUIRE(!present(dir, stale[i]));
    }
    REQUIRE(present(dir, fresh));
    REQUIRE(present(dir, link));
    /* Of the names ending in .cubin, only the planted six and the link. */
    REQUIRE_INT_EQ(list_dir(dir, names, 16, NULL), 7);
}

/* ---------------------------------------------------------------- unwritable */

/* The last line cache_lines counted. */
static char logged_line[2048];

/* Run fn with stderr going to a file; the lines that mention the cache. */
static int cache_lines(void (*fn)(void))
{
    char path[512];
    snprintf(path, sizeof path, "%s/stderr.txt", root);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(path, "r");
    char line[2048];
    int n = 0;
    logged_line[0] = '\0';
    while (f && fgets(line, sizeof line, f)) {
        if (strstr(line, "cubin cache")) {
            n++;
            fprintf(stderr, "logged: %s", line);
            snprintf(logged_line, sizeof logged_line, "%s", line);
        }
    }
    if (f)
        fclose(f);
    return n;
}

static void warm_all_expect_jit(void)
{
    fk.reset();
    pgrt_cache_stats st;
    REQUIRE_INT_EQ(warm(kernels, NK, &st), 0);
    REQUIRE_INT_EQ(fk.links(), NK);
    REQUIRE_INT_EQ(st.disk_writes, 0);
}

static void test_unwritable(void)
{
    /* Under a regular file: no directory can be made, even by root. */
    char file[512], dir[600], names[16][128];
    snprintf(file, sizeof file, "%s/plain-file", root);
    fclose(fopen(file, "w"));
    snprintf(dir, sizeof dir, "%s/cache", file);
    setenv("PTXGEN_CACHE_DIR", dir, 1);
    REQUIRE_INT_EQ(cache_lines(warm_all_expect_jit), 1);

    /* A read-only directory (root writes anyway: then it is not tested). */
    use_dir("readonly", dir, sizeof dir);
    REQUIRE_INT_EQ(mkdir(dir, 0555), 0);
    if (geteuid() != 0) {
        REQUIRE_INT_EQ(cache_lines(warm_all_expect_jit), 1);
        REQUIRE_INT_EQ(list_dir(dir, names, 16, NULL), 0);
    }

    /* A full disk, as a file size limit: the write fails part-way. */
    use_dir("full", dir, sizeof dir);
    char path[512];
    snprintf(path, sizeof path, "%s/stderr-child.txt", root);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        execl(self, self, fk.path, "--child", "full", (char *)NULL);
        _exit(127);
    }
    REQUIRE_INT_EQ(wait_child(pid), 0);
    FILE *f = fopen(path, "r");
    char line[2048];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, "cubin cache")) {
            n++;
            fprintf(stderr, "logged: %s", line);
        }
    if (f)
        fclose(f);
    REQUIRE_INT_EQ(n, 1);
    int tmps = -1;
    REQUIRE_INT_EQ(list_dir(dir, names, 16, &tmps), 0);
    REQUIRE_INT_EQ(tmps, 0);
}

/* ---------------------------------------------------------------- off */

static void test_off(void)
{
    char dir[512], names[16][128];
    use_dir("off", dir, sizeof dir);
    setenv("PTXGEN_CACHE", "0", 1);
    fk.reset();
    pgrt_cache_stats st;
    /* Off, the JIT still goes through the linker (it runs side by side
     * on the pre-warm's threads; cuModuleLoadDataEx queues them), and
     * nothing is written. */
    REQUIRE_INT_EQ(warm(kernels, 2, &st), 0);
    REQUIRE_INT_EQ(fk.links(), 2);
    REQUIRE_INT_EQ(fk.cubin_loads(), 2);
    REQUIRE_INT_EQ(fk.ex_loads(), 0);
    REQUIRE_INT_EQ(st.disk_misses, 0);
    REQUIRE_INT_EQ(st.disk_writes, 0);
    REQUIRE_INT_EQ(list_dir(dir, names, 16, NULL), 0);
    setenv("PTXGEN_CACHE", "1", 1);

    /* A driver without the linker: the old path, no cache. */
    setenv("FAKECUDA_HIDE", "cuLinkComplete", 1);
    fk.reset();
    REQUIRE_INT_EQ(warm(kernels, 2, &st), 0);
    REQUIRE_INT_EQ(fk.ex_loads(), 2);
    REQUIRE_INT_EQ(fk.loads(), 2);
    REQUIRE_INT_EQ(fk.links(), 0);
    REQUIRE_INT_EQ(list_dir(dir, names, 16, NULL), 0);
    unsetenv("FAKECUDA_HIDE");
}

/* ---------------------------------------------------------------- whose files */

/* What the last warm_all saw. */
static pgrt_cache_stats seen;
static int seen_links;

static void warm_all(void)
{
    fk.reset();
    memset(&seen, 0, sizeof seen);
    REQUIRE_INT_EQ(warm(kernels, NK, &seen), 0);
    seen_links = fk.links();
}

/* After warm_all in a directory the cache refused: every kernel compiled
 * from PTX, nothing read from dir or written to it, its NK entries as they
 * were and no temporary left. */
static void require_unused(const char *dir)
{
    char names[16][128];
    REQUIRE_INT_EQ(seen_links, NK);
    REQUIRE_INT_EQ(seen.disk_hits, 0);
    REQUIRE_INT_EQ(seen.disk_writes, 0);
    int tmps = -1;
    REQUIRE_INT_EQ(list_dir(dir, names, 16, &tmps), NK);
    REQUIRE_INT_EQ(tmps, 0);
}

static int mode_of(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0 ? (int)(sb.st_mode & 07777) : -1;
}

/* A directory the runtime makes is private (0700, whatever the umask
 * lets through), its missing parents too, and so are the entries. */
static void test_private_dir(void)
{
    char dir[512], parent[512], names[16][128];
    snprintf(parent, sizeof parent, "%s/private", root);
    use_dir("private/cache", dir, sizeof dir);
    mode_t old = umask(0);
    warm_all();
    umask(old);
    REQUIRE_INT_EQ(seen.disk_writes, NK);
    REQUIRE_INT_EQ(mode_of(parent), 0700);
    REQUIRE_INT_EQ(mode_of(dir), 0700);
    REQUIRE_INT_EQ(list_dir(dir, names, 16, NULL), NK);
    REQUIRE_INT_EQ(mode_of(names[0]), 0600);
}

/* A directory others may write (a sticky one such as /tmp among them:
 * anyone may plant names there) is not used, with one line: the entries
 * in it, valid as they are, are not loaded and nothing is written. The
 * same directory made private again serves them all. */
static void test_shared_dir(void)
{
    static const int modes[] = {0777, 01777, 0770, 0730, 0702, 01733};
    char dir[512];
    use_dir("shared", dir, sizeof dir);
    warm_all();
    REQUIRE_INT_EQ(seen.disk_writes, NK);
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        REQUIRE_INT_EQ(chmod(dir, (mode_t)modes[i]), 0);
        REQUIRE_INT_EQ(cache_lines(warm_all), 1);
        char mode[32];
        snprintf(mode, sizeof mode, "(mode %04o)", modes[i]);
        REQUIRE_CONTAINS(logged_line, "writable by group or others");
        REQUIRE_CONTAINS(logged_line, mode);
        REQUIRE_CONTAINS(logged_line, dir);
        require_unused(dir);
    }
    REQUIRE_INT_EQ(chmod(dir, 0700), 0);
    REQUIRE_INT_EQ(cache_lines(warm_all), 0);
    REQUIRE_INT_EQ(seen.disk_hits, NK);
}

/* In a private directory, an entry others may write, a link to a valid
 * entry and a FIFO are never loaded (nor waited on): compiled and
 * replaced, as a damaged entry is, with one line for all of them. */
static void test_shared_entries(void)
{
    char dir[512], names[16][128], other[512], onames[16][128];
    use_dir("entries", dir, sizeof dir);
    warm_all();
    REQUIRE_INT_EQ(list_dir(dir, names, 16, NULL), NK);
    /* Valid entries elsewhere for the links to point at. */
    use_dir("entries-elsewhere", other, sizeof other);
    warm_all();
    REQUIRE_INT_EQ(list_dir(other, onames, 16, NULL), NK);
    setenv("PTXGEN_CACHE_DIR", dir, 1);

    REQUIRE_INT_EQ(chmod(names[0], 0666), 0);
    REQUIRE_INT_EQ(chmod(names[1], 0620), 0);
    int n = cache_lines(warm_all);
    REQUIRE_INT_EQ(n, 1);
    REQUIRE_CONTAINS(logged_line, "writable by group or others");
    REQUIRE_CONTAINS(logged_line, "not loading it");
    REQUIRE_INT_EQ(seen_links, 2);
    REQUIRE_INT_EQ(seen.disk_hits, NK - 2);
    REQUIRE_INT_EQ(seen.disk_rejected, 2);
    REQUIRE_INT_EQ(seen.disk_writes, 2);
    REQUIRE_INT_EQ(mode_of(names[0]), 0600);
    REQUIRE_INT_EQ(mode_of(names[1]), 0600);

    /* A link to a valid entry of the same name, and a FIFO. */
    const char *base = strrchr(names[2], '/') + 1;
    char target[700];
    snprintf(target, sizeof target, "%s/%s", other, base);
    REQUIRE(file_size(target) > 0);
    REQUIRE_INT_EQ(unlink(names[2]), 0);
    REQUIRE_INT_EQ(symlink(target, names[2]), 0);
    REQUIRE_INT_EQ(unlink(names[3]), 0);
    REQUIRE_INT_EQ(mkfifo(names[3], 0600), 0);
    warm_all();
    REQUIRE_INT_EQ(seen_links, 2);
    REQUIRE_INT_EQ(seen.disk_rejected, 2);
    REQUIRE_INT_EQ(seen.disk_writes, 2);
    struct stat sb;
    REQUIRE(lstat(names[2], &sb) == 0 && S_ISREG(sb.st_mode));
    REQUIRE(lstat(names[3], &sb) == 0 && S_ISREG(sb.st_mode));
    require_all_valid("entries others may write");
}

/* ---------------------------------------------------------------- another user's files */

/* A uid not ours that files can be given (root can; in a user namespace
 * only mapped ones), or -1. */
static long other_uid(void)
{
    static const long uids[] = {4242, 65534, 1};
    char probe[512];
    snprintf(probe, sizeof probe, "%s/chown-probe", root);
    fclose(fopen(probe, "w"));
    long found = -1;
    for (size_t i = 0; i < sizeof uids / sizeof uids[0] && found < 0; i++)
        if ((uid_t)uids[i] != geteuid() && chown(probe, (uid_t)uids[i], (gid_t)-1) == 0)
            found = uids[i];
    unlink(probe);
    return found;
}

/* A directory of another user's: not used, its valid entries not loaded.
 * Without the right to give files away, a directory that is not ours
 * already ("/", as a rule) stands in for it. */
static void test_foreign_dir(long other)
{
    char dir[512], owner[64];
    if (other < 0) {
        struct stat sb;
        if (stat("/", &sb) != 0 || sb.st_uid == geteuid())
            return;
        setenv("PTXGEN_CACHE_DIR", "/", 1);
        REQUIRE_INT_EQ(cache_lines(warm_all), 1);
        snprintf(owner, sizeof owner, "owned by uid %lu, not by uid %lu",
                 (unsigned long)sb.st_uid, (unsigned long)geteuid());
        REQUIRE_CONTAINS(logged_line, owner);
        REQUIRE_INT_EQ(seen_links, NK);
        REQUIRE_INT_EQ(seen.disk_hits + seen.disk_misses + seen.disk_writes, 0);
        return;
    }
    use_dir("foreign-dir", dir, sizeof dir);
    warm_all();
    REQUIRE_INT_EQ(seen.disk_writes, NK);
    REQUIRE_INT_EQ(chown(dir, (uid_t)other, (gid_t)-1), 0);
    REQUIRE_INT_EQ(cache_lines(warm_all), 1);
    snprintf(owner, sizeof owner, "owned by uid %ld, not by uid %lu", other,
             (unsigned long)geteuid());
    REQUIRE_CONTAINS(logged_line, owner);
    require_unused(dir);

    /* Reached through a link of another user's (planted in a sticky
     * /tmp, say) to a directory of ours: not used either; through a link
     * of ours, used. */
    REQUIRE_INT_EQ(chown(dir, geteuid(), (gid_t)-1), 0);
    char link[600];
    snprintf(link, sizeof link, "%s/foreign-link", root);
    REQUIRE_INT_EQ(symlink(dir, link), 0);
    setenv("PTXGEN_CACHE_DIR", link, 1);
    REQUIRE_INT_EQ(cache_lines(warm_all), 0);
    REQUIRE_INT_EQ(seen.disk_hits, NK);
    REQUIRE_INT_EQ(lchown(link, (uid_t)other, (gid_t)-1), 0);
    REQUIRE_INT_EQ(cache_lines(warm_all), 1);
    snprintf(owner, sizeof owner, "a link owned by uid %ld", other);
    REQUIRE_CONTAINS(logged_line, owner);
    REQUIRE_INT_EQ(seen_links, NK);
    REQUIRE_INT_EQ(seen.disk_hits, 0);
}

/* In a directory of ours, an entry of another user's (its key and
 * checksum recomputed: neither is secret) is not loaded: compiled and
 * replaced, one line for any number of them. */
static void test_foreign_entries(long other)
{
    char dir[512], names[16][128], owner[64];
    use_dir("foreign-entries", dir, sizeof dir);
    warm_all();
    REQUIRE_INT_EQ(list_dir(dir, names, 16, NULL), NK);
    REQUIRE_INT_EQ(chown(names[0], (uid_t)other, (gid_t)-1), 0);
    REQUIRE_INT_EQ(chown(names[1], (uid_t)other, (gid_t)-1), 0);
    REQUIRE_INT_EQ(cache_lines(warm_all), 1);
    snprintf(owner, sizeof owner, "is owned by uid %ld, not by uid %lu", other,
             (unsigned long)geteuid());
    REQUIRE_CONTAINS(logged_line, owner);
    REQUIRE_CONTAINS(logged_line, "not loading it");
    REQUIRE_INT_EQ(seen_links, 2);
    REQUIRE_INT_EQ(seen.disk_hits, NK - 2);
    REQUIRE_INT_EQ(seen.disk_rejected, 2);
    REQUIRE_INT_EQ(seen.disk_writes, 2);
    struct stat sb;
    REQUIRE(stat(names[0], &sb) == 0 && sb.st_uid == geteuid());
    REQUIRE(stat(names[1], &sb) == 0 && sb.st_uid == geteuid());
    require_all_valid("entries of another user's");
}

/* --owner: the checks that need files of another user's. Exit 77 when no
 * file can be given away (not root), after the part that runs anyway. */
static int owner_tests(void)
{
    long other = other_uid();
    test_foreign_dir(other);
    if (other < 0) {
        fprintf(stderr, "cannot give a file to another uid (not root): the entries of "
                        "another user's are not tested\n");
        return test_failures_ ? 1 : 77;
    }
    test_foreign_entries(other);
    return test_failures_ ? 1 : 0;
}

/* ---------------------------------------------------------------- the parallel pre-warm */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void test_parallel(void)
{
    char dir[512];
    setenv("PTXGEN_CACHE", "0", 1); /* every module JITs */
    setenv("FAKECUDA_JIT_US", "40000", 1);
    pgrt_ctx *ctx = open_ctx();
    REQUIRE_INT_EQ(pgrt_ctx_set_jit_threads(ctx, 6), 6);
    fk.reset();
    double t0 = now_ms();
    REQUIRE_INT_EQ(pgrt_prewarm(ctx, kernels, NK), 0);
    double par = now_ms() - t0;
    int overlap = fk.max_concurrent_jits();
    pgrt_ctx_destroy(&ctx);
    ctx = open_ctx();
    REQUIRE_INT_EQ(pgrt_ctx_set_jit_threads(ctx, 1), 1);
    fk.reset();
    t0 = now_ms();
    REQUIRE_INT_EQ(pgrt_prewarm(ctx, kernels, NK), 0);
    double ser = now_ms() - t0;
    pgrt_ctx_destroy(&ctx);
    fprintf(stderr, "pre-warm of %zu modules of 40 ms: serial %.0f ms, 6 threads %.0f ms, "
            "%d JITs at once\n", NK, ser, par, overlap);
    /* Times are only printed (a loaded machine or valgrind stretches
     * them); the overlap is what the pool is for. */
    REQUIRE(overlap >= 2);
    REQUIRE_INT_EQ(fk.max_concurrent_jits(), 1);
    REQUIRE(ser >= 40.0 * NK);
    unsetenv("FAKECUDA_JIT_US");

    /* The environment picks the count; the setter goes back to it. */
    setenv("PTXGEN_JIT_THREADS", "3", 1);
    ctx = open_ctx();
    REQUIRE_INT_EQ(pgrt_ctx_set_jit_threads(ctx, 0), 3);
    REQUIRE_INT_EQ(pgrt_ctx_set_jit_threads(ctx, -1), PGRT_EINVAL);
    unsetenv("PTXGEN_JIT_THREADS");

    /* Bad entries fail alone; the others load. */
    pgrt_warm mixed[] = {{"residual_add", NULL},
                         {"no_such_kernel", NULL},
                         {"silu_backward", NULL},
                         {NULL, NULL},
                         {"adamw_step_dev", NULL}};
    int rcs[5] = {1, 1, 1, 1, 1};
    pgrt_cache_stats st;
    REQUIRE_INT_EQ(pgrt_prewarm_each(ctx, mixed, 5, rcs), PGRT_ENOTFOUND);
    REQUIRE_CONTAINS(pgrt_last_message(), "unknown kernel \"no_such_kernel\"");
    REQUIRE_CONTAINS(pgrt_last_message(), "and 1 more of the 5 modules failed");
    REQUIRE_INT_EQ(rcs[0], 0);
    REQUIRE_INT_EQ(rcs[1], PGRT_ENOTFOUND);
    REQUIRE_INT_EQ(rcs[2], 0);
    REQUIRE_INT_EQ(rcs[3], PGRT_EINVAL);
    REQUIRE_INT_EQ(rcs[4], 0);
    REQUIRE_INT_EQ(pgrt_cache_stats_get(ctx, &st), 0);
    REQUIRE_INT_EQ(st.modules, 3);
    pgrt_ctx_destroy(&ctx);
    setenv("PTXGEN_CACHE", "1", 1);
    (void)dir;
}

/* ---------------------------------------------------------------- the model's report */

static void test_model_report(void)
{
    static const pgrt_model_config model = {
        .hidden = 1536, .intermediate = 8960, .heads = 12, .kv_heads = 2, .head_dim = 128,
    };
    static const pgrt_prewarm_step step = {.max_seq_len = 512, .lora_rank = 16};
    char dir[512];
    use_dir("model", dir, sizeof dir);
    pgrt_prewarm_report r;
    pgrt_ctx *ctx = open_ctx();
    pgrt_ctx_set_jit_threads(ctx, 4);
    REQUIRE_INT_EQ(pgrt_prewarm_model(ctx, &model, &step, &r), 0);
    pgrt_ctx_destroy(&ctx);
    REQUIRE(r.modules > 10);
    REQUIRE_INT_EQ(r.loaded, r.modules);
    REQUIRE_INT_EQ(r.disk_hits, 0);
    REQUIRE_INT_EQ(r.failed, 0);
    REQUIRE_INT_EQ(r.threads, 4);
    REQUIRE(r.cubin_bytes > 0);
    size_t bytes = r.cubin_bytes;

    ctx = open_ctx();
    fk.reset();
    REQUIRE_INT_EQ(pgrt_prewarm_model(ctx, &model, &step, &r), 0);
    pgrt_ctx_destroy(&ctx);
    REQUIRE_INT_EQ(fk.links(), 0);
    REQUIRE_INT_EQ(r.loaded, r.modules);
    REQUIRE_INT_EQ(r.disk_hits, r.modules);
    REQUIRE(r.jit_ms == 0.0);
    REQUIRE_INT_EQ(r.cubin_bytes, bytes);
    for (size_t i = 0; i < r.modules; i++)
        REQUIRE(r.list[i].from_disk && r.list[i].rc == 0 && r.list[i].cubin_bytes > 0);
}

/* ---------------------------------------------------------------- children */

static int child(const char *mode)
{
    if (!strcmp(mode, "warm"))
        return warm(kernels, NK, NULL) ? 1 : 0;
    if (!strcmp(mode, "full")) {
        /* Room for the logged line, not for any entry (the smallest is
         * over 700 bytes): every write stops part-way. */
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {512, 512};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
            return 2;
        pgrt_cache_stats st;
        if (warm(kernels, NK, &st) || st.disk_writes != 0 || fk.links() != (int)NK)
            return 3;
        return 0;
    }
    return 2;
}

static void rm_rf(const char *path)
{
    pid_t pid = fork();
    if (pid == 0) {
        execlp("rm", "rm", "-rf", path, (char *)NULL);
        _exit(127);
    }
    (void)wait_child(pid);
}

int main(int argc, char **argv)
{
    self = argv[0];
    if (argc == 4 && !strcmp(argv[2], "--child")) {
        /* with the switches the parent set (FAKECUDA_JIT_US) */
        fake_fixture_bind(&fk, argc, argv, RTLD_NOW | RTLD_GLOBAL, "FAKE_LIBCUDA");
        setenv("PGRT_LIBCUBLAS", "/nonexistent/libcublas.so", 1);
        return child(argv[3]);
    }
    fake_fixture_open(&fk, argc, argv, RTLD_NOW | RTLD_GLOBAL, "FAKE_LIBCUDA");
    setenv("PGRT_LIBCUBLAS", "/nonexistent/libcublas.so", 1);

    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/pgrt-cubin-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    setenv("PTXGEN_CACHE", "1", 1);
    unsetenv("PTXGEN_CACHE_MAX_MB");
    unsetenv("PTXGEN_JIT_THREADS");
    if (argc == 3 && !strcmp(argv[2], "--owner")) {
        int rc = owner_tests();
        fprintf(stderr, "%d checks, %d failures\n", test_checks_, test_failures_);
        rm_rf(root);
        return rc;
    }
    test_hit_miss();
    test_jit_error();
    test_damaged();
    test_concurrent_threads();
    test_concurrent_processes();
    test_eviction();
    test_sweep_names();
    test_unwritable();
    test_off();
    test_private_dir();
    test_shared_dir();
    test_shared_entries();
    test_parallel();
    test_model_report();
    rm_rf(root);
    TEST_DONE();
}
