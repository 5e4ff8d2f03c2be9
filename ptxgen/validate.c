/* SPDX-License-Identifier: MIT */
/*
 * Whole-kernel checks before emission:
 *   - every branch target is bound;
 *   - no register is read where no write can have reached it (a "may be
 *     defined" forward data-flow over the control-flow graph);
 *   - barrier uniformity: a bar.sync must be reached by all threads of the
 *     block or by none. A uniformity analysis marks values that can differ
 *     between threads of one block (from %tid, %laneid, %warpid, loads from
 *     per-thread addresses, atomics, shuffles, votes, and anything computed
 *     from them or assigned under a divergent branch); a branch or early exit
 *     on such a value makes every block it controls (reachable from it
 *     before its immediate post-dominator) divergent. A barrier there is an
 *     error naming the barrier and the branch.
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
 * fit. Dominators and post-dominators come from Cooper, Harvey and Kennedy's
 * iterative algorithm on reverse post-order numbers; the "may be defined"
 * check settles almost every read through the dominator tree, then a short
 * backward search, and leaves only the rest to one ancestor walk per
 * reading block or to bitset data-flow over just those registers, in
 * chunks of bounded size. A divergent branch marks its region as soon as
 * the uniformity pass reaches it, so a chain of branches each decided by a
 * value assigned under the one before settles in one pass, not one each.
 * The two levels keep it so: a value's or a block's level only rises, from
 * warp to lane at most once, so a branch walks its region at most twice.
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
} block;

typedef enum why_kind { WHY_NONE, WHY_SREG, WHY_LOAD, WHY_ATOM, WHY_SHFL, WHY_VOTE, WHY_CONTROL } why_kind;
typedef struct why {
    uint8_t kind;
    uint8_t level;   /* LV_WARP or LV_LANE once kind is set */
    uint32_t detail; /* sreg, or instruction index */
} why;

/* How far a value or a block's threads differ: not at all, between warps
 * only, or within a warp. */
enum { LV_NONE = 0, LV_WARP = 1, LV_LANE = 2 };

#define NONE UINT32_MAX

/* A graph's edges in compressed rows: node v's are to[off[v] .. off[v+1]). */
typedef struct edges {
    uint32_t *off, *to;
} edges;

typedef struct cfg {
    pg_kernel *k;
    block *b;
    uint32_t nb;       /* blocks; node nb is the virtual exit */
    uint32_t *blk_of;  /* instruction -> block */
    edges succ, pred;  /* over nb + 1 nodes */
    uint32_t *rpo;     /* blocks reachable from the entry, in reverse post-order */
    uint32_t nrpo;
    uint32_t *num;     /* block -> place in that order (NONE: unreachable) */
    /* Found in the one pass that finds the blocks, so that no later pass
     * walks every record only to ask: the barriers and .aligned
     * instructions, in order, and how many registers the kernel writes
     * (with repeats). */
    uint32_t *sync, nsync;
    uint32_t nwritten;
    /* Registers that hold %tid.x at every write, as far as that pass saw
     * (find_tid_x finishes it): tidx[r], and the copies (unguarded movs)
     * out of each register as lists, copy_head[r] then copy_next[e] with
     * the destination copy_to[e]. Registers it took out wait in tidx_work. */
    bool *tidx;
    uint32_t *copy_head, *copy_next, *copy_to, *tidx_work, ntidx_work;
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

/* The registers an instruction writes: its results, then a wgmma's
 * accumulators. */
static uint32_t nwrites(const instr *in) { return in->ndst + in->nacc; }
static pg_val written(const instr *in, uint32_t d)
{
    return d < in->ndst ? in->dst[d] : in->acc[d - in->ndst];
}

/* A write of v other than a copy of %tid.x: v is not a %tid.x register. */
static inline void not_tid_x(cfg *g, pg_val v)
{
    if (v.kind == PG_VAL_REG && g->tidx[v.id]) {
        g->tidx[v.id] = false;
        g->tidx_work[g->ntidx_work++] = v.id;
    }
}

static int build_cfg(cfg *g)
{
    pg_kernel *k = g->k;
    uint32_t n = k->nins;
    int err;
    uint32_t nr = k->nregs, ncopy = 0;
    g->blk_of = arena_alloc(&k->mem, sizeof(uint32_t) * (n + 1));
    g->sync = arena_alloc(&k->mem, sizeof(uint32_t) * (n + 1));
    g->tidx = arena_alloc(&k->mem, nr + 1);
    g->copy_head = arena_alloc(&k->mem, sizeof(uint32_t) * (nr + 1));
    g->copy_next = arena_alloc(&k->mem, sizeof(uint32_t) * (n + 1));
    g->copy_to = arena_alloc(&k->mem, sizeof(uint32_t) * (n + 1));
    g->tidx_work = arena_alloc(&k->mem, sizeof(uint32_t) * (nr + 1));
    bool *leader = arena_alloc(&k->mem, n + 1);
    if (!g->blk_of || !g->sync || !g->tidx || !g->copy_head || !g->copy_next || !g->copy_to ||
        !g->tidx_work || !leader)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    memset(leader, 0, n + 1);
    leader[0] = true;
    for (uint32_t r = 0; r < nr; r++) {
        g->tidx[r] = true;
        g->copy_head[r] = NONE;
    }
    for (uint32_t i = 0; i < n; i++) {
        const instr *in = &k->ins[i];
        unsigned fl = pg_op_flags((pg_opcode)in->op);
        if (in->op == OP_LABEL)
            leader[i] = true;
        if (fl & OPF_TERM)
            leader[i + 1] = true;
        if (fl & (OPF_BARRIER | OPF_ALIGNED))
            g->sync[g->nsync++] = i;
        g->nwritten += in->ndst + in->nacc;
        /* for find_tid_x, while the record is at hand */
        bool copy = in->op == OP_MOV && !in->guard && in->src[0].kind == PG_VAL_REG;
        if (copy && in->dst[0].kind == PG_VAL_REG) {
            g->copy_to[ncopy] = in->dst[0].id;
            g->copy_next[ncopy] = g->copy_head[in->src[0].id];
            g->copy_head[in->src[0].id] = ncopy++;
        }
        bool keeps = !in->guard && in->nacc == 0 &&
                     (copy || (in->op == OP_SREG && in->mod == PG_SREG_TID_X));
        /* the results, then the accumulators (none where keeps): two
         * short loops cost less than one asking which array each time */
        if (!keeps)
            for (uint32_t d = 0; d < in->ndst; d++)
                not_tid_x(g, in->dst[d]);
        for (uint32_t d = 0; d < in->nacc; d++)
            not_tid_x(g, in->acc[d]);
    }
    uint32_t nb = 0;
    for (uint32_t i = 0; i < n; i++)
        nb += leader[i];
    if (n == 0)
        nb = 1;
    g->b = arena_alloc(&k->mem, sizeof(block) * (nb + 1));
    if (!g->b)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    memset(g->b, 0, sizeof(block) * (nb + 1));
    g->nb = nb;
    uint32_t cur = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (leader[i] && i > 0) {
            g->b[cur].end = i;
            cur++;
            g->b[cur].start = i;
        }
        g->blk_of[i] = cur;
    }
    g->b[cur].end = n;
    for (uint32_t bi = 0; bi < nb; bi++) {
        block *b = &g->b[bi];
        uint32_t next = bi + 1; /* == nb: the exit */
        const instr *last = b->end > b->start ? &k->ins[b->end - 1] : NULL;
        if (last && is_term(last)) {
            if (last->op == OP_BRA) {
                int64_t at = k->labels[last->label].bound_at;
                if (at < 0) {
                    const label_info *l = &k->labels[last->label];
                    return pg_fail(k, PG_ELABEL, "label %u%s%s is a branch target (instruction %u) "
                                   "but is never bound", last->label, l->hint ? " " : "",
                                   l->hint ? l->hint : "", b->end - 1);
                }
                b->succ[b->nsucc++] = g->blk_of[at];
            } else {
                b->succ[b->nsucc++] = nb;
            }
            if (last->guard && (b->nsucc == 0 || b->succ[0] != next))
                b->succ[b->nsucc++] = next;
        } else {
            b->succ[b->nsucc++] = next;
        }
    }
    err = build_edges(g);
    if (err)
        return err;
    /* reachability: the blocks of a depth-first walk from the entry */
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

/* Registers an instruction reads (including its guard), less a wgmma's
 * accumulators (acc_reads). */
static unsigned uses(const instr *in, uint32_t *out)
{
    unsigned n = 0;
    if (in->guard)
        out[n++] = in->guard;
    for (unsigned i = 0; i < in->nsrc; i++)
        if (in->src[i].kind == PG_VAL_REG)
            out[n++] = in->src[i].id;
    return n;
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

/* A read that the dominator tree could not settle: no write of its register
 * dominates it. */
typedef struct hard_use {
    uint32_t reg, blk, ins;
    uint32_t j; /* place among the instruction's reads: the first error is the first read */
} hard_use;

typedef struct use_list {
    hard_use *v;
    size_t n, cap;
} use_list;

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

/* Walk the dominator tree keeping, for each register, how many writes of it
 * dominate the current instruction. A read with none goes to `hard`. */
static int dominated_reads(cfg *g, use_list *hard)
{
    pg_kernel *k = g->k;
    uint32_t nb = g->nb;
    uint32_t *idom = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    uint32_t *coff = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 2));
    uint32_t *child = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    uint32_t *stack = arena_alloc(&k->mem, sizeof(uint32_t) * 2 * (nb + 1));
    uint32_t *count = arena_alloc(&k->mem, sizeof(uint32_t) * k->nregs);
    /* the registers the blocks on the walk's path wrote, and where each
     * block's begin: leaving a block pops its writes, not re-reading them */
    uint32_t *wstack = arena_alloc(&k->mem, sizeof(uint32_t) * (g->nwritten + 1));
    uint32_t *wmark = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    if (!idom || !coff || !child || !stack || !count || !wstack || !wmark)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    if (!g->nrpo)
        return PG_OK;
    dominators(&g->pred, g->rpo, g->nrpo, g->num, nb + 1, idom);
    memset(coff, 0, sizeof(uint32_t) * (nb + 2));
    memset(count, 0, sizeof(uint32_t) * k->nregs);
    for (uint32_t i = 1; i < g->nrpo; i++)
        coff[idom[g->rpo[i]] + 2]++;
    for (uint32_t v = 0; v <= nb; v++)
        coff[v + 1] += coff[v];
    for (uint32_t i = 1; i < g->nrpo; i++)
        child[coff[idom[g->rpo[i]] + 1]++] = g->rpo[i];
    /* now block v's children are child[coff[v] .. coff[v+1]) */
    uint32_t sp = 0, wsp = 0, u[PG_MAX_SRC + 1];
    stack[sp++] = g->rpo[0] << 1;
    while (sp) {
        uint32_t x = stack[--sp], v = x >> 1;
        const block *b = &g->b[v];
        if (x & 1) {
            while (wsp > wmark[v])
                count[wstack[--wsp]]--;
            continue;
        }
        wmark[v] = wsp;
        for (uint32_t i = b->start; i < b->end; i++) {
            const instr *ins = &k->ins[i];
            unsigned nu = uses(ins, u);
            for (unsigned j = 0; j < nu; j++)
                if (!count[u[j]] && !push_use(hard, (hard_use){u[j], v, i, j}))
                    return pg_fail(k, PG_ENOMEM, "out of memory in validation");
            for (uint32_t j = 0, na = acc_reads(ins); j < na; j++) {
                uint32_t r = ins->acc[j].id;
                if (!count[r] && !push_use(hard, (hard_use){r, v, i, nu + j}))
                    return pg_fail(k, PG_ENOMEM, "out of memory in validation");
            }
            for (uint32_t d = 0; d < ins->ndst; d++)
                if (ins->dst[d].kind == PG_VAL_REG) {
                    count[ins->dst[d].id]++;
                    wstack[wsp++] = ins->dst[d].id;
                }
            for (uint32_t d = 0; d < ins->nacc; d++)
                if (ins->acc[d].kind == PG_VAL_REG) {
                    count[ins->acc[d].id]++;
                    wstack[wsp++] = ins->acc[d].id;
                }
        }
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
 * only, a chunk of registers at a time so that memory stays bounded. Every
 * block takes part, reachable or not, as writes in unreachable code have
 * always counted. Records the first read no write reaches in *bad. */
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
        /* a queue seeded in reverse post-order, then the unreachable blocks */
        uint32_t head = 0, len = 0;
        for (uint32_t i = 0; i < g->nrpo; i++)
            queue[len++] = g->rpo[i];
        for (uint32_t b = 0; b < nb; b++)
            if (g->num[b] == NONE)
                queue[len++] = b;
        memset(queued, 1, nb);
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

/* The same question block by block: mark every block with a path to the
 * reading block, then ask whether any writer of the register is marked.
 * One walk of the graph per reading block, so this is the cheaper way when
 * the reads sit in few blocks (the usual case: values summed at the end). */
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
        for (uint32_t e = g->pred.off[u]; e < g->pred.off[u + 1]; e++)
            if (mark[g->pred.to[e]] != u) {
                mark[g->pred.to[e]] = u;
                stack[sp++] = g->pred.to[e];
            }
        while (sp) {
            uint32_t x = stack[--sp];
            for (uint32_t e = g->pred.off[x]; e < g->pred.off[x + 1]; e++)
                if (mark[g->pred.to[e]] != u) {
                    mark[g->pred.to[e]] = u;
                    stack[sp++] = g->pred.to[e];
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
 * writes the register, else the data-flow. */
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
    /* the blocks that write each of those registers, once each */
    memset(defs.off, 0, sizeof(uint32_t) * (nr + 1));
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t r = 0; r < nr; r++)
            last[r] = NONE;
        for (uint32_t b = 0; b < nb; b++)
            for (uint32_t i = g->b[b].start; i < g->b[b].end; i++)
                for (uint32_t d = 0; d < nwrites(&k->ins[i]); d++) {
                    pg_val x = written(&k->ins[i], d);
                    if (x.kind != PG_VAL_REG || uoff[x.id] == uoff[x.id + 1] || last[x.id] == b)
                        continue;
                    last[x.id] = b;
                    if (pass)
                        defs.to[defs.off[x.id]++] = b;
                    else
                        defs.off[x.id + 1]++;
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
    int err = dominated_reads(g, &hard);
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
    switch (w.kind) {
    case WHY_SREG:
        snprintf(buf, n, "%s", pg_sreg_name((pg_sreg)w.detail));
        return;
    case WHY_LOAD:
        snprintf(buf, n, "data loaded from a per-thread address at instruction %u", w.detail);
        return;
    case WHY_ATOM:
        snprintf(buf, n, "the result of an atomic at instruction %u", w.detail);
        return;
    case WHY_SHFL:
        snprintf(buf, n, "a per-lane warp result (shfl, ldmatrix) at instruction %u", w.detail);
        return;
    case WHY_VOTE:
        snprintf(buf, n, "a warp vote at instruction %u", w.detail);
        return;
    case WHY_CONTROL:
        snprintf(buf, n, "a value assigned under the divergent branch at instruction %u", w.detail);
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

/* How much a special register differs between the threads of a block. */
static uint8_t sreg_level(pg_sreg s)
{
    if (s == PG_SREG_TID_X || s == PG_SREG_TID_Y || s == PG_SREG_TID_Z || s == PG_SREG_LANEID)
        return LV_LANE;
    return s == PG_SREG_WARPID ? LV_WARP : LV_NONE;
}

/* Registers that hold %tid.x at every write (an unguarded read of %tid.x,
 * or an unguarded mov from such a register): their warp index (>> 5 or
 * more, / a multiple of 32, & a mask clear in bits 0-4) is the same across
 * a warp. build_cfg's pass over the records takes out every register with
 * any other write and links the movs; here the movs pass that on: one
 * worklist pass over the copy edges, not a fixed point over the kernel. */
static void find_tid_x(cfg *g)
{
    uint32_t sp = g->ntidx_work, *work = g->tidx_work;
    while (sp) {
        uint32_t r = work[--sp];
        for (uint32_t e = g->copy_head[r]; e != NONE; e = g->copy_next[e]) {
            uint32_t t = g->copy_to[e];
            if (g->tidx[t]) {
                g->tidx[t] = false;
                work[sp++] = t;
            }
        }
    }
    g->ntidx_work = 0;
}

/* Whether `in` takes the warp index of its first source (a %tid.x
 * register): the result is then the same across each warp. */
static bool warp_index_of_tid(const instr *in, const bool *tidx)
{
    if (in->nsrc != 2 || in->src[0].kind != PG_VAL_REG || !tidx[in->src[0].id] ||
        in->src[1].kind != PG_VAL_IMM_INT)
        return false;
    uint64_t c = in->src[1].bits;
    switch (in->op) {
    case OP_SHR: return c >= 5 && c < 64;
    case OP_DIV: return c && c % 32 == 0;
    case OP_AND: return (c & 31) == 0;
    default: return false;
    }
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

/* A write of v under w: raise v to w's level. Returns whether the pass
 * must run again (this pass read v before). */
static inline bool raise(why *div, pg_val v, why w, const uint32_t *read_in, uint32_t pass)
{
    if (v.kind != PG_VAL_REG || (div[v.id].kind && div[v.id].level >= w.level))
        return false;
    div[v.id] = w;
    return read_in[v.id] == pass;
}

static int check_barriers(cfg *g)
{
    pg_kernel *k = g->k;
    if (!g->nsync)
        return PG_OK;

    uint32_t nb = g->nb;
    why *div = arena_alloc(&k->mem, sizeof(why) * k->nregs);
    const bool *tidx = g->tidx;
    uint32_t *ipdom = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    uint32_t *stack = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    uint32_t *seen = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    uint8_t *done_branch = arena_alloc(&k->mem, nb + 1); /* the level walked at */
    uint32_t *read_in = arena_alloc(&k->mem, sizeof(uint32_t) * (k->nregs ? k->nregs : 1));
    if (!div || !ipdom || !stack || !seen || !done_branch || !read_in)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    memset(div, 0, sizeof(why) * k->nregs);
    memset(read_in, 0, sizeof(uint32_t) * k->nregs);
    memset(done_branch, 0, nb + 1);
    for (uint32_t v = 0; v <= nb; v++)
        seen[v] = NONE;
    int err = post_dominators(g, ipdom);
    if (err)
        return err;
    find_tid_x(g);

    /* Passes in block order until nothing changes. A pass need not be
     * followed by one more only to see that: it must run again only if it
     * raised a register after reading it (read_in[r], the pass that last
     * read it; a read by the writing instruction itself gives the same
     * answer again) or marked a block it had already walked. On the big
     * straight-line kernels that saves a whole pass. */
    uint32_t walks = 0, pass = 0;
    bool changed = true;
    while (changed) {
        changed = false;
        pass++;
        for (uint32_t bi = 0; bi < nb; bi++) {
            block *b = &g->b[bi];
            if (!b->reachable)
                continue;
            for (uint32_t i = b->start; i < b->end; i++) {
                const instr *in = &k->ins[i];
                if (!in->ndst && !in->nacc)
                    continue;
                why w = {WHY_NONE, LV_NONE, 0};
                unsigned reads = 0; /* src[0..reads) were read */
                switch (in->op) {
                case OP_SREG:
                    if (sreg_level((pg_sreg)in->mod))
                        w = (why){WHY_SREG, sreg_level((pg_sreg)in->mod), in->mod};
                    break;
                case OP_LD:
                    if (in->mod != PG_SPACE_PARAM && in->src[0].kind == PG_VAL_REG &&
                        div[in->src[0].id].kind)
                        w = (why){WHY_LOAD, div[in->src[0].id].level, i};
                    reads = in->mod != PG_SPACE_PARAM ? 1 : 0;
                    break;
                default:
                    /* The op table says which results differ per lane; the
                     * kind only picks the words of the message. */
                    if (pg_op_flags((pg_opcode)in->op) & OPF_LANE_VARYING) {
                        w = (why){in->op == OP_ATOM ? WHY_ATOM : in->op == OP_VOTE ? WHY_VOTE
                                                                                   : WHY_SHFL,
                                  LV_LANE, i};
                        break;
                    }
                    reads = in->nsrc;
                    for (unsigned s = 0; s < in->nsrc; s++) {
                        if (in->src[s].kind != PG_VAL_REG || !div[in->src[s].id].kind)
                            continue;
                        why ws = div[in->src[s].id];
                        if (s == 0 && warp_index_of_tid(in, tidx))
                            ws.level = LV_WARP;
                        if (ws.level > w.level)
                            w = ws;
                    }
                    break;
                }
                if (in->guard && div[in->guard].kind && div[in->guard].level > w.level)
                    w = div[in->guard];
                if (b->divergent && b->level > w.level)
                    w = (why){WHY_CONTROL, b->level, b->cause};
                if (w.kind) {
                    for (uint32_t d = 0; d < in->ndst; d++)
                        changed |= raise(div, in->dst[d], w, read_in, pass);
                    for (uint32_t d = 0; d < in->nacc; d++)
                        changed |= raise(div, in->acc[d], w, read_in, pass);
                }
                /* after the writes: the instruction's own read does not count */
                for (unsigned s = 0; s < reads; s++)
                    if (in->src[s].kind == PG_VAL_REG && in->src[s].id < k->nregs)
                        read_in[in->src[s].id] = pass;
                if (in->guard)
                    read_in[in->guard] = pass;
            }
            /* at once, so that what it makes divergent is seen in this pass */
            if (b->end > b->start) {
                const instr *last = &k->ins[b->end - 1];
                if (is_term(last) && last->guard)
                    read_in[last->guard] = pass;
                if (is_term(last) && last->guard && div[last->guard].kind &&
                    done_branch[bi] < div[last->guard].level) {
                    uint8_t lv = div[last->guard].level;
                    done_branch[bi] = lv;
                    changed |= mark_region(g, bi, lv, walks++, ipdom, done_branch, stack, seen);
                }
            }
        }
    }

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
            bool lane_guard =
                in->guard && div[in->guard].kind && div[in->guard].level == LV_LANE;
            if (lane_guard || (b->divergent && b->level == LV_LANE)) {
                char at[256], wt[160];
                describe(g, i, at, sizeof at);
                why_text(g, lane_guard ? div[in->guard] : div[k->ins[b->cause].guard], wt,
                         sizeof wt);
                return pg_fail(k, PG_EDIVERGE, "divergence: %s is .aligned (every thread of "
                               "the warp runs it together) but runs under a %s that depends "
                               "on %s", at, lane_guard ? "guard" : "branch", wt);
            }
        }
        if (!(fl & OPF_BARRIER))
            continue;
        /* A counted barrier waits for whole warps: a split between
         * warps is what it is for; a split inside one is not. */
        uint8_t allowed = in->op == OP_BAR_N ? LV_WARP : LV_NONE;
        char bar[256], br[256], wt[160];
        if (in->guard && div[in->guard].kind && div[in->guard].level > allowed) {
            char r[32];
            describe(g, i, bar, sizeof bar);
            pg_val v = {PG_VAL_REG, in->guard, 0};
            pg_val_format(k, v, PG_PRED, r, sizeof r);
            why_text(g, div[in->guard], wt, sizeof wt);
            return pg_fail(k, PG_EDIVERGE, "barrier divergence: %s is guarded by %s, which "
                           "depends on %s", bar, r, wt);
        }
        if (b->divergent && b->level > allowed) {
            const instr *cb = &k->ins[b->cause];
            describe(g, i, bar, sizeof bar);
            describe(g, b->cause, br, sizeof br);
            why_text(g, div[cb->guard], wt, sizeof wt);
            return pg_fail(k, PG_EDIVERGE, "barrier divergence: %s is reached by only some "
                           "threads of the %s: the %s at %s depends on %s", bar,
                           in->op == OP_BAR_N ? "warps it counts" : "block",
                           cb->op == OP_BRA ? "branch" : "early exit", br, wt);
        }
    }
    return PG_OK;
}

int pg_validate(pg_kernel *k)
{
    cfg g = {.k = k};
    int err = build_cfg(&g);
    if (!err)
        err = check_defined(&g);
    if (!err)
        err = check_barriers(&g);
    return err;
}
