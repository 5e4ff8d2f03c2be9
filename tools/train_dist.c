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

int train_dist_same_adapter(train_dist *td, pgrt_stream *s, const pgrt_adapter *a)
{
    if (!td->comm)
        return 0;
    uint64_t h = adapter_hash(a);
    /* the two halves exactly as doubles; the same everywhere iff min = max */
    double lo[2] = {(double)(uint32_t)h, (double)(uint32_t)(h >> 32)};
    double hi[2] = {lo[0], lo[1]};
    int rc = pgrt_comm_all_reduce_host(td->comm, s, lo, 2, PGRT_COMM_MIN);
    if (!rc)
        rc = pgrt_comm_all_reduce_host(td->comm, s, hi, 2, PGRT_COMM_MAX);
    if (rc) {
        fprintf(stderr, "ptxgen-train: rank %d: comparing the adapters: %s\n", td->d.rank,
                train_last_message());
        return TRAIN_EXIT_FAIL;
    }
    if (lo[0] != hi[0] || lo[1] != hi[1]) {
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
