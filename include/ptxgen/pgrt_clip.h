/* SPDX-License-Identifier: MIT */
/*
 * pgrt clip: fused global-norm gradient clipping over many buffers, with
 * no host synchronization. The conventions of pgrt.h hold here.
 */
#ifndef PTXGEN_PGRT_CLIP_H
#define PTXGEN_PGRT_CLIP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pgrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- fused gradient clipping */

/* State for clipping one set of f32 gradient buffers by their global L2
 * norm, sized once: a partials buffer of sum(pgk_squared_sum_num_blocks(n_i))
 * floats (buffers of 0 elements take none) and a 2-float result on the
 * device, [0] = scale, [1] = norm. The kernels of both paths (the three
 * per-buffer ones and the two _multi ones, see pgrt_clip_set_multi) are
 * loaded here, so a run can be captured. */
typedef struct pgrt_clip pgrt_clip;

PGRT_API int pgrt_clip_create(pgrt_ctx *ctx, const size_t *sizes, size_t nbufs, pgrt_clip **out);
PGRT_API void pgrt_clip_destroy(pgrt_clip **c);
/* One step on stream s: a squared_sum_reduce per buffer into its slice of
 * the partials, one clip_scale_reduce, a gradient_clip_gpu_scale per
 * buffer (or, by default, one launch of each _multi kernel for all buffers:
 * see pgrt_clip_set_multi). No host synchronisation; captures into a graph (max_norm is then
 * part of the graph). grads[i] must be f32 with sizes[i] elements (NULL
 * where sizes[i] is 0). max_norm
 * must be finite and > 0. The same state serves any buffers of these sizes
 * (one layer after another), but runs sharing a state must be ordered on
 * one stream. */
PGRT_API int pgrt_clip_run(pgrt_clip *c, pgrt_stream *s, pgrt_buf *const *grads, size_t nbufs,
                           float max_norm);
/* Copy [scale, norm] of the last run to the host: waits for stream s. Either
 * pointer may be NULL. */
PGRT_API int pgrt_clip_result(pgrt_clip *c, pgrt_stream *s, float *scale, float *norm);
/* The device buffer of [scale, norm], owned by the state: kernels that
 * follow in the same stream (an optimizer) may read the scale from it. */
PGRT_API pgrt_buf *pgrt_clip_result_buf(pgrt_clip *c);
/* Number of partial sums (the partials buffer's length). */
PGRT_API uint32_t pgrt_clip_partials(const pgrt_clip *c);
/* Choose the launches of pgrt_clip_run. multi (the default): one
 * squared_sum_reduce_multi, clip_scale_reduce, one
 * gradient_clip_gpu_scale_multi, walking a device table of the buffers that
 * the state owns; the results (partials, norm, scale, gradients) are
 * bitwise those of the per-buffer launches. The table is uploaded on s
 * (ordered, asynchronous) when a run's buffers differ from the last; a
 * capturing stream cannot upload, so a capture whose buffers differ from
 * the table's records the per-buffer launches instead. A captured table is
 * never rewritten (a later change of buffers gets a new one, freed with the
 * state), so graphs stay valid. Not thread-safe with runs of the state. */
PGRT_API int pgrt_clip_set_multi(pgrt_clip *c, bool multi);
/* Whether runs take the multi path (wanted and possible: the grids of all
 * blocks fit one launch). */
PGRT_API bool pgrt_clip_multi(const pgrt_clip *c);
/* Upload (on s, ordered) the multi path's table for these buffers without
 * running, so that a capture of a run with them records the multi launches
 * even when no eager run came first. Outside capture only (PGRT_ECAPTURE
 * while s captures); does nothing on the per-buffer path or when every
 * table is taken by graphs. Not thread-safe with runs of the state. */
PGRT_API int pgrt_clip_prepare(pgrt_clip *c, pgrt_stream *s, pgrt_buf *const *grads,
                               size_t nbufs);

#ifdef __cplusplus
}
#endif

#endif /* PTXGEN_PGRT_CLIP_H */
