/* SPDX-License-Identifier: MIT */
/*
 * Fuzz target: the safetensors header parser. The first input byte sets
 * the length of a data section (x 4), the rest is the header JSON; the
 * file is assembled around them so that mutations explore offsets and
 * shapes rather than the 8-byte size (the raw bytes are parsed as well).
 * A file that parses hands out only tensors inside the buffer, tiling the
 * data section, with byte counts that match dtype and shape.
 */
#include "fuzz.h"

#include "ptxgen/pgrt_model.h"

#include <stdlib.h>
#include <string.h>

static void check(const pgrt_st_file *f, const uint8_t *buf, size_t len)
{
    size_t total = 0;
    const char *prev = NULL;
    for (size_t i = 0; i < pgrt_st_count(f); i++) {
        const pgrt_st_tensor *t = pgrt_st_at(f, i);
        if (!t || !t->name || (prev && strcmp(prev, t->name) >= 0))
            abort();
        prev = t->name;
        uint64_t c = 1;
        for (int d = 0; d < t->ndim; d++)
            c *= (uint64_t)t->shape[d];
        if (t->ndim < 0 || t->ndim > PGRT_ST_MAX_DIMS || c != (uint64_t)t->count ||
            t->nbytes != c * pgrt_st_dtype_size(t->dtype))
            abort();
        const uint8_t *p = t->data;
        if (p < buf + 8 || p + t->nbytes > buf + len)
            abort();
        if (pgrt_st_find(f, t->name) != t)
            abort();
        total += t->nbytes;
    }
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--)
        h = h << 8 | buf[i];
    if (total != len - 8 - h)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pgrt_st_file *f = NULL;
    if (pgrt_st_parse(data, size, "fuzz", &f) == 0) {
        check(f, data, size);
        pgrt_st_close(&f);
    } else if (f || pgrt_last_message()[0] == '\0') {
        abort();
    }
    if (size == 0)
        return 0;
    size_t dlen = (size_t)data[0] * 4, hlen = size - 1;
    size_t len = 8 + hlen + dlen;
    uint8_t *buf = malloc(len);
    if (!buf)
        return 0;
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(buf + 8, data + 1, hlen);
    for (size_t i = 0; i < dlen; i++)
        buf[8 + hlen + i] = (uint8_t)i;
    if (pgrt_st_parse(buf, len, "fuzz", &f) == 0) {
        check(f, buf, len);
        pgrt_st_close(&f);
    } else if (f || pgrt_last_message()[0] == '\0') {
        abort();
    }
    free(buf);
    return 0;
}
