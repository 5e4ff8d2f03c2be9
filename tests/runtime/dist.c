/* SPDX-License-Identifier: MIT */
/*
 * pgrt_dist without a GPU: real ranks as forked processes on 127.0.0.1
 * (a port found free by binding port 0) and in a fresh temporary
 * directory.
 *
 *  - pgrt_dist_from_env: torchrun's variables and the init methods, each
 *    valid form and each malformed one with its code and message;
 *  - the exchange: worlds of 2 and 4 over TCP and FILE, by hand-made
 *    pgrt_dist and through the environment, ranks started in a random
 *    order with random delays and rank 0 last (the others retry), every
 *    rank ending with rank 0's 128 random bytes;
 *  - failures: a name that does not resolve, rank 0 on an address not
 *    this host's, a port in use, a rank with nobody listening (timed: the
 *    bound plus less than a second), rank 0 waiting for ranks that never
 *    come (named), a world mismatch, a rank twice, strangers (garbage, a
 *    silent connection, half a hello, another protocol version) that do
 *    not stop the good ranks, a stale FILE, two rank 0s publishing at
 *    once, a file not ours, a missing directory, and
 *    pgrt_dist_finish removing the file.
 *
 * Every child has an alarm and every wait on one a bound, so nothing
 * hangs. Usage: test_dist [SEED]
 */
#include "ptxgen/pgrt_comm.h"
#include "test.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t rng_state;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static char dir[256];

static int open_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 1024; fd++)
        n += fcntl(fd, F_GETFD) != -1;
    return n;
}

static void clear_env(void)
{
    static const char *const names[] = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK",
                                        "MASTER_ADDR", "MASTER_PORT",
                                        "TORCHELASTIC_USE_AGENT_STORE"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        unsetenv(names[i]);
}

/* A port of 127.0.0.1 that nobody listens on right now. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        perror("free_port");
        exit(1);
    }
    close(fd);
    return ntohs(a.sin_port);
}

static bool have_ipv6_loopback(void)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in6 a;
    memset(&a, 0, sizeof a);
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

static pgrt_dist tcp_dist(const char *addr, int port, int rank, int world)
{
    pgrt_dist d;
    memset(&d, 0, sizeof d);
    d.method = PGRT_DIST_TCP;
    d.rank = rank;
    d.world = world;
    d.local_rank = rank;
    snprintf(d.addr, sizeof d.addr, "%s", addr);
    d.port = port;
    return d;
}

static pgrt_dist file_dist(const char *path, int rank, int world)
{
    pgrt_dist d;
    memset(&d, 0, sizeof d);
    d.method = PGRT_DIST_FILE;
    d.rank = rank;
    d.world = world;
    d.local_rank = rank;
    snprintf(d.path, sizeof d.path, "%s", path);
    return d;
}

static pgrt_comm_id random_id(void)
{
    pgrt_comm_id id;
    for (size_t i = 0; i < sizeof id.bytes; i++)
        id.bytes[i] = (unsigned char)rnd();
    return id;
}

/* ---------------------------------------------------------------- ranks as processes */

typedef struct rank_job {
    pgrt_dist d;      /* the rank; or, with env, what goes into the variables */
    bool env;         /* RANK, WORLD_SIZE (and MASTER_* for TCP), then from_env(init) */
    const char *init;
    int delay_ms;
    double timeout_s;
} rank_job;

/* What a child reports through its pipe. */
typedef struct outcome {
    int rc;
    int leaked;  /* descriptors open after the exchange, not before */
    double secs; /* the exchange's own time */
    char msg[512];
    pgrt_comm_id id;
} outcome;

typedef struct child {
    pid_t pid;
    int fd;
} child;

static child spawn(const rank_job *j, const pgrt_comm_id *publish)
{
    int p[2];
    if (pipe(p) != 0) {
        perror("pipe");
        exit(1);
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid == 0) {
        close(p[0]);
        alarm(30);
        nap_ms(j->delay_ms);
        outcome o;
        memset(&o, 0, sizeof o);
        pgrt_dist d = j->d;
        int rc = 0;
        if (j->env) {
            char v[32];
            clear_env();
            snprintf(v, sizeof v, "%d", j->d.rank);
            setenv("RANK", v, 1);
            snprintf(v, sizeof v, "%d", j->d.world);
            setenv("WORLD_SIZE", v, 1);
            if (j->d.method == PGRT_DIST_TCP && !j->init) {
                setenv("MASTER_ADDR", j->d.addr, 1);
                snprintf(v, sizeof v, "%d", j->d.port);
                setenv("MASTER_PORT", v, 1);
            }
            rc = pgrt_dist_from_env(&d, j->init);
        }
        if (!rc && d.rank == 0)
            o.id = *publish;
        int fds = open_fds();
        double t0 = now_s();
        if (!rc)
            rc = pgrt_dist_exchange(&d, &o.id, j->timeout_s);
        o.secs = now_s() - t0;
        o.leaked = open_fds() - fds;
        o.rc = rc;
        snprintf(o.msg, sizeof o.msg, "%s", rc ? pgrt_last_message() : "");
        ssize_t w = write(p[1], &o, sizeof o);
        close(p[1]);
        exit(w == (ssize_t)sizeof o ? 0 : 3);
    }
    close(p[1]);
    return (child){pid, p[0]};
}

/* The child's outcome, waiting at most until the bound; a child that
 * does not answer is killed and reported as rc 999. */
static outcome collect(child c, double until)
{
    outcome o;
    memset(&o, 0, sizeof o);
    o.rc = 999;
    snprintf(o.msg, sizeof o.msg, "no answer from the child");
    size_t have = 0;
    while (have < sizeof o) {
        int ms = (int)((until - now_s()) * 1e3);
        struct pollfd p = {c.fd, POLLIN, 0};
        if (ms <= 0 || poll(&p, 1, ms) <= 0)
            break;
        ssize_t n = read(c.fd, (char *)&o + have, sizeof o - have);
        if (n <= 0)
            break;
        have += (size_t)n;
    }
    if (have != sizeof o) {
        memset(&o, 0, sizeof o);
        o.rc = 999;
        snprintf(o.msg, sizeof o.msg, "the child hung or died");
        kill(c.pid, SIGKILL);
    }
    close(c.fd);
    int status = 0;
    waitpid(c.pid, &status, 0);
    if (have == sizeof o && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        o.rc = 998;
        snprintf(o.msg, sizeof o.msg, "the child ended with status 0x%x", status);
    }
    REQUIRE_INT_EQ(o.leaked, 0);
    return o;
}

/* Every job as its own process, started in a random order; the outcomes
 * by job index. */
static void run_jobs(const rank_job *jobs, int n, const pgrt_comm_id *publish, outcome *out,
                     double bound_s)
{
    child c[16];
    int order[16];
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int k = (int)(rnd() % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[k];
        order[k] = t;
    }
    for (int i = 0; i < n; i++)
        c[order[i]] = spawn(&jobs[order[i]], publish);
    double until = now_s() + bound_s;
    for (int i = 0; i < n; i++)
        out[i] = collect(c[i], until);
}

static bool file_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* A world whose every rank must end with the published id. rank0_delay:
 * rank 0 starts that late (< 0: random like the others). */
static void check_world(pgrt_dist_method m, const char *addr, int world, bool env,
                        const char *init, int rank0_delay, const char *label)
{
    static int n_file;
    char path[512];
    int port = 0;
    if (m == PGRT_DIST_TCP)
        port = free_port();
    else
        snprintf(path, sizeof path, "%s/rdv-%d", dir, n_file++);
    char init_buf[600];
    if (init && m == PGRT_DIST_FILE) {
        snprintf(init_buf, sizeof init_buf, "%s%s", init, path);
        init = init_buf;
    } else if (init) {
        snprintf(init_buf, sizeof init_buf, strchr(addr, ':') ? "%s[%s]:%d" : "%s%s:%d", init,
                 addr, port);
        init = init_buf;
    }
    rank_job jobs[8];
    for (int r = 0; r < world; r++) {
        jobs[r] = (rank_job){m == PGRT_DIST_TCP ? tcp_dist(addr, port, r, world)
                                                : file_dist(path, r, world),
                             env, init, (int)(rnd() % 200), 10};
    }
    if (rank0_delay >= 0)
        jobs[0].delay_ms = rank0_delay;
    pgrt_comm_id id = random_id();
    outcome o[8];
    run_jobs(jobs, world, &id, o, 20);
    for (int r = 0; r < world; r++) {
        if (o[r].rc != 0)
            fprintf(stderr, "%s: rank %d: %d: %s\n", label, r, o[r].rc, o[r].msg);
        REQUIRE_INT_EQ(o[r].rc, 0);
        REQUIRE(memcmp(o[r].id.bytes, id.bytes, sizeof id.bytes) == 0);
    }
    if (m == PGRT_DIST_FILE) {
        /* rank 0 removes the file once every rank has the id: until
         * pgrt_dist_finish it stays */
        REQUIRE(file_exists(path));
        pgrt_dist d0 = file_dist(path, 0, world), d1 = file_dist(path, 1, world);
        REQUIRE_INT_EQ(pgrt_dist_finish(&d1), 0);
        REQUIRE(file_exists(path));
        REQUIRE_INT_EQ(pgrt_dist_finish(&d0), 0);
        REQUIRE(!file_exists(path));
        REQUIRE_INT_EQ(pgrt_dist_finish(&d0), 0); /* gone already: fine */
    }
    fprintf(stderr, "ok: %s\n", label);
}

/* One rank alone, in a child (for the bound), expecting code and text. */
static outcome one_rank(pgrt_dist d, double timeout_s, int code, const char *want)
{
    rank_job j = {d, false, NULL, 0, timeout_s};
    pgrt_comm_id id = random_id();
    outcome o;
    run_jobs(&j, 1, &id, &o, timeout_s + 10);
    REQUIRE_INT_EQ(o.rc, code);
    if (want)
        REQUIRE_CONTAINS(o.msg, want);
    return o;
}

/* ---------------------------------------------------------------- from_env */

typedef struct env_case {
    const char *rank, *world, *local, *addr, *port, *init;
    const char *want; /* NULL: valid */
} env_case;

static void set_case(const env_case *c)
{
    clear_env();
    if (c->rank)
        setenv("RANK", c->rank, 1);
    if (c->world)
        setenv("WORLD_SIZE", c->world, 1);
    if (c->local)
        setenv("LOCAL_RANK", c->local, 1);
    if (c->addr)
        setenv("MASTER_ADDR", c->addr, 1);
    if (c->port)
        setenv("MASTER_PORT", c->port, 1);
}

static void test_from_env(void)
{
    pgrt_dist d;

    /* nothing set: one process */
    clear_env();
    memset(&d, 0x5a, sizeof d);
    REQUIRE_INT_EQ(pgrt_dist_from_env(&d, NULL), 0);
    REQUIRE_INT_EQ(d.method, PGRT_DIST_SINGLE);
    REQUIRE_INT_EQ(d.rank, 0);
    REQUIRE_INT_EQ(d.world, 1);
    REQUIRE_INT_EQ(d.local_rank, 0);
    REQUIRE_INT_EQ(pgrt_dist_from_env(&d, "env://"), 0);
    REQUIRE_INT_EQ(d.method, PGRT_DIST_SINGLE);

    /* WORLD_SIZE=1, with or without RANK=0, init or not: one process */
    set_case(&(env_case){"0", "1", NULL, NULL, NULL, NULL, NULL});
    REQUIRE_INT_EQ(pgrt_dist_from_env(&d, NULL), 0);
    REQUIRE_INT_EQ(d.method, PGRT_DIST_SINGLE);
    REQUIRE_INT_EQ(d.world, 1);
    set_case(&(env_case){NULL, "1", NULL, NULL, NULL, NULL, NULL});
    REQUIRE_INT_EQ(pgrt_dist_from_env(&d, "tcp://h:1"), 0);
    REQUIRE_INT_EQ(d.method, PGRT_DIST_SINGLE);
    REQUIRE_INT_EQ(d.rank, 0);

    /* LOCAL_RANK alone picks the GPU of a single process */
    set_case(&(env_case){NULL, NULL, "3", NULL, NULL, NULL, NULL});
    REQUIRE_INT_EQ(pgrt_dist_from_env(&d, NULL), 0);
    REQUIRE_INT_EQ(d.method, PGRT_DIST_SINGLE);
    REQUIRE_INT_EQ(d.local_rank, 3);

    /* torchrun's TCP: LOCAL_RANK defaults to the rank */
    set_case(&(env_case){"2", "4", NULL, "10.1.2.3", "29500", NULL, NULL});
    REQUIRE_INT_EQ(pgrt_dist_from_env(&d, NULL), 0);
    REQUIRE_INT_EQ(d.method, PGRT_DIST_TCP);
    REQUIRE_INT_EQ(d.rank, 2);
    REQUIRE_INT_EQ(d.world, 4);
    REQUIRE_INT_EQ(d.local_rank, 2);
    REQUIRE_STR_EQ(d.addr, "10.1.2.3");
    REQUIRE_INT_EQ(d.port, 29500);
    set_case(&(env_case){"3", "4", "1", "[::1]", "1", NULL, NULL});
    REQUIRE_INT_EQ(pgrt_dist_from_env(&d, "env://"), 0);
    REQUIRE_INT_EQ(d.local_rank, 1);
    REQUIRE_STR_EQ(d.addr, "::1");
    REQUIRE_INT_EQ(d.port, 1);

    /* init instead of MASTER_* (which may be unset, or anything) */
    set_case(&(env_case){"1", "2", NULL, "ignored", "junk", NULL, NULL});
    REQUIRE_INT_EQ(pgrt_dist_from_env(&d, "tcp://node7.example:65535"), 0);
    REQUIRE_INT_EQ(d.method, PGRT_DIST_TCP);
    REQUIRE_STR_EQ(d.addr, "node7.example");
    REQUIRE_INT_EQ(d.port, 65535);
    REQUIRE_INT_EQ(pgrt_dist_from_env(&d, "tcp://[fe80::1%eth0]:29500"), 0);
    REQUIRE_STR_EQ(d.addr, "fe80::1%eth0");
    REQUIRE_INT_EQ(d.port, 29500);
    REQUIRE_INT_EQ(pgrt_dist_from_env(&d, "file:/shared/run/rdv"), 0);
    REQUIRE_INT_EQ(d.method, PGRT_DIST_FILE);
    REQUIRE_STR_EQ(d.path, "/shared/run/rdv");
    REQUIRE_INT_EQ(pgrt_dist_from_env(&d, "file:///shared/run/rdv"), 0);
    REQUIRE_STR_EQ(d.path, "/shared/run/rdv");
    REQUIRE_INT_EQ(pgrt_dist_from_env(&d, "file:rel/rdv"), 0);
    REQUIRE_STR_EQ(d.path, "rel/rdv");

    /* under torchrun with its agent's store on MASTER_PORT: an init is
     * needed, and works */
    set_case(&(env_case){"1", "2", NULL, "10.1.2.3", "29500", NULL, NULL});
    setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
    memset(&d, 0x5a, sizeof d);
    REQUIRE_INT_EQ(pgrt_dist_from_env(&d, NULL), PGRT_EINVAL);
    REQUIRE_STR_EQ(pgrt_last_message(),
                   "MASTER_ADDR=10.1.2.3 MASTER_PORT=29500 is torchrun's own store "
                   "(TORCHELASTIC_USE_AGENT_STORE=True): give an init method, tcp://HOST:PORT "
                   "with another port or file:PATH");
    REQUIRE_INT_EQ(pgrt_dist_from_env(&d, "tcp://10.1.2.3:29501"), 0);
    REQUIRE_INT_EQ(d.port, 29501);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1);
    REQUIRE_INT_EQ(pgrt_dist_from_env(&d, NULL), 0);
    REQUIRE_INT_EQ(d.port, 29500);

    static const env_case bad[] = {
        {"3", "2", NULL, "h", "1", NULL, "RANK=3 is not below WORLD_SIZE=2"},
        {"2", "2", NULL, "h", "1", NULL, "RANK=2 is not below WORLD_SIZE=2"},
        {"-1", "2", NULL, "h", "1", NULL, "RANK=-1: a rank is 0 or more"},
        {"1x", "2", NULL, "h", "1", NULL, "RANK=1x is not an integer"},
        {" 1", "2", NULL, "h", "1", NULL, "RANK= 1 is not an integer"},
        {"1.0", "2", NULL, "h", "1", NULL, "RANK=1.0 is not an integer"},
        {"", "2", NULL, "h", "1", NULL, "RANK is set but empty"},
        {"0", "0", NULL, "h", "1", NULL, "WORLD_SIZE=0: a world is 1 or more"},
        {"0", "-4", NULL, "h", "1", NULL, "WORLD_SIZE=-4: a world is 1 or more"},
        {"0", "99999999999999999999", NULL, "h", "1", NULL,
         "WORLD_SIZE=99999999999999999999 is too large"},
        {"0", "2147483648", NULL, "h", "1", NULL, "WORLD_SIZE=2147483648 is too large"},
        {"0", "4x", NULL, "h", "1", NULL, "WORLD_SIZE=4x is not an integer"},
        {"1", NULL, NULL, "h", "1", NULL, "RANK=1 is set but WORLD_SIZE is not"},
        {NULL, "4", NULL, "h", "1", NULL, "WORLD_SIZE=4 is set but RANK is not"},
        {"0", "4", "4", "h", "1", NULL, "LOCAL_RANK=4 is not below WORLD_SIZE=4"},
        {"0", "4", "-1", "h", "1", NULL, "LOCAL_RANK=-1: a local rank is 0 or more"},
        {"0", "4", "a", "h", "1", NULL, "LOCAL_RANK=a is not an integer"},
        {"0", "4", NULL, "h", "70000", NULL, "MASTER_PORT=70000: a port is 1 to 65535"},
        {"0", "4", NULL, "h", "0", NULL, "MASTER_PORT=0: a port is 1 to 65535"},
        {"0", "4", NULL, "h", "-5", NULL, "MASTER_PORT=-5: a port is 1 to 65535"},
        {"0", "4", NULL, "h", "99999999999999999999", NULL,
         "MASTER_PORT=99999999999999999999: a port is 1 to 65535"},
        {"0", "4", NULL, "h", "29500x", NULL, "MASTER_PORT=29500x is not an integer"},
        {"0", "4", NULL, "h", "", NULL, "MASTER_PORT is set but empty"},
        {"0", "4", NULL, "", "1", NULL, "MASTER_ADDR is set but empty"},
        {"0", "4", NULL, NULL, NULL, NULL,
         "WORLD_SIZE=4 but neither MASTER_ADDR/MASTER_PORT nor an init method names where the "
         "ranks meet"},
        {"0", "4", NULL, "h", NULL, NULL,
         "WORLD_SIZE=4 and MASTER_ADDR=h but MASTER_PORT is not set"},
        {"0", "4", NULL, NULL, "1", NULL,
         "WORLD_SIZE=4 and MASTER_PORT=1 but MASTER_ADDR is not set"},
        {"0", "4", NULL, NULL, NULL, "udp://h:1",
         "init udp://h:1: an init method is tcp://HOST:PORT or file:PATH"},
        {"0", "4", NULL, NULL, NULL, "tcp://h", "init tcp://h has no port (tcp://HOST:PORT)"},
        {"0", "4", NULL, NULL, NULL, "tcp://h:", "init tcp://h: has no port (tcp://HOST:PORT)"},
        {"0", "4", NULL, NULL, NULL, "tcp://:29500", "init tcp://:29500 has no host"},
        {"0", "4", NULL, NULL, NULL, "tcp://h:0", "init tcp://h:0: a port is 1 to 65535"},
        {"0", "4", NULL, NULL, NULL, "tcp://h:65536", "init tcp://h:65536: a port is 1 to 65535"},
        {"0", "4", NULL, NULL, NULL, "tcp://h:12ab",
         "init tcp://h:12ab: the port 12ab is not an integer"},
        {"0", "4", NULL, NULL, NULL, "tcp://h:1/",
         "init tcp://h:1/: the port 1/ is not an integer"},
        {"0", "4", NULL, NULL, NULL, "tcp://::1:29500",
         "init tcp://::1:29500: an IPv6 address goes in brackets (tcp://[ADDR]:PORT)"},
        {"0", "4", NULL, NULL, NULL, "tcp://[::1:29500",
         "init tcp://[::1:29500: no ']' closes the IPv6 address"},
        {"0", "4", NULL, NULL, NULL, "tcp://[::1]29500", "init tcp://[::1]29500 has no port"},
        {"0", "4", NULL, NULL, NULL, "file:", "init file: has no path (file:PATH)"},
        {"0", "4", NULL, NULL, NULL, "file://", "init file:// has no path (file:PATH)"},
        {"0", "4", NULL, NULL, NULL, "file:/tmp/", "init file:/tmp/ names a directory"},
        {NULL, NULL, NULL, NULL, NULL, "tcp://h:1",
         "init tcp://h:1 names where the ranks meet, but RANK and WORLD_SIZE are not set"},
        {NULL, "1", NULL, NULL, NULL, "bogus", "init bogus: an init method is"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        set_case(&bad[i]);
        memset(&d, 0x5a, sizeof d);
        pgrt_dist before = d;
        int rc = pgrt_dist_from_env(&d, bad[i].init);
        if (rc != PGRT_EINVAL)
            fprintf(stderr, "case %zu (%s): rc %d\n", i, bad[i].want, rc);
        REQUIRE_INT_EQ(rc, PGRT_EINVAL);
        REQUIRE_CONTAINS(pgrt_last_message(), bad[i].want);
        REQUIRE(memcmp(&d, &before, sizeof d) == 0); /* untouched on failure */
    }
    {
        /* a host of 256 bytes does not fit */
        char init[300] = "tcp://";
        memset(init + 6, 'h', 256);
        strcpy(init + 6 + 256, ":1");
        set_case(&(env_case){"0", "2", NULL, NULL, NULL, NULL, NULL});
        REQUIRE_INT_EQ(pgrt_dist_from_env(&d, init), PGRT_EINVAL);
        REQUIRE_CONTAINS(pgrt_last_message(), "the host is longer than 255 bytes");
    }
    REQUIRE_INT_EQ(pgrt_dist_from_env(NULL, NULL), PGRT_EINVAL);
    clear_env();
    fprintf(stderr, "ok: from_env\n");
}

/* ---------------------------------------------------------------- arguments */

static void test_args(void)
{
    pgrt_dist d = tcp_dist("127.0.0.1", 1, 1, 2);
    pgrt_comm_id id = random_id(), keep = id;
    REQUIRE_INT_EQ(pgrt_dist_exchange(NULL, &id, 1), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "d is NULL");
    REQUIRE_INT_EQ(pgrt_dist_exchange(&d, NULL, 1), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "id is NULL");
    REQUIRE_INT_EQ(pgrt_dist_exchange(&d, &id, 0), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "timeout_s 0");
    REQUIRE_INT_EQ(pgrt_dist_exchange(&d, &id, -1), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_dist_exchange(&d, &id, NAN), PGRT_EINVAL);
    REQUIRE_INT_EQ(pgrt_dist_exchange(&d, &id, INFINITY), PGRT_EINVAL);
    /* a struct never filled in */
    pgrt_dist zero;
    memset(&zero, 0, sizeof zero);
    REQUIRE_INT_EQ(pgrt_dist_exchange(&zero, &id, 1), PGRT_EINVAL);
    pgrt_dist bad = tcp_dist("127.0.0.1", 0, 1, 2);
    REQUIRE_INT_EQ(pgrt_dist_exchange(&bad, &id, 1), PGRT_EINVAL);
    bad = tcp_dist("127.0.0.1", 1, 2, 2);
    REQUIRE_INT_EQ(pgrt_dist_exchange(&bad, &id, 1), PGRT_EINVAL);

    /* one process: at once, id untouched */
    clear_env();
    REQUIRE_INT_EQ(pgrt_dist_from_env(&d, NULL), 0);
    double t0 = now_s();
    REQUIRE_INT_EQ(pgrt_dist_exchange(&d, &id, 300), 0);
    REQUIRE(now_s() - t0 < 0.1);
    REQUIRE(memcmp(&id, &keep, sizeof id) == 0);
    REQUIRE_INT_EQ(pgrt_dist_finish(&d), 0);
    REQUIRE_INT_EQ(pgrt_dist_finish(NULL), PGRT_EINVAL);
    fprintf(stderr, "ok: arguments\n");
}

/* ---------------------------------------------------------------- TCP failures */

static void test_tcp_failures(void)
{
    char want[256];

    /* a name that does not resolve, for a rank and for rank 0 */
    one_rank(tcp_dist("nohost.invalid", 29500, 1, 2), 2, PGRT_EINVAL,
             "MASTER_ADDR nohost.invalid does not resolve: ");
    one_rank(tcp_dist("nohost.invalid", 29500, 0, 2), 2, PGRT_EINVAL,
             "MASTER_ADDR nohost.invalid does not resolve: ");

    /* rank 0 given an address of another host (TEST-NET-1) */
    outcome o = one_rank(tcp_dist("192.0.2.1", free_port(), 0, 2), 2, PGRT_EINVAL,
                         "MASTER_ADDR 192.0.2.1");
    REQUIRE_CONTAINS(o.msg, "is not an address of this host");
    REQUIRE(o.secs < 1);

    /* the port taken by someone else */
    {
        int port = free_port();
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons((uint16_t)port);
        REQUIRE(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 4) == 0);
        snprintf(want, sizeof want, "port %d is in use", port);
        o = one_rank(tcp_dist("127.0.0.1", port, 0, 2), 2, PGRT_ECOMM, want);
        REQUIRE(o.secs < 1);
        close(fd);
    }

    /* nobody listening: a rank retries until the bound, then says so */
    {
        int port = free_port();
        o = one_rank(tcp_dist("127.0.0.1", port, 1, 2), 1, PGRT_ETIMEOUT, NULL);
        snprintf(want, sizeof want, "rank 1 of 2: rank 0 at 127.0.0.1:%d did not answer within 1 s",
                 port);
        REQUIRE_CONTAINS(o.msg, want);
        REQUIRE_CONTAINS(o.msg, "Connection refused");
        fprintf(stderr, "  a rank with nobody listening gave up after %.3f s\n", o.secs);
        REQUIRE(o.secs >= 0.95 && o.secs < 2.0);
    }

    /* rank 0 waits for ranks 2 and 3, which never come */
    {
        int port = free_port();
        rank_job jobs[2] = {{tcp_dist("127.0.0.1", port, 0, 4), false, NULL, 0, 2},
                            {tcp_dist("127.0.0.1", port, 1, 4), false, NULL, 100, 2}};
        pgrt_comm_id id = random_id();
        outcome out[2];
        run_jobs(jobs, 2, &id, out, 12);
        REQUIRE_INT_EQ(out[0].rc, PGRT_ETIMEOUT);
        snprintf(want, sizeof want, "ranks 2, 3 of 4 did not connect to 127.0.0.1:%d within 2 s",
                 port);
        REQUIRE_STR_EQ(out[0].msg, want);
        REQUIRE(out[0].secs >= 1.95 && out[0].secs < 3.0);
        REQUIRE_INT_EQ(out[1].rc, 0);
        REQUIRE(memcmp(out[1].id.bytes, id.bytes, sizeof id.bytes) == 0);
    }

    /* a rank of another world size is refused; rank 0 says so at its bound */
    {
        int port = free_port();
        rank_job jobs[2] = {{tcp_dist("127.0.0.1", port, 0, 4), false, NULL, 0, 2},
                            {tcp_dist("127.0.0.1", port, 1, 2), false, NULL, 0, 2}};
        pgrt_comm_id id = random_id();
        outcome out[2];
        run_jobs(jobs, 2, &id, out, 12);
        REQUIRE_INT_EQ(out[1].rc, PGRT_ECOMM);
        snprintf(want, sizeof want,
                 "rank 0 at 127.0.0.1:%d expects WORLD_SIZE 4, this rank says 2", port);
        REQUIRE_STR_EQ(out[1].msg, want);
        REQUIRE(out[1].secs < 2.0); /* refused, not timed out */
        REQUIRE_INT_EQ(out[0].rc, PGRT_ETIMEOUT);
        REQUIRE_CONTAINS(out[0].msg, "ranks 1, 2, 3 of 4 did not connect");
        REQUIRE_CONTAINS(out[0].msg, "refused 1 connection saying WORLD_SIZE 2");
    }

    /* two processes say RANK=1; rank 2 never comes */
    {
        int port = free_port();
        rank_job jobs[3] = {{tcp_dist("127.0.0.1", port, 0, 3), false, NULL, 0, 2},
                            {tcp_dist("127.0.0.1", port, 1, 3), false, NULL, 0, 2},
                            {tcp_dist("127.0.0.1", port, 1, 3), false, NULL, 0, 2}};
        jobs[2].delay_ms = 500;
        pgrt_comm_id id = random_id();
        outcome out[3];
        run_jobs(jobs, 3, &id, out, 12);
        /* either may come first (the first may be retrying) */
        int first = out[1].rc == 0 ? 1 : 2, second = 3 - first;
        REQUIRE_INT_EQ(out[first].rc, 0);
        REQUIRE(memcmp(out[first].id.bytes, id.bytes, sizeof id.bytes) == 0);
        REQUIRE_INT_EQ(out[second].rc, PGRT_ECOMM);
        REQUIRE_CONTAINS(out[second].msg, "has already served a rank 1: two processes say RANK=1");
        REQUIRE_INT_EQ(out[0].rc, PGRT_ETIMEOUT);
        REQUIRE_CONTAINS(out[0].msg, "rank 2 of 3 did not connect");
        REQUIRE_CONTAINS(out[0].msg, "rank 1 came twice");
    }
    fprintf(stderr, "ok: TCP failures\n");
}

/* ---------------------------------------------------------------- strangers */

static int connect_local(int port, double until)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    while (now_s() < until) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
            return fd;
        if (fd >= 0)
            close(fd);
        nap_ms(20);
    }
    return -1;
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* A port scanner, an HTTP client, a silent connection, half a hello and
 * another build come first; the good ranks get the id all the same. */
static void test_strangers(void)
{
    int port = free_port();
    pgrt_comm_id id = random_id();
    rank_job j0 = {tcp_dist("127.0.0.1", port, 0, 3), false, NULL, 0, 10};
    child c0 = spawn(&j0, &id);
    double until = now_s() + 5;

    int silent = connect_local(port, until); /* held open throughout */
    REQUIRE(silent >= 0);
    int fd = connect_local(port, until);
    static const char http[] = "GET / HTTP/1.0\r\n\r\n";
    REQUIRE(fd >= 0 && send(fd, http, sizeof http - 1, MSG_NOSIGNAL) == (ssize_t)sizeof http - 1);
    char junk[64];
    struct pollfd p = {fd, POLLIN, 0};
    /* just dropped: an end, or a reset for the bytes it did not read */
    REQUIRE(poll(&p, 1, 3000) == 1 && recv(fd, junk, sizeof junk, 0) <= 0);
    close(fd);
    fd = connect_local(port, until); /* half a hello, then gone */
    REQUIRE(fd >= 0 && send(fd, "PGDI\0\0", 6, MSG_NOSIGNAL) == 6);
    close(fd);
    fd = connect_local(port, until); /* another protocol version */
    unsigned char hello[16], ans[16 + PGRT_COMM_ID_BYTES];
    memcpy(hello, "PGDI", 4);
    put_be32(hello + 4, 99);
    put_be32(hello + 8, 1);
    put_be32(hello + 12, 3);
    REQUIRE(fd >= 0 && send(fd, hello, sizeof hello, MSG_NOSIGNAL) == (ssize_t)sizeof hello);
    size_t have = 0;
    while (have < sizeof ans) {
        p = (struct pollfd){fd, POLLIN, 0};
        if (poll(&p, 1, 3000) != 1)
            break;
        ssize_t n = recv(fd, ans + have, sizeof ans - have, 0);
        if (n <= 0)
            break;
        have += (size_t)n;
    }
    REQUIRE_INT_EQ(have, sizeof ans);
    REQUIRE(memcmp(ans, "PGDI", 4) == 0);
    REQUIRE_INT_EQ(ans[11], 4); /* refused: another version */
    static const unsigned char zero[PGRT_COMM_ID_BYTES];
    REQUIRE(memcmp(ans + 16, zero, sizeof zero) == 0); /* and no id */
    close(fd);
    fd = connect_local(port, until); /* the same, gone before the answer: rank 0 writes to */
    REQUIRE(fd >= 0 && send(fd, hello, sizeof hello, MSG_NOSIGNAL) == (ssize_t)sizeof hello);
    close(fd);                       /* a closed socket, and must not die of SIGPIPE */

    rank_job jobs[2] = {{tcp_dist("127.0.0.1", port, 1, 3), false, NULL, 0, 10},
                        {tcp_dist("127.0.0.1", port, 2, 3), false, NULL, 50, 10}};
    outcome out[2];
    run_jobs(jobs, 2, &id, out, 15);
    outcome o0 = collect(c0, now_s() + 15);
    if (o0.rc)
        fprintf(stderr, "strangers: rank 0: %s\n", o0.msg);
    REQUIRE_INT_EQ(o0.rc, 0);
    for (int r = 0; r < 2; r++) {
        if (out[r].rc)
            fprintf(stderr, "strangers: rank %d: %s\n", r + 1, out[r].msg);
        REQUIRE_INT_EQ(out[r].rc, 0);
        REQUIRE(memcmp(out[r].id.bytes, id.bytes, sizeof id.bytes) == 0);
    }
    close(silent);
    fprintf(stderr, "ok: strangers\n");
}

/* ---------------------------------------------------------------- FILE failures */

static void write_file(const char *path, const void *data, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(fd >= 0 && write(fd, data, n) == (ssize_t)n);
    if (fd >= 0)
        close(fd);
}

static void test_file_failures(void)
{
    char path[512], want[700];
    snprintf(path, sizeof path, "%s/stale", dir);

    /* a file left from an earlier run: refused, untouched */
    write_file(path, "old", 3);
    snprintf(want, sizeof want, "file:%s exists; it may be left from an earlier run: remove it",
             path);
    outcome o = one_rank(file_dist(path, 0, 2), 2, PGRT_EINVAL, NULL);
    REQUIRE_STR_EQ(o.msg, want);
    char buf[8] = "";
    int fd = open(path, O_RDONLY);
    REQUIRE(fd >= 0 && read(fd, buf, sizeof buf) == 3 && memcmp(buf, "old", 3) == 0);
    if (fd >= 0)
        close(fd);

    /* a file not ours: the others refuse it at once */
    o = one_rank(file_dist(path, 1, 2), 2, PGRT_ECOMM, "is not a rendezvous file");
    REQUIRE(o.secs < 1);
    unlink(path);

    /* nobody publishes: the bound, and what was waited for */
    o = one_rank(file_dist(path, 1, 2), 1, PGRT_ETIMEOUT, NULL);
    snprintf(want, sizeof want, "rank 1 of 2: rank 0 did not publish file:%s within 1 s", path);
    REQUIRE_CONTAINS(o.msg, want);
    REQUIRE(o.secs >= 0.95 && o.secs < 2.0);

    /* another world's file */
    pgrt_dist d0 = file_dist(path, 0, 4);
    pgrt_comm_id id = random_id();
    REQUIRE_INT_EQ(pgrt_dist_exchange(&d0, &id, 1), 0);
    snprintf(want, sizeof want, "file:%s says WORLD_SIZE 4, this rank (1) says 2", path);
    o = one_rank(file_dist(path, 1, 2), 2, PGRT_ECOMM, want);
    /* publishing twice is refused like a stale file */
    REQUIRE_INT_EQ(pgrt_dist_exchange(&d0, &id, 1), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), "exists; it may be left from an earlier run");
    REQUIRE_INT_EQ(pgrt_dist_finish(&d0), 0);
    REQUIRE(!file_exists(path));

    /* two processes that both say RANK=0 at once: one publishes */
    {
        rank_job jobs[2] = {{file_dist(path, 0, 2), false, NULL, 0, 2},
                            {file_dist(path, 0, 2), false, NULL, 0, 2}};
        outcome out[2];
        run_jobs(jobs, 2, &id, out, 12);
        REQUIRE((out[0].rc == 0) + (out[1].rc == 0) == 1);
        REQUIRE_CONTAINS(out[out[0].rc == 0 ? 1 : 0].msg, "exists; it may be left");
        REQUIRE_INT_EQ(pgrt_dist_finish(&d0), 0);
    }

    /* a directory that does not exist */
    snprintf(path, sizeof path, "%s/no/such/dir/rdv", dir);
    pgrt_dist dn = file_dist(path, 0, 2);
    REQUIRE_INT_EQ(pgrt_dist_exchange(&dn, &id, 1), PGRT_EINVAL);
    REQUIRE_CONTAINS(pgrt_last_message(), path);

    fprintf(stderr, "ok: FILE failures\n");
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0)
                             : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    rng_state = seed;
    fprintf(stderr, "seed %llu (rerun: test_dist %llu)\n", (unsigned long long)seed,
            (unsigned long long)seed);
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/pgrt-dist-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }

    int fds = open_fds();
    test_from_env();
    test_args();

    check_world(PGRT_DIST_TCP, "127.0.0.1", 2, false, NULL, -1, "TCP, world 2");
    check_world(PGRT_DIST_TCP, "127.0.0.1", 4, false, NULL, 600, "TCP, world 4, rank 0 last");
    check_world(PGRT_DIST_TCP, "127.0.0.1", 4, true, NULL, -1,
                "TCP, world 4, from the environment");
    check_world(PGRT_DIST_TCP, "localhost", 2, true, NULL, 300,
                "TCP, world 2, MASTER_ADDR=localhost, rank 0 last");
    check_world(PGRT_DIST_TCP, "127.0.0.1", 2, true, "tcp://", -1, "TCP, world 2, init tcp://");
    if (have_ipv6_loopback())
        check_world(PGRT_DIST_TCP, "::1", 2, true, "tcp://", 300, "TCP, world 2, init tcp://[::1]");
    else
        fprintf(stderr, "skipped: no IPv6 loopback here\n");
    check_world(PGRT_DIST_FILE, NULL, 2, false, NULL, -1, "FILE, world 2");
    check_world(PGRT_DIST_FILE, NULL, 4, false, NULL, 600, "FILE, world 4, rank 0 last");
    check_world(PGRT_DIST_FILE, NULL, 4, true, "file:", -1, "FILE, world 4, init file:PATH");
    check_world(PGRT_DIST_FILE, NULL, 2, true, "file://", 300, "FILE, world 2, init file://PATH");

    test_tcp_failures();
    test_strangers();
    test_file_failures();

    REQUIRE_INT_EQ(open_fds(), fds);
    if (rmdir(dir) != 0) {
        /* something was left behind: a temporary, a rendezvous file */
        TEST_FAIL_("rmdir %s: %s (a file left behind)", dir, strerror(errno));
    }
    TEST_DONE();
}
