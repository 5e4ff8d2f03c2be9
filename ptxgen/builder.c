/* SPDX-License-Identifier: MIT */
/*
 * Recording: every pg_* instruction call checks its operands against the
 * instruction type and the target at once (so the message points at the
 * call that was wrong) and appends a record. Nothing is written as text
 * until pg_kernel_emit().
 */
#include "internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>

/* ---------------------------------------------------------------- kernel state */

pg_target pg_kernel_target(const pg_kernel *k) { return k ? k->target : PG_TARGET_COUNT; }
unsigned pg_kernel_isa(const pg_kernel *k) { return k ? k->isa : 0; }

/* Usable for recording: no error and not yet emitted. */
static bool live(pg_kernel *k)
{
    if (!k || k->err)
        return false;
    if (k->emitted) {
        pg_fail(k, PG_ESTATE, "the kernel was already emitted; it takes no more instructions");
        return false;
    }
    return true;
}

/* The record arrays live on the heap, not in the arena: realloc can extend
 * a block in place (or remap it) where a copy into fresh arena memory paid
 * a memcpy plus page faults on every doubling. `zero` clears the new tail
 * for arrays whose callers do not fill every field. */
static int grow(pg_kernel *k, void **arr, uint32_t *cap, uint32_t need, size_t elem, uint32_t first,
                bool zero)
{
    if (need <= *cap)
        return PG_OK;
    uint32_t ncap = *cap ? *cap : first;
    while (ncap < need) {
        if (ncap > UINT32_MAX / 2)
            return pg_fail(k, PG_ENOMEM, "too many records");
        ncap *= 2;
    }
    if ((size_t)ncap > SIZE_MAX / elem)
        return pg_fail(k, PG_ENOMEM, "too many records");
    void *n = pg_mem_realloc(*arr, (size_t)ncap * elem);
    if (!n)
        return pg_fail(k, PG_ENOMEM, "out of memory");
    if (zero)
        memset((char *)n + (size_t)*cap * elem, 0, (size_t)(ncap - *cap) * elem);
    *arr = n;
    *cap = ncap;
    return PG_OK;
}

int pg_grow(pg_kernel *k, void **arr, uint32_t *cap, uint32_t need, size_t elem)
{
    return grow(k, arr, cap, need, elem, 16, true);
}

#define GROW(k, arr, cap, need) pg_grow((k), (void **)&(arr), &(cap), (need), sizeof *(arr))

/* ---------------------------------------------------------------- names */

#define PG_NAME_MAX 64

/* Why s is not a name the builder takes, or NULL if it is. PTX identifiers
 * are [A-Za-z][A-Za-z0-9_$]* or [_$%][A-Za-z0-9_$]+; the builder takes
 * them without '$' and '%' (its own labels begin with '$', registers with
 * '%', so nothing a user names can clash with them), and not the names PTX
 * reserves. */
static const char *name_problem(const char *s)
{
    if (!s)
        return "is missing";
    if (!*s)
        return "is empty";
    if (strlen(s) > PG_NAME_MAX)
        return "is longer than 64 characters";
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'))
        return "must begin with a letter or '_'";
    for (const char *p = s + 1; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              (*p >= '0' && *p <= '9') || *p == '_'))
            return "may hold only letters, digits and '_'";
    if (strcmp(s, "_") == 0)
        return "is '_' alone";
    if (strcmp(s, "WARP_SZ") == 0)
        return "is reserved by PTX";
    return NULL;
}

static bool is_ident(const char *s) { return !name_problem(s); }

/* A name as it can appear in a message: printable, and not too long. */
static const char *quoted(const char *s, char *buf, size_t n)
{
    if (!s)
        return "(null)";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && o + 5 < n; p++) {
        if (p - (const unsigned char *)s >= 40) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (*p >= 0x20 && *p < 0x7f)
            buf[o++] = (char)*p;
        else
            o += (size_t)snprintf(buf + o, n - o, "\\x%02X", *p);
    }
    buf[o] = '\0';
    return buf;
}

/* Refuse a name with a message saying why; `what` says whose name it is. */
static bool check_name(pg_kernel *k, const char *what, const char *s)
{
    const char *why = name_problem(s);
    if (why) {
        char q[64];
        pg_fail(k, PG_EINVAL, "%s '%s' is not a valid identifier: it %s", what,
                quoted(s, q, sizeof q), why);
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------- kernel */

/* Every kernel gets its own nonzero tag, and every handle it gives out
 * carries it: a register, label, param or shared array of another kernel
 * whose id happens to be in range is refused, not silently used. */
static uint32_t next_tag(void)
{
    static atomic_uint_least32_t last;
    uint32_t t;
    do
        t = (uint32_t)atomic_fetch_add(&last, 1) + 1;
    while (t == 0);
    return t;
}

bool pg_label_ok(const pg_kernel *k, pg_label l)
{
    return l.kernel == k->tag && l.id != 0 && l.id < k->nlabels;
}

bool pg_shared_ok(const pg_kernel *k, pg_val v)
{
    return v.kind == PG_VAL_SHARED && v.bits == k->tag && v.id != 0 && v.id < k->nshared;
}

int pg_kernel_create(pg_kernel **out, const char *name, pg_target target)
{
    if (!out)
        return PG_EINVAL;
    *out = NULL;
    if (!is_ident(name) || (unsigned)target >= PG_TARGET_COUNT)
        return PG_EINVAL;
    pg_kernel *k = pg_mem_alloc(sizeof *k);
    if (!k)
        return PG_ENOMEM;
    memset(k, 0, sizeof *k);
    k->target = target;
    k->sm = pg_target_sm(target);
    k->isa = pg_target_min_isa(target);
    k->tag = next_tag();
    k->name = arena_strdup(&k->mem, name);
    if (!k->name || GROW(k, k->regs, k->cap_regs, 1) || GROW(k, k->labels, k->cap_labels, 1) ||
        GROW(k, k->shared, k->cap_shared, 1)) {
        pg_kernel_destroy(&k);
        return PG_ENOMEM;
    }
    k->nregs = k->nlabels = k->nshared = 1; /* id 0 means "none" */
    *out = k;
    return PG_OK;
}

void pg_kernel_destroy(pg_kernel **k)
{
    if (!k || !*k)
        return;
    void *arrays[] = {(*k)->regs, (*k)->params, (*k)->labels, (*k)->shared, (*k)->ins, (*k)->text};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
        if (arrays[i])
            pg_mem_free(arrays[i]);
    arena_free_all(&(*k)->mem);
    pg_mem_free(*k);
    *k = NULL;
}

/* ---------------------------------------------------------------- directives */

/*
 * ptxas holds every setmaxnreg.dec of a kernel to "the largest temporal
 * register count in the program" (C7406, fatal): the largest count any
 * setmaxnreg.inc asks for, wherever it is (before or after the .dec, on
 * another path); with no .inc, the count a thread has at entry when
 * .maxntid and .minnctapersm let ptxas know it; else nothing (setmaxnreg
 * is then ignored, C7508). A .dec above it is refused whichever of the
 * calls that decide it comes last: the .dec, an .inc (the first one can
 * lower the limit below the entry count), .maxntid or .minnctapersm.
 */

/* The registers a thread has at entry, as ptxas 13.0 counts them for
 * setmaxnreg on sm_90a, sm_100a and sm_120a: the block's warps times
 * .minnctapersm share the SM's four partitions of 16,384 registers,
 * rounded down to a multiple of 8 and at most 256. A .minnctapersm the SM
 * cannot hold (more than 64 warps or 32 blocks, on sm_120a 48 and 24)
 * counts as 1, as ptxas takes it (with a warning). 0 when ptxas cannot
 * tell: no .maxntid or no .minnctapersm. */
static unsigned entry_regs(const pg_kernel *k)
{
    if (!k->maxntid[0] || !k->minnctapersm)
        return 0;
    uint64_t threads = (uint64_t)k->maxntid[0] * k->maxntid[1] * k->maxntid[2];
    uint64_t warps = (threads + 31) / 32, ctas = k->minnctapersm;
    unsigned max_warps = k->sm >= 120 ? 48 : 64, max_ctas = k->sm >= 120 ? 24 : 32;
    if (ctas > max_ctas || warps * ctas > max_warps)
        ctas = 1;
    warps *= ctas;
    uint64_t regs = 16384 / ((warps + 3) / 4 * 32) / 8 * 8;
    return regs > 256 ? 256 : (unsigned)regs;
}

unsigned pg_maxnreg_limit(const pg_kernel *k)
{
    return k->maxnreg_inc ? k->maxnreg_inc : entry_regs(k);
}

/* After .maxntid or .minnctapersm changed: false (and the kernel failed,
 * `what` naming the call) when a setmaxnreg.dec now asks for more
 * registers than ptxas lets it. */
static bool maxnreg_entry_ok(pg_kernel *k, const char *what)
{
    unsigned e = entry_regs(k);
    if (k->err || k->maxnreg_inc || !k->maxnreg_dec || !e || k->maxnreg_dec <= e)
        return !k->err;
    pg_fail(k, PG_ERANGE, "%s: .maxntid %u, %u, %u and .minnctapersm %u leave a thread %u "
            "registers at entry, fewer than setmaxnreg.dec.sync.aligned.u32 %u (instruction %u) "
            "asks for; ptxas refuses a .dec above the registers a thread can have (C7406)", what,
            k->maxntid[0], k->maxntid[1], k->maxntid[2], k->minnctapersm, e, k->maxnreg_dec,
            k->maxnreg_dec_at);
    return false;
}

void pg_kernel_set_maxntid(pg_kernel *k, uint32_t x, uint32_t y, uint32_t z)
{
    if (!live(k))
        return;
    if (!x || !y || !z || (uint64_t)x * y * z > 1024) {
        pg_fail(k, PG_ERANGE, ".maxntid %u, %u, %u: each must be >= 1 and the product <= 1024",
                x, y, z);
        return;
    }
    k->maxntid[0] = x;
    k->maxntid[1] = y;
    k->maxntid[2] = z;
    (void)maxnreg_entry_ok(k, "pg_kernel_set_maxntid");
}

void pg_kernel_set_minnctapersm(pg_kernel *k, uint32_t n)
{
    if (!k || k->err)
        return;
    if (k->emitted) {
        pg_fail(k, PG_ESTATE, "the kernel was already emitted");
        return;
    }
    if (n == 0 || n > 64) {
        pg_fail(k, PG_ERANGE, ".minnctapersm %u: 1..64", n);
        return;
    }
    k->minnctapersm = n;
    (void)maxnreg_entry_ok(k, "pg_kernel_set_minnctapersm");
}

/* ---------------------------------------------------------------- target */

bool pg_require(pg_kernel *k, unsigned sm, unsigned isa, const char *what)
{
    if (k->sm < sm) {
        pg_fail(k, PG_ETARGET, "%s needs sm_%u or newer; the target is %s", what, sm,
                pg_target_name(k->target));
        return false;
    }
    if (isa > k->isa)
        k->isa = isa;
    return true;
}

/* ---------------------------------------------------------------- registers */

pg_reg pg_reg_new(pg_kernel *k, pg_type t)
{
    if (!live(k))
        return pg_none();
    if ((unsigned)t >= PG_TYPE_COUNT) {
        pg_fail(k, PG_EINVAL, "pg_reg_new: invalid type %d", (int)t);
        return pg_none();
    }
    const pg_type_info *ti = pg_type_row(t);
    if (ti->bits == 8) {
        pg_fail(k, PG_ETYPE, "pg_reg_new: .%s is not a register type in PTX; "
                              "use a 16- or 32-bit register for bytes", pg_type_name(t));
        return pg_none();
    }
    if (k->nregs == k->cap_regs && GROW(k, k->regs, k->cap_regs, k->nregs + 1))
        return pg_none();
    reg_class c = (reg_class)ti->cls;
    reg_info *r = &k->regs[k->nregs];
    r->type = (uint8_t)t;
    r->cls = (uint8_t)c;
    r->num = ++k->class_count[c];
    pg_val v = {PG_VAL_REG, k->nregs++, k->tag};
    return v;
}

/* pg_reg_type for a kernel that exists: the builder's checks ask it of
 * every register operand. */
static inline pg_type reg_type(const pg_kernel *k, pg_val r)
{
    if (r.kind != PG_VAL_REG || r.bits != k->tag || r.id == 0 || r.id >= k->nregs)
        return PG_TYPE_COUNT;
    return (pg_type)k->regs[r.id].type;
}

pg_type pg_reg_type(const pg_kernel *k, pg_val r)
{
    return k ? reg_type(k, r) : PG_TYPE_COUNT;
}

/* ---------------------------------------------------------------- type rules */

/* 8-bit values travel in 16-bit registers of the same signedness. */
static pg_type reg_type_for(pg_type t)
{
    if ((unsigned)t < PG_TYPE_COUNT && pg_type_bits(t) == 8)
        return pg_type_is_signed(t) ? PG_S16 : PG_U16;
    return t;
}


/* Does a register of type rt fit an instruction operand of type it? PTX
 * lets b-types stand for any type of the same width and mixes signedness
 * of integers; floats must match (or be a b-type). */
static bool reg_fits(pg_type it, pg_type rt)
{
    if (it == rt)
        return true;
    if (it == PG_PRED || rt == PG_PRED)
        return false;
    const pg_type_info *i = pg_type_row(it), *r = pg_type_row(rt);
    if (i->bits != r->bits)
        return false;
    if (i->is_bits || r->is_bits)
        return true;
    if (i->is_float || r->is_float) {
        if (it == rt)
            return true;
        /* f16 and bf16 values both live in .b16 registers */
        return false;
    }
    return true; /* integers of one width, any signedness */
}

static bool imm_fits(pg_type t, pg_val v)
{
    const pg_type_info *ti = pg_type_row(t);
    unsigned bits = ti->bits;
    if (ti->is_float)
        return (t == PG_F32 && v.kind == PG_VAL_IMM_F32) || (t == PG_F64 && v.kind == PG_VAL_IMM_F64);
    if (t == PG_PRED || v.kind != PG_VAL_IMM_INT)
        return false;
    if (bits >= 64)
        return true;
    int64_t s = (int64_t)v.bits;
    if (ti->is_signed)
        return s >= -(INT64_C(1) << (bits - 1)) && s < (INT64_C(1) << (bits - 1));
    /* unsigned / bit types: the value, or a negative number of that width */
    return v.bits < (UINT64_C(1) << bits) || (s < 0 && s >= -(INT64_C(1) << (bits - 1)));
}

static const char *opname(pg_opcode op) { return pg_op_table[op].stem; }

/* Check one source operand; `what` names it in messages. */
static bool check_src_slow(pg_kernel *k, pg_opcode op, pg_type t, pg_val v, const char *what)
{
    if (k->err)
        return false;
    if ((unsigned)t >= PG_TYPE_COUNT) {
        pg_fail(k, PG_EINVAL, "%s: invalid type %d", opname(op), (int)t);
        return false;
    }
    switch (v.kind) {
    case PG_VAL_REG: {
        pg_type rt = reg_type(k, v);
        if (rt == PG_TYPE_COUNT) {
            pg_fail(k, PG_EINVAL, "%s: %s is not a register of this kernel", opname(op), what);
            return false;
        }
        if (!reg_fits(t, rt)) {
            char b[32];
            pg_val_format(k, v, rt, b, sizeof b);
            pg_fail(k, PG_ETYPE, "%s.%s: %s %s is .%s", opname(op), pg_type_name(t), what, b,
                    pg_type_name(rt));
            return false;
        }
        return true;
    }
    case PG_VAL_IMM_INT:
    case PG_VAL_IMM_F32:
    case PG_VAL_IMM_F64:
        if (!imm_fits(t, v)) {
            if (t == PG_F16 || t == PG_BF16)
                pg_fail(k, PG_ETYPE, "%s.%s: %s: 16-bit float immediates are not supported; "
                        "use a register (cvt from an f32 register, or ld)", opname(op),
                        pg_type_name(t), what);
            else if (pg_type_is_float(t) && v.kind == PG_VAL_IMM_INT)
                pg_fail(k, PG_ETYPE, "%s.%s: %s is an integer immediate; write float immediates "
                        "with %s", opname(op), pg_type_name(t), what,
                        t == PG_F32 ? "pg_f32()" : "pg_f64()");
            else if (t == PG_F64 && v.kind == PG_VAL_IMM_F32)
                pg_fail(k, PG_ETYPE, "%s.f64: %s is an f32 immediate; use pg_f64()", opname(op), what);
            else if (t == PG_F32 && v.kind == PG_VAL_IMM_F64)
                pg_fail(k, PG_ETYPE, "%s.f32: %s is an f64 immediate; use pg_f32()", opname(op), what);
            else
                pg_fail(k, PG_ETYPE, "%s.%s: %s immediate does not fit .%s", opname(op),
                        pg_type_name(t), what, pg_type_name(t));
            return false;
        }
        return true;
    case PG_VAL_SHARED:
        pg_fail(k, PG_ETYPE, "%s: %s: a shared-memory address is only a mov source or an "
                "address", opname(op), what);
        return false;
    default:
        pg_fail(k, PG_EINVAL, "%s: %s is missing", opname(op), what);
        return false;
    }
}

/* The common case inline, a register of this kernel that fits: the
 * builder checks every operand of every instruction. Anything else, and
 * every message, is check_src_slow's. */
static inline bool check_src(pg_kernel *k, pg_opcode op, pg_type t, pg_val v, const char *what)
{
    if (!k->err && (unsigned)t < PG_TYPE_COUNT) {
        if (v.kind == PG_VAL_REG) {
            pg_type rt = reg_type(k, v);
            if (rt == t || (rt != PG_TYPE_COUNT && reg_fits(t, rt)))
                return true;
        } else if (v.kind == PG_VAL_IMM_INT && imm_fits(t, v)) {
            return true;
        }
    }
    return check_src_slow(k, op, t, v, what);
}

static bool check_dst(pg_kernel *k, pg_opcode op, pg_type t, pg_val d)
{
    if (k->err)
        return false;
    if (d.kind != PG_VAL_REG) {
        pg_fail(k, PG_EINVAL, "%s: the destination must be a register", opname(op));
        return false;
    }
    return check_src(k, op, t, d, "destination");
}

/* ---------------------------------------------------------------- operand classes */

/* Some operands have a class of their own, narrower than the instruction
 * type. PTX lets any register of an operand's width stand for a .bN
 * operand, but a membermask is a 32-bit integer (shfl.sync, vote.sync),
 * and an mma.sync A or B fragment, like the destination of
 * cvt.rn.{f16x2,bf16x2}.f32, is a .b32 register holding two packed
 * halves: ptxas refuses an .f32 register in either place ("Arguments
 * mismatch"). Registers of the builder's b32, u32 and s32 types are the
 * ones it declares .b32. */
typedef enum operand_class {
    OC_MASK,   /* a b32/u32/s32 register, or an integer immediate of 32 bits */
    OC_PACKED, /* a b32/u32/s32 register: two 16-bit halves */
} operand_class;

/* Whether v is of class oc: the builder's fast path, which names nothing. */
static inline bool class_ok(const pg_kernel *k, operand_class oc, pg_val v)
{
    if (v.kind == PG_VAL_REG) {
        pg_type rt = reg_type(k, v);
        return rt == PG_B32 || rt == PG_U32 || rt == PG_S32;
    }
    return oc == OC_MASK && v.kind == PG_VAL_IMM_INT && imm_fits(PG_B32, v);
}

/* Refuse v, not of class oc. `form` is the instruction as PTX writes it
 * ("shfl.sync.bfly.b32"), `what` the operand ("membermask", "A fragment
 * 2"); `halves` the packed type. */
static void class_fail(pg_kernel *k, const char *form, operand_class oc, pg_val v,
                       const char *what, const char *halves)
{
    if (k->err)
        return;
    char want[96];
    if (oc == OC_MASK)
        snprintf(want, sizeof want, "a 32-bit integer (.b32, .u32 or .s32)");
    else
        snprintf(want, sizeof want, "a .b32 register of two %s (.b32, .u32 or .s32)", halves);
    switch (v.kind) {
    case PG_VAL_REG: {
        pg_type rt = reg_type(k, v);
        if (rt == PG_TYPE_COUNT) {
            pg_fail(k, PG_EINVAL, "%s: %s is not a register of this kernel", form, what);
            return;
        }
        char b[32];
        pg_val_format(k, v, rt, b, sizeof b);
        pg_fail(k, PG_ETYPE, "%s: %s %s is .%s, not %s", form, what, b, pg_type_name(rt), want);
        return;
    }
    case PG_VAL_IMM_INT:
        pg_fail(k, PG_ETYPE, "%s: %s is %s, not %s", form, what,
                oc == OC_MASK ? "an immediate wider than 32 bits" : "an immediate", want);
        return;
    case PG_VAL_IMM_F32:
    case PG_VAL_IMM_F64:
        pg_fail(k, PG_ETYPE, "%s: %s is a float immediate, not %s", form, what, want);
        return;
    case PG_VAL_SHARED:
        pg_fail(k, PG_ETYPE, "%s: %s is a shared-memory address, not %s", form, what, want);
        return;
    default:
        pg_fail(k, PG_EINVAL, "%s: %s is missing", form, what);
        return;
    }
}

/* The instruction type against the op table's classes and the target. */
static bool check_type(pg_kernel *k, pg_opcode op, pg_type t)
{
    unsigned allowed = pg_op_table[op].classes;
    if (k->err)
        return false;
    if ((unsigned)t >= PG_TYPE_COUNT) {
        pg_fail(k, PG_EINVAL, "%s: invalid type %d", opname(op), (int)t);
        return false;
    }
    if (!(pg_type_row(t)->tc & allowed)) {
        pg_fail(k, PG_ETYPE, "%s has no .%s form", opname(op), pg_type_name(t));
        return false;
    }
    /* Half-precision arithmetic needs newer targets than f32 does. */
    if (t == PG_BF16 && op == OP_SETP)
        return pg_require(k, 90, 78, "setp.bf16");
    if (t == PG_BF16 && (op == OP_ADD || op == OP_SUB || op == OP_MUL))
        return pg_require(k, 90, 78, "bf16 add/sub/mul");
    if ((op == OP_ABS || op == OP_NEG) && t == PG_F16)
        return pg_require(k, 53, 65, "f16 abs/neg");
    if (t == PG_BF16 || ((op == OP_MIN || op == OP_MAX) && t == PG_F16))
        return pg_require(k, 80, 70, "bf16 arithmetic and f16 min/max");
    return true;
}

instr *pg_push(pg_kernel *k, pg_opcode op, pg_type t)
{
    if (!live(k))
        return NULL;
    const pg_op_info *oi = &pg_op_table[op];
    if (!pg_require(k, oi->min_sm, oi->min_isa, oi->stem))
        return NULL;
    /* 256 records cover most kernels in one allocation; the tail is
     * cleared as it is reached */
    if (k->nins == k->cap_ins &&
        grow(k, (void **)&k->ins, &k->cap_ins, k->nins + 1, sizeof *k->ins, 256, false))
        return NULL;
    /* Every field but the operand arrays is cleared: an operand slot is
     * read only below ndst / nsrc, and the builders fill those. Clearing
     * the whole record (288 bytes, mostly operand room) cost more than
     * anything else pg_push does. */
    instr *in = &k->ins[k->nins++];
    memset(in, 0, offsetof(instr, dst));
    in->acc = NULL;
    in->nacc = 0;
    in->op = (uint16_t)op;
    in->type = (uint8_t)t;
    if (k->has_guard) {
        in->guard = k->guard;
        in->guard_neg = k->guard_neg;
        k->has_guard = false;
    }
    return in;
}

/* The start of a builder whose op the target may lack: refuse it before
 * looking at the operands, with the table's requirement. */
static bool op_begin(pg_kernel *k, pg_opcode op)
{
    if (!live(k))
        return false;
    const pg_op_info *oi = &pg_op_table[op];
    return pg_require(k, oi->min_sm, oi->min_isa, oi->stem);
}

/* Common shape: d = op(a[, b[, c]]), the type and d already checked. */
static void arith_record(pg_kernel *k, pg_opcode op, pg_type t, pg_reg d,
                         const pg_val *src, unsigned nsrc)
{
    static const char *const names[] = {"operand a", "operand b", "operand c"};
    for (unsigned i = 0; i < nsrc; i++)
        if (!check_src(k, op, t, src[i], names[i]))
            return;
    instr *in = pg_push(k, op, t);
    if (!in)
        return;
    in->ndst = 1;
    in->dst[0] = d;
    in->nsrc = (uint8_t)nsrc;
    for (unsigned i = 0; i < nsrc; i++)
        in->src[i] = src[i];
}

static void arith(pg_kernel *k, pg_opcode op, pg_type t, pg_reg d,
                  const pg_val *src, unsigned nsrc)
{
    if (live(k) && check_type(k, op, t) && check_dst(k, op, t, d))
        arith_record(k, op, t, d, src, nsrc);
}

/* A value form makes its own destination of type dt, after checking the
 * instruction type so that a bad type is reported against the operation,
 * not against the register. The register is made before the instruction is
 * recorded, as `pg_reg d = pg_reg_new(k, t); pg_op(k, t, d, ...)` does: the
 * two spellings give the same bytes. */
static pg_reg value_dst(pg_kernel *k, pg_opcode op, pg_type t, bool typed, pg_type dt)
{
    if (!live(k) || (typed && !check_type(k, op, t)))
        return pg_none();
    if ((unsigned)dt >= PG_TYPE_COUNT) {
        pg_fail(k, PG_EINVAL, "%s: invalid type %d", opname(op), (int)dt);
        return pg_none();
    }
    return pg_reg_new(k, dt);
}

static pg_reg value_of(const pg_kernel *k, pg_reg d) { return k && !k->err ? d : pg_none(); }

/* The value form of arith: the same checks in the same order as
 * value_dst then arith, each made once (a register just made of type t
 * fits an instruction of type t). */
static pg_reg arith_value(pg_kernel *k, pg_opcode op, pg_type t, const pg_val *src,
                          unsigned nsrc)
{
    pg_reg d = value_dst(k, op, t, true, t);
    if (d.kind == PG_VAL_REG)
        arith_record(k, op, t, d, src, nsrc);
    return value_of(k, d);
}

/* Each row below defines both forms of one instruction: the in-place
 * pg_NAME(k, t, d, ...) and the value form pgv_NAME(k, t, ...) -> d. */
#define ARITH1(name, op)                                                       \
    void pg_##name(pg_kernel *k, pg_type t, pg_reg d, pg_val a)                \
    {                                                                          \
        pg_val s[1] = {a};                                                     \
        arith(k, op, t, d, s, 1);                                              \
    }                                                                          \
    pg_reg pgv_##name(pg_kernel *k, pg_type t, pg_val a)                       \
    {                                                                          \
        pg_val s[1] = {a};                                                     \
        return arith_value(k, op, t, s, 1);                                    \
    }
#define ARITH2(name, op)                                                       \
    void pg_##name(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b)      \
    {                                                                          \
        pg_val s[2] = {a, b};                                                  \
        arith(k, op, t, d, s, 2);                                              \
    }                                                                          \
    pg_reg pgv_##name(pg_kernel *k, pg_type t, pg_val a, pg_val b)             \
    {                                                                          \
        pg_val s[2] = {a, b};                                                  \
        return arith_value(k, op, t, s, 2);                                    \
    }
#define ARITH3(name, op)                                                       \
    void pg_##name(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b, pg_val c) \
    {                                                                          \
        pg_val s[3] = {a, b, c};                                               \
        arith(k, op, t, d, s, 3);                                              \
    }                                                                          \
    pg_reg pgv_##name(pg_kernel *k, pg_type t, pg_val a, pg_val b, pg_val c)   \
    {                                                                          \
        pg_val s[3] = {a, b, c};                                               \
        return arith_value(k, op, t, s, 3);                                    \
    }

ARITH2(add, OP_ADD)
ARITH2(sub, OP_SUB)
ARITH2(mul, OP_MUL)
ARITH2(mul_hi, OP_MUL_HI)
ARITH3(mad, OP_MAD)
ARITH3(mad_hi, OP_MAD_HI)
ARITH3(fma, OP_FMA)
ARITH2(div, OP_DIV)
ARITH2(rem, OP_REM)
ARITH1(rcp, OP_RCP)
ARITH1(sqrt, OP_SQRT)
ARITH1(rsqrt, OP_RSQRT)
ARITH1(ex2, OP_EX2)
ARITH1(lg2, OP_LG2)
ARITH2(min, OP_MIN)
ARITH2(max, OP_MAX)
ARITH1(abs, OP_ABS)
ARITH1(neg, OP_NEG)
ARITH2(and, OP_AND)
ARITH2(or, OP_OR)
ARITH2(xor, OP_XOR)
ARITH1(not, OP_NOT)

void pg_mov(pg_kernel *k, pg_type t, pg_reg d, pg_val a)
{
    if (a.kind == PG_VAL_SHARED) {
        /* Taking the address of a shared symbol. */
        if (!live(k))
            return;
        if (t != PG_U32 && t != PG_U64 && t != PG_B32 && t != PG_B64) {
            pg_fail(k, PG_ETYPE, "mov: a shared address moves as .u32 or .u64, not .%s",
                    pg_type_name(t));
            return;
        }
        if (!pg_shared_ok(k, a)) {
            pg_fail(k, PG_EINVAL, "mov: not a shared symbol of this kernel");
            return;
        }
        if (!check_dst(k, OP_MOV, t, d))
            return;
        instr *in = pg_push(k, OP_MOV, t);
        if (!in)
            return;
        in->ndst = 1;
        in->dst[0] = d;
        in->nsrc = 1;
        in->src[0] = a;
        return;
    }
    pg_val s[1] = {a};
    arith(k, OP_MOV, t, d, s, 1);
}

pg_reg pgv_mov(pg_kernel *k, pg_type t, pg_val a)
{
    pg_reg d = value_dst(k, OP_MOV, t, true, t);
    pg_mov(k, t, d, a);
    return value_of(k, d);
}

/* d = op(a, b), every check made: the record of a shift, and of a pack
 * (whose sources are in the order the text has them: pack lo, hi;
 * cvt_pack hi, lo, as PTX writes it). */
static void record2(pg_kernel *k, pg_opcode op, pg_type t, pg_reg d, pg_val a, pg_val b)
{
    instr *in = pg_push(k, op, t);
    if (!in)
        return;
    in->ndst = 1;
    in->dst[0] = d;
    in->nsrc = 2;
    in->src[0] = a;
    in->src[1] = b;
}

static void shift(pg_kernel *k, pg_opcode op, pg_type t, pg_reg d, pg_val a, pg_val b)
{
    if (!live(k) || !check_type(k, op, t) || !check_dst(k, op, t, d) ||
        !check_src(k, op, t, a, "operand a") || !check_src(k, op, PG_U32, b, "shift amount"))
        return;
    record2(k, op, t, d, a, b);
}

void pg_shl(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b) { shift(k, OP_SHL, t, d, a, b); }
void pg_shr(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b) { shift(k, OP_SHR, t, d, a, b); }

pg_reg pgv_shl(pg_kernel *k, pg_type t, pg_val a, pg_val b)
{
    pg_reg d = value_dst(k, OP_SHL, t, true, t);
    shift(k, OP_SHL, t, d, a, b);
    return value_of(k, d);
}

pg_reg pgv_shr(pg_kernel *k, pg_type t, pg_val a, pg_val b)
{
    pg_reg d = value_dst(k, OP_SHR, t, true, t);
    shift(k, OP_SHR, t, d, a, b);
    return value_of(k, d);
}

static pg_type wide_of(pg_type t)
{
    switch (t) {
    case PG_U16: return PG_U32;
    case PG_S16: return PG_S32;
    case PG_U32: return PG_U64;
    case PG_S32: return PG_S64;
    default: return PG_TYPE_COUNT;
    }
}

static void wide(pg_kernel *k, pg_opcode op, pg_type t, pg_reg d, const pg_val *s, unsigned n)
{
    if (!live(k))
        return;
    pg_type w = wide_of(t);
    if (w == PG_TYPE_COUNT) {
        pg_fail(k, PG_ETYPE, "%s has no .%s form (only u16 s16 u32 s32)", opname(op),
                pg_type_name(t));
        return;
    }
    if (!check_dst(k, op, w, d) || !check_src(k, op, t, s[0], "operand a") ||
        !check_src(k, op, t, s[1], "operand b") ||
        (n == 3 && !check_src(k, op, w, s[2], "operand c")))
        return;
    instr *in = pg_push(k, op, t);
    if (!in)
        return;
    in->ndst = 1;
    in->dst[0] = d;
    in->nsrc = (uint8_t)n;
    for (unsigned i = 0; i < n; i++)
        in->src[i] = s[i];
}

void pg_mul_wide(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b)
{
    pg_val s[2] = {a, b};
    wide(k, OP_MUL_WIDE, t, d, s, 2);
}

void pg_mad_wide(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b, pg_val c)
{
    pg_val s[3] = {a, b, c};
    wide(k, OP_MAD_WIDE, t, d, s, 3);
}

/* The wide destination is made only for a type that has a wide form, so a
 * bad type is reported by wide() and names the instruction. */
static pg_reg wide_dst(pg_kernel *k, pg_opcode op, pg_type t)
{
    pg_type w = wide_of(t);
    return w == PG_TYPE_COUNT ? pg_none() : value_dst(k, op, t, false, w);
}

pg_reg pgv_mul_wide(pg_kernel *k, pg_type t, pg_val a, pg_val b)
{
    pg_reg d = wide_dst(k, OP_MUL_WIDE, t);
    pg_mul_wide(k, t, d, a, b);
    return value_of(k, d);
}

pg_reg pgv_mad_wide(pg_kernel *k, pg_type t, pg_val a, pg_val b, pg_val c)
{
    pg_reg d = wide_dst(k, OP_MAD_WIDE, t);
    pg_mad_wide(k, t, d, a, b, c);
    return value_of(k, d);
}

void pg_setp(pg_kernel *k, pg_cmp c, pg_type t, pg_reg p, pg_val a, pg_val b)
{
    if (!live(k))
        return;
    if ((unsigned)c >= PG_CMP_COUNT) {
        pg_fail(k, PG_EINVAL, "setp: invalid comparison %d", (int)c);
        return;
    }
    if (!check_type(k, OP_SETP, t))
        return;
    bool f = pg_type_is_float(t);
    if (c >= PG_CMP_EQU && !f) {
        pg_fail(k, PG_ETYPE, "setp: NaN-aware comparisons are for floats, not .%s", pg_type_name(t));
        return;
    }
    if (c >= PG_CMP_LO && c <= PG_CMP_HS && (f || pg_type_is_signed(t))) {
        pg_fail(k, PG_ETYPE, "setp: lo/ls/hi/hs are unsigned comparisons, not .%s",
                pg_type_name(t));
        return;
    }
    if (pg_type_tc(t) == TC_BIT && c != PG_CMP_EQ && c != PG_CMP_NE) {
        pg_fail(k, PG_ETYPE, "setp: .%s compares only eq/ne", pg_type_name(t));
        return;
    }
    if (!check_dst(k, OP_SETP, PG_PRED, p) || !check_src(k, OP_SETP, t, a, "operand a") ||
        !check_src(k, OP_SETP, t, b, "operand b"))
        return;
    instr *in = pg_push(k, OP_SETP, t);
    if (!in)
        return;
    in->mod = (uint8_t)c;
    in->ndst = 1;
    in->dst[0] = p;
    in->nsrc = 2;
    in->src[0] = a;
    in->src[1] = b;
}

pg_reg pgv_setp(pg_kernel *k, pg_cmp c, pg_type t, pg_val a, pg_val b)
{
    pg_reg p = value_dst(k, OP_SETP, t, true, PG_PRED);
    pg_setp(k, c, t, p, a, b);
    return value_of(k, p);
}

void pg_selp(pg_kernel *k, pg_type t, pg_reg d, pg_val a, pg_val b, pg_reg p)
{
    if (!live(k) || !check_type(k, OP_SELP, t) ||
        !check_dst(k, OP_SELP, t, d) || !check_src(k, OP_SELP, t, a, "operand a") ||
        !check_src(k, OP_SELP, t, b, "operand b"))
        return;
    if (p.kind != PG_VAL_REG || pg_reg_type(k, p) != PG_PRED) {
        pg_fail(k, PG_ETYPE, "selp: the selector must be a predicate register");
        return;
    }
    instr *in = pg_push(k, OP_SELP, t);
    if (!in)
        return;
    in->ndst = 1;
    in->dst[0] = d;
    in->nsrc = 3;
    in->src[0] = a;
    in->src[1] = b;
    in->src[2] = p;
}

pg_reg pgv_selp(pg_kernel *k, pg_type t, pg_val a, pg_val b, pg_reg p)
{
    pg_reg d = value_dst(k, OP_SELP, t, true, t);
    pg_selp(k, t, d, a, b, p);
    return value_of(k, d);
}

void pg_cvt(pg_kernel *k, pg_type dt, pg_type st, pg_rnd r, pg_reg d, pg_val a)
{
    if (!live(k))
        return;
    if ((unsigned)dt >= PG_TYPE_COUNT || (unsigned)st >= PG_TYPE_COUNT || dt == PG_PRED ||
        st == PG_PRED || (unsigned)r >= PG_RND_COUNT) {
        pg_fail(k, PG_EINVAL, "cvt: invalid type or rounding");
        return;
    }
    bool df = pg_type_is_float(dt), sf = pg_type_is_float(st);
    bool dbit = pg_type_tc(dt) == TC_BIT || dt == PG_B8, sbit = pg_type_tc(st) == TC_BIT || st == PG_B8;
    if (dbit || sbit) {
        pg_fail(k, PG_ETYPE, "cvt converts numbers; .%s is a bit type (use mov)",
                pg_type_name(dbit ? dt : st));
        return;
    }
    bool int_rnd = r >= PG_RND_RNI, flt_rnd = r >= PG_RND_RN && r <= PG_RND_RP;
    const char *want = NULL;
    if (sf && !df) {
        if (!int_rnd)
            want = "an integer rounding (rni, rzi, rmi, rpi)";
    } else if (!sf && df) {
        if (!flt_rnd)
            want = "a float rounding (rn, rz, rm, rp)";
    } else if (sf && df) {
        unsigned db = pg_type_bits(dt), sb = pg_type_bits(st);
        if (db < sb || (db == sb && dt != st)) {
            if (!flt_rnd)
                want = "a float rounding (rn, rz, rm, rp)";
        } else if (db == sb) {
            if (r != PG_RND_NONE && !int_rnd)
                want = "no rounding or an integer rounding";
        } else if (r != PG_RND_NONE) {
            want = "no rounding (widening is exact)";
        }
    } else if (r != PG_RND_NONE) {
        want = "no rounding (integer to integer)";
    }
    if (want) {
        pg_fail(k, PG_ETYPE, "cvt.%s.%s needs %s", pg_type_name(dt), pg_type_name(st), want);
        return;
    }
    /* What ptxas takes with bf16, narrower than what the PTX manual lists. */
    bool bf_byte = (dt == PG_BF16 && pg_type_bits(st) == 8) || (st == PG_BF16 && pg_type_bits(dt) == 8);
    if (bf_byte) {
        pg_fail(k, PG_ETYPE, "cvt.%s.%s: there is no conversion between bf16 and 8-bit "
                "integers; convert through f32", pg_type_name(dt), pg_type_name(st));
        return;
    }
    if (dt == PG_BF16 && st != PG_F32 &&
        !pg_require(k, 90, 78, st == PG_F16 ? "cvt to bf16 from f16" :
                    st == PG_F64 ? "cvt to bf16 from f64" : "cvt to bf16 from an integer"))
        return;
    if (dt == PG_BF16 && !pg_require(k, 80, 70, "cvt to bf16"))
        return;
    if (st == PG_BF16 && !pg_require(k, 90, 78, "cvt from bf16"))
        return;
    pg_type drt = reg_type_for(dt), srt = reg_type_for(st);
    if (!check_dst(k, OP_CVT, drt, d) || !check_src(k, OP_CVT, srt, a, "source"))
        return;
    instr *in = pg_push(k, OP_CVT, dt);
    if (!in)
        return;
    in->type2 = (uint8_t)st;
    in->mod = (uint8_t)r;
    in->ndst = 1;
    in->dst[0] = d;
    in->nsrc = 1;
    in->src[0] = a;
}

pg_reg pgv_cvt(pg_kernel *k, pg_type dt, pg_type st, pg_rnd r, pg_val a)
{
    if (live(k) && ((unsigned)dt >= PG_TYPE_COUNT || dt == PG_PRED)) {
        pg_cvt(k, dt, st, r, pg_none(), a); /* reports the bad type */
        return pg_none();
    }
    pg_reg d = value_dst(k, OP_CVT, dt, false, reg_type_for(dt));
    pg_cvt(k, dt, st, r, d, a);
    return value_of(k, d);
}

/* One operand of a pack, named against the whole form ("mov.b32: low half
 * %f1 is .f32, not .b16"); the other faults as check_src words them. */
static bool pack_operand(pg_kernel *k, pg_opcode op, const char *form, pg_type want, pg_val v,
                         const char *what)
{
    pg_type rt = reg_type(k, v);
    if (v.kind == PG_VAL_REG && rt != PG_TYPE_COUNT && !reg_fits(want, rt)) {
        char b[32];
        pg_val_format(k, v, rt, b, sizeof b);
        pg_fail(k, PG_ETYPE, "%s: %s %s is .%s, not .%s", form, what, b, pg_type_name(rt),
                pg_type_name(want));
        return false;
    }
    if (v.kind != PG_VAL_REG && !strcmp(what, "destination")) {
        pg_fail(k, PG_EINVAL, "%s: the destination must be a register", form);
        return false;
    }
    return check_src(k, op, want, v, what);
}

void pg_pack(pg_kernel *k, pg_type t, pg_reg d, pg_val lo, pg_val hi)
{
    if (!live(k))
        return;
    if (t != PG_B32 && t != PG_B64) {
        pg_fail(k, PG_ETYPE, "mov (pack): the packed type is .b32 (two 16-bit halves) or .b64 "
                "(two 32-bit halves), not %s%s", (unsigned)t < PG_TYPE_COUNT ? "." : "type ",
                (unsigned)t < PG_TYPE_COUNT ? pg_type_name(t) : "out of range");
        return;
    }
    pg_type half = t == PG_B32 ? PG_B16 : PG_B32;
    const char *form = t == PG_B32 ? "mov.b32" : "mov.b64";
    if (pack_operand(k, OP_PACK, form, t, d, "destination") &&
        pack_operand(k, OP_PACK, form, half, lo, "low half") &&
        pack_operand(k, OP_PACK, form, half, hi, "high half"))
        record2(k, OP_PACK, t, d, lo, hi);
}

pg_reg pgv_pack(pg_kernel *k, pg_type t, pg_val lo, pg_val hi)
{
    pg_reg d = pg_none(); /* left so on a bad type, which pg_pack then names */
    if (live(k) && (t == PG_B32 || t == PG_B64))
        d = pg_reg_new(k, t);
    pg_pack(k, t, d, lo, hi);
    return value_of(k, d);
}

void pg_cvt_pack(pg_kernel *k, pg_type t, pg_reg d, pg_val lo, pg_val hi)
{
    if (!live(k))
        return;
    if (t != PG_BF16 && t != PG_F16) {
        pg_fail(k, PG_ETYPE, "cvt (pack): two f32 values pack as .bf16x2 or .f16x2, not %s%s",
                (unsigned)t < PG_TYPE_COUNT ? "." : "type ",
                (unsigned)t < PG_TYPE_COUNT ? pg_type_name(t) : "out of range");
        return;
    }
    const char *form = t == PG_BF16 ? "cvt.rn.bf16x2.f32" : "cvt.rn.f16x2.f32";
    if (!pg_require(k, 80, 70, form))
        return;
    if (!pack_operand(k, OP_CVT_PACK, form, PG_B32, d, "destination"))
        return;
    if (!class_ok(k, OC_PACKED, d)) {
        class_fail(k, form, OC_PACKED, d, "destination", t == PG_BF16 ? "bf16" : "f16");
        return;
    }
    if (pack_operand(k, OP_CVT_PACK, form, PG_F32, lo, "low half") &&
        pack_operand(k, OP_CVT_PACK, form, PG_F32, hi, "high half"))
        record2(k, OP_CVT_PACK, t, d, hi, lo);
}

pg_reg pgv_cvt_pack(pg_kernel *k, pg_type t, pg_val lo, pg_val hi)
{
    pg_reg d = pg_none(); /* left so on a bad type or target, which pg_cvt_pack names */
    if (live(k) && (t == PG_BF16 || t == PG_F16) && k->sm >= 80)
        d = pg_reg_new(k, PG_B32);
    pg_cvt_pack(k, t, d, lo, hi);
    return value_of(k, d);
}

/* ---------------------------------------------------------------- params */

pg_param pg_param_add(pg_kernel *k, pg_type t, const char *name)
{
    pg_param none = {0};
    if (!live(k))
        return none;
    if ((unsigned)t >= PG_TYPE_COUNT || t == PG_PRED) {
        pg_fail(k, PG_ETYPE, "param '%s': a parameter cannot be .pred", name ? name : "?");
        return none;
    }
    if (!check_name(k, "param name", name))
        return none;
    /* The kernel's shared-memory symbols are named "<kernel>_...": a param
     * can never be named like one, whatever symbols come later. */
    size_t kl = strlen(k->name);
    if (strncmp(name, k->name, kl) == 0 && name[kl] == '_') {
        pg_fail(k, PG_EINVAL, "param name '%s': names beginning with '%s_' are kept for the "
                "kernel's shared-memory symbols", name, k->name);
        return none;
    }
    for (uint32_t i = 0; i < k->nparams; i++) {
        if (strcmp(k->params[i].name, name) == 0) {
            pg_fail(k, PG_EINVAL, "param '%s' declared twice", name);
            return none;
        }
    }
    if (k->nins) {
        pg_fail(k, PG_ESTATE, "param '%s': declare all params before the first instruction", name);
        return none;
    }
    if (GROW(k, k->params, k->cap_params, k->nparams + 1))
        return none;
    char *n = arena_strdup(&k->mem, name);
    if (!n) {
        pg_fail(k, PG_ENOMEM, "out of memory");
        return none;
    }
    k->params[k->nparams].name = n;
    k->params[k->nparams].type = (uint8_t)t;
    pg_param p = {++k->nparams, k->tag};
    return p;
}

pg_reg pg_param_load(pg_kernel *k, pg_param p)
{
    if (!live(k))
        return pg_none();
    if (p.kernel != k->tag || p.id == 0 || p.id > k->nparams) {
        pg_fail(k, PG_EINVAL, "pg_param_load: not a param of this kernel");
        return pg_none();
    }
    if (k->params[p.id - 1].tensor_map) {
        pg_fail(k, PG_ETYPE, "pg_param_load: '%s' is a tensor map; take its address with "
                "pg_param_addr", k->params[p.id - 1].name);
        return pg_none();
    }
    pg_type t = (pg_type)k->params[p.id - 1].type;
    pg_reg d = pg_reg_new(k, reg_type_for(t));
    instr *in = pg_push(k, OP_LD, t);
    if (!in)
        return pg_none();
    in->mod = PG_SPACE_PARAM;
    in->width = 1;
    in->ndst = 1;
    in->dst[0] = d;
    in->imm = p.id;
    return d;
}

size_t pg_kernel_param_count(const pg_kernel *k) { return k ? k->nparams : 0; }

int pg_kernel_param_info(const pg_kernel *k, size_t i, const char **name, pg_type *t)
{
    if (!k)
        return PG_EINVAL;
    if (i >= k->nparams)
        return PG_ERANGE;
    if (name)
        *name = k->params[i].name;
    if (t)
        *t = (pg_type)k->params[i].type;
    return PG_OK;
}

pg_reg pg_sreg_read(pg_kernel *k, pg_sreg s)
{
    if (!live(k))
        return pg_none();
    if ((unsigned)s >= PG_SREG_COUNT) {
        pg_fail(k, PG_EINVAL, "pg_sreg_read: invalid special register %d", (int)s);
        return pg_none();
    }
    pg_reg d = pg_reg_new(k, PG_U32);
    instr *in = pg_push(k, OP_SREG, PG_U32);
    if (!in)
        return pg_none();
    in->mod = (uint8_t)s;
    in->ndst = 1;
    in->dst[0] = d;
    return d;
}

/* ---------------------------------------------------------------- control */

void pg_guard(pg_kernel *k, pg_reg p, bool negate)
{
    if (!live(k))
        return;
    if (p.kind != PG_VAL_REG || pg_reg_type(k, p) != PG_PRED) {
        pg_fail(k, PG_ETYPE, "pg_guard: the guard must be a predicate register");
        return;
    }
    if (k->has_guard) {
        pg_fail(k, PG_ESTATE, "pg_guard: a guard is already pending for the next instruction");
        return;
    }
    k->has_guard = true;
    k->guard = p.id;
    k->guard_neg = negate;
}

pg_label pg_label_new(pg_kernel *k, const char *hint)
{
    pg_label none = {0};
    if (!live(k))
        return none;
    if (hint && !check_name(k, "label hint", hint))
        return none;
    if (GROW(k, k->labels, k->cap_labels, k->nlabels + 1))
        return none;
    label_info *l = &k->labels[k->nlabels];
    l->hint = hint ? arena_strdup(&k->mem, hint) : NULL;
    if (hint && !l->hint) {
        pg_fail(k, PG_ENOMEM, "out of memory");
        return none;
    }
    l->bound_at = -1;
    pg_label r = {k->nlabels++, k->tag};
    return r;
}

static bool label_ok(pg_kernel *k, pg_label l, const char *what)
{
    if (!pg_label_ok(k, l)) {
        pg_fail(k, PG_ELABEL, "%s: not a label of this kernel", what);
        return false;
    }
    return true;
}

void pg_label_bind(pg_kernel *k, pg_label l)
{
    if (!live(k) || !label_ok(k, l, "pg_label_bind"))
        return;
    label_info *li = &k->labels[l.id];
    if (li->bound_at >= 0) {
        pg_fail(k, PG_ELABEL, "label %u%s%s is bound twice (first at instruction %lld)", l.id,
                li->hint ? " " : "", li->hint ? li->hint : "", (long long)li->bound_at);
        return;
    }
    if (k->has_guard) {
        pg_fail(k, PG_ESTATE, "a guard cannot apply to a label");
        return;
    }
    instr *in = pg_push(k, OP_LABEL, PG_PRED);
    if (!in)
        return;
    in->label = l.id;
    li->bound_at = k->nins - 1;
    li->num = ++k->nbound;
}

void pg_bra(pg_kernel *k, pg_label l)
{
    if (!live(k) || !label_ok(k, l, "bra"))
        return;
    instr *in = pg_push(k, OP_BRA, PG_PRED);
    if (in)
        in->label = l.id;
}

void pg_bra_if(pg_kernel *k, pg_reg p, bool negate, pg_label l)
{
    if (!live(k) || !label_ok(k, l, "bra"))
        return;
    pg_guard(k, p, negate);
    pg_bra(k, l);
}

void pg_ret(pg_kernel *k) { (void)pg_push(k, OP_RET, PG_PRED); }
void pg_exit(pg_kernel *k) { (void)pg_push(k, OP_EXIT, PG_PRED); }

void pg_bar_sync(pg_kernel *k, uint32_t id)
{
    if (!live(k))
        return;
    if (id > 15) {
        pg_fail(k, PG_ERANGE, "bar.sync %u: barrier ids are 0..15", id);
        return;
    }
    instr *in = pg_push(k, OP_BAR, PG_PRED);
    if (in)
        in->imm = id;
}

void pg_bar_warp_sync(pg_kernel *k, uint32_t mask)
{
    instr *in = pg_push(k, OP_BAR_WARP, PG_B32);
    if (!in)
        return;
    in->nsrc = 1;
    in->src[0] = pg_u32(mask);
}

void pg_membar(pg_kernel *k, pg_scope s)
{
    if (!live(k))
        return;
    if ((unsigned)s > PG_SCOPE_SYS) {
        pg_fail(k, PG_EINVAL, "membar: invalid scope %d", (int)s);
        return;
    }
    instr *in = pg_push(k, OP_MEMBAR, PG_PRED);
    if (in)
        in->mod = (uint8_t)s;
}

void pg_fence(pg_kernel *k, pg_scope s, bool sc)
{
    if (!live(k))
        return;
    if ((unsigned)s > PG_SCOPE_SYS) {
        pg_fail(k, PG_EINVAL, "fence: invalid scope %d", (int)s);
        return;
    }
    instr *in = pg_push(k, OP_FENCE, PG_PRED);
    if (!in)
        return;
    in->mod = (uint8_t)s;
    in->mod2 = sc;
}

void pg_comment(pg_kernel *k, const char *text)
{
    if (!live(k))
        return;
    if (!text || strpbrk(text, "\r\n")) {
        pg_fail(k, PG_EINVAL, "pg_comment: a comment is one line of text");
        return;
    }
    if (k->has_guard) {
        pg_fail(k, PG_ESTATE, "a guard cannot apply to a comment");
        return;
    }
    /* Kept as printable ASCII: any other byte is written as \xNN, so no
     * byte of a comment can end the line or upset the assembler. */
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        n += (*p >= 0x20 && *p < 0x7f) || *p == '\t' ? 1 : 4;
    char *t = arena_alloc(&k->mem, n + 1);
    if (!t) {
        pg_fail(k, PG_ENOMEM, "out of memory");
        return;
    }
    char *o = t;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if ((*p >= 0x20 && *p < 0x7f) || *p == '\t') {
            *o++ = (char)*p;
        } else {
            static const char hex[] = "0123456789ABCDEF";
            *o++ = '\\';
            *o++ = 'x';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        }
    }
    *o = '\0';
    instr *in = pg_push(k, OP_COMMENT, PG_PRED);
    if (in)
        in->text = t;
}

/* ---------------------------------------------------------------- memory */

static bool check_addr(pg_kernel *k, pg_opcode op, pg_space s, pg_val addr)
{
    if (k->err)
        return false;
    if (addr.kind == PG_VAL_SHARED) {
        if (s != PG_SPACE_SHARED) {
            pg_fail(k, PG_ETYPE, "%s: a shared symbol addresses only shared memory", opname(op));
            return false;
        }
        if (!pg_shared_ok(k, addr)) {
            pg_fail(k, PG_EINVAL, "%s: not a shared symbol of this kernel", opname(op));
            return false;
        }
        return true;
    }
    if (addr.kind != PG_VAL_REG) {
        pg_fail(k, PG_EINVAL, "%s: the address must be a register or a shared symbol", opname(op));
        return false;
    }
    pg_type t = pg_reg_type(k, addr);
    if (t == PG_TYPE_COUNT) {
        pg_fail(k, PG_EINVAL, "%s: the address is not a register of this kernel", opname(op));
        return false;
    }
    unsigned bits = pg_type_bits(t);
    if (pg_type_is_float(t) || t == PG_PRED || (bits != 64 && !(bits == 32 && s == PG_SPACE_SHARED))) {
        pg_fail(k, PG_ETYPE, "%s: a %s address is a 64-bit%s integer register, not .%s", opname(op),
                s == PG_SPACE_SHARED ? "shared" : "global", s == PG_SPACE_SHARED ? " or 32-bit" : "",
                pg_type_name(t));
        return false;
    }
    return true;
}

/* The register type a memory value of type t lives in. */
static bool mem_reg_fits(pg_type t, pg_type rt)
{
    if (pg_type_bits(t) == 8)
        return !pg_type_is_float(rt) && rt != PG_PRED && (pg_type_bits(rt) == 16 || pg_type_bits(rt) == 32);
    return reg_fits(t, rt);
}

/* The registers of a vector are of one width. Only an 8-bit vector can
 * break that (its elements may be 16- or 32-bit registers, which ld and st
 * take for bytes), and ptxas refuses {%rs1, %r1} ("Incompatible elements
 * of vector expression"). Immediates of a st take any width. */
static bool check_vec_width(pg_kernel *k, pg_opcode op, pg_space s, pg_type t, unsigned width,
                            const pg_val *v)
{
    int first = -1;
    for (unsigned i = 0; i < width; i++) {
        if (v[i].kind != PG_VAL_REG)
            continue;
        if (first < 0) {
            first = (int)i;
            continue;
        }
        pg_type ft = reg_type(k, v[first]), rt = reg_type(k, v[i]);
        if (pg_type_bits(rt) != pg_type_bits(ft)) {
            char bf[32], bi[32];
            pg_val_format(k, v[first], ft, bf, sizeof bf);
            pg_val_format(k, v[i], rt, bi, sizeof bi);
            pg_fail(k, PG_ETYPE, "%s.%s.v%u.%s: element %u %s is .%s and element %d %s is .%s: "
                    "the registers of a vector are all of one width", opname(op),
                    pg_space_name(s), width, pg_type_name(t), i, bi, pg_type_name(rt), first, bf,
                    pg_type_name(ft));
            return false;
        }
    }
    return true;
}

static bool check_mem_val(pg_kernel *k, pg_opcode op, pg_type t, pg_val v, bool is_dst)
{
    if (k->err)
        return false;
    if (is_dst && v.kind != PG_VAL_REG) {
        pg_fail(k, PG_EINVAL, "%s: the destination must be a register", opname(op));
        return false;
    }
    if (v.kind == PG_VAL_REG) {
        pg_type rt = pg_reg_type(k, v);
        if (rt == PG_TYPE_COUNT) {
            pg_fail(k, PG_EINVAL, "%s: not a register of this kernel", opname(op));
            return false;
        }
        if (!mem_reg_fits(t, rt)) {
            pg_fail(k, PG_ETYPE, "%s.%s: register is .%s", opname(op), pg_type_name(t),
                    pg_type_name(rt));
            return false;
        }
        return true;
    }
    pg_type it = pg_type_bits(t) == 8 ? PG_U16 : t;
    return check_src(k, op, it, v, "value");
}

static bool mem_op(pg_kernel *k, pg_opcode op, pg_space s, pg_type t, unsigned width,
                     pg_val addr, int64_t offset)
{
    if (!live(k))
        return false;
    if ((unsigned)s > PG_SPACE_SHARED) {
        pg_fail(k, PG_EINVAL, "%s: space must be global or shared (params load with "
                "pg_param_load)", opname(op));
        return false;
    }
    if ((unsigned)t >= PG_TYPE_COUNT || t == PG_PRED) {
        pg_fail(k, PG_ETYPE, "%s: predicates cannot be loaded or stored", opname(op));
        return false;
    }
    if (width != 1 && width != 2 && width != 4) {
        pg_fail(k, PG_EINVAL, "%s: vector width %u (1, 2 or 4)", opname(op), width);
        return false;
    }
    if (width * pg_type_bits(t) > 128) {
        pg_fail(k, PG_ETYPE, "%s.v%u.%s: a vector access is at most 128 bits", opname(op), width,
                pg_type_name(t));
        return false;
    }
    uint64_t bytes = (uint64_t)width * pg_type_bits(t) / 8;
    if (offset % (int64_t)bytes) {
        pg_fail(k, PG_EINVAL, "%s: offset %lld is not a multiple of the %llu-byte access",
                opname(op), (long long)offset, (unsigned long long)bytes);
        return false;
    }
    if (offset > INT32_MAX || offset < INT32_MIN) {
        pg_fail(k, PG_ERANGE, "%s: offset %lld does not fit 32 bits", opname(op), (long long)offset);
        return false;
    }
    if (!check_addr(k, op, s, addr))
        return false;
    return true;
}

void pg_ld_v(pg_kernel *k, pg_space s, pg_type t, unsigned width, pg_val addr, int64_t offset,
             const pg_reg *d)
{
    if (!mem_op(k, OP_LD, s, t, width, addr, offset))
        return;
    if (!d) {
        pg_fail(k, PG_EINVAL, "ld: no destination registers");
        return;
    }
    for (unsigned i = 0; i < width; i++)
        if (!check_mem_val(k, OP_LD, t, d[i], true))
            return;
    if (!check_vec_width(k, OP_LD, s, t, width, d))
        return;
    instr *in = pg_push(k, OP_LD, t);
    if (!in)
        return;
    in->mod = (uint8_t)s;
    in->width = (uint8_t)width;
    in->offset = offset;
    in->ndst = (uint8_t)width;
    for (unsigned i = 0; i < width; i++)
        in->dst[i] = d[i];
    in->nsrc = 1;
    in->src[0] = addr;
}

void pg_ld(pg_kernel *k, pg_space s, pg_type t, pg_val addr, int64_t offset, pg_reg d)
{
    pg_ld_v(k, s, t, 1, addr, offset, &d);
}

/* The destination of a scalar value-form load: refuse what ld refuses
 * before making a register, so the message names the load. */
static pg_reg ld_dst(pg_kernel *k, pg_space s, pg_type t, pg_val addr, int64_t offset)
{
    if (!mem_op(k, OP_LD, s, t, 1, addr, offset))
        return pg_none();
    return pg_reg_new(k, reg_type_for(t));
}

pg_reg pgv_ld(pg_kernel *k, pg_space s, pg_type t, pg_val addr, int64_t offset)
{
    pg_reg d = ld_dst(k, s, t, addr, offset);
    pg_ld(k, s, t, addr, offset, d);
    return value_of(k, d);
}

pg_reg pgv_ld_nc(pg_kernel *k, pg_type t, pg_val addr, int64_t offset)
{
    pg_reg d = ld_dst(k, PG_SPACE_GLOBAL, t, addr, offset);
    pg_ld_nc(k, t, addr, offset, d);
    return value_of(k, d);
}

void pg_ld_nc(pg_kernel *k, pg_type t, pg_val addr, int64_t offset, pg_reg d)
{
    pg_ld_v(k, PG_SPACE_GLOBAL, t, 1, addr, offset, &d);
    if (!k || k->err)
        return;
    k->ins[k->nins - 1].mod2 = 1;
}

void pg_st_v(pg_kernel *k, pg_space s, pg_type t, unsigned width, pg_val addr, int64_t offset,
             const pg_val *v)
{
    if (!mem_op(k, OP_ST, s, t, width, addr, offset))
        return;
    if (!v) {
        pg_fail(k, PG_EINVAL, "st: no values");
        return;
    }
    for (unsigned i = 0; i < width; i++)
        if (!check_mem_val(k, OP_ST, t, v[i], false))
            return;
    if (!check_vec_width(k, OP_ST, s, t, width, v))
        return;
    instr *in = pg_push(k, OP_ST, t);
    if (!in)
        return;
    in->mod = (uint8_t)s;
    in->width = (uint8_t)width;
    in->offset = offset;
    in->nsrc = (uint8_t)(1 + width);
    in->src[0] = addr;
    for (unsigned i = 0; i < width; i++)
        in->src[1 + i] = v[i];
}

void pg_st(pg_kernel *k, pg_space s, pg_type t, pg_val addr, int64_t offset, pg_val v)
{
    pg_st_v(k, s, t, 1, addr, offset, &v);
}

static uint32_t shared_add(pg_kernel *k, pg_type t, uint32_t count, uint32_t align,
                           const char *hint, bool dynamic)
{
    if (!live(k))
        return 0;
    if (align == 0 || (align & (align - 1)) || align > 256) {
        pg_fail(k, PG_EINVAL, "shared: alignment %u is not a power of two <= 256", align);
        return 0;
    }
    if (!dynamic) {
        if (hint && !check_name(k, "shared hint", hint))
            return 0;
        if ((unsigned)t >= PG_TYPE_COUNT || t == PG_PRED) {
            pg_fail(k, PG_ETYPE, "shared: invalid element type");
            return 0;
        }
        uint64_t bytes = (uint64_t)count * pg_type_bits(t) / 8;
        if (count == 0 || bytes + pg_kernel_static_shared_bytes(k) > 48u * 1024u) {
            pg_fail(k, PG_ERANGE, "shared '%s': %u elements; static shared memory is 1..48 KiB",
                    hint ? hint : "?", count);
            return 0;
        }
        if (align < pg_type_bits(t) / 8) {
            pg_fail(k, PG_EINVAL, "shared '%s': alignment %u is below the element size",
                    hint ? hint : "?", align);
            return 0;
        }
    } else {
        for (uint32_t i = 1; i < k->nshared; i++) {
            if (k->shared[i].dynamic) {
                pg_fail(k, PG_ESTATE, "shared: a kernel has at most one dynamic shared array");
                return 0;
            }
        }
    }
    if (GROW(k, k->shared, k->cap_shared, k->nshared + 1))
        return 0;
    /* "<kernel>_<hint><id>", with '_' before the id when the hint ends in a
     * digit: the id is then always the whole run of digits at the end, and
     * ids differ, so no two symbols share a name ("s1" as symbol 1 is
     * k_s1_1, "s" as symbol 11 is k_s11). */
    const char *h = dynamic ? "dsmem" : (hint ? hint : "smem");
    size_t hl = strlen(h);
    char buf[2 * PG_NAME_MAX + 16];
    snprintf(buf, sizeof buf, "%s_%s%s%u", k->name, h,
             h[hl - 1] >= '0' && h[hl - 1] <= '9' ? "_" : "", k->nshared);
    shared_info *si = &k->shared[k->nshared];
    si->name = arena_strdup(&k->mem, buf);
    if (!si->name) {
        pg_fail(k, PG_ENOMEM, "out of memory");
        return 0;
    }
    si->type = (uint8_t)(dynamic ? PG_B8 : t);
    si->count = count;
    si->align = align;
    si->dynamic = dynamic;
    return k->nshared++;
}

pg_shared pg_shared_static(pg_kernel *k, pg_type t, uint32_t count, uint32_t align, const char *hint)
{
    uint32_t id = shared_add(k, t, count, align, hint, false);
    pg_shared s = {id, id ? k->tag : 0};
    return s;
}

pg_shared pg_shared_dynamic(pg_kernel *k, uint32_t align)
{
    uint32_t id = shared_add(k, PG_B8, 0, align, NULL, true);
    pg_shared s = {id, id ? k->tag : 0};
    return s;
}

pg_val pg_shared_addr(pg_shared s)
{
    pg_val v = {PG_VAL_SHARED, s.id, s.kernel};
    return v;
}

uint32_t pg_kernel_static_shared_bytes(const pg_kernel *k)
{
    if (!k)
        return 0;
    uint64_t total = 0;
    for (uint32_t i = 1; i < k->nshared; i++) {
        const shared_info *s = &k->shared[i];
        if (s->dynamic)
            continue;
        total = (total + s->align - 1) / s->align * s->align;
        total += (uint64_t)s->count * pg_type_bits((pg_type)s->type) / 8;
    }
    return (uint32_t)total;
}

void pg_atom(pg_kernel *k, pg_space s, pg_atom_op op, pg_type t, pg_reg d, pg_val addr,
             int64_t offset, pg_val a, pg_val b)
{
    if (!mem_op(k, OP_ATOM, s, t, 1, addr, offset))
        return;
    if ((unsigned)op >= PG_ATOM_COUNT) {
        pg_fail(k, PG_EINVAL, "atom: invalid operation %d", (int)op);
        return;
    }
    unsigned ok;
    switch (op) {
    case PG_ATOM_ADD: ok = t == PG_U32 || t == PG_S32 || t == PG_U64 || t == PG_F32 || t == PG_F64; break;
    case PG_ATOM_MIN:
    case PG_ATOM_MAX: ok = t == PG_U32 || t == PG_S32 || t == PG_U64 || t == PG_S64; break;
    default: ok = pg_type_bits(t) >= 32 && !pg_type_is_float(t); break;
    }
    if (!ok) {
        pg_fail(k, PG_ETYPE, "atom.%s has no .%s form", pg_atom_name(op), pg_type_name(t));
        return;
    }
    bool ret = d.kind != PG_VAL_NONE;
    if (!ret && (op == PG_ATOM_CAS || op == PG_ATOM_EXCH)) {
        pg_fail(k, PG_EINVAL, "atom.%s needs a destination", pg_atom_name(op));
        return;
    }
    if ((ret && !check_dst(k, OP_ATOM, t, d)) || !check_src(k, OP_ATOM, t, a, "operand a") ||
        (op == PG_ATOM_CAS && !check_src(k, OP_ATOM, t, b, "operand b")))
        return;
    instr *in = pg_push(k, OP_ATOM, t);
    if (!in)
        return;
    in->mod = (uint8_t)s;
    in->mod2 = (uint8_t)op;
    in->offset = offset;
    in->ndst = ret ? 1 : 0;
    in->dst[0] = d;
    in->nsrc = op == PG_ATOM_CAS ? 3 : 2;
    in->src[0] = addr;
    in->src[1] = a;
    in->src[2] = b;
}

/* ---------------------------------------------------------------- warp */

void pg_shfl(pg_kernel *k, pg_shfl_mode m, pg_reg d, pg_reg p, pg_val a, pg_val b, pg_val c,
             pg_val mask)
{
    if (!live(k))
        return;
    if ((unsigned)m > PG_SHFL_IDX) {
        pg_fail(k, PG_EINVAL, "shfl: invalid mode %d", (int)m);
        return;
    }
    if (!check_dst(k, OP_SHFL, PG_B32, d) || !check_src(k, OP_SHFL, PG_B32, a, "value") ||
        !check_src(k, OP_SHFL, PG_B32, b, "lane/offset") ||
        !check_src(k, OP_SHFL, PG_B32, c, "clamp"))
        return;
    if (!class_ok(k, OC_MASK, mask)) {
        char form[32];
        snprintf(form, sizeof form, "shfl.sync.%s.b32", pg_shfl_name(m));
        class_fail(k, form, OC_MASK, mask, "membermask", NULL);
        return;
    }
    if (p.kind != PG_VAL_NONE && !check_dst(k, OP_SHFL, PG_PRED, p))
        return;
    instr *in = pg_push(k, OP_SHFL, PG_B32);
    if (!in)
        return;
    in->mod = (uint8_t)m;
    in->ndst = p.kind != PG_VAL_NONE ? 2 : 1;
    in->dst[0] = d;
    in->dst[1] = p;
    in->nsrc = 4;
    in->src[0] = a;
    in->src[1] = b;
    in->src[2] = c;
    in->src[3] = mask;
}

void pg_vote(pg_kernel *k, pg_vote_mode m, pg_reg d, pg_reg p, bool negate, pg_val mask)
{
    if (!live(k))
        return;
    if ((unsigned)m > PG_VOTE_BALLOT) {
        pg_fail(k, PG_EINVAL, "vote: invalid mode %d", (int)m);
        return;
    }
    pg_type dt = m == PG_VOTE_BALLOT ? PG_B32 : PG_PRED;
    if (!check_dst(k, OP_VOTE, dt, d) || !check_src(k, OP_VOTE, PG_PRED, p, "predicate"))
        return;
    if (!class_ok(k, OC_MASK, mask)) {
        char form[32];
        snprintf(form, sizeof form, "vote.sync.%s.%s", pg_vote_name(m), pg_type_name(dt));
        class_fail(k, form, OC_MASK, mask, "membermask", NULL);
        return;
    }
    instr *in = pg_push(k, OP_VOTE, dt);
    if (!in)
        return;
    in->mod = (uint8_t)m;
    in->src_neg = negate;
    in->ndst = 1;
    in->dst[0] = d;
    in->nsrc = 2;
    in->src[0] = p;
    in->src[1] = mask;
}

/* An A or B fragment of mma.sync: a .b32 register of two packed halves. */
static bool fragment_ok(pg_kernel *k, pg_opcode op, pg_type in_type, pg_val v, char which, int i)
{
    if (class_ok(k, OC_PACKED, v))
        return true;
    char what[24];
    snprintf(what, sizeof what, "%c fragment %d", which, i);
    class_fail(k, pg_op_table[op].stem, OC_PACKED, v, what, in_type == PG_BF16 ? "bf16" : "f16");
    return false;
}

void pg_mma_m16n8k16_f32(pg_kernel *k, pg_type in_type, const pg_reg *d, const pg_reg *a,
                         const pg_reg *b, const pg_reg *c)
{
    if (in_type != PG_F16 && in_type != PG_BF16) {
        if (!op_begin(k, OP_MMA))
            return;
        pg_fail(k, PG_ETYPE, "mma: inputs of type %s (f16 or bf16)",
                pg_type_name(in_type) ? pg_type_name(in_type) : "?");
        return;
    }
    pg_opcode op = in_type == PG_BF16 ? OP_MMA_BF16 : OP_MMA;
    if (!op_begin(k, op))
        return;
    if (!d || !a || !b || !c) {
        pg_fail(k, PG_EINVAL, "mma: NULL operand array");
        return;
    }
    for (int i = 0; i < 4; i++)
        if (!check_dst(k, op, PG_F32, d[i]) || !fragment_ok(k, op, in_type, a[i], 'A', i) ||
            !check_src(k, op, PG_F32, c[i], "c fragment"))
            return;
    for (int i = 0; i < 2; i++)
        if (!fragment_ok(k, op, in_type, b[i], 'B', i))
            return;
    instr *in = pg_push(k, op, PG_F32);
    if (!in)
        return;
    in->ndst = 4;
    in->nsrc = 10;
    for (int i = 0; i < 4; i++) {
        in->dst[i] = d[i];
        in->src[i] = a[i];
        in->src[6 + i] = c[i];
    }
    in->src[4] = b[0];
    in->src[5] = b[1];
}

void pg_mma_m16n8k16_f16_f32(pg_kernel *k, const pg_reg *d, const pg_reg *a, const pg_reg *b,
                             const pg_reg *c)
{
    pg_mma_m16n8k16_f32(k, PG_F16, d, a, b, c);
}

/* ---------------------------------------------------------------- tensor-core loads, async copies */

void pg_ldmatrix(pg_kernel *k, unsigned num, bool trans, const pg_reg *d, pg_val saddr,
                 int64_t offset)
{
    if (!op_begin(k, OP_LDMATRIX))
        return;
    if (num != 1 && num != 2 && num != 4) {
        pg_fail(k, PG_EINVAL, "ldmatrix: .x%u (1, 2 or 4 matrices)", num);
        return;
    }
    if (!d) {
        pg_fail(k, PG_EINVAL, "ldmatrix: no destination registers");
        return;
    }
    if (offset % 16 || offset > INT32_MAX || offset < INT32_MIN) {
        pg_fail(k, PG_EINVAL, "ldmatrix: offset %lld is not a multiple of the 16-byte row",
                (long long)offset);
        return;
    }
    if (!check_addr(k, OP_LDMATRIX, PG_SPACE_SHARED, saddr))
        return;
    for (unsigned i = 0; i < num; i++)
        if (!check_dst(k, OP_LDMATRIX, PG_B32, d[i]))
            return;
    instr *in = pg_push(k, OP_LDMATRIX, PG_B16);
    if (!in)
        return;
    in->mod2 = trans;
    in->width = (uint8_t)num;
    in->offset = offset;
    in->ndst = (uint8_t)num;
    for (unsigned i = 0; i < num; i++)
        in->dst[i] = d[i];
    in->nsrc = 1;
    in->src[0] = saddr;
}

void pg_cp_async(pg_kernel *k, pg_val sdst, int64_t soff, pg_val gsrc, int64_t goff,
                 unsigned bytes, pg_val src_size)
{
    if (!op_begin(k, OP_CP_ASYNC))
        return;
    if (bytes != 4 && bytes != 8 && bytes != 16) {
        pg_fail(k, PG_EINVAL, "cp.async: %u bytes (4, 8 or 16)", bytes);
        return;
    }
    if (soff % bytes || goff % bytes || soff > INT32_MAX || soff < INT32_MIN ||
        goff > INT32_MAX || goff < INT32_MIN) {
        pg_fail(k, PG_EINVAL, "cp.async: offsets %lld and %lld must be multiples of %u",
                (long long)soff, (long long)goff, bytes);
        return;
    }
    if (!check_addr(k, OP_CP_ASYNC, PG_SPACE_SHARED, sdst) ||
        !check_addr(k, OP_CP_ASYNC, PG_SPACE_GLOBAL, gsrc))
        return;
    if (src_size.kind != PG_VAL_NONE && !check_src(k, OP_CP_ASYNC, PG_U32, src_size, "src-size"))
        return;
    if (src_size.kind == PG_VAL_IMM_INT && src_size.bits > bytes) {
        pg_fail(k, PG_ERANGE, "cp.async: src-size %llu is larger than the %u-byte copy",
                (unsigned long long)src_size.bits, bytes);
        return;
    }
    instr *in = pg_push(k, OP_CP_ASYNC, PG_B8);
    if (!in)
        return;
    in->imm = bytes;
    in->offset = soff;
    in->offset2 = goff;
    in->nsrc = src_size.kind != PG_VAL_NONE ? 3 : 2;
    in->src[0] = sdst;
    in->src[1] = gsrc;
    in->src[2] = src_size;
}

void pg_cp_async_commit(pg_kernel *k) { (void)pg_push(k, OP_CP_COMMIT, PG_PRED); }

void pg_cp_async_wait(pg_kernel *k, uint32_t n)
{
    if (!op_begin(k, OP_CP_WAIT))
        return;
    if (n > 7) {
        pg_fail(k, PG_ERANGE, "cp.async.wait_group %u: at most 7 groups can be left in flight", n);
        return;
    }
    instr *in = pg_push(k, OP_CP_WAIT, PG_PRED);
    if (in)
        in->imm = n;
}
