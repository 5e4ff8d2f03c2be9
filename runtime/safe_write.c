/* SPDX-License-Identifier: MIT */
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

int pgrt_temp_create(int dirfd, char name[PGRT_TEMP_NAME_MAX])
{
    static const char alphabet[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    static _Atomic unsigned long long counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    /* Not a secret: O_EXCL|O_NOFOLLOW make a guessed name harmless; the
     * randomness only keeps collisions (and retries) rare. */
    unsigned long long x = (unsigned long long)ts.tv_nsec ^
                           ((unsigned long long)ts.tv_sec << 30) ^
                           ((unsigned long long)getpid() << 16) ^ (uintptr_t)name;
    for (int attempt = 0; attempt < 1000; attempt++) {
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
        int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    errno = EEXIST;
    return -1;
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
