/* SPDX-License-Identifier: MIT */
/* The fuzz targets' entry points, shared by the libFuzzer builds, the
 * seeded standalone driver (CI) and the ptxas corpus check. */
#ifndef PTXGEN_FUZZ_H
#define PTXGEN_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* Drive the builder with `data`. Returns 0 and sets *ptx (malloc'd, caller
 * frees) when a kernel was emitted, or a negative pg error (then *ptx is
 * NULL). `target` (if not NULL) receives the target's name. */
int fuzz_builder_run(const uint8_t *data, size_t size, char **ptx, const char **target);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
