/* SPDX-License-Identifier: MIT */
/* ptxgen-train --gpus N: the supervisor (train_launch.h says what and why). */
#include "train_launch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

/* POSIX leaves the declaration to the program. */
extern char **environ;

/* train_opts.h's TRAIN_EXIT_FAIL and TRAIN_EXIT_USAGE, without the
 * runtime's headers that come with it */
#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define EXIT_NOEXEC 127

#define DEFAULT_GRACE_S 10.0
/* the longest sigtimedwait: the loop looks at the ranks at least this often
 * even when a SIGCHLD went astray */
#define MAX_WAIT_S 1.0

typedef struct rank {
    pid_t pid;
    bool running; /* started, not yet reaped */
    char **envp;  /* one allocation: the pointers, then the six variables' text */
} rank;

/* The variables the launcher sets over the caller's environment. */
static const char *const launch_vars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "NCCL_NVLS_ENABLE",
};
#define N_VARS (sizeof launch_vars / sizeof launch_vars[0])

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
static void say(const char *fmt, ...)
{
    /* one write: the line is not cut into by the ranks' own output */
    char line[1024];
    int n = snprintf(line, sizeof line, "ptxgen-train: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len++] = '\n';
    fflush(stderr);
    for (size_t off = 0; off < len;) {
        ssize_t w = write(2, line + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
}

static const char *signal_name(int sig, char *buf, size_t cap)
{
    static const struct { int sig; const char *name; } names[] = {
        {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
        {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
        {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
        {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
        {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"}, {SIGTTIN, "SIGTTIN"},
        {SIGTTOU, "SIGTTOU"}, {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"},
        {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGSYS, "SIGSYS"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].sig == sig)
            return names[i].name;
    snprintf(buf, cap, "signal %d", sig);
    return buf;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The port the kernel gives port 0 on addr: 0, or -1 after one line. */
static int free_port(const char *addr, int *port)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int g = getaddrinfo(addr, "0", &hints, &res);
    if (g) {
        say("no free port on %s: %s", addr, gai_strerror(g));
        return -1;
    }
    int err = EADDRNOTAVAIL;
    for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            getsockname(fd, (struct sockaddr *)&ss, &len) == 0) {
            in_port_t p = ss.ss_family == AF_INET6
                              ? ((const struct sockaddr_in6 *)&ss)->sin6_port
                              : ((const struct sockaddr_in *)&ss)->sin_port;
            close(fd);
            freeaddrinfo(res);
            *port = ntohs(p);
            return 0;
        }
        err = errno;
        close(fd);
    }
    freeaddrinfo(res);
    say("no free port on %s: %s", addr, strerror(err));
    return -1;
}

static bool is_launch_var(const char *entry)
{
    for (size_t v = 0; v < N_VARS; v++) {
        size_t n = strlen(launch_vars[v]);
        if (strncmp(entry, launch_vars[v], n) == 0 && entry[n] == '=')
            return true;
    }
    return false;
}

/* Rank i's environment: the caller's without the six, then the six. NULL
 * when out of memory. */
static char **rank_env(int i, int world, const char *addr, int port)
{
    size_t n = 0;
    for (char **e = environ; e && *e; e++)
        n++;
    char text[N_VARS][64];
    snprintf(text[0], sizeof text[0], "RANK=%d", i);
    snprintf(text[1], sizeof text[1], "WORLD_SIZE=%d", world);
    snprintf(text[2], sizeof text[2], "LOCAL_RANK=%d", i);
    snprintf(text[4], sizeof text[4], "MASTER_PORT=%d", port);
    snprintf(text[5], sizeof text[5], "NCCL_NVLS_ENABLE=0");
    size_t addr_len = strlen("MASTER_ADDR=") + strlen(addr) + 1;
    size_t bytes = (n + N_VARS + 1) * sizeof(char *) + addr_len;
    for (size_t v = 0; v < N_VARS; v++)
        bytes += v == 3 ? 0 : strlen(text[v]) + 1;
    char **envp = malloc(bytes);
    if (!envp)
        return NULL;
    char *at = (char *)(envp + n + N_VARS + 1);
    size_t k = 0;
    for (char **e = environ; e && *e; e++)
        if (!is_launch_var(*e))
            envp[k++] = *e;
    for (size_t v = 0; v < N_VARS; v++) {
        envp[k++] = at;
        if (v == 3) {
            snprintf(at, addr_len, "MASTER_ADDR=%s", addr);
            at += addr_len;
        } else {
            size_t len = strlen(text[v]) + 1;
            memcpy(at, text[v], len);
            at += len;
        }
    }
    envp[k] = NULL;
    return envp;
}

/* After fork, in the rank: its own process group, gone with the launcher,
 * the caller's signal mask, then the program. */
static _Noreturn void rank_exec(int i, const char *exe, char *const *argv, char **envp,
                                const sigset_t *mask, pid_t launcher)
{
    setpgid(0, 0);
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    /* the launcher died before prctl: nobody is left to wait for this rank */
    if (getppid() != launcher)
        _exit(EXIT_FAIL);
#else
    (void)launcher;
#endif
    pthread_sigmask(SIG_SETMASK, mask, NULL);
    execve(exe, argv, envp);
    int e = errno;
    char line[1024];
    int n = snprintf(line, sizeof line, "ptxgen-train: rank %d: cannot run %s: %s\n", i, exe,
                     strerror(e));
    if (n > 0) {
        if ((size_t)n >= sizeof line)
            n = sizeof line - 1;
        ssize_t w = write(2, line, (size_t)n);
        (void)w;
    }
    _exit(EXIT_NOEXEC);
}

typedef struct supervisor {
    rank *r;
    int n;           /* ranks started */
    int live;        /* started and not reaped */
    int status;      /* the first failing rank's (or the launcher's own failure); 0: none */
    bool stopping;   /* SIGUSR1 or a forwarded signal went out */
    bool killed;     /* SIGKILL went out */
    int stop_sig;    /* the signal the stop began with */
    double deadline; /* SIGKILL when still running then */
    double grace;
} supervisor;

static void signal_ranks(supervisor *s, int sig)
{
    /* the group: the rank and whatever it started, as a terminal would */
    for (int i = 0; i < s->n; i++)
        if (s->r[i].running)
            kill(-s->r[i].pid, sig);
}

static void stop_ranks(supervisor *s, int sig)
{
    signal_ranks(s, sig);
    /* a stopped rank (SIGTTIN, a debugger's SIGSTOP) acts on it only once
     * it runs again */
    signal_ranks(s, SIGCONT);
    s->stopping = true;
    s->stop_sig = sig;
    s->deadline = now_s() + s->grace;
}

static const char *ranks_word(int n) { return n == 1 ? "rank" : "ranks"; }

/* Reaps the ranks that exited, each after what is left of its group (its
 * leader a zombie until then, the group's id cannot be reused under the
 * kill); the first failure starts the stop. */
static void reap(supervisor *s)
{
    for (int i = 0; i < s->n; i++) {
        rank *r = &s->r[i];
        if (!r->running)
            continue;
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)r->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0) {
            int e = errno;
            if (e == EINTR) {
                i--;
                continue;
            }
            /* not ours to wait for any more (reaped behind our back) */
            r->running = false;
            s->live--;
            if (!s->status)
                s->status = EXIT_FAIL;
            say("rank %d: waitid: %s", i, strerror(e));
            continue;
        }
        if (si.si_pid == 0)
            continue;
        kill(-r->pid, SIGKILL);
        int ws = 0;
        pid_t w;
        while ((w = waitpid(r->pid, &ws, 0)) < 0 && errno == EINTR)
            ;
        r->running = false;
        s->live--;
        int st = w < 0                ? EXIT_FAIL
                 : WIFEXITED(ws)      ? WEXITSTATUS(ws)
                 : WIFSIGNALED(ws)    ? 128 + WTERMSIG(ws)
                                      : EXIT_FAIL;
        if (!st || s->status)
            continue;
        s->status = st;
        if (s->stopping)
            continue;
        char buf[32], what[64];
        if (w >= 0 && WIFSIGNALED(ws))
            snprintf(what, sizeof what, "was killed by %s",
                     signal_name(WTERMSIG(ws), buf, sizeof buf));
        else
            snprintf(what, sizeof what, "exited with status %d", st);
        if (s->live == 0)
            say("rank %d %s", i, what);
        else if (s->live == 1)
            say("rank %d %s; stopping the other rank", i, what);
        else
            say("rank %d %s; stopping the other %d ranks", i, what, s->live);
        /* not SIGTERM: that asks for a stop agreed by all ranks, and one
         * is gone. SIGUSR1 tells a rank so; it exits at once. */
        stop_ranks(s, SIGUSR1);
    }
}

static void supervise(supervisor *s, const sigset_t *set)
{
    for (;;) {
        reap(s);
        if (s->live == 0)
            return;
        double t = now_s();
        char buf[32];
        if (s->stopping && !s->killed && t >= s->deadline) {
            say("%d %s still running %g s after %s: sending SIGKILL", s->live,
                ranks_word(s->live), s->grace, signal_name(s->stop_sig, buf, sizeof buf));
            signal_ranks(s, SIGKILL);
            s->killed = true;
        }
        double wait = s->stopping && !s->killed ? s->deadline - t : MAX_WAIT_S;
        if (wait > MAX_WAIT_S)
            wait = MAX_WAIT_S;
        if (wait < 0)
            wait = 0;
        struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        int sig = sigtimedwait(set, NULL, &ts);
        if (sig != SIGINT && sig != SIGTERM && sig != SIGHUP)
            continue; /* SIGCHLD, the timeout, or EINTR: look at the ranks again */
        const char *name = signal_name(sig, buf, sizeof buf);
        if (!s->stopping) {
            say("%s: passing it on to the %d running %s (another one kills them)", name,
                s->live, ranks_word(s->live));
            stop_ranks(s, sig);
        } else if (!s->killed) {
            say("%s while stopping: killing the %d running %s", name, s->live,
                ranks_word(s->live));
            signal_ranks(s, SIGKILL);
            s->killed = true;
        }
    }
}

int train_launch(const train_launch_opts *o)
{
    if (!o) {
        say("train_launch: no options");
        return EXIT_USAGE;
    }
    if (o->gpus < 2 || o->gpus > TRAIN_LAUNCH_MAX_GPUS) {
        say("--gpus %d is out of range (2 to %d)", o->gpus, TRAIN_LAUNCH_MAX_GPUS);
        return EXIT_USAGE;
    }
    if (!o->argv || !o->argv[0]) {
        say("--gpus: no program arguments (argv[0] is needed)");
        return EXIT_USAGE;
    }
    if (!(o->grace_s >= 0 && o->grace_s <= 1e6)) {
        say("--gpus: a grace of %g s is out of range (0 to 1e6)", o->grace_s);
        return EXIT_USAGE;
    }
    if (o->master_port < 0 || o->master_port > 65535) {
        say("MASTER_PORT %d is out of range (1 to 65535, or 0 for a free one)", o->master_port);
        return EXIT_USAGE;
    }
    const char *addr = o->master_addr ? o->master_addr : "127.0.0.1";
    if (!*addr) {
        say("MASTER_ADDR is empty");
        return EXIT_USAGE;
    }
    int port = o->master_port;
    if (!port && free_port(addr, &port))
        return EXIT_FAIL;
    const char *exe = o->exe ? o->exe : "/proc/self/exe";

    supervisor s;
    memset(&s, 0, sizeof s);
    s.grace = o->grace_s > 0 ? o->grace_s : DEFAULT_GRACE_S;
    s.r = calloc((size_t)o->gpus, sizeof *s.r);
    bool oom = !s.r;
    for (int i = 0; i < o->gpus && !oom; i++)
        oom = !(s.r[i].envp = rank_env(i, o->gpus, addr, port));
    if (oom) {
        say("out of memory starting %d ranks", o->gpus);
        for (int i = 0; s.r && i < o->gpus; i++)
            free(s.r[i].envp);
        free(s.r);
        return EXIT_FAIL;
    }

    /* Blocked before the first fork: a signal or an exit that comes while
     * the ranks start waits for the loop, and none is lost. */
    sigset_t set, old_mask;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &set, &old_mask);
    struct sigaction dfl, old_chld;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGCHLD, &dfl, &old_chld);

    pid_t self = getpid();
    for (int i = 0; i < o->gpus; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            int e = errno;
            s.status = EXIT_FAIL;
            say("rank %d: fork: %s; stopping the %d started %s", i, strerror(e), s.n,
                ranks_word(s.n));
            stop_ranks(&s, SIGUSR1);
            break;
        }
        if (pid == 0)
            rank_exec(i, exe, o->argv, s.r[i].envp, &old_mask, self);
        /* here too: the group must exist before any signal goes to it
         * (EACCES once the rank has exec'd: it made the group itself) */
        setpgid(pid, pid);
        s.r[i].pid = pid;
        s.r[i].running = true;
        s.n++;
        s.live++;
    }
    supervise(&s, &set);

    /* the ranks' SIGCHLD is not the caller's business */
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    struct timespec zero = {0, 0};
    while (sigtimedwait(&chld, NULL, &zero) == SIGCHLD)
        ;
    sigaction(SIGCHLD, &old_chld, NULL);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    for (int i = 0; i < o->gpus; i++)
        free(s.r[i].envp);
    free(s.r);
    return s.status;
}
