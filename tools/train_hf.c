/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-train --model DIR: LoRA fine-tuning of a Hugging Face Qwen2/LLaMA
 * checkpoint (pgrt_lm.h), a command line over the model layer.
 *
 * Every input is read and checked (config, weights, adapter, the data
 * against the model's vocabulary and tokenizer, a checkpoint to resume,
 * the device memory the run needs), every option in the type and range
 * it is used in (train_opts.c), and every destination
 * for writability, before the first launch; a problem is one line on
 * stderr and exit 2, with no output file written. Then the run
 * (train_loop.c) writes the log line by line and checkpoints as it goes;
 * the outputs of the end are written each on its own: adapters and
 * gradients as atomic pairs (pgrt_adapter_save).
 */
#define _XOPEN_SOURCE 700
#include "train_hf.h"
#include "train_dist.h"
#include "train_launch.h"
#include "train_loop.h"
#include "train_paths.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

const char *train_last_message(void)
{
    static _Thread_local char buf[8192];
    const char *m = pgrt_last_message();
    pg_text_escape(buf, sizeof buf, m);
    /* escaped already when escaping would only double its backslashes */
    const char *a = m, *b = buf;
    while (*a && *b) {
        if (*a == '\\' && b[0] == '\\' && b[1] == '\\')
            b++;
        else if (*a != *b)
            break;
        a++;
        b++;
    }
    return !*a && !*b ? m : buf;
}

static int by_ms_desc(const void *a, const void *b)
{
    double x = ((const pgrt_lm_kernel_time *)a)->ms, y = ((const pgrt_lm_kernel_time *)b)->ms;
    return (x < y) - (x > y);
}

void train_print_profile(pgrt_lm_stats *st, uint64_t steps)
{
    static const char *const kinds[PGRT_LM_TIME_COUNT] = {"gemm", "attention", "ce", "rest",
                                                          "lora"};
    double *t = st->time_ms, all = t[0] + t[1] + t[2] + t[3] + t[4];
    double ns = (double)steps;
    fprintf(stderr,
            "time split over %llu steps (GPU time of each launch): GEMMs %.1f ms (%.0f%%; "
            "of them f32 LoRA products %.1f ms), attention %.1f ms (%.0f%%), cross-entropy "
            "%.1f ms (%.0f%%), rest %.1f ms (%.0f%%) a step\n",
            (unsigned long long)steps, (t[0] + t[4]) / ns, 100 * (t[0] + t[4]) / all, t[4] / ns,
            t[1] / ns, 100 * t[1] / all, t[2] / ns, 100 * t[2] / all, t[3] / ns,
            100 * t[3] / all);
    /* each kernel's time a step, the largest first */
    qsort(st->kernels, st->kernel_count, sizeof st->kernels[0], by_ms_desc);
    fprintf(stderr, "%-32s %-9s %9s %9s %10s\n", "kernel", "kind", "ms/step", "launches",
            "us/launch");
    for (size_t i = 0; i < st->kernel_count; i++) {
        const pgrt_lm_kernel_time *k = &st->kernels[i];
        fprintf(stderr, "%-32s %-9s %9.3f %9.0f %10.1f\n", k->name,
                (unsigned)k->kind < PGRT_LM_TIME_COUNT ? kinds[k->kind] : "?", k->ms / ns,
                (double)k->launches / ns, k->launches ? 1e3 * k->ms / (double)k->launches : 0.0);
    }
}

/* A failed library call on an output: its message names the path
 * (escaped by the model layer), this line the option. */
static void output_failed(const char *opt)
{
    fprintf(stderr, "ptxgen-train: %s: %s\n", opt, train_last_message());
}

/* No output may replace another output or an input. The one exception is
 * --save-adapter naming the --adapter directory: continuing a fine-tune in
 * place is common, the adapter is read whole before the run, and
 * pgrt_adapter_save replaces the pair atomically (with the config
 * unchanged, by one rename of the weights), so the old adapter is there
 * until the new one is. */
static int check_aliases(const train_opts *o, const pgrt_model_files *mf)
{
    size_t nm = pgrt_model_file_count(mf);
    const char **mfiles = calloc(nm ? nm : 1, sizeof *mfiles);
    if (!mfiles)
        return train_bad("out of host memory");
    for (size_t i = 0; i < nm; i++)
        mfiles[i] = pgrt_model_file_path(mf, i);
    char af[2][PATH_MAX + 64];
    const char *afiles[2] = {af[0], af[1]};
    if (o->adapter) {
        snprintf(af[0], sizeof af[0], "%s/adapter_config.json", o->adapter);
        snprintf(af[1], sizeof af[1], "%s/adapter_model.safetensors", o->adapter);
    }
    static const char *const written[] = {"adapter_model.safetensors", "adapter_config.json"};
    static const char *const in_output[] = {TRAIN_FINAL_DIR};
    const train_path outs[] = {
        {"--save-adapter", o->save_adapter, written, 2, 1},
        {"--save-grads", o->save_grads, written, 2, 1},
        {"--log-json", o->log_json, NULL, 0, 0},
        {"--output-dir", o->output_dir, in_output, 1, 1},
    };
    const train_path ins[] = {
        {"--model", o->model, mfiles, nm, 1},
        {"--adapter", o->adapter, afiles, 2, 1},
        {"--data", o->data, NULL, 0, 0},
        {"--tokens", o->tokens, NULL, 0, 0},
        {"--eval-data", o->eval_data, NULL, 0, 0},
        {"--config", o->config, NULL, 0, 0},
    };
    char msg[16384];
    int clash = train_paths_clash(outs, sizeof outs / sizeof outs[0], ins,
                                  sizeof ins / sizeof ins[0], "--save-adapter", "--adapter", msg,
                                  sizeof msg);
    free(mfiles);
    return clash ? train_bad("%s", msg) : 0;
}

/* Every destination can be written, checked before the first launch: a
 * typo in an output path must not cost the run. pgrt_adapter_save_check
 * and pgrt_file_write_check make and remove a temporary where the output
 * will go, so permissions and read-only mounts show too. */
static int check_outputs(const train_opts *o, const char *ckpt_dir)
{
    if (o->save_adapter && pgrt_adapter_save_check(o->save_adapter)) {
        output_failed("--save-adapter");
        return TRAIN_EXIT_USAGE;
    }
    if (o->save_grads && pgrt_adapter_save_check(o->save_grads)) {
        output_failed("--save-grads");
        return TRAIN_EXIT_USAGE;
    }
    if (o->log_json && pgrt_file_write_check(o->log_json)) {
        output_failed("--log-json");
        return TRAIN_EXIT_USAGE;
    }
    if (!o->output_dir)
        return 0;
    if (pgrt_adapter_save_check(o->output_dir)) {
        output_failed("--output-dir");
        return TRAIN_EXIT_USAGE;
    }
    /* one run's checkpoints in a directory: another run there would mix
     * its own in, and --resume take whichever step is highest */
    char name[256];
    if (train_ckpt_any(o->output_dir, name, sizeof name)) {
        char a[PATH_MAX + 64], b[PATH_MAX + 64];
        train_path_absolute(o->output_dir, a, sizeof a);
        if (ckpt_dir[0]) {
            char parent[PATH_MAX + 64];
            snprintf(parent, sizeof parent, "%s/..", ckpt_dir);
            train_path_absolute(parent, b, sizeof b);
        }
        if (!ckpt_dir[0] || strcmp(a, b))
            return train_bad("--output-dir %s holds checkpoints of another run (%s): --resume "
                             "%s continues that one; or name another directory",
                             o->output_dir, name, o->output_dir);
    }
    return 0;
}

/* The training data and the evaluation's, of one kind: --data's (with
 * --eval-data a prepared file or flat tokens, read the same way, in file
 * order, one pass) or --tokens'. The model's tokenizer.json, when its
 * directory has one, must be the one --data was prepared with. Notes on
 * the data go to stderr; a refusal is msg. */
static int open_sources(const train_opts *o, const pgrt_hf_config *mc, train_source **src,
                        train_source **eval, char *msg, size_t cap)
{
    bool shuffle = o->data_order == TRAIN_ORDER_SHUFFLE;
    if (o->tokens)
        return train_source_tokens("--tokens", o->tokens, mc->vocab, (int)o->seq, shuffle,
                                   (uint64_t)o->seed, src, msg, cap) ||
               (o->eval_data && train_source_tokens("--eval-data", o->eval_data, mc->vocab,
                                                    (int)o->seq, false, 0, eval, msg, cap));
    char tj[PATH_MAX + 64], note[2048];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", o->model);
    train_data_params p = {
        .opt = "--data",
        .path = o->data,
        .vocab = mc->vocab,
        .tokenizer_json = access(tj, F_OK) == 0 ? tj : NULL,
        .seq = (int)o->seq,
        .pad = o->packing == TRAIN_PACKING_PAD,
        .shuffle = shuffle,
        .seed = (uint64_t)o->seed,
    };
    if (train_source_data(&p, src, note, sizeof note, msg, cap))
        return -1;
    if (note[0])
        fprintf(stderr, "ptxgen-train: %s\n", note);
    if (!o->eval_data)
        return 0;
    p.opt = "--eval-data";
    p.path = o->eval_data;
    p.shuffle = false;
    p.seed = 0;
    p.one_pass = true;
    if (train_source_data(&p, eval, note, sizeof note, msg, cap))
        return -1;
    if (note[0])
        fprintf(stderr, "ptxgen-train: %s\n", note);
    return 0;
}

static void warn_escaped(const char *line)
{
    char safe[4 * 8192];
    pg_text_escape(safe, sizeof safe, line);
    fprintf(stderr, "ptxgen-train: %s\n", safe);
}

/* --gpus N: this command again as N ranks on this host, --gpus left out
 * (train_launch.h). */
static int launch_ranks(const train_opts *o, int argc, char **argv)
{
    if (getenv("WORLD_SIZE"))
        return train_bad("--gpus %lld: this process is a rank of a launched run already "
                         "(WORLD_SIZE=%s); start the run with --gpus or with torchrun's "
                         "variables, not both", o->gpus, getenv("WORLD_SIZE"));
    char **args = calloc((size_t)argc + 1, sizeof *args);
    if (!args)
        return train_bad("out of host memory");
    int n = 0;
    args[n++] = argv[0];
    for (int i = 1; i < argc; i++) {
        bool value = train_opts_takes_value(argv[i]) && i + 1 < argc;
        if (strcmp(argv[i], "--gpus") != 0) {
            args[n++] = argv[i];
            if (value)
                args[n++] = argv[i + 1];
        }
        i += value;
    }
    /* the grace after a failure or a signal: the ranks' own bound (their
     * watchdog) and a little */
    train_launch_opts lo = {.gpus = (int)o->gpus, .argv = args, .grace_s = o->dist_timeout + 5};
    int status = train_launch(&lo);
    free(args);
    return status;
}

int train_hf_main(int argc, char **argv)
{
    train_opts o;
    char ckpt[PATH_MAX], msg[2 * PATH_MAX + 512];
    int code = train_opts_load(argc, argv, &o, ckpt, sizeof ckpt);
    if (code) {
        train_opts_free(&o);
        return code < 0 ? 0 : code;
    }
    if (o.gpus > 1) {
        code = launch_ranks(&o, argc, argv);
        train_opts_free(&o);
        return code;
    }
    train_dist td;
    if ((code = train_dist_setup(&o, &td))) {
        train_opts_free(&o);
        return code;
    }
    /* several GPUs: only rank 0 writes; the others train and check */
    const bool writes = train_dist_writes(&td);
    if (!writes) {
        free(o.log_json);
        free(o.save_adapter);
        free(o.save_grads);
        o.log_json = o.save_adapter = o.save_grads = NULL;
    }
    pgrt_model_files *mf = NULL;
    pgrt_adapter *ad = NULL, *final = NULL, *grads = NULL;
    train_source *src = NULL, *eval = NULL;
    train_log *log = NULL;
    pgrt_ctx *ctx = NULL;
    char *run_config = NULL;
    double *losses[2] = {NULL, NULL};
    train_state st;
    char start_pos[TRAIN_POS_MAX] = "", eval_pos[TRAIN_POS_MAX] = "";
    const bool resume = ckpt[0] != '\0';
    int rc = 0;
    code = TRAIN_EXIT_USAGE;

    if (resume && train_state_read(ckpt, &st, msg, sizeof msg)) {
        train_bad("--resume: %s", msg);
        goto out;
    }
    /* a step is world x --batch rows: another world is another run */
    if (resume && st.world != (uint64_t)o.world) {
        char how[64] = "one process (no --gpus, no WORLD_SIZE)";
        if (st.world > 1)
            snprintf(how, sizeof how, "--gpus %llu", (unsigned long long)st.world);
        train_bad("--resume %s: the run has %llu rank%s, this one %d: a step is ranks x --batch "
                  "rows; resume with %s",
                  ckpt, (unsigned long long)st.world, st.world == 1 ? "" : "s", o.world, how);
        goto out;
    }
    if ((rc = pgrt_model_open(o.model, &mf)))
        goto fail;
    const pgrt_hf_config *mc = pgrt_model_hf_config(mf);
    if (resume) {
        if ((rc = pgrt_adapter_load(ckpt, mc, &ad)))
            goto fail;
    } else if (o.adapter) {
        if ((rc = pgrt_adapter_load(o.adapter, mc, &ad)))
            goto fail;
    } else {
        pgrt_adapter_config ac = {.r = (int)o.rank, .alpha = o.alpha, .targets = o.targets};
        if (train_opts_patterns(&o, &ac))
            goto out;
        if ((rc = pgrt_adapter_init(mc, &ac, (uint64_t)o.seed, &ad)))
            goto fail;
    }
    if (open_sources(&o, mc, &src, &eval, msg, sizeof msg)) {
        fprintf(stderr, "ptxgen-train: %s\n", msg);
        goto out;
    }
    if (eval)
        eval->ops->position_get(eval, eval_pos);
    uint64_t total;
    if ((code = train_opts_total_steps(&o, src->ops->rows_per_epoch(src), &total)))
        goto out;
    code = TRAIN_EXIT_USAGE;
    if (resume) {
        if (src->ops->position_set(src, st.position, msg, sizeof msg)) {
            train_bad("--resume %s: %s", ckpt, msg);
            goto out;
        }
        if (st.step >= total) {
            train_bad("--resume %s: the run is at step %llu of %llu already; a larger --steps "
                      "or --epochs extends it",
                      ckpt, (unsigned long long)st.step, (unsigned long long)total);
            goto out;
        }
    }
    src->ops->position_get(src, start_pos);
    if (writes && ((code = check_aliases(&o, mf)) || (code = check_outputs(&o, resume ? ckpt : ""))))
        goto out;
    code = TRAIN_EXIT_USAGE;
    if (!(run_config = train_opts_json(&o))) {
        train_bad("out of host memory");
        goto out;
    }
    code = TRAIN_EXIT_FAIL;
    if ((rc = pgrt_adapter_init(mc, &ad->cfg, 0, &final)) ||
        (o.save_grads && (rc = pgrt_adapter_init(mc, &ad->cfg, 0, &grads))))
        goto fail;
    /* --mode both compares the two runs' losses step by step */
    for (int m = 0; m < 2 && o.modes == TRAIN_MODE_BOTH; m++)
        if (!(losses[m] = calloc((size_t)total, sizeof(double)))) {
            fprintf(stderr, "ptxgen-train: out of host memory\n");
            goto out;
        }
    if ((rc = pgrt_ctx_create(&ctx, &(pgrt_ctx_params){.device = train_dist_device(&td)})))
        goto fail;
    if ((code = train_dist_join(&td, &o, ctx)) ||
        (code = train_dist_same_start(&td, ctx, &o, resume ? st.step : 0, total, ad)))
        goto out;
    code = TRAIN_EXIT_FAIL;
    if (o.log_json) {
        long long keep = -1;
        char abs[PATH_MAX + 64];
        train_path_absolute(o.log_json, abs, sizeof abs);
        if (resume && !strcmp(abs, st.log_json))
            keep = (long long)st.log_bytes;
        if (train_log_open(o.log_json, keep, &log, msg, sizeof msg)) {
            warn_escaped(msg);
            goto out;
        }
    }
    train_signals_install();
    int last = 0, verdict = 0;
    train_run_out ro[2] = {{0}};
    for (int m = 0; m < 2; m++) {
        if (!(o.modes & (1 << m)))
            continue;
        /* both modes from the same start */
        if (src->ops->position_set(src, start_pos, msg, sizeof msg)) {
            warn_escaped(msg);
            goto out;
        }
        bool last_mode = !(o.modes & (1 << (m + 1))) || m == 1;
        train_run_in in = {
            .o = &o,
            .ctx = ctx,
            .mf = mf,
            .start = ad,
            .src = src,
            .eval = eval,
            .eval_start = eval_pos,
            .total = total,
            .resume = resume ? &st : NULL,
            .resume_dir = ckpt,
            .run_config = run_config,
            .log = last_mode ? log : NULL,
            .graph = m == 1,
            .keep_grads = grads != NULL,
            .comm = td.comm,
        };
        ro[m].loss = losses[m];
        ro[m].final = final;
        ro[m].grads = grads;
        if ((code = train_run(&in, &ro[m])))
            goto out;
        last = m;
    }
    if (o.modes == TRAIN_MODE_BOTH) {
        double worst = 0;
        for (uint64_t i = 0; i < ro[0].steps; i++) {
            double e = fabs(losses[1][i] - losses[0][i]) / fmax(fabs(losses[0][i]), 1e-30);
            worst = fmax(worst, e);
        }
        if (writes)
            fprintf(stderr, "eager and graphed losses: worst relative difference %.3g%s\n",
                    worst, worst <= 1e-5 ? "" : " (more than 1e-5)");
        verdict = worst <= 1e-5 ? 0 : TRAIN_EXIT_FAIL;
    }
    uint64_t counted = ro[last].steps > 1 ? ro[last].steps - 1 : 1;
    if (writes && ro[last].steps > 1)
        fprintf(stderr, "%.2f ms/step, %.0f tokens/s (steps after the first)\n",
                ro[last].steady_ms / (double)counted,
                (double)o.batch * (double)o.world * (double)o.seq * (double)o.grad_accum *
                    (double)counted / ro[last].steady_ms * 1e3);
    if ((code = train_dist_same_adapter(&td, ctx, final)))
        goto out;
    /* Each output on its own, the trained adapter first: one that fails
     * (a full disk) is reported and leaves the others written, each whole
     * (pgrt_adapter_save writes its pair atomically). */
    code = verdict;
    if (o.output_dir && writes) {
        char fin[PATH_MAX + 64];
        snprintf(fin, sizeof fin, "%s/%s", o.output_dir, TRAIN_FINAL_DIR);
        if (pgrt_adapter_save(final, fin)) {
            output_failed("--output-dir");
            code = TRAIN_EXIT_FAIL;
        } else {
            snprintf(msg, sizeof msg, "the trained adapter: %s", fin);
            char safe[4 * sizeof msg];
            pg_text_escape(safe, sizeof safe, msg);
            fprintf(stderr, "%s\n", safe);
        }
    }
    if (o.save_adapter && pgrt_adapter_save(final, o.save_adapter)) {
        output_failed("--save-adapter");
        code = TRAIN_EXIT_FAIL;
    }
    if (o.save_grads && pgrt_adapter_save(grads, o.save_grads)) {
        output_failed("--save-grads");
        code = TRAIN_EXIT_FAIL;
    }
    goto out;
fail:
    if (rc)
        fprintf(stderr, "ptxgen-train: %s%s\n", pgrt_err_unavailable(rc) ? "no GPU: " : "",
                pgrt_last_message()[0] ? train_last_message() : pgrt_strerror(rc));
out:
    fflush(stderr);
    free(losses[0]);
    free(losses[1]);
    free(run_config);
    train_log_close(&log);
    if (code && td.comm) {
        /* a failure with the other ranks (often gone): device work behind
         * a collective may never end, and freeing behind it would wait for
         * ever; everything written is whole, so leave now */
        pgrt_comm_abort(td.comm);
        fflush(stdout);
        fflush(stderr);
        _exit(code);
    }
    train_dist_close(&td);
    pgrt_ctx_destroy(&ctx);
    train_source_close(&eval);
    train_source_close(&src);
    pgrt_adapter_destroy(&grads);
    pgrt_adapter_destroy(&final);
    pgrt_adapter_destroy(&ad);
    pgrt_model_close(&mf);
    train_opts_free(&o);
    return code;
}
