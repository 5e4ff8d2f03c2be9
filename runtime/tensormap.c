/* SPDX-License-Identifier: MIT */
/*
 * Tensor maps (TMA descriptors) through cuTensorMapEncodeTiled. Every rule
 * the driver documents for a tiled map is checked here first, so a mistake
 * gets a message naming the argument instead of a bare
 * CUDA_ERROR_INVALID_VALUE.
 */
#include "rt_internal.h"

#include <string.h>

/* The driver's data type for a pg_type, -1 for none. Integer types map by
 * size and signedness: the copy moves bits, the type only matters for the
 * out-of-bounds fill. */
static int cu_dtype(pg_type t)
{
    switch (t) {
    case PG_B8:
    case PG_U8:
    case PG_S8:
        return CU_TENSOR_MAP_DATA_TYPE_UINT8;
    case PG_B16:
    case PG_U16:
    case PG_S16:
        return CU_TENSOR_MAP_DATA_TYPE_UINT16;
    case PG_B32:
    case PG_U32:
        return CU_TENSOR_MAP_DATA_TYPE_UINT32;
    case PG_S32:
        return CU_TENSOR_MAP_DATA_TYPE_INT32;
    case PG_B64:
    case PG_U64:
        return CU_TENSOR_MAP_DATA_TYPE_UINT64;
    case PG_S64:
        return CU_TENSOR_MAP_DATA_TYPE_INT64;
    case PG_F16:
        return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case PG_BF16:
        return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case PG_F32:
        return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case PG_F64:
        return CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
    default:
        return -1;
    }
}

#define FN "pgrt_tensor_map_encode"

static int check_args(const pgrt_ctx *ctx, pg_type dtype, uint32_t rank, pgrt_devptr base,
                      const uint64_t *dims, const uint64_t *strides, const uint32_t *box,
                      uint32_t swizzle, int *cu_type, int *cu_swizzle)
{
    const pgrt_device_info *info = &ctx->info;
    if (info->cc_major < 9)
        return rt_fail(PGRT_ETARGET, FN ": tensor maps need compute capability 9.0 or newer; "
                       "this device is %d.%d", info->cc_major, info->cc_minor);
    if (!ctx->drv.TensorMapEncodeTiled)
        return rt_fail(PGRT_EDRIVER, FN ": the driver lacks cuTensorMapEncodeTiled (CUDA 12.0); "
                       "this driver is CUDA %d.%d", info->driver_version / 1000,
                       (info->driver_version % 1000) / 10);
    *cu_type = (unsigned)dtype < PG_TYPE_COUNT ? cu_dtype(dtype) : -1;
    if (*cu_type < 0) {
        const char *n = (unsigned)dtype < PG_TYPE_COUNT ? pg_type_name(dtype) : NULL;
        return rt_fail(PGRT_EINVAL, FN ": dtype %s%s has no tensor map data type", n ? n : "#",
                       n ? "" : "(invalid)");
    }
    if (rank < 2 || rank > 5)
        return rt_fail(PGRT_EINVAL, FN ": rank %u is not 2..5", rank);
    RT_NONNULL(FN, dims, "dims");
    RT_NONNULL(FN, strides, "strides");
    RT_NONNULL(FN, box, "box");
    if (base == 0)
        return rt_fail(PGRT_EINVAL, FN ": base is a null device pointer");
    if (base % 16)
        return rt_fail(PGRT_EINVAL, FN ": base 0x%llx is not 16-byte aligned",
                       (unsigned long long)base);
    switch (swizzle) {
    case 0: *cu_swizzle = CU_TENSOR_MAP_SWIZZLE_NONE; break;
    case 32: *cu_swizzle = CU_TENSOR_MAP_SWIZZLE_32B; break;
    case 64: *cu_swizzle = CU_TENSOR_MAP_SWIZZLE_64B; break;
    case 128: *cu_swizzle = CU_TENSOR_MAP_SWIZZLE_128B; break;
    default:
        return rt_fail(PGRT_EINVAL, FN ": swizzle %u is not 0, 32, 64 or 128 (bytes of the span)",
                       swizzle);
    }
    uint64_t esize = pg_type_bits(dtype) / 8;
    for (uint32_t i = 0; i < rank; i++)
        if (dims[i] == 0 || dims[i] > (1ull << 32))
            return rt_fail(PGRT_ERANGE, FN ": dims[%u] = %llu is not 1..2^32", i,
                           (unsigned long long)dims[i]);
    /* The extent a stride must span: the whole of the dimension inside. */
    uint64_t inner = esize;
    for (uint32_t i = 0; i + 1 < rank; i++) {
        uint64_t st = strides[i];
        if (st % 16)
            return rt_fail(PGRT_EINVAL, FN ": strides[%u] = %llu bytes is not a multiple of 16", i,
                           (unsigned long long)st);
        if (st >= (1ull << 40))
            return rt_fail(PGRT_ERANGE, FN ": strides[%u] = %llu bytes is not below 2^40", i,
                           (unsigned long long)st);
        /* inner < 2^40 and dims <= 2^32: the product may pass 2^64. */
        uint64_t need = inner > UINT64_MAX / dims[i] ? UINT64_MAX : inner * dims[i];
        if (st < need)
            return rt_fail(PGRT_EINVAL, FN ": strides[%u] = %llu bytes is less than the %llu "
                           "bytes of dimension %u inside it (dims[%u] = %llu x %llu): the "
                           "stride is in bytes and elements would overlap",
                           i, (unsigned long long)st, (unsigned long long)need, i, i,
                           (unsigned long long)dims[i], (unsigned long long)inner);
        inner = st;
    }
    for (uint32_t i = 0; i < rank; i++)
        if (box[i] == 0 || box[i] > 256)
            return rt_fail(PGRT_ERANGE, FN ": box[%u] = %u is not 1..256", i, box[i]);
    uint64_t row = (uint64_t)box[0] * esize;
    if (row % 16)
        return rt_fail(PGRT_EINVAL, FN ": the box's inner row, box[0] = %u x %llu bytes = %llu "
                       "bytes, is not a multiple of 16", box[0], (unsigned long long)esize,
                       (unsigned long long)row);
    if (swizzle && row > swizzle)
        return rt_fail(PGRT_EINVAL, FN ": the box's inner row, box[0] = %u x %llu bytes = %llu "
                       "bytes, exceeds the %u-byte swizzle span", box[0],
                       (unsigned long long)esize, (unsigned long long)row, swizzle);
    return 0;
}

int pgrt_tensor_map_encode(pgrt_ctx *ctx, pgrt_tensor_map *out, pg_type dtype, uint32_t rank,
                           pgrt_devptr base, const uint64_t *dims, const uint64_t *strides,
                           const uint32_t *box, uint32_t swizzle)
{
    RT_NONNULL(FN, ctx, "ctx");
    RT_NONNULL(FN, out, "out");
    /* The type is 64-byte aligned (the driver's map is); a pointer that is
     * not cannot be used at all, so it is refused before any access. */
    if ((uintptr_t)(void *)out % 64)
        return rt_fail(PGRT_EINVAL, FN ": out (%p) is not 64-byte aligned: declare the map as a "
                       "pgrt_tensor_map object or allocate it with aligned_alloc(64, ...)",
                       (void *)out);
    /* A failed encode leaves no map a launch would take. */
    out->encoded = 0;
    int cu_type = 0, cu_swizzle = 0;
    int rc = check_args(ctx, dtype, rank, base, dims, strides, box, swizzle, &cu_type, &cu_swizzle);
    if (rc)
        return rc;
    if ((rc = rt_ctx_bind(ctx)))
        return rc;
    CUtensorMap map;
    memset(&map, 0, sizeof map);
    const uint32_t ones[5] = {1, 1, 1, 1, 1};
    CUresult r = ctx->drv.TensorMapEncodeTiled(
        &map, cu_type, rank, (void *)(uintptr_t)base, dims, strides, box, ones,
        CU_TENSOR_MAP_INTERLEAVE_NONE, cu_swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return rt_cu_fail(&ctx->drv, r, "cuTensorMapEncodeTiled", "%s rank %u base 0x%llx dims[0] "
                          "%llu box[0] %u swizzle %u", pg_type_name(dtype), rank,
                          (unsigned long long)base, (unsigned long long)dims[0], box[0], swizzle);
    memcpy(out->opaque, &map, sizeof map);
    memset(out->dims, 0, sizeof out->dims);
    memset(out->box, 0, sizeof out->box);
    memcpy(out->dims, dims, rank * sizeof *dims);
    memcpy(out->box, box, rank * sizeof *box);
    out->base = base;
    out->rank = rank;
    out->dtype = (uint32_t)dtype;
    out->swizzle = swizzle;
    out->encoded = PGRT_TENSOR_MAP_ENCODED;
    return 0;
}

int pgrt_tensor_map_encode_2d(pgrt_ctx *ctx, pgrt_tensor_map *out, pg_type dtype,
                              pgrt_devptr base, uint64_t rows, uint64_t cols, uint64_t row_pitch,
                              uint32_t box_rows, uint32_t box_cols, uint32_t swizzle)
{
    const uint64_t dims[2] = {cols, rows};
    const uint64_t strides[1] = {row_pitch};
    const uint32_t box[2] = {box_cols, box_rows};
    return pgrt_tensor_map_encode(ctx, out, dtype, 2, base, dims, strides, box, swizzle);
}

int pgrt_tensor_map_encode_3d(pgrt_ctx *ctx, pgrt_tensor_map *out, pg_type dtype,
                              pgrt_devptr base, const uint64_t dims[3], const uint64_t strides[2],
                              const uint32_t box[3], uint32_t swizzle)
{
    return pgrt_tensor_map_encode(ctx, out, dtype, 3, base, dims, strides, box, swizzle);
}
