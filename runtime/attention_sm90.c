/* SPDX-License-Identifier: MIT */
/*
 * pgrt_attention_sm90_forward: causal GQA attention's forward on the
 * catalog's attention_sm90_forward (kernels/attention_sm90.c), which reads
 * Q, K and V only through three tensor maps. Each call encodes them (host
 * work only, no driver round trip, so a capture records them by value)
 * and launches:
 *
 *   map    tensor            dims (innermost first)  strides (bytes)             box
 *   q      bf16 [B,S,Hq,D]   {D, Hq, S, B}           {2D, 2 Hq D, 2 S Hq D}       {64, 1, 128, 1}
 *   k, v   bf16 [B,S,Hkv,D]  {D, Hkv, S, B}          {2D, 2 Hkv D, 2 S Hkv D}     {64, 1, 128, 1}
 *
 * 128-byte swizzle (a box row is 64 bf16, 128 bytes). The batch is a
 * dimension of its own so that a tile at the end of one sequence reads
 * zeros, not the next sequence; a D below the tile (64 or 128) reads zero
 * columns. TMA wants 16-byte strides: D a multiple of 8.
 */
#include "rt_internal.h"

#include <string.h>

#define FN "pgrt_attention_sm90_forward"
#define MAX_SEQ (1u << 22)

/* The shape rules, without pointers: what a model asks before choosing
 * this kernel over attention_mma_forward. */
static int check_shape(const char *fn, const pgrt_ctx *ctx, uint32_t q_heads, uint32_t kv_heads,
                       uint32_t head_dim)
{
    RT_NONNULL(fn, ctx, "ctx");
    if (ctx->info.arch_target != PG_SM_90A)
        return rt_fail(PGRT_ETARGET, "%s: wgmma and TMA need sm_90a, a compute capability 9.0 "
                       "device; this one is %d.%d (attention_mma_forward runs there)", fn,
                       ctx->info.cc_major, ctx->info.cc_minor);
    if (q_heads == 0 || q_heads > 65535 || kv_heads == 0 || q_heads % kv_heads)
        return rt_fail(PGRT_EINVAL, "%s: q_heads=%u, kv_heads=%u: q_heads must be 1..65535 and a "
                       "multiple of kv_heads", fn, q_heads, kv_heads);
    if (head_dim == 0 || head_dim > 128 || head_dim % 8)
        return rt_fail(PGRT_ERANGE, "%s: head_dim=%u: the tiles take a multiple of 8 up to 128 "
                       "(TMA reads 16-byte rows); attention_mma_forward takes any head_dim up "
                       "to 128", fn, head_dim);
    return 0;
}

int pgrt_attention_sm90_check(pgrt_ctx *ctx, uint32_t q_heads, uint32_t kv_heads,
                              uint32_t head_dim)
{
    return check_shape("pgrt_attention_sm90_check", ctx, q_heads, kv_heads, head_dim);
}

/* One [B, S, H, D] bf16 tensor's map, boxes of `rows` rows. */
static int encode_rows(pgrt_ctx *ctx, pgrt_tensor_map *m, pgrt_devptr base, uint32_t B,
                       uint32_t S, uint32_t H, uint32_t D, uint32_t rows)
{
    const uint64_t dims[4] = {D, H, S, B};
    const uint64_t strides[3] = {(uint64_t)D * 2u, (uint64_t)H * D * 2u,
                                 (uint64_t)S * H * D * 2u};
    const uint32_t box[4] = {64, 1, rows, 1};
    return pgrt_tensor_map_encode(ctx, m, PG_BF16, 4, base, dims, strides, box, 128);
}

static int encode(pgrt_ctx *ctx, pgrt_tensor_map *m, pgrt_devptr base, uint32_t B, uint32_t S,
                  uint32_t H, uint32_t D)
{
    return encode_rows(ctx, m, base, B, S, H, D, 128);
}

int pgrt_attention_sm90_map(pgrt_ctx *ctx, pgrt_tensor_map *map, pgrt_devptr base,
                            uint32_t batch, uint32_t seq_len, uint32_t heads, uint32_t head_dim,
                            uint32_t box_rows)
{
    const char *fn = "pgrt_attention_sm90_map";
    RT_NONNULL(fn, ctx, "ctx");
    RT_NONNULL(fn, map, "map");
    if (box_rows != 64 && box_rows != 128)
        return rt_fail(PGRT_EINVAL, "%s: box_rows=%u: 128 (the forward's maps) or 64 (the "
                       "backward's)", fn, box_rows);
    if (!base || base % 16)
        return rt_fail(PGRT_EINVAL, "%s: base 0x%llx: TMA reads a nonzero, 16-byte aligned "
                       "address", fn, (unsigned long long)base);
    if (batch == 0 || batch > 65535 || seq_len == 0 || seq_len > MAX_SEQ || heads == 0 ||
        heads > 65535 || head_dim == 0 || head_dim > 128 || head_dim % 8)
        return rt_fail(PGRT_ERANGE, "%s: batch=%u seq_len=%u heads=%u head_dim=%u: batch and "
                       "heads 1..65535, seq_len 1..%u, head_dim a multiple of 8 up to 128", fn,
                       batch, seq_len, heads, head_dim, MAX_SEQ);
    return encode_rows(ctx, map, base, batch, seq_len, heads, head_dim, box_rows);
}

int pgrt_attention_sm90_stats_map(pgrt_ctx *ctx, pgrt_tensor_map *map, pgrt_devptr stats,
                                  uint32_t batch, uint32_t seq_len, uint32_t q_heads)
{
    const char *fn = "pgrt_attention_sm90_stats_map";
    RT_NONNULL(fn, ctx, "ctx");
    RT_NONNULL(fn, map, "map");
    if (!stats || stats % 16)
        return rt_fail(PGRT_EINVAL, "%s: stats 0x%llx: TMA reads a nonzero, 16-byte aligned "
                       "address", fn, (unsigned long long)stats);
    if (batch == 0 || batch > 65535 || seq_len == 0 || seq_len > MAX_SEQ || q_heads == 0 ||
        q_heads > 65535)
        return rt_fail(PGRT_ERANGE, "%s: batch=%u seq_len=%u q_heads=%u: batch and q_heads "
                       "1..65535, seq_len 1..%u", fn, batch, seq_len, q_heads, MAX_SEQ);
    uint64_t sp = ((uint64_t)seq_len + 127u) / 128u * 128u;
    const uint64_t dims[3] = {2 * sp, q_heads, batch};
    const uint64_t strides[2] = {2 * sp * 4u, 2 * sp * 4u * q_heads};
    const uint32_t box[3] = {128, 1, 1};
    return pgrt_tensor_map_encode(ctx, map, PG_F32, 3, stats, dims, strides, box, 0);
}

uint64_t pgrt_attention_sm90_stats_bytes(uint32_t batch, uint32_t seq_len, uint32_t q_heads)
{
    uint64_t sp = ((uint64_t)seq_len + 127u) / 128u * 128u;
    return (uint64_t)batch * q_heads * sp * 8u;
}

int pgrt_attention_sm90_forward(pgrt_ctx *ctx, pgrt_stream *s, const pgrt_attention90 *a)
{
    RT_NONNULL(FN, ctx, "ctx");
    RT_NONNULL(FN, a, "the pgrt_attention90");
    int rc = check_shape(FN, ctx, a->q_heads, a->kv_heads, a->head_dim);
    if (rc)
        return rc;
    if (s && s->ctx != ctx)
        return rt_fail(PGRT_EINVAL, FN ": the stream belongs to another context");
    if (a->batch == 0 || a->batch > 65535 || a->seq_len == 0 || a->seq_len > MAX_SEQ)
        return rt_fail(PGRT_ERANGE, FN ": batch=%u, seq_len=%u: batch must be 1..65535 and "
                       "seq_len 1..%u", a->batch, a->seq_len, MAX_SEQ);
    static const char *const names[5] = {"q", "k", "v", "o", "lse"};
    const pgrt_devptr ptrs[5] = {a->q, a->k, a->v, a->o, a->lse};
    for (int i = 0; i < 5; i++)
        if (!ptrs[i])
            return rt_fail(PGRT_EINVAL, FN ": %s is 0", names[i]);
    for (int i = 0; i < 3; i++)
        if (ptrs[i] % 16)
            return rt_fail(PGRT_EINVAL, FN ": %s (0x%llx) is not 16-byte aligned, as TMA reads "
                           "it", names[i], (unsigned long long)ptrs[i]);

    _Alignas(64) pgrt_tensor_map maps[3];
    if ((rc = encode(ctx, &maps[0], a->q, a->batch, a->seq_len, a->q_heads, a->head_dim)) ||
        (rc = encode(ctx, &maps[1], a->k, a->batch, a->seq_len, a->kv_heads, a->head_dim)) ||
        (rc = encode(ctx, &maps[2], a->v, a->batch, a->seq_len, a->kv_heads, a->head_dim)))
        return rc;

    const pgk_desc *d = pgk_find("attention_sm90_forward");
    if (!d)
        return rt_fail(PGRT_ENOTFOUND, FN ": attention_sm90_forward is not in the catalog");
    pgk_knobs kn;
    pgk_knobs_default(d, &kn);
    static const char *const knob[4] = {"batch", "seq_len", "q_heads", "head_dim"};
    const uint32_t val[4] = {a->batch, a->seq_len, a->q_heads, a->head_dim};
    for (int i = 0; i < 4; i++) {
        int ki = pgk_knob_index(d, knob[i]);
        if (ki < 0)
            return rt_fail(PGRT_EKERNEL, FN ": %s has no knob %s", d->name, knob[i]);
        kn.v[ki] = val[i];
    }
    pgrt_kernel *k = NULL;
    if ((rc = rt_kernel_get(ctx, d, &kn, rt_stream_cu(s), &k)))
        return rc;
    pgk_launch cfg;
    char err[256] = "";
    if ((rc = pgk_launch_for(d, &kn, &cfg, err, sizeof err)))
        return rt_fail(PGRT_ERANGE, FN ": %s", err);
    const pgrt_arg args[12] = {
        pgrt_arg_tensor_map(&maps[0]), pgrt_arg_tensor_map(&maps[1]),
        pgrt_arg_tensor_map(&maps[2]), pgrt_arg_ptr(a->o),
        pgrt_arg_u64(a->o_bf16),       pgrt_arg_ptr(a->lse),
        pgrt_arg_u32(a->batch),        pgrt_arg_u32(a->seq_len),
        pgrt_arg_u32(a->q_heads),      pgrt_arg_u32(a->kv_heads),
        pgrt_arg_u32(a->head_dim),     pgrt_arg_f32(a->scale),
    };
    return rt_kernel_launch_cfg(k, s, &cfg, &kn, args, 12);
}

/* A kernel of the catalog at the shape's knobs, loaded. */
static int kernel_at(pgrt_ctx *ctx, pgrt_stream *s, const char *name, const char *heads_knob,
                     const uint32_t *val, pgrt_kernel **k, pgk_knobs *kn, pgk_launch *cfg)
{
    const pgk_desc *d = pgk_find(name);
    if (!d)
        return rt_fail(PGRT_ENOTFOUND, "pgrt_attention_sm90_backward: %s is not in the catalog",
                       name);
    pgk_knobs_default(d, kn);
    const char *const knob[4] = {"batch", "seq_len", heads_knob, "head_dim"};
    for (int i = 0; i < 4; i++) {
        int ki = pgk_knob_index(d, knob[i]);
        if (ki < 0)
            return rt_fail(PGRT_EKERNEL, "pgrt_attention_sm90_backward: %s has no knob %s",
                           d->name, knob[i]);
        kn->v[ki] = val[i];
    }
    int rc = rt_kernel_get(ctx, d, kn, rt_stream_cu(s), k);
    if (rc)
        return rc;
    char err[256] = "";
    if ((rc = pgk_launch_for(d, kn, cfg, err, sizeof err)))
        return rt_fail(PGRT_ERANGE, "pgrt_attention_sm90_backward: %s", err);
    return 0;
}

#undef FN
#define FN "pgrt_attention_sm90_backward"

int pgrt_attention_sm90_backward(pgrt_ctx *ctx, pgrt_stream *s, const pgrt_attention90_grad *g)
{
    RT_NONNULL(FN, ctx, "ctx");
    RT_NONNULL(FN, g, "the pgrt_attention90_grad");
    int rc = check_shape(FN, ctx, g->q_heads, g->kv_heads, g->head_dim);
    if (rc)
        return rc;
    if (s && s->ctx != ctx)
        return rt_fail(PGRT_EINVAL, FN ": the stream belongs to another context");
    if (g->batch == 0 || g->batch > 65535 || g->seq_len == 0 || g->seq_len > MAX_SEQ)
        return rt_fail(PGRT_ERANGE, FN ": batch=%u, seq_len=%u: batch must be 1..65535 and "
                       "seq_len 1..%u", g->batch, g->seq_len, MAX_SEQ);
    static const char *const names[11] = {"q",     "k",      "v",      "o",
                                          "grad_o", "lse",   "grad_o_bf16", "stats",
                                          "grad_q", "grad_k", "grad_v"};
    const pgrt_devptr ptrs[11] = {g->q,      g->k,          g->v,      g->o,
                                  g->grad_o, g->lse,        g->grad_o_bf16, g->stats,
                                  g->grad_q, g->grad_k,     g->grad_v};
    for (int i = 0; i < 11; i++)
        if (!ptrs[i])
            return rt_fail(PGRT_EINVAL, FN ": %s is 0", names[i]);
    bool gqa = g->q_heads != g->kv_heads;
    if (gqa && (!g->grad_k_heads || !g->grad_v_heads))
        return rt_fail(PGRT_EINVAL, FN ": q_heads %u > kv_heads %u: grad_k_heads and grad_v_heads "
                       "(f32 [B, S, q_heads, D] each) are needed", g->q_heads, g->kv_heads);
    const int aligned[5] = {0, 1, 2, 6, 7};
    for (int i = 0; i < 5; i++)
        if (ptrs[aligned[i]] % 16)
            return rt_fail(PGRT_EINVAL, FN ": %s (0x%llx) is not 16-byte aligned",
                           names[aligned[i]], (unsigned long long)ptrs[aligned[i]]);

    _Alignas(64) pgrt_tensor_map maps[5];
    const pgrt_devptr mb[4] = {g->q, g->k, g->v, g->grad_o_bf16};
    const uint32_t mh[4] = {g->q_heads, g->kv_heads, g->kv_heads, g->q_heads};
    for (int i = 0; i < 4; i++)
        if ((rc = encode_rows(ctx, &maps[i], mb[i], g->batch, g->seq_len, mh[i], g->head_dim, 64)))
            return rc;
    if ((rc = pgrt_attention_sm90_stats_map(ctx, &maps[4], g->stats, g->batch, g->seq_len,
                                            g->q_heads)))
        return rc;

    pgrt_kernel *k;
    pgk_knobs kn;
    pgk_launch cfg;
    const uint32_t vq[4] = {g->batch, g->seq_len, g->q_heads, g->head_dim};
    const pgrt_arg prep[9] = {
        pgrt_arg_ptr(g->o),           pgrt_arg_ptr(g->grad_o),  pgrt_arg_ptr(g->lse),
        pgrt_arg_ptr(g->grad_o_bf16), pgrt_arg_ptr(g->stats),   pgrt_arg_u32(g->batch),
        pgrt_arg_u32(g->seq_len),     pgrt_arg_u32(g->q_heads), pgrt_arg_u32(g->head_dim),
    };
    if ((rc = kernel_at(ctx, s, "attention_sm90_backward_prep", "q_heads", vq, &k, &kn, &cfg)) ||
        (rc = rt_kernel_launch_cfg(k, s, &cfg, &kn, prep, 9)))
        return rc;
    const pgrt_arg dq[12] = {
        pgrt_arg_tensor_map(&maps[0]), pgrt_arg_tensor_map(&maps[1]),
        pgrt_arg_tensor_map(&maps[2]), pgrt_arg_tensor_map(&maps[3]),
        pgrt_arg_ptr(g->stats),        pgrt_arg_ptr(g->grad_q),
        pgrt_arg_u32(g->batch),        pgrt_arg_u32(g->seq_len),
        pgrt_arg_u32(g->q_heads),      pgrt_arg_u32(g->kv_heads),
        pgrt_arg_u32(g->head_dim),     pgrt_arg_f32(g->scale),
    };
    if ((rc = kernel_at(ctx, s, "attention_sm90_backward_dq", "q_heads", vq, &k, &kn, &cfg)) ||
        (rc = rt_kernel_launch_cfg(k, s, &cfg, &kn, dq, 12)))
        return rc;
    pgrt_devptr dk = gqa ? g->grad_k_heads : g->grad_k, dv = gqa ? g->grad_v_heads : g->grad_v;
    const pgrt_arg dkv[13] = {
        pgrt_arg_tensor_map(&maps[0]), pgrt_arg_tensor_map(&maps[1]),
        pgrt_arg_tensor_map(&maps[2]), pgrt_arg_tensor_map(&maps[3]),
        pgrt_arg_tensor_map(&maps[4]), pgrt_arg_ptr(dk),
        pgrt_arg_ptr(dv),              pgrt_arg_u32(g->batch),
        pgrt_arg_u32(g->seq_len),      pgrt_arg_u32(g->q_heads),
        pgrt_arg_u32(g->kv_heads),     pgrt_arg_u32(g->head_dim),
        pgrt_arg_f32(g->scale),
    };
    if ((rc = kernel_at(ctx, s, "attention_sm90_backward_dkv", "q_heads", vq, &k, &kn, &cfg)) ||
        (rc = rt_kernel_launch_cfg(k, s, &cfg, &kn, dkv, 13)) || !gqa)
        return rc;
    /* the group sums: n elements of [B S, Hkv, D] */
    uint64_t n = (uint64_t)g->batch * g->seq_len * g->kv_heads * g->head_dim;
    if (n > 0xFFFFFFFCu)
        return rt_fail(PGRT_ERANGE, FN ": batch x seq_len x kv_heads x head_dim = %llu: the group "
                       "sum takes fewer than 2^32", (unsigned long long)n);
    const pgk_desc *d = pgk_find("attention_sm90_backward_group");
    if (!d)
        return rt_fail(PGRT_ENOTFOUND, FN ": attention_sm90_backward_group is not in the catalog");
    pgk_knobs_default(d, &kn);
    kn.v[0] = (uint32_t)n;
    char err[256] = "";
    if ((rc = rt_kernel_get(ctx, d, &kn, rt_stream_cu(s), &k)) ||
        (rc = pgk_launch_for(d, &kn, &cfg, err, sizeof err)))
        return rc == PG_ERANGE ? rt_fail(PGRT_ERANGE, FN ": %s", err) : rc;
    const pgrt_arg sum[8] = {
        pgrt_arg_ptr(g->grad_k_heads), pgrt_arg_ptr(g->grad_v_heads),
        pgrt_arg_ptr(g->grad_k),       pgrt_arg_ptr(g->grad_v),
        pgrt_arg_u32((uint32_t)n),     pgrt_arg_u32(g->kv_heads * g->head_dim),
        pgrt_arg_u32(g->q_heads / g->kv_heads), pgrt_arg_u32(g->head_dim),
    };
    return rt_kernel_launch_cfg(k, s, &cfg, &kn, sum, 8);
}
