/* SPDX-License-Identifier: MIT */
/* Scratch directories and small files for the model-layer tests. */
#ifndef PTXGEN_TESTS_MODEL_UTIL_H
#define PTXGEN_TESTS_MODEL_UTIL_H

#include <stdbool.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A fresh directory under $TMPDIR (or /tmp); the path lives in buf. */
static inline const char *scratch_dir(char *buf, size_t len)
{
    const char *t = getenv("TMPDIR");
    snprintf(buf, len, "%s/pgrt-model-XXXXXX", t && *t ? t : "/tmp");
    return mkdtemp(buf);
}

static inline void path_in(char *buf, size_t len, const char *dir, const char *name)
{
    int n = snprintf(buf, len, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= len)
        buf[0] = '\0';
}

static inline int write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static inline int write_text(const char *dir, const char *name, const char *text)
{
    char p[4096];
    path_in(p, sizeof p, dir, name);
    return write_bytes(p, text, strlen(text));
}

/* A .pgtok (docs/data.md, version 1) of docs documents of lens[d] tokens,
 * their ids one after another, mask NULL for every token a target; the
 * tokenizer's SHA-256 sha (NULL: zeros). 0 or -1. */
static inline int write_pgtok(const char *path, int docs, const int *lens, const int32_t *ids,
                              const uint8_t *mask, uint32_t vocab, int32_t eos, int32_t pad,
                              const uint8_t *sha)
{
    uint64_t tokens = 0;
    for (int d = 0; d < docs; d++)
        tokens += (uint64_t)lens[d];
    size_t ids_at = 128 + 8 * ((size_t)docs + 1);
    size_t mask_at = ids_at + (4 * tokens + 7) / 8 * 8;
    size_t n = mask_at + (tokens + 7) / 8 * 8;
    uint8_t *b = calloc(1, n);
    if (!b)
        return -1;
#define PUT_(at, v, w)                                                         \
    for (int k_ = 0; k_ < (w); k_++)                                           \
        b[(at) + (size_t)k_] = (uint8_t)((uint64_t)(v) >> (8 * k_));
    memcpy(b, "PGTOKENS", 8);
    PUT_(8, 1, 4);
    PUT_(12, 128, 4);
    PUT_(20, vocab, 4);
    PUT_(24, docs, 8);
    PUT_(32, tokens, 8);
    PUT_(40, (uint32_t)eos, 4);
    PUT_(44, (uint32_t)pad, 4);
    if (sha)
        memcpy(b + 48, sha, 32);
    uint64_t at = 0;
    for (int d = 0; d <= docs; d++) {
        PUT_(128 + 8 * (size_t)d, at, 8);
        if (d < docs)
            at += (uint64_t)lens[d];
    }
    for (uint64_t i = 0; i < tokens; i++) {
        PUT_(ids_at + 4 * i, (uint32_t)ids[i], 4);
        b[mask_at + i] = mask ? mask[i] : 1;
    }
#undef PUT_
    int rc = write_bytes(path, b, n);
    free(b);
    return rc;
}

/* config.json of a small Qwen2 (tied embeddings) or LLaMA (untied, with
 * attention biases) for the model tests; 0 or -1. */
static inline int write_hf_config(const char *dir, bool llama, int hidden, int intermediate,
                                  int layers, int heads, int kv_heads, int vocab)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"%s\",\"hidden_size\":%d,\"intermediate_size\":%d,"
             "\"num_hidden_layers\":%d,\"num_attention_heads\":%d,\"num_key_value_heads\":%d,"
             "\"vocab_size\":%d,\"rms_norm_eps\":1e-6,\"rope_theta\":10000.0,"
             "\"tie_word_embeddings\":%s%s}",
             llama ? "llama" : "qwen2", hidden, intermediate, layers, heads, kv_heads, vocab,
             llama ? "false" : "true", llama ? ",\"attention_bias\":true" : "");
    return write_text(dir, "config.json", cfg);
}

/* No byte a terminal acts on: C0 controls (the line end included), DEL, a
 * C1 control in UTF-8 (U+0080 to U+009F) or a raw C1 byte. */
static inline int printable_line(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f || (*p >= 0x80 && *p <= 0x9f) ||
            (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f))
            return 0;
    return 1;
}

/* Number of entries in dir (without . and ..). */
static inline int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

/* Remove dir and the plain files in it. */
static inline void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char p[4096];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        path_in(p, sizeof p, dir, e->d_name);
        if (unlink(p) != 0)
            remove_tree(p);
    }
    closedir(d);
    rmdir(dir);
}

#endif
