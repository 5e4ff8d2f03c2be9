/* SPDX-License-Identifier: MIT */
/*
 * Training data (train_data.h): the .pgtok reader, the legacy flat token
 * reader and the batcher. The file is mapped and checked whole at open,
 * so the batcher reads it with no check and no failure; every number is
 * read little-endian byte by byte, whatever the host.
 */
#include "train_data.h"

#include "ptxgen/ptxgen.h"
#include "sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- errors */

static _Thread_local char message[1024];

const char *td_last_message(void) { return message; }

const char *td_strerror(int err)
{
    switch (err) {
    case TD_OK:
        return "success";
#define TD_X_(name, val, msg)                                                  \
    case TD_##name:                                                            \
        return msg;
        TD_ERRNO_MAP(TD_X_)
#undef TD_X_
    }
    return "unknown error";
}

const char *td_err_name(int err)
{
    switch (err) {
    case TD_OK:
        return "TD_OK";
#define TD_X_(name, val, msg)                                                  \
    case TD_##name:                                                            \
        return "TD_" #name;
        TD_ERRNO_MAP(TD_X_)
#undef TD_X_
    }
    return "TD_UNKNOWN";
}

/* The message formatted, then escaped whole: a path with a control
 * character cannot disturb the terminal the line is printed on. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static int fail(int err, const char *fmt, ...)
{
    char raw[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    pg_text_escape(message, sizeof message, raw);
    return err;
}

/* ---------------------------------------------------------------- the set */

struct td_set {
    char *path;
    void *map;
    const uint8_t *bytes; /* the mapping */
    size_t len;
    const uint8_t *offsets; /* uint64[docs + 1]; NULL for raw (one document) */
    const uint8_t *ids;     /* int32[tokens] */
    const uint8_t *mask;    /* uint8[tokens]; NULL for raw (all targets) */
    td_info info;
};

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static int32_t id_at(const td_set *s, uint64_t i) { return (int32_t)rd32(s->ids + 4 * i); }

static uint64_t offset_at(const td_set *s, uint64_t d)
{
    return s->offsets ? rd64(s->offsets + 8 * d) : (d ? s->info.tokens : 0);
}

/* raw: every token but the first (nothing comes before it) */
static int mask_at(const td_set *s, uint64_t i) { return s->mask ? s->mask[i] : i > 0; }

static uint64_t align8(uint64_t n) { return (n + 7) & ~(uint64_t)7; }

static int map_file(td_set *s)
{
    int fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(TD_EIO, "%s: %s", s->path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fail(TD_EIO, "%s: not a regular file", s->path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return fail(TD_ERANGE, "%s: too large to map", s->path);
    }
    s->len = (size_t)st.st_size;
    if (s->len) {
        void *p = mmap(NULL, s->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            s->len = 0;
            return fail(TD_EIO, "%s: mmap: %s", s->path, strerror(e));
        }
        s->map = p;
        s->bytes = p;
    }
    close(fd);
    return 0;
}

/* JSON text rather than ids: the first bytes hold no NUL (every id below
 * 2^24 has a zero byte) and the first one that is not white space opens an
 * object or an array. */
static bool looks_like_json(const td_set *s)
{
    size_t n = s->len < 256 ? s->len : 256, i = 0;
    if (memchr(s->bytes, 0, n))
        return false;
    while (i < n && strchr(" \t\r\n", s->bytes[i]))
        i++;
    return i < n && (s->bytes[i] == '{' || s->bytes[i] == '[');
}

static int refuse_unprepared(const td_set *s)
{
    if (looks_like_json(s))
        return fail(TD_EFORMAT,
                    "%s: JSON text, not prepared training data: run ptxgen-prepare --model DIR "
                    "--input %s --output DATA.pgtok and train on DATA.pgtok",
                    s->path, s->path);
    if (s->len % 4 == 0)
        return fail(TD_EFORMAT,
                    "%s: not a ptxgen-prepare file (it does not start with %s); a flat int32 "
                    "token file is read only as legacy raw tokens (one document, every token a "
                    "target): run ptxgen-prepare to train on documents",
                    s->path, TD_MAGIC);
    return fail(TD_EFORMAT,
                "%s: not a ptxgen-prepare file (it does not start with %s): run ptxgen-prepare "
                "--model DIR --input DATA.jsonl --output %s",
                s->path, TD_MAGIC, s->path);
}

/* The header: the magic, the version, the sizes and the special ids. */
static int read_header(td_set *s)
{
    const uint8_t *h = s->bytes;
    td_info *in = &s->info;
    if (s->len == 0)
        return fail(TD_EFORMAT,
                    "%s: empty file, not prepared training data: run ptxgen-prepare --model DIR "
                    "--input DATA.jsonl --output %s",
                    s->path, s->path);
    if (s->len < 8 || memcmp(h, TD_MAGIC, 8) != 0)
        return refuse_unprepared(s);
    if (s->len < TD_HEADER_BYTES)
        return fail(TD_EFORMAT, "%s: %zu bytes, shorter than the %u-byte header", s->path,
                    s->len, TD_HEADER_BYTES);
    in->format = TD_FORMAT_PREPARED;
    in->version = rd32(h + 8);
    if (in->version != TD_VERSION)
        return fail(TD_EFORMAT,
                    "%s: format version %" PRIu32 "; this reader knows version %u (prepared "
                    "by another ptxgen-prepare? prepare it again)",
                    s->path, in->version, TD_VERSION);
    uint32_t header = rd32(h + 12);
    if (header != TD_HEADER_BYTES)
        return fail(TD_EFORMAT, "%s: header size %" PRIu32 ", not %u", s->path, header,
                    TD_HEADER_BYTES);
    in->flags = rd32(h + 16);
    if (in->flags & ~TD_FLAGS_KNOWN)
        return fail(TD_EFORMAT, "%s: flags 0x%" PRIx32 " have bits this reader does not know",
                    s->path, in->flags);
    uint32_t vocab = rd32(h + 20);
    if (vocab == 0 || vocab > INT32_MAX)
        return fail(TD_EFORMAT, "%s: vocabulary size %" PRIu32 " is outside [1, 2^31)",
                    s->path, vocab);
    in->vocab = vocab;
    in->docs = rd64(h + 24);
    in->tokens = rd64(h + 32);
    in->eos_id = (int32_t)rd32(h + 40);
    in->pad_id = (int32_t)rd32(h + 44);
    in->has_tokenizer = true;
    memcpy(in->tokenizer_sha256, h + 48, 32);
    for (unsigned i = 80; i < TD_HEADER_BYTES; i++)
        if (h[i])
            return fail(TD_EFORMAT, "%s: reserved header byte %u is not zero", s->path, i);
    if (in->eos_id < -1 || in->eos_id >= in->vocab)
        return fail(TD_EFORMAT, "%s: eos id %" PRId32 " is outside [-1, %" PRId64 ")", s->path,
                    in->eos_id, in->vocab);
    if (in->pad_id < 0 || in->pad_id >= in->vocab)
        return fail(TD_EFORMAT, "%s: pad id %" PRId32 " is outside [0, %" PRId64 ")", s->path,
                    in->pad_id, in->vocab);
    if (in->docs == 0 || in->tokens == 0)
        return fail(TD_EFORMAT, "%s: no %s", s->path, in->docs == 0 ? "documents" : "tokens");
    if (in->docs > in->tokens)
        return fail(TD_EFORMAT, "%s: %" PRIu64 " documents but only %" PRIu64 " tokens",
                    s->path, in->docs, in->tokens);

    return 0;
}

/* The documents' offsets: from 0, each document non-empty and inside the
 * tokens, the last ending at them; the longest noted. */
static int check_offsets(td_set *s)
{
    td_info *in = &s->info;
    if (rd64(s->offsets) != 0)
        return fail(TD_EFORMAT, "%s: the first document starts at token %" PRIu64 ", not 0",
                    s->path, rd64(s->offsets));
    for (uint64_t d = 0; d < in->docs; d++) {
        uint64_t a = rd64(s->offsets + 8 * d), b = rd64(s->offsets + 8 * (d + 1));
        if (b <= a)
            return fail(TD_EFORMAT,
                        "%s: document %" PRIu64 " %s (offsets %" PRIu64 " and %" PRIu64 ")",
                        s->path, d, b == a ? "is empty" : "ends before it starts", a, b);
        if (b > in->tokens)
            return fail(TD_EFORMAT,
                        "%s: document %" PRIu64 " ends at token %" PRIu64
                        ", past the %" PRIu64 " tokens",
                        s->path, d, b, in->tokens);
        if (b - a > in->longest)
            in->longest = b - a;
    }
    if (offset_at(s, in->docs) != in->tokens)
        return fail(TD_EFORMAT,
                    "%s: the last document ends at token %" PRIu64 ", not at the %" PRIu64
                    " tokens",
                    s->path, offset_at(s, in->docs), in->tokens);
    return 0;
}

/* Every id inside the vocabulary, every mask byte 0 or 1 (the targets
 * counted), and the sections' padding zero. */
static int check_tokens(td_set *s, uint64_t off_end, uint64_t ids_end, uint64_t total)
{
    const uint8_t *h = s->bytes;
    td_info *in = &s->info;
    /* A document's first token is never predicted, whatever its mask bit:
     * targets counts what training can predict. */
    for (uint64_t d = 0, i = 0; d < in->docs; d++) {
        uint64_t first = i, end = offset_at(s, d + 1);
        for (; i < end; i++) {
            int32_t id = id_at(s, i);
            if (id < 0 || id >= in->vocab)
                return fail(TD_EFORMAT,
                            "%s: token %" PRIu64 " (document %" PRIu64 ") has id %" PRId32
                            ", outside the vocabulary [0, %" PRId64 ")",
                            s->path, i, d, id, in->vocab);
            if (s->mask[i] > 1)
                return fail(TD_EFORMAT,
                            "%s: the mask byte of token %" PRIu64 " is %u, not 0 or 1", s->path,
                            i, s->mask[i]);
            in->targets += i > first && s->mask[i];
        }
    }
    for (uint64_t i = off_end + 4 * in->tokens; i < ids_end; i++)
        if (h[i])
            return fail(TD_EFORMAT, "%s: the padding after the ids is not zero", s->path);
    for (uint64_t i = ids_end + in->tokens; i < total; i++)
        if (h[i])
            return fail(TD_EFORMAT, "%s: the padding after the mask is not zero", s->path);
    return 0;
}

static int open_prepared(td_set *s)
{
    const uint8_t *h = s->bytes;
    td_info *in = &s->info;
    int rc = read_header(s);
    if (rc)
        return rc;
    /* Sections: offsets, ids, mask, each starting at a multiple of 8. */
    uint64_t off_end, ids_end, total;
    if (in->tokens > (UINT64_MAX - TD_HEADER_BYTES) / 16 ||
        (off_end = TD_HEADER_BYTES + 8 * (in->docs + 1),
         ids_end = off_end + align8(4 * in->tokens),
         total = ids_end + align8(in->tokens), total > SIZE_MAX))
        return fail(TD_EFORMAT,
                    "%s: %" PRIu64 " documents and %" PRIu64 " tokens overflow a file size",
                    s->path, in->docs, in->tokens);
    if (total != s->len)
        return fail(TD_EFORMAT,
                    "%s: %zu bytes, but %" PRIu64 " documents of %" PRIu64
                    " tokens make a file of %" PRIu64 " bytes (%s)",
                    s->path, s->len, in->docs, in->tokens, total,
                    s->len < total ? "cut short?" : "bytes after the end");
    s->offsets = h + TD_HEADER_BYTES;
    s->ids = h + off_end;
    s->mask = h + ids_end;

    if ((rc = check_offsets(s)))
        return rc;
    return check_tokens(s, off_end, ids_end, total);
}

static int open_raw(td_set *s)
{
    td_info *in = &s->info;
    in->format = TD_FORMAT_RAW;
    if (s->len == 0)
        return fail(TD_EFORMAT, "%s: empty token file", s->path);
    if (s->len >= 8 && memcmp(s->bytes, TD_MAGIC, 8) == 0)
        return fail(TD_EFORMAT,
                    "%s: a ptxgen-prepare data file (it starts with %s), not flat int32 "
                    "tokens: open it as prepared data",
                    s->path, TD_MAGIC);
    if (looks_like_json(s))
        return fail(TD_EFORMAT,
                    "%s: JSON text, not int32 token ids: run ptxgen-prepare --model DIR --input "
                    "%s --output DATA.pgtok and train on DATA.pgtok",
                    s->path, s->path);
    if (s->len % 4)
        return fail(TD_EFORMAT, "%s: %zu bytes, not a whole number of int32 ids", s->path,
                    s->len);
    s->ids = s->bytes;
    in->docs = 1;
    in->tokens = s->len / 4;
    in->targets = in->tokens - 1;
    in->longest = in->tokens;
    in->eos_id = -1;
    int32_t max = 0;
    for (uint64_t i = 0; i < in->tokens; i++) {
        int32_t id = id_at(s, i);
        if (id < 0)
            return fail(TD_EFORMAT, "%s: token %" PRIu64 " (byte %" PRIu64 ") has id %" PRId32
                        ", a negative id",
                        s->path, i, 4 * i, id);
        if (id > max)
            max = id;
    }
    in->vocab = (int64_t)max + 1;
    return 0;
}

int td_open(const char *path, td_format fmt, td_set **out)
{
    if (!out)
        return fail(TD_EINVAL, "td_open: out is NULL");
    *out = NULL;
    if (!path)
        return fail(TD_EINVAL, "td_open: path is NULL");
    if (fmt != TD_FORMAT_PREPARED && fmt != TD_FORMAT_RAW)
        return fail(TD_EINVAL, "td_open: format %d is neither prepared nor raw", (int)fmt);
    td_set *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return fail(TD_ENOMEM, "%s: out of memory", path);
    }
    int rc = map_file(s);
    if (!rc)
        rc = fmt == TD_FORMAT_RAW ? open_raw(s) : open_prepared(s);
    if (rc) {
        td_close(&s);
        return rc;
    }
    *out = s;
    return 0;
}

void td_close(td_set **set)
{
    if (!set || !*set)
        return;
    td_set *s = *set;
    if (s->map)
        munmap(s->map, s->len);
    free(s->path);
    free(s);
    *set = NULL;
}

const td_info *td_set_info(const td_set *set) { return set ? &set->info : NULL; }

int td_doc(const td_set *set, uint64_t d, uint64_t *begin, uint64_t *len)
{
    if (!set || !begin || !len)
        return fail(TD_EINVAL, "td_doc: NULL argument");
    if (d >= set->info.docs)
        return fail(TD_ERANGE, "%s: no document %" PRIu64 " (there are %" PRIu64 ")", set->path,
                    d, set->info.docs);
    *begin = offset_at(set, d);
    *len = offset_at(set, d + 1) - *begin;
    return 0;
}

int32_t td_token(const td_set *set, uint64_t i)
{
    return set && i < set->info.tokens ? id_at(set, i) : -1;
}

int td_target(const td_set *set, uint64_t i)
{
    return set && i < set->info.tokens ? mask_at(set, i) : 0;
}

/* ---------------------------------------------------------------- the model */

int td_file_sha256(const char *path, uint8_t out[32])
{
    if (!path || !out)
        return fail(TD_EINVAL, "td_file_sha256: NULL argument");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(TD_EIO, "%s: %s", path, strerror(errno));
    pgrt_sha256 h;
    pgrt_sha256_init(&h);
    unsigned char buf[1 << 16];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            close(fd);
            return fail(TD_EIO, "%s: %s", path, strerror(e));
        }
        if (n == 0)
            break;
        pgrt_sha256_add(&h, buf, (size_t)n);
    }
    close(fd);
    pgrt_sha256_end(&h, out);
    return 0;
}

static void hex(char out[65], const uint8_t sum[32])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", sum[i]);
}

int td_check_model(const td_set *set, int64_t model_vocab, const char *tokenizer_json)
{
    if (!set)
        return fail(TD_EINVAL, "td_check_model: set is NULL");
    if (model_vocab <= 0)
        return fail(TD_EINVAL, "td_check_model: model vocabulary %" PRId64 " is not positive",
                    model_vocab);
    const td_info *in = &set->info;
    if (in->format == TD_FORMAT_RAW) {
        for (uint64_t i = 0; i < in->tokens; i++)
            if (id_at(set, i) >= model_vocab)
                return fail(TD_EMISMATCH,
                            "%s: token %" PRIu64 " (byte %" PRIu64 ") has id %" PRId32
                            ", outside the model's vocabulary [0, %" PRId64 ")",
                            set->path, i, 4 * i, id_at(set, i), model_vocab);
        return 0;
    }
    if (in->vocab > model_vocab)
        return fail(TD_EMISMATCH,
                    "%s: prepared with a tokenizer of %" PRId64
                    " tokens, more than the model's vocabulary of %" PRId64
                    ": prepare it again with the model's tokenizer",
                    set->path, in->vocab, model_vocab);
    if (!tokenizer_json)
        return 0;
    uint8_t sum[32];
    int rc = td_file_sha256(tokenizer_json, sum);
    if (rc)
        return rc;
    if (memcmp(sum, in->tokenizer_sha256, 32) != 0) {
        char a[65], b[65];
        hex(a, in->tokenizer_sha256);
        hex(b, sum);
        return fail(TD_EMISMATCH,
                    "%s: prepared with another tokenizer (tokenizer.json sha256 %s) than %s "
                    "(sha256 %s): prepare it again with ptxgen-prepare --model and the model's "
                    "directory",
                    set->path, a, tokenizer_json, b);
    }
    return 0;
}

/* ---------------------------------------------------------------- batches */

struct td_batcher {
    const td_set *set;
    td_batch_params p;
    uint64_t *perm;          /* the epoch's order; NULL in file order */
    uint64_t rows_per_epoch;
    td_pos at;               /* the next row's start */
    uint64_t row;            /* rows given in this epoch */
    bool ended;              /* the epochs are done */
};

/* splitmix64 (Steele, Lea and Flood): the generator of the epoch orders
 * (docs/data.md gives the exact sequence). */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static uint64_t splitmix64(uint64_t *state)
{
    *state += 0x9e3779b97f4a7c15u;
    return mix64(*state);
}

/* Fisher-Yates from the last element down, j = next % (i + 1): the bias of
 * the modulus is below n / 2^64. */
static void make_perm(uint64_t *perm, uint64_t n, uint64_t seed, uint64_t epoch)
{
    uint64_t state = mix64(seed ^ mix64(epoch));
    for (uint64_t i = 0; i < n; i++)
        perm[i] = i;
    for (uint64_t i = n - 1; i > 0; i--) {
        uint64_t j = splitmix64(&state) % (i + 1);
        uint64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static uint64_t doc_of(const td_batcher *b, uint64_t k) { return b->perm ? b->perm[k] : k; }

static uint64_t doc_len(const td_batcher *b, uint64_t k)
{
    uint64_t d = doc_of(b, k);
    return offset_at(b->set, d + 1) - offset_at(b->set, d);
}

uint64_t td_rows_per_epoch(const td_set *set, td_mode mode, int64_t seq)
{
    if (!set || seq < 1)
        return 0;
    if (mode == TD_PAD)
        return set->info.docs;
    return set->info.tokens / (uint64_t)seq + (set->info.tokens % (uint64_t)seq != 0);
}

int td_batcher_create(const td_set *set, const td_batch_params *params, td_batcher **out)
{
    if (!out)
        return fail(TD_EINVAL, "td_batcher_create: out is NULL");
    *out = NULL;
    if (!set || !params)
        return fail(TD_EINVAL, "td_batcher_create: %s is NULL", set ? "params" : "set");
    const td_batch_params *p = params;
    if (p->batch < 1 || p->batch > TD_BATCH_MAX)
        return fail(TD_ERANGE, "batch %" PRId64 " is outside [1, %d]", p->batch, TD_BATCH_MAX);
    if (p->seq < 2 || p->seq > TD_SEQ_MAX)
        return fail(TD_ERANGE, "seq %" PRId64 " is outside [2, %d]", p->seq, TD_SEQ_MAX);
    if ((uint64_t)p->batch > SIZE_MAX / 4 / (uint64_t)p->seq)
        return fail(TD_ERANGE, "batch %" PRId64 " x seq %" PRId64 " ids overflow memory",
                    p->batch, p->seq);
    if (p->mode != TD_PACK && p->mode != TD_PAD)
        return fail(TD_EINVAL, "mode %d is neither pack nor pad", (int)p->mode);
    td_batcher *b = calloc(1, sizeof *b);
    if (!b)
        return fail(TD_ENOMEM, "out of memory");
    b->set = set;
    b->p = *p;
    b->rows_per_epoch = td_rows_per_epoch(set, p->mode, p->seq);
    if (p->shuffle) {
        uint64_t n = set->info.docs;
        if (n > SIZE_MAX / sizeof *b->perm || !(b->perm = malloc(n * sizeof *b->perm))) {
            free(b);
            return fail(TD_ENOMEM, "out of memory for the order of %" PRIu64 " documents", n);
        }
        make_perm(b->perm, n, p->seed, 0);
    }
    *out = b;
    return 0;
}

void td_batcher_destroy(td_batcher **b)
{
    if (!b || !*b)
        return;
    free((*b)->perm);
    free(*b);
    *b = NULL;
}

void td_batcher_tell(const td_batcher *b, td_pos *pos)
{
    if (b && pos)
        *pos = b->at;
}

uint64_t td_batcher_rows_done(const td_batcher *b)
{
    if (!b)
        return 0;
    if (b->rows_per_epoch && b->at.epoch > (UINT64_MAX - b->row) / b->rows_per_epoch)
        return UINT64_MAX;
    return b->at.epoch * b->rows_per_epoch + b->row;
}

uint64_t td_batcher_batches(const td_batcher *b)
{
    if (!b || !b->p.epochs)
        return 0;
    uint64_t r = b->rows_per_epoch, e = b->p.epochs, n = (uint64_t)b->p.batch;
    if (r && e > UINT64_MAX / r)
        return UINT64_MAX;
    return (e * r) / n + ((e * r) % n != 0);
}

static void next_epoch(td_batcher *b)
{
    b->at.epoch++;
    b->at.index = 0;
    b->at.offset = 0;
    b->row = 0;
    if (b->p.epochs && b->at.epoch >= b->p.epochs)
        b->ended = true;
    else if (b->perm)
        make_perm(b->perm, b->set->info.docs, b->p.seed, b->at.epoch);
}

/* The arrays of one row and what was put in them. */
typedef struct row_out {
    int32_t *ids, *targets, *pos, *doc_start;
    int64_t n_targets;
} row_out;

/* Tokens [begin, begin + n) of the set at columns [col, col + n): one
 * piece. A position predicts the next one only inside the piece, and only
 * a token whose mask bit is set. */
static void put_piece(const td_batcher *b, row_out *r, int64_t col, uint64_t begin, int64_t n)
{
    const td_set *s = b->set;
    for (int64_t j = 0; j < n; j++) {
        r->ids[col + j] = id_at(s, begin + (uint64_t)j);
        if (r->pos)
            r->pos[col + j] = (int32_t)j;
        if (r->doc_start)
            r->doc_start[col + j] = (int32_t)col;
        bool t = j + 1 < n && mask_at(s, begin + (uint64_t)j + 1);
        if (t)
            r->n_targets++;
        if (r->targets)
            r->targets[col + j] = t ? id_at(s, begin + (uint64_t)j + 1) : TD_IGNORE;
    }
}

static void put_padding(const td_batcher *b, row_out *r, int64_t col)
{
    int64_t n = b->p.seq - col;
    for (int64_t j = 0; j < n; j++) {
        r->ids[col + j] = b->set->info.pad_id;
        if (r->targets)
            r->targets[col + j] = TD_IGNORE;
        if (r->pos)
            r->pos[col + j] = (int32_t)j;
        if (r->doc_start)
            r->doc_start[col + j] = (int32_t)col;
    }
}

/* One row from the stream; whether it holds data. */
static bool fill_row(td_batcher *b, row_out *r, int64_t *truncated)
{
    const int64_t S = b->p.seq;
    const uint64_t docs = b->set->info.docs;
    if (b->ended) {
        put_padding(b, r, 0);
        return false;
    }
    int64_t col = 0;
    if (b->p.mode == TD_PAD) {
        uint64_t len = doc_len(b, b->at.index);
        int64_t take = len > (uint64_t)S ? S : (int64_t)len;
        *truncated += len > (uint64_t)S;
        put_piece(b, r, 0, offset_at(b->set, doc_of(b, b->at.index)), take);
        col = take;
        b->at.index++;
    } else {
        while (col < S) {
            uint64_t len = doc_len(b, b->at.index), left = len - b->at.offset;
            int64_t take = left > (uint64_t)(S - col) ? S - col : (int64_t)left;
            put_piece(b, r, col, offset_at(b->set, doc_of(b, b->at.index)) + b->at.offset, take);
            col += take;
            b->at.offset += (uint64_t)take;
            if (b->at.offset == len) {
                b->at.offset = 0;
                if (++b->at.index == docs)
                    break;
            }
        }
    }
    if (col < S)
        put_padding(b, r, col);
    b->row++;
    if (b->at.index == docs)
        next_epoch(b);
    return true;
}

int td_batcher_next(td_batcher *b, td_batch *batch)
{
    if (!b || !batch || !batch->ids)
        return fail(TD_EINVAL, "td_batcher_next: %s is NULL",
                    !b ? "batcher" : !batch ? "batch" : "batch->ids");
    batch->n_rows = 0;
    batch->n_targets = 0;
    batch->n_truncated = 0;
    if (b->ended)
        return 0;
    const int64_t S = b->p.seq;
    for (int64_t i = 0; i < b->p.batch; i++) {
        row_out r = {
            batch->ids + i * S,
            batch->targets ? batch->targets + i * S : NULL,
            batch->pos ? batch->pos + i * S : NULL,
            batch->doc_start ? batch->doc_start + i * S : NULL,
            0,
        };
        batch->n_rows += fill_row(b, &r, &batch->n_truncated);
        batch->n_targets += r.n_targets;
    }
    return 1;
}

int td_batcher_seek(td_batcher *b, const td_pos *pos)
{
    if (!b || !pos)
        return fail(TD_EINVAL, "td_batcher_seek: %s is NULL", b ? "pos" : "batcher");
    const uint64_t docs = b->set->info.docs, E = b->p.epochs;
    const td_pos p = *pos;
    if (E && (p.epoch > E || (p.epoch == E && (p.index || p.offset))))
        return fail(TD_ERANGE,
                    "position epoch %" PRIu64 " index %" PRIu64 " offset %" PRIu64
                    " is past the last of %" PRIu64 " epochs",
                    p.epoch, p.index, p.offset, E);
    if (E && p.epoch == E) {
        b->at = p;
        b->row = 0;
        b->ended = true;
        return 0;
    }
    if (p.index >= docs)
        return fail(TD_ERANGE, "position index %" PRIu64 " is outside the %" PRIu64 " documents",
                    p.index, docs);
    /* The epoch's order into a new array, so that a refusal leaves b as it
     * was. */
    uint64_t *perm = NULL;
    if (b->perm) {
        if (!(perm = malloc(docs * sizeof *perm)))
            return fail(TD_ENOMEM, "out of memory for the order of %" PRIu64 " documents", docs);
        make_perm(perm, docs, b->p.seed, p.epoch);
    }
    uint64_t *old = b->perm;
    b->perm = perm;
    uint64_t len = doc_len(b, p.index), row = p.index;
    int rc = 0;
    if (p.offset >= len || (b->p.mode == TD_PAD && p.offset))
        rc = fail(TD_ERANGE,
                  "position offset %" PRIu64 " is outside document %" PRIu64
                  " (index %" PRIu64 ") of %" PRIu64 " tokens%s",
                  p.offset, doc_of(b, p.index), p.index, len,
                  b->p.mode == TD_PAD ? " (padded rows start documents at 0)" : "");
    if (!rc && b->p.mode == TD_PACK) {
        uint64_t before = p.offset;
        for (uint64_t k = 0; k < p.index; k++)
            before += doc_len(b, k);
        if (before % (uint64_t)b->p.seq)
            rc = fail(TD_ERANGE,
                      "position epoch %" PRIu64 " index %" PRIu64 " offset %" PRIu64
                      " is token %" PRIu64 " of the epoch, not a row boundary of seq %" PRId64,
                      p.epoch, p.index, p.offset, before, b->p.seq);
        row = before / (uint64_t)b->p.seq;
    }
    if (rc) {
        b->perm = old;
        free(perm);
        return rc;
    }
    free(old);
    b->at = p;
    b->row = row;
    b->ended = false;
    return 0;
}

/* ---------------------------------------------------------------- positions as text */

int td_pos_format(const td_pos *pos, char *buf, size_t len)
{
    if (!pos || !buf)
        return fail(TD_EINVAL, "td_pos_format: NULL argument");
    int n = snprintf(buf, len, "{\"epoch\":%" PRIu64 ",\"index\":%" PRIu64 ",\"offset\":%" PRIu64
                               "}",
                     pos->epoch, pos->index, pos->offset);
    if (n < 0 || (size_t)n >= len)
        return fail(TD_ERANGE, "td_pos_format: %zu bytes are too few", len);
    return n;
}

static const char *skip_ws(const char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
        s++;
    return s;
}

int td_pos_parse(const char *text, td_pos *out)
{
    if (!text || !out)
        return fail(TD_EINVAL, "td_pos_parse: NULL argument");
    static const char *const names[3] = {"epoch", "index", "offset"};
    uint64_t v[3] = {0, 0, 0};
    bool seen[3] = {false, false, false};
    const char *s = skip_ws(text);
    if (*s++ != '{')
        return fail(TD_EINVAL, "stream position '%s': not a JSON object", text);
    s = skip_ws(s);
    if (*s == '}')
        return fail(TD_EINVAL, "stream position '%s': no member \"epoch\"", text);
    for (;;) {
        if (*s != '"')
            return fail(TD_EINVAL, "stream position '%s': a member name was expected", text);
        const char *k = ++s;
        while (*s && *s != '"' && *s != '\\')
            s++;
        if (*s != '"')
            return fail(TD_EINVAL, "stream position '%s': a member name is not a plain string",
                        text);
        size_t kn = (size_t)(s - k);
        int which = -1;
        for (int i = 0; i < 3; i++)
            if (strlen(names[i]) == kn && memcmp(names[i], k, kn) == 0)
                which = i;
        if (which < 0)
            return fail(TD_EINVAL, "stream position '%s': unknown member \"%.*s\"", text,
                        (int)(kn > 40 ? 40 : kn), k);
        if (seen[which])
            return fail(TD_EINVAL, "stream position '%s': \"%s\" given twice", text,
                        names[which]);
        seen[which] = true;
        s = skip_ws(s + 1);
        if (*s++ != ':')
            return fail(TD_EINVAL, "stream position '%s': ':' expected after \"%s\"", text,
                        names[which]);
        s = skip_ws(s);
        if (*s < '0' || *s > '9' || (s[0] == '0' && s[1] >= '0' && s[1] <= '9'))
            return fail(TD_EINVAL,
                        "stream position '%s': \"%s\" is not a non-negative integer", text,
                        names[which]);
        uint64_t x = 0;
        for (; *s >= '0' && *s <= '9'; s++) {
            unsigned dgt = (unsigned)(*s - '0');
            if (x > (UINT64_MAX - dgt) / 10)
                return fail(TD_EINVAL, "stream position '%s': \"%s\" is 2^64 or more", text,
                            names[which]);
            x = x * 10 + dgt;
        }
        if (*s == '.' || *s == 'e' || *s == 'E')
            return fail(TD_EINVAL,
                        "stream position '%s': \"%s\" is not a non-negative integer", text,
                        names[which]);
        v[which] = x;
        s = skip_ws(s);
        if (*s == ',') {
            s = skip_ws(s + 1);
            continue;
        }
        if (*s++ != '}')
            return fail(TD_EINVAL, "stream position '%s': ',' or '}' expected", text);
        break;
    }
    if (*skip_ws(s))
        return fail(TD_EINVAL, "stream position '%s': text after the object", text);
    for (int i = 0; i < 3; i++)
        if (!seen[i])
            return fail(TD_EINVAL, "stream position '%s': no member \"%s\"", text, names[i]);
    out->epoch = v[0];
    out->index = v[1];
    out->offset = v[2];
    return 0;
}
