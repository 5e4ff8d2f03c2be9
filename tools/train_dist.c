/* SPDX-License-Identifier: MIT */
/* ptxgen-train over several GPUs: the rank, its device, the communicator
 * and the end-of-run adapter check (train_dist.h). */
#include "train_dist.h"
#include "train_hf.h"

#include <stdio.h>
#include <string.h>

int train_dist_setup(train_opts *o, train_dist *td)
{
    memset(td, 0, sizeof *td);
    if (pgrt_dist_from_env(&td->d, o->dist_init)) {
        /* the runtime's "init X" is this command's --dist-init X */
        const char *m = train_last_message();
        bool init = o->dist_init && !strncmp(m, "init ", 5);
        return train_bad("%s%s", init ? "--dist-" : "", m);
    }
    if (o->dist_init && td->d.world < 2)
        return train_bad("--dist-init %s: WORLD_SIZE is %d; a run over several processes sets "
                         "RANK and WORLD_SIZE in each (or use --gpus N on one host)",
                         o->dist_init, td->d.world);
    o->world = td->d.world;
    o->dist_rank = td->d.rank;
    return 0;
}

int train_dist_device(const train_dist *td) { return td->d.world > 1 ? td->d.local_rank : 0; }

int train_dist_join(train_dist *td, const train_opts *o, pgrt_ctx *ctx)
{
    if (td->d.world < 2)
        return 0;
    pgrt_comm_params p = {.rank = td->d.rank, .world = td->d.world, .timeout_s = o->dist_timeout};
    int rc = 0;
    if (td->d.rank == 0)
        rc = pgrt_comm_id_new(ctx, &p.id);
    if (!rc)
        rc = pgrt_dist_exchange(&td->d, &p.id, o->dist_timeout);
    if (!rc)
        rc = pgrt_comm_create(ctx, &p, &td->comm);
    if (!rc)
        rc = pgrt_dist_finish(&td->d);
    if (rc) {
        fprintf(stderr, "ptxgen-train: rank %d of %d: %s\n", td->d.rank, td->d.world,
                train_last_message());
        return TRAIN_EXIT_FAIL;
    }
    if (td->d.rank == 0)
        fprintf(stderr, "ptxgen-train: %d ranks joined (NCCL %d)\n", td->d.world,
                pgrt_comm_nccl_version(td->comm));
    return 0;
}

/* FNV-1a over the bytes of every matrix, in the adapter's order. */
static uint64_t adapter_hash(const pgrt_adapter *a)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < a->count; i++) {
        const pgrt_lora *w = &a->w[i];
        const float *mats[2] = {w->a, w->b};
        size_t n[2] = {(size_t)w->r * (size_t)w->in, (size_t)w->out * (size_t)w->r};
        for (int k = 0; k < 2; k++) {
            const unsigned char *p = (const unsigned char *)mats[k];
            for (size_t j = 0; j < n[k] * sizeof(float); j++)
                h = (h ^ p[j]) * 0x100000001b3ull;
        }
    }
    return h;
}

/* Whether every rank holds the same n values (exact integers below 2^53):
 * 0 with *differs -1 when they do, else the first index that differs.
 * Two host all-reduces on a stream of its own. */
static int agree(train_dist *td, pgrt_ctx *ctx, const double *v, int n, int *differs)
{
    double lo[16], hi[16];
    memcpy(lo, v, sizeof *v * (size_t)n);
    memcpy(hi, v, sizeof *v * (size_t)n);
    pgrt_stream *s = NULL;
    int rc = pgrt_stream_create(ctx, &s);
    if (!rc)
        rc = pgrt_comm_all_reduce_host(td->comm, s, lo, (size_t)n, PGRT_COMM_MIN);
    if (!rc)
        rc = pgrt_comm_all_reduce_host(td->comm, s, hi, (size_t)n, PGRT_COMM_MAX);
    pgrt_stream_destroy(&s);
    *differs = -1;
    for (int i = 0; !rc && i < n && *differs < 0; i++)
        if (lo[i] != hi[i])
            *differs = i;
    return rc;
}

/* a 64-bit hash as two exact doubles */
static void halves(uint64_t h, double *out)
{
    out[0] = (double)(uint32_t)h;
    out[1] = (double)(uint32_t)(h >> 32);
}

int train_dist_same_start(train_dist *td, pgrt_ctx *ctx, const train_opts *o, uint64_t step,
                          uint64_t total, const pgrt_adapter *start)
{
    if (!td->comm)
        return 0;
#define ADAPTER_WHAT                                                                          \
    ("the starting adapter (--adapter, --resume, --rank, --alpha, --targets, --seed, the "      \
     "patterns)")
    static const char *const what[] = {
        "the step it starts at (--resume)", "the run's steps (--steps, --epochs)", "--batch",
        "--seq", "--grad-accum", "--dtype", "--shard-optimizer", ADAPTER_WHAT, ADAPTER_WHAT};
#undef ADAPTER_WHAT
    double v[9] = {(double)step, (double)total, (double)o->batch, (double)o->seq,
                   (double)o->grad_accum, (double)o->dtype, (double)o->shard_optimizer};
    halves(adapter_hash(start), v + 7);
    int differs;
    if (agree(td, ctx, v, 9, &differs)) {
        fprintf(stderr, "ptxgen-train: rank %d of %d: comparing the ranks' starts: %s\n",
                td->d.rank, td->d.world, train_last_message());
        return TRAIN_EXIT_FAIL;
    }
    if (differs >= 0) {
        fprintf(stderr, "ptxgen-train: rank %d of %d: the ranks do not start alike: %s differs "
                        "(this rank: %.0f); every rank needs the same options, data, checkpoint "
                        "and adapter\n",
                td->d.rank, td->d.world, what[differs], v[differs]);
        return TRAIN_EXIT_USAGE;
    }
    return 0;
}

int train_dist_same_adapter(train_dist *td, pgrt_ctx *ctx, const pgrt_adapter *a)
{
    if (!td->comm)
        return 0;
    uint64_t h = adapter_hash(a);
    double v[2];
    halves(h, v);
    int differs;
    if (agree(td, ctx, v, 2, &differs)) {
        fprintf(stderr, "ptxgen-train: rank %d: comparing the adapters: %s\n", td->d.rank,
                train_last_message());
        return TRAIN_EXIT_FAIL;
    }
    if (differs >= 0) {
        fprintf(stderr, "ptxgen-train: rank %d of %d: the ranks' trained adapters differ (this "
                        "rank's hash %016llx); they should be identical to the bit\n",
                td->d.rank, td->d.world, (unsigned long long)h);
        return TRAIN_EXIT_FAIL;
    }
    if (td->d.rank == 0)
        fprintf(stderr, "ptxgen-train: the trained adapter is identical on all %d ranks (hash "
                        "%016llx)\n",
                td->d.world, (unsigned long long)h);
    return 0;
}

void train_dist_close(train_dist *td)
{
    pgrt_comm_destroy(&td->comm);
}
