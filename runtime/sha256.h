/* SPDX-License-Identifier: MIT */
/* SHA-256 (FIPS 180-4), for the cubin cache's keys and checksums and for the
 * training data's tokenizer fingerprint (tools/train_data.c). A static
 * library of its own, like safe_write, so that tools may link it without
 * the runtime. Internal, not installed. Pure and thread-safe: the state is
 * the caller's. */
#ifndef PGRT_SHA256_H
#define PGRT_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct pgrt_sha256 {
    uint32_t h[8];
    uint64_t bytes;
    unsigned char buf[64];
    size_t nbuf;
} pgrt_sha256;

void pgrt_sha256_init(pgrt_sha256 *s);
void pgrt_sha256_add(pgrt_sha256 *s, const void *data, size_t n);
/* The digest; s must be initialised again before another use. */
void pgrt_sha256_end(pgrt_sha256 *s, unsigned char out[32]);
/* init, add, end in one. */
void pgrt_sha256_of(const void *data, size_t n, unsigned char out[32]);

#endif
