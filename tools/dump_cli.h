/* SPDX-License-Identifier: MIT */
/*
 * The ptxgen-dump command line as a function, so that a fuzz target or a
 * test can drive it without a process: no getopt, no global state, no exit().
 */
#ifndef PTXGEN_DUMP_CLI_H
#define PTXGEN_DUMP_CLI_H

#include <stdio.h>

/* Exit statuses. 2 is the contract for bad input (DESIGN §4), an output path
 * that cannot be created or opened included (no such directory, a directory,
 * no permission); 1 is for failures under a valid request: a write that
 * failed (disk full, I/O error, standard output unwritable), out of memory,
 * emission failed. -o /dev/full and standard output on /dev/full both give 1. */
#define DUMP_EXIT_OK 0
#define DUMP_EXIT_FAIL 1
#define DUMP_EXIT_USAGE 2

/* Run ptxgen-dump with argv[1..argc) (argv[0] is ignored). Normal output goes
 * to `out`, every diagnostic as one line to `err`. Files named by -o and
 * --outdir are written. Returns the exit status. Thread-safe as long as the
 * streams and files are not shared. */
int dump_main(int argc, char **argv, FILE *out, FILE *err);

#endif /* PTXGEN_DUMP_CLI_H */
