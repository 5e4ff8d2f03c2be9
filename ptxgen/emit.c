/* SPDX-License-Identifier: MIT */
/*
 * Serialization. Runs only on a validated kernel; the text is a pure
 * function of the records, so the same calls always give the same bytes.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
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
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void sb_fmt(sbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof tmp)
        n = (int)sizeof tmp - 1;
    sb_put(b, tmp, (size_t)n);
}

static void sb_val(sbuf *b, const pg_kernel *k, pg_val v, pg_type t)
{
    char tmp[96];
    pg_val_format(k, v, t, tmp, sizeof tmp);
    sb_str(b, tmp);
}

/* The suffix PTX wants for bitwise ops and moves of a given type. */
static const char *bit_type(pg_type t)
{
    switch (pg_type_bits(t)) {
    case 1: return "pred";
    case 8: return "b8";
    case 16: return "b16";
    case 32: return "b32";
    default: return "b64";
    }
}

/* ld/st/mov have no f16/bf16 forms: they move bits. */
static const char *data_type(pg_type t)
{
    return (t == PG_F16 || t == PG_BF16) ? "b16" : pg_type_name(t);
}

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
static const char *const atom_names[PG_ATOM_COUNT] = {"add", "min", "max", "cas", "exch", "and", "or", "xor"};

static void label_name(sbuf *b, const pg_kernel *k, uint32_t id)
{
    const label_info *l = &k->labels[id];
    if (l->hint)
        sb_fmt(b, "$L%u_%s", l->num, l->hint);
    else
        sb_fmt(b, "$L%u", l->num);
}

static void addr(sbuf *b, const pg_kernel *k, const instr *in)
{
    sb_str(b, "[");
    sb_val(b, k, in->src[0], PG_U64);
    if (in->offset)
        sb_fmt(b, "+%lld", (long long)in->offset);
    sb_str(b, "]");
}

/* "d, a, b" with every operand typed t. */
static void operands(sbuf *b, const pg_kernel *k, const instr *in, pg_type dt, pg_type st)
{
    sb_str(b, " ");
    sb_val(b, k, in->dst[0], dt);
    for (unsigned i = 0; i < in->nsrc; i++) {
        sb_str(b, ", ");
        sb_val(b, k, in->src[i], st);
    }
}

static void vec(sbuf *b, const pg_kernel *k, const pg_val *v, unsigned n, pg_type t)
{
    if (n == 1) {
        sb_val(b, k, v[0], t);
        return;
    }
    sb_str(b, "{");
    for (unsigned i = 0; i < n; i++) {
        if (i)
            sb_str(b, ", ");
        sb_val(b, k, v[i], t);
    }
    sb_str(b, "}");
}

static void emit_instr(sbuf *b, const pg_kernel *k, const instr *in)
{
    pg_type t = (pg_type)in->type;
    bool f = pg_type_is_float(t);
    const char *tn = pg_type_name(t);
    switch ((pg_opcode)in->op) {
    case OP_LABEL:
        label_name(b, k, in->label);
        sb_str(b, ":\n");
        return;
    case OP_COMMENT:
        sb_fmt(b, "\t// %s\n", in->text);
        return;
    default:
        break;
    }
    sb_str(b, "\t");
    if (in->guard) {
        pg_val g = {PG_VAL_REG, in->guard, 0};
        sb_str(b, in->guard_neg ? "@!" : "@");
        sb_val(b, k, g, PG_PRED);
        sb_str(b, " ");
    }
    switch ((pg_opcode)in->op) {
    case OP_MOV:
        sb_fmt(b, "mov.%s", (f && t != PG_F32 && t != PG_F64) ? "b16" : tn);
        operands(b, k, in, t, t);
        break;
    case OP_SREG:
        sb_fmt(b, "mov.u32 ");
        sb_val(b, k, in->dst[0], t);
        sb_fmt(b, ", %s", pg_sreg_name((pg_sreg)in->mod));
        break;
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
        sb_fmt(b, "%s%s.%s", pg_op_table[in->op].stem, f ? ".rn" : (in->op == OP_MUL ? ".lo" : ""), tn);
        operands(b, k, in, t, t);
        break;
    case OP_DIV:
        sb_fmt(b, "div%s.%s", f ? ".rn" : "", tn);
        operands(b, k, in, t, t);
        break;
    case OP_MUL_WIDE:
    case OP_MAD_WIDE: {
        pg_type w = pg_type_is_signed(t) ? (pg_type_bits(t) == 16 ? PG_S32 : PG_S64)
                                         : (pg_type_bits(t) == 16 ? PG_U32 : PG_U64);
        sb_fmt(b, "%s.%s ", pg_op_table[in->op].stem, tn);
        sb_val(b, k, in->dst[0], w);
        sb_str(b, ", ");
        sb_val(b, k, in->src[0], t);
        sb_str(b, ", ");
        sb_val(b, k, in->src[1], t);
        if (in->nsrc == 3) {
            sb_str(b, ", ");
            sb_val(b, k, in->src[2], w);
        }
        break;
    }
    case OP_AND:
    case OP_OR:
    case OP_XOR:
    case OP_NOT:
        sb_fmt(b, "%s.%s", pg_op_table[in->op].stem, bit_type(t));
        operands(b, k, in, t, t);
        break;
    case OP_SHL:
    case OP_SHR:
        if (in->op == OP_SHL || t == PG_B16 || t == PG_B32 || t == PG_B64)
            sb_fmt(b, "%s.%s ", pg_op_table[in->op].stem, bit_type(t));
        else
            sb_fmt(b, "shr.%c%u ", pg_type_is_signed(t) ? 's' : 'u', pg_type_bits(t));
        sb_val(b, k, in->dst[0], t);
        sb_str(b, ", ");
        sb_val(b, k, in->src[0], t);
        sb_str(b, ", ");
        sb_val(b, k, in->src[1], PG_U32);
        break;
    case OP_SETP:
        sb_fmt(b, "setp.%s.%s", cmp_names[in->mod], tn);
        operands(b, k, in, PG_PRED, t);
        break;
    case OP_SELP:
        sb_fmt(b, "selp.%s ", tn);
        sb_val(b, k, in->dst[0], t);
        sb_str(b, ", ");
        sb_val(b, k, in->src[0], t);
        sb_str(b, ", ");
        sb_val(b, k, in->src[1], t);
        sb_str(b, ", ");
        sb_val(b, k, in->src[2], PG_PRED);
        break;
    case OP_CVT:
        sb_fmt(b, "cvt%s.%s.%s", rnd_names[in->mod], tn, pg_type_name((pg_type)in->type2));
        operands(b, k, in, t, (pg_type)in->type2);
        break;
    case OP_LD:
        if (in->mod == PG_SPACE_PARAM) {
            sb_fmt(b, "ld.param.%s ", data_type(t));
            sb_val(b, k, in->dst[0], t);
            sb_fmt(b, ", [%s]", k->params[in->imm - 1].name);
            break;
        }
        sb_fmt(b, "ld.%s%s", space_names[in->mod], in->mod2 ? ".nc" : "");
        if (in->width > 1)
            sb_fmt(b, ".v%u", in->width);
        sb_fmt(b, ".%s ", data_type(t));
        vec(b, k, in->dst, in->width, t);
        sb_str(b, ", ");
        addr(b, k, in);
        break;
    case OP_ST:
        sb_fmt(b, "st.%s", space_names[in->mod]);
        if (in->width > 1)
            sb_fmt(b, ".v%u", in->width);
        sb_fmt(b, ".%s ", data_type(t));
        addr(b, k, in);
        sb_str(b, ", ");
        vec(b, k, in->src + 1, in->width, pg_type_bits(t) == 8 ? PG_U16 : t);
        break;
    case OP_ATOM: {
        pg_atom_op aop = (pg_atom_op)in->mod2;
        bool bits = aop == PG_ATOM_CAS || aop == PG_ATOM_EXCH || aop == PG_ATOM_AND ||
                    aop == PG_ATOM_OR || aop == PG_ATOM_XOR;
        sb_fmt(b, "%s.%s.%s.%s ", in->ndst ? "atom" : "red", space_names[in->mod],
               atom_names[aop], bits ? bit_type(t) : tn);
        if (in->ndst) {
            sb_val(b, k, in->dst[0], t);
            sb_str(b, ", ");
        }
        addr(b, k, in);
        for (unsigned i = 1; i < in->nsrc; i++) {
            sb_str(b, ", ");
            sb_val(b, k, in->src[i], t);
        }
        break;
    }
    case OP_SHFL:
        sb_fmt(b, "shfl.sync.%s.b32 ", shfl_names[in->mod]);
        sb_val(b, k, in->dst[0], PG_B32);
        if (in->ndst == 2) {
            sb_str(b, "|");
            sb_val(b, k, in->dst[1], PG_PRED);
        }
        for (unsigned i = 0; i < 4; i++) {
            sb_str(b, ", ");
            sb_val(b, k, in->src[i], PG_B32);
        }
        break;
    case OP_VOTE:
        sb_fmt(b, "vote.sync.%s.%s ", vote_names[in->mod], in->mod == PG_VOTE_BALLOT ? "b32" : "pred");
        sb_val(b, k, in->dst[0], t);
        sb_str(b, in->src_neg ? ", !" : ", ");
        sb_val(b, k, in->src[0], PG_PRED);
        sb_str(b, ", ");
        sb_val(b, k, in->src[1], PG_B32);
        break;
    case OP_BAR:
        sb_fmt(b, "bar.sync %u", in->imm);
        break;
    case OP_BAR_WARP:
        sb_str(b, "bar.warp.sync ");
        sb_val(b, k, in->src[0], PG_B32);
        break;
    case OP_MEMBAR:
        sb_fmt(b, "membar.%s", membar_names[in->mod]);
        break;
    case OP_FENCE:
        sb_fmt(b, "fence.%s.%s", in->mod2 ? "sc" : "acq_rel", scope_names[in->mod]);
        break;
    case OP_BRA:
        sb_str(b, in->guard ? "bra " : "bra.uni ");
        label_name(b, k, in->label);
        break;
    case OP_RET:
        sb_str(b, "ret");
        break;
    case OP_EXIT:
        sb_str(b, "exit");
        break;
    case OP_LDMATRIX:
        sb_fmt(b, "%s.x%u%s.shared.b16 ", pg_op_table[OP_LDMATRIX].stem, in->width,
               in->mod2 ? ".trans" : "");
        /* a vector even of one: ptxas wants {d} for .x1 */
        sb_str(b, "{");
        for (unsigned i = 0; i < in->width; i++) {
            sb_str(b, i ? ", " : "");
            sb_val(b, k, in->dst[i], PG_B32);
        }
        sb_str(b, "}, ");
        addr(b, k, in);
        break;
    case OP_CP_ASYNC:
        sb_fmt(b, "cp.async.%s.shared.global [", in->imm == 16 ? "cg" : "ca");
        sb_val(b, k, in->src[0], PG_U64);
        if (in->offset)
            sb_fmt(b, "+%lld", (long long)in->offset);
        sb_str(b, "], [");
        sb_val(b, k, in->src[1], PG_U64);
        if (in->offset2)
            sb_fmt(b, "+%lld", (long long)in->offset2);
        sb_fmt(b, "], %u", in->imm);
        if (in->nsrc == 3) {
            sb_str(b, ", ");
            sb_val(b, k, in->src[2], PG_U32);
        }
        break;
    case OP_CP_COMMIT:
        sb_str(b, "cp.async.commit_group");
        break;
    case OP_CP_WAIT:
        sb_fmt(b, "cp.async.wait_group %u", in->imm);
        break;
    case OP_MMA:
        sb_fmt(b, "%s ", pg_op_table[OP_MMA].stem);
        vec(b, k, in->dst, 4, PG_F32);
        sb_str(b, ", ");
        vec(b, k, in->src, 4, PG_B32);
        sb_str(b, ", ");
        vec(b, k, in->src + 4, 2, PG_B32);
        sb_str(b, ", ");
        vec(b, k, in->src + 6, 4, PG_F32);
        break;
    default:
        /* Plain "stem.type d, a[, b[, c]]" ops: mul.hi mad.lo mad.hi fma.rn
         * rem rcp.rn sqrt.rn rsqrt/ex2/lg2.approx min max abs neg. */
        sb_fmt(b, "%s.%s", pg_op_table[in->op].stem, tn);
        operands(b, k, in, t, t);
        break;
    }
    sb_str(b, ";\n");
}

void pg_instr_text(const pg_kernel *k, const instr *in, char *buf, size_t n)
{
    sbuf b = {0};
    emit_instr(&b, k, in);
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

/* Whether control can run off the end of the recorded body. */
static bool falls_off_end(const pg_kernel *k)
{
    for (uint32_t i = k->nins; i-- > 0;) {
        const instr *in = &k->ins[i];
        if (in->op == OP_COMMENT)
            continue;
        if (in->op == OP_LABEL)
            return true;
        return !((in->op == OP_RET || in->op == OP_EXIT || in->op == OP_BRA) && !in->guard);
    }
    return true;
}

int pg_emit_text(pg_kernel *k)
{
    sbuf b = {0};
    sb_str(&b, "//\n// Generated by ptxgen. Do not edit.\n//\n\n");
    sb_fmt(&b, ".version %u.%u\n", k->isa / 10, k->isa % 10);
    sb_fmt(&b, ".target %s\n", pg_target_name(k->target));
    sb_str(&b, ".address_size 64\n\n");

    for (uint32_t i = 1; i < k->nshared; i++) {
        const shared_info *s = &k->shared[i];
        if (s->dynamic)
            sb_fmt(&b, ".extern .shared .align %u .b8 %s[];\n", s->align, s->name);
        else
            sb_fmt(&b, ".shared .align %u .%s %s[%u];\n", s->align, data_type((pg_type)s->type),
                   s->name, s->count);
    }
    if (k->nshared > 1)
        sb_str(&b, "\n");

    sb_fmt(&b, ".visible .entry %s(", k->name);
    for (uint32_t i = 0; i < k->nparams; i++)
        sb_fmt(&b, "%s\n\t.param .%s %s", i ? "," : "", data_type((pg_type)k->params[i].type),
               k->params[i].name);
    sb_str(&b, k->nparams ? "\n)\n" : ")\n");
    if (k->maxntid[0])
        sb_fmt(&b, ".maxntid %u, %u, %u\n", k->maxntid[0], k->maxntid[1], k->maxntid[2]);
    sb_str(&b, "{\n");
    for (int c = 0; c < RC_COUNT; c++)
        if (k->class_count[c])
            sb_fmt(&b, "\t.reg %s %s<%u>;\n", pg_reg_decl_type((reg_class)c),
                   pg_reg_prefix((reg_class)c), k->class_count[c] + 1);
    sb_str(&b, "\n");
    for (uint32_t i = 0; i < k->nins; i++)
        emit_instr(&b, k, &k->ins[i]);
    if (falls_off_end(k))
        sb_str(&b, "\tret;\n");
    sb_str(&b, "}\n");

    if (b.oom) {
        pg_mem_free(b.p);
        return pg_fail(k, PG_ENOMEM, "out of memory while writing PTX");
    }
    char *text = arena_alloc(&k->mem, b.len + 1);
    if (!text) {
        pg_mem_free(b.p);
        return pg_fail(k, PG_ENOMEM, "out of memory while writing PTX");
    }
    memcpy(text, b.p, b.len + 1);
    pg_mem_free(b.p);
    k->text = text;
    k->text_len = b.len;
    return PG_OK;
}

int pg_kernel_emit(pg_kernel *k, const char **ptx, size_t *len)
{
    if (!k || !ptx)
        return PG_EINVAL;
    *ptx = NULL;
    if (len)
        *len = 0;
    if (k->err)
        return k->err;
    if (!k->text) {
        if (k->has_guard)
            return pg_fail(k, PG_ESTATE, "a guard is pending with no instruction after it");
        int err = pg_validate(k);
        if (err)
            return err;
        k->emitted = true;
        err = pg_emit_text(k);
        if (err)
            return err;
    }
    *ptx = k->text;
    if (len)
        *len = k->text_len;
    return PG_OK;
}
