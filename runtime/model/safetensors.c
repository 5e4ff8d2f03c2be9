/* SPDX-License-Identifier: MIT */
/*
 * safetensors: 8-byte little-endian header size, a JSON header, then the
 * data section the header's offsets index. The reader trusts nothing: the
 * header is parsed with the strict JSON reader and every offset is checked
 * against the file before any tensor pointer is handed out.
 */
#include "model_internal.h"
#include "safe_write.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const dtype_names[] = {
#define PGRT_X_(name, size) #name,
    PGRT_ST_DTYPE_MAP(PGRT_X_)
#undef PGRT_X_
};
static const uint8_t dtype_sizes[] = {
#define PGRT_X_(name, size) size,
    PGRT_ST_DTYPE_MAP(PGRT_X_)
#undef PGRT_X_
};

const char *pgrt_st_dtype_name(pgrt_st_dtype t)
{
    return (unsigned)t < PGRT_ST_DTYPE_COUNT ? dtype_names[t] : "?";
}

size_t pgrt_st_dtype_size(pgrt_st_dtype t)
{
    return (unsigned)t < PGRT_ST_DTYPE_COUNT ? dtype_sizes[t] : 0;
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31u, mant = h & 1023u;
    float f;
    if (e == 0)
        f = ldexpf((float)mant, -24);
    else if (e == 31)
        f = mant ? NAN : INFINITY;
    else
        f = ldexpf((float)(mant | 1024u), (int)e - 25);
    uint32_t u;
    memcpy(&u, &f, 4);
    u |= sign;
    memcpy(&f, &u, 4);
    return f;
}

int pgrt_st_tensor_to_f32(const pgrt_st_tensor *t, size_t first, size_t n, float *dst)
{
    RT_NONNULL(__func__, t, "t");
    if (n)
        RT_NONNULL(__func__, dst, "dst");
    if (t->dtype != PGRT_ST_F32 && t->dtype != PGRT_ST_BF16 && t->dtype != PGRT_ST_F16)
        return model_fail(PGRT_EINVAL, "pgrt_st_tensor_to_f32: tensor '%s': dtype %s is not "
                          "F32, BF16 or F16", t->name ? t->name : "", pgrt_st_dtype_name(t->dtype));
    if (t->count < 0 || first > (uint64_t)t->count || n > (uint64_t)t->count - first)
        return model_fail(PGRT_ERANGE, "pgrt_st_tensor_to_f32: tensor '%s': elements %zu + %zu "
                          "of %lld", t->name ? t->name : "", first, n, (long long)t->count);
    /* the data is little-endian and unaligned: assembled byte by byte */
    const uint8_t *p = t->data;
    for (size_t i = first; i < first + n; i++) {
        uint32_t u;
        if (t->dtype == PGRT_ST_F32) {
            u = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
                (uint32_t)p[4 * i + 3] << 24;
        } else {
            uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
            if (t->dtype == PGRT_ST_F16) {
                *dst++ = f16_to_f32(h);
                continue;
            }
            u = (uint32_t)h << 16;
        }
        memcpy(dst++, &u, 4);
    }
    return 0;
}

struct pgrt_st_file {
    model_map map;
    pgrt_json *doc;
    const pgrt_jval *meta;
    size_t n;
    pgrt_st_tensor *t; /* sorted by name */
};

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const pgrt_st_tensor *)a)->name, ((const pgrt_st_tensor *)b)->name);
}

typedef struct span {
    uint64_t begin, end;
    const char *name;
} span;

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return 0;
}

static int parse_tensor(const pgrt_jval *v, const char *what, const char *name,
                        uint64_t data_len, const uint8_t *data, pgrt_st_tensor *t, span *sp)
{
    if (pgrt_jval_type(v) != PGRT_JSON_OBJECT)
        return model_fail(PGRT_EINVAL, "%s: tensor '%s': not an object", what, name);
    for (size_t i = 0; i < pgrt_jval_count(v); i++) {
        const char *k = pgrt_jval_key_at(v, i);
        if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
            return model_fail(PGRT_EINVAL, "%s: tensor '%s': unknown field '%s'", what, name, k);
    }
    const char *dt = pgrt_jval_string(pgrt_jval_member(v, "dtype"), NULL);
    if (!dt)
        return model_fail(PGRT_EINVAL, "%s: tensor '%s': dtype: missing or not a string", what,
                          name);
    int d = -1;
    for (int i = 0; i < PGRT_ST_DTYPE_COUNT; i++)
        if (!strcmp(dt, dtype_names[i]))
            d = i;
    if (d < 0)
        return model_fail(PGRT_EINVAL, "%s: tensor '%s': unknown dtype '%.32s'", what, name, dt);
    t->name = name;
    t->dtype = (pgrt_st_dtype)d;
    const pgrt_jval *shape = pgrt_jval_member(v, "shape");
    if (pgrt_jval_type(shape) != PGRT_JSON_ARRAY)
        return model_fail(PGRT_EINVAL, "%s: tensor '%s': shape: missing or not an array", what,
                          name);
    size_t nd = pgrt_jval_count(shape);
    if (nd > PGRT_ST_MAX_DIMS)
        return model_fail(PGRT_ERANGE, "%s: tensor '%s': %zu dimensions, over the limit of %d",
                          what, name, nd, PGRT_ST_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t count = 1;
    const uint64_t cap = (uint64_t)1 << 62;
    for (size_t i = 0; i < nd; i++) {
        int64_t dim;
        if (pgrt_jval_int64(pgrt_jval_item(shape, i), 0, INT64_MAX, &dim) != 0)
            return model_fail(PGRT_EINVAL, "%s: tensor '%s': shape[%zu]: not an integer >= 0", what,
                              name, i);
        t->shape[i] = dim;
        if (dim && count > cap / (uint64_t)dim)
            return model_fail(PGRT_ERANGE, "%s: tensor '%s': element count overflows", what, name);
        count *= (uint64_t)dim;
    }
    if (count > cap / 8)
        return model_fail(PGRT_ERANGE, "%s: tensor '%s': element count overflows", what, name);
    t->count = (int64_t)count;
    const pgrt_jval *off = pgrt_jval_member(v, "data_offsets");
    int64_t b, e;
    if (pgrt_jval_count(off) != 2 || pgrt_jval_type(off) != PGRT_JSON_ARRAY ||
        pgrt_jval_int64(pgrt_jval_item(off, 0), 0, INT64_MAX, &b) != 0 ||
        pgrt_jval_int64(pgrt_jval_item(off, 1), 0, INT64_MAX, &e) != 0)
        return model_fail(PGRT_EINVAL,
                          "%s: tensor '%s': data_offsets: expected [begin, end] of integers >= 0",
                          what, name);
    if (e < b)
        return model_fail(PGRT_EINVAL, "%s: tensor '%s': data_offsets end %lld before begin %lld",
                          what, name, (long long)e, (long long)b);
    if ((uint64_t)e > data_len)
        return model_fail(PGRT_EINVAL,
                          "%s: tensor '%s': data_offsets end %lld beyond the data (%llu bytes)",
                          what, name, (long long)e, (unsigned long long)data_len);
    uint64_t want = count * dtype_sizes[d];
    if ((uint64_t)(e - b) != want)
        return model_fail(PGRT_EINVAL,
                          "%s: tensor '%s': %lld bytes in data_offsets, but %s x %llu elements "
                          "take %llu",
                          what, name, (long long)(e - b), dt, (unsigned long long)count,
                          (unsigned long long)want);
    t->data = data + b;
    t->nbytes = (size_t)want;
    *sp = (span){(uint64_t)b, (uint64_t)e, name};
    return 0;
}

static int st_parse(pgrt_st_file *f, const uint8_t *buf, size_t len, const char *what)
{
    if (len < 8)
        return model_fail(PGRT_EINVAL, "%s: %zu bytes, too short for the header size", what, len);
    uint64_t hn = 0;
    for (int i = 7; i >= 0; i--)
        hn = hn << 8 | buf[i];
    if (hn > PGRT_ST_MAX_HEADER)
        return model_fail(PGRT_ERANGE, "%s: header size %llu over the limit of %llu bytes", what,
                          (unsigned long long)hn, (unsigned long long)PGRT_ST_MAX_HEADER);
    if (hn > len - 8)
        return model_fail(PGRT_EINVAL, "%s: header size %llu beyond the file (%zu bytes)", what,
                          (unsigned long long)hn, len);
    pgrt_json_limits lim = {.max_size = PGRT_ST_MAX_HEADER, .max_depth = 8};
    int rc = pgrt_json_parse((const char *)buf + 8, (size_t)hn, &lim, what, &f->doc);
    if (rc)
        return rc;
    const pgrt_jval *root = pgrt_json_root(f->doc);
    if (pgrt_jval_type(root) != PGRT_JSON_OBJECT)
        return model_fail(PGRT_EINVAL, "%s: header is not a JSON object", what);
    const uint8_t *data = buf + 8 + hn;
    uint64_t data_len = len - 8 - hn;
    size_t nm = pgrt_jval_count(root);
    f->t = calloc(nm ? nm : 1, sizeof *f->t);
    span *sp = calloc(nm ? nm : 1, sizeof *sp);
    if (!f->t || !sp) {
        free(sp);
        return model_fail(PGRT_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < nm; i++) {
        const char *k = pgrt_jval_key_at(root, i);
        const pgrt_jval *v = pgrt_jval_value_at(root, i);
        if (!strcmp(k, "__metadata__")) {
            if (pgrt_jval_is_null(v))
                continue;
            if (pgrt_jval_type(v) != PGRT_JSON_OBJECT) {
                free(sp);
                return model_fail(PGRT_EINVAL, "%s: __metadata__: not an object", what);
            }
            for (size_t j = 0; j < pgrt_jval_count(v); j++)
                if (!pgrt_jval_string(pgrt_jval_value_at(v, j), NULL)) {
                    free(sp);
                    return model_fail(PGRT_EINVAL, "%s: __metadata__: '%s' is not a string", what,
                                      pgrt_jval_key_at(v, j));
                }
            f->meta = v;
            continue;
        }
        rc = parse_tensor(v, what, k, data_len, data, &f->t[f->n], &sp[f->n]);
        if (rc) {
            free(sp);
            return rc;
        }
        f->n++;
    }
    /* the tensors must tile the data section exactly */
    qsort(sp, f->n, sizeof *sp, cmp_span);
    uint64_t at = 0;
    for (size_t i = 0; i < f->n; i++) {
        if (sp[i].begin < at) {
            rc = model_fail(PGRT_EINVAL, "%s: tensor '%s' overlaps the one before it (bytes %llu < %llu)",
                            what, sp[i].name, (unsigned long long)sp[i].begin,
                            (unsigned long long)at);
            break;
        }
        if (sp[i].begin > at) {
            rc = model_fail(PGRT_EINVAL, "%s: gap of %llu bytes before tensor '%s'", what,
                            (unsigned long long)(sp[i].begin - at), sp[i].name);
            break;
        }
        at = sp[i].end;
    }
    free(sp);
    if (rc)
        return rc;
    if (at != data_len)
        return model_fail(PGRT_EINVAL, "%s: %llu bytes of data after the last tensor", what,
                          (unsigned long long)(data_len - at));
    qsort(f->t, f->n, sizeof *f->t, cmp_name);
    return 0;
}

int pgrt_st_parse(const void *buf, size_t len, const char *what, pgrt_st_file **out)
{
    RT_NONNULL(__func__, out, "out");
    if (len)
        RT_NONNULL(__func__, buf, "buf");
    *out = NULL;
    pgrt_st_file *f = calloc(1, sizeof *f);
    if (!f)
        return model_fail(PGRT_ENOMEM, "out of memory");
    int rc = st_parse(f, buf, len, what ? what : "safetensors");
    if (rc) {
        pgrt_st_close(&f);
        return rc;
    }
    *out = f;
    return 0;
}

int pgrt_st_open(const char *path, pgrt_st_file **out)
{
    RT_NONNULL(__func__, path, "path");
    RT_NONNULL(__func__, out, "out");
    *out = NULL;
    pgrt_st_file *f = calloc(1, sizeof *f);
    if (!f)
        return model_fail(PGRT_ENOMEM, "out of memory");
    int rc = model_map_open(path, &f->map);
    if (!rc)
        rc = st_parse(f, f->map.data, f->map.len, path);
    if (rc) {
        pgrt_st_close(&f);
        return rc;
    }
    *out = f;
    return 0;
}

void pgrt_st_close(pgrt_st_file **f)
{
    if (!f || !*f)
        return;
    model_map_close(&(*f)->map);
    pgrt_json_destroy(&(*f)->doc);
    free((*f)->t);
    free(*f);
    *f = NULL;
}

size_t pgrt_st_count(const pgrt_st_file *f) { return f ? f->n : 0; }

const pgrt_st_tensor *pgrt_st_at(const pgrt_st_file *f, size_t i)
{
    return f && i < f->n ? &f->t[i] : NULL;
}

static const pgrt_st_tensor *find_sorted(const pgrt_st_tensor *const *v, size_t n,
                                         const char *name)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(v[mid]->name, name);
        if (c == 0)
            return v[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const pgrt_st_tensor *pgrt_st_find(const pgrt_st_file *f, const char *name)
{
    if (!f || !name)
        return NULL;
    pgrt_st_tensor key = {.name = name};
    return bsearch(&key, f->t, f->n, sizeof *f->t, cmp_name);
}

const pgrt_jval *pgrt_st_metadata(const pgrt_st_file *f) { return f ? f->meta : NULL; }

const char *pgrt_st_metadata_get(const pgrt_st_file *f, const char *key)
{
    const pgrt_jval *meta = pgrt_st_metadata(f);
    const pgrt_jval *v = meta && key ? pgrt_jval_member(meta, key) : NULL;
    return v ? pgrt_jval_string(v, NULL) : NULL;
}

/* ------------------------------------------------------------ atomic write */

typedef pgrt_span piece;

/* The temporary beside path has a short random name created exclusively and
 * never through a link (safe_write.c), so a 255-byte file name works and a
 * planted link at a guessable name is never written through. */
static int write_atomic(const char *path, const piece *pieces, size_t np)
{
    int e = pgrt_file_replace(path, pieces, np, true);
    return e ? model_fail(e == ENOMEM ? PGRT_ENOMEM : PGRT_EINVAL, "%s: %s", path, strerror(e)) : 0;
}

int pgrt_file_write_check(const char *path)
{
    RT_NONNULL(__func__, path, "path");
    int e = pgrt_file_replace_check(path);
    if (!e)
        return 0;
    if (e == EISDIR)
        return model_fail(PGRT_EINVAL, "%s: is a directory, not a file", path);
    return model_fail(e == ENOMEM ? PGRT_ENOMEM : PGRT_EINVAL, "%s: cannot write there: %s",
                      path, strerror(e));
}

int pgrt_file_write_atomic(const char *path, const void *data, size_t len)
{
    RT_NONNULL(__func__, path, "path");
    if (len)
        RT_NONNULL(__func__, data, "data");
    piece p = {data, len};
    return write_atomic(path, &p, 1);
}

/* ------------------------------------------------------------------ writer */

typedef struct named {
    const char *name;
    size_t i;
} named;

static int cmp_named(const void *a, const void *b)
{
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

int model_st_image_build(const char *path, const pgrt_st_out *tensors, size_t n,
                         const char *const *meta_keys, const char *const *meta_values,
                         size_t n_meta, model_st_image *img)
{
    memset(img, 0, sizeof *img);
    RT_NONNULL("pgrt_st_write", path, "path");
    if (n)
        RT_NONNULL("pgrt_st_write", tensors, "tensors");
    if (n_meta) {
        RT_NONNULL("pgrt_st_write", meta_keys, "meta_keys");
        RT_NONNULL("pgrt_st_write", meta_values, "meta_values");
    }
    named *ord = malloc((n ? n : 1) * sizeof *ord);
    uint64_t *sizes = malloc((n ? n : 1) * sizeof *sizes);
    piece *pieces = malloc((n + 2) * sizeof *pieces);
    model_buf h = {0};
    int rc = 0;
    if (!ord || !sizes || !pieces) {
        rc = model_fail(PGRT_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const pgrt_st_out *t = &tensors[i];
        if (!t->name || !*t->name || !strcmp(t->name, "__metadata__")) {
            rc = model_fail(PGRT_EINVAL, "%s: tensor %zu: empty or reserved name", path, i);
            goto done;
        }
        if ((unsigned)t->dtype >= PGRT_ST_DTYPE_COUNT || t->ndim < 0 ||
            t->ndim > PGRT_ST_MAX_DIMS) {
            rc = model_fail(PGRT_EINVAL, "%s: tensor '%s': bad dtype or rank", path, t->name);
            goto done;
        }
        uint64_t c = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0 || (t->shape[d] && c > ((uint64_t)1 << 56) / (uint64_t)t->shape[d])) {
                rc = model_fail(PGRT_EINVAL, "%s: tensor '%s': bad shape", path, t->name);
                goto done;
            }
            c *= (uint64_t)t->shape[d];
        }
        sizes[i] = c * dtype_sizes[t->dtype];
        if (sizes[i] && !t->data) {
            rc = model_fail(PGRT_EINVAL, "%s: tensor '%s': no data", path, t->name);
            goto done;
        }
        ord[i] = (named){t->name, i};
    }
    qsort(ord, n, sizeof *ord, cmp_named);
    for (size_t i = 1; i < n; i++)
        if (!strcmp(ord[i - 1].name, ord[i].name)) {
            rc = model_fail(PGRT_EINVAL, "%s: tensor '%s' given twice", path, ord[i].name);
            goto done;
        }
    model_buf_put(&h, "{", 1);
    bool first = true;
    if (n_meta) {
        model_buf_put(&h, "\"__metadata__\":{", 16);
        for (size_t i = 0; i < n_meta; i++) {
            if (i)
                model_buf_put(&h, ",", 1);
            model_buf_json_string(&h, meta_keys[i]);
            model_buf_put(&h, ":", 1);
            model_buf_json_string(&h, meta_values[i]);
        }
        model_buf_put(&h, "}", 1);
        first = false;
    }
    uint64_t off = 0;
    for (size_t k = 0; k < n; k++) {
        const pgrt_st_out *t = &tensors[ord[k].i];
        if (!first)
            model_buf_put(&h, ",", 1);
        first = false;
        model_buf_json_string(&h, t->name);
        model_buf_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", dtype_names[t->dtype]);
        for (int d = 0; d < t->ndim; d++)
            model_buf_printf(&h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        model_buf_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                         (unsigned long long)(off + sizes[ord[k].i]));
        off += sizes[ord[k].i];
        pieces[k + 2] = (piece){t->data, (size_t)sizes[ord[k].i]};
    }
    model_buf_put(&h, "}", 1);
    while (!h.err && h.len % 8)
        model_buf_put(&h, " ", 1);
    if (h.err) {
        rc = model_fail(h.err, "%s: out of memory building the header", path);
        goto done;
    }
    if (h.len > PGRT_ST_MAX_HEADER) {
        rc = model_fail(PGRT_ERANGE, "%s: header of %zu bytes over the limit", path, h.len);
        goto done;
    }
    for (int i = 0; i < 8; i++)
        img->len8[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
    pieces[0] = (piece){img->len8, 8};
    pieces[1] = (piece){h.p, h.len};
    img->parts = pieces;
    img->nparts = n + 2;
    img->header = h.p;
    pieces = NULL;
    h.p = NULL;
done:
    free(ord);
    free(sizes);
    free(pieces);
    free(h.p);
    return rc;
}

void model_st_image_free(model_st_image *img)
{
    free(img->parts);
    free(img->header);
    memset(img, 0, sizeof *img);
}

int pgrt_st_write(const char *path, const pgrt_st_out *tensors, size_t n,
                  const char *const *meta_keys, const char *const *meta_values, size_t n_meta)
{
    model_st_image img;
    int rc = model_st_image_build(path, tensors, n, meta_keys, meta_values, n_meta, &img);
    if (!rc)
        rc = write_atomic(path, img.parts, img.nparts);
    model_st_image_free(&img);
    return rc;
}



/* -------------------------------------------------------------- sharded set */

struct pgrt_st_set {
    pgrt_st_file **files;
    size_t nfiles;
    const pgrt_st_tensor **all; /* sorted by name */
    size_t n;
    char **paths; /* every file read: the index (if any), then the shards */
    size_t npaths;
};

/* Remember a file the set was read from. */
static int set_note_path(pgrt_st_set *s, const char *path)
{
    char **p = realloc(s->paths, (s->npaths + 1) * sizeof *p);
    if (!p)
        return model_fail(PGRT_ENOMEM, "out of memory");
    s->paths = p;
    if (!(p[s->npaths] = strdup(path)))
        return model_fail(PGRT_ENOMEM, "out of memory");
    s->npaths++;
    return 0;
}

size_t model_st_set_path_count(const pgrt_st_set *s) { return s ? s->npaths : 0; }

const char *model_st_set_path(const pgrt_st_set *s, size_t i)
{
    return s && i < s->npaths ? s->paths[i] : NULL;
}

static int cmp_tptr(const void *a, const void *b)
{
    return strcmp((*(const pgrt_st_tensor *const *)a)->name,
                  (*(const pgrt_st_tensor *const *)b)->name);
}

static bool plain_name(const char *s)
{
    return *s && strcmp(s, ".") && strcmp(s, "..") && !strchr(s, '/');
}

static int set_collect(pgrt_st_set *s, const char *what)
{
    size_t total = 0;
    for (size_t i = 0; i < s->nfiles; i++)
        total += pgrt_st_count(s->files[i]);
    s->all = malloc((total ? total : 1) * sizeof *s->all);
    if (!s->all)
        return model_fail(PGRT_ENOMEM, "out of memory");
    for (size_t i = 0; i < s->nfiles; i++)
        for (size_t j = 0; j < pgrt_st_count(s->files[i]); j++)
            s->all[s->n++] = pgrt_st_at(s->files[i], j);
    qsort(s->all, s->n, sizeof *s->all, cmp_tptr);
    for (size_t i = 1; i < s->n; i++)
        if (!strcmp(s->all[i - 1]->name, s->all[i]->name))
            return model_fail(PGRT_EINVAL, "%s: tensor '%s' in two shards", what, s->all[i]->name);
    return 0;
}

static int set_open_index(pgrt_st_set *s, const char *dir, const char *index)
{
    char *text;
    size_t len;
    int rc = model_read_file(index, PGRT_ST_MAX_HEADER, &text, &len);
    if (rc)
        return rc;
    pgrt_json *doc;
    rc = pgrt_json_parse(text, len, NULL, index, &doc);
    free(text);
    if (rc)
        return rc;
    const pgrt_jval *wm = pgrt_jval_member(pgrt_json_root(doc), "weight_map");
    char **shard_names = NULL;
    if (pgrt_jval_type(wm) != PGRT_JSON_OBJECT) {
        rc = model_fail(PGRT_EINVAL, "%s: weight_map: missing or not an object", index);
        goto done;
    }
    size_t nw = pgrt_jval_count(wm);
    shard_names = calloc(nw ? nw : 1, sizeof *shard_names);
    s->files = calloc(nw ? nw : 1, sizeof *s->files);
    if (!shard_names || !s->files) {
        rc = model_fail(PGRT_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < nw && !rc; i++) {
        const char *tn = pgrt_jval_key_at(wm, i);
        const char *shard = pgrt_jval_string(pgrt_jval_value_at(wm, i), NULL);
        if (!shard || !plain_name(shard)) {
            rc = model_fail(PGRT_EINVAL, "%s: weight_map: '%s': not a file name in the directory",
                            index, tn);
            break;
        }
        size_t f = 0;
        while (f < s->nfiles && strcmp(shard_names[f], shard))
            f++;
        if (f == s->nfiles) {
            char path[4096];
            if ((rc = model_path_join(path, sizeof path, dir, shard)))
                break;
            if ((rc = pgrt_st_open(path, &s->files[f])) || (rc = set_note_path(s, path)))
                break;
            shard_names[f] = strdup(shard);
            s->nfiles++;
            if (!shard_names[f]) {
                rc = model_fail(PGRT_ENOMEM, "out of memory");
                break;
            }
        }
        if (!pgrt_st_find(s->files[f], tn))
            rc = model_fail(PGRT_EINVAL, "%s: weight_map puts '%s' in %s, which lacks it", index,
                            tn, shard);
    }
    /* every tensor of a shard must be in the map: a stray one is a sign of
     * a mismatched index */
    for (size_t f = 0; f < s->nfiles && !rc; f++)
        for (size_t j = 0; j < pgrt_st_count(s->files[f]) && !rc; j++) {
            const char *tn = pgrt_st_at(s->files[f], j)->name;
            const char *m = pgrt_jval_string(pgrt_jval_member(wm, tn), NULL);
            if (!m || strcmp(m, shard_names[f]))
                rc = model_fail(PGRT_EINVAL, "%s: tensor '%s' of %s is not mapped to it", index, tn,
                                shard_names[f]);
        }
    if (!rc)
        rc = set_collect(s, index);
done:
    if (shard_names)
        for (size_t i = 0; i < s->nfiles; i++)
            free(shard_names[i]);
    free(shard_names);
    pgrt_json_destroy(&doc);
    return rc;
}

int pgrt_st_set_open(const char *dir, pgrt_st_set **out)
{
    RT_NONNULL(__func__, dir, "dir");
    RT_NONNULL(__func__, out, "out");
    *out = NULL;
    pgrt_st_set *s = calloc(1, sizeof *s);
    if (!s)
        return model_fail(PGRT_ENOMEM, "out of memory");
    char index[4096], single[4096];
    int rc = model_path_join(index, sizeof index, dir, "model.safetensors.index.json");
    if (!rc)
        rc = model_path_join(single, sizeof single, dir, "model.safetensors");
    struct stat st;
    if (rc) {
    } else if (stat(index, &st) == 0) {
        if (!(rc = set_note_path(s, index)))
            rc = set_open_index(s, dir, index);
    } else if (stat(single, &st) == 0) {
        s->files = calloc(1, sizeof *s->files);
        if (!s->files)
            rc = model_fail(PGRT_ENOMEM, "out of memory");
        else if (!(rc = pgrt_st_open(single, &s->files[0]))) {
            s->nfiles = 1;
            if (!(rc = set_note_path(s, single)))
                rc = set_collect(s, single);
        }
    } else {
        rc = model_fail(PGRT_EINVAL, "%s: neither model.safetensors nor "
                                     "model.safetensors.index.json", dir);
    }
    if (rc) {
        pgrt_st_set_close(&s);
        return rc;
    }
    *out = s;
    return 0;
}

void pgrt_st_set_close(pgrt_st_set **s)
{
    if (!s || !*s)
        return;
    for (size_t i = 0; i < (*s)->nfiles; i++)
        pgrt_st_close(&(*s)->files[i]);
    free((*s)->files);
    free((*s)->all);
    for (size_t i = 0; i < (*s)->npaths; i++)
        free((*s)->paths[i]);
    free((*s)->paths);
    free(*s);
    *s = NULL;
}

size_t pgrt_st_set_count(const pgrt_st_set *s) { return s ? s->n : 0; }

const pgrt_st_tensor *pgrt_st_set_at(const pgrt_st_set *s, size_t i)
{
    return s && i < s->n ? s->all[i] : NULL;
}

const pgrt_st_tensor *pgrt_st_set_find(const pgrt_st_set *s, const char *name)
{
    return s && name ? find_sorted(s->all, s->n, name) : NULL;
}
