/* SPDX-License-Identifier: MIT */
/*
 * A strict JSON reader for untrusted files (safetensors headers, Hugging
 * Face and PEFT configs). Recursive descent bounded by max_depth; every
 * node, string and member table lives in one arena freed with the
 * document, so a failed parse frees everything in one go.
 */
#include "model_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct pgrt_jval {
    uint8_t type;
    bool b;
    bool int_literal; /* no fraction, no exponent */
    bool is_int;      /* ... and fits in int64: i holds it */
    size_t offset;
    size_t n;        /* string length, array items or object members */
    double num;
    int64_t i;
    const char *s;
    const pgrt_jval **items;  /* array items / member values, document order */
    const char **keys;        /* object keys, document order */
    uint32_t *sorted;         /* member indices sorted by key */
};

typedef struct block {
    struct block *next;
    size_t used, cap;
    max_align_t data[];
} block;

struct pgrt_json {
    block *blocks;
    const pgrt_jval *root;
};

typedef struct parser {
    const unsigned char *p, *end, *start;
    pgrt_json_limits lim;
    const char *what;
    pgrt_json *doc;
    int depth;
    int err;
    /* one stack of pending children shared by all nesting levels */
    const pgrt_jval **stack;
    const char **kstack;
    size_t sp, scap;
    char *sbuf; /* string decode buffer */
    size_t scap_buf;
} parser;

static void *arena_alloc(pgrt_json *doc, size_t size)
{
    size = (size + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    block *b = doc->blocks;
    if (!b || b->cap - b->used < size) {
        size_t cap = size > 65536 ? size : 65536;
        block *nb = malloc(sizeof *nb + cap);
        if (!nb)
            return NULL;
        nb->used = 0;
        nb->cap = cap;
        nb->next = doc->blocks;
        doc->blocks = nb;
        b = nb;
    }
    void *r = (char *)b->data + b->used;
    b->used += size;
    return r;
}

static int fail(parser *ps, const unsigned char *at, int code, const char *msg, const char *arg)
{
    if (ps->err)
        return ps->err;
    ps->err = code;
    size_t off = (size_t)(at - ps->start);
    if (arg)
        model_fail(code, "%s%sbyte %zu: %s \"%.64s\"", ps->what ? ps->what : "",
                   ps->what ? ": " : "", off, msg, arg);
    else
        model_fail(code, "%s%sbyte %zu: %s", ps->what ? ps->what : "", ps->what ? ": " : "", off,
                   msg);
    return code;
}

static int oom(parser *ps) { return fail(ps, ps->p, PGRT_ENOMEM, "out of memory", NULL); }

static void skip_ws(parser *ps)
{
    while (ps->p < ps->end &&
           (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static pgrt_jval *new_node(parser *ps, pgrt_json_type t, const unsigned char *at)
{
    pgrt_jval *v = arena_alloc(ps->doc, sizeof *v);
    if (!v) {
        oom(ps);
        return NULL;
    }
    memset(v, 0, sizeof *v);
    v->type = (uint8_t)t;
    v->offset = (size_t)(at - ps->start);
    return v;
}

static int push(parser *ps, const pgrt_jval *v, const char *key)
{
    if (ps->sp == ps->scap) {
        size_t cap = ps->scap ? ps->scap * 2 : 64;
        const pgrt_jval **ns = realloc(ps->stack, cap * sizeof *ns);
        if (!ns)
            return oom(ps);
        ps->stack = ns;
        const char **nk = realloc(ps->kstack, cap * sizeof *nk);
        if (!nk)
            return oom(ps);
        ps->kstack = nk;
        ps->scap = cap;
    }
    ps->stack[ps->sp] = v;
    ps->kstack[ps->sp] = key;
    ps->sp++;
    return 0;
}

static int sbuf_put(parser *ps, size_t len, const char *bytes, size_t n)
{
    if (len + n > ps->lim.max_string)
        return fail(ps, ps->p, PGRT_ERANGE, "string longer than the limit", NULL);
    if (len + n + 1 > ps->scap_buf) {
        size_t cap = ps->scap_buf ? ps->scap_buf : 256;
        while (cap < len + n + 1)
            cap *= 2;
        char *nb = realloc(ps->sbuf, cap);
        if (!nb)
            return oom(ps);
        ps->sbuf = nb;
        ps->scap_buf = cap;
    }
    memcpy(ps->sbuf + len, bytes, n);
    return 0;
}

static int hex4(const unsigned char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        v = v * 16 + d;
    }
    *out = v;
    return 0;
}

/* Length of the valid UTF-8 sequence at p (RFC 3629), 0 if invalid. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0; /* overlong */
        if (c == 0xED)
            hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F; /* > U+10FFFF */
    } else
        return 0;
    if ((size_t)(end - p) < n)
        return 0;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return n;
}

/* Parse a string at ps->p (on the quote) into the arena. */
/* A code point as UTF-8 into u: the bytes it took. */
static size_t utf8_put(unsigned cp, char u[4])
{
    if (cp < 0x80) {
        u[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    u[0] = (char)(0xF0 | (cp >> 18));
    u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    u[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A \uXXXX escape at ps->p (a surrogate pair as one), its code point
 * appended to the string buffer at *len as UTF-8. 0, or -1 after fail(). */
static int unicode_escape(parser *ps, size_t *len)
{
    unsigned cp;
    if (ps->end - ps->p < 6 || hex4(ps->p + 2, &cp) != 0) {
        fail(ps, ps->p, PGRT_EINVAL, "bad unicode escape (not four hex digits)", NULL);
        return -1;
    }
    const unsigned char *esc = ps->p;
    ps->p += 6;
    if (cp >= 0xDC00 && cp <= 0xDFFF) {
        fail(ps, esc, PGRT_EINVAL, "lone low surrogate escape", NULL);
        return -1;
    }
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        unsigned lo;
        if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' ||
            hex4(ps->p + 2, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF) {
            fail(ps, esc, PGRT_EINVAL, "lone high surrogate escape", NULL);
            return -1;
        }
        ps->p += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (cp == 0) {
        fail(ps, esc, PGRT_EINVAL, "\\u0000 in a string", NULL);
        return -1;
    }
    char u[4];
    size_t n = utf8_put(cp, u);
    if (sbuf_put(ps, *len, u, n) != 0)
        return -1;
    *len += n;
    return 0;
}

/* The escape at ps->p (a backslash and what follows), appended to the
 * string buffer at *len. 0, or -1 after fail(). */
static int escape(parser *ps, const unsigned char *open, size_t *len)
{
    if (ps->end - ps->p < 2) {
        fail(ps, open, PGRT_EINVAL, "unterminated string", NULL);
        return -1;
    }
    char ch;
    switch (ps->p[1]) {
    case '"': ch = '"'; break;
    case '\\': ch = '\\'; break;
    case '/': ch = '/'; break;
    case 'b': ch = '\b'; break;
    case 'f': ch = '\f'; break;
    case 'n': ch = '\n'; break;
    case 'r': ch = '\r'; break;
    case 't': ch = '\t'; break;
    case 'u': return unicode_escape(ps, len);
    default:
        fail(ps, ps->p, PGRT_EINVAL, "bad escape in a string", NULL);
        return -1;
    }
    if (sbuf_put(ps, *len, &ch, 1) != 0)
        return -1;
    (*len)++;
    ps->p += 2;
    return 0;
}

static const char *parse_string(parser *ps, size_t *len_out)
{
    const unsigned char *open = ps->p;
    ps->p++;
    size_t len = 0;
    for (;;) {
        if (ps->p >= ps->end) {
            fail(ps, open, PGRT_EINVAL, "unterminated string", NULL);
            return NULL;
        }
        unsigned c = *ps->p;
        if (c == '"') {
            ps->p++;
            break;
        }
        if (c < 0x20) {
            fail(ps, ps->p, PGRT_EINVAL, "control character in a string", NULL);
            return NULL;
        }
        if (c == '\\') {
            if (escape(ps, open, &len) != 0)
                return NULL;
            continue;
        }
        if (c < 0x80) {
            /* a run of plain ASCII goes in one copy */
            const unsigned char *q = ps->p;
            while (q < ps->end && *q >= 0x20 && *q < 0x80 && *q != '"' && *q != '\\')
                q++;
            size_t run = (size_t)(q - ps->p);
            if (sbuf_put(ps, len, (const char *)ps->p, run) != 0)
                return NULL;
            len += run;
            ps->p = q;
            continue;
        }
        size_t n = utf8_len(ps->p, ps->end);
        if (n == 0) {
            fail(ps, ps->p, PGRT_EINVAL, "invalid UTF-8 in a string", NULL);
            return NULL;
        }
        if (sbuf_put(ps, len, (const char *)ps->p, n) != 0)
            return NULL;
        len += n;
        ps->p += n;
    }
    char *s = arena_alloc(ps->doc, len + 1);
    if (!s) {
        oom(ps);
        return NULL;
    }
    if (len)
        memcpy(s, ps->sbuf, len);
    s[len] = '\0';
    *len_out = len;
    return s;
}

static const pgrt_jval *parse_number(parser *ps)
{
    const unsigned char *s = ps->p, *q = s;
    bool is_int = true;
    if (q < ps->end && *q == '-')
        q++;
    if (q >= ps->end || !(*q >= '0' && *q <= '9')) {
        fail(ps, s, PGRT_EINVAL, "bad number", NULL);
        return NULL;
    }
    if (*q == '0') {
        q++;
        if (q < ps->end && *q >= '0' && *q <= '9') {
            fail(ps, s, PGRT_EINVAL, "leading zero in a number", NULL);
            return NULL;
        }
    } else
        while (q < ps->end && *q >= '0' && *q <= '9')
            q++;
    if (q < ps->end && *q == '.') {
        is_int = false;
        q++;
        if (q >= ps->end || !(*q >= '0' && *q <= '9')) {
            fail(ps, s, PGRT_EINVAL, "bad number", NULL);
            return NULL;
        }
        while (q < ps->end && *q >= '0' && *q <= '9')
            q++;
    }
    if (q < ps->end && (*q == 'e' || *q == 'E')) {
        is_int = false;
        q++;
        if (q < ps->end && (*q == '+' || *q == '-'))
            q++;
        if (q >= ps->end || !(*q >= '0' && *q <= '9')) {
            fail(ps, s, PGRT_EINVAL, "bad number", NULL);
            return NULL;
        }
        while (q < ps->end && *q >= '0' && *q <= '9')
            q++;
    }
    size_t n = (size_t)(q - s);
    if (n > ps->lim.max_number) {
        fail(ps, s, PGRT_ERANGE, "number literal longer than the limit", NULL);
        return NULL;
    }
    char buf[1100];
    memcpy(buf, s, n);
    buf[n] = '\0';
    pgrt_jval *v = new_node(ps, PGRT_JSON_NUMBER, s);
    if (!v)
        return NULL;
    errno = 0;
    v->num = strtod(buf, NULL);
    if (errno == ERANGE && (v->num > 1.0 || v->num < -1.0)) {
        fail(ps, s, PGRT_ERANGE, "number out of the range of a double", NULL);
        return NULL;
    }
    v->int_literal = is_int;
    if (is_int) {
        errno = 0;
        long long i = strtoll(buf, NULL, 10);
        if (errno == 0) {
            v->is_int = true;
            v->i = (int64_t)i;
        }
    }
    ps->p = q;
    return v;
}

static const pgrt_jval *parse_value(parser *ps);

static int key_cmp_ctx_sort(const char **keys, uint32_t *idx, size_t n)
{
    /* insertion sort for small objects, else merge sort (stable, no
     * recursion beyond log n) */
    if (n <= 16) {
        for (size_t i = 1; i < n; i++)
            for (size_t j = i; j > 0 && strcmp(keys[idx[j - 1]], keys[idx[j]]) > 0; j--) {
                uint32_t t = idx[j];
                idx[j] = idx[j - 1];
                idx[j - 1] = t;
            }
        return 0;
    }
    uint32_t *tmp = malloc(n * sizeof *tmp);
    if (!tmp)
        return -1;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t a = lo, b = mid, k = lo;
            while (a < mid && b < hi)
                tmp[k++] = strcmp(keys[idx[a]], keys[idx[b]]) <= 0 ? idx[a++] : idx[b++];
            while (a < mid)
                tmp[k++] = idx[a++];
            while (b < hi)
                tmp[k++] = idx[b++];
        }
        memcpy(idx, tmp, n * sizeof *tmp);
    }
    free(tmp);
    return 0;
}

static const pgrt_jval *parse_container(parser *ps, bool object)
{
    const unsigned char *open = ps->p;
    if (++ps->depth > ps->lim.max_depth) {
        fail(ps, open, PGRT_ERANGE, "nesting deeper than the limit", NULL);
        return NULL;
    }
    ps->p++;
    size_t base = ps->sp;
    char close = object ? '}' : ']';
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
    } else {
        for (;;) {
            skip_ws(ps);
            const char *key = NULL;
            if (object) {
                if (ps->p >= ps->end || *ps->p != '"') {
                    fail(ps, ps->p, PGRT_EINVAL, "expected a key string", NULL);
                    return NULL;
                }
                size_t kl;
                key = parse_string(ps, &kl);
                if (!key)
                    return NULL;
                skip_ws(ps);
                if (ps->p >= ps->end || *ps->p != ':') {
                    fail(ps, ps->p, PGRT_EINVAL, "expected ':'", NULL);
                    return NULL;
                }
                ps->p++;
            }
            const pgrt_jval *v = parse_value(ps);
            if (!v || push(ps, v, key) != 0)
                return NULL;
            skip_ws(ps);
            if (ps->p >= ps->end) {
                fail(ps, open, PGRT_EINVAL, object ? "unterminated object" : "unterminated array",
                     NULL);
                return NULL;
            }
            if (*ps->p == ',') {
                ps->p++;
                continue;
            }
            if (*ps->p == (unsigned char)close) {
                ps->p++;
                break;
            }
            fail(ps, ps->p, PGRT_EINVAL, object ? "expected ',' or '}'" : "expected ',' or ']'",
                 NULL);
            return NULL;
        }
    }
    ps->depth--;
    pgrt_jval *v = new_node(ps, object ? PGRT_JSON_OBJECT : PGRT_JSON_ARRAY, open);
    if (!v)
        return NULL;
    size_t n = ps->sp - base;
    if (n > UINT32_MAX) {
        fail(ps, open, PGRT_ERANGE, "too many members", NULL);
        return NULL;
    }
    v->n = n;
    if (n) {
        v->items = arena_alloc(ps->doc, n * sizeof *v->items);
        if (!v->items) {
            oom(ps);
            return NULL;
        }
        memcpy(v->items, ps->stack + base, n * sizeof *v->items);
    }
    if (object && n) {
        v->keys = arena_alloc(ps->doc, n * sizeof *v->keys);
        v->sorted = arena_alloc(ps->doc, n * sizeof *v->sorted);
        if (!v->keys || !v->sorted) {
            oom(ps);
            return NULL;
        }
        memcpy(v->keys, ps->kstack + base, n * sizeof *v->keys);
        for (size_t i = 0; i < n; i++)
            v->sorted[i] = (uint32_t)i;
        if (key_cmp_ctx_sort(v->keys, v->sorted, n) != 0) {
            oom(ps);
            return NULL;
        }
        for (size_t i = 1; i < n; i++)
            if (strcmp(v->keys[v->sorted[i - 1]], v->keys[v->sorted[i]]) == 0) {
                /* report the later occurrence, where the reader would see it */
                uint32_t a = v->sorted[i - 1], b = v->sorted[i];
                const pgrt_jval *dup = v->items[a > b ? a : b];
                fail(ps, ps->start + dup->offset, PGRT_EINVAL, "duplicate key",
                     v->keys[v->sorted[i]]);
                return NULL;
            }
    }
    ps->sp = base;
    return v;
}

static bool lit(parser *ps, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
        return false;
    ps->p += n;
    return true;
}

static const pgrt_jval *parse_value(parser *ps)
{
    skip_ws(ps);
    if (ps->p >= ps->end) {
        fail(ps, ps->p, PGRT_EINVAL, "unexpected end of text", NULL);
        return NULL;
    }
    const unsigned char *at = ps->p;
    switch (*ps->p) {
    case '{':
        return parse_container(ps, true);
    case '[':
        return parse_container(ps, false);
    case '"': {
        size_t len;
        const char *s = parse_string(ps, &len);
        if (!s)
            return NULL;
        pgrt_jval *v = new_node(ps, PGRT_JSON_STRING, at);
        if (v) {
            v->s = s;
            v->n = len;
        }
        return v;
    }
    case 't':
    case 'f':
    case 'n': {
        pgrt_jval *v;
        if (lit(ps, "true")) {
            if ((v = new_node(ps, PGRT_JSON_BOOL, at)))
                v->b = true;
            return v;
        }
        if (lit(ps, "false"))
            return new_node(ps, PGRT_JSON_BOOL, at);
        if (lit(ps, "null"))
            return new_node(ps, PGRT_JSON_NULL, at);
        break;
    }
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))
            return parse_number(ps);
        break;
    }
    fail(ps, at, PGRT_EINVAL, "unexpected character", NULL);
    return NULL;
}

int pgrt_json_parse(const char *text, size_t len, const pgrt_json_limits *limits,
                    const char *what, pgrt_json **out)
{
    RT_NONNULL(__func__, out, "out");
    if (len)
        RT_NONNULL(__func__, text, "text");
    *out = NULL;
    parser ps = {0};
    ps.lim.max_size = limits && limits->max_size ? limits->max_size : 100u * 1000 * 1000;
    ps.lim.max_depth = limits && limits->max_depth > 0 ? limits->max_depth : 64;
    ps.lim.max_string = limits && limits->max_string ? limits->max_string : 1u << 20;
    ps.lim.max_number = limits && limits->max_number ? limits->max_number : 64;
    if (ps.lim.max_number > 1024)
        ps.lim.max_number = 1024;
    /* the descent recurses once a level: keep the C stack bounded */
    if (ps.lim.max_depth > 512)
        ps.lim.max_depth = 512;
    ps.what = what;
    ps.start = ps.p = (const unsigned char *)(text ? text : "");
    ps.end = ps.p + len;
    if (len > ps.lim.max_size)
        return model_fail(PGRT_ERANGE, "%s%s%zu bytes of JSON, over the limit of %zu",
                          what ? what : "", what ? ": " : "", len, ps.lim.max_size);
    pgrt_json *doc = calloc(1, sizeof *doc);
    if (!doc)
        return model_fail(PGRT_ENOMEM, "out of memory");
    ps.doc = doc;
    const pgrt_jval *root = parse_value(&ps);
    if (root) {
        skip_ws(&ps);
        if (ps.p != ps.end)
            fail(&ps, ps.p, PGRT_EINVAL, "text after the JSON value", NULL);
    }
    free(ps.stack);
    free(ps.kstack);
    free(ps.sbuf);
    if (ps.err) {
        pgrt_json_destroy(&doc);
        return ps.err;
    }
    doc->root = root;
    *out = doc;
    return 0;
}

void pgrt_json_destroy(pgrt_json **doc)
{
    if (!doc || !*doc)
        return;
    block *b = (*doc)->blocks;
    while (b) {
        block *n = b->next;
        free(b);
        b = n;
    }
    free(*doc);
    *doc = NULL;
}

const pgrt_jval *pgrt_json_root(const pgrt_json *doc) { return doc ? doc->root : NULL; }

pgrt_json_type pgrt_jval_type(const pgrt_jval *v)
{
    return v ? (pgrt_json_type)v->type : PGRT_JSON_NULL;
}

bool pgrt_jval_is_null(const pgrt_jval *v) { return v && v->type == PGRT_JSON_NULL; }

size_t pgrt_jval_offset(const pgrt_jval *v) { return v ? v->offset : 0; }

size_t pgrt_jval_count(const pgrt_jval *v)
{
    return v && (v->type == PGRT_JSON_ARRAY || v->type == PGRT_JSON_OBJECT) ? v->n : 0;
}

const pgrt_jval *pgrt_jval_item(const pgrt_jval *arr, size_t i)
{
    return arr && arr->type == PGRT_JSON_ARRAY && i < arr->n ? arr->items[i] : NULL;
}

const char *pgrt_jval_key_at(const pgrt_jval *obj, size_t i)
{
    return obj && obj->type == PGRT_JSON_OBJECT && i < obj->n ? obj->keys[i] : NULL;
}

const pgrt_jval *pgrt_jval_value_at(const pgrt_jval *obj, size_t i)
{
    return obj && obj->type == PGRT_JSON_OBJECT && i < obj->n ? obj->items[i] : NULL;
}

const pgrt_jval *pgrt_jval_member(const pgrt_jval *obj, const char *key)
{
    if (!obj || obj->type != PGRT_JSON_OBJECT || !key)
        return NULL;
    size_t lo = 0, hi = obj->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(obj->keys[obj->sorted[mid]], key);
        if (c == 0)
            return obj->items[obj->sorted[mid]];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const char *pgrt_jval_string(const pgrt_jval *v, size_t *len)
{
    if (!v || v->type != PGRT_JSON_STRING)
        return NULL;
    if (len)
        *len = v->n;
    return v->s;
}

int pgrt_jval_int64(const pgrt_jval *v, int64_t min, int64_t max, int64_t *out)
{
    if (!v || v->type != PGRT_JSON_NUMBER)
        return PGRT_EINVAL;
    if (!v->int_literal)
        return PGRT_EINVAL;
    /* an integer literal beyond int64 is out of range, not malformed */
    if (!v->is_int)
        return PGRT_ERANGE;
    if (v->i < min || v->i > max)
        return PGRT_ERANGE;
    *out = v->i;
    return 0;
}

int pgrt_jval_double(const pgrt_jval *v, double *out)
{
    if (!v || v->type != PGRT_JSON_NUMBER)
        return PGRT_EINVAL;
    *out = v->num;
    return 0;
}

int pgrt_jval_bool(const pgrt_jval *v, bool *out)
{
    if (!v || v->type != PGRT_JSON_BOOL)
        return PGRT_EINVAL;
    *out = v->b;
    return 0;
}

/* ---------------------------------------------------------------- typed members */

/* The model_*_req/opt readers of model_internal.h live beside the
 * accessors they read through, not in util.c: util.c (model_fail) sits
 * under this reader and must need nothing back from it. */

static int member(const pgrt_jval *obj, const char *field, const pgrt_jval **v)
{
    *v = pgrt_jval_member(obj, field);
    return *v && !pgrt_jval_is_null(*v);
}

static int int_field(const pgrt_jval *v, const char *what, const char *field, int64_t min,
                     int64_t max, int64_t *out)
{
    int rc = pgrt_jval_int64(v, min, max, out);
    if (rc == PGRT_EINVAL)
        return model_fail(rc, "%s: %s: expected an integer", what, field);
    if (rc == PGRT_ERANGE)
        return model_fail(rc, "%s: %s: out of range [%lld, %lld]", what, field, (long long)min,
                          (long long)max);
    return rc;
}

int model_int_req(const pgrt_jval *obj, const char *what, const char *field, int64_t min,
                  int64_t max, int64_t *out)
{
    const pgrt_jval *v;
    if (!member(obj, field, &v))
        return model_fail(PGRT_EINVAL, "%s: %s: missing", what, field);
    return int_field(v, what, field, min, max, out);
}

int model_int_opt(const pgrt_jval *obj, const char *what, const char *field, int64_t min,
                  int64_t max, int64_t *out)
{
    const pgrt_jval *v;
    if (!member(obj, field, &v))
        return 1;
    return int_field(v, what, field, min, max, out);
}

int model_double_opt(const pgrt_jval *obj, const char *what, const char *field, double *out)
{
    const pgrt_jval *v;
    if (!member(obj, field, &v))
        return 1;
    if (pgrt_jval_double(v, out) != 0)
        return model_fail(PGRT_EINVAL, "%s: %s: expected a number", what, field);
    return 0;
}

int model_bool_opt(const pgrt_jval *obj, const char *what, const char *field, bool *out)
{
    const pgrt_jval *v;
    if (!member(obj, field, &v))
        return 1;
    if (pgrt_jval_bool(v, out) != 0)
        return model_fail(PGRT_EINVAL, "%s: %s: expected true or false", what, field);
    return 0;
}

int model_string_opt(const pgrt_jval *obj, const char *what, const char *field,
                     const char **out)
{
    const pgrt_jval *v;
    *out = NULL;
    if (!member(obj, field, &v))
        return 1;
    *out = pgrt_jval_string(v, NULL);
    if (!*out)
        return model_fail(PGRT_EINVAL, "%s: %s: expected a string", what, field);
    return 0;
}
