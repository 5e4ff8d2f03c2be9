/* SPDX-License-Identifier: MIT */
/*
 * Whole-kernel checks before emission:
 *   - every branch target is bound;
 *   - no register is read where no write can have reached it (a "may be
 *     defined" forward data-flow over the control-flow graph: a write on
 *     one path of two will do). Only code that a path from the entry
 *     reaches counts: a write elsewhere defines nothing, though its block
 *     may fall or jump into reachable code, and a read there is not
 *     checked;
 *   - barrier uniformity: a bar.sync must be reached by all threads of the
 *     block or by none. A uniformity analysis marks values that can differ
 *     between threads of one block (from %tid, %laneid, %warpid, loads from
 *     per-thread addresses, atomics, shuffles, votes, and anything computed
 *     from them or assigned under a divergent branch); a branch or early exit
 *     on such a value makes every block it controls (reachable from it
 *     before its immediate post-dominator) divergent. A barrier there is an
 *     error naming the barrier and the branch. A read is judged by the
 *     writes that reach it, not by every write of its register: a register
 *     that held %tid.x and is then set to a constant is uniform where only
 *     the constant reaches (and per-thread where, on some path or round a
 *     loop, the old value still does).
 *     Divergence has two levels: values that differ only between warps (a
 *     warp or warpgroup index, %tid.x >> 5 or more, with blockDim.x a
 *     multiple of 32) and values that differ within a warp. A counted named
 *     barrier (bar.sync id, n) may sit under a branch of the first kind, as
 *     the consumer warpgroups of a warp-specialized kernel do; bar.sync for
 *     the whole block may sit under neither. The .sync.aligned Hopper
 *     instructions (wgmma, setmaxnreg, stmatrix) may sit under the first
 *     kind, never under a branch or guard that splits a warp. A wgmma's
 *     accumulators are its reads (unless scale-d is an immediate 0) and
 *     its writes.
 *
 * Everything here is linear or near-linear in the kernel's size, in time and
 * in memory: generated kernels run to a hundred thousand blocks and
 * registers, where a blocks x registers or blocks x blocks bitset would not
 * fit. One pass reads the instruction records (288 bytes each, most of it
 * operand slots) and keeps, in a few bytes an instruction, the registers
 * each reads and writes, in program order, with each write of a register
 * linked to the one before; the later passes read only those. Dominators
 * and post-dominators come from Cooper, Harvey and Kennedy's iterative
 * algorithm on reverse post-order numbers; the "may be defined" check
 * settles almost every read by a write before it in its own block, most of
 * the rest through the dominator tree, then a short backward search, and
 * leaves only what remains to one ancestor walk per reading block or to
 * bitset data-flow over just those registers, in chunks of bounded size.
 * The uniformity analysis goes through only the instructions that can
 * decide a branch, an early exit or a barrier (uniform_slice): in a big
 * kernel a few in a hundred. It first keeps one value per register, every
 * write raising it (a bound on what the writes that reach a read give);
 * only where that finds a barrier at fault are the reaching writes worked
 * out (reaching_values: most reads by a write before them in their block,
 * the rest through merges placed as in Braun et al.'s SSA construction)
 * and the analysis run again on those. A divergent branch marks its
 * region as soon as the uniformity pass reaches it, so a chain of branches
 * each decided by a value assigned under the one before settles in one
 * pass, not one each. The two levels keep it so: a value's or a block's
 * level only rises, from warp to lane at most once, so a branch walks its
 * region at most twice.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- bitsets */

typedef uint64_t word;
#define WBITS 64u

static size_t nwords(size_t nbits) { return (nbits + WBITS - 1) / WBITS; }
static bool bit_get(const word *s, size_t i) { return (s[i / WBITS] >> (i % WBITS)) & 1u; }
static void bit_set(word *s, size_t i) { s[i / WBITS] |= (word)1 << (i % WBITS); }

typedef struct block {
    uint32_t start, end; /* instruction range [start, end) */
    uint32_t succ[2];
    uint8_t nsucc;
    bool reachable;
    bool divergent;       /* only some threads of a block can be here */
    uint8_t level;        /* LV_WARP: whole warps only; LV_LANE: parts of warps */
    uint32_t cause;       /* instruction index of the divergent branch */
    uint32_t guard;       /* the guard of the branch or exit that ends it (0: none) */
    /* Where its part of cfg.reads begins; the next block's part begins
     * where it ends. */
    uint32_t reads;
} block;

typedef enum why_kind { WHY_NONE, WHY_SREG, WHY_LOAD, WHY_ATOM, WHY_SHFL, WHY_VOTE, WHY_CONTROL } why_kind;

/* How far a value or a block's threads differ: not at all, between warps
 * only, or within a warp. */
enum { LV_NONE = 0, LV_WARP = 1, LV_LANE = 2 };

/* Why a value differs between threads, in one word so that the uniformity
 * pass takes the higher of two with a compare, not a branch: the level in
 * bits 56-63, the kind (why_kind) in 48-55, the detail (a special register,
 * or an instruction index) in 0-31. The level is LV_NONE exactly when the
 * kind is WHY_NONE: the word 0. */
typedef uint64_t why;
static why why_make(unsigned kind, unsigned level, uint32_t detail)
{
    return (why)level << 56 | (why)kind << 48 | detail;
}
static unsigned why_level(why w) { return (unsigned)(w >> 56); }
static unsigned why_kind_of(why w) { return (unsigned)(w >> 48) & 0xffu; }
static uint32_t why_detail(why w) { return (uint32_t)w; }
/* The one of a and b at the higher level; a where they tie. */
static why why_max(why a, why b) { return why_level(b) > why_level(a) ? b : a; }

#define NONE UINT32_MAX

/* A graph's edges in compressed rows: node v's are to[off[v] .. off[v+1]). */
typedef struct edges {
    uint32_t *off, *to;
} edges;

/* A read that no write before it in its block settles (local_reads keeps
 * the first of each register in each block), or one that no write in a
 * dominating block settles either (dominated_reads). */
typedef struct hard_use {
    uint32_t reg, blk, ins;
    uint32_t j; /* place among the instruction's reads: the first error is the first read */
} hard_use;

typedef struct use_list {
    hard_use *v;
    size_t n, cap;
} use_list;

/* A register that instruction ins reads or writes. */
typedef struct ref {
    uint32_t reg, ins;
} ref;

/* Where one instruction's reads and writes begin in cfg.rd and cfg.wr;
 * the next instruction's begin where they end. Its reads are the guard if
 * any, the sources that are registers in order, and a wgmma's accumulators
 * where it reads them; its writes, the results that are registers, then a
 * wgmma's accumulators. */
typedef struct span {
    uint32_t rd, wr;
} span;

/* How the uniformity pass takes an instruction with results (uniform_slice
 * fills one in for each instruction the pass goes through). */
enum { TID_READ = 1, TID_COPY = 2 };

typedef struct ufact {
    uint8_t guard; /* guarded: its first read is the guard */
    uint8_t load;  /* a load from a register address, its one source used */
    uint8_t warp;  /* the shape of its first source's warp index (warp_shape) */
    uint8_t nuse;  /* the sources the pass reads: the first nuse */
    /* Its result is %tid.x: TID_READ, an unguarded read of it, or
     * TID_COPY, an unguarded mov from a register, where that register's
     * value is (find_tid_x); 0 otherwise. */
    uint8_t tid;
    /* The results' reason whatever the sources (a special register's, an
     * atomic's, a shuffle's, a vote's): why_make(why, level, the special
     * register or the instruction); why 0 where the sources decide. */
    uint8_t why, level, sreg;
} ufact;

typedef struct cfg {
    pg_kernel *k;
    block *b;
    uint32_t nb;       /* blocks; node nb is the virtual exit */
    uint32_t *blk_of;  /* instruction -> block */
    edges succ, pred;  /* over nb + 1 nodes */
    uint32_t *rpo;     /* blocks reachable from the entry, in reverse post-order */
    uint32_t nrpo;
    uint32_t *num;     /* block -> place in that order (NONE: unreachable) */
    /* Kept by the one pass that reads the records (build_cfg), so that no
     * later pass reads them again: the reads and writes of every
     * instruction in order, where each instruction's begin (at, and one
     * more to end the last one's), and the barriers and .aligned
     * instructions, in order. */
    span *at;
    ref *rd, *wr;
    uint32_t *sync, nsync;
    /* The writes of each register, last first: wr[last[r]], then
     * wr[prev[w]] after wr[w], to NONE. */
    uint32_t *last, *prev;
    /* Found by local_reads, block by block (see block): the reads no
     * write before them in their block settles, the first of each
     * register in each block. */
    use_list reads;
} cfg;

static bool is_term(const instr *in)
{
    return pg_op_flags((pg_opcode)in->op) & OPF_TERM;
}

static void describe(const cfg *g, uint32_t idx, char *buf, size_t n)
{
    char t[160];
    pg_instr_text(g->k, &g->k->ins[idx], t, sizeof t);
    snprintf(buf, n, "instruction %u (`%s`)", idx, t);
}

/* Successor and predecessor rows from the blocks' successors. */
static int build_edges(cfg *g)
{
    pg_kernel *k = g->k;
    uint32_t nn = g->nb + 1, ne = 0;
    for (uint32_t v = 0; v < g->nb; v++)
        ne += g->b[v].nsucc;
    g->succ.off = arena_alloc(&k->mem, sizeof(uint32_t) * (nn + 1));
    g->pred.off = arena_alloc(&k->mem, sizeof(uint32_t) * (nn + 1));
    g->succ.to = arena_alloc(&k->mem, sizeof(uint32_t) * (ne + 1));
    g->pred.to = arena_alloc(&k->mem, sizeof(uint32_t) * (ne + 1));
    if (!g->succ.off || !g->pred.off || !g->succ.to || !g->pred.to)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    memset(g->pred.off, 0, sizeof(uint32_t) * (nn + 1));
    uint32_t e = 0;
    for (uint32_t v = 0; v < nn; v++) {
        g->succ.off[v] = e;
        if (v < g->nb)
            for (unsigned s = 0; s < g->b[v].nsucc; s++) {
                g->succ.to[e++] = g->b[v].succ[s];
                g->pred.off[g->b[v].succ[s] + 1]++;
            }
    }
    g->succ.off[nn] = e;
    for (uint32_t v = 0; v < nn; v++)
        g->pred.off[v + 1] += g->pred.off[v];
    uint32_t *fill = arena_alloc(&k->mem, sizeof(uint32_t) * nn);
    if (!fill)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    memcpy(fill, g->pred.off, sizeof(uint32_t) * nn);
    for (uint32_t v = 0; v < g->nb; v++)
        for (unsigned s = 0; s < g->b[v].nsucc; s++)
            g->pred.to[fill[g->b[v].succ[s]]++] = v;
    return PG_OK;
}

/* Depth-first from root along e: the nodes reached in reverse post-order,
 * and each node's place in that order (num, NONE where not reached). An
 * explicit stack: a straight-line kernel is a path of 10^5 blocks. */
static int reverse_post_order(pg_kernel *k, const edges *e, uint32_t nn, uint32_t root,
                              uint32_t *order, uint32_t *count, uint32_t *num)
{
    uint32_t *stack = arena_alloc(&k->mem, sizeof(uint32_t) * nn);
    uint32_t *next = arena_alloc(&k->mem, sizeof(uint32_t) * nn);
    if (!stack || !next)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    for (uint32_t v = 0; v < nn; v++)
        num[v] = NONE;
    uint32_t sp = 0, post = 0;
    num[root] = 0; /* on the stack; renumbered below */
    next[root] = e->off[root];
    stack[sp++] = root;
    while (sp) {
        uint32_t v = stack[sp - 1];
        if (next[v] < e->off[v + 1]) {
            uint32_t t = e->to[next[v]++];
            if (num[t] == NONE) {
                num[t] = 0;
                next[t] = e->off[t];
                stack[sp++] = t;
            }
        } else {
            order[post++] = v; /* post-order for now */
            sp--;
        }
    }
    for (uint32_t i = 0; i < post / 2; i++) {
        uint32_t t = order[i];
        order[i] = order[post - 1 - i];
        order[post - 1 - i] = t;
    }
    for (uint32_t i = 0; i < post; i++)
        num[order[i]] = i;
    *count = post;
    return PG_OK;
}

/* Cooper, Harvey and Kennedy, "A Simple, Fast Dominance Algorithm": the
 * immediate dominator of each node reached from order[0] along the edges
 * whose reverse is `in` (NONE for the others; the root is its own). */
static void dominators(const edges *in, const uint32_t *order, uint32_t count,
                       const uint32_t *num, uint32_t nn, uint32_t *idom)
{
    for (uint32_t v = 0; v < nn; v++)
        idom[v] = NONE;
    if (!count)
        return;
    idom[order[0]] = order[0];
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t i = 1; i < count; i++) {
            uint32_t v = order[i], nd = NONE;
            for (uint32_t e = in->off[v]; e < in->off[v + 1]; e++) {
                uint32_t p = in->to[e];
                if (idom[p] == NONE)
                    continue;
                if (nd == NONE) {
                    nd = p;
                    continue;
                }
                uint32_t a = p, b = nd;
                while (a != b) {
                    while (num[a] > num[b])
                        a = idom[a];
                    while (num[b] > num[a])
                        b = idom[b];
                }
                nd = a;
            }
            if (idom[v] != nd) {
                idom[v] = nd;
                changed = true;
            }
        }
    }
}

static bool push_use(use_list *l, hard_use u)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        hard_use *v = pg_mem_realloc(l->v, sizeof(hard_use) * cap);
        if (!v)
            return false;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = u;
    return true;
}

static bool use_before(const hard_use *a, const hard_use *b)
{
    return a->ins < b->ins || (a->ins == b->ins && a->j < b->j);
}

/* How many accumulators a wgmma reads: all of them, unless its last source
 * (scale-d) is an immediate 0, which starts the sums afresh. */
static uint32_t acc_reads(const instr *in)
{
    if (!in->nacc || (in->src[in->nsrc - 1].kind == PG_VAL_IMM_INT &&
                      in->src[in->nsrc - 1].bits == 0))
        return 0;
    return in->nacc;
}

/* How much a special register differs between the threads of a block. */
static uint8_t sreg_level(pg_sreg s)
{
    if (s == PG_SREG_TID_X || s == PG_SREG_TID_Y || s == PG_SREG_TID_Z || s == PG_SREG_LANEID)
        return LV_LANE;
    return s == PG_SREG_WARPID ? LV_WARP : LV_NONE;
}

/* Whether `in` takes the warp index of its first source (>> 5 or more,
 * / a multiple of 32, & a mask clear in bits 0-4): where that source is a
 * %tid.x register (find_tid_x), the result is the same across each warp. */
static bool warp_shape(const instr *in)
{
    if (in->nsrc != 2 || in->src[0].kind != PG_VAL_REG || in->src[1].kind != PG_VAL_IMM_INT)
        return false;
    uint64_t c = in->src[1].bits;
    switch (in->op) {
    case OP_SHR: return c >= 5 && c < 64;
    case OP_DIV: return c && c % 32 == 0;
    case OP_AND: return (c & 31) == 0;
    default: return false;
    }
}

/* How the uniformity pass takes instruction in, which has nsrc register
 * sources (see ufact). */
static ufact take_fact(const instr *in, uint32_t nsrc)
{
    ufact u = {.guard = in->guard != 0};
    if (in->op == OP_SREG) {
        u.level = sreg_level((pg_sreg)in->mod);
        u.why = u.level ? WHY_SREG : WHY_NONE;
        u.sreg = in->mod;
        u.tid = in->mod == PG_SREG_TID_X && !in->guard ? TID_READ : 0;
    } else if (in->op == OP_LD) {
        /* a parameter is the same for every thread, and so is data at an
         * address that is */
        if (in->mod != PG_SPACE_PARAM && in->src[0].kind == PG_VAL_REG)
            u.load = u.nuse = 1;
    } else if (pg_op_flags((pg_opcode)in->op) & OPF_LANE_VARYING) {
        /* The op table says which results differ per lane; the kind only
         * picks the words of the message. */
        u.why = in->op == OP_ATOM ? WHY_ATOM : in->op == OP_VOTE ? WHY_VOTE : WHY_SHFL;
        u.level = LV_LANE;
    } else {
        u.nuse = (uint8_t)nsrc;
        u.warp = warp_shape(in);
        u.tid = in->op == OP_MOV && !in->guard && in->src[0].kind == PG_VAL_REG ? TID_COPY : 0;
    }
    return u;
}

/* Room in g->rd, g->wr and g->prev for the most one more instruction
 * adds (one with nacc accumulators): twice as much. */
static bool grow_lists(cfg *g, size_t *rcap, size_t *wcap, uint32_t nacc)
{
    *rcap = 2 * *rcap + 1 + PG_MAX_SRC + nacc;
    *wcap = 2 * *wcap + PG_MAX_DST + nacc;
    ref *r = pg_mem_realloc(g->rd, sizeof(ref) * *rcap);
    if (r)
        g->rd = r;
    ref *w = pg_mem_realloc(g->wr, sizeof(ref) * *wcap);
    if (w)
        g->wr = w;
    uint32_t *p = pg_mem_realloc(g->prev, sizeof(uint32_t) * *wcap);
    if (p)
        g->prev = p;
    return r && w && p;
}

/* The one pass over the records: the blocks (an instruction after a
 * terminator or at a label starts one, *starts), the reads and writes, the
 * links between each register's writes, and the barriers. The records are
 * read once, in order, with as few branches on what they hold as may be (a
 * branch that waits on a record just read costs most here): every operand
 * slot below nsrc and ndst is written out and the count moved only for a
 * register, and how the uniformity pass takes an instruction is left to the
 * few it needs (uniform_slice). */
static int scan_records(cfg *g, uint32_t **starts_out, uint32_t *nb_out)
{
    pg_kernel *k = g->k;
    uint32_t n = k->nins;
    uint32_t nr = k->nregs, nb = 0, nrd = 0, nwr = 0;
    g->blk_of = arena_alloc(&k->mem, sizeof(uint32_t) * (n + 1));
    g->sync = arena_alloc(&k->mem, sizeof(uint32_t) * (n + 1));
    uint32_t *starts = arena_alloc(&k->mem, sizeof(uint32_t) * (n + 1));
    g->at = arena_alloc(&k->mem, sizeof(span) * (n + 1));
    /* room for two reads and two writes an instruction, grown as needed */
    size_t rcap = 2 * (size_t)n + 64, wcap = 2 * (size_t)n + 64;
    g->rd = pg_mem_alloc(sizeof(ref) * rcap);
    g->wr = pg_mem_alloc(sizeof(ref) * wcap);
    g->prev = pg_mem_alloc(sizeof(uint32_t) * wcap);
    g->last = arena_alloc(&k->mem, sizeof(uint32_t) * nr);
    if (!g->blk_of || !g->sync || !starts || !g->at || !g->rd || !g->wr || !g->prev ||
        !g->last)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    memset(g->last, 0xff, sizeof(uint32_t) * nr); /* NONE */
    bool lead = true; /* the next instruction starts a block */
    /* the lists in locals, not read again through g after each store */
    ref *rd = g->rd, *wr = g->wr;
    span *at = g->at;
    uint32_t *prev = g->prev, *lastw = g->last, *blk_of = g->blk_of;
    for (uint32_t i = 0; i < n; i++) {
        const instr *in = &k->ins[i];
        unsigned fl = pg_op_flags((pg_opcode)in->op);
        if (lead || in->op == OP_LABEL)
            starts[nb++] = i;
        lead = fl & OPF_TERM;
        blk_of[i] = nb - 1;
        if (fl & (OPF_BARRIER | OPF_ALIGNED))
            g->sync[g->nsync++] = i;
        /* only a wgmma has accumulators: no other record's last bytes are read */
        uint32_t nacc = in->op == OP_WGMMA ? in->nacc : 0;
        if (rcap - nrd < 1 + PG_MAX_SRC + nacc || wcap - nwr < PG_MAX_DST + nacc) {
            if (!grow_lists(g, &rcap, &wcap, nacc))
                return pg_fail(k, PG_ENOMEM, "out of memory in validation");
            rd = g->rd;
            wr = g->wr;
            prev = g->prev;
        }
        ref *r = rd + nrd;
        uint32_t m = in->guard != 0;
        at[i] = (span){nrd, nwr};
        r[0] = (ref){in->guard, i};
        for (unsigned s = 0; s < in->nsrc; s++) {
            r[m] = (ref){in->src[s].id, i};
            m += in->src[s].kind == PG_VAL_REG;
        }
        for (uint32_t j = 0, na = nacc ? acc_reads(in) : 0; j < na; j++)
            r[m++] = (ref){in->acc[j].id, i};
        nrd += m;
        ref *w = wr + nwr;
        m = 0;
        for (unsigned d = 0; d < in->ndst; d++) {
            /* register 0 (no register, never read) takes what is no register */
            uint32_t x = in->dst[d].kind == PG_VAL_REG ? in->dst[d].id : 0;
            w[m] = (ref){x, i};
            prev[nwr + m] = lastw[x];
            lastw[x] = nwr + m;
            m += x != 0;
        }
        for (uint32_t d = 0; d < nacc; d++)
            if (in->acc[d].kind == PG_VAL_REG) {
                uint32_t x = in->acc[d].id;
                w[m] = (ref){x, i};
                prev[nwr + m] = lastw[x];
                lastw[x] = nwr + m++;
            }
        nwr += m;
    }
    at[n] = (span){nrd, nwr};
    if (n == 0)
        starts[nb++] = 0;
    *starts_out = starts;
    *nb_out = nb;
    return PG_OK;
}

/* The blocks from their starts, and each one's successors: the branch
 * target, the exit, the next block. */
static int link_blocks(cfg *g, const uint32_t *starts, uint32_t nb)
{
    pg_kernel *k = g->k;
    uint32_t n = k->nins;
    g->b = arena_alloc(&k->mem, sizeof(block) * (nb + 1));
    if (!g->b)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    memset(g->b, 0, sizeof(block) * (nb + 1));
    g->nb = nb;
    for (uint32_t bi = 0; bi < nb; bi++) {
        g->b[bi].start = starts[bi];
        g->b[bi].end = bi + 1 < nb ? starts[bi + 1] : n;
    }
    for (uint32_t bi = 0; bi < nb; bi++) {
        block *b = &g->b[bi];
        uint32_t next = bi + 1; /* == nb: the exit */
        const instr *last = b->end > b->start ? &k->ins[b->end - 1] : NULL;
        if (last && is_term(last)) {
            if (last->op == OP_BRA) {
                int64_t bound = k->labels[last->label].bound_at;
                if (bound < 0) {
                    const label_info *l = &k->labels[last->label];
                    return pg_fail(k, PG_ELABEL, "label %u%s%s is a branch target (instruction %u) "
                                   "but is never bound", last->label, l->hint ? " " : "",
                                   l->hint ? l->hint : "", b->end - 1);
                }
                b->succ[b->nsucc++] = g->blk_of[bound];
            } else {
                b->succ[b->nsucc++] = nb;
            }
            if (last->guard && (b->nsucc == 0 || b->succ[0] != next))
                b->succ[b->nsucc++] = next;
            b->guard = last->guard;
        } else {
            b->succ[b->nsucc++] = next;
        }
    }
    return PG_OK;
}

/* Reachability: the blocks of a depth-first walk from the entry, in
 * reverse post-order. */
static int mark_reachable(cfg *g)
{
    pg_kernel *k = g->k;
    uint32_t nb = g->nb;
    int err;
    g->num = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    g->rpo = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    if (!g->num || !g->rpo)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    err = reverse_post_order(k, &g->succ, nb + 1, 0, g->rpo, &g->nrpo, g->num);
    if (err)
        return err;
    for (uint32_t i = 0; i < g->nrpo; i++)
        if (g->rpo[i] < nb)
            g->b[g->rpo[i]].reachable = true;
    /* the exit is a node of the walk but no block */
    uint32_t j = 0;
    for (uint32_t i = 0; i < g->nrpo; i++)
        if (g->rpo[i] < nb)
            g->rpo[j++] = g->rpo[i];
    g->nrpo = j;
    return PG_OK;
}

/* The blocks, the reads and writes, the barriers; the edges; the blocks
 * reachable from the entry. */
static int build_cfg(cfg *g)
{
    uint32_t *starts = NULL, nb = 0;
    int err = scan_records(g, &starts, &nb);
    if (!err)
        err = link_blocks(g, starts, nb);
    if (!err)
        err = build_edges(g);
    if (!err)
        err = mark_reachable(g);
    return err;
}

/* The reads of the reachable blocks that no write before them in their
 * own block settles, the first of each register in each block (any later
 * one has the same answer from dominated_reads and settle_reads, and comes
 * after it). A block's writes go first, noting each register's first write
 * there (first[r]: its instruction + 1; at most the block's start: none
 * there); then its reads, each settled where that instruction comes
 * before it. seen[r]: the last block (numbered from 1) that kept a read of
 * r. Flat loops over the block's reads and writes, with branches that go
 * the same way almost always. */
static int local_reads(cfg *g)
{
    pg_kernel *k = g->k;
    uint32_t nr = k->nregs;
    uint32_t *first = arena_alloc(&k->mem, sizeof(uint32_t) * nr);
    uint32_t *seen = arena_alloc(&k->mem, sizeof(uint32_t) * nr);
    if (!first || !seen)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    memset(first, 0, sizeof(uint32_t) * nr);
    memset(seen, 0, sizeof(uint32_t) * nr);
    for (uint32_t bi = 0; bi <= g->nb; bi++) {
        block *b = &g->b[bi];
        b->reads = (uint32_t)g->reads.n;
        if (bi == g->nb || !b->reachable)
            continue;
        uint32_t start = b->start;
        for (uint32_t w = g->at[start].wr; w < g->at[b->end].wr; w++)
            if (first[g->wr[w].reg] <= start)
                first[g->wr[w].reg] = g->wr[w].ins + 1;
        for (uint32_t r = g->at[start].rd; r < g->at[b->end].rd; r++) {
            uint32_t x = g->rd[r].reg, i = g->rd[r].ins;
            if ((first[x] > start && first[x] <= i) || seen[x] == bi + 1)
                continue;
            seen[x] = bi + 1;
            if (!push_use(&g->reads, (hard_use){x, bi, i, r - g->at[i].rd}))
                return pg_fail(k, PG_ENOMEM, "out of memory in validation");
        }
    }
    return PG_OK;
}

/* Walk the dominator tree keeping, for each register local_reads kept a
 * read of, how many writes of it the blocks on the path from the root hold.
 * A read local_reads kept whose register none of the blocks above its own
 * writes goes to `hard`. The writes are those registers' only, found
 * through build_cfg's links: block v's are wrote[woff[v] .. woff[v+1]). */
static int dominated_reads(cfg *g, use_list *hard)
{
    pg_kernel *k = g->k;
    uint32_t nb = g->nb;
    if (!g->reads.n)
        return PG_OK;
    uint32_t *idom = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    uint32_t *coff = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 2));
    uint32_t *child = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    uint32_t *stack = arena_alloc(&k->mem, sizeof(uint32_t) * 2 * (nb + 1));
    uint32_t *count = arena_alloc(&k->mem, sizeof(uint32_t) * k->nregs);
    uint32_t *woff = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 2));
    if (!idom || !coff || !child || !stack || !count || !woff)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    /* each register's writes once (count[r] marks it), a block's in a row
     * once, as (block, register) pairs; then by block */
    uint32_t nw = g->at[k->nins].wr, np = 0;
    uint32_t *pblk = arena_alloc(&k->mem, sizeof(uint32_t) * (nw + 1));
    uint32_t *preg = arena_alloc(&k->mem, sizeof(uint32_t) * (nw + 1));
    uint32_t *wrote = arena_alloc(&k->mem, sizeof(uint32_t) * (nw + 1));
    if (!pblk || !preg || !wrote)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    memset(count, 0, sizeof(uint32_t) * k->nregs);
    memset(woff, 0, sizeof(uint32_t) * (nb + 2));
    for (size_t u = 0; u < g->reads.n; u++) {
        uint32_t x = g->reads.v[u].reg, prev_b = NONE;
        if (count[x])
            continue;
        count[x] = 1;
        for (uint32_t w = g->last[x]; w != NONE; w = g->prev[w]) {
            uint32_t b = g->blk_of[g->wr[w].ins];
            if (b != prev_b && g->b[b].reachable) {
                pblk[np] = b;
                preg[np++] = x;
                woff[b + 1]++;
            }
            prev_b = b;
        }
    }
    for (uint32_t v = 0; v <= nb; v++)
        woff[v + 1] += woff[v];
    for (uint32_t p = 0; p < np; p++)
        wrote[woff[pblk[p]]++] = preg[p];
    /* the placing moved each block's start to the next one's */
    for (uint32_t v = nb + 1; v > 0; v--)
        woff[v] = woff[v - 1];
    woff[0] = 0;
    dominators(&g->pred, g->rpo, g->nrpo, g->num, nb + 1, idom);
    memset(coff, 0, sizeof(uint32_t) * (nb + 2));
    for (size_t u = 0; u < g->reads.n; u++)
        count[g->reads.v[u].reg] = 0;
    for (uint32_t i = 1; i < g->nrpo; i++)
        coff[idom[g->rpo[i]] + 2]++;
    for (uint32_t v = 0; v <= nb; v++)
        coff[v + 1] += coff[v];
    for (uint32_t i = 1; i < g->nrpo; i++)
        child[coff[idom[g->rpo[i]] + 1]++] = g->rpo[i];
    /* now block v's children are child[coff[v] .. coff[v+1]) */
    uint32_t sp = 0;
    stack[sp++] = g->rpo[0] << 1;
    while (sp) {
        uint32_t x = stack[--sp], v = x >> 1;
        if (x & 1) {
            for (uint32_t w = woff[v]; w < woff[v + 1]; w++)
                count[wrote[w]]--;
            continue;
        }
        for (uint32_t u = g->b[v].reads; u < g->b[v + 1].reads; u++)
            if (!count[g->reads.v[u].reg] && !push_use(hard, g->reads.v[u]))
                return pg_fail(k, PG_ENOMEM, "out of memory in validation");
        for (uint32_t w = woff[v]; w < woff[v + 1]; w++)
            count[wrote[w]]++;
        stack[sp++] = x | 1;
        for (uint32_t c = coff[v]; c < coff[v + 1]; c++)
            stack[sp++] = child[c] << 1;
    }
    return PG_OK;
}

/* Blocks a backward search from a read may visit before it leaves the read
 * to the bitset data-flow: most undominated reads (a value written on both
 * arms of an if, or carried round a loop) find a write within a few. */
#define SEARCH_BUDGET 64u

/* "May be defined" data-flow over the registers of the `n` reads in `v`
 * only, a chunk of registers at a time so that memory stays bounded. Only
 * the blocks reachable from the entry take part: a write no path from the
 * entry reaches defines nothing (defs holds none), and nothing flows out of
 * such code into the rest. Records the first read no write reaches in
 * *bad. */
static int dataflow_reads(cfg *g, const edges *defs, hard_use *v, size_t n, hard_use *bad)
{
    pg_kernel *k = g->k;
    uint32_t nb = g->nb;
    int err = PG_OK;
    uint32_t *dense = arena_alloc(&k->mem, sizeof(uint32_t) * k->nregs);
    uint32_t *regs = arena_alloc(&k->mem, sizeof(uint32_t) * (n + 1));
    uint32_t *queue = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    bool *queued = arena_alloc(&k->mem, nb + 1);
    if (!dense || !regs || !queue || !queued)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    for (uint32_t r = 0; r < k->nregs; r++)
        dense[r] = NONE;
    uint32_t nr = 0;
    for (size_t i = 0; i < n; i++)
        if (dense[v[i].reg] == NONE) {
            dense[v[i].reg] = nr;
            regs[nr++] = v[i].reg;
        }
    /* at most 64 MiB of sets: two per block, wc words each */
    size_t wc = nwords(nr), cap = ((size_t)8 << 20) / (2 * (size_t)nb);
    if (wc > cap)
        wc = cap ? cap : 1;
    word *in = pg_mem_alloc(sizeof(word) * wc * nb);
    word *def = pg_mem_alloc(sizeof(word) * wc * nb);
    word *out = pg_mem_alloc(sizeof(word) * wc);
    if (!in || !def || !out) {
        err = pg_fail(k, PG_ENOMEM, "out of memory in validation");
        goto done;
    }
    for (uint32_t c0 = 0; c0 < nr; c0 += (uint32_t)(wc * WBITS)) {
        uint32_t c1 = nr - c0 < wc * WBITS ? nr : c0 + (uint32_t)(wc * WBITS);
        memset(in, 0, sizeof(word) * wc * nb);
        memset(def, 0, sizeof(word) * wc * nb);
        for (uint32_t r = c0; r < c1; r++)
            for (uint32_t e = defs->off[regs[r]]; e < defs->off[regs[r] + 1]; e++)
                bit_set(def + defs->to[e] * wc, r - c0);
        /* a queue seeded in reverse post-order; a block's successors are
         * reachable if it is */
        uint32_t head = 0, len = 0;
        memset(queued, 0, nb);
        for (uint32_t i = 0; i < g->nrpo; i++) {
            queue[len++] = g->rpo[i];
            queued[g->rpo[i]] = true;
        }
        while (len) {
            uint32_t b = queue[head];
            head = head + 1 == nb ? 0 : head + 1;
            len--;
            queued[b] = false;
            for (size_t j = 0; j < wc; j++)
                out[j] = in[b * wc + j] | def[b * wc + j];
            for (uint32_t e = g->succ.off[b]; e < g->succ.off[b + 1]; e++) {
                uint32_t t = g->succ.to[e];
                if (t >= nb)
                    continue;
                bool grew = false;
                for (size_t j = 0; j < wc; j++) {
                    word nw = in[t * wc + j] | out[j];
                    grew |= nw != in[t * wc + j];
                    in[t * wc + j] = nw;
                }
                if (grew && !queued[t]) {
                    queued[t] = true;
                    uint32_t at = head + len;
                    queue[at >= nb ? at - nb : at] = t;
                    len++;
                }
            }
        }
        for (size_t i = 0; i < n; i++) {
            uint32_t r = dense[v[i].reg];
            if (r >= c0 && r < c1 && !bit_get(in + v[i].blk * wc, r - c0) &&
                (bad->ins == NONE || use_before(&v[i], bad)))
                *bad = v[i];
        }
    }
done:
    pg_mem_free(in);
    pg_mem_free(def);
    pg_mem_free(out);
    return err;
}

static int by_block(const void *a, const void *b)
{
    const hard_use *x = a, *y = b;
    return (x->blk > y->blk) - (x->blk < y->blk);
}

/* The same question block by block: mark every reachable block with a
 * path to the reading block, then ask whether any writer of the register
 * (all reachable) is marked. One walk of the graph per reading block, so
 * this is the cheaper way when the reads sit in few blocks (the usual case:
 * values summed at the end). */
static int ancestor_reads(cfg *g, const edges *defs, hard_use *v, size_t n, hard_use *bad)
{
    pg_kernel *k = g->k;
    uint32_t nb = g->nb;
    uint32_t *mark = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    uint32_t *stack = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    uint32_t *asked = arena_alloc(&k->mem, sizeof(uint32_t) * k->nregs);
    bool *answer = arena_alloc(&k->mem, k->nregs);
    if (!mark || !stack || !asked || !answer)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    for (uint32_t b = 0; b <= nb; b++)
        mark[b] = NONE;
    for (uint32_t r = 0; r < k->nregs; r++)
        asked[r] = NONE;
    qsort(v, n, sizeof *v, by_block);
    for (size_t i = 0; i < n;) {
        uint32_t u = v[i].blk, sp = 0;
        stack[sp++] = u;
        while (sp) {
            uint32_t x = stack[--sp];
            for (uint32_t e = g->pred.off[x]; e < g->pred.off[x + 1]; e++) {
                uint32_t p = g->pred.to[e];
                if (mark[p] != u && g->b[p].reachable) {
                    mark[p] = u;
                    stack[sp++] = p;
                }
            }
        }
        for (; i < n && v[i].blk == u; i++) {
            uint32_t r = v[i].reg;
            if (asked[r] != u) {
                asked[r] = u;
                answer[r] = false;
                for (uint32_t e = defs->off[r]; e < defs->off[r + 1] && !answer[r]; e++)
                    answer[r] = mark[defs->to[e]] == u;
            }
            if (!answer[r] && (bad->ins == NONE || use_before(&v[i], bad)))
                *bad = v[i];
        }
    }
    return PG_OK;
}

/* Settle the undominated reads: a short backward search for a block that
 * writes the register, else the data-flow. Writes count only in blocks
 * reachable from the entry, like everywhere in check_defined: a block no
 * path reaches can still fall or jump into one that is reached (`bra L;
 * mov r, 1; L: st r`), but none of its writes happens. defs holds only
 * those, so the search may step into such a block (rare, and cheaper than
 * asking at every step) but finds nothing there. */
static int settle_reads(cfg *g, use_list *hard, hard_use *bad)
{
    pg_kernel *k = g->k;
    uint32_t nb = g->nb, nr = k->nregs;
    size_t n = hard->n;
    uint32_t *last = arena_alloc(&k->mem, sizeof(uint32_t) * nr);
    edges defs = {arena_alloc(&k->mem, sizeof(uint32_t) * (nr + 1)), NULL};
    uint32_t *uoff = arena_alloc(&k->mem, sizeof(uint32_t) * (nr + 1));
    hard_use *by_reg = arena_alloc(&k->mem, sizeof(hard_use) * n);
    uint32_t *mark = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    uint32_t *seen = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    uint32_t *work = arena_alloc(&k->mem, sizeof(uint32_t) * (SEARCH_BUDGET + 2));
    if (!last || !defs.off || !uoff || !by_reg || !mark || !seen || !work)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    /* the reads, grouped by register (uoff: where each register's start) */
    memset(uoff, 0, sizeof(uint32_t) * (nr + 1));
    for (size_t i = 0; i < n; i++)
        uoff[hard->v[i].reg + 1]++;
    for (uint32_t r = 0; r < nr; r++)
        uoff[r + 1] += uoff[r];
    for (size_t i = 0; i < n; i++)
        by_reg[uoff[hard->v[i].reg]++] = hard->v[i];
    for (uint32_t r = nr; r > 0; r--)
        uoff[r] = uoff[r - 1];
    uoff[0] = 0;
    /* the reachable blocks that write each of those registers, once each */
    memset(defs.off, 0, sizeof(uint32_t) * (nr + 1));
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t r = 0; r < nr; r++)
            last[r] = NONE;
        for (uint32_t b = 0; b < nb; b++) {
            if (!g->b[b].reachable)
                continue;
            for (uint32_t w = g->at[g->b[b].start].wr; w < g->at[g->b[b].end].wr; w++) {
                uint32_t x = g->wr[w].reg;
                if (uoff[x] == uoff[x + 1] || last[x] == b)
                    continue;
                last[x] = b;
                if (pass)
                    defs.to[defs.off[x]++] = b;
                else
                    defs.off[x + 1]++;
            }
        }
        if (!pass) {
            for (uint32_t r = 0; r < nr; r++)
                defs.off[r + 1] += defs.off[r];
            defs.to = arena_alloc(&k->mem, sizeof(uint32_t) * (defs.off[nr] + 1));
            if (!defs.to)
                return pg_fail(k, PG_ENOMEM, "out of memory in validation");
        }
    }
    /* the fill advanced each start to the next register's: shift back */
    for (uint32_t r = nr; r > 0; r--)
        defs.off[r] = defs.off[r - 1];
    defs.off[0] = 0;

    for (uint32_t b = 0; b <= nb; b++)
        mark[b] = seen[b] = NONE;
    size_t deferred = 0, stamp = 0;
    for (uint32_t r = 0; r < nr; r++) {
        if (uoff[r] == uoff[r + 1])
            continue;
        for (uint32_t e = defs.off[r]; e < defs.off[r + 1]; e++)
            mark[defs.to[e]] = r;
        for (uint32_t i = uoff[r]; i < uoff[r + 1]; i++) {
            hard_use *u = &by_reg[i];
            uint32_t sp = 0, visited = 0;
            bool found = false, gave_up = false;
            stamp++;
            work[sp++] = u->blk;
            while (sp && !found && !gave_up) {
                uint32_t v = work[--sp];
                for (uint32_t e = g->pred.off[v]; e < g->pred.off[v + 1]; e++) {
                    uint32_t p = g->pred.to[e];
                    if (seen[p] == (uint32_t)stamp)
                        continue;
                    seen[p] = (uint32_t)stamp;
                    if (mark[p] == r) {
                        found = true;
                        break;
                    }
                    if (++visited > SEARCH_BUDGET) {
                        gave_up = true;
                        break;
                    }
                    work[sp++] = p;
                }
            }
            if (gave_up)
                by_reg[deferred++] = *u; /* i >= deferred: nothing unread is lost */
            else if (!found && (bad->ins == NONE || use_before(u, bad)))
                *bad = *u;
        }
    }
    if (!deferred)
        return PG_OK;
    /* a walk per reading block, or a bitset pass per 64 registers per block:
     * whichever is fewer */
    size_t blocks = 0, regs = 0;
    for (uint32_t b = 0; b <= nb; b++)
        seen[b] = NONE;
    for (uint32_t r = 0; r < nr; r++)
        last[r] = NONE;
    for (size_t i = 0; i < deferred; i++) {
        blocks += seen[by_reg[i].blk] == NONE;
        seen[by_reg[i].blk] = 0;
        regs += last[by_reg[i].reg] == NONE;
        last[by_reg[i].reg] = 0;
    }
    if (blocks * WBITS <= regs)
        return ancestor_reads(g, &defs, by_reg, deferred, bad);
    return dataflow_reads(g, &defs, by_reg, deferred, bad);
}

static int check_defined(cfg *g)
{
    pg_kernel *k = g->k;
    use_list hard = {NULL, 0, 0};
    hard_use bad = {0, 0, NONE, 0};
    int err = local_reads(g);
    if (!err)
        err = dominated_reads(g, &hard);
    if (!err && hard.n)
        err = settle_reads(g, &hard, &bad);
    pg_mem_free(hard.v);
    if (err || bad.ins == NONE)
        return err;
    char r[32], d[256];
    pg_val v = {PG_VAL_REG, bad.reg, 0};
    pg_val_format(k, v, PG_U32, r, sizeof r);
    describe(g, bad.ins, d, sizeof d);
    return pg_fail(k, PG_EUNDEF, "register %s is read before any write reaches it, at %s", r, d);
}

/* ---------------------------------------------------------------- uniformity */

static void why_text(const cfg *g, why w, char *buf, size_t n)
{
    switch (why_kind_of(w)) {
    case WHY_SREG:
        snprintf(buf, n, "%s", pg_sreg_name((pg_sreg)why_detail(w)));
        return;
    case WHY_LOAD:
        snprintf(buf, n, "data loaded from a per-thread address at instruction %u", why_detail(w));
        return;
    case WHY_ATOM:
        snprintf(buf, n, "the result of an atomic at instruction %u", why_detail(w));
        return;
    case WHY_SHFL:
        snprintf(buf, n, "a per-lane warp result (shfl, ldmatrix) at instruction %u",
                 why_detail(w));
        return;
    case WHY_VOTE:
        snprintf(buf, n, "a warp vote at instruction %u", why_detail(w));
        return;
    case WHY_CONTROL:
        snprintf(buf, n, "a value assigned under the divergent branch at instruction %u",
                 why_detail(w));
        return;
    default:
        snprintf(buf, n, "per-thread data");
    }
    (void)g;
}

/* The immediate post-dominator of each block: dominators of the reversed
 * graph, rooted at the exit (node nb). A block that cannot reach the exit
 * has none (nb + 1). */
static int post_dominators(cfg *g, uint32_t *ipdom)
{
    pg_kernel *k = g->k;
    uint32_t nn = g->nb + 1, count = 0;
    uint32_t *order = arena_alloc(&k->mem, sizeof(uint32_t) * nn);
    uint32_t *num = arena_alloc(&k->mem, sizeof(uint32_t) * nn);
    if (!order || !num)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    int err = reverse_post_order(k, &g->pred, nn, g->nb, order, &count, num);
    if (err)
        return err;
    dominators(&g->succ, order, count, num, nn, ipdom);
    for (uint32_t v = 0; v < nn; v++)
        if (ipdom[v] == NONE)
            ipdom[v] = nn;
    return PG_OK;
}

/* Values that hold %tid.x (an unguarded read of it, an unguarded mov from
 * such a value, a merge of only such values): their warp index (see
 * warp_shape) is the same across a warp. notx[v] comes set for every value
 * that is none of those kinds; the edges from[e] -> to[e] (a mov's source
 * to the mov, a merge's operand to the merge) pass that on, from each
 * marked value to what it flows into: one worklist pass over the edges,
 * not a fixed point over the kernel. After it notx[v] is clear exactly for
 * the %tid.x values. */
static int find_tid_x(pg_kernel *k, uint32_t nv, uint8_t *notx, const uint32_t *from,
                      const uint32_t *to, uint32_t nc)
{
    /* the edges out of each value as lists: head[v], then next[e] */
    uint32_t *head = arena_alloc(&k->mem, sizeof(uint32_t) * nv);
    uint32_t *next = arena_alloc(&k->mem, sizeof(uint32_t) * (nc + 1));
    uint32_t *stack = arena_alloc(&k->mem, sizeof(uint32_t) * (nc + 1));
    if (!head || !next || !stack)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    memset(head, 0xff, sizeof(uint32_t) * nv); /* NONE */
    for (uint32_t e = 0; e < nc; e++) {
        next[e] = head[from[e]];
        head[from[e]] = e;
    }
    /* from each marked value once (at the edge that heads its list); the
     * stack holds only values newly marked, each an edge's end */
    for (uint32_t e = 0; e < nc; e++) {
        if (head[from[e]] != e || !notx[from[e]])
            continue;
        uint32_t sp = 0;
        stack[sp++] = from[e];
        while (sp) {
            uint32_t v = stack[--sp];
            for (uint32_t x = head[v]; x != NONE; x = next[x])
                if (!notx[to[x]]) {
                    notx[to[x]] = 1;
                    stack[sp++] = to[x];
                }
        }
    }
    return PG_OK;
}

/* A branch divergent at level lv ends block bi: mark every block reachable
 * from it before its immediate post-dominator `stop` divergent at lv (or
 * leave it at a higher level). seen[v] == walk marks this walk's blocks, so
 * no walk clears the array: each costs only its region. A branch walks at
 * most twice, warp level and then lane level, each with its own number.
 *
 * Nested regions are not walked twice at one level. If x is in branch c's
 * region, then ipdom(c) post-dominates ipdom(x), so x's region lies inside
 * c's: a branch whose block is already divergent at lv or above has nothing
 * left to mark, and a walk that meets a branch walked before at lv or
 * above (walked[v], the level) can go straight on at that branch's
 * post-dominator (the stop cannot lie inside the inner region, as each
 * would then post-dominate the other). Deep nesting stays linear in either
 * order.
 *
 * Returns whether it changed a block at or before bi, one the calling
 * pass has already walked: that pass must then run again. */
static bool mark_region(cfg *g, uint32_t bi, uint8_t lv, uint32_t walk, const uint32_t *ipdom,
                        const uint8_t *walked, uint32_t *stack, uint32_t *seen)
{
    uint32_t nb = g->nb, sp = 0, cause = g->b[bi].end - 1, stop = ipdom[bi];
    bool changed = false;
    if (g->b[bi].divergent && g->b[bi].level >= lv)
        return false;
    for (uint32_t e = g->succ.off[bi]; e < g->succ.off[bi + 1]; e++) {
        uint32_t t = g->succ.to[e];
        if (t < nb && t != stop && seen[t] != walk) {
            seen[t] = walk;
            stack[sp++] = t;
        }
    }
    while (sp) {
        uint32_t v = stack[--sp];
        if (!g->b[v].divergent || g->b[v].level < lv) {
            g->b[v].divergent = true;
            g->b[v].level = lv;
            g->b[v].cause = cause;
            changed |= v <= bi;
        }
        if (walked[v] >= lv && v != bi) {
            uint32_t t = ipdom[v];
            if (t < nb && t != stop && seen[t] != walk) {
                seen[t] = walk;
                stack[sp++] = t;
            }
            continue;
        }
        for (uint32_t e = g->succ.off[v]; e < g->succ.off[v + 1]; e++) {
            uint32_t t = g->succ.to[e];
            if (t < nb && t != stop && seen[t] != walk) {
                seen[t] = walk;
                stack[sp++] = t;
            }
        }
    }
    return changed;
}

static int by_index(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* A merge (a phi): where writes of one register in different blocks meet,
 * its value on entry to block blk is one of ops[op .. op + nop), one for
 * each of blk's reachable predecessors. */
typedef struct merge {
    uint32_t blk, op, nop;
} merge;

/* How reaching_values finds the value of a register at a read: the pass
 * reads it but nothing reachable writes it (so no value: check_defined
 * made sure no such read is reached), one write does, the writes lie in one
 * block, or in more than one. */
enum { RK_NONE = 1, RK_ONE, RK_BLOCK, RK_MULTI };

/* What the uniformity pass goes through (uniform_slice, then
 * register_values or reaching_values). It keeps a reason per value. With
 * reaching_values a value is a write, not a register: a register that held
 * %tid.x and then a constant holds a uniform value after, and a read sees
 * only the values that reach it. Those values: 0 is none (no guard, or no
 * write on any path), then the writes of the slice's instructions in order
 * (1 .. nw), then the merges (nw + 1 .., merge m[j] is value nw + 1 + j).
 * With register_values a value is a register (nw and nm 0). */
typedef struct uslice {
    uint32_t *list, count; /* the slice's instructions, in order */
    ufact *uf;             /* by instruction, for those in the slice */
    /* The registers the pass reads: want[r], and a list of them (wl,
     * nwl). reaching_values turns want[r] into how its reads find their
     * values (RK_*). */
    uint8_t *want;
    uint32_t *wl, nwl;
    bool warp;    /* some instruction takes a warp index (ufact.warp) */
    size_t nuse;  /* the length of use */
    uint32_t nsw; /* the writes of the slice's instructions */
    uint32_t nw, nv; /* the writes that are values (nsw or 0); values */
    uint32_t *val;   /* the value of each slice write, in order */
    /* The value each read the pass makes holds: for each slice
     * instruction in order, its guard and the sources it reads, then, if
     * it is guarded, the values its writes replace (a guarded write may
     * leave them in place); the guard of the branch or exit that ends each
     * block (by block); the guards of the barriers and .aligned
     * instructions (by place in cfg.sync). */
    uint32_t *use, *bguard, *sguard;
    merge *m;
    uint32_t nm, *ops;
    uint32_t *moff, *mby; /* block b's merges: m[mby[moff[b] .. moff[b+1])] */
    uint8_t *notx;        /* by value, where warp: not %tid.x (find_tid_x) */
} uslice;

/* The instructions the uniformity pass needs, in order (list, count), and
 * how it takes each (uf, by instruction): those in reachable blocks that
 * write a register which can decide whether a barrier or .aligned
 * instruction is reached by all threads. Such a register is the guard of a
 * branch or early exit, or of a barrier or .aligned instruction, or, again,
 * a source the pass reads or the guard of an instruction that writes one:
 * nothing else changes their levels, nor (the pass going through these
 * instructions in the same order as through all) the reasons it keeps for
 * them, nor the blocks a divergent branch marks. In a big kernel that is a
 * few instructions in a hundred: the registers the rest write (addresses,
 * data, sums) decide nothing. A register's writes come from build_cfg's
 * links, each register once (want[r], in the list wl), each instruction
 * once (in[i]). */
static int uniform_slice(cfg *g, uslice *u)
{
    pg_kernel *k = g->k;
    uint32_t n = k->nins, nr = k->nregs, c = 0, nwl = 0;
    uint32_t *wl = arena_alloc(&k->mem, sizeof(uint32_t) * (nr + 1));
    uint8_t *want = arena_alloc(&k->mem, nr);
    uint8_t *in = arena_alloc(&k->mem, n + 1);
    uint32_t *list = arena_alloc(&k->mem, sizeof(uint32_t) * (n + 1));
    if (!wl || !want || !in || !list)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    memset(want, 0, nr);
    memset(in, 0, n + 1);
#define WANT(r)                                                                                \
    do {                                                                                       \
        uint32_t r_ = (r);                                                                     \
        if (r_ && !want[r_]) {                                                                 \
            want[r_] = 1;                                                                      \
            wl[nwl++] = r_;                                                                    \
        }                                                                                      \
    } while (0)
    for (uint32_t bi = 0; bi < g->nb; bi++)
        if (g->b[bi].reachable)
            WANT(g->b[bi].guard);
    for (uint32_t j = 0; j < g->nsync; j++)
        if (g->b[g->blk_of[g->sync[j]]].reachable)
            WANT(k->ins[g->sync[j]].guard);
    for (uint32_t q = 0; q < nwl; q++) {
        for (uint32_t w = g->last[wl[q]]; w != NONE; w = g->prev[w]) {
            uint32_t i = g->wr[w].ins;
            if (in[i] || !g->b[g->blk_of[i]].reachable)
                continue;
            in[i] = 1;
            list[c++] = i;
            const instr *rec = &k->ins[i];
            ufact *f = &u->uf[i];
            /* only a wgmma reads more than its guard and sources, and it
             * uses none of them */
            *f = take_fact(rec, g->at[i + 1].rd - g->at[i].rd - (rec->guard != 0));
            uint32_t nwr = g->at[i + 1].wr - g->at[i].wr;
            u->warp |= f->warp;
            u->nuse += f->guard + f->nuse + (f->guard ? nwr : 0);
            u->nsw += nwr;
            const ref *rr = &g->rd[g->at[i].rd];
            for (unsigned s = 0, m = f->guard + f->nuse; s < m; s++)
                WANT(rr[s].reg);
        }
    }
#undef WANT
    /* in order: a few sorted, many read off in[] */
    if (c < n / 32) {
        qsort(list, c, sizeof(uint32_t), by_index);
    } else {
        c = 0;
        for (uint32_t i = 0; i < n; i++)
            if (in[i])
                list[c++] = i;
    }
    u->list = list;
    u->count = c;
    u->want = want;
    u->wl = wl;
    u->nwl = nwl;
    return PG_OK;
}

/* The values of register_values (see uslice): a register is its own
 * value, at every read and write; a guarded write's "value it may leave in
 * place" is the register again. Where some instruction takes a warp index,
 * which registers hold %tid.x at every write in the slice (all of their
 * reachable writes). */
static int register_values(cfg *g, uslice *u)
{
    pg_kernel *k = g->k;
    uint32_t nr = k->nregs, nb = g->nb, *list = u->list, count = u->count, nc = 0;
    u->val = arena_alloc(&k->mem, sizeof(uint32_t) * (u->nsw + 1));
    u->use = arena_alloc(&k->mem, sizeof(uint32_t) * (u->nuse + 1));
    u->bguard = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    u->sguard = arena_alloc(&k->mem, sizeof(uint32_t) * (g->nsync + 1));
    u->moff = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 2));
    uint8_t *notx = u->warp ? arena_alloc(&k->mem, nr) : NULL;
    uint32_t *from = u->warp ? arena_alloc(&k->mem, sizeof(uint32_t) * (count + 1)) : NULL;
    uint32_t *to = u->warp ? arena_alloc(&k->mem, sizeof(uint32_t) * (count + 1)) : NULL;
    if (!u->val || !u->use || !u->bguard || !u->sguard || !u->moff ||
        (u->warp && (!notx || !from || !to)))
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    memset(u->moff, 0, sizeof(uint32_t) * (nb + 2));
    if (notx)
        memset(notx, 0, nr);
    u->nw = u->nm = 0;
    u->nv = nr;
    uint32_t *use = u->use, *val = u->val;
    for (uint32_t li = 0; li < count; li++) {
        uint32_t i = list[li], w0 = g->at[i].wr, w1 = g->at[i + 1].wr;
        const ufact *f = &u->uf[i];
        const ref *r = &g->rd[g->at[i].rd];
        if (notx && f->tid == TID_COPY && w1 > w0) {
            from[nc] = r[0].reg; /* unguarded: its one source */
            to[nc++] = g->wr[w0].reg;
        }
        for (unsigned x = 0, m = f->guard + f->nuse; x < m; x++)
            *use++ = r[x].reg;
        for (uint32_t d = w0; d < w1; d++) {
            uint32_t x = g->wr[d].reg;
            if (f->guard)
                *use++ = x;
            *val++ = x;
            if (notx)
                notx[x] |= !f->tid;
        }
    }
    for (uint32_t bi = 0; bi < nb; bi++)
        u->bguard[bi] = g->b[bi].guard;
    for (uint32_t j = 0; j < g->nsync; j++)
        u->sguard[j] = k->ins[g->sync[j]].guard;
    u->notx = notx;
    return notx ? find_tid_x(k, nr, notx, from, to, nc) : PG_OK;
}

/* A read that reaching_values marks PENDING | ask index until it knows it:
 * register reg on entry to block blk, for a register written in more than
 * one block. */
#define PENDING 0x80000000u

typedef struct ask {
    uint32_t reg, blk;
} ask;

/* Twice the room (at least 64) for what p holds; NULL where there is no
 * memory (p is then still valid). */
static void *grow_array(void *p, size_t *cap, size_t size)
{
    size_t c = *cap ? 2 * *cap : 64;
    void *q = pg_mem_realloc(p, size * c);
    if (q)
        *cap = c;
    return q;
}

/* The value of one register (stamp) on entry to blocks, after Braun et al.,
 * "Simple and Efficient Construction of Static Single Assignment Form": a
 * block with one reachable predecessor takes what that one ends with (its
 * last write of the register, lw[p] where lwst[p] == stamp, or else what
 * it took on entry), a block with more gets a merge of what each ends
 * with. memo[b] (where mst[b] == stamp) keeps each block's answer, the
 * merge made before its operands are looked up, so that a loop finds it
 * and each block is visited once a register. */
typedef struct resolver {
    const cfg *g;
    uint32_t stamp, base; /* base: the value of merge 0 */
    uint32_t *memo, *mst, *lw, *lwst, *path;
    merge *m;
    size_t nm, mcap;
    uint32_t *ops;
    size_t nops, opcap;
    bool oom;
} resolver;

static uint32_t entry_value(resolver *s, uint32_t b)
{
    const cfg *g = s->g;
    uint32_t x = b, n = 0, v;
    for (;;) {
        if (s->mst[x] == s->stamp) {
            v = s->memo[x];
            break;
        }
        /* the entry has the kernel's start as one more predecessor, where
         * nothing is written */
        uint32_t np = x == 0, only = NONE;
        for (uint32_t e = g->pred.off[x]; e < g->pred.off[x + 1]; e++)
            if (g->b[g->pred.to[e]].reachable) {
                np++;
                only = g->pred.to[e];
            }
        if (np >= 2) {
            if (s->nm == s->mcap) {
                merge *q = grow_array(s->m, &s->mcap, sizeof *q);
                if (!q) {
                    s->oom = true;
                    return 0;
                }
                s->m = q;
            }
            s->m[s->nm] = (merge){x, 0, 0};
            v = s->base + (uint32_t)s->nm++;
            s->mst[x] = s->stamp;
            s->memo[x] = v;
            break;
        }
        if (only == NONE) { /* the entry, with no other predecessor */
            v = 0;
            break;
        }
        /* One predecessor, reachable from the entry without x: a chain of
         * such blocks ends at the entry or a block with more. */
        s->path[n++] = x;
        if (s->lwst[only] == s->stamp) {
            v = s->lw[only];
            break;
        }
        x = only;
    }
    for (uint32_t i = 0; i < n; i++) {
        s->mst[s->path[i]] = s->stamp;
        s->memo[s->path[i]] = v;
    }
    return v;
}

/* The values of the merges from first on: one operand for each reachable
 * predecessor of the merge's block, merges found on the way looked up in
 * turn. */
static void merge_operands(resolver *s, size_t first)
{
    const cfg *g = s->g;
    for (size_t j = first; j < s->nm && !s->oom; j++) {
        uint32_t b = s->m[j].blk, op = (uint32_t)s->nops;
        for (uint32_t e = g->pred.off[b]; e < g->pred.off[b + 1]; e++) {
            uint32_t p = g->pred.to[e];
            if (!g->b[p].reachable)
                continue;
            uint32_t v = s->lwst[p] == s->stamp ? s->lw[p] : entry_value(s, p);
            if (s->nops == s->opcap) {
                uint32_t *q = grow_array(s->ops, &s->opcap, sizeof *q);
                if (!q) {
                    s->oom = true;
                    return;
                }
                s->ops = q;
            }
            s->ops[s->nops++] = v;
        }
        s->m[j].op = op;
        s->m[j].nop = (uint32_t)s->nops - op;
    }
}

/* The scan's state, by register: how its reads find their values (kind,
 * RK_*: 0 for one the pass never reads), its last write in reachable code
 * (rlast, an index into cfg.wr), and cur[r], its value at this point of
 * block curb[r] - 1 (for one written more than once); val[w], the value of
 * slice write w (an index into cfg.wr). */
typedef struct scan {
    const uint8_t *kind;
    uint32_t *rlast, *cur, *curb, *val;
    ask *asks;
    size_t nask, cap;
    bool oom;
} scan;

/* The value of register r where block bi reads it now. */
static inline uint32_t value_read(scan *s, uint32_t r, uint32_t bi)
{
    uint8_t kind = s->kind[r];
    /* one write: it is all that reaches any read */
    if (kind <= RK_ONE)
        return kind == RK_ONE ? s->val[s->rlast[r]] : 0;
    if (s->curb[r] == bi + 1)
        return s->cur[r];
    /* all its writes in one block: the last of them is what leaves that
     * block, and all that any other block (or a loop back to it) sees */
    if (kind == RK_BLOCK)
        return s->val[s->rlast[r]];
    if (s->nask == s->cap) {
        ask *q = grow_array(s->asks, &s->cap, sizeof *q);
        if (!q) {
            s->oom = true;
            return 0;
        }
        s->asks = q;
    }
    uint32_t id = (uint32_t)s->nask;
    s->asks[s->nask++] = (ask){r, bi};
    s->cur[r] = PENDING | id;
    s->curb[r] = bi + 1;
    return PENDING | id;
}

/* The scan's tables; each write of the slice numbered as a value; and how
 * the writes in reachable code of each register the pass reads lie (want[r]
 * becomes the kind), with the last of them. */
static int scan_begin(cfg *g, uslice *u, scan *s)
{
    pg_kernel *k = g->k;
    uint32_t nr = k->nregs, nb = g->nb, *list = u->list, count = u->count;
    s->val = arena_alloc(&k->mem, sizeof(uint32_t) * (g->at[k->nins].wr + 1));
    s->rlast = arena_alloc(&k->mem, sizeof(uint32_t) * nr);
    s->cur = arena_alloc(&k->mem, sizeof(uint32_t) * nr);
    s->curb = arena_alloc(&k->mem, sizeof(uint32_t) * nr);
    u->val = arena_alloc(&k->mem, sizeof(uint32_t) * (u->nsw + 1));
    u->use = arena_alloc(&k->mem, sizeof(uint32_t) * (u->nuse + 1));
    u->bguard = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    u->sguard = arena_alloc(&k->mem, sizeof(uint32_t) * (g->nsync + 1));
    u->moff = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 2));
    if (!s->val || !s->rlast || !s->cur || !s->curb || !u->val || !u->use || !u->bguard ||
        !u->sguard || !u->moff)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    uint32_t v = 1;
    for (uint32_t li = 0; li < count; li++)
        for (uint32_t d = g->at[list[li]].wr; d < g->at[list[li] + 1].wr; d++) {
            s->val[d] = v;
            u->val[v - 1] = v;
            v++;
        }
    u->nw = v - 1;
    for (uint32_t q = 0; q < u->nwl; q++) {
        uint32_t r = u->wl[q], lastw = NONE, b0 = NONE, nw = 0;
        bool multi = false;
        for (uint32_t w = g->last[r]; w != NONE; w = g->prev[w]) {
            uint32_t b = g->blk_of[g->wr[w].ins];
            if (!g->b[b].reachable)
                continue;
            if (lastw == NONE) {
                lastw = w;
                b0 = b;
            }
            multi |= b != b0;
            nw++;
        }
        u->want[r] = !nw ? RK_NONE : nw == 1 ? RK_ONE : multi ? RK_MULTI : RK_BLOCK;
        s->rlast[r] = lastw;
        s->curb[r] = 0;
    }
    return PG_OK;
}

/* The scan over the slice, the barriers and the block-ending guards of the
 * reachable blocks in order: each read's value, or the ask it waits on. */
static void scan_slice(cfg *g, uslice *u, scan *s)
{
    pg_kernel *k = g->k;
    uint32_t nb = g->nb, *list = u->list, count = u->count;
    uint32_t li = 0, sj = 0;
    size_t uc = 0;
    for (uint32_t bi = 0; bi < nb; bi++) {
        const block *b = &g->b[bi];
        if (!b->reachable) {
            while (sj < g->nsync && g->sync[sj] < b->end)
                sj++;
            continue;
        }
        for (;;) {
            uint32_t i = li < count && list[li] < b->end ? list[li] : NONE;
            uint32_t j = sj < g->nsync && g->sync[sj] < b->end ? g->sync[sj] : NONE;
            if (i == NONE && j == NONE)
                break;
            if (j <= i) {
                uint32_t gr = k->ins[j].guard;
                u->sguard[sj++] = gr ? value_read(s, gr, bi) : 0;
                if (j < i)
                    continue;
            }
            const ufact *f = &u->uf[i];
            const ref *r = &g->rd[g->at[i].rd];
            uint32_t w0 = g->at[i].wr, w1 = g->at[i + 1].wr, *use = u->use;
            for (unsigned x = 0, m = f->guard + f->nuse; x < m; x++)
                use[uc++] = value_read(s, r[x].reg, bi);
            if (f->guard)
                for (uint32_t d = w0; d < w1; d++)
                    use[uc++] = value_read(s, g->wr[d].reg, bi);
            /* any register: only those written more than once are read
             * back, the others' are never looked at */
            for (uint32_t d = w0; d < w1; d++) {
                s->cur[g->wr[d].reg] = s->val[d];
                s->curb[g->wr[d].reg] = bi + 1;
            }
            li++;
        }
        if (b->guard)
            u->bguard[bi] = value_read(s, b->guard, bi);
    }
}

/* The asks the scan left, register by register: each meets the writes
 * that reach its block through merges (rs); then every pending read takes
 * its answer. */
static int resolve_asks(cfg *g, uslice *u, scan *s, resolver *rs)
{
    pg_kernel *k = g->k;
    uint32_t nb = g->nb;
    rs->memo = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    rs->mst = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    rs->lw = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    rs->lwst = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    rs->path = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    uint32_t *res = arena_alloc(&k->mem, sizeof(uint32_t) * s->nask);
    uint32_t *next = arena_alloc(&k->mem, sizeof(uint32_t) * s->nask);
    if (!rs->memo || !rs->mst || !rs->lw || !rs->lwst || !rs->path || !res || !next)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    memset(rs->mst, 0, sizeof(uint32_t) * (nb + 1));
    memset(rs->lwst, 0, sizeof(uint32_t) * (nb + 1));
    /* the asks of each register in a list, in order: cur[r] (done with
     * the scan) heads it, NONE once the register is done */
    for (size_t a = 0; a < s->nask; a++)
        s->cur[s->asks[a].reg] = NONE;
    for (size_t a = s->nask; a-- > 0;) {
        next[a] = s->cur[s->asks[a].reg];
        s->cur[s->asks[a].reg] = (uint32_t)a;
    }
    for (size_t a0 = 0; a0 < s->nask && !rs->oom; a0++) {
        uint32_t r = s->asks[a0].reg;
        if (s->cur[r] == NONE)
            continue;
        rs->stamp = r + 1;
        /* each block's last write of r: the first in the chain */
        for (uint32_t w = g->last[r]; w != NONE; w = g->prev[w]) {
            uint32_t wb = g->blk_of[g->wr[w].ins];
            if (g->b[wb].reachable && rs->lwst[wb] != rs->stamp) {
                rs->lwst[wb] = rs->stamp;
                rs->lw[wb] = s->val[w];
            }
        }
        size_t first = rs->nm;
        for (uint32_t a = s->cur[r]; a != NONE; a = next[a])
            res[a] = entry_value(rs, s->asks[a].blk);
        s->cur[r] = NONE;
        merge_operands(rs, first);
    }
    if (rs->oom)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    for (size_t x = 0; x < u->nuse; x++)
        if (u->use[x] & PENDING)
            u->use[x] = res[u->use[x] & ~PENDING];
    for (uint32_t bi = 0; bi < nb; bi++)
        if (g->b[bi].reachable && g->b[bi].guard && (u->bguard[bi] & PENDING))
            u->bguard[bi] = res[u->bguard[bi] & ~PENDING];
    for (uint32_t j = 0; j < g->nsync; j++)
        if (g->b[g->blk_of[g->sync[j]]].reachable && (u->sguard[j] & PENDING))
            u->sguard[j] = res[u->sguard[j] & ~PENDING];
    return PG_OK;
}

/* The resolver's merges into u, listed by block. */
static int merges_by_block(cfg *g, uslice *u, const resolver *rs)
{
    pg_kernel *k = g->k;
    uint32_t nb = g->nb, nm = (uint32_t)rs->nm;
    u->nm = nm;
    u->nv = 1 + u->nw + nm;
    u->mby = arena_alloc(&k->mem, sizeof(uint32_t) * (nm + 1));
    u->ops = arena_alloc(&k->mem, sizeof(uint32_t) * (rs->nops + 1));
    u->m = arena_alloc(&k->mem, sizeof(merge) * (nm + 1));
    if (!u->mby || !u->ops || !u->m)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    if (nm) {
        memcpy(u->m, rs->m, sizeof(merge) * nm);
        memcpy(u->ops, rs->ops, sizeof(uint32_t) * rs->nops);
    }
    memset(u->moff, 0, sizeof(uint32_t) * (nb + 2));
    for (uint32_t j = 0; j < nm; j++)
        u->moff[u->m[j].blk + 2]++;
    for (uint32_t bi = 0; bi <= nb; bi++)
        u->moff[bi + 1] += u->moff[bi];
    for (uint32_t j = 0; j < nm; j++)
        u->mby[u->moff[u->m[j].blk + 1]++] = j;
    return PG_OK;
}

/* Which values are %tid.x: marked (notx) unless a read of it, a copy or a
 * merge; the copies and merges pass the mark on. A path on which nothing
 * is written (value 0, a merge's operand) counts for nothing here, as for
 * the levels: check_defined has settled that some write reaches. */
static int tid_x_values(cfg *g, uslice *u, size_t nops)
{
    pg_kernel *k = g->k;
    uint32_t *list = u->list, count = u->count, nm = u->nm;
    uint32_t nv = 1 + u->nw + nm, nc = 0;
    size_t ne = nops + count + 1;
    uint8_t *notx = arena_alloc(&k->mem, nv);
    uint32_t *from = arena_alloc(&k->mem, sizeof(uint32_t) * ne);
    uint32_t *to = arena_alloc(&k->mem, sizeof(uint32_t) * ne);
    if (!notx || !from || !to)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    notx[0] = 0;
    uint32_t v = 1;
    size_t uc = 0;
    for (uint32_t li = 0; li < count; li++) {
        uint32_t i = list[li], nwr = g->at[i + 1].wr - g->at[i].wr;
        const ufact *f = &u->uf[i];
        for (uint32_t d = 0; d < nwr; d++)
            notx[v + d] = !f->tid;
        if (f->tid == TID_COPY && nwr) {
            from[nc] = u->use[uc]; /* unguarded: its one source */
            to[nc++] = v;
        }
        uc += f->guard + f->nuse + (f->guard ? nwr : 0);
        v += nwr;
    }
    for (uint32_t j = 0; j < nm; j++) {
        notx[u->nw + 1 + j] = 0;
        for (uint32_t o = 0; o < u->m[j].nop; o++) {
            from[nc] = u->ops[u->m[j].op + o];
            to[nc++] = u->nw + 1 + j;
        }
    }
    u->notx = notx;
    return find_tid_x(k, nv, notx, from, to, nc);
}

/* The values the pass reads (see uslice): one scan over the slice, the
 * barriers and the block-ending guards of the reachable blocks in order
 * settles every read by a write before it in its block, and every read of
 * a register written in one block only; the rest (a loop counter, a value
 * written on both arms of an if) go to the resolver, register by
 * register, and meet their writes through merges. Then, where some
 * instruction takes a warp index, which values are %tid.x. */
static int reaching_values(cfg *g, uslice *u)
{
    scan s = {.kind = u->want};
    resolver rs = {.g = g};
    int err = scan_begin(g, u, &s);
    if (!err) {
        scan_slice(g, u, &s);
        if (s.oom)
            err = pg_fail(g->k, PG_ENOMEM, "out of memory in validation");
    }
    rs.base = u->nw + 1;
    if (!err && s.nask)
        err = resolve_asks(g, u, &s, &rs);
    if (!err)
        err = merges_by_block(g, u, &rs);
    if (!err && u->warp)
        err = tid_x_values(g, u, rs.nops);
    pg_mem_free(s.asks);
    pg_mem_free(rs.m);
    pg_mem_free(rs.ops);
    return err;
}

/* A write of value v under w: raise v to w's level (nothing where w is 0),
 * without a branch. Returns whether the pass must run again (this pass read
 * v before). */
static inline bool raise(why *div, uint32_t v, why w, const uint32_t *read_in, uint32_t pass)
{
    bool up = why_level(div[v]) < why_level(w);
    div[v] = up ? w : div[v];
    return up & (read_in[v] == pass);
}

/* Passes in block order over the slice until nothing changes, with the
 * values u holds (registers or reaching writes), their reasons in div. A
 * pass need not be followed by one more only to see that: it must run
 * again only if it raised a value after reading it (read_in[v], the pass
 * that last read it; a read by the writing instruction itself gives the
 * same answer again) or marked a block it had already walked. On the big
 * straight-line kernels that saves a whole pass. A block's merges go
 * first, then its instructions, each taking its guard and sources from
 * use; a guarded write keeps the reason of the value it may leave in place
 * too. The blocks come in with no divergence marked. */
static int settle_uniformity(cfg *g, const uslice *u, const uint32_t *ipdom, why **out)
{
    pg_kernel *k = g->k;
    uint32_t nb = g->nb, nv = u->nv, *list = u->list, count = u->count;
    /* div[0] stays 0: value 0 is no guard (register 0), or nothing written */
    why *div = arena_alloc(&k->mem, sizeof(why) * nv);
    uint32_t *read_in = arena_alloc(&k->mem, sizeof(uint32_t) * nv);
    uint32_t *stack = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    uint32_t *seen = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    uint8_t *done_branch = arena_alloc(&k->mem, nb + 1); /* the level walked at */
    if (!div || !read_in || !stack || !seen || !done_branch)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    memset(div, 0, sizeof(why) * nv);
    memset(read_in, 0, sizeof(uint32_t) * nv);
    memset(done_branch, 0, nb + 1);
    for (uint32_t v = 0; v <= nb; v++)
        seen[v] = NONE;
    uint32_t walks = 0, pass = 0;
    bool changed = true;
    while (changed) {
        changed = false;
        pass++;
        uint32_t li = 0; /* in list */
        const uint32_t *use = u->use, *val = u->val;
        for (uint32_t bi = 0; bi < nb; bi++) {
            block *b = &g->b[bi];
            if (!b->reachable)
                continue;
            why bw = b->divergent ? why_make(WHY_CONTROL, b->level, b->cause) : 0;
            for (uint32_t x = u->moff[bi]; x < u->moff[bi + 1]; x++) {
                const merge *m = &u->m[u->mby[x]];
                const uint32_t *op = u->ops + m->op;
                why w = 0;
                for (uint32_t o = 0; o < m->nop; o++)
                    w = why_max(w, div[op[o]]);
                changed |= raise(div, u->nw + 1 + u->mby[x], w, read_in, pass);
                for (uint32_t o = 0; o < m->nop; o++)
                    read_in[op[o]] = pass;
            }
            for (; li < count && list[li] < b->end; li++) {
                uint32_t i = list[li], nwr = g->at[i + 1].wr - g->at[i].wr;
                const ufact *f = &u->uf[i];
                const uint32_t *s = use + f->guard;
                uint32_t guard = f->guard ? use[0] : 0;
                why w = f->why ? why_make(f->why, f->level, f->why == WHY_SREG ? f->sreg : i) : 0;
                if (f->load) {
                    if (div[s[0]])
                        w = why_make(WHY_LOAD, why_level(div[s[0]]), i);
                } else if (f->nuse) {
                    /* the warp index of %tid.x differs between warps only */
                    why c = div[s[0]];
                    if (c && f->warp && !u->notx[s[0]])
                        c = (c & ~((why)0xff << 56)) | (why)LV_WARP << 56;
                    w = c;
                    for (unsigned x = 1; x < f->nuse; x++)
                        w = why_max(w, div[s[x]]);
                }
                w = why_max(w, div[guard]);
                w = why_max(w, bw);
                for (uint32_t d = 0; d < nwr; d++)
                    changed |= raise(div, val[d], f->guard ? why_max(w, div[s[f->nuse + d]]) : w,
                                     read_in, pass);
                /* after the writes: the instruction's own read does not count */
                uint32_t nu = f->guard + f->nuse + (f->guard ? nwr : 0);
                for (uint32_t x = 0; x < nu; x++)
                    read_in[use[x]] = pass;
                use += nu;
                val += nwr;
            }
            /* at once, so that what it makes divergent is seen in this pass */
            if (b->guard) {
                uint32_t gv = u->bguard[bi];
                read_in[gv] = pass;
                uint8_t lv = (uint8_t)why_level(div[gv]);
                if (done_branch[bi] < lv) {
                    done_branch[bi] = lv;
                    changed |= mark_region(g, bi, lv, walks++, ipdom, done_branch, stack, seen);
                }
            }
        }
    }
    *out = div;
    return PG_OK;
}

/* The first barrier or .aligned instruction that only some threads of the
 * block (or warp) reach, by the values in u and their reasons in div:
 * PG_EDIVERGE, with the message where `report` (the cheaper pass only
 * asks); PG_OK where there is none. */
static int check_syncs(cfg *g, const uslice *u, const why *div, bool report)
{
    pg_kernel *k = g->k;
    for (uint32_t j = 0; j < g->nsync; j++) {
        uint32_t i = g->sync[j];
        const block *b = &g->b[g->blk_of[i]];
        if (!b->reachable)
            continue;
        const instr *in = &k->ins[i];
        unsigned fl = pg_op_flags((pg_opcode)in->op);
        if (fl & OPF_ALIGNED) {
            /* every thread of the warp (warpgroup) runs it together: a
             * split between warps is the caller's to get right, a split
             * inside one is always wrong */
            bool lane_guard = in->guard && why_level(div[u->sguard[j]]) == LV_LANE;
            if (lane_guard || (b->divergent && b->level == LV_LANE)) {
                if (!report)
                    return PG_EDIVERGE;
                char at[256], wt[160];
                describe(g, i, at, sizeof at);
                why_text(g, lane_guard ? div[u->sguard[j]] : div[u->bguard[g->blk_of[b->cause]]],
                         wt, sizeof wt);
                return pg_fail(k, PG_EDIVERGE, "divergence: %s is .aligned (every thread of "
                               "the warp runs it together) but runs under a %s that depends "
                               "on %s", at, lane_guard ? "guard" : "branch", wt);
            }
        }
        if (!(fl & OPF_BARRIER))
            continue;
        /* A counted barrier (and a counted arrive) counts whole warps: a
         * split between warps is what it is for; a split inside one is not. */
        bool counted = in->op == OP_BAR_N || in->op == OP_BAR_ARRIVE;
        uint8_t allowed = counted ? LV_WARP : LV_NONE;
        char bar[256], br[256], wt[160];
        if (in->guard && why_level(div[u->sguard[j]]) > allowed) {
            if (!report)
                return PG_EDIVERGE;
            char r[32];
            describe(g, i, bar, sizeof bar);
            pg_val v = {PG_VAL_REG, in->guard, 0};
            pg_val_format(k, v, PG_PRED, r, sizeof r);
            why_text(g, div[u->sguard[j]], wt, sizeof wt);
            return pg_fail(k, PG_EDIVERGE, "barrier divergence: %s is guarded by %s, which "
                           "depends on %s", bar, r, wt);
        }
        if (b->divergent && b->level > allowed) {
            if (!report)
                return PG_EDIVERGE;
            const instr *cb = &k->ins[b->cause];
            describe(g, i, bar, sizeof bar);
            describe(g, b->cause, br, sizeof br);
            why_text(g, div[u->bguard[g->blk_of[b->cause]]], wt, sizeof wt);
            return pg_fail(k, PG_EDIVERGE, "barrier divergence: %s is reached by only some "
                           "threads of the %s: the %s at %s depends on %s", bar,
                           counted ? "warps it counts" : "block",
                           cb->op == OP_BRA ? "branch" : "early exit", br, wt);
        }
    }
    return PG_OK;
}

/* Two answers, the cheaper first. With a value per register (every write
 * of it raising it: register_values), what a read sees is at least what
 * the writes that reach it give, so where that finds every barrier and
 * .aligned instruction reached by all threads, so would the reaching
 * writes, and that is all: the catalog's kernels stop there. Only where it
 * finds one that is not are the reaching writes worked out
 * (reaching_values) and the passes run again from unmarked blocks, and
 * their answer is the one given. */
static int check_barriers(cfg *g)
{
    pg_kernel *k = g->k;
    if (!g->nsync)
        return PG_OK;

    uint32_t nb = g->nb;
    /* uf filled in where used */
    uslice u = {.uf = arena_alloc(&k->mem, sizeof(ufact) * (k->nins + 1))};
    uint32_t *ipdom = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    if (!u.uf || !ipdom)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    why *div = NULL;
    int err = post_dominators(g, ipdom);
    if (!err)
        err = uniform_slice(g, &u);
    if (!err)
        err = register_values(g, &u);
    if (!err)
        err = settle_uniformity(g, &u, ipdom, &div);
    if (err || check_syncs(g, &u, div, false) == PG_OK)
        return err;
    for (uint32_t bi = 0; bi < nb; bi++) {
        g->b[bi].divergent = false;
        g->b[bi].level = LV_NONE;
        g->b[bi].cause = 0;
    }
    err = reaching_values(g, &u);
    if (!err)
        err = settle_uniformity(g, &u, ipdom, &div);
    if (!err)
        err = check_syncs(g, &u, div, true);
    return err;
}

int pg_validate(pg_kernel *k)
{
    cfg g = {.k = k};
    int err = build_cfg(&g);
    if (!err)
        err = check_defined(&g);
    if (!err)
        err = check_barriers(&g);
    pg_mem_free(g.rd);
    pg_mem_free(g.wr);
    pg_mem_free(g.prev);
    pg_mem_free(g.reads.v);
    return err;
}
