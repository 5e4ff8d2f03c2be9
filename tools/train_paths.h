/* SPDX-License-Identifier: MIT */
/* ptxgen-train --model: its outputs against each other and its inputs. */
#ifndef PTXGEN_TRAIN_PATHS_H
#define PTXGEN_TRAIN_PATHS_H

#include <stddef.h>

/* A file or directory the run reads or writes, as given on the command
 * line, with the files in it that the run reads or writes (nfiles may be
 * 0). An input's files are paths (a model's config and weights, an
 * adapter's two files, as pgrt_model_file_path gives them); an output
 * directory's are names in it (adapter_model.safetensors,
 * adapter_config.json). */
typedef struct train_path {
    const char *opt;  /* "--log-json" */
    const char *path; /* NULL: not given */
    const char *const *files;
    size_t nfiles;
    int dir; /* an output directory, written into (through a link at path) */
} train_path;

/* Does an output name another output or an input? Two names are the same
 * when they resolve to the same absolute path (every directory above the
 * last component resolved, links included; an input's last component is
 * compared both as written and as the file it reaches, an output file's
 * as written, since a link there is replaced, not followed), or when both
 * exist with the same device and inode. The one exception: the output
 * named `inplace_out` may be the input named `inplace_in` (an adapter
 * saved over the one it was loaded from, which is read whole before the
 * run and replaced as one atomic pair). On a clash, a one-line message
 * naming both options and the path goes to msg and 1 is returned; else 0.
 * Reads the file system (realpath, lstat), writes nothing. */
int train_paths_clash(const train_path *outs, size_t nout, const train_path *ins, size_t nin,
                      const char *inplace_out, const char *inplace_in, char *msg,
                      size_t msglen);

#endif
