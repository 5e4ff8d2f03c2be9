/* SPDX-License-Identifier: MIT */
/*
 * Text: operands, one instruction, the growing buffer the emitter writes
 * into. The op table's text form and format decide how an instruction is
 * written (emitf reads the format); only the instructions whose text needs
 * code have a case of their own here (custom). Used by the emitter and,
 * for messages, by the builder and the validator; it calls neither.
 */
#include "internal.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------- buffer */

/* Room for n more bytes and the NUL. The common case, room already there,
 * is the inline test; growing is out of line. */
static void sb_grow(pg_sbuf *b, size_t n)
{
    if (n > SIZE_MAX / 4 - b->len) {
        b->oom = true;
        return;
    }
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n + 1)
        cap *= 2;
    char *np = pg_mem_realloc(b->p, cap);
    if (!np) {
        b->oom = true;
        return;
    }
    b->p = np;
    b->cap = cap;
}

static inline bool sb_reserve(pg_sbuf *b, size_t n)
{
    if (b->oom)
        return false;
    if (n >= b->cap - b->len) /* cap > len whenever p is set; 0 - 0 when not */
        sb_grow(b, n);
    return !b->oom;
}

bool pg_sb_reserve(pg_sbuf *b, size_t n) { return sb_reserve(b, n); }

void pg_sb_put(pg_sbuf *b, const char *s, size_t n)
{
    if (!sb_reserve(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* A piece of one or two bytes (" ", ", "): a memcpy call costs more. */
static inline void sb_lit(pg_sbuf *b, const char *s, size_t n)
{
    if (!sb_reserve(b, n))
        return;
    char *d = b->p + b->len;
    for (size_t i = 0; i < n; i++)
        d[i] = s[i];
    b->len += n;
    d[n] = '\0';
}

/* Copies s up to its end or the first `stop`, and returns where it
 * stopped. Copies while it measures: the pieces are a few bytes each
 * (names, stems, ", "), where a strlen and a memcpy call cost more than
 * the copy. */
static const char *sb_copy(pg_sbuf *b, const char *s, char stop)
{
    for (;;) {
        if (!sb_reserve(b, 32))
            return s + strlen(s);
        char *d = b->p + b->len, *end = b->p + b->cap - 1;
        while (d < end && *s && *s != stop)
            *d++ = *s++;
        b->len = (size_t)(d - b->p);
        *d = '\0';
        if (d < end)
            return s;
    }
}

void pg_sb_str(pg_sbuf *b, const char *s) { (void)sb_copy(b, s, '\0'); }

/* A piece whose length the tables know: an op's stem, a type's name. */
static inline void sb_known(pg_sbuf *b, const char *s, size_t n)
{
    if (!sb_reserve(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* ".type" from the type table. */
static inline void sb_dot_type(pg_sbuf *b, pg_type t)
{
    const pg_type_info *ti = pg_type_row(t);
    if (!sb_reserve(b, (size_t)ti->name_len + 1))
        return;
    char *d = b->p + b->len;
    *d++ = '.';
    memcpy(d, ti->name, ti->name_len);
    b->len += (size_t)ti->name_len + 1;
    b->p[b->len] = '\0';
}

/* "stem.type" from the op and type tables. */
static inline void sb_op_type(pg_sbuf *b, const pg_op_info *oi, pg_type t)
{
    const pg_type_info *ti = pg_type_row(t);
    if (!sb_reserve(b, (size_t)oi->stem_len + 1 + ti->name_len))
        return;
    char *d = b->p + b->len;
    memcpy(d, oi->stem, oi->stem_len);
    d += oi->stem_len;
    *d++ = '.';
    memcpy(d, ti->name, ti->name_len);
    d += ti->name_len;
    *d = '\0';
    b->len = (size_t)(d - b->p);
}

/* Numbers are written by hand: they are most of an instruction's text, and
 * printf's general machinery was a quarter of the time to emit a kernel.
 * The put_ writers write at d, unterminated, into room the caller has
 * reserved, and return the end. */
static char *put_dec(char *d, uint64_t v, bool neg)
{
    /* last digit first: no scratch copy */
    unsigned n = 1;
    for (uint64_t t = v; t >= 10; t /= 10)
        n++;
    if (neg)
        *d++ = '-';
    char *e = d + n;
    do
        *--e = (char)('0' + v % 10);
    while (v /= 10);
    return d + n;
}

/* `digits` uppercase hex digits, zero-padded ("%08X"). */
static char *put_hex(char *d, uint64_t v, unsigned digits)
{
    for (unsigned i = digits; i-- > 0; v >>= 4)
        d[i] = "0123456789ABCDEF"[v & 15];
    return d + digits;
}

/* An immediate as the instruction type t reads it: at most 21 bytes
 * ("-9223372036854775808", "0d3FF0000000000000"). */
static char *put_imm(char *d, pg_val v, pg_type t)
{
    switch (v.kind) {
    case PG_VAL_IMM_F32: /* the bits, exact: 0f3F800000 */
        *d++ = '0';
        *d++ = 'f';
        return put_hex(d, v.bits & 0xffffffffu, 8);
    case PG_VAL_IMM_F64:
        *d++ = '0';
        *d++ = 'd';
        return put_hex(d, v.bits, 16);
    default: {
        /* the row inline: a line's immediates ask it once each */
        const pg_type_info *ti = (unsigned)t < PG_TYPE_COUNT ? pg_type_row(t) : NULL;
        unsigned bits = ti ? ti->bits : 0;
        if (bits == 0 || bits == 1)
            bits = 64;
        if (ti && ti->is_signed) {
            int64_t x = (int64_t)v.bits;
            /* the magnitude of INT64_MIN only fits unsigned */
            return put_dec(d, x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x, x < 0);
        }
        return put_dec(d, bits >= 64 ? v.bits : (v.bits & ((UINT64_C(1) << bits) - 1)), false);
    }
    }
}

static void sb_dec(pg_sbuf *b, uint64_t v, bool neg)
{
    if (!sb_reserve(b, 21))
        return;
    char *e = put_dec(b->p + b->len, v, neg);
    *e = '\0';
    b->len = (size_t)(e - b->p);
}

static void sb_u64(pg_sbuf *b, uint64_t v) { sb_dec(b, v, false); }

/* ".vN" of a vector access; nothing for a scalar one. */
static void sb_width(pg_sbuf *b, unsigned width)
{
    if (width > 1) {
        sb_lit(b, ".v", 2);
        sb_u64(b, width);
    }
}

static void sb_i64(pg_sbuf *b, int64_t v)
{
    /* the magnitude of INT64_MIN only fits unsigned */
    sb_dec(b, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v, v < 0);
}

/* The conversions the text uses: %s %c %u %d %llu %lld %%, no flags, width
 * or precision. Writes fmt and returns true, or returns false at the first
 * other conversion, having written part of it. One pass: the format
 * strings are short and a line has several. */
static bool sb_fmt_simple(pg_sbuf *b, const char *fmt, va_list ap)
{
    const char *p = fmt;
    for (;;) {
        p = sb_copy(b, p, '%');
        if (!*p)
            return true;
        p++;
        bool wide = p[0] == 'l' && p[1] == 'l';
        if (wide)
            p += 2;
        switch (*p) {
        case 's':
            if (wide)
                return false;
            pg_sb_str(b, va_arg(ap, const char *));
            break;
        case 'c': {
            if (wide)
                return false;
            char c = (char)va_arg(ap, int);
            pg_sb_put(b, &c, 1);
            break;
        }
        case 'u':
            sb_u64(b, wide ? (uint64_t)va_arg(ap, unsigned long long) : va_arg(ap, unsigned));
            break;
        case 'd':
            sb_i64(b, wide ? (int64_t)va_arg(ap, long long) : va_arg(ap, int));
            break;
        case '%':
            if (wide)
                return false;
            pg_sb_put(b, "%", 1);
            break;
        default:
            return false;
        }
        p++;
    }
}

/* Formats straight into the buffer, however long the result: a line is
 * never cut (a cut comment once swallowed the instruction after it). The
 * conversions the text uses are written here; a format with any other
 * goes to vsnprintf whole. */
void pg_sb_fmt(pg_sbuf *b, const char *fmt, ...)
{
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    size_t start = b->len;
    bool done = sb_fmt_simple(b, fmt, ap);
    va_end(ap);
    if (done || b->oom) {
        va_end(again);
        return;
    }
    b->len = start; /* sb_fmt_simple wrote something, so p is set */
    b->p[start] = '\0';
    int n = vsnprintf(NULL, 0, fmt, again);
    va_end(again);
    if (n < 0) {
        b->oom = true; /* an encoding error: fail the text rather than drop a piece */
        return;
    }
    va_start(ap, fmt);
    if (sb_reserve(b, (size_t)n)) {
        vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
        b->len += (size_t)n;
    }
    va_end(ap);
}

/* ---------------------------------------------------------------- names */

static const char *const cmp_names[PG_CMP_COUNT] = {
    "eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs",
    "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan",
};
static const char *const rnd_names[PG_RND_COUNT] = {
    "", ".rn", ".rz", ".rm", ".rp", ".rni", ".rzi", ".rmi", ".rpi",
};
static const char *const space_names[] = {"global", "shared", "param"};
static const char *const scope_names[] = {"cta", "gpu", "sys"};
static const char *const membar_names[] = {"cta", "gl", "sys"};
static const char *const shfl_names[] = {"up", "down", "bfly", "idx"};
static const char *const vote_names[] = {"all", "any", "uni", "ballot"};
static const char *const atom_names[PG_ATOM_COUNT] = {
    "add", "min", "max", "cas", "exch", "and", "or", "xor",
};

const char *pg_atom_name(pg_atom_op op)
{
    return (unsigned)op < PG_ATOM_COUNT ? atom_names[op] : "?";
}

const char *pg_shfl_name(pg_shfl_mode m)
{
    return (unsigned)m <= PG_SHFL_IDX ? shfl_names[m] : "?";
}

const char *pg_vote_name(pg_vote_mode m)
{
    return (unsigned)m <= PG_VOTE_BALLOT ? vote_names[m] : "?";
}

const char *pg_space_name(pg_space s)
{
    return (unsigned)s <= PG_SPACE_PARAM ? space_names[s] : "?";
}

/* The type PTX wants for bitwise ops and moves of a given type. */
static pg_type bit_type_of(pg_type t)
{
    switch (pg_type_bits(t)) {
    case 1: return PG_PRED;
    case 8: return PG_B8;
    case 16: return PG_B16;
    case 32: return PG_B32;
    default: return PG_B64;
    }
}

static const char *bit_type(pg_type t) { return pg_type_name(bit_type_of(t)); }

/* ld/st/mov of f16/bf16 move bits */
static pg_type data_type_of(pg_type t) { return (t == PG_F16 || t == PG_BF16) ? PG_B16 : t; }

const char *pg_data_type_name(pg_type t) { return pg_type_name(data_type_of(t)); }

/* ---------------------------------------------------------------- operands */

/* A register's name ("%rd12") at d, unterminated: a prefix of a few bytes,
 * then a 32-bit number; at most 14 bytes. Returns its length. */
static unsigned reg_name(char *d, const char *prefix, uint32_t num)
{
    unsigned p = 0;
    for (; prefix[p] && p < 4; p++) /* the prefixes are 2-3 bytes */
        d[p] = prefix[p];
    unsigned n = 1;
    for (uint32_t t = num; t >= 10; t /= 10)
        n++;
    char *e = d + p + n;
    do
        *--e = (char)('0' + num % 10);
    while (num /= 10);
    return p + n;
}

/* The text of a line before its operands, kept for the next lines of the
 * same op: most heads repeat ("and.pred", "setp.lt.u32"). The key holds
 * the fields a head depends on (head_key). */
typedef struct pg_head {
    uint64_t key; /* HEAD_EMPTY: no head yet */
    uint8_t len;
    char s[23];
} pg_head;

/* Each op keeps its last few heads, the latest first: an op's lines
 * alternate between a few (st.global.f32 and st.global.v2.f32). */
#define HEAD_WAYS 4
#define HEAD_EMPTY UINT64_MAX

struct pg_text_cache {
    pg_head head[OP_COUNT][HEAD_WAYS];
    pg_sbuf scratch; /* where a missing head is written */
};

/* Each register's name, written once (a register is named about four
 * times in a kernel's text): "%rd12" NUL-padded, its length in byte 15.
 * The longest, a prefix of three and ten digits, leaves the padding. The
 * heads of the plain lines are written as lines first need them. */
int pg_text_begin(pg_kernel *k)
{
    char (*t)[16] = arena_alloc(&k->mem, sizeof *t * k->nregs);
    struct pg_text_cache *h = arena_alloc(&k->mem, sizeof *h);
    if (!t || !h)
        return pg_fail(k, PG_ENOMEM, "out of memory while writing PTX");
    /* A class's registers are numbered 1, 2, ... in the order they were
     * made, so each name is the class's last one counted up by one, in
     * decimal: cheaper than writing each number anew. */
    char next[RC_COUNT][16];
    uint32_t next_num[RC_COUNT];
    for (int c = 0; c < RC_COUNT; c++) {
        memset(next[c], 0, sizeof next[c]);
        next[c][15] = (char)reg_name(next[c], pg_reg_prefix((reg_class)c), 1);
        next_num[c] = 1;
    }
    for (uint32_t id = 1; id < k->nregs; id++) {
        const reg_info *r = &k->regs[id];
        char *n = next[r->cls];
        if (r->num != next_num[r->cls]) { /* not in order: write it out */
            memset(t[id], 0, sizeof t[id]);
            t[id][15] = (char)reg_name(t[id], pg_reg_prefix((reg_class)r->cls), r->num);
            continue;
        }
        memcpy(t[id], n, 16);
        next_num[r->cls]++;
        int len = n[15], i = len - 1;
        while (n[i] == '9') /* the prefix ("%rd") holds no digit */
            n[i--] = '0';
        if (n[i] >= '0' && n[i] <= '8') {
            n[i]++;
        } else { /* 99 -> 100 */
            n[i + 1] = '1';
            n[len] = '0';
            n[15] = (char)(len + 1);
        }
    }
    memset(h, 0, sizeof *h);
    for (int op = 0; op < OP_COUNT; op++)
        for (unsigned w = 0; w < HEAD_WAYS; w++)
            h->head[op][w].key = HEAD_EMPTY;
    k->reg_text = (const char (*)[16])t;
    k->head_text = h;
    return PG_OK;
}

void pg_text_end(pg_kernel *k)
{
    /* arena memory, freed with the kernel, but for the scratch text */
    if (k->head_text)
        pg_mem_free(k->head_text->scratch.p);
    k->reg_text = NULL;
    k->head_text = NULL;
}

static void sb_val_slow(pg_sbuf *b, const pg_kernel *k, pg_val v, pg_type t);

/* A register, the most common operand by far, is one 16-byte copy once
 * the names are written (pg_reg_text_make); the rest go the long way. */
static inline void sb_val(pg_sbuf *b, const pg_kernel *k, pg_val v, pg_type t)
{
    if (v.kind == PG_VAL_REG && k->reg_text && v.id && v.id < k->nregs) {
        if (!sb_reserve(b, 16))
            return;
        const char *name = k->reg_text[v.id];
        memcpy(b->p + b->len, name, 16); /* the NUL comes with it */
        b->len += (unsigned char)name[15];
        return;
    }
    sb_val_slow(b, k, v, t);
}

static void sb_val_slow(pg_sbuf *b, const pg_kernel *k, pg_val v, pg_type t)
{
    switch (v.kind) {
    case PG_VAL_REG:
        if (v.id && v.id < k->nregs) {
            const reg_info *r = &k->regs[v.id];
            if (sb_reserve(b, 16)) {
                b->len += reg_name(b->p + b->len, pg_reg_prefix((reg_class)r->cls), r->num);
                b->p[b->len] = '\0';
            }
        } else {
            pg_sb_str(b, "%invalid");
            sb_u64(b, v.id);
        }
        return;
    case PG_VAL_IMM_INT:
    case PG_VAL_IMM_F32:
    case PG_VAL_IMM_F64:
        if (sb_reserve(b, 24)) {
            char *e = put_imm(b->p + b->len, v, t);
            *e = '\0';
            b->len = (size_t)(e - b->p);
        }
        return;
    case PG_VAL_SHARED:
        pg_sb_str(b, v.id && v.id < k->nshared ? k->shared[v.id].name : "?");
        return;
    default:
        pg_sb_str(b, "<none>");
    }
}

void pg_val_format(const pg_kernel *k, pg_val v, pg_type t, char *buf, size_t n)
{
    pg_sbuf b = {0};
    sb_val(&b, k, v, t);
    snprintf(buf, n, "%s", b.p && !b.oom ? b.p : "");
    if (b.p)
        pg_mem_free(b.p);
}

void pg_label_format(pg_sbuf *b, const pg_kernel *k, uint32_t id)
{
    const label_info *l = &k->labels[id];
    sb_lit(b, "$L", 2);
    sb_u64(b, l->num);
    if (l->hint) {
        sb_lit(b, "_", 1);
        pg_sb_str(b, l->hint);
    }
}

/* [base+offset] */
static void address(pg_sbuf *b, const pg_kernel *k, pg_val base, int64_t offset)
{
    sb_lit(b, "[", 1);
    sb_val(b, k, base, PG_U64);
    if (offset) {
        sb_lit(b, "+", 1);
        sb_i64(b, offset);
    }
    sb_lit(b, "]", 1);
}

/* " d, a, b": the destination typed dt, every source typed st. */
static void operands(pg_sbuf *b, const pg_kernel *k, const instr *in, pg_type dt, pg_type st)
{
    sb_lit(b, " ", 1);
    sb_val(b, k, in->dst[0], dt);
    for (unsigned i = 0; i < in->nsrc; i++) {
        sb_lit(b, ", ", 2);
        sb_val(b, k, in->src[i], st);
    }
}

/* Operands one by one: ", x" with x typed t. */
static void next(pg_sbuf *b, const pg_kernel *k, pg_val v, pg_type t)
{
    sb_lit(b, ", ", 2);
    sb_val(b, k, v, t);
}

static void vec(pg_sbuf *b, const pg_kernel *k, const pg_val *v, unsigned n, pg_type t)
{
    if (n == 1) {
        sb_val(b, k, v[0], t);
        return;
    }
    sb_lit(b, "{", 1);
    for (unsigned i = 0; i < n; i++) {
        if (i)
            sb_lit(b, ", ", 2);
        sb_val(b, k, v[i], t);
    }
    sb_lit(b, "}", 1);
}

/* ---------------------------------------------------------------- instructions */

static bool is_plain_form(const pg_op_info *oi)
{
    return oi->form == TX_PLAIN || oi->form == TX_FROUND || oi->form == TX_FROUND_LO ||
           oi->form == TX_BITS || oi->form == TX_DATA;
}

/* The head of a line in one of the table's forms: "add.rn.f32",
 * "and.pred", "mov.b16". */
static void plain_head(pg_sbuf *b, const pg_op_info *oi, pg_type t)
{
    bool f = pg_type_row(t)->is_float;
    switch ((pg_text_form)oi->form) {
    case TX_PLAIN:
        sb_op_type(b, oi, t);
        break;
    case TX_FROUND:
    case TX_FROUND_LO:
        sb_known(b, oi->stem, oi->stem_len);
        if (f || oi->form == TX_FROUND_LO)
            sb_lit(b, f ? ".rn" : ".lo", 3);
        sb_dot_type(b, t);
        break;
    case TX_BITS:
        sb_op_type(b, oi, bit_type_of(t));
        break;
    case TX_DATA:
        sb_op_type(b, oi, data_type_of(t));
        break;
    default:
        sb_known(b, oi->stem, oi->stem_len);
        break;
    }
}

/* The type of a mul.wide / mad.wide result: twice the width of t. */
static pg_type wide_type(pg_type t)
{
    return pg_type_is_signed(t) ? (pg_type_bits(t) == 16 ? PG_S32 : PG_S64)
                                : (pg_type_bits(t) == 16 ? PG_U32 : PG_U64);
}

/* The type an operand's immediate is written in: the letter after its
 * place in a format (internal.h). */
static pg_type fmt_type(const instr *in, char c)
{
    pg_type t = (pg_type)in->type;
    switch (c) {
    case 'w': return wide_type(t);
    case '2': return (pg_type)in->type2;
    case 'h': return t == PG_B64 ? PG_B32 : PG_B16;
    case 'z': return pg_type_bits(t) == 8 ? PG_U16 : t; /* st writes a byte from 16 bits */
    case 'p': return PG_PRED;
    case 'u': return PG_U32;
    case 'U': return PG_U64;
    case 'b': return PG_B32;
    case 'f': return PG_F32;
    default: return t;
    }
}

/* ".name" of a modifier */
static void sb_dot(pg_sbuf *b, const char *name)
{
    sb_lit(b, ".", 1);
    pg_sb_str(b, name);
}

/* One directive of a line's head (internal.h); false for none of the
 * head's. *keyed turns false for one that reads more than the head key. */
static bool head_directive(pg_sbuf *b, const instr *in, char c, bool *keyed)
{
    pg_type t = (pg_type)in->type;
    switch (c) {
    case 't': sb_dot_type(b, t); break;
    case '2': sb_dot_type(b, (pg_type)in->type2); break;
    case 'b': sb_dot_type(b, bit_type_of(t)); break;
    case 'm': sb_dot_type(b, data_type_of(t)); break;
    case 'k':
        /* shl and the bit types shift bits; shr of a number keeps its sign */
        if (pg_type_row(t)->tc == TC_BIT) {
            sb_dot_type(b, bit_type_of(t));
        } else {
            sb_lit(b, pg_type_is_signed(t) ? ".s" : ".u", 2);
            sb_u64(b, pg_type_bits(t));
        }
        break;
    case 'c': sb_dot(b, cmp_names[in->mod]); break;
    case 'r': pg_sb_str(b, rnd_names[in->mod]); break;
    case 's': sb_dot(b, space_names[in->mod]); break;
    case 'y': sb_dot(b, membar_names[in->mod]); break;
    case 'e': sb_dot(b, scope_names[in->mod]); break;
    case 'n':
        if (in->mod2)
            sb_lit(b, ".nc", 3);
        break;
    case 'v': sb_width(b, in->width); break;
    case 'u':
        /* an unguarded branch is taken by every thread that reaches it */
        if (!in->guard)
            sb_lit(b, ".uni", 4);
        if (keyed)
            *keyed = false;
        break;
    default:
        return false;
    }
    return true;
}

/* One operand directive; f is at its letter. Returns the last character
 * read. */
static const char *operand_directive(pg_sbuf *b, const pg_kernel *k, const instr *in,
                                     const char *f)
{
    char c = *f;
    if (c == 'd' || c == 'D' || c == 'V' || (c >= '0' && c <= '9')) {
        pg_type t = fmt_type(in, *++f);
        if (c == 'd')
            sb_val(b, k, in->dst[0], t);
        else if (c == 'D')
            vec(b, k, in->dst, in->width, t);
        else if (c == 'V')
            vec(b, k, in->src + 1, in->width, t);
        else
            sb_val(b, k, in->src[c - '0'], t);
        return f;
    }
    switch (c) {
    case 'a':
        if (in->op == OP_LD && in->mod == PG_SPACE_PARAM) {
            sb_lit(b, "[", 1);
            pg_sb_str(b, k->params[in->imm - 1].name);
            sb_lit(b, "]", 1);
        } else {
            address(b, k, in->src[0], in->offset);
        }
        break;
    case 'i': sb_u64(b, in->imm); break;
    case 'o': sb_i64(b, in->offset); break;
    case 'P': pg_sb_str(b, k->params[in->imm - 1].name); break;
    case 'S': pg_sb_str(b, pg_sreg_name((pg_sreg)in->mod)); break;
    case 'L': pg_label_format(b, k, in->label); break;
    default: pg_sb_put(b, f - 1, 2); break; /* not a directive: the text shows it */
    }
    return f;
}

/* A row's format (internal.h): the head's directives before the first
 * space, the operands' after it; only the head when head_only. *keyed
 * (if not NULL) turns false when the head read more than the head key. */
static void emitf(pg_sbuf *b, const pg_kernel *k, const instr *in, const char *f, bool head_only,
                  bool *keyed)
{
    const char *ops = strchr(f, ' ');
    if (!ops)
        ops = f + strlen(f);
    const char *stop = head_only ? ops : NULL;
    while (*f && f != stop) {
        const char *e = f;
        while (*e && e != stop && *e != '%')
            e++;
        sb_known(b, f, (size_t)(e - f));
        f = e;
        if (*f != '%')
            break;
        f++;
        if (f >= ops) {
            f = operand_directive(b, k, in, f) + 1;
        } else if (*f == '{') { /* %{a|b}: a if mod2, else b */
            const char *bar = strchr(f, '|'), *end = strchr(f, '}');
            if (in->mod2)
                sb_known(b, f + 1, (size_t)(bar - f - 1));
            else
                sb_known(b, bar + 1, (size_t)(end - bar - 1));
            f = end + 1;
        } else {
            if (!head_directive(b, in, *f, keyed))
                pg_sb_put(b, f - 1, 2); /* not a directive: the text shows it */
            f++;
        }
    }
}

/* The head of a line in the table's plain forms or its format: its text
 * up to the first operand. False for the other ops, and for a head that
 * reads more than the head key. */
static bool line_head(pg_sbuf *b, const instr *in, const pg_op_info *oi)
{
    if (is_plain_form(oi)) {
        plain_head(b, oi, (pg_type)in->type);
        return true;
    }
    if (oi->form != TX_FMT)
        return false;
    bool keyed = true;
    sb_known(b, oi->stem, oi->stem_len);
    emitf(b, NULL, in, oi->fmt, true, &keyed);
    return keyed;
}

/* "{a, b}", a vector even of one */
static void list(pg_sbuf *b, const pg_kernel *k, const pg_val *v, unsigned n, pg_type t)
{
    sb_lit(b, "{", 1);
    for (unsigned i = 0; i < n; i++) {
        if (i)
            sb_lit(b, ", ", 2);
        sb_val(b, k, v[i], t);
    }
    sb_lit(b, "}", 1);
}

/* wgmma.mma_async: the accumulators, A from registers or a descriptor, B's
 * descriptor, scale-d, the immediate scales and transposes. */
static void wgmma_line(pg_sbuf *b, const pg_kernel *k, const instr *in, const char *stem)
{
    const char *ab = pg_type_name((pg_type)in->type2);
    bool a_regs = in->offset & 4;
    pg_sb_fmt(b, "%s.m64n%uk16.f32.%s.%s ", stem, in->imm, ab, ab);
    list(b, k, in->acc, in->nacc, PG_F32);
    sb_lit(b, ", ", 2);
    unsigned s = 0;
    if (a_regs) {
        list(b, k, in->src, 4, PG_B32);
        s = 4;
    } else {
        sb_val(b, k, in->src[s++], PG_U64);
    }
    next(b, k, in->src[s++], PG_U64);
    next(b, k, in->src[s], PG_U32);
    pg_sb_fmt(b, ", %d, %d", in->mod ? -1 : 1, in->mod2 ? -1 : 1);
    if (!a_regs)
        pg_sb_fmt(b, ", %d", (int)(in->offset & 1));
    pg_sb_fmt(b, ", %d", (int)((in->offset >> 1) & 1));
}

/* The instructions whose text needs code: stems and types the operation
 * chooses (atom/red, vote, cp.async), vectors of registers (mma, wgmma,
 * ldmatrix, stmatrix, a TMA copy's coordinates), an optional second
 * destination (shfl). */
static void custom(pg_sbuf *b, const pg_kernel *k, const instr *in)
{
    pg_type t = (pg_type)in->type;
    const char *stem = pg_op_table[in->op].stem;
    switch ((pg_opcode)in->op) {
    case OP_ATOM: {
        pg_atom_op aop = (pg_atom_op)in->mod2;
        bool bits = aop == PG_ATOM_CAS || aop == PG_ATOM_EXCH || aop == PG_ATOM_AND ||
                    aop == PG_ATOM_OR || aop == PG_ATOM_XOR;
        /* without a destination the same operation is a reduction */
        pg_sb_fmt(b, "%s.%s.%s.%s ", in->ndst ? stem : "red", space_names[in->mod],
                  atom_names[aop], bits ? bit_type(t) : pg_type_name(t));
        if (in->ndst) {
            sb_val(b, k, in->dst[0], t);
            sb_lit(b, ", ", 2);
        }
        address(b, k, in->src[0], in->offset);
        for (unsigned i = 1; i < in->nsrc; i++)
            next(b, k, in->src[i], t);
        break;
    }
    case OP_SHFL:
        pg_sb_fmt(b, "%s.%s.b32 ", stem, shfl_names[in->mod]);
        sb_val(b, k, in->dst[0], PG_B32);
        if (in->ndst == 2) {
            pg_sb_str(b, "|");
            sb_val(b, k, in->dst[1], PG_PRED);
        }
        for (unsigned i = 0; i < 4; i++)
            next(b, k, in->src[i], PG_B32);
        break;
    case OP_VOTE:
        pg_sb_fmt(b, "%s.%s.%s ", stem, vote_names[in->mod],
                  in->mod == PG_VOTE_BALLOT ? "b32" : "pred");
        sb_val(b, k, in->dst[0], t);
        pg_sb_str(b, in->src_neg ? ", !" : ", ");
        sb_val(b, k, in->src[0], PG_PRED);
        next(b, k, in->src[1], PG_B32);
        break;
    case OP_LDMATRIX:
        /* a vector even of one: ptxas wants {d} for .x1 */
        pg_sb_fmt(b, "%s.x%u%s.shared.b16 ", stem, in->width, in->mod2 ? ".trans" : "");
        list(b, k, in->dst, in->width, PG_B32);
        sb_lit(b, ", ", 2);
        address(b, k, in->src[0], in->offset);
        break;
    case OP_STMATRIX:
        pg_sb_fmt(b, "%s.x%u%s.shared.b16 ", stem, in->width, in->mod2 ? ".trans" : "");
        address(b, k, in->src[0], in->offset);
        sb_lit(b, ", ", 2);
        list(b, k, in->src + 1, in->width, PG_B32);
        break;
    case OP_CP_ASYNC:
        /* 16 bytes go through L2 only (.cg); smaller copies must use .ca */
        pg_sb_fmt(b, "%s.%s.shared.global ", stem, in->imm == 16 ? "cg" : "ca");
        address(b, k, in->src[0], in->offset);
        sb_lit(b, ", ", 2);
        address(b, k, in->src[1], in->offset2);
        pg_sb_fmt(b, ", %u", in->imm);
        if (in->nsrc == 3)
            next(b, k, in->src[2], PG_U32);
        break;
    case OP_TMA_LOAD:
        pg_sb_fmt(b, "%s.%ud.shared::cluster.global.mbarrier::complete_tx::bytes ", stem,
                  in->width);
        address(b, k, in->src[0], 0);
        sb_lit(b, ", [", 3);
        sb_val(b, k, in->src[1], PG_U64);
        sb_lit(b, ", ", 2);
        list(b, k, in->src + 3, in->width, PG_S32);
        sb_lit(b, "], ", 3);
        address(b, k, in->src[2], 0);
        break;
    case OP_MMA:
    case OP_MMA_BF16:
        pg_sb_fmt(b, "%s ", stem);
        vec(b, k, in->dst, 4, PG_F32);
        sb_lit(b, ", ", 2);
        vec(b, k, in->src, 4, PG_B32);
        sb_lit(b, ", ", 2);
        vec(b, k, in->src + 4, 2, PG_B32);
        sb_lit(b, ", ", 2);
        vec(b, k, in->src + 6, 4, PG_F32);
        break;
    case OP_WGMMA:
        wgmma_line(b, k, in, stem);
        break;
    default:
        pg_sb_fmt(b, "<op %u>", in->op);
        break;
    }
}

/* ---------------------------------------------------------------- the common lines */

/* Most lines are "\t[@p ]head d, a[, b[, c]];" in one of the table's
 * forms, every operand a register or an immediate. While the module is
 * written they go through a cursor into one reservation: the register
 * names and the head are copies of text written once (pg_text_begin, and
 * the head cache filled through plain_head). */
static bool fast_operand(const pg_kernel *k, pg_val v)
{
    if (v.kind == PG_VAL_REG)
        return v.id && v.id < k->nregs;
    return v.kind == PG_VAL_IMM_INT || v.kind == PG_VAL_IMM_F32 || v.kind == PG_VAL_IMM_F64;
}

/* The 16-byte slot of a register name or a head: the text, NUL-padded,
 * its length in the last byte. Copied whole. */
static char *put_slot(char *d, const char *slot, size_t size)
{
    memcpy(d, slot, size);
    return d + (unsigned char)slot[size - 1];
}

static char *put_val(char *d, const pg_kernel *k, pg_val v, pg_type t)
{
    if (v.kind == PG_VAL_REG)
        return put_slot(d, k->reg_text[v.id], 16);
    return put_imm(d, v, t);
}

/* The fields a line's head depends on, type, type2, mod, mod2 and width,
 * sit side by side in the record: the key is those five bytes, read at
 * once. Five bytes never fill the eight of HEAD_EMPTY. */
_Static_assert(offsetof(instr, type2) == offsetof(instr, type) + 1 &&
                   offsetof(instr, mod) == offsetof(instr, type) + 2 &&
                   offsetof(instr, mod2) == offsetof(instr, type) + 3 &&
                   offsetof(instr, width) == offsetof(instr, type) + 4,
               "head_key reads type .. width as one run of bytes");
static inline uint64_t head_key(const instr *in)
{
    uint64_t key = 0;
    memcpy(&key, &in->type, 5);
    return key;
}

/* The head of in's line from the cache, written on a miss; NULL if it
 * does not fit a slot. */
static const pg_head *head_of(const pg_kernel *k, const instr *in, const pg_op_info *oi)
{
    pg_head *h = k->head_text->head[in->op];
    uint64_t key = head_key(in);
    for (unsigned w = 0; w < HEAD_WAYS; w++)
        if (h[w].key == key)
            return &h[w];
    pg_sbuf *t = &k->head_text->scratch;
    t->len = 0;
    if (!line_head(t, in, oi) || t->oom || t->len == 0 || t->len > sizeof h->s)
        return NULL;
    memmove(h + 1, h, sizeof *h * (HEAD_WAYS - 1)); /* the oldest goes */
    memcpy(h->s, t->p, t->len);
    h->len = (uint8_t)t->len;
    h->key = key;
    return h;
}

/* "[base+offset]" */
static char *put_addr(char *d, const pg_kernel *k, pg_val base, int64_t offset)
{
    *d++ = '[';
    d = put_val(d, k, base, PG_U64);
    if (offset) {
        *d++ = '+';
        d = put_dec(d, offset < 0 ? (uint64_t)0 - (uint64_t)offset : (uint64_t)offset, offset < 0);
    }
    *d++ = ']';
    return d;
}

/* "{a, b}" for a vector, "a" for one */
static char *put_vec(char *d, const pg_kernel *k, const pg_val *v, unsigned n, pg_type t)
{
    if (n == 1)
        return put_val(d, k, v[0], t);
    *d++ = '{';
    for (unsigned i = 0; i < n; i++) {
        if (i) {
            *d++ = ',';
            *d++ = ' ';
        }
        d = put_val(d, k, v[i], t);
    }
    *d++ = '}';
    return d;
}

/* The operands of a line in a plain form: " d, a, b", every one of the
 * instruction type. */
static char *put_operands(char *d, const pg_kernel *k, const instr *in)
{
    pg_type t = (pg_type)in->type;
    *d++ = ' ';
    d = put_val(d, k, in->dst[0], t);
    for (unsigned i = 0; i < in->nsrc; i++) {
        *d++ = ',';
        *d++ = ' ';
        d = put_val(d, k, in->src[i], t);
    }
    return d;
}

/* Whether every operand of in and its guard can go through the cursor. */
static inline bool fast_operands(const pg_kernel *k, const instr *in)
{
    for (unsigned i = 0; i < in->ndst; i++)
        if (!fast_operand(k, in->dst[i]))
            return false;
    for (unsigned i = 0; i < in->nsrc; i++)
        if (!fast_operand(k, in->src[i]))
            return false;
    return !in->guard || in->guard < k->nregs;
}

/* The cursor for a line of in: room reserved for the tab, the guard, a
 * head of head_len bytes, 24 per operand with its ", ", an address and
 * ";\n", and the tab and guard written. NULL when out of memory. */
static inline char *line_start(pg_sbuf *b, const pg_kernel *k, const instr *in, size_t head_len)
{
    if (!sb_reserve(b, 96 + head_len + (size_t)(in->ndst + in->nsrc) * 24))
        return NULL;
    char *d = b->p + b->len;
    *d++ = '\t';
    if (in->guard) {
        *d++ = '@';
        if (in->guard_neg)
            *d++ = '!';
        d = put_slot(d, k->reg_text[in->guard], 16);
        *d++ = ' ';
    }
    return d;
}

static inline void line_end(pg_sbuf *b, char *d)
{
    *d++ = ';';
    *d++ = '\n';
    *d = '\0';
    b->len = (size_t)(d - b->p);
}

/* The warp-wide lines whose heads are too long for a slot (mma's stem is
 * 53 bytes) and whose operands are vectors: mma, ldmatrix and shfl, the
 * bulk of a tensor-core kernel's text after the plain lines. The same
 * text as custom() writes; false to take the long way. */
static bool fast_warp_line(pg_sbuf *b, const pg_kernel *k, const instr *in, const pg_op_info *oi)
{
    bool mma = in->op == OP_MMA || in->op == OP_MMA_BF16;
    if (mma ? in->ndst != 4 || in->nsrc != 10
            : in->op == OP_LDMATRIX ? in->ndst != in->width || in->nsrc != 1
                                    : (in->ndst != 1 && in->ndst != 2) || in->nsrc != 4)
        return false;
    if (!fast_operands(k, in))
        return false;
    char *d = line_start(b, k, in, oi->stem_len + 32u);
    if (!d)
        return true;
    memcpy(d, oi->stem, oi->stem_len);
    d += oi->stem_len;
    if (mma) {
        *d++ = ' ';
        d = put_vec(d, k, in->dst, 4, PG_F32);
        memcpy(d, ", ", 2);
        d = put_vec(d + 2, k, in->src, 4, PG_B32);
        memcpy(d, ", ", 2);
        d = put_vec(d + 2, k, in->src + 4, 2, PG_B32);
        memcpy(d, ", ", 2);
        d = put_vec(d + 2, k, in->src + 6, 4, PG_F32);
    } else if (in->op == OP_LDMATRIX) {
        /* a vector even of one: ptxas wants {d} for .x1 */
        *d++ = '.';
        *d++ = 'x';
        d = put_dec(d, in->width, false);
        if (in->mod2) {
            memcpy(d, ".trans", 6);
            d += 6;
        }
        memcpy(d, ".shared.b16 {", 13);
        d += 13;
        for (unsigned i = 0; i < in->width; i++) {
            if (i) {
                *d++ = ',';
                *d++ = ' ';
            }
            d = put_val(d, k, in->dst[i], PG_B32);
        }
        memcpy(d, "}, ", 3);
        d = put_addr(d + 3, k, in->src[0], in->offset);
    } else {
        const char *mode = shfl_names[in->mod];
        size_t n = strlen(mode);
        *d++ = '.';
        memcpy(d, mode, n);
        memcpy(d + n, ".b32 ", 5);
        d = put_val(d + n + 5, k, in->dst[0], PG_B32);
        if (in->ndst == 2) {
            *d++ = '|';
            d = put_val(d, k, in->dst[1], PG_PRED);
        }
        for (unsigned i = 0; i < 4; i++) {
            *d++ = ',';
            *d++ = ' ';
            d = put_val(d, k, in->src[i], PG_B32);
        }
    }
    line_end(b, d);
    return true;
}

/* The line through the cursor, if the head has a slot and every operand
 * is a register or an immediate; false to take the long way. */
static bool fast_line(pg_sbuf *b, const pg_kernel *k, const instr *in, const pg_op_info *oi)
{
    if (!k->head_text || in->ndst > PG_MAX_DST || in->nsrc > PG_MAX_SRC)
        return false;
    if (in->op == OP_MMA || in->op == OP_MMA_BF16 || in->op == OP_LDMATRIX || in->op == OP_SHFL)
        return fast_warp_line(b, k, in, oi);
    if (in->op == OP_ST ? in->ndst != 0 || in->nsrc != 1u + in->width
                        : in->ndst != (in->op == OP_LD ? in->width : 1u))
        return false;
    if (!fast_operands(k, in))
        return false;
    const pg_head *h = head_of(k, in, oi);
    if (!h)
        return false;
    char *d = line_start(b, k, in, 0);
    if (!d)
        return true;
    memcpy(d, h->s, sizeof h->s);
    d += h->len;
    if (oi->form == TX_FMT) { /* the operands the long way, after the cached head */
        b->len = (size_t)(d - b->p);
        const char *ops = strchr(oi->fmt, ' ');
        if (ops)
            emitf(b, k, in, ops, false, NULL);
        sb_lit(b, ";\n", 2);
        return true;
    }
    d = put_operands(d, k, in);
    line_end(b, d);
    return true;
}

void pg_format_instr(pg_sbuf *b, const pg_kernel *k, const instr *in)
{
    const pg_op_info *oi = &pg_op_table[in->op];
    switch ((pg_opcode)in->op) {
    case OP_LABEL:
        pg_label_format(b, k, in->label);
        pg_sb_str(b, ":\n");
        return;
    case OP_COMMENT:
        pg_sb_fmt(b, "\t// %s\n", in->text);
        return;
    default:
        break;
    }
    if (fast_line(b, k, in, oi))
        return;
    sb_lit(b, "\t", 1);
    if (in->guard) {
        pg_val g = {PG_VAL_REG, in->guard, 0};
        sb_lit(b, "@!", in->guard_neg ? 2 : 1);
        sb_val(b, k, g, PG_PRED);
        sb_lit(b, " ", 1);
    }
    pg_type t = (pg_type)in->type;
    if (is_plain_form(oi)) {
        plain_head(b, oi, t);
        operands(b, k, in, t, t);
    } else if (oi->form == TX_NONE) {
        sb_known(b, oi->stem, oi->stem_len);
    } else if (oi->form == TX_FMT) {
        sb_known(b, oi->stem, oi->stem_len);
        emitf(b, k, in, oi->fmt, false, NULL);
    } else {
        custom(b, k, in);
    }
    sb_lit(b, ";\n", 2);
}

void pg_instr_text(const pg_kernel *k, const instr *in, char *buf, size_t n)
{
    pg_sbuf b = {0};
    pg_format_instr(&b, k, in);
    size_t len = b.p ? b.len : 0;
    /* strip the leading tab and the trailing ";\n" or ":\n" */
    const char *s = b.p ? b.p : "";
    while (*s == '\t')
        s++, len--;
    while (len && (s[len - 1] == '\n' || s[len - 1] == ';'))
        len--;
    snprintf(buf, n, "%.*s", (int)len, s);
    pg_mem_free(b.p);
}
