/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-train --gpus: the supervisor (tools/train_launch.c), linked in
 * directly, with /bin/sh ranks whose scripts write what they see into a
 * scratch directory ($D):
 *
 *   - each rank's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
 *     (one free port for all) and NCCL_NVLS_ENABLE=0 over the parent's
 *     1 (and a stale RANK, MASTER_PORT), the rest of the environment
 *     passed on; a given address and port as given; this program re-run
 *     as a rank when exe is NULL;
 *   - all ranks 0: 0 and nothing said;
 *   - rank 1 exits 3: 3 at once, one line, every other rank sent SIGUSR1
 *     (a rank failed) once (they record it) and their children gone;
 *   - a rank killed by a signal: 128 + it and "was killed by SIGKILL";
 *   - a rank that ignores SIGUSR1: SIGKILLed grace_s (0.3 s) later; a
 *     stopped rank: continued, so SIGUSR1 ends it at once;
 *   - Ctrl-C as a terminal sends it (SIGINT to the launcher's whole
 *     process group, from a helper in it): each rank gets it exactly once,
 *     exits 130, the launcher returns 130, and a rank's child that ignores
 *     SIGINT goes with its rank; a second SIGINT kills the ranks at once,
 *     well inside the 10 s default grace; SIGTERM to the launcher's pid
 *     alone: forwarded once, 143; the launcher killed by SIGKILL: the
 *     ranks die with it;
 *   - a program that does not exist: 127 and the reason; a failed fork
 *     (fork wrapped at link time): 1 and the started ranks stopped; bad
 *     options and an address with no port: one line, 2 or 1.
 *
 * Every wait is bounded: the scripts give up after seconds, a watchdog
 * (alarm) ends the test, and the ranks die with it (PR_SET_PDEATHSIG).
 */
#include "test.h"
#include "train_launch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

/* The scratch directory of the case that runs ($D to the ranks). */
static char base[4096], dir[4200];
static const char *self_argv0;
static const char *case_name = "";

/* fork, as train_launch sees it (-Wl,--wrap=fork): fails with EAGAIN
 * once fork_fail_after calls have passed (-1: never). */
static int fork_fail_after = -1;
pid_t __real_fork(void);
pid_t __wrap_fork(void);
pid_t __wrap_fork(void)
{
    if (fork_fail_after == 0) {
        fork_fail_after = -1;
        errno = EAGAIN;
        return -1;
    }
    if (fork_fail_after > 0)
        fork_fail_after--;
    return __real_fork();
}

static void watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "test_train_launch: a case ran past its time limit: ";
    ssize_t w = write(2, msg, sizeof msg - 1);
    w = write(2, case_name, strlen(case_name));
    w = write(2, "\n", 1);
    (void)w;
    _exit(1);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void nap(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void remove_dir(const char *d)
{
    DIR *dp = opendir(d);
    if (!dp)
        return;
    struct dirent *e;
    char p[8400];
    while ((e = readdir(dp)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", d, e->d_name);
            unlink(p);
        }
    closedir(dp);
    rmdir(d);
}

/* A fresh, empty $D for the case. */
static void begin_case(const char *name)
{
    case_name = name;
    static int n;
    snprintf(dir, sizeof dir, "%s/case%d", base, n++);
    REQUIRE(mkdir(dir, 0700) == 0);
    setenv("D", dir, 1);
    alarm(30);
}

static void end_case(void)
{
    alarm(0);
    remove_dir(dir);
}

/* The file $D/name whole (NUL-terminated, into buf), or "" when missing. */
static const char *slurp(const char *name, char *buf, size_t cap)
{
    char p[8400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    buf[0] = '\0';
    FILE *f = fopen(p, "r");
    if (!f)
        return buf;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int count_prefix(const char *prefix)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return 0;
    int n = 0;
    struct dirent *e;
    char p[8400];
    struct stat st;
    while ((e = readdir(dp))) {
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0 && stat(p, &st) == 0 &&
             st.st_size > 0;
    }
    closedir(dp);
    return n;
}

/* Waits (up to 10 s) for n files $D/prefix*, each written (the ranks write
 * them with one write); true when they came. */
static bool wait_files(const char *prefix, int n)
{
    for (int i = 0; i < 1000; i++) {
        if (count_prefix(prefix) >= n)
            return true;
        nap(0.01);
    }
    return false;
}

/* The value of name in a file of `env` output, into out ("" when missing);
 * the number of times name is set. */
static int env_value(const char *env, const char *name, char *out, size_t cap)
{
    int times = 0;
    size_t n = strlen(name);
    out[0] = '\0';
    for (const char *l = env; *l;) {
        const char *nl = strchr(l, '\n');
        size_t len = nl ? (size_t)(nl - l) : strlen(l);
        if (len > n && strncmp(l, name, n) == 0 && l[n] == '=') {
            times++;
            snprintf(out, cap, "%.*s", (int)(len - n - 1), l + n + 1);
        }
        l += len + (nl != NULL);
    }
    return times;
}

/* The launcher's lines in text (the shell's own, "Terminated" for a job
 * killed by a signal, are not counted). */
static int launcher_lines(const char *text)
{
    int n = 0;
    for (const char *l = text; *l;) {
        n += strncmp(l, "ptxgen-train: ", 14) == 0;
        const char *nl = strchr(l, '\n');
        l = nl ? nl + 1 : l + strlen(l);
    }
    return n;
}

/* Has process p exited (gone, or a zombie waiting for its new parent)? Up
 * to 3 s. */
static bool pid_gone(pid_t p)
{
    char path[64], stat[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)p);
    for (int i = 0; i < 300; i++) {
        if (kill(p, 0) != 0 && errno == ESRCH)
            return true;
        FILE *f = fopen(path, "r");
        if (!f)
            return true;
        size_t n = fread(stat, 1, sizeof stat - 1, f);
        fclose(f);
        stat[n] = '\0';
        const char *rp = strrchr(stat, ')');
        if (rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'))
            return true;
        nap(0.01);
    }
    return false;
}

/* The children the ranks' scripts recorded in $D/child.<rank> are gone. */
static void require_children_gone(int gpus)
{
    for (int r = 0; r < gpus; r++) {
        char name[32], text[64];
        snprintf(name, sizeof name, "child.%d", r);
        int pid = atoi(slurp(name, text, sizeof text));
        REQUIRE(pid > 1);
        if (pid > 1 && !pid_gone((pid_t)pid)) {
            TEST_FAIL_("%s: rank %d's child %d is still running", case_name, r, pid);
            kill((pid_t)pid, SIGKILL);
        }
    }
}

/* train_launch with stderr (the launcher's and the ranks') into err; the
 * seconds it took into secs. */
static int launch(const train_launch_opts *o, char *err, size_t cap, double *secs)
{
    char p[8400];
    snprintf(p, sizeof p, "%s/stderr.txt", base);
    fflush(stderr);
    int keep = dup(2);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    REQUIRE(keep >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    double t0 = now_s();
    int rc = train_launch(o);
    if (secs)
        *secs = now_s() - t0;
    fflush(stderr);
    dup2(keep, 2);
    close(keep);
    err[0] = '\0';
    FILE *f = fopen(p, "r");
    if (f) {
        size_t n = fread(err, 1, cap - 1, f);
        err[n] = '\0';
        fclose(f);
    }
    return rc;
}

/* ready N: wait (up to 10 s) for N ranks' $D/ready.<rank>. */
#define PRELUDE                                                                           \
    "ready() { n=0; while [ \"$(ls \"$D\" | grep -c '^ready\\.')\" -lt \"$1\" ] && "     \
    "[ $n -lt 400 ]; do sleep 0.025; n=$((n+1)); done; }\n"

static char script_buf[4096];

/* train_launch over gpus ranks of sh -c PRELUDE script. */
static int launch_sh(int gpus, double grace, const char *script, char *err, size_t cap,
                     double *secs)
{
    snprintf(script_buf, sizeof script_buf, "%s%s", PRELUDE, script);
    char sh[] = "sh", dash_c[] = "-c";
    char *const argv[] = {sh, dash_c, script_buf, NULL};
    train_launch_opts o = {.gpus = gpus, .exe = "/bin/sh", .argv = argv, .grace_s = grace};
    return launch(&o, err, cap, secs);
}

static char err[1 << 16];

static void test_environment(void)
{
    begin_case("environment");
    setenv("NCCL_NVLS_ENABLE", "1", 1);
    setenv("RANK", "99", 1);
    setenv("MASTER_PORT", "1", 1);
    setenv("PTXGEN_LAUNCH_KEEP", "kept", 1);
    double secs = 0;
    int rc = launch_sh(4, 0, "env > \"$D/env.$RANK\"", err, sizeof err, &secs);
    REQUIRE_INT_EQ(rc, 0);
    REQUIRE_STR_EQ(err, "");
    char port0[32] = "";
    for (int r = 0; r < 4; r++) {
        char name[32], text[1 << 15], v[4096], want[32];
        snprintf(name, sizeof name, "env.%d", r);
        slurp(name, text, sizeof text);
        snprintf(want, sizeof want, "%d", r);
        REQUIRE_INT_EQ(env_value(text, "RANK", v, sizeof v), 1);
        REQUIRE_STR_EQ(v, want);
        REQUIRE_INT_EQ(env_value(text, "LOCAL_RANK", v, sizeof v), 1);
        REQUIRE_STR_EQ(v, want);
        REQUIRE_INT_EQ(env_value(text, "WORLD_SIZE", v, sizeof v), 1);
        REQUIRE_STR_EQ(v, "4");
        REQUIRE_INT_EQ(env_value(text, "MASTER_ADDR", v, sizeof v), 1);
        REQUIRE_STR_EQ(v, "127.0.0.1");
        REQUIRE_INT_EQ(env_value(text, "NCCL_NVLS_ENABLE", v, sizeof v), 1);
        REQUIRE_STR_EQ(v, "0");
        REQUIRE_INT_EQ(env_value(text, "MASTER_PORT", v, sizeof v), 1);
        int port = atoi(v);
        REQUIRE(port > 1 && port <= 65535);
        if (r == 0)
            snprintf(port0, sizeof port0, "%.31s", v);
        else
            REQUIRE_STR_EQ(v, port0);
        env_value(text, "PTXGEN_LAUNCH_KEEP", v, sizeof v);
        REQUIRE_STR_EQ(v, "kept");
        env_value(text, "D", v, sizeof v);
        REQUIRE_STR_EQ(v, dir);
    }
    /* the launcher's own environment is left as it was */
    REQUIRE_STR_EQ(getenv("NCCL_NVLS_ENABLE"), "1");
    REQUIRE_STR_EQ(getenv("RANK"), "99");
    unsetenv("RANK");
    unsetenv("MASTER_PORT");
    unsetenv("PTXGEN_LAUNCH_KEEP");
    end_case();

    /* an address and a port as given: no probe, no lookup */
    begin_case("environment, address and port given");
    char sh[] = "sh", dash_c[] = "-c", script[] = "env > \"$D/env.$RANK\"";
    char *const argv[] = {sh, dash_c, script, NULL};
    train_launch_opts o = {.gpus = 2, .exe = "/bin/sh", .argv = argv,
                           .master_addr = "node7.example", .master_port = 29517};
    REQUIRE_INT_EQ(launch(&o, err, sizeof err, NULL), 0);
    for (int r = 0; r < 2; r++) {
        char name[32], text[1 << 15], v[256];
        snprintf(name, sizeof name, "env.%d", r);
        slurp(name, text, sizeof text);
        env_value(text, "MASTER_ADDR", v, sizeof v);
        REQUIRE_STR_EQ(v, "node7.example");
        env_value(text, "MASTER_PORT", v, sizeof v);
        REQUIRE_STR_EQ(v, "29517");
        env_value(text, "NCCL_NVLS_ENABLE", v, sizeof v);
        REQUIRE_STR_EQ(v, "0");
    }
    end_case();
    unsetenv("NCCL_NVLS_ENABLE");
}

/* exe NULL: this program again (main's --launch-rank) */
static void test_self(void)
{
    begin_case("this program as the ranks");
    char a0[4096], flag[] = "--launch-rank";
    snprintf(a0, sizeof a0, "%s", self_argv0);
    char *const argv[] = {a0, flag, dir, NULL};
    train_launch_opts o = {.gpus = 3, .argv = argv};
    REQUIRE_INT_EQ(launch(&o, err, sizeof err, NULL), 0);
    REQUIRE_STR_EQ(err, "");
    for (int r = 0; r < 3; r++) {
        char name[32], text[256], want[128];
        snprintf(name, sizeof name, "self.%d", r);
        slurp(name, text, sizeof text);
        snprintf(want, sizeof want, "%d %d 3 127.0.0.1 0 0\n", r, r);
        /* the port is checked apart: it is the same for all and not 0 */
        char *sp = strrchr(text, ' ');
        int port = sp ? atoi(sp + 1) : 0;
        REQUIRE(port > 0 && port <= 65535);
        if (sp)
            snprintf(sp, sizeof text - (size_t)(sp - text), " 0\n");
        REQUIRE_STR_EQ(text, want);
    }
    end_case();
}

static int rank_main(const char *d)
{
    const char *v[6];
    const char *names[6] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR",
                            "NCCL_NVLS_ENABLE", "MASTER_PORT"};
    for (int i = 0; i < 6; i++)
        if (!(v[i] = getenv(names[i])))
            return 9;
    char p[8400];
    snprintf(p, sizeof p, "%s/self.%s", d, v[0]);
    FILE *f = fopen(p, "w");
    if (!f)
        return 8;
    fprintf(f, "%s %s %s %s %s %s\n", v[0], v[1], v[2], v[3], v[4], v[5]);
    return fclose(f) ? 7 : 0;
}

static void test_failure(void)
{
    begin_case("rank 1 exits 3");
    double secs = 0;
    int rc = launch_sh(4, 0,
                       "trap 'echo USR1 >> \"$D/term.$RANK\"; exit 1' USR1\n"
                       "if [ \"$RANK\" = 1 ]; then ready 3; exit 3; fi\n"
                       "sleep 60 & echo $! > \"$D/child.$RANK\"\n"
                       "echo ok > \"$D/ready.$RANK\"; wait $!\n",
                       err, sizeof err, &secs);
    REQUIRE_INT_EQ(rc, 3);
    REQUIRE(secs < 4);
    REQUIRE_CONTAINS(err, "ptxgen-train: rank 1 exited with status 3; stopping the other 3 ranks\n");
    REQUIRE_INT_EQ(launcher_lines(err), 1);
    for (int r = 0; r < 4; r++) {
        if (r == 1)
            continue;
        char name[32], text[256];
        snprintf(name, sizeof name, "term.%d", r);
        REQUIRE_STR_EQ(slurp(name, text, sizeof text), "USR1\n");
        snprintf(name, sizeof name, "child.%d", r);
        int pid = atoi(slurp(name, text, sizeof text));
        REQUIRE(pid > 1 && pid_gone((pid_t)pid));
    }
    end_case();

    begin_case("a rank killed by a signal");
    rc = launch_sh(2, 0,
                   "if [ \"$RANK\" = 1 ]; then ready 1; kill -KILL $$; fi\n"
                   "echo ok > \"$D/ready.$RANK\"; sleep 60 & wait $!\n",
                   err, sizeof err, &secs);
    REQUIRE_INT_EQ(rc, 128 + SIGKILL);
    REQUIRE(secs < 4);
    REQUIRE_CONTAINS(err, "ptxgen-train: rank 1 was killed by SIGKILL; stopping the other rank\n");
    end_case();

    begin_case("a rank that ignores SIGUSR1");
    rc = launch_sh(2, 0.3,
                   "if [ \"$RANK\" = 1 ]; then ready 1; exit 1; fi\n"
                   "trap '' USR1; echo ok > \"$D/ready.$RANK\"; sleep 60\n",
                   err, sizeof err, &secs);
    REQUIRE_INT_EQ(rc, 1);
    REQUIRE(secs >= 0.3);
    REQUIRE(secs < 2.5);
    REQUIRE_CONTAINS(err, "ptxgen-train: rank 1 exited with status 1; stopping the other rank\n");
    REQUIRE_CONTAINS(err, "ptxgen-train: 1 rank still running 0.3 s after SIGUSR1: sending SIGKILL\n");
    end_case();

    /* SIGCONT follows the SIGUSR1: a stopped rank goes at once, not after
     * the 10 s default grace */
    begin_case("a stopped rank");
    rc = launch_sh(2, 0,
                   "if [ \"$RANK\" = 1 ]; then ready 1; sleep 0.2; exit 1; fi\n"
                   "echo ok > \"$D/ready.$RANK\"; kill -STOP $$; sleep 60\n",
                   err, sizeof err, &secs);
    REQUIRE_INT_EQ(rc, 1);
    REQUIRE(secs < 5);
    end_case();

    begin_case("all ranks exit 0 but one late");
    rc = launch_sh(3, 0, "[ \"$RANK\" = 2 ] && sleep 0.2; exit 0\n", err, sizeof err, &secs);
    REQUIRE_INT_EQ(rc, 0);
    REQUIRE_STR_EQ(err, "");
    end_case();
}

static void die_with_parent(void)
{
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
}

/*
 * Ctrl-C as a terminal sends it: a driver process leads a process group
 * of its own (the terminal's foreground group), runs train_launch, and a
 * helper in the same group that ignores SIGINT sends SIGINT to the whole
 * group once the ranks are ready, and again (twice) once each rank has
 * recorded the first. The driver's status is train_launch's.
 */
static int interrupt(int gpus, const char *script, int times, char *out, size_t cap,
                     double *secs)
{
    fflush(NULL);
    pid_t driver = fork();
    REQUIRE(driver >= 0);
    if (driver < 0)
        return -1;
    if (driver == 0) {
        setpgid(0, 0);
        /* out of the test's process group, a killed test (meson's timeout)
         * would not take it along */
        die_with_parent();
        pid_t helper = fork();
        if (helper == 0) {
            die_with_parent();
            signal(SIGINT, SIG_IGN);
            if (!wait_files("ready.", gpus))
                _exit(1);
            kill(-getpgrp(), SIGINT);
            if (times > 1) {
                if (!wait_files("int.", gpus))
                    _exit(1);
                kill(-getpgrp(), SIGINT);
            }
            _exit(0);
        }
        double t = 0;
        int rc = launch_sh(gpus, 0, script, out, cap, &t);
        int hs = 0;
        waitpid(helper, &hs, 0);
        if (!WIFEXITED(hs) || WEXITSTATUS(hs) != 0)
            rc = 200; /* the helper gave up waiting */
        /* the time, to the parent, through a file */
        char p[8400];
        snprintf(p, sizeof p, "%s/secs", dir);
        FILE *f = fopen(p, "w");
        if (f) {
            fprintf(f, "%.3f\n", t);
            fclose(f);
        }
        fflush(NULL);
        _exit(rc);
    }
    int st = 0;
    pid_t w = 0;
    for (int i = 0; i < 2000 && (w = waitpid(driver, &st, WNOHANG)) == 0; i++)
        nap(0.01);
    if (w != driver) {
        TEST_FAIL_("%s: the driver did not finish in 20 s", case_name);
        kill(-driver, SIGKILL);
        waitpid(driver, &st, 0);
        return -1;
    }
    char text[64], p[8400];
    snprintf(p, sizeof p, "%s/stderr.txt", base);
    FILE *f = fopen(p, "r");
    out[0] = '\0';
    if (f) {
        size_t n = fread(out, 1, cap - 1, f);
        out[n] = '\0';
        fclose(f);
    }
    *secs = atof(slurp("secs", text, sizeof text));
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_signals(void)
{
    begin_case("Ctrl-C");
    double secs = 0;
    int rc = interrupt(3,
                       "trap 'echo INT >> \"$D/int.$RANK\"; exit 130' INT\n"
                       "sleep 60 & echo $! > \"$D/child.$RANK\"\n"
                       "echo ok > \"$D/ready.$RANK\"; wait $!\n",
                       1, err, sizeof err, &secs);
    REQUIRE_INT_EQ(rc, 130);
    REQUIRE(secs < 5);
    REQUIRE_CONTAINS(err, "ptxgen-train: SIGINT: passing it on to the 3 running ranks");
    REQUIRE_INT_EQ(launcher_lines(err), 1);
    for (int r = 0; r < 3; r++) {
        char name[32], text[256];
        snprintf(name, sizeof name, "int.%d", r);
        REQUIRE_STR_EQ(slurp(name, text, sizeof text), "INT\n");
    }
    /* a background child of sh ignores SIGINT: it goes with its rank */
    require_children_gone(3);
    end_case();

    begin_case("Ctrl-C twice");
    rc = interrupt(2,
                   "trap 'echo INT >> \"$D/int.$RANK\"' INT\n"
                   "sleep 60 & echo $! > \"$D/child.$RANK\"\n"
                   "echo ok > \"$D/ready.$RANK\"\n"
                   "while kill -0 $! 2>/dev/null; do wait $!; done\n",
                   2, err, sizeof err, &secs);
    REQUIRE_INT_EQ(rc, 128 + SIGKILL);
    REQUIRE(secs < 5); /* the grace is 10 s */
    REQUIRE_CONTAINS(err, "ptxgen-train: SIGINT: passing it on to the 2 running ranks");
    REQUIRE_CONTAINS(err, "ptxgen-train: SIGINT while stopping: killing the 2 running ranks\n");
    for (int r = 0; r < 2; r++) {
        char name[32], text[256];
        snprintf(name, sizeof name, "int.%d", r);
        REQUIRE_STR_EQ(slurp(name, text, sizeof text), "INT\n");
    }
    require_children_gone(2);
    end_case();

    /* SIGTERM to the launcher's pid alone, here in this process */
    begin_case("SIGTERM to the launcher");
    fflush(NULL);
    pid_t helper = fork();
    REQUIRE(helper >= 0);
    if (helper == 0) {
        if (!wait_files("ready.", 2))
            _exit(1);
        kill(getppid(), SIGTERM);
        _exit(0);
    }
    rc = launch_sh(2, 0,
                   "trap 'echo TERM >> \"$D/term.$RANK\"; exit 143' TERM\n"
                   "echo ok > \"$D/ready.$RANK\"; sleep 60 & wait $!\n",
                   err, sizeof err, &secs);
    int hs = -1;
    for (int i = 0; i < 1000 && waitpid(helper, &hs, WNOHANG) == 0; i++)
        nap(0.01);
    REQUIRE(WIFEXITED(hs) && WEXITSTATUS(hs) == 0);
    REQUIRE_INT_EQ(rc, 143);
    REQUIRE(secs < 5);
    REQUIRE_CONTAINS(err, "ptxgen-train: SIGTERM: passing it on to the 2 running ranks");
    for (int r = 0; r < 2; r++) {
        char name[32], text[256];
        snprintf(name, sizeof name, "term.%d", r);
        REQUIRE_STR_EQ(slurp(name, text, sizeof text), "TERM\n");
    }
    end_case();
}

/* The launcher killed by SIGKILL (nothing to forward): its ranks go too. */
static void test_launcher_killed(void)
{
    begin_case("the launcher killed by SIGKILL");
    fflush(NULL);
    pid_t driver = fork();
    REQUIRE(driver >= 0);
    if (driver == 0) {
        die_with_parent();
        launch_sh(2, 0,
                  "echo $$ > \"$D/child.$RANK\"; echo ok > \"$D/ready.$RANK\"; exec sleep 60\n",
                  err, sizeof err, NULL);
        _exit(0);
    }
    REQUIRE(wait_files("ready.", 2));
    kill(driver, SIGKILL);
    int st = 0;
    waitpid(driver, &st, 0);
    REQUIRE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    require_children_gone(2);
    end_case();
}

static void test_errors(void)
{
    begin_case("a program that does not exist");
    char a0[] = "ptxgen-train";
    char *const argv[] = {a0, NULL};
    train_launch_opts o = {.gpus = 2, .exe = "/nonexistent/ptxgen-train", .argv = argv};
    REQUIRE_INT_EQ(launch(&o, err, sizeof err, NULL), 127);
    REQUIRE_CONTAINS(err, "cannot run /nonexistent/ptxgen-train: No such file or directory\n");
    REQUIRE_CONTAINS(err, "exited with status 127");
    end_case();

    begin_case("fork fails at the third rank");
    fork_fail_after = 2;
    double secs = 0;
    int rc = launch_sh(4, 0, "sleep 60 & wait $!\n", err, sizeof err, &secs);
    fork_fail_after = -1;
    REQUIRE_INT_EQ(rc, 1);
    REQUIRE(secs < 4);
    REQUIRE_CONTAINS(err, "ptxgen-train: rank 2: fork: ");
    REQUIRE_CONTAINS(err, "; stopping the 2 started ranks\n");
    end_case();

    begin_case("bad options");
    struct { train_launch_opts o; int rc; const char *msg; } cases[] = {
        {{.gpus = 1, .argv = argv}, 2, "--gpus 1 is out of range (2 to 4096)"},
        {{.gpus = 0, .argv = argv}, 2, "--gpus 0 is out of range"},
        {{.gpus = 5000, .argv = argv}, 2, "--gpus 5000 is out of range"},
        {{.gpus = 2}, 2, "no program arguments"},
        {{.gpus = 2, .argv = argv, .grace_s = -1}, 2, "grace of -1 s is out of range"},
        {{.gpus = 2, .argv = argv, .master_port = 70000}, 2, "MASTER_PORT 70000 is out of range"},
        {{.gpus = 2, .argv = argv, .master_addr = ""}, 2, "MASTER_ADDR is empty"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        REQUIRE_INT_EQ(launch(&cases[i].o, err, sizeof err, NULL), cases[i].rc);
        REQUIRE_CONTAINS(err, cases[i].msg);
        REQUIRE_INT_EQ(launcher_lines(err), 1);
    }
    REQUIRE_INT_EQ(launch(NULL, err, sizeof err, NULL), 2);

    /* an address of no interface here (TEST-NET-1): nothing to bind, no
     * lookup; unless this host binds any address */
    char nonlocal[8] = "0";
    FILE *f = fopen("/proc/sys/net/ipv4/ip_nonlocal_bind", "r");
    if (f) {
        if (!fgets(nonlocal, sizeof nonlocal, f))
            nonlocal[0] = '0';
        fclose(f);
    }
    if (nonlocal[0] == '0') {
        train_launch_opts na = {.gpus = 2, .argv = argv, .master_addr = "192.0.2.1"};
        REQUIRE_INT_EQ(launch(&na, err, sizeof err, NULL), 1);
        REQUIRE_CONTAINS(err, "ptxgen-train: no free port on 192.0.2.1: ");
        REQUIRE_INT_EQ(launcher_lines(err), 1);
    }
    end_case();
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--launch-rank") == 0)
        return rank_main(argv[2]);
    self_argv0 = argv[0];
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = watchdog;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    const char *t = getenv("TMPDIR");
    snprintf(base, sizeof base, "%s/ptxgen-launch-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        return 1;
    }
    test_environment();
    test_self();
    test_failure();
    test_signals();
    test_launcher_killed();
    test_errors();
    char p[8400];
    snprintf(p, sizeof p, "%s/stderr.txt", base);
    unlink(p);
    rmdir(base);
    TEST_DONE();
}
