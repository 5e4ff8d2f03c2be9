/* SPDX-License-Identifier: MIT */
/*
 * The on-disk cubin cache: a JIT's result kept across processes, so that a
 * new process loads machine code instead of compiling PTX again, whatever
 * the driver's own cache is set to (CUDA_CACHE_DISABLE, its size cap).
 *
 * An entry is one file, <sha256 of the key>.cubin, the key being the PTX
 * text, the compute capability, the driver version and the JIT options.
 * The file is a fixed header (magic, format version, the key's hash, the
 * payload length, the payload's SHA-256) and the cubin. Writers create a
 * temporary file with O_EXCL in the same directory and rename it over the
 * entry, so readers in any process see a whole old entry, a whole new one
 * or none; a reader that finds a short or corrupt file (a crash mid-write
 * without fsync, a full disk, a bit flip) compiles and replaces it and
 * never hands it to the driver. A hit touches the file's mtime; when the
 * directory grows past its cap the oldest entries go first.
 *
 * A cubin from disk runs as this process, and the key and the checksum
 * are no secret: the directory and every entry loaded must be the
 * effective user's alone (unsafe_why). A directory that is not turns the
 * cache off; an entry that is not is compiled and replaced.
 *
 * Nothing here fails a load: the cache is an optimisation, and a directory
 * that cannot be written (read-only, full) turns writing off with one line
 * on stderr.
 */
#include "rt_internal.h"
#include "sha256.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define CUBIN_MAGIC "PGCUBIN"   /* 8 bytes with the NUL */
#define CUBIN_FORMAT 1u
#define CUBIN_HEADER 88u        /* magic 8, format 4, header 4, key 32, length 8, sum 32 */
#define CUBIN_MAX (256u << 20)  /* larger files are not ours */
#define CACHE_DEFAULT_MB 256
#define TMP_STALE_S 3600        /* temporaries older than this were left by a crash */

/* The only names the cache creates, '#' standing for a lowercase hex
 * digit: an entry (the key's SHA-256) and a writer's temporary (the
 * entry's first 16 digits and 10 random ones). Eviction deletes files of
 * these names and no others: the directory may be $HOME or ".". */
#define HEX16 "################"
#define ENTRY_PATTERN HEX16 HEX16 HEX16 HEX16 ".cubin"
#define TMP_PREFIX ".ptxgen-cubin-"
#define TMP_PATTERN TMP_PREFIX HEX16 ".##########.tmp"
#define ENTRY_NAME_MAX sizeof ENTRY_PATTERN
#define TMP_NAME_MAX sizeof TMP_PATTERN

/* ---------------------------------------------------------------- the cache object */

struct rt_cubin_cache {
    char dir[PATH_MAX];
    uint64_t max_bytes;
    /* The JIT options that shape the code, as they enter the key. */
    const char *jit_opts;
    uid_t uid; /* who must own the directory and every entry loaded */

    pthread_mutex_t lock; /* everything below */
    int dfd;              /* the directory, checked (dir_fd); -1 until it exists */
    bool refused;         /* the directory failed the check: no reads, no writes */
    bool writable;        /* cleared, with one logged line, when a write fails */
    bool foreign_told;    /* an entry not ours was skipped, and said so */
    bool sized;           /* bytes is an estimate from a scan plus our writes */
    uint64_t bytes;
    uint64_t hits, misses, rejected, writes;
};

static bool env_off(const char *v)
{
    return v && (!strcmp(v, "0") || !strcmp(v, "off") || !strcmp(v, "no") || !strcmp(v, "false"));
}

/* $PTXGEN_CACHE_DIR, else $XDG_CACHE_HOME/ptxgen, else ~/.cache/ptxgen;
 * false when none can be formed. */
static bool cache_dir(char *out, size_t len)
{
    const char *d = getenv("PTXGEN_CACHE_DIR");
    int n;
    if (d && *d)
        n = snprintf(out, len, "%s", d);
    else if ((d = getenv("XDG_CACHE_HOME")) && d[0] == '/')
        n = snprintf(out, len, "%s/ptxgen", d);
    else if ((d = getenv("HOME")) && *d)
        n = snprintf(out, len, "%s/.cache/ptxgen", d);
    else
        return false;
    return n > 0 && (size_t)n < len;
}

/* ---------------------------------------------------------------- whose files */

/* A cubin from the directory runs on the GPU as this process, and its key
 * and checksum are no secret: an entry another local user could have
 * written passes every other check. So the directory and each entry
 * loaded must be owned by the effective user and writable by no one else
 * (a sticky, world-writable directory such as /tmp included: anyone may
 * create names in it). why is left empty when sb passes, else says why
 * not, for the log. */
static void unsafe_why(const struct stat *sb, uid_t uid, char *why, size_t len)
{
    why[0] = '\0';
    if (sb->st_uid != uid)
        snprintf(why, len, "owned by uid %lu, not by uid %lu", (unsigned long)sb->st_uid,
                 (unsigned long)uid);
    else if (sb->st_mode & (S_IWGRP | S_IWOTH))
        snprintf(why, len, "writable by group or others (mode %04o)",
                 (unsigned)(sb->st_mode & 07777));
}

/* The directory at path, opened and checked (unsafe_why): the descriptor,
 * else -1 with errno set and, when the directory is there but not safe,
 * why saying so. A link as the last component is followed only if it is
 * ours too: another user's link in a sticky /tmp could point the cache at
 * any directory of ours. */
static int dir_open(const char *path, uid_t uid, char *why, size_t len)
{
    why[0] = '\0';
    struct stat sb;
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && (errno == ELOOP || errno == ENOTDIR)) {
        int err = errno;
        if (lstat(path, &sb) != 0 || !S_ISLNK(sb.st_mode)) {
            errno = err;
            return -1;
        }
        if (sb.st_uid != uid) {
            snprintf(why, len, "a link owned by uid %lu, not by uid %lu",
                     (unsigned long)sb.st_uid, (unsigned long)uid);
            errno = EPERM;
            return -1;
        }
        fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    if (fd < 0)
        return -1;
    if (fstat(fd, &sb) != 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    unsafe_why(&sb, uid, why, len);
    if (why[0]) {
        close(fd);
        errno = EPERM;
        return -1;
    }
    return fd;
}

/* Called with c->lock held: the first failure to write logs one line and
 * turns writing off for the rest of the context's life. */
static void write_failed(rt_cubin_cache *c, const char *what, int err)
{
    if (!c->writable)
        return;
    c->writable = false;
    rt_log("cubin cache: %s %s: %s; continuing without writing the cache", what, c->dir,
           strerror(err));
}

/* Missing components are made private: the last one must pass dir_open's
 * check, and the umask can only take bits away. */
static int mkdir_p(const char *dir)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

/* The directory's descriptor, opened and checked once and kept, so that
 * every later open, rename and unlink is relative to the directory that
 * was checked, whatever happens to its path. With create, a missing
 * directory is made (mkdir_p), a failure logged as a failed write. -1
 * while it does not exist, and for good once it failed the check, which
 * logs one line. Called with c->lock held. */
static int dir_fd(rt_cubin_cache *c, bool create)
{
    if (c->dfd >= 0 || c->refused)
        return c->dfd;
    char why[128];
    int fd = dir_open(c->dir, c->uid, why, sizeof why);
    if (fd < 0 && !why[0] && create) {
        if (mkdir_p(c->dir) != 0) {
            write_failed(c, "cannot create", errno);
            return -1;
        }
        fd = dir_open(c->dir, c->uid, why, sizeof why);
        if (fd < 0 && !why[0]) {
            write_failed(c, "cannot open", errno);
            return -1;
        }
    }
    if (fd < 0 && why[0]) {
        c->refused = true;
        rt_log("cubin cache: %s is %s; not using it (the cache must be a directory of "
               "yours that no one else can write)",
               c->dir, why);
    }
    c->dfd = fd;
    return fd;
}

void rt_cubin_cache_open(pgrt_ctx *ctx)
{
    ctx->disk = NULL;
    if (env_off(getenv("PTXGEN_CACHE")))
        return;
    if (!rt_have_linker(ctx))
        return; /* no way to get a cubin out of the driver */
    rt_cubin_cache *c = calloc(1, sizeof *c);
    if (!c)
        return;
    if (!cache_dir(c->dir, sizeof c->dir) || pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c);
        return;
    }
    /* Fractions are allowed ("0.5"): tests cap the directory at a few
     * entries. Anything unparsable keeps the default. */
    double mb = CACHE_DEFAULT_MB;
    const char *v = getenv("PTXGEN_CACHE_MAX_MB");
    if (v && *v) {
        char *end;
        double x = strtod(v, &end);
        if (*end == '\0' && x >= 0 && x < 1e12)
            mb = x;
    }
    c->max_bytes = (uint64_t)(mb * 1048576.0);
    /* Direct-load devices take no JIT options (context.c says why); the
     * log buffers of the others do not shape the code. */
    c->jit_opts = ctx->info.direct_load ? "link;no-options" : "link;logs;O-default";
    c->uid = geteuid();
    c->dfd = -1;
    c->writable = true;
    /* A directory that fails the check turns the cache off (said once); a
     * missing one is made by the first write. No other thread knows c yet:
     * no lock. */
    (void)dir_fd(c, false);
    if (c->refused) {
        pthread_mutex_destroy(&c->lock);
        free(c);
        return;
    }
    ctx->disk = c;
}

void rt_cubin_cache_close(pgrt_ctx *ctx)
{
    rt_cubin_cache *c = ctx->disk;
    if (!c)
        return;
    if (c->dfd >= 0)
        close(c->dfd);
    pthread_mutex_destroy(&c->lock);
    free(c);
    ctx->disk = NULL;
}

void rt_cubin_cache_stats(pgrt_ctx *ctx, pgrt_cache_stats *out)
{
    rt_cubin_cache *c = ctx->disk;
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    out->disk_hits = c->hits;
    out->disk_misses = c->misses;
    out->disk_rejected = c->rejected;
    out->disk_writes = c->writes;
    pthread_mutex_unlock(&c->lock);
}

/* ---------------------------------------------------------------- entries */

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The key: everything the driver's output depends on, each field ended
 * by a NUL so that no two keys run together. */
static void make_key(const pgrt_ctx *ctx, const char *ptx, unsigned char key[32])
{
    char meta[160];
    int n = snprintf(meta, sizeof meta, "ptxgen-cubin-%u%ccc=%d.%d%cdriver=%d%cjit=%s%c",
                     CUBIN_FORMAT, 0, ctx->info.cc_major, ctx->info.cc_minor, 0,
                     ctx->info.driver_version, 0, ctx->disk->jit_opts, 0);
    pgrt_sha256 s;
    pgrt_sha256_init(&s);
    pgrt_sha256_add(&s, meta, n > 0 ? (size_t)n : 0);
    pgrt_sha256_add(&s, ptx, strlen(ptx) + 1);
    pgrt_sha256_end(&s, key);
}

static void entry_name(const unsigned char key[32], char name[ENTRY_NAME_MAX])
{
    for (int i = 0; i < 32; i++)
        snprintf(name + 2 * i, 3, "%02x", key[i]);
    memcpy(name + 64, ".cubin", sizeof ".cubin");
}

static bool read_all(int fd, unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

static bool write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t r = write(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            if (r == 0)
                errno = ENOSPC;
            return false;
        }
        p += r;
        n -= (size_t)r;
    }
    return true;
}

typedef enum { ENTRY_NONE, ENTRY_OK, ENTRY_BAD, ENTRY_FOREIGN } entry_state;

/* Read and check the entry name of directory dfd. ENTRY_OK: *data
 * (malloc'd, the caller's) and *len hold the cubin. ENTRY_FOREIGN: the
 * file is not ours alone (unsafe_why, in why), whatever it holds. The
 * checks are made on the descriptor read, never on the name (a file
 * swapped in between is what they are for); a link is not followed, and a
 * FIFO does not block the open. */
static entry_state entry_read(const rt_cubin_cache *c, int dfd, const char *name,
                              const unsigned char key[32], unsigned char **data, size_t *len,
                              char *why, size_t whylen)
{
    int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return errno == ENOENT ? ENTRY_NONE : ENTRY_BAD;
    entry_state st = ENTRY_BAD;
    unsigned char *buf = NULL;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        goto out;
    unsafe_why(&sb, c->uid, why, whylen);
    if (why[0]) {
        st = ENTRY_FOREIGN;
        goto out;
    }
    if (sb.st_size < (off_t)CUBIN_HEADER || sb.st_size > (off_t)CUBIN_HEADER + CUBIN_MAX)
        goto out;
    size_t size = (size_t)sb.st_size;
    buf = malloc(size);
    if (!buf || !read_all(fd, buf, size))
        goto out;
    unsigned char sum[32];
    uint64_t n = get_u64(buf + 48);
    if (memcmp(buf, CUBIN_MAGIC, 8) != 0 || get_u32(buf + 8) != CUBIN_FORMAT ||
        get_u32(buf + 12) != CUBIN_HEADER || memcmp(buf + 16, key, 32) != 0 ||
        n != size - CUBIN_HEADER)
        goto out;
    pgrt_sha256_of(buf + CUBIN_HEADER, (size_t)n, sum);
    if (memcmp(sum, buf + 56, 32) != 0)
        goto out;
    /* Least recently used goes first: a hit makes the entry new again
     * (fails quietly on a directory we may only read). */
    (void)futimens(fd, NULL);
    memmove(buf, buf + CUBIN_HEADER, (size_t)n);
    *data = buf;
    *len = (size_t)n;
    buf = NULL;
    st = ENTRY_OK;
out:
    free(buf);
    close(fd);
    return st;
}

typedef struct dir_entry {
    char name[ENTRY_NAME_MAX];
    time_t mtime;
    long nsec;
    uint64_t bytes;
} dir_entry;

static int older(const void *a, const void *b)
{
    const dir_entry *x = a, *y = b;
    if (x->mtime != y->mtime)
        return x->mtime < y->mtime ? -1 : 1;
    return x->nsec < y->nsec ? -1 : x->nsec > y->nsec;
}

/* Whether name is one the pattern describes, exactly. */
static bool name_is(const char *name, const char *pattern)
{
    for (; *pattern; name++, pattern++) {
        bool ok = *pattern == '#' ? (*name >= '0' && *name <= '9') || (*name >= 'a' && *name <= 'f')
                                  : *name == *pattern;
        if (!ok)
            return false;
    }
    return *name == '\0';
}

/* Sum the entries, drop stale temporaries and, past the cap, the least
 * recently used entries. Called with c->lock held; other processes may be
 * doing the same: an entry that vanished under us is simply gone. */
static void evict(rt_cubin_cache *c)
{
    /* A descriptor of its own: a dup would share the read position. */
    int fd = openat(c->dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
    if (!dir) {
        if (fd >= 0)
            close(fd);
        return;
    }
    size_t n = 0, cap = 0;
    dir_entry *list = NULL;
    uint64_t total = 0;
    time_t now = time(NULL);
    int dfd = dirfd(dir);
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        size_t len = strlen(de->d_name);
        struct stat sb;
        bool tmp = name_is(de->d_name, TMP_PATTERN);
        if (!tmp && !name_is(de->d_name, ENTRY_PATTERN))
            continue;
        if (fstatat(dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
            continue;
        if (tmp) {
            if (now - sb.st_mtime > TMP_STALE_S)
                (void)unlinkat(dfd, de->d_name, 0);
            continue;
        }
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 64;
            dir_entry *nl = realloc(list, ncap * sizeof *nl);
            if (!nl)
                break;
            list = nl;
            cap = ncap;
        }
        dir_entry *e = &list[n++];
        memcpy(e->name, de->d_name, len + 1);
        e->mtime = sb.st_mtim.tv_sec;
        e->nsec = sb.st_mtim.tv_nsec;
        e->bytes = (uint64_t)sb.st_size;
        total += e->bytes;
    }
    if (total > c->max_bytes && n > 0) {
        qsort(list, n, sizeof *list, older);
        for (size_t i = 0; i < n && total > c->max_bytes; i++)
            if (unlinkat(dfd, list[i].name, 0) == 0 || errno == ENOENT)
                total -= list[i].bytes;
    }
    closedir(dir);
    free(list);
    c->bytes = total;
    c->sized = true;
}

/* A new temporary for the entry named entry, in directory dfd, its name in
 * tmp: TMP_PATTERN, the random digits drawn again should the name be
 * taken. Not a secret: O_EXCL and O_NOFOLLOW make a guessed name harmless;
 * the digits keep writers of the same entry (threads, processes) apart.
 * Private (0600), as the entry it becomes. Returns the descriptor, or -1
 * with errno set. */
static int tmp_create(int dfd, const char *entry, char tmp[TMP_NAME_MAX])
{
    static atomic_uint serial;
    for (int attempt = 0; attempt < 16; attempt++) {
        struct {
            long pid;
            unsigned serial;
            struct timespec ts;
            const void *where;
        } seed;
        memset(&seed, 0, sizeof seed);
        seed.pid = (long)getpid();
        seed.serial = atomic_fetch_add(&serial, 1);
        clock_gettime(CLOCK_REALTIME, &seed.ts);
        seed.where = &seed;
        unsigned char r[32];
        pgrt_sha256_of(&seed, sizeof seed, r);
        snprintf(tmp, TMP_NAME_MAX, TMP_PREFIX "%.16s.%02x%02x%02x%02x%02x.tmp", entry, r[0], r[1],
                 r[2], r[3], r[4]);
        int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    errno = EEXIST;
    return -1;
}

/* Store the cubin as entry name: temporary file, then rename. */
static void entry_write(rt_cubin_cache *c, const char *name, const unsigned char key[32],
                        const void *cubin, size_t len)
{
    pthread_mutex_lock(&c->lock);
    int dfd = c->writable ? dir_fd(c, true) : -1;
    pthread_mutex_unlock(&c->lock);
    if (dfd < 0)
        return;

    unsigned char head[CUBIN_HEADER];
    memset(head, 0, sizeof head);
    memcpy(head, CUBIN_MAGIC, 8);
    put_u32(head + 8, CUBIN_FORMAT);
    put_u32(head + 12, CUBIN_HEADER);
    memcpy(head + 16, key, 32);
    put_u64(head + 48, len);
    pgrt_sha256_of(cubin, len, head + 56);

    char tmp[TMP_NAME_MAX];
    int fd = tmp_create(dfd, name, tmp);
    int err = 0;
    const char *what = "cannot write to";
    if (fd < 0) {
        err = errno;
    } else {
        if (!write_all(fd, head, sizeof head) || !write_all(fd, cubin, len))
            err = errno;
        if (close(fd) != 0 && !err)
            err = errno;
        if (!err && renameat(dfd, tmp, dfd, name) != 0) {
            err = errno;
            what = "cannot rename into";
        }
        if (err)
            (void)unlinkat(dfd, tmp, 0);
    }
    pthread_mutex_lock(&c->lock);
    if (err) {
        write_failed(c, what, err);
    } else {
        c->writes++;
        /* One scan a process sizes the directory; our writes add to it, and
         * only crossing the cap scans again. */
        if (!c->sized)
            evict(c);
        else
            c->bytes += CUBIN_HEADER + len;
        if (c->bytes > c->max_bytes)
            evict(c);
    }
    pthread_mutex_unlock(&c->lock);
}

/* ---------------------------------------------------------------- loading */

struct rt_cubin_pending {
    char name[ENTRY_NAME_MAX];
    unsigned char key[32];
    size_t len;
    unsigned char cubin[]; /* len bytes */
};

void rt_cubin_write(pgrt_ctx *ctx, rt_cubin_pending *p)
{
    if (!p)
        return;
    if (ctx->disk)
        entry_write(ctx->disk, p->name, p->key, p->cubin, p->len);
    free(p);
}

int rt_cubin_load(pgrt_ctx *ctx, const char *ptx, const char *what, CUmodule *out,
                  rt_load_info *info)
{
    rt_cubin_cache *c = ctx->disk;
    int rc = rt_ctx_bind(ctx);
    if (rc)
        return rc;
    unsigned char key[32];
    make_key(ctx, ptx, key);
    char name[ENTRY_NAME_MAX];
    entry_name(key, name);

    double t0 = rt_now_ms();
    unsigned char *data = NULL;
    size_t len = 0;
    char why[128] = "";
    pthread_mutex_lock(&c->lock);
    int dfd = dir_fd(c, false);
    pthread_mutex_unlock(&c->lock);
    entry_state st =
        dfd < 0 ? ENTRY_NONE : entry_read(c, dfd, name, key, &data, &len, why, sizeof why);
    if (st == ENTRY_OK) {
        rc = rt_module_load_cubin(ctx, data, what, out);
        free(data);
        double ms = rt_now_ms() - t0;
        if (rc == 0) {
            pthread_mutex_lock(&c->lock);
            c->hits++;
            pthread_mutex_unlock(&c->lock);
            info->from_disk = true;
            info->load_ms = ms;
            info->cubin_bytes = len;
            return 0;
        }
        /* A checked entry the driver refuses (another driver wrote it
         * under a key we would not give it): compile and replace it. */
        st = ENTRY_BAD;
    }
    pthread_mutex_lock(&c->lock);
    c->misses++;
    c->rejected += st != ENTRY_NONE;
    if (st == ENTRY_FOREIGN && !c->foreign_told) {
        /* Once: a directory full of such entries must not flood the
         * log. The entry is compiled and replaced like a damaged one. */
        c->foreign_told = true;
        rt_log("cubin cache: %s/%s is %s; not loading it (nor, silently, any other entry "
               "not ours)",
               c->dir, name, why);
    }
    pthread_mutex_unlock(&c->lock);

    void *cubin = NULL;
    double t1 = rt_now_ms();
    rc = rt_jit_link(ctx, ptx, what, &cubin, &len);
    double t2 = rt_now_ms();
    info->jit_ms = t2 - t1;
    if (rc)
        return rc;
    rc = rt_module_load_cubin(ctx, cubin, what, out);
    info->load_ms = rt_now_ms() - t2;
    info->cubin_bytes = len;
    if (rc == 0 && info->defer) {
        /* The pre-warm writes it when its JIT work has run out, off the
         * critical path; without memory for the copy it is written now. */
        rt_cubin_pending *p = malloc(sizeof *p + len);
        if (p) {
            memcpy(p->name, name, sizeof p->name);
            memcpy(p->key, key, sizeof key);
            p->len = len;
            memcpy(p->cubin, cubin, len);
            info->pending = p;
            free(cubin);
            return 0;
        }
    }
    if (rc == 0)
        entry_write(c, name, key, cubin, len);
    free(cubin);
    return rc;
}
