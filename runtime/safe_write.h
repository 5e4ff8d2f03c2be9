/* SPDX-License-Identifier: MIT */
/* Replacing a file safely: the new content goes to an exclusive, no-follow
 * temporary with a short unpredictable name in the target's directory, and
 * is renamed over the target. Shared by the model writers, ptxgen-dump and
 * golden_check's --update; depends on nothing but libc and POSIX, so that
 * tools and tests may link it without the runtime. Internal, not installed.
 * Every function returns 0 or a positive errno (callers word their own
 * messages) and is thread-safe. */
#ifndef PGRT_SAFE_WRITE_H
#define PGRT_SAFE_WRITE_H

#include <stdbool.h>
#include <stddef.h>

/* ".ptxgen-" + 10 random characters + ".tmp" + NUL: short, so that the
 * final name may use all of NAME_MAX. */
#define PGRT_TEMP_NAME_MAX 23

typedef struct pgrt_span {
    const void *p;
    size_t n;
} pgrt_span;

/* A fresh file in directory dirfd, created O_CREAT|O_EXCL|O_NOFOLLOW (a
 * planted link or file at the name is never opened) with mode 0666, which
 * the umask reduces as for any plain creation. Its name in name. Returns the
 * descriptor, or -1 with errno set. */
int pgrt_temp_create(int dirfd, char name[PGRT_TEMP_NAME_MAX]);

/* All n bytes to fd, retrying short writes and EINTR. */
int pgrt_fd_write_all(int fd, const void *data, size_t n);

/* The parts, in order, into a new temporary of dirfd (pgrt_temp_create);
 * its name in tmp. mode >= 0 sets those permission bits (a file replacing a
 * private 0600 one must not publish it); sync makes the data durable before
 * the caller renames. On failure no temporary is left. */
int pgrt_temp_write(int dirfd, char tmp[PGRT_TEMP_NAME_MAX], const pgrt_span *parts,
                    size_t nparts, long mode, bool sync);

/* path's content replaced by the parts atomically: a reader sees the old
 * file or the new one, never part of one. A replaced regular file keeps its
 * permission bits; a new file gets 0666 less the umask. A symbolic link at
 * path is replaced, not followed. With sync, the data and the rename reach
 * the disk before the return. On failure path is untouched and no temporary
 * is left. EISDIR for a path ending in '/' or naming a directory. */
int pgrt_file_replace(const char *path, const pgrt_span *parts, size_t nparts, bool sync);

#endif
