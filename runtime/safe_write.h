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

/* A fresh directory in dirfd (mode 0755 less the umask) with a name as
 * pgrt_temp_create makes them, in name. */
int pgrt_temp_dir_create(int dirfd, char name[PGRT_TEMP_NAME_MAX]);

/* Would pgrt_file_replace(path) find its way? path does not end in '/' and
 * is not a directory; its directory exists and takes a new file (one is
 * made and removed there: permissions, read-only mounts and full inode
 * tables show). For a check before long work; the write may still fail
 * (a full disk). */
int pgrt_file_replace_check(const char *path);

/* One file of a directory to write: a plain name in it and its content. */
typedef struct pgrt_dir_file {
    const char *name;
    const pgrt_span *parts;
    size_t nparts;
} pgrt_dir_file;

/* Two files of directory dir replaced as a pair, for a reader that needs
 * both (a PEFT adapter: weights and adapter_config.json); marker is the
 * one a reader opens first and treats as "the pair is here". Two renames
 * are never atomic together, so:
 *  - dir missing: both files go into a fresh sibling directory, which is
 *    renamed to dir: dir appears whole or not at all;
 *  - dir there, marker's content unchanged: one rename replaces data;
 *  - otherwise both are written to temporaries (synced) first, then the
 *    old marker is moved aside (dir holds no pair), the data replaced, the
 *    new marker renamed in (the commit), the old files removed; on any
 *    failure the old files are renamed back.
 * So a failure leaves the old pair; a crash leaves the old pair, the new
 * pair, or no marker (nothing loads, the old files beside it under
 * temporary names): never new data beside an old marker. Other entries of
 * dir are never touched; a file replaced keeps its mode; a link at either
 * name is replaced, not followed. With sync, data and renames reach the
 * disk before the return. A reader that opens the pair while it is
 * replaced (not after a crash) may still see one of each. ENOTDIR when dir
 * is not a directory; EISDIR when either name in it is one. */
int pgrt_pair_replace(const char *dir, const pgrt_dir_file *data, const pgrt_dir_file *marker,
                      bool sync);

/* Would pgrt_pair_replace(dir) find its way? dir is a directory that takes
 * a new file and in which neither name is a directory, or dir does not
 * exist and its parent takes a new directory. */
int pgrt_pair_replace_check(const char *dir, const char *data_name, const char *marker_name);

#endif
