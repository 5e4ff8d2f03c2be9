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
static int open_sources(const train_opts *o, const pgrt_model_config *mc, train_source **src,
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

/* One ptxgen-train --model run's inputs and what it holds, in the order
 * it takes them; hf_close gives everything back. */
typedef struct hf_run {
    train_opts o;
    char ckpt[PATH_MAX];      /* --resume's checkpoint directory, or "" */
    char msg[2 * PATH_MAX + 512];
    bool resume, writes;      /* writes: rank 0 (or one process) */
    train_state st;           /* --resume's trainer_state.json */
    train_dist td;
    pgrt_model_files *mf;
    pgrt_adapter *ad, *final, *grads;
    train_source *src, *eval;
    char start_pos[TRAIN_POS_MAX], eval_pos[TRAIN_POS_MAX];
    uint64_t total;
    char *run_config;
    double *losses[2];        /* --mode both */
    pgrt_ctx *ctx;
    train_log *log;
} hf_run;

/* A runtime call's failure as ptxgen-train says it; code is the exit
 * status to give. */
static int rt_said(int rc, int code)
{
    if (rc)
        fprintf(stderr, "ptxgen-train: %s%s\n", pgrt_err_unavailable(rc) ? "no GPU: " : "",
                pgrt_last_message()[0] ? train_last_message() : pgrt_strerror(rc));
    return code;
}

/* --resume: the checkpoint's state, and the same number of ranks. */
static int check_resume(hf_run *r)
{
    if (!r->resume)
        return 0;
    if (train_state_read(r->ckpt, &r->st, r->msg, sizeof r->msg))
        return train_bad("--resume: %s", r->msg);
    /* a step is world x --batch rows: another world is another run */
    if (r->st.world != (uint64_t)r->o.world) {
        char how[64] = "one process (no --gpus, no WORLD_SIZE)";
        if (r->st.world > 1)
            snprintf(how, sizeof how, "--gpus %llu", (unsigned long long)r->st.world);
        return train_bad("--resume %s: the run has %llu rank%s, this one %d: a step is ranks x "
                         "--batch rows; resume with %s",
                         r->ckpt, (unsigned long long)r->st.world, r->st.world == 1 ? "" : "s",
                         r->o.world, how);
    }
    return 0;
}

/* The model, the starting adapter (the checkpoint's, --adapter's or a
 * fresh one), the data at its starting place and the run's steps, the
 * outputs checked, and the host buffers of the results. */
static int load_inputs(hf_run *r)
{
    train_opts *o = &r->o;
    int rc, code;
    if ((rc = pgrt_model_open(o->model, &r->mf)))
        return rt_said(rc, TRAIN_EXIT_USAGE);
    const pgrt_model_config *mc = pgrt_model_files_config(r->mf);
    if (r->resume || o->adapter) {
        if ((rc = pgrt_adapter_load(r->resume ? r->ckpt : o->adapter, mc, &r->ad)))
            return rt_said(rc, TRAIN_EXIT_USAGE);
    } else {
        pgrt_adapter_config ac = {.r = (int)o->rank, .alpha = o->alpha, .targets = o->targets};
        if (train_opts_patterns(o, &ac))
            return TRAIN_EXIT_USAGE;
        if ((rc = pgrt_adapter_init(mc, &ac, (uint64_t)o->seed, &r->ad)))
            return rt_said(rc, TRAIN_EXIT_USAGE);
    }
    if (open_sources(o, mc, &r->src, &r->eval, r->msg, sizeof r->msg)) {
        fprintf(stderr, "ptxgen-train: %s\n", r->msg);
        return TRAIN_EXIT_USAGE;
    }
    if (r->eval)
        r->eval->ops->position_get(r->eval, r->eval_pos);
    if ((code = train_opts_total_steps(o, r->src->ops->rows_per_epoch(r->src), &r->total)))
        return code;
    if (r->resume) {
        if (r->src->ops->position_set(r->src, r->st.position, r->msg, sizeof r->msg))
            return train_bad("--resume %s: %s", r->ckpt, r->msg);
        if (r->st.step >= r->total)
            return train_bad("--resume %s: the run is at step %llu of %llu already; a larger "
                             "--steps or --epochs extends it",
                             r->ckpt, (unsigned long long)r->st.step,
                             (unsigned long long)r->total);
    }
    r->src->ops->position_get(r->src, r->start_pos);
    if (r->writes && ((code = check_aliases(o, r->mf)) ||
                      (code = check_outputs(o, r->resume ? r->ckpt : ""))))
        return code;
    if (!(r->run_config = train_opts_json(o)))
        return train_bad("out of host memory");
    if ((rc = pgrt_adapter_init(mc, &r->ad->cfg, 0, &r->final)) ||
        (o->save_grads && (rc = pgrt_adapter_init(mc, &r->ad->cfg, 0, &r->grads))))
        return rt_said(rc, TRAIN_EXIT_FAIL);
    /* --mode both compares the two runs' losses step by step */
    for (int m = 0; m < 2 && o->modes == TRAIN_MODE_BOTH; m++)
        if (!(r->losses[m] = calloc((size_t)r->total, sizeof(double)))) {
            fprintf(stderr, "ptxgen-train: out of host memory\n");
            return TRAIN_EXIT_FAIL;
        }
    return 0;
}

/* The device, the other ranks (and that all start alike), the log. */
static int join(hf_run *r)
{
    int rc, code;
    if ((rc = pgrt_ctx_create(&r->ctx, &(pgrt_ctx_params){.device = train_dist_device(&r->td)})))
        return rt_said(rc, TRAIN_EXIT_FAIL);
    if ((code = train_dist_join(&r->td, &r->o, r->ctx)) ||
        (code = train_dist_same_start(&r->td, r->ctx, &r->o, r->resume ? r->st.step : 0,
                                      r->total, r->ad)))
        return code;
    if (!r->o.log_json)
        return 0;
    long long keep = -1;
    char abs[PATH_MAX + 64];
    train_path_absolute(r->o.log_json, abs, sizeof abs);
    if (r->resume && !strcmp(abs, r->st.log_json))
        keep = (long long)r->st.log_bytes;
    if (train_log_open(r->o.log_json, keep, &r->log, r->msg, sizeof r->msg)) {
        warn_escaped(r->msg);
        return TRAIN_EXIT_FAIL;
    }
    return 0;
}

/* The run, eager, graphed or both from the same start (then compared:
 * *verdict is 1 when they differ past 1e-5), and its speed said. */
static int run_modes(hf_run *r, int *verdict)
{
    train_opts *o = &r->o;
    int last = 0, code;
    train_run_out ro[2] = {{0}};
    train_signals_install();
    for (int m = 0; m < 2; m++) {
        if (!(o->modes & (1 << m)))
            continue;
        /* both modes from the same start */
        if (r->src->ops->position_set(r->src, r->start_pos, r->msg, sizeof r->msg)) {
            warn_escaped(r->msg);
            return TRAIN_EXIT_FAIL;
        }
        bool last_mode = !(o->modes & (1 << (m + 1))) || m == 1;
        train_run_in in = {
            .o = o,
            .ctx = r->ctx,
            .mf = r->mf,
            .start = r->ad,
            .src = r->src,
            .eval = r->eval,
            .eval_start = r->eval_pos,
            .total = r->total,
            .resume = r->resume ? &r->st : NULL,
            .resume_dir = r->ckpt,
            .run_config = r->run_config,
            .log = last_mode ? r->log : NULL,
            .graph = m == 1,
            .keep_grads = r->grads != NULL,
            .comm = r->td.comm,
        };
        ro[m].loss = r->losses[m];
        ro[m].final = r->final;
        ro[m].grads = r->grads;
        if ((code = train_run(&in, &ro[m])))
            return code;
        last = m;
    }
    *verdict = 0;
    if (o->modes == TRAIN_MODE_BOTH) {
        double worst = 0;
        for (uint64_t i = 0; i < ro[0].steps; i++) {
            double e = fabs(r->losses[1][i] - r->losses[0][i]) /
                       fmax(fabs(r->losses[0][i]), 1e-30);
            worst = fmax(worst, e);
        }
        if (r->writes)
            fprintf(stderr, "eager and graphed losses: worst relative difference %.3g%s\n",
                    worst, worst <= 1e-5 ? "" : " (more than 1e-5)");
        *verdict = worst <= 1e-5 ? 0 : TRAIN_EXIT_FAIL;
    }
    uint64_t counted = ro[last].steps > 1 ? ro[last].steps - 1 : 1;
    if (r->writes && ro[last].steps > 1)
        fprintf(stderr, "%.2f ms/step, %.0f tokens/s (steps after the first)\n",
                ro[last].steady_ms / (double)counted,
                (double)o->batch * (double)o->world * (double)o->seq * (double)o->grad_accum *
                    (double)counted / ro[last].steady_ms * 1e3);
    return 0;
}

/* Each output on its own, the trained adapter first: one that fails (a
 * full disk) is reported and leaves the others written, each whole
 * (pgrt_adapter_save writes its pair atomically). */
static int write_outputs(hf_run *r, int code)
{
    train_opts *o = &r->o;
    if (o->output_dir && r->writes) {
        char fin[PATH_MAX + 64];
        snprintf(fin, sizeof fin, "%s/%s", o->output_dir, TRAIN_FINAL_DIR);
        if (pgrt_adapter_save(r->final, fin)) {
            output_failed("--output-dir");
            code = TRAIN_EXIT_FAIL;
        } else {
            snprintf(r->msg, sizeof r->msg, "the trained adapter: %s", fin);
            char safe[4 * sizeof r->msg];
            pg_text_escape(safe, sizeof safe, r->msg);
            fprintf(stderr, "%s\n", safe);
        }
    }
    if (o->save_adapter && pgrt_adapter_save(r->final, o->save_adapter)) {
        output_failed("--save-adapter");
        code = TRAIN_EXIT_FAIL;
    }
    if (o->save_grads && pgrt_adapter_save(r->grads, o->save_grads)) {
        output_failed("--save-grads");
        code = TRAIN_EXIT_FAIL;
    }
    return code;
}

/* Everything given back; code is the exit status. A failure with the
 * other ranks (often gone): device work behind a collective may never
 * end, and freeing behind it would wait for ever; everything written is
 * whole, so the process leaves now. */
static int hf_close(hf_run *r, int code)
{
    fflush(stderr);
    free(r->losses[0]);
    free(r->losses[1]);
    free(r->run_config);
    train_log_close(&r->log);
    if (code && r->td.comm) {
        pgrt_comm_abort(r->td.comm);
        fflush(stdout);
        fflush(stderr);
        _exit(code);
    }
    train_dist_close(&r->td);
    pgrt_ctx_destroy(&r->ctx);
    train_source_close(&r->eval);
    train_source_close(&r->src);
    pgrt_adapter_destroy(&r->grads);
    pgrt_adapter_destroy(&r->final);
    pgrt_adapter_destroy(&r->ad);
    pgrt_model_close(&r->mf);
    train_opts_free(&r->o);
    return code;
}

int train_hf_main(int argc, char **argv)
{
    hf_run run = {0}, *r = &run;
    int code = train_opts_load(argc, argv, &r->o, r->ckpt, sizeof r->ckpt);
    if (code) {
        train_opts_free(&r->o);
        return code < 0 ? 0 : code;
    }
    if (r->o.gpus > 1) {
        code = launch_ranks(&r->o, argc, argv);
        train_opts_free(&r->o);
        return code;
    }
    if ((code = train_dist_setup(&r->o, &r->td))) {
        train_opts_free(&r->o);
        return code;
    }
    /* several GPUs: only rank 0 writes; the others train and check */
    r->writes = train_dist_writes(&r->td);
    if (!r->writes) {
        free(r->o.log_json);
        free(r->o.save_adapter);
        free(r->o.save_grads);
        r->o.log_json = r->o.save_adapter = r->o.save_grads = NULL;
    }
    r->resume = r->ckpt[0] != '\0';
    int verdict = 0;
    if ((code = check_resume(r)) || (code = load_inputs(r)) || (code = join(r)) ||
        (code = run_modes(r, &verdict)) ||
        (code = train_dist_same_adapter(&r->td, r->ctx, r->final)))
        return hf_close(r, code);
    return hf_close(r, write_outputs(r, verdict));
}
