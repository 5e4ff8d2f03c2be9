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
 *     the whole block may sit under neither.
 */
#include "internal.h"

#include <stdio.h>
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

typedef struct cfg {
    pg_kernel *k;
    block *b;
    uint32_t nb;       /* blocks; node nb is the virtual exit */
    uint32_t *blk_of;  /* instruction -> block */
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

static int build_cfg(cfg *g)
{
    pg_kernel *k = g->k;
    uint32_t n = k->nins;
    g->blk_of = arena_alloc(&k->mem, sizeof(uint32_t) * (n + 1));
    bool *leader = arena_alloc(&k->mem, n + 1);
    if (!g->blk_of || !leader)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    memset(leader, 0, n + 1);
    leader[0] = true;
    for (uint32_t i = 0; i < n; i++) {
        if (k->ins[i].op == OP_LABEL)
            leader[i] = true;
        if (is_term(&k->ins[i]))
            leader[i + 1] = true;
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
    /* reachability */
    uint32_t *stack = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    if (!stack)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    uint32_t sp = 0;
    g->b[0].reachable = true;
    stack[sp++] = 0;
    while (sp) {
        block *b = &g->b[stack[--sp]];
        for (unsigned s = 0; s < b->nsucc; s++) {
            uint32_t t = b->succ[s];
            if (t < nb && !g->b[t].reachable) {
                g->b[t].reachable = true;
                stack[sp++] = t;
            }
        }
    }
    return PG_OK;
}

/* Registers an instruction reads (including its guard). */
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

static int check_defined(cfg *g)
{
    pg_kernel *k = g->k;
    size_t w = nwords(k->nregs);
    uint32_t nb = g->nb;
    word *in = arena_alloc(&k->mem, sizeof(word) * w * nb);
    word *out = arena_alloc(&k->mem, sizeof(word) * w * nb);
    word *def = arena_alloc(&k->mem, sizeof(word) * w * nb);
    word *cur = arena_alloc(&k->mem, sizeof(word) * (w ? w : 1));
    if (!in || !out || !def || !cur)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    memset(in, 0, sizeof(word) * w * nb);
    memset(out, 0, sizeof(word) * w * nb);
    memset(def, 0, sizeof(word) * w * nb);
    for (uint32_t bi = 0; bi < nb; bi++)
        for (uint32_t i = g->b[bi].start; i < g->b[bi].end; i++)
            for (unsigned d = 0; d < k->ins[i].ndst + k->ins[i].nacc; d++) {
                pg_val v = d < k->ins[i].ndst ? k->ins[i].dst[d] : k->ins[i].acc[d - k->ins[i].ndst];
                if (v.kind == PG_VAL_REG)
                    bit_set(def + bi * w, v.id);
            }
    bool changed = true;
    while (changed) {
        changed = false;
        for (uint32_t bi = 0; bi < nb; bi++) {
            for (size_t j = 0; j < w; j++)
                out[bi * w + j] = in[bi * w + j] | def[bi * w + j];
            for (unsigned s = 0; s < g->b[bi].nsucc; s++) {
                uint32_t t = g->b[bi].succ[s];
                if (t >= nb)
                    continue;
                for (size_t j = 0; j < w; j++) {
                    word nw = in[t * w + j] | out[bi * w + j];
                    if (nw != in[t * w + j]) {
                        in[t * w + j] = nw;
                        changed = true;
                    }
                }
            }
        }
    }
    uint32_t u[PG_MAX_SRC + 1];
    for (uint32_t bi = 0; bi < nb; bi++) {
        if (!g->b[bi].reachable)
            continue;
        memcpy(cur, in + bi * w, sizeof(word) * w);
        for (uint32_t i = g->b[bi].start; i < g->b[bi].end; i++) {
            const instr *ins = &k->ins[i];
            unsigned nu = uses(ins, u);
            /* wgmma reads its accumulators unless scale-d is an immediate 0 */
            bool acc_read = ins->nacc && !(ins->src[ins->nsrc - 1].kind == PG_VAL_IMM_INT &&
                                            ins->src[ins->nsrc - 1].bits == 0);
            for (unsigned j = 0; j < nu + (acc_read ? ins->nacc : 0); j++) {
                uint32_t r_id = j < nu ? u[j] : ins->acc[j - nu].id;
                if (!bit_get(cur, r_id)) {
                    char r[32], d[256];
                    pg_val v = {PG_VAL_REG, r_id, 0};
                    pg_val_format(k, v, PG_U32, r, sizeof r);
                    describe(g, i, d, sizeof d);
                    return pg_fail(k, PG_EUNDEF, "register %s is read before any write reaches "
                                   "it, at %s", r, d);
                }
            }
            for (unsigned d = 0; d < ins->ndst; d++)
                if (ins->dst[d].kind == PG_VAL_REG)
                    bit_set(cur, ins->dst[d].id);
            for (unsigned d = 0; d < ins->nacc; d++)
                if (ins->acc[d].kind == PG_VAL_REG)
                    bit_set(cur, ins->acc[d].id);
        }
    }
    return PG_OK;
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

/* Post-dominator sets over nb+1 nodes (the exit is node nb). Returns the
 * immediate post-dominator of each block (nb+1 = none). */
static int post_dominators(cfg *g, uint32_t *ipdom)
{
    pg_kernel *k = g->k;
    uint32_t nn = g->nb + 1;
    size_t w = nwords(nn);
    word *pd = arena_alloc(&k->mem, sizeof(word) * w * nn);
    word *tmp = arena_alloc(&k->mem, sizeof(word) * w);
    uint32_t *size = arena_alloc(&k->mem, sizeof(uint32_t) * nn);
    if (!pd || !tmp || !size)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    for (uint32_t v = 0; v < nn; v++) {
        memset(pd + v * w, v == g->nb ? 0 : 0xff, sizeof(word) * w);
        if (v == g->nb)
            bit_set(pd + v * w, v);
    }
    bool changed = true;
    while (changed) {
        changed = false;
        for (uint32_t v = g->nb; v-- > 0;) {
            memset(tmp, 0xff, sizeof(word) * w);
            for (unsigned s = 0; s < g->b[v].nsucc; s++)
                for (size_t j = 0; j < w; j++)
                    tmp[j] &= pd[g->b[v].succ[s] * w + j];
            bit_set(tmp, v);
            if (memcmp(tmp, pd + v * w, sizeof(word) * w)) {
                memcpy(pd + v * w, tmp, sizeof(word) * w);
                changed = true;
            }
        }
    }
    for (uint32_t v = 0; v < nn; v++) {
        uint32_t c = 0;
        for (uint32_t x = 0; x < nn; x++)
            c += bit_get(pd + v * w, x);
        size[v] = c;
    }
    /* Nodes that cannot reach the exit keep the "all nodes" start value
     * and have no meaningful post-dominator. */
    bool *reaches = arena_alloc(&k->mem, nn);
    if (!reaches)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    memset(reaches, 0, nn);
    reaches[g->nb] = true;
    for (bool more = true; more;) {
        more = false;
        for (uint32_t v = 0; v < g->nb; v++)
            for (unsigned s = 0; s < g->b[v].nsucc && !reaches[v]; s++)
                if (reaches[g->b[v].succ[s]])
                    reaches[v] = more = true;
    }
    for (uint32_t v = 0; v < g->nb; v++) {
        uint32_t best = nn, best_size = 0;
        if (reaches[v]) {
            for (uint32_t x = 0; x < nn; x++) {
                /* the closest strict post-dominator has the largest set */
                if (x != v && bit_get(pd + v * w, x) && size[x] > best_size) {
                    best = x;
                    best_size = size[x];
                }
            }
        }
        ipdom[v] = best;
    }
    return PG_OK;
}

/* How much a special register differs between the threads of a block. */
static uint8_t sreg_level(pg_sreg s)
{
    if (s == PG_SREG_TID_X || s == PG_SREG_TID_Y || s == PG_SREG_TID_Z || s == PG_SREG_LANEID)
        return LV_LANE;
    return s == PG_SREG_WARPID ? LV_WARP : LV_NONE;
}

/* Registers that hold %tid.x at every write (moved from %tid.x or from such
 * a register): their warp index (>> 5 or more, / a multiple of 32, & a mask
 * clear in bits 0-4) is the same across a warp. */
static int find_tid_x(cfg *g, bool *tidx)
{
    pg_kernel *k = g->k;
    for (uint32_t r = 0; r < k->nregs; r++)
        tidx[r] = true;
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t i = 0; i < k->nins; i++) {
            const instr *in = &k->ins[i];
            bool is = !in->guard && in->nacc == 0 &&
                      ((in->op == OP_SREG && in->mod == PG_SREG_TID_X) ||
                       (in->op == OP_MOV && in->src[0].kind == PG_VAL_REG && tidx[in->src[0].id]));
            for (unsigned d = 0; d < in->ndst; d++)
                if (in->dst[d].kind == PG_VAL_REG && tidx[in->dst[d].id] && !is) {
                    tidx[in->dst[d].id] = false;
                    changed = true;
                }
            for (unsigned d = 0; d < in->nacc; d++)
                tidx[in->acc[d].id] = false;
        }
    }
    return PG_OK;
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

static int check_barriers(cfg *g)
{
    pg_kernel *k = g->k;
    bool any_bar = false;
    for (uint32_t i = 0; i < k->nins; i++)
        any_bar |= (pg_op_flags((pg_opcode)k->ins[i].op) & (OPF_BARRIER | OPF_ALIGNED)) != 0;
    if (!any_bar)
        return PG_OK;

    uint32_t nb = g->nb;
    why *div = arena_alloc(&k->mem, sizeof(why) * k->nregs);
    bool *tidx = arena_alloc(&k->mem, k->nregs ? k->nregs : 1);
    uint32_t *ipdom = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    uint32_t *stack = arena_alloc(&k->mem, sizeof(uint32_t) * (nb + 1));
    bool *seen = arena_alloc(&k->mem, nb + 1);
    uint8_t *done_branch = arena_alloc(&k->mem, nb + 1);
    if (!div || !tidx || !ipdom || !stack || !seen || !done_branch)
        return pg_fail(k, PG_ENOMEM, "out of memory in validation");
    memset(div, 0, sizeof(why) * k->nregs);
    memset(done_branch, 0, nb + 1);
    int err = post_dominators(g, ipdom);
    if (!err)
        err = find_tid_x(g, tidx);
    if (err)
        return err;

    bool changed = true;
    while (changed) {
        changed = false;
        for (uint32_t bi = 0; bi < nb; bi++) {
            block *b = &g->b[bi];
            if (!b->reachable)
                continue;
            for (uint32_t i = b->start; i < b->end; i++) {
                const instr *in = &k->ins[i];
                if (!in->ndst && !in->nacc)
                    continue;
                why w = {WHY_NONE, LV_NONE, 0};
                switch (in->op) {
                case OP_SREG:
                    if (sreg_level((pg_sreg)in->mod))
                        w = (why){WHY_SREG, sreg_level((pg_sreg)in->mod), in->mod};
                    break;
                case OP_LD:
                    if (in->mod != PG_SPACE_PARAM && in->src[0].kind == PG_VAL_REG &&
                        div[in->src[0].id].kind)
                        w = (why){WHY_LOAD, div[in->src[0].id].level, i};
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
                if (!w.kind)
                    continue;
                for (unsigned d = 0; d < in->ndst + in->nacc; d++) {
                    pg_val v = d < in->ndst ? in->dst[d] : in->acc[d - in->ndst];
                    if (v.kind == PG_VAL_REG && (!div[v.id].kind || div[v.id].level < w.level)) {
                        div[v.id] = w;
                        changed = true;
                    }
                }
            }
        }
        /* Divergent branches mark the blocks they control, at their level. */
        for (uint32_t bi = 0; bi < nb; bi++) {
            block *b = &g->b[bi];
            if (!b->reachable || b->end == b->start)
                continue;
            const instr *last = &k->ins[b->end - 1];
            if (!is_term(last) || !last->guard || !div[last->guard].kind)
                continue;
            uint8_t lv = div[last->guard].level;
            if (done_branch[bi] >= lv)
                continue;
            done_branch[bi] = lv;
            memset(seen, 0, nb + 1);
            uint32_t sp = 0, stop = ipdom[bi];
            for (unsigned s = 0; s < b->nsucc; s++)
                if (b->succ[s] < nb && b->succ[s] != stop && !seen[b->succ[s]]) {
                    seen[b->succ[s]] = true;
                    stack[sp++] = b->succ[s];
                }
            while (sp) {
                uint32_t v = stack[--sp];
                if (!g->b[v].divergent || g->b[v].level < lv) {
                    g->b[v].divergent = true;
                    g->b[v].level = lv;
                    g->b[v].cause = b->end - 1;
                    changed = true;
                }
                for (unsigned s = 0; s < g->b[v].nsucc; s++) {
                    uint32_t t = g->b[v].succ[s];
                    if (t < nb && t != stop && !seen[t]) {
                        seen[t] = true;
                        stack[sp++] = t;
                    }
                }
            }
        }
    }

    for (uint32_t bi = 0; bi < nb; bi++) {
        const block *b = &g->b[bi];
        if (!b->reachable)
            continue;
        for (uint32_t i = b->start; i < b->end; i++) {
            const instr *in = &k->ins[i];
            unsigned fl = pg_op_flags((pg_opcode)in->op);
            if (fl & OPF_ALIGNED) {
                /* every thread of the warp (warpgroup) runs it together: a
                 * split between warps is the caller's to get right, a split
                 * inside one is always wrong */
                bool lane_guard = in->guard && div[in->guard].kind && div[in->guard].level == LV_LANE;
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
            describe(g, i, bar, sizeof bar);
            if (in->guard && div[in->guard].kind && div[in->guard].level > allowed) {
                char r[32];
                pg_val v = {PG_VAL_REG, in->guard, 0};
                pg_val_format(k, v, PG_PRED, r, sizeof r);
                why_text(g, div[in->guard], wt, sizeof wt);
                return pg_fail(k, PG_EDIVERGE, "barrier divergence: %s is guarded by %s, which "
                               "depends on %s", bar, r, wt);
            }
            if (b->divergent && b->level > allowed) {
                const instr *cb = &k->ins[b->cause];
                describe(g, b->cause, br, sizeof br);
                why_text(g, div[cb->guard], wt, sizeof wt);
                return pg_fail(k, PG_EDIVERGE, "barrier divergence: %s is reached by only some "
                               "threads of the %s: the %s at %s depends on %s", bar,
                               in->op == OP_BAR_N ? "warps it counts" : "block",
                               cb->op == OP_BRA ? "branch" : "early exit", br, wt);
            }
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
