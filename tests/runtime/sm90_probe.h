/* SPDX-License-Identifier: MIT */
/*
 * Two probe kernels for the sm_90 launch paths against the fake driver
 * (sm90.c and the bad-input catalogue): tma_probe takes a tensor
 * map by value and a pointer, smem_probe a pointer. Their PTX is written
 * out (the builder has no 128-byte parameter yet) and only their
 * signatures matter: the fake records launches, it runs none. Knobs set
 * the launch: blocks, dynamic shared bytes and the cluster.
 */
#ifndef PTXGEN_SM90_PROBE_H
#define PTXGEN_SM90_PROBE_H

#include "ptxgen/pgrt.h"
#include "ptxgen/pgrt_attention.h"
#include "ptxgen/pgrt_clip.h"
#include "ptxgen/pgrt_gemm.h"
#include "ptxgen/pgrt_kernel.h"
#include "ptxgen/pgrt_prewarm.h"
#include "ptxgen/pgrt_train.h"
#include "ptxgen/pgk.h"
#include "ptxgen/ptxgen.h"

#include <stdio.h>

/* The header for a target and ISA, then both entries. */
static inline void probe_ptx(char *buf, size_t len, const char *target, const char *isa)
{
    snprintf(buf, len,
             ".version %s\n.target %s\n.address_size 64\n\n"
             ".visible .entry tma_probe(\n"
             "\t.param .align 64 .b8 tma_probe_param_0[128],\n"
             "\t.param .u64 tma_probe_param_1\n)\n{\n\tret;\n}\n\n"
             ".visible .entry smem_probe(\n"
             "\t.param .u64 smem_probe_param_0\n)\n{\n\tret;\n}\n",
             isa, target);
}

enum { PROBE_GRID, PROBE_SMEM, PROBE_CX, PROBE_CY, PROBE_CZ, PROBE_NKNOBS };

static const pgk_knob probe_knobs[PROBE_NKNOBS] = {
    {"blocks", 8, 1, 1u << 20, "grid.x"},
    {"smem", 0, 0, 1u << 20, "dynamic shared bytes"},
    {"cx", 0, 0, 64, "cluster.x (0: no cluster)"},
    {"cy", 0, 0, 64, "cluster.y"},
    {"cz", 0, 0, 64, "cluster.z"},
};

static inline int probe_launch(const pgk_desc *d, const uint32_t *kn, pgk_launch *out)
{
    (void)d;
    out->grid[0] = kn[PROBE_GRID];
    out->grid[1] = out->grid[2] = 1;
    out->block[0] = 128;
    out->block[1] = out->block[2] = 1;
    out->shared_bytes = kn[PROBE_SMEM];
    out->cluster[0] = kn[PROBE_CX];
    out->cluster[1] = kn[PROBE_CY];
    out->cluster[2] = kn[PROBE_CZ];
    return 0;
}

static const pgk_param tma_probe_params[] = {
    {"tmap", PG_B8, false, true},
    {"out", PG_U64, true, false},
};
static const pgk_param smem_probe_params[] = {
    {"out", PG_U64, true, false},
};

static const pgk_desc tma_probe_desc = {
    .name = "tma_probe", .summary = "a tensor map and a pointer", .params = tma_probe_params,
    .nparams = 2, .knobs = probe_knobs, .nknobs = PROBE_NKNOBS, .min_target = PG_SM_90,
    .launch = probe_launch};
static const pgk_desc smem_probe_desc = {
    .name = "smem_probe", .summary = "a pointer", .params = smem_probe_params, .nparams = 1,
    .knobs = probe_knobs, .nknobs = PROBE_NKNOBS, .min_target = PG_SM_90,
    .launch = probe_launch};

/* Knobs: blocks, dynamic shared bytes, cluster. */
static inline pgk_knobs probe_knobs_of(uint32_t blocks, uint32_t smem, uint32_t cx, uint32_t cy,
                                       uint32_t cz)
{
    pgk_knobs k = {{0}};
    k.v[PROBE_GRID] = blocks;
    k.v[PROBE_SMEM] = smem;
    k.v[PROBE_CX] = cx;
    k.v[PROBE_CY] = cy;
    k.v[PROBE_CZ] = cz;
    return k;
}

#endif /* PTXGEN_SM90_PROBE_H */
