/* SPDX-License-Identifier: MIT */
/*
 * The bootstrap half of pgrt_comm.h: where the ranks of a run meet
 * (torchrun's variables or an init method), and rank 0's id handed to the
 * others over TCP or through a shared file. Plain POSIX: no thread, no
 * global state, every wait bounded by the caller's deadline, every
 * descriptor closed on every path.
 *
 * The wire, all integers 32-bit big-endian:
 *   hello  (rank r > 0 to rank 0): "PGDI", version, r, world
 *   answer (rank 0 to rank r):     "PGDI", version, status, value, id[128]
 *   file   (FILE's rendezvous):    "PGDI", version, 0, world, id[128]
 * A refusal's value is what rank 0 expected (its world, its version) or
 * the rank that came twice; its id bytes are zero.
 */
#include "ptxgen/pgrt_comm.h"
#include "rt_internal.h"
#include "safe_write.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WIRE_MAGIC "PGDI"
#define WIRE_VERSION 1u

enum {
    HELLO_BYTES = 16,
    ANSWER_BYTES = 16 + PGRT_COMM_ID_BYTES,
    FILE_BYTES = 16 + PGRT_COMM_ID_BYTES,
};

enum { ST_OK = 0, ST_WORLD = 1, ST_RANK = 2, ST_TWICE = 3, ST_VERSION = 4 };

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0 /* SO_NOSIGPIPE on the socket instead (below) */
#endif

/* Rank 0's bounds on what strangers may hold: connections served at
 * once, and how long one may take to say hello (a rank sends it right
 * after connecting; a silent one is dropped and, if it was a rank, its
 * retry comes back). */
#define MAX_LISTEN 8
#define MAX_CONNS 64
#define HELLO_MS 10000.0
/* A connection attempt that neither succeeds nor fails (SYNs dropped)
 * gives up after this, so that the next address or a retry gets a turn. */
#define CONNECT_MS 10000.0

/* ---------------------------------------------------------------- small helpers */

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Milliseconds to deadline for poll: 0 once passed, at most INT_MAX. */
static int ms_left(double deadline)
{
    double left = deadline - rt_now_ms();
    if (left <= 0)
        return 0;
    if (left >= (double)INT_MAX)
        return INT_MAX;
    return (int)left + 1;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* "host:port", an IPv6 literal in brackets. */
static void host_port(char *buf, size_t len, const char *host, int port)
{
    if (strchr(host, ':'))
        snprintf(buf, len, "[%s]:%d", host, port);
    else
        snprintf(buf, len, "%s:%d", host, port);
}

/* The seconds of a bound as a person wrote them: "5", "0.5". */
static void seconds(char *buf, size_t len, double s) { snprintf(buf, len, "%g", s); }

static void set_flags(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    fl = fcntl(fd, F_GETFD);
    if (fl >= 0)
        fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
#ifdef SO_NOSIGPIPE
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
#endif
}

/* ---------------------------------------------------------------- pgrt_dist_from_env */

/* Strict decimal: an optional '-', then digits only. Saturates far above
 * INT_MAX, so that the caller's range check words an overflow. */
static bool parse_dec(const char *s, long long *out)
{
    bool neg = *s == '-';
    if (neg)
        s++;
    if (!*s)
        return false;
    long long x = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        if (x < 1000000000000LL)
            x = x * 10 + (*s - '0');
    }
    *out = neg ? -x : x;
    return true;
}

/* $name as an integer when set (*s then points at its text). */
static int env_int(const char *name, const char **s, long long *v)
{
    *s = getenv(name);
    if (!*s)
        return 0;
    if (!**s)
        return rt_fail(PGRT_EINVAL, "%s is set but empty", name);
    if (!parse_dec(*s, v))
        return rt_fail(PGRT_EINVAL, "%s=%s is not an integer", name, *s);
    return 0;
}

static bool is_env_init(const char *init) { return strcmp(init, "env://") == 0; }

/* "tcp://HOST:PORT" (HOST an IPv6 literal in brackets), "file:PATH" or
 * "file://PATH" into d's method, addr, port, path. */
static int parse_init(const char *init, pgrt_dist *d)
{
    if (strncmp(init, "tcp://", 6) == 0) {
        const char *h = init + 6, *end, *colon;
        if (*h == '[') {
            end = strchr(++h, ']');
            if (!end)
                return rt_fail(PGRT_EINVAL, "init %s: no ']' closes the IPv6 address", init);
            colon = end + 1;
            if (*colon != ':')
                return rt_fail(PGRT_EINVAL, "init %s has no port (tcp://HOST:PORT)", init);
        } else {
            colon = strrchr(h, ':');
            if (!colon)
                return rt_fail(PGRT_EINVAL, "init %s has no port (tcp://HOST:PORT)", init);
            end = colon;
            if (memchr(h, ':', (size_t)(end - h)))
                return rt_fail(PGRT_EINVAL,
                               "init %s: an IPv6 address goes in brackets (tcp://[ADDR]:PORT)",
                               init);
        }
        size_t n = (size_t)(end - h);
        if (n == 0)
            return rt_fail(PGRT_EINVAL, "init %s has no host (tcp://HOST:PORT)", init);
        if (n >= sizeof d->addr)
            return rt_fail(PGRT_EINVAL, "init %s: the host is longer than %zu bytes", init,
                           sizeof d->addr - 1);
        const char *port = colon + 1;
        long long v;
        if (!*port)
            return rt_fail(PGRT_EINVAL, "init %s has no port (tcp://HOST:PORT)", init);
        if (!parse_dec(port, &v))
            return rt_fail(PGRT_EINVAL, "init %s: the port %s is not an integer", init, port);
        if (v < 1 || v > 65535)
            return rt_fail(PGRT_EINVAL, "init %s: a port is 1 to 65535", init);
        d->port = (int)v;
        memcpy(d->addr, h, n);
        d->addr[n] = '\0';
        d->method = PGRT_DIST_TCP;
        return 0;
    }
    if (strncmp(init, "file:", 5) == 0) {
        const char *p = init + 5;
        if (strncmp(p, "//", 2) == 0)
            p += 2;
        size_t n = strlen(p);
        if (n == 0)
            return rt_fail(PGRT_EINVAL, "init %s has no path (file:PATH)", init);
        if (n >= sizeof d->path)
            return rt_fail(PGRT_EINVAL, "init file:...: the path is longer than %zu bytes",
                           sizeof d->path - 1);
        if (p[n - 1] == '/')
            return rt_fail(PGRT_EINVAL, "init %s names a directory, not a file", init);
        memcpy(d->path, p, n + 1);
        d->method = PGRT_DIST_FILE;
        return 0;
    }
    return rt_fail(PGRT_EINVAL, "init %s: an init method is tcp://HOST:PORT or file:PATH", init);
}

/* MASTER_ADDR and MASTER_PORT into d (a world above 1, no init). */
static int parse_master(pgrt_dist *d, const char *world_s)
{
    const char *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
    if (!addr && !port)
        return rt_fail(PGRT_EINVAL,
                       "WORLD_SIZE=%s but neither MASTER_ADDR/MASTER_PORT nor an init method "
                       "names where the ranks meet",
                       world_s);
    if (!addr)
        return rt_fail(PGRT_EINVAL, "WORLD_SIZE=%s and MASTER_PORT=%s but MASTER_ADDR is not set",
                       world_s, port);
    if (!port)
        return rt_fail(PGRT_EINVAL, "WORLD_SIZE=%s and MASTER_ADDR=%s but MASTER_PORT is not set",
                       world_s, addr);
    size_t n = strlen(addr);
    const char *a = addr;
    if (n >= 2 && a[0] == '[' && a[n - 1] == ']') {
        a++;
        n -= 2;
    }
    if (n == 0)
        return rt_fail(PGRT_EINVAL, "MASTER_ADDR is set but empty");
    if (n >= sizeof d->addr)
        return rt_fail(PGRT_EINVAL, "MASTER_ADDR is longer than %zu bytes", sizeof d->addr - 1);
    long long v;
    if (!*port)
        return rt_fail(PGRT_EINVAL, "MASTER_PORT is set but empty");
    if (!parse_dec(port, &v))
        return rt_fail(PGRT_EINVAL, "MASTER_PORT=%s is not an integer", port);
    if (v < 1 || v > 65535)
        return rt_fail(PGRT_EINVAL, "MASTER_PORT=%s: a port is 1 to 65535", port);
    memcpy(d->addr, a, n);
    d->addr[n] = '\0';
    d->port = (int)v;
    d->method = PGRT_DIST_TCP;
    return 0;
}

int pgrt_dist_from_env(pgrt_dist *out, const char *init)
{
    RT_NONNULL(__func__, out, "out");
    pgrt_dist d;
    memset(&d, 0, sizeof d);
    const char *rank_s, *world_s, *local_s;
    long long rank = 0, world = 1, local = 0;
    int rc;
    if ((rc = env_int("RANK", &rank_s, &rank)) || (rc = env_int("WORLD_SIZE", &world_s, &world)) ||
        (rc = env_int("LOCAL_RANK", &local_s, &local)))
        return rc;
    if (init && is_env_init(init))
        init = NULL;
    if (init && (rc = parse_init(init, &d)))
        return rc;

    if (!rank_s && !world_s) {
        if (init)
            return rt_fail(PGRT_EINVAL,
                           "init %s names where the ranks meet, but RANK and WORLD_SIZE are not "
                           "set",
                           init);
    } else if (!world_s) {
        return rt_fail(PGRT_EINVAL, "RANK=%s is set but WORLD_SIZE is not", rank_s);
    } else if (!rank_s && world != 1) {
        return rt_fail(PGRT_EINVAL, "WORLD_SIZE=%s is set but RANK is not", world_s);
    }
    if (world < 1)
        return rt_fail(PGRT_EINVAL, "WORLD_SIZE=%s: a world is 1 or more", world_s);
    if (world > INT_MAX)
        return rt_fail(PGRT_EINVAL, "WORLD_SIZE=%s is too large", world_s);
    if (rank < 0)
        return rt_fail(PGRT_EINVAL, "RANK=%s: a rank is 0 or more", rank_s);
    if (rank >= world)
        return rt_fail(PGRT_EINVAL, "RANK=%s is not below WORLD_SIZE=%s", rank_s, world_s);
    if (local_s) {
        if (local < 0)
            return rt_fail(PGRT_EINVAL, "LOCAL_RANK=%s: a local rank is 0 or more", local_s);
        /* A host's ranks are part of the world; alone, LOCAL_RANK only
         * picks a GPU. */
        if (world_s && local >= world)
            return rt_fail(PGRT_EINVAL, "LOCAL_RANK=%s is not below WORLD_SIZE=%s", local_s,
                           world_s);
        if (local > INT_MAX)
            return rt_fail(PGRT_EINVAL, "LOCAL_RANK=%s is too large", local_s);
    } else {
        local = rank;
    }

    if (world > 1 && !init) {
        if ((rc = parse_master(&d, world_s)))
            return rc;
        /* torchrun (static rendezvous, and c10d in newer releases) tells
         * its workers so when its own agent serves a store on
         * MASTER_ADDR:MASTER_PORT: rank 0 could not bind it, the others
         * would talk to the wrong server. Say so on every rank at once. */
        const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
        if (agent && strcmp(agent, "True") == 0)
            return rt_fail(PGRT_EINVAL,
                           "MASTER_ADDR=%s MASTER_PORT=%d is torchrun's own store "
                           "(TORCHELASTIC_USE_AGENT_STORE=True): give an init method, "
                           "tcp://HOST:PORT with another port or file:PATH",
                           getenv("MASTER_ADDR"), d.port);
    }
    if (world == 1) {
        /* Nothing to exchange; an init given was still checked above. */
        memset(&d, 0, sizeof d);
        d.method = PGRT_DIST_SINGLE;
    }
    d.rank = (int)rank;
    d.world = (int)world;
    d.local_rank = (int)local;
    *out = d;
    return 0;
}

/* ---------------------------------------------------------------- checks */

static int check_dist(const pgrt_dist *d)
{
    if (d->world < 1 || d->rank < 0 || d->rank >= d->world)
        return rt_fail(PGRT_EINVAL, "pgrt_dist: rank %d of world %d (0 <= rank < world)",
                       d->rank, d->world);
    switch (d->method) {
    case PGRT_DIST_SINGLE:
        if (d->world != 1)
            return rt_fail(PGRT_EINVAL, "pgrt_dist: a single process, but world %d", d->world);
        return 0;
    case PGRT_DIST_TCP:
        if (!memchr(d->addr, '\0', sizeof d->addr) || !d->addr[0])
            return rt_fail(PGRT_EINVAL, "pgrt_dist: TCP with no address");
        if (d->port < 1 || d->port > 65535)
            return rt_fail(PGRT_EINVAL, "pgrt_dist: port %d: a port is 1 to 65535", d->port);
        return 0;
    case PGRT_DIST_FILE:
        if (!memchr(d->path, '\0', sizeof d->path) || !d->path[0])
            return rt_fail(PGRT_EINVAL, "pgrt_dist: FILE with no path");
        return 0;
    }
    return rt_fail(PGRT_EINVAL, "pgrt_dist: unknown method %d", (int)d->method);
}

/* ---------------------------------------------------------------- TCP */

/* One getaddrinfo on a thread of its own, so that the caller's deadline
 * bounds it: a resolver with no server to ask (an isolated host) waits
 * out its own timeouts and retries, far longer than a user should. A
 * lookup the caller gave up on finishes in the background and frees
 * itself. */
typedef struct lookup {
    pthread_mutex_t lock;
    pthread_cond_t done_cv;
    bool done, abandoned;
    char host[256], service[16];
    int err, sys_errno;
    struct addrinfo *res;
} lookup;

static void lookup_free(lookup *q)
{
    if (q->res)
        freeaddrinfo(q->res);
    pthread_cond_destroy(&q->done_cv);
    pthread_mutex_destroy(&q->lock);
    free(q);
}

static void *lookup_run(void *arg)
{
    lookup *q = arg;
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    struct addrinfo *res = NULL;
    int e = getaddrinfo(q->host, q->service, &hints, &res);
    int se = errno;
    pthread_mutex_lock(&q->lock);
    q->err = e;
    q->sys_errno = se;
    q->res = e == 0 ? res : NULL;
    q->done = true;
    bool orphan = q->abandoned;
    pthread_cond_signal(&q->done_cv);
    pthread_mutex_unlock(&q->lock);
    if (orphan)
        lookup_free(q);
    return NULL;
}

/* getaddrinfo bounded by deadline: 0 with *res, EAI_* in *err, or -1 when
 * the deadline passed first (or no thread could be started: then the
 * lookup runs here, unbounded). */
static int lookup_bounded(const char *host, const char *service, double deadline,
                          struct addrinfo **res, int *err, int *sys_errno)
{
    lookup *q = calloc(1, sizeof *q);
    if (!q || pthread_mutex_init(&q->lock, NULL) != 0) {
        free(q);
        *err = EAI_MEMORY;
        return 1;
    }
    pthread_cond_init(&q->done_cv, NULL);
    snprintf(q->host, sizeof q->host, "%s", host);
    snprintf(q->service, sizeof q->service, "%s", service);
    pthread_attr_t attr;
    pthread_t th;
    bool started = pthread_attr_init(&attr) == 0;
    if (started) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        started = pthread_create(&th, &attr, lookup_run, q) == 0;
        pthread_attr_destroy(&attr);
    }
    if (!started)
        lookup_run(q);
    /* a numeric address or /etc/hosts answers at once: a lookup at the
     * deadline (a retry's) still gets that long */
    deadline = fmax(deadline, rt_now_ms() + 100.0);
    pthread_mutex_lock(&q->lock);
    while (!q->done) {
        double left = deadline - rt_now_ms();
        if (left <= 0)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double ns = ts.tv_nsec + fmin(left, 1000.0) * 1e6;
        ts.tv_sec += (time_t)(ns / 1e9);
        ts.tv_nsec = (long)fmod(ns, 1e9);
        pthread_cond_timedwait(&q->done_cv, &q->lock, &ts);
    }
    if (!q->done) {
        q->abandoned = true; /* the thread frees it */
        pthread_mutex_unlock(&q->lock);
        return -1;
    }
    pthread_mutex_unlock(&q->lock);
    *err = q->err;
    *sys_errno = q->sys_errno;
    *res = q->res;
    q->res = NULL;
    lookup_free(q);
    return *err ? 1 : 0;
}

/* getaddrinfo for host:port, bounded by the deadline; a temporary failure
 * (no DNS answer yet) is retried until then. */
static int resolve(const char *host, int port, double deadline, struct addrinfo **res)
{
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    int backoff = 50;
    for (;;) {
        int e = 0, se = 0;
        int r = lookup_bounded(host, service, deadline, res, &e, &se);
        if (r == 0)
            return 0;
        if (r < 0)
            return rt_fail(PGRT_ETIMEOUT, "MASTER_ADDR %s: the name lookup did not finish "
                           "within the time allowed (no name server answering?)", host);
        int left = ms_left(deadline);
        if (e != EAI_AGAIN || left == 0)
            return rt_fail(PGRT_EINVAL, "MASTER_ADDR %s does not resolve: %s", host,
                           e == EAI_SYSTEM ? strerror(se) : gai_strerror(e));
        sleep_ms(backoff < left ? backoff : left);
        backoff = backoff < 500 ? backoff * 2 : 1000;
    }
}

static void numeric_host(const struct sockaddr *sa, socklen_t len, char *buf, size_t buflen)
{
    if (getnameinfo(sa, len, buf, (socklen_t)buflen, NULL, 0, NI_NUMERICHOST) != 0)
        snprintf(buf, buflen, "?");
}

/* ------------------------------------------------ rank 0 */

typedef struct conn {
    int fd;        /* -1: a free slot */
    double expires;
    int rank;      /* the rank an OK answer is going to, else -1 */
    bool answering;
    size_t have;   /* bytes of the hello read, then of the answer sent */
    unsigned char buf[ANSWER_BYTES];
} conn;

typedef struct server {
    const pgrt_dist *d;
    const pgrt_comm_id *id;
    int lfd[MAX_LISTEN];
    int nl;
    conn c[MAX_CONNS];
    /* per rank: 0 not yet, 1 its answer being sent, 2 served */
    unsigned char *state;
    int left;
    /* refusals, for the message if the bound passes */
    int bad_world_n, bad_world, twice_n, twice, version_n;
} server;

static void conn_drop(server *s, conn *c)
{
    if (c->rank >= 0 && s->state[c->rank] == 1)
        s->state[c->rank] = 0; /* it will retry */
    close(c->fd);
    c->fd = -1;
}

/* A whole hello in c->buf: the answer to send. Garbage: false. */
static bool conn_hello(server *s, conn *c)
{
    const unsigned char *h = c->buf;
    if (memcmp(h, WIRE_MAGIC, 4) != 0)
        return false;
    uint32_t version = get32(h + 4), rank = get32(h + 8), world = get32(h + 12);
    uint32_t status = ST_OK, value = 0;
    if (version != WIRE_VERSION) {
        status = ST_VERSION, value = WIRE_VERSION;
        s->version_n++;
    } else if (world != (uint32_t)s->d->world) {
        status = ST_WORLD, value = (uint32_t)s->d->world;
        if (!s->bad_world_n++)
            s->bad_world = (int)(world > INT_MAX ? INT_MAX : world);
    } else if (rank < 1 || rank >= world) {
        status = ST_RANK, value = (uint32_t)s->d->world;
    } else if (s->state[rank]) {
        status = ST_TWICE, value = rank;
        if (!s->twice_n++)
            s->twice = (int)rank;
    } else {
        s->state[rank] = 1;
        c->rank = (int)rank;
    }
    memset(c->buf, 0, sizeof c->buf);
    memcpy(c->buf, WIRE_MAGIC, 4);
    put32(c->buf + 4, WIRE_VERSION);
    put32(c->buf + 8, status);
    put32(c->buf + 12, value);
    if (status == ST_OK)
        memcpy(c->buf + 16, s->id->bytes, PGRT_COMM_ID_BYTES);
    c->answering = true;
    c->have = 0;
    return true;
}

/* Progress on one connection; drops it when done or broken. */
static void conn_step(server *s, conn *c)
{
    if (!c->answering) {
        ssize_t n = recv(c->fd, c->buf + c->have, HELLO_BYTES - c->have, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        if (n <= 0) {
            conn_drop(s, c);
            return;
        }
        c->have += (size_t)n;
        if (c->have < HELLO_BYTES)
            return;
        if (!conn_hello(s, c)) {
            conn_drop(s, c);
            return;
        }
    }
    while (c->have < ANSWER_BYTES) {
        ssize_t n = send(c->fd, c->buf + c->have, ANSWER_BYTES - c->have, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            conn_drop(s, c);
            return;
        }
        c->have += (size_t)n;
    }
    if (c->rank >= 0) {
        s->state[c->rank] = 2;
        s->left--;
        c->rank = -1;
    }
    conn_drop(s, c);
}

static int serve_listen(server *s, double deadline)
{
    const pgrt_dist *d = s->d;
    char where[300], num[128];
    host_port(where, sizeof where, d->addr, d->port);
    struct addrinfo *res;
    int rc = resolve(d->addr, d->port, deadline, &res);
    if (rc)
        return rc;
    int inuse = 0, notavail = 0, other = 0, other_err = 0;
    char inuse_at[128] = "", notavail_at[128] = "", other_at[128] = "";
    const char *other_call = "";
    for (const struct addrinfo *ai = res; ai && s->nl < MAX_LISTEN; ai = ai->ai_next) {
        bool seen = false;
        for (const struct addrinfo *p = res; p != ai && !seen; p = p->ai_next)
            seen = p->ai_addrlen == ai->ai_addrlen &&
                   !memcmp(p->ai_addr, ai->ai_addr, ai->ai_addrlen);
        if (seen)
            continue; /* the same address twice (/etc/hosts): bind it once */
        numeric_host(ai->ai_addr, ai->ai_addrlen, num, sizeof num);
        int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        const char *call = "socket";
        if (fd >= 0) {
            set_flags(fd);
            int one = 1;
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            if (ai->ai_family == AF_INET6)
                setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
            call = "bind";
            if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
                call = "listen";
                if (listen(fd, SOMAXCONN) == 0) {
                    s->lfd[s->nl++] = fd;
                    continue;
                }
            }
        }
        int e = errno;
        if (fd >= 0)
            close(fd);
        if (e == EADDRINUSE) {
            if (!inuse++)
                snprintf(inuse_at, sizeof inuse_at, "%s", num);
        } else if (e == EADDRNOTAVAIL) {
            if (!notavail++)
                snprintf(notavail_at, sizeof notavail_at, "%s", num);
        } else if (!other++) {
            snprintf(other_at, sizeof other_at, "%s", num);
            other_err = e;
            other_call = call;
        }
    }
    freeaddrinfo(res);
    if (inuse)
        return rt_fail(PGRT_ECOMM,
                       "rank 0 cannot listen on %s: port %d is in use (at %s; another run, or "
                       "another program there?)",
                       where, d->port, inuse_at);
    if (s->nl > 0)
        return 0; /* some of the name's addresses: e.g. localhost without IPv6 */
    if (notavail) {
        char resolved[160] = "";
        if (strcmp(notavail_at, d->addr) != 0)
            snprintf(resolved, sizeof resolved, " (%s)", notavail_at);
        return rt_fail(PGRT_EINVAL,
                       "MASTER_ADDR %s%s is not an address of this host, but this is rank 0, "
                       "which listens there: run rank 0 on that host or name this one",
                       d->addr, resolved);
    }
    return rt_fail(PGRT_ECOMM, "rank 0 cannot listen on %s: %s %s: %s", where, other_call,
                   other_at, strerror(other_err));
}

static void serve_accept(server *s, int lfd, double *pause_until)
{
    for (;;) {
        int slot = 0;
        while (slot < MAX_CONNS && s->c[slot].fd >= 0)
            slot++;
        if (slot == MAX_CONNS)
            return;
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                *pause_until = rt_now_ms() + 100; /* the connection waits in the backlog */
            return;
        }
        set_flags(fd);
        conn *c = &s->c[slot];
        c->fd = fd;
        c->expires = rt_now_ms() + HELLO_MS;
        c->rank = -1;
        c->answering = false;
        c->have = 0;
    }
}

static int serve_timeout(const server *s, double timeout_s)
{
    const pgrt_dist *d = s->d;
    char where[300], secs[32], list[512];
    host_port(where, sizeof where, d->addr, d->port);
    seconds(secs, sizeof secs, timeout_s);
    size_t n = 0;
    int shown = 0, missing = 0;
    for (int r = 1; r < d->world; r++) {
        if (s->state[r] == 2)
            continue;
        if (missing++ < 16 && n < sizeof list)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%d", shown++ ? ", " : "", r);
    }
    if (missing > shown && n < sizeof list)
        snprintf(list + n, sizeof list - n, " and %d more", missing - shown);
    rt_fail(PGRT_ETIMEOUT, "%s %s of %d did not connect to %s within %s s",
            missing == 1 ? "rank" : "ranks", list, d->world, where, secs);
    if (s->bad_world_n)
        rt_msg_append("; refused %d connection%s saying WORLD_SIZE %d", s->bad_world_n,
                      s->bad_world_n == 1 ? "" : "s", s->bad_world);
    if (s->twice_n)
        rt_msg_append("; rank %d came twice (two processes with one RANK?)", s->twice);
    if (s->version_n)
        rt_msg_append("; refused %d connection%s of another protocol version (another build)",
                      s->version_n, s->version_n == 1 ? "" : "s");
    return PGRT_ETIMEOUT;
}

static int tcp_serve(const pgrt_dist *d, const pgrt_comm_id *id, double deadline,
                     double timeout_s)
{
    server s;
    memset(&s, 0, sizeof s);
    s.d = d;
    s.id = id;
    for (int i = 0; i < MAX_CONNS; i++)
        s.c[i].fd = -1;
    s.left = d->world - 1;
    s.state = calloc((size_t)d->world, 1);
    if (!s.state)
        return rt_fail(PGRT_ENOMEM, "pgrt_dist_exchange: no memory for %d ranks", d->world);
    int rc = serve_listen(&s, deadline);
    double pause_until = 0;
    while (!rc && s.left > 0) {
        int wait = ms_left(deadline);
        if (wait == 0) {
            rc = serve_timeout(&s, timeout_s);
            break;
        }
        struct pollfd pfd[MAX_LISTEN + MAX_CONNS];
        int who[MAX_LISTEN + MAX_CONNS]; /* >= 0: a connection's slot; else ~listener */
        int np = 0, nconn = 0;
        double now = rt_now_ms();
        for (int i = 0; i < MAX_CONNS; i++) {
            conn *c = &s.c[i];
            if (c->fd < 0)
                continue;
            if (now >= c->expires) {
                conn_drop(&s, c);
                continue;
            }
            nconn++;
            double until = c->expires - now + 1;
            if (until < wait)
                wait = (int)until;
            pfd[np] = (struct pollfd){c->fd, c->answering ? POLLOUT : POLLIN, 0};
            who[np++] = i;
        }
        if (nconn < MAX_CONNS) {
            if (now < pause_until) {
                double until = pause_until - now + 1;
                if (until < wait)
                    wait = (int)until;
            } else {
                for (int i = 0; i < s.nl; i++) {
                    pfd[np] = (struct pollfd){s.lfd[i], POLLIN, 0};
                    who[np++] = ~i;
                }
            }
        }
        int n = poll(pfd, (nfds_t)np, wait);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = rt_fail(PGRT_ECOMM, "rank 0 at %s:%d: poll: %s", d->addr, d->port,
                         strerror(errno));
            break;
        }
        for (int i = 0; i < np; i++) {
            if (!pfd[i].revents)
                continue;
            if (who[i] >= 0)
                conn_step(&s, &s.c[who[i]]);
            else
                serve_accept(&s, s.lfd[~who[i]], &pause_until);
        }
    }
    for (int i = 0; i < MAX_CONNS; i++)
        if (s.c[i].fd >= 0)
            conn_drop(&s, &s.c[i]);
    for (int i = 0; i < s.nl; i++)
        close(s.lfd[i]);
    free(s.state);
    return rc;
}

/* ------------------------------------------------ ranks 1 .. world-1 */

static bool retryable(int e)
{
    switch (e) {
    case ECONNREFUSED:
    case ETIMEDOUT:
    case ENETUNREACH:
    case EHOSTUNREACH:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case EAGAIN:
    case EINTR:
    case EADDRNOTAVAIL: /* out of local ports for a moment */
    case ENETDOWN:
#ifdef EHOSTDOWN
    case EHOSTDOWN:
#endif
        return true;
    }
    return false;
}

/* Wait until fd is ready for events or until the bound: 1 ready, 0 the
 * bound passed, -1 poll failed (errno). */
static int wait_fd(int fd, short events, double until)
{
    for (;;) {
        int ms = ms_left(until);
        struct pollfd p = {fd, events, 0};
        int n = poll(&p, 1, ms);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
        if (n == 0 && ms == 0)
            return 0;
    }
}

/* The outcome of one attempt: the answer, or why not (err: an errno, or 0
 * with what set). */
typedef struct attempt {
    int err;
    const char *what;
    bool fatal;
} attempt;

static bool attempt_fail(attempt *a, int fd, int err, const char *what)
{
    if (fd >= 0)
        close(fd);
    a->err = err;
    a->what = what;
    a->fatal = err && !retryable(err);
    return false;
}

static bool try_address(const struct addrinfo *ai, const unsigned char *hello,
                        unsigned char *answer, double deadline, attempt *a)
{
    int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0)
        return attempt_fail(a, -1, errno, "socket");
    set_flags(fd);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS && errno != EINTR)
            return attempt_fail(a, fd, errno, "connect");
        double until = rt_now_ms() + CONNECT_MS;
        int r = wait_fd(fd, POLLOUT, until < deadline ? until : deadline);
        if (r <= 0)
            return attempt_fail(a, fd, r == 0 ? ETIMEDOUT : errno, "connect");
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = errno;
        if (err)
            return attempt_fail(a, fd, err, "connect");
    }
    for (size_t off = 0; off < HELLO_BYTES;) {
        int r = wait_fd(fd, POLLOUT, deadline);
        if (r <= 0)
            return attempt_fail(a, fd, r == 0 ? ETIMEDOUT : errno, "send");
        ssize_t n = send(fd, hello + off, HELLO_BYTES - off, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            continue;
        if (n <= 0)
            return attempt_fail(a, fd, n < 0 ? errno : EPIPE, "send");
        off += (size_t)n;
    }
    for (size_t off = 0; off < ANSWER_BYTES;) {
        int r = wait_fd(fd, POLLIN, deadline);
        if (r <= 0)
            return attempt_fail(a, fd, r == 0 ? ETIMEDOUT : errno, "waiting for the answer");
        ssize_t n = recv(fd, answer + off, ANSWER_BYTES - off, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            continue;
        if (n < 0)
            return attempt_fail(a, fd, errno, "recv");
        if (n == 0)
            return attempt_fail(a, fd, 0, "the connection closed before the answer");
        off += (size_t)n;
    }
    close(fd);
    return true;
}

static int tcp_answer(const pgrt_dist *d, const unsigned char *ans, const char *where,
                      pgrt_comm_id *id)
{
    if (memcmp(ans, WIRE_MAGIC, 4) != 0)
        return rt_fail(PGRT_ECOMM,
                       "rank %d of %d: %s answered, but not as rank 0 of a run (another program "
                       "on that port?)",
                       d->rank, d->world, where);
    uint32_t version = get32(ans + 4), status = get32(ans + 8), value = get32(ans + 12);
    switch (status) {
    case ST_OK:
        if (version != WIRE_VERSION)
            break;
        memcpy(id->bytes, ans + 16, PGRT_COMM_ID_BYTES);
        return 0;
    case ST_WORLD:
        return rt_fail(PGRT_ECOMM, "rank 0 at %s expects WORLD_SIZE %u, this rank says %d", where,
                       (unsigned)value, d->world);
    case ST_TWICE:
        return rt_fail(PGRT_ECOMM,
                       "rank 0 at %s has already served a rank %d: two processes say RANK=%d",
                       where, d->rank, d->rank);
    case ST_RANK:
        return rt_fail(PGRT_ECOMM, "rank 0 at %s refuses rank %d of WORLD_SIZE %u", where,
                       d->rank, (unsigned)value);
    case ST_VERSION:
        return rt_fail(PGRT_ECOMM,
                       "rank 0 at %s speaks bootstrap protocol %u, rank %d speaks %u (two "
                       "different builds?)",
                       where, (unsigned)value, d->rank, WIRE_VERSION);
    }
    return rt_fail(PGRT_ECOMM, "rank %d of %d: %s answered status %u, version %u: not understood",
                   d->rank, d->world, where, (unsigned)status, (unsigned)version);
}

static int tcp_fetch(const pgrt_dist *d, pgrt_comm_id *id, double deadline, double timeout_s)
{
    char where[300];
    host_port(where, sizeof where, d->addr, d->port);
    unsigned char hello[HELLO_BYTES], answer[ANSWER_BYTES];
    memcpy(hello, WIRE_MAGIC, 4);
    put32(hello + 4, WIRE_VERSION);
    put32(hello + 8, (uint32_t)d->rank);
    put32(hello + 12, (uint32_t)d->world);
    attempt last = {ECONNREFUSED, "connect", false};
    int backoff = 20;
    for (;;) {
        struct addrinfo *res;
        int rc = resolve(d->addr, d->port, deadline, &res);
        if (rc)
            return rc;
        bool got = false, retry = false;
        attempt a = {0, "", false}, fatal = a;
        for (const struct addrinfo *ai = res; ai && !got; ai = ai->ai_next) {
            got = try_address(ai, hello, answer, deadline, &a);
            if (got)
                break;
            if (a.fatal)
                fatal = a;
            else
                retry = true, last = a;
        }
        freeaddrinfo(res);
        if (got)
            return tcp_answer(d, answer, where, id);
        if (!retry)
            return rt_fail(PGRT_ECOMM, "rank %d of %d cannot reach rank 0 at %s: %s: %s", d->rank,
                           d->world, where, fatal.what, strerror(fatal.err));
        int left = ms_left(deadline);
        if (left == 0) {
            char secs[32];
            seconds(secs, sizeof secs, timeout_s);
            if (last.err)
                return rt_fail(PGRT_ETIMEOUT,
                               "rank %d of %d: rank 0 at %s did not answer within %s s (%s: %s)",
                               d->rank, d->world, where, secs, last.what, strerror(last.err));
            return rt_fail(PGRT_ETIMEOUT,
                           "rank %d of %d: rank 0 at %s did not answer within %s s (%s)", d->rank,
                           d->world, where, secs, last.what);
        }
        /* spread a large world's retries a little */
        int nap = backoff + (int)((unsigned)d->rank * 7919u % 20u);
        sleep_ms(nap < left ? nap : left);
        backoff = backoff < 250 ? backoff * 2 : 500;
    }
}

/* ---------------------------------------------------------------- FILE */

static int path_code(int e)
{
    return e == ENOENT || e == ENOTDIR || e == ENAMETOOLONG || e == EISDIR ? PGRT_EINVAL
                                                                           : PGRT_ECOMM;
}

/* Split path into its directory (opened) and its last component. */
static int open_parent(const char *path, const char **base)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        *base = path;
        return open(".", O_RDONLY | O_CLOEXEC);
    }
    *base = slash + 1;
    char dir[sizeof ((pgrt_dist *)0)->path];
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    memcpy(dir, path, n);
    dir[n] = '\0';
    return open(dir, O_RDONLY | O_CLOEXEC);
}

static int file_publish(const pgrt_dist *d, const pgrt_comm_id *id)
{
    const char *path = d->path, *base;
    struct stat st;
    if (lstat(path, &st) == 0)
        return rt_fail(PGRT_EINVAL, "file:%s exists; it may be left from an earlier run: remove it",
                       path);
    if (errno != ENOENT)
        return rt_fail(path_code(errno), "file:%s: %s", path, strerror(errno));
    if (!path[0] || path[strlen(path) - 1] == '/')
        return rt_fail(PGRT_EINVAL, "file:%s names a directory, not a file", path);
    int dirfd = open_parent(path, &base);
    if (dirfd < 0)
        return rt_fail(path_code(errno), "file:%s: its directory: %s", path, strerror(errno));
    unsigned char head[16];
    memcpy(head, WIRE_MAGIC, 4);
    put32(head + 4, WIRE_VERSION);
    put32(head + 8, 0);
    put32(head + 12, (uint32_t)d->world);
    const pgrt_span parts[2] = {{head, sizeof head}, {id->bytes, PGRT_COMM_ID_BYTES}};
    char tmp[PGRT_TEMP_NAME_MAX];
    int e = pgrt_temp_write(dirfd, tmp, parts, 2, -1, true);
    if (e) {
        close(dirfd);
        return rt_fail(path_code(e), "file:%s: cannot write a temporary beside it: %s", path,
                       strerror(e));
    }
    /* A link, unlike a rename, never replaces a file that another rank 0
     * made in the meantime. Filesystems without links get the rename. */
    int rc = 0;
    if (linkat(dirfd, tmp, dirfd, base, 0) != 0) {
        e = errno;
        if (e == EEXIST)
            rc = rt_fail(PGRT_EINVAL,
                         "file:%s exists; it may be left from an earlier run: remove it", path);
        else if (fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0)
            rc = rt_fail(PGRT_EINVAL,
                         "file:%s exists; it may be left from an earlier run: remove it", path);
        else if (renameat(dirfd, tmp, dirfd, base) != 0)
            rc = rt_fail(path_code(errno), "file:%s: cannot rename its temporary into place: %s",
                         path, strerror(errno));
        else
            tmp[0] = '\0';
    }
    if (tmp[0])
        unlinkat(dirfd, tmp, 0);
    if (!rc)
        fsync(dirfd); /* the name reaches the disk too; visibility needs no more */
    close(dirfd);
    return rc;
}

static int file_fetch(const pgrt_dist *d, pgrt_comm_id *id, double deadline, double timeout_s)
{
    const char *path = d->path;
    const char *why = "it does not exist";
    int backoff = 10;
    for (;;) {
        /* O_NONBLOCK: a FIFO at the path must not block the open. */
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0 && errno != ENOENT)
            return rt_fail(path_code(errno), "rank %d of %d: file:%s: %s", d->rank, d->world, path,
                           strerror(errno));
        if (fd >= 0) {
            struct stat st;
            if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
                close(fd);
                return rt_fail(PGRT_ECOMM, "rank %d of %d: file:%s is not a regular file",
                               d->rank, d->world, path);
            }
            unsigned char buf[FILE_BYTES + 1];
            size_t n = 0;
            int err = 0;
            while (n < sizeof buf) {
                ssize_t r = read(fd, buf + n, sizeof buf - n);
                if (r < 0 && errno == EINTR)
                    continue;
                if (r < 0)
                    err = errno;
                if (r <= 0)
                    break;
                n += (size_t)r;
            }
            close(fd);
            if (err)
                return rt_fail(PGRT_ECOMM, "rank %d of %d: file:%s: read: %s", d->rank, d->world,
                               path, strerror(err));
            if (memcmp(buf, WIRE_MAGIC, n < 4 ? n : 4) != 0)
                return rt_fail(PGRT_ECOMM, "rank %d of %d: file:%s is not a rendezvous file",
                               d->rank, d->world, path);
            if (n > FILE_BYTES)
                return rt_fail(PGRT_ECOMM,
                               "rank %d of %d: file:%s is longer than a rendezvous file (%d bytes)",
                               d->rank, d->world, path, FILE_BYTES);
            if (n == FILE_BYTES) {
                uint32_t version = get32(buf + 4), world = get32(buf + 12);
                if (version != WIRE_VERSION)
                    return rt_fail(PGRT_ECOMM,
                                   "rank %d of %d: file:%s is of bootstrap protocol %u, this "
                                   "rank speaks %u (two different builds?)",
                                   d->rank, d->world, path, (unsigned)version, WIRE_VERSION);
                if (world != (uint32_t)d->world)
                    return rt_fail(PGRT_ECOMM,
                                   "file:%s says WORLD_SIZE %u, this rank (%d) says %d (or the "
                                   "file is left from an earlier run)",
                                   path, (unsigned)world, d->rank, d->world);
                memcpy(id->bytes, buf + 16, PGRT_COMM_ID_BYTES);
                return 0;
            }
            /* Short: a filesystem that shows the name before the data. */
            why = "it is incomplete";
        }
        int left = ms_left(deadline);
        if (left == 0) {
            char secs[32];
            seconds(secs, sizeof secs, timeout_s);
            return rt_fail(PGRT_ETIMEOUT,
                           "rank %d of %d: rank 0 did not publish file:%s within %s s (%s)",
                           d->rank, d->world, path, secs, why);
        }
        sleep_ms(backoff < left ? backoff : left);
        backoff = backoff < 125 ? backoff * 2 : 250;
    }
}

/* ---------------------------------------------------------------- the API */

int pgrt_dist_exchange(const pgrt_dist *d, pgrt_comm_id *id, double timeout_s)
{
    RT_NONNULL(__func__, d, "d");
    RT_NONNULL(__func__, id, "id");
    if (!(timeout_s > 0) || !isfinite(timeout_s))
        return rt_fail(PGRT_EINVAL,
                       "pgrt_dist_exchange: timeout_s %g: a bound is a finite number of seconds "
                       "above 0",
                       timeout_s);
    int rc = check_dist(d);
    if (rc || d->method == PGRT_DIST_SINGLE)
        return rc;
    double deadline = rt_now_ms() + timeout_s * 1e3;
    if (d->method == PGRT_DIST_TCP)
        return d->rank == 0 ? tcp_serve(d, id, deadline, timeout_s)
                            : tcp_fetch(d, id, deadline, timeout_s);
    return d->rank == 0 ? file_publish(d, id) : file_fetch(d, id, deadline, timeout_s);
}

int pgrt_dist_finish(const pgrt_dist *d)
{
    RT_NONNULL(__func__, d, "d");
    if (d->method != PGRT_DIST_FILE || d->rank != 0)
        return 0;
    if (!memchr(d->path, '\0', sizeof d->path) || !d->path[0])
        return rt_fail(PGRT_EINVAL, "pgrt_dist: FILE with no path");
    if (unlink(d->path) != 0 && errno != ENOENT)
        return rt_fail(PGRT_ECOMM, "cannot remove file:%s: %s", d->path, strerror(errno));
    return 0;
}
