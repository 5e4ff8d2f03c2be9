/* SPDX-License-Identifier: MIT */
/*
 * Safe replacement of files (safe_write.h states the contract): exclusive
 * temporaries renamed over the target, the checks that tell beforehand
 * whether a replacement can succeed, and a data file and its marker
 * replaced as a pair. libc and POSIX only.
 */
#include "safe_write.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TEMP_PREFIX ".ptxgen-"
#define TEMP_SUFFIX ".tmp"
_Static_assert(sizeof TEMP_PREFIX - 1 + 10 + sizeof TEMP_SUFFIX == PGRT_TEMP_NAME_MAX,
               "temporary name length");

/* A fresh temporary name in name; 0 when the caller should try another. */
static void temp_name(char name[PGRT_TEMP_NAME_MAX])
{
    static const char alphabet[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    static _Atomic unsigned long long counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    /* Not a secret: O_EXCL|O_NOFOLLOW (or mkdir) make a guessed name
     * harmless; the randomness only keeps collisions (and retries) rare. */
    unsigned long long x = (unsigned long long)ts.tv_nsec ^
                           ((unsigned long long)ts.tv_sec << 30) ^
                           ((unsigned long long)getpid() << 16) ^ (uintptr_t)name;
    /* splitmix64 of the seed and a process-wide counter */
    unsigned long long z = x + 0x9e3779b97f4a7c15ULL * (atomic_fetch_add(&counter, 1) + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    char *p = name;
    memcpy(p, TEMP_PREFIX, sizeof TEMP_PREFIX - 1);
    p += sizeof TEMP_PREFIX - 1;
    for (int i = 0; i < 10; i++, z /= sizeof alphabet - 1)
        *p++ = alphabet[z % (sizeof alphabet - 1)];
    memcpy(p, TEMP_SUFFIX, sizeof TEMP_SUFFIX);
}

int pgrt_temp_create(int dirfd, char name[PGRT_TEMP_NAME_MAX])
{
    for (int attempt = 0; attempt < 1000; attempt++) {
        temp_name(name);
        int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    errno = EEXIST;
    return -1;
}

int pgrt_temp_dir_create(int dirfd, char name[PGRT_TEMP_NAME_MAX])
{
    for (int attempt = 0; attempt < 1000; attempt++) {
        temp_name(name);
        if (mkdirat(dirfd, name, 0755) == 0)
            return 0;
        if (errno != EEXIST)
            return errno ? errno : EIO;
    }
    return EEXIST;
}

int pgrt_fd_write_all(int fd, const void *data, size_t n)
{
    const char *c = data;
    while (n) {
        ssize_t w = write(fd, c, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno ? errno : EIO;
        }
        if (w == 0)
            return EIO;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int pgrt_temp_write(int dirfd, char tmp[PGRT_TEMP_NAME_MAX], const pgrt_span *parts,
                    size_t nparts, long mode, bool sync)
{
    int fd = pgrt_temp_create(dirfd, tmp);
    if (fd < 0)
        return errno ? errno : EIO;
    int e = mode >= 0 && fchmod(fd, (mode_t)mode) != 0 ? errno : 0;
    for (size_t i = 0; i < nparts && !e; i++)
        e = pgrt_fd_write_all(fd, parts[i].p, parts[i].n);
    if (!e && sync && fsync(fd) != 0)
        e = errno ? errno : EIO;
    if (close(fd) != 0 && !e && errno != EINTR)
        e = errno ? errno : EIO;
    if (e)
        unlinkat(dirfd, tmp, 0);
    return e;
}

int pgrt_file_replace(const char *path, const pgrt_span *parts, size_t nparts, bool sync)
{
    if (!path || !path[0])
        return ENOENT;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!base[0])
        return EISDIR; /* "dir/" names a directory, not a file in it */
    long mode = -1;
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return EISDIR;
        if (S_ISREG(st.st_mode))
            mode = (long)(st.st_mode & 07777);
    } else if (errno != ENOENT) {
        return errno ? errno : EIO;
    }
    size_t dl = !slash ? 1 : slash == path ? 1 : (size_t)(slash - path);
    char *dir = malloc(dl + 1);
    if (!dir)
        return ENOMEM;
    memcpy(dir, !slash ? "." : path, dl);
    dir[dl] = '\0';
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (dirfd < 0)
        return errno ? errno : EIO;
    char tmp[PGRT_TEMP_NAME_MAX];
    int e = pgrt_temp_write(dirfd, tmp, parts, nparts, mode, sync);
    if (!e && renameat(dirfd, tmp, dirfd, base) != 0) {
        e = errno ? errno : EIO;
        unlinkat(dirfd, tmp, 0);
    }
    /* the rename itself must reach the disk */
    if (!e && sync)
        (void)fsync(dirfd);
    close(dirfd);
    return e;
}

/* ------------------------------------------------------ directory checks */

/* path split into its directory (into dir, "." for a bare name) and its
 * last component (*base, pointing into path); trailing slashes are not
 * part of the name. ENOENT for "", ENAMETOOLONG when dir does not fit. */
static int split_path(const char *path, char *dir, size_t cap, const char **base, size_t *blen)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    if (n == 0)
        return ENOENT;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/')
        b--;
    *base = path + b;
    *blen = n - b;
    size_t dl = b == 0 ? 1 : b == 1 ? 1 : b - 1;
    if (dl + 1 > cap)
        return ENAMETOOLONG;
    memcpy(dir, b == 0 ? "." : path, dl);
    dir[dl] = '\0';
    return 0;
}

/* A temporary file (or directory) made and removed in dirfd: the one sure
 * test that the directory takes new entries (permissions, ACLs, read-only
 * mounts, quotas on inodes). */
static int try_create(int dirfd, bool directory)
{
    char tmp[PGRT_TEMP_NAME_MAX];
    if (directory) {
        int e = pgrt_temp_dir_create(dirfd, tmp);
        if (e)
            return e;
        unlinkat(dirfd, tmp, AT_REMOVEDIR);
        return 0;
    }
    int fd = pgrt_temp_create(dirfd, tmp);
    if (fd < 0)
        return errno ? errno : EIO;
    close(fd);
    unlinkat(dirfd, tmp, 0);
    return 0;
}

enum { PROBE_NONE, PROBE_FILE, PROBE_DIR };

/* The directory that holds path (which need not exist) opened; with a
 * probe, checked to take a new file or directory. */
static int open_parent(const char *path, int probe, int *dirfd, const char **base, size_t *blen)
{
    char dir[4096];
    int e = split_path(path, dir, sizeof dir, base, blen);
    if (e)
        return e;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return errno ? errno : EIO;
    if (probe != PROBE_NONE && (e = try_create(fd, probe == PROBE_DIR))) {
        close(fd);
        return e;
    }
    *dirfd = fd;
    return 0;
}

int pgrt_file_replace_check(const char *path)
{
    if (!path || !path[0])
        return ENOENT;
    size_t n = strlen(path);
    if (path[n - 1] == '/')
        return EISDIR;
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return EISDIR;
    int dirfd;
    const char *base;
    size_t blen;
    int e = open_parent(path, PROBE_FILE, &dirfd, &base, &blen);
    if (!e)
        close(dirfd);
    return e;
}

/* Neither name is a directory in dirfd (the rename over it would fail). */
static int names_free(int dirfd, const char *a, const char *b)
{
    struct stat st;
    if (fstatat(dirfd, a, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
        return EISDIR;
    if (fstatat(dirfd, b, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
        return EISDIR;
    return 0;
}

int pgrt_pair_replace_check(const char *dir, const char *data_name, const char *marker_name)
{
    if (!dir || !data_name || !marker_name || !dir[0])
        return ENOENT;
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT)
            return errno ? errno : EIO;
        if (lstat(dir, &st) == 0)
            return ENOENT; /* a dangling link: the new directory cannot take its place */
        int dirfd;
        const char *base;
        size_t blen;
        int e = open_parent(dir, PROBE_DIR, &dirfd, &base, &blen);
        if (!e)
            close(dirfd);
        return e;
    }
    if (!S_ISDIR(st.st_mode))
        return ENOTDIR;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return errno ? errno : EIO;
    int e = try_create(fd, false);
    if (!e)
        e = names_free(fd, data_name, marker_name);
    close(fd);
    return e;
}

/* ------------------------------------------------------------ file pairs */

static int write_parts(int dirfd, char tmp[PGRT_TEMP_NAME_MAX], const pgrt_dir_file *f,
                       long mode, bool sync)
{
    return pgrt_temp_write(dirfd, tmp, f->parts, f->nparts, mode, sync);
}

/* The mode of name in dirfd if it is a regular file (kept by its
 * replacement), else -1 (0666 less the umask). */
static long mode_of(int dirfd, const char *name)
{
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
        return (long)(st.st_mode & 07777);
    return -1;
}

/* Does name in dirfd hold exactly the parts? (A link is never "the same".) */
static bool same_content(int dirfd, const char *name, const pgrt_dir_file *f)
{
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return false;
    struct stat st;
    size_t total = 0;
    for (size_t i = 0; i < f->nparts; i++)
        total += f->parts[i].n;
    bool same = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size == total;
    char buf[4096];
    for (size_t i = 0; same && i < f->nparts; i++) {
        const char *p = f->parts[i].p;
        size_t left = f->parts[i].n;
        while (same && left) {
            ssize_t r = read(fd, buf, left < sizeof buf ? left : sizeof buf);
            if (r < 0 && errno == EINTR)
                continue;
            same = r > 0 && memcmp(buf, p, (size_t)r) == 0;
            if (same) {
                p += r;
                left -= (size_t)r;
            }
        }
    }
    close(fd);
    return same;
}

/* dir does not exist: build the pair in a fresh sibling directory and
 * rename that into place, so that dir appears whole or not at all. */
static int pair_new_dir(const char *dir, const pgrt_dir_file *data, const pgrt_dir_file *marker,
                        bool sync)
{
    int pfd;
    const char *base;
    size_t blen;
    int e = open_parent(dir, PROBE_NONE, &pfd, &base, &blen);
    if (e)
        return e;
    char name[4096];
    if (blen >= sizeof name) {
        close(pfd);
        return ENAMETOOLONG;
    }
    memcpy(name, base, blen);
    name[blen] = '\0';
    char tdir[PGRT_TEMP_NAME_MAX], t1[PGRT_TEMP_NAME_MAX], t2[PGRT_TEMP_NAME_MAX];
    if ((e = pgrt_temp_dir_create(pfd, tdir))) {
        close(pfd);
        return e;
    }
    int dfd = openat(pfd, tdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        e = errno ? errno : EIO;
        unlinkat(pfd, tdir, AT_REMOVEDIR);
        close(pfd);
        return e;
    }
    bool w1 = false, w2 = false;
    if (!(e = write_parts(dfd, t1, data, -1, sync))) {
        w1 = true;
        if (renameat(dfd, t1, dfd, data->name) != 0)
            e = errno ? errno : EIO;
    }
    if (!e && !(e = write_parts(dfd, t2, marker, -1, sync))) {
        w2 = true;
        if (renameat(dfd, t2, dfd, marker->name) != 0)
            e = errno ? errno : EIO;
    }
    if (!e && sync)
        (void)fsync(dfd);
    if (!e && renameat(pfd, tdir, pfd, name) != 0)
        e = errno ? errno : EIO;
    if (e) {
        if (w1) {
            unlinkat(dfd, t1, 0);
            unlinkat(dfd, data->name, 0);
        }
        if (w2) {
            unlinkat(dfd, t2, 0);
            unlinkat(dfd, marker->name, 0);
        }
        unlinkat(pfd, tdir, AT_REMOVEDIR);
    } else if (sync) {
        (void)fsync(pfd);
    }
    close(dfd);
    close(pfd);
    return e;
}

/* A name reserved for a backup: an empty file made exclusively, which the
 * rename that fills it replaces. */
static int reserve(int dirfd, char name[PGRT_TEMP_NAME_MAX])
{
    int fd = pgrt_temp_create(dirfd, name);
    if (fd < 0)
        return errno ? errno : EIO;
    close(fd);
    return 0;
}

static bool exists_at(int dirfd, const char *name)
{
    struct stat st;
    return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* name, when it exists, renamed to a fresh name of its own (bk): *reserved
 * once bk is taken, *moved once the rename is done, for the undo to know
 * how far it got. 0 or an errno. */
static int move_aside(int dirfd, const char *name, char bk[PGRT_TEMP_NAME_MAX], bool *reserved,
                      bool *moved)
{
    if (!exists_at(dirfd, name))
        return 0;
    int e = reserve(dirfd, bk);
    if (e)
        return e;
    *reserved = true;
    if (renameat(dirfd, name, dirfd, bk) != 0)
        return errno ? errno : EIO;
    *moved = true;
    return 0;
}

/* dir exists. Both new files are written (and synced) to temporaries
 * first: a failure there leaves the old pair as it was. If the marker's
 * content does not change (an adapter trained in place keeps its config),
 * one rename replaces the data: atomic. Otherwise the marker is the
 * commit: it is moved aside first (the directory then holds no loadable
 * pair), the data replaced, the new marker renamed in, the old files
 * removed. Any failure on the way renames the old files back. A crash
 * between the first and last rename leaves no marker (nothing loads) and
 * the old files under temporary names; never new data beside an old
 * marker or old data beside a new one. */
static int pair_into_dir(const char *dir, const pgrt_dir_file *data,
                         const pgrt_dir_file *marker, bool sync)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return errno ? errno : EIO;
    int e = names_free(dfd, data->name, marker->name);
    char td[PGRT_TEMP_NAME_MAX], tm[PGRT_TEMP_NAME_MAX];
    char bd[PGRT_TEMP_NAME_MAX], bm[PGRT_TEMP_NAME_MAX];
    bool have_td = false, have_tm = false, have_bd = false, have_bm = false, moved_bm = false,
         moved_bd = false, placed = false;
    if (!e && !(e = write_parts(dfd, td, data, mode_of(dfd, data->name), sync)))
        have_td = true;
    if (!e && !(e = write_parts(dfd, tm, marker, mode_of(dfd, marker->name), sync)))
        have_tm = true;
    if (!e && same_content(dfd, marker->name, marker)) {
        if (renameat(dfd, td, dfd, data->name) != 0)
            e = errno ? errno : EIO;
        else
            have_td = false;
        goto out;
    }
    if (e)
        goto out;
    /* uncommit: the old marker aside */
    if ((e = move_aside(dfd, marker->name, bm, &have_bm, &moved_bm)))
        goto out;
    if (moved_bm && sync)
        (void)fsync(dfd);
    if ((e = move_aside(dfd, data->name, bd, &have_bd, &moved_bd)))
        goto out;
    if (renameat(dfd, td, dfd, data->name) != 0) {
        e = errno ? errno : EIO;
        goto out;
    }
    have_td = false;
    placed = true;
    /* commit */
    if (renameat(dfd, tm, dfd, marker->name) != 0) {
        e = errno ? errno : EIO;
        goto out;
    }
    have_tm = false;
out:
    if (e) {
        /* roll back: the old files under their names again */
        if (placed && !moved_bd)
            unlinkat(dfd, data->name, 0);
        if (moved_bd && renameat(dfd, bd, dfd, data->name) == 0)
            have_bd = false;
        if (moved_bm && renameat(dfd, bm, dfd, marker->name) == 0)
            have_bm = false;
        /* a backup that could not go back stays, under its temporary name */
        if (have_bd && moved_bd)
            have_bd = false;
        if (have_bm && moved_bm)
            have_bm = false;
    }
    if (have_td)
        unlinkat(dfd, td, 0);
    if (have_tm)
        unlinkat(dfd, tm, 0);
    if (have_bd)
        unlinkat(dfd, bd, 0);
    if (have_bm)
        unlinkat(dfd, bm, 0);
    if (sync)
        (void)fsync(dfd);
    close(dfd);
    return e;
}

int pgrt_pair_replace(const char *dir, const pgrt_dir_file *data, const pgrt_dir_file *marker,
                      bool sync)
{
    if (!dir || !dir[0])
        return ENOENT;
    struct stat st;
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT)
            return errno ? errno : EIO;
        int e = pair_new_dir(dir, data, marker, sync);
        /* made by someone else meanwhile: write into it */
        if (e != EEXIST && e != ENOTEMPTY)
            return e;
    } else if (!S_ISDIR(st.st_mode)) {
        return ENOTDIR;
    }
    return pair_into_dir(dir, data, marker, sync);
}
