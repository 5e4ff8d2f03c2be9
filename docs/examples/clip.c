/* SPDX-License-Identifier: MIT */
#include <ptxgen/pgrt.h>
#include <ptxgen/pgrt_clip.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                            \
    do {                                                                       \
        int err_ = (call);                                                     \
        if (err_) {                                                            \
            fprintf(stderr, "%s: %s\n", pgrt_err_name(err_),                   \
                    pgrt_last_message());                                      \
            return err_ == PGRT_ENODRIVER || err_ == PGRT_ENODEVICE ? 77 : 1;  \
        }                                                                      \
    } while (0)

int main(void)
{
    pgrt_ctx *ctx = NULL;
    CHECK(pgrt_ctx_create(&ctx, NULL)); /* device 0, libcuda.so.1 */

    pgrt_device_info info;
    CHECK(pgrt_ctx_device_info(ctx, &info));
    printf("%s, %s\n", info.name, pg_target_name(info.target));

    /* Two gradient buffers: a 1536 x 16 matrix and a 1536 vector. */
    const size_t sizes[2] = {1536 * 16, 1536};
    pgrt_buf *grads[2] = {NULL, NULL};
    float *host = malloc(sizes[0] * sizeof *host);
    for (int i = 0; i < 2; i++) {
        for (size_t j = 0; j < sizes[i]; j++)
            host[j] = 0.01f * (float)((j * 37 + (size_t)i) % 101) - 0.5f;
        CHECK(pgrt_buf_alloc(ctx, PG_F32, sizes[i], &grads[i]));
        CHECK(pgrt_buf_upload(grads[i], 0, host, sizes[i]));
    }

    /* Sized once; loads the three kernels (so it can be captured later). */
    pgrt_clip *clip = NULL;
    CHECK(pgrt_clip_create(ctx, sizes, 2, &clip));

    pgrt_stream *stream = NULL;
    CHECK(pgrt_stream_create(ctx, &stream));

    /* One step, eagerly: 2 squared sums, 1 reduction, 2 scalings. */
    CHECK(pgrt_clip_run(clip, stream, grads, 2, 1.0f));
    float scale, norm;
    CHECK(pgrt_clip_result(clip, stream, &scale, &norm));
    printf("norm %g, scale %g\n", (double)norm, (double)scale);

    /* The same step as a graph, replayed every training step. */
    pgrt_graph *graph = NULL;
    CHECK(pgrt_capture_begin(stream));
    int err = pgrt_clip_run(clip, stream, grads, 2, 1.0f);
    if (err) {
        pgrt_capture_abort(stream);
        CHECK(err);
    }
    CHECK(pgrt_capture_end(stream, &graph));
    for (int step = 0; step < 3; step++)
        CHECK(pgrt_graph_launch(graph, stream));
    CHECK(pgrt_clip_result(clip, stream, &scale, &norm));
    printf("after clipping: norm %g\n", (double)norm);

    pgrt_graph_destroy(&graph);
    pgrt_stream_destroy(&stream);
    pgrt_clip_destroy(&clip);
    for (int i = 0; i < 2; i++)
        pgrt_buf_destroy(&grads[i]);
    free(host);
    pgrt_ctx_destroy(&ctx);
    return 0;
}
