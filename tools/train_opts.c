/* SPDX-License-Identifier: MIT */
/*
 * ptxgen-train --model's options: one table gives each its name (the flag
 * without dashes, which is also its key in --config files and in a
 * checkpoint's run_config.json), its type and range, its default and its
 * line in --help. Values from the command line and from files go through
 * the same setter, so that a value means, and is refused, the same way
 * wherever it comes from.
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include "train_opts.h"
#include "train_ckpt.h"
#include "train_version.h"

#include "pgrt_json.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

/* The ranges of the float options (docs/model.md). 0 is allowed for lr
 * (nothing moves: loss and gradients only), max-norm (no clipping) and
 * weight decay. Above: lr 1 and weight decay 1 (lr x wd <= 1 keeps the
 * decay from flipping a weight's sign); below: 1e-12, under which an AdamW
 * step is lost to f32 rounding of any weight above 1e-4 and which keeps
 * lr x wd >= 1e-24, a normal float. alpha: the LoRA scale alpha / rank
 * (rank 1 to 4096) is then between 2.4e-10 and 1e6. */
#define LR_MIN 1e-12
#define LR_MAX 1.0
#define MAX_NORM_MIN 1e-12
#define MAX_NORM_MAX 1e12
#define WD_MIN 1e-12
#define WD_MAX 1.0
#define ALPHA_MIN 1e-6
#define ALPHA_MAX 1e6

enum { G_MODEL, G_LORA, G_OPTIM, G_SCHED, G_EVAL, G_CKPT, G_OUT, G_PERF, G_DIST, G_COUNT };
static const char *const group_names[G_COUNT] = {
    "model and data", "LoRA", "optimisation", "learning-rate schedule",
    "evaluation",     "checkpoints and resume", "output", "performance",
    "several GPUs (data parallel; docs/model.md)",
};

enum kind { K_PATH, K_INT, K_FLOAT, K_ENUM, K_TARGETS, K_SWITCH, K_PATTERN };

#define F_FREE 1u     /* may differ from the checkpoint's on --resume */
#define F_NOFILE 2u   /* never in a file: --config, --resume */
#define F_REQUIRED 4u /* no default */

enum {
    O_MODEL, O_ADAPTER, O_DATA, O_TOKENS, O_PACKING, O_DATA_ORDER, O_BATCH, O_SEQ, O_SEED, O_DTYPE,
    O_RANK, O_ALPHA, O_TARGETS, O_RANK_PATTERN, O_ALPHA_PATTERN,
    O_STEPS, O_EPOCHS, O_GRAD_ACCUM, O_LR, O_WEIGHT_DECAY, O_MAX_NORM,
    O_LR_SCHEDULE, O_WARMUP_STEPS, O_WARMUP_RATIO, O_MIN_LR_RATIO,
    O_EVAL_DATA, O_EVAL_EVERY, O_EVAL_BATCHES,
    O_OUTPUT_DIR, O_SAVE_EVERY, O_SAVE_TOTAL_LIMIT, O_RESUME,
    O_SAVE_ADAPTER, O_SAVE_GRADS, O_LOG_JSON, O_LOG_EVERY, O_CONFIG,
    O_MODE, O_HEAD_CHUNK, O_PROFILE, O_RECOMPUTE, O_MAX_MEMORY,
    O_GPUS, O_DIST_INIT, O_DIST_TIMEOUT, O_SHARD_OPTIMIZER,
    O_COUNT
};

typedef struct optdef {
    const char *name, *arg;
    int group, kind;
    size_t off;
    long long lo, hi;          /* K_INT */
    double flo, fhi;           /* K_FLOAT */
    bool zero_ok;              /* K_FLOAT: 0 too */
    const char *const *values; /* K_ENUM, NULL-terminated; stored as index + base */
    int base;
    unsigned flags;
    const char *def, *help;
} optdef;

static const char *const dtype_v[] = {"bf16", "f32", NULL};
static const char *const order_v[] = {"shuffle", "sequential", NULL};
static const char *const packing_v[] = {"pack", "pad", NULL};
static const char *const sched_v[] = {"constant", "linear", "cosine", NULL};
static const char *const mode_v[] = {"eager", "graph", "both", NULL};
static const char *const recompute_v[] = {"none", "layers", "auto", NULL};

#define OFF(f) offsetof(train_opts, f)
#define PATH(n, a, m, g, f, fl, d, h)                                                          \
    [n] = {.name = a, .arg = m, .group = g, .kind = K_PATH, .off = OFF(f), .flags = fl,        \
           .def = d, .help = h}
#define INT(n, a, m, g, f, l, u, fl, d, h)                                                     \
    [n] = {.name = a, .arg = m, .group = g, .kind = K_INT, .off = OFF(f), .lo = l, .hi = u,    \
           .flags = fl, .def = d, .help = h}
#define FLT(n, a, g, f, l, u, z, fl, d, h)                                                     \
    [n] = {.name = a, .arg = "X", .group = g, .kind = K_FLOAT, .off = OFF(f), .flo = l,        \
           .fhi = u, .zero_ok = z, .flags = fl, .def = d, .help = h}
#define ENU(n, a, m, g, f, v, b, fl, d, h)                                                     \
    [n] = {.name = a, .arg = m, .group = g, .kind = K_ENUM, .off = OFF(f), .values = v,        \
           .base = b, .flags = fl, .def = d, .help = h}

static const optdef defs[O_COUNT] = {
    PATH(O_MODEL, "model", "DIR", G_MODEL, model, F_REQUIRED, NULL,
         "the Hugging Face checkpoint: config.json and model.safetensors (or the index and "
         "its shards), Qwen2 or LLaMA"),
    PATH(O_ADAPTER, "adapter", "DIR", G_MODEL, adapter, 0, "a fresh one from --rank, --alpha, "
         "--targets and --seed", "start from this PEFT LoRA adapter"),
    PATH(O_DATA, "data", "FILE", G_MODEL, data, F_REQUIRED, NULL,
         "the training data: a .pgtok of ptxgen-prepare (documents, trained on their target "
         "tokens only), or a flat int32 token file read as one document"),
    PATH(O_TOKENS, "tokens", "FILE", G_MODEL, tokens, F_REQUIRED, NULL,
         "the training data as before --data: little-endian int32 token ids, cut into rows of "
         "--seq ids (one document a row; a last partial row is not used), the rows shuffled"),
    ENU(O_PACKING, "packing", "pack|pad", G_MODEL, packing, packing_v, 0, 0, "pack",
        "--data's rows: pack: documents one after another filling every row, positions and "
        "attention restarting at each; pad: one document a row, cut to --seq and padded"),
    ENU(O_DATA_ORDER, "data-order", "shuffle|sequential", G_MODEL, data_order, order_v, 0, 0,
        "shuffle", "the documents (--tokens: the rows) of each epoch in an order drawn from "
        "--seed and the epoch, or in file order"),
    INT(O_BATCH, "batch", "B", G_MODEL, batch, 1, 1000, F_REQUIRED, NULL,
        "rows a micro-batch"),
    INT(O_SEQ, "seq", "S", G_MODEL, seq, 2, PGRT_LM_MAX_SEQ, F_REQUIRED, NULL, "tokens a row "
        "(the model bounds batch x seq too)"),
    INT(O_SEED, "seed", "N", G_MODEL, seed, 0, INT64_MAX, 0, "0",
        "the data order and a fresh adapter's initialisation"),
    ENU(O_DTYPE, "dtype", "bf16|f32", G_MODEL, dtype, dtype_v, 0, 0, "bf16",
        "bf16: base weights in bf16 on the device, everything else f32; f32: all f32"),
    INT(O_RANK, "rank", "R", G_LORA, rank, 1, 4096, 0, "16", "a fresh adapter's rank"),
    FLT(O_ALPHA, "alpha", G_LORA, alpha, ALPHA_MIN, ALPHA_MAX, false, 0, "32",
        "a fresh adapter's lora_alpha (the scale is alpha / rank)"),
    [O_TARGETS] = {.name = "targets", .arg = "LIST", .group = G_LORA, .kind = K_TARGETS,
                   .off = OFF(targets), .def = "all seven",
                   .help = "a fresh adapter's modules: a comma list of q,k,v,o,gate,up,down "
                           "(or their *_proj names)"},
    /* PEFT's rank_pattern and alpha_pattern as text (pattern_value) */
    [O_RANK_PATTERN] = {.name = "rank-pattern", .arg = "KEY=R,...", .group = G_LORA,
                        .kind = K_PATTERN, .off = OFF(rank_pattern), .def = "none",
                        .help = "a fresh adapter's rank_pattern: a pair whose module path "
                                "(model.layers.I.self_attn.q_proj, ...) KEY matches as PEFT "
                                "matches it (the whole path or its tail after a dot; a regular "
                                "expression) has rank R (1 to 4096) instead of --rank, the "
                                "first KEY that matches winning; keys without commas"},
    [O_ALPHA_PATTERN] = {.name = "alpha-pattern", .arg = "KEY=A,...", .group = G_LORA,
                         .kind = K_PATTERN, .off = OFF(alpha_pattern), .def = "none",
                         .help = "a fresh adapter's alpha_pattern: lora_alpha A (1e-06 to "
                                 "1e+06) instead of --alpha for the pairs KEY matches, as "
                                 "--rank-pattern"},
    INT(O_STEPS, "steps", "N", G_OPTIM, steps, 1, TRAIN_MAX_STEPS, F_FREE | F_REQUIRED, NULL,
        "optimizer steps of the run; give --steps or --epochs. On --resume, a new total "
        "extends (or shortens) the run"),
    INT(O_EPOCHS, "epochs", "N", G_OPTIM, epochs, 1, 1000000, F_FREE | F_REQUIRED, NULL,
        "passes over the training rows, instead of --steps: ceil(N x rows / (batch x "
        "grad-accum)) optimizer steps"),
    INT(O_GRAD_ACCUM, "grad-accum", "N", G_OPTIM, grad_accum, 1, 1024, 0, "1",
        "micro-batches of --batch rows an optimizer step; the loss is the mean over all of "
        "the step's targets"),
    FLT(O_LR, "lr", G_OPTIM, lr, LR_MIN, LR_MAX, true, 0, "1e-3",
        "the peak learning rate (0: loss and gradients only, nothing moves)"),
    FLT(O_WEIGHT_DECAY, "weight-decay", G_OPTIM, weight_decay, WD_MIN, WD_MAX, true, 0, "0.01",
        "AdamW's decoupled weight decay"),
    FLT(O_MAX_NORM, "max-norm", G_OPTIM, max_norm, MAX_NORM_MIN, MAX_NORM_MAX, true, 0, "1",
        "clip the LoRA gradients to this global L2 norm (0: no clipping)"),
    ENU(O_LR_SCHEDULE, "lr-schedule", "constant|linear|cosine", G_SCHED, schedule, sched_v, 0,
        0, "constant", "after the warmup: lr, a linear decay, or a cosine decay to the floor "
        "at the last step"),
    INT(O_WARMUP_STEPS, "warmup-steps", "N", G_SCHED, warmup_steps, 0, TRAIN_MAX_STEPS, 0, "0",
        "steps of linear warmup from 0 to lr"),
    FLT(O_WARMUP_RATIO, "warmup-ratio", G_SCHED, warmup_ratio, 0, 1, false, 0, "none",
        "warmup as a fraction of the run's steps (ceil), instead of --warmup-steps"),
    FLT(O_MIN_LR_RATIO, "min-lr-ratio", G_SCHED, min_lr_ratio, 0, 1, false, 0, "0",
        "the floor of the decay, a fraction of lr"),
    PATH(O_EVAL_DATA, "eval-data", "FILE", G_EVAL, eval_data, F_FREE, "none",
         "validation data read as the training data is (with --data: a .pgtok or flat "
         "tokens, its targets only, rows as --packing; with --tokens: flat tokens), in file "
         "order, every row once"),
    INT(O_EVAL_EVERY, "eval-every", "K", G_EVAL, eval_every, 0, TRAIN_MAX_STEPS, F_FREE, "0",
        "evaluate every K optimizer steps (0: after the last step only)"),
    INT(O_EVAL_BATCHES, "eval-batches", "N", G_EVAL, eval_batches, 0, 1000000000, F_FREE,
        "0: the whole set", "micro-batches an evaluation takes from the start of the set"),
    PATH(O_OUTPUT_DIR, "output-dir", "DIR", G_CKPT, output_dir, F_FREE, "none: no checkpoint",
         "checkpoints go to DIR/checkpoint-<step>/, the trained adapter to DIR/final/"),
    INT(O_SAVE_EVERY, "save-every", "K", G_CKPT, save_every, 0, TRAIN_MAX_STEPS, F_FREE, "0",
        "a checkpoint every K optimizer steps (0: at the end only; SIGINT or SIGTERM saves "
        "one too)"),
    INT(O_SAVE_TOTAL_LIMIT, "save-total-limit", "N", G_CKPT, save_total_limit, 0, 1000000,
        F_FREE, "0: keep all", "keep the newest N checkpoints, removing older ones"),
    PATH(O_RESUME, "resume", "DIR", G_CKPT, resume, F_FREE | F_NOFILE, "none",
         "continue the run of an --output-dir (its latest complete checkpoint) or of one "
         "checkpoint directory; its run_config.json gives every option not given again"),
    PATH(O_SAVE_ADAPTER, "save-adapter", "DIR", G_OUT, save_adapter, F_FREE, "none",
         "the trained adapter, in PEFT's format, when the run ends"),
    PATH(O_SAVE_GRADS, "save-grads", "DIR", G_OUT, save_grads, F_FREE, "none",
         "the first step's LoRA gradients before clipping, in PEFT's format"),
    PATH(O_LOG_JSON, "log-json", "FILE", G_OUT, log_json, F_FREE, "none",
         "one JSON object a line per optimizer step and per evaluation, flushed as it goes; "
         "appended to on --resume"),
    INT(O_LOG_EVERY, "log-every", "K", G_OUT, log_every, 1, 1000000, F_FREE, "10",
        "a progress line every K steps when stderr is not a terminal (on one, a line that "
        "rewrites itself)"),
    PATH(O_CONFIG, "config", "FILE", G_OUT, config, F_FREE | F_NOFILE, "none",
         "options from a JSON object whose keys are the long names without dashes ({\"lr\": "
         "1e-4, \"grad-accum\": 4}); the command line wins. A checkpoint's run_config.json "
         "is one"),
    ENU(O_MODE, "mode", "eager|graph|both", G_PERF, modes, mode_v, 1, F_FREE, "eager",
        "each step as launches, as one CUDA graph, or both from the same start (compared; no "
        "checkpoints)"),
    INT(O_HEAD_CHUNK, "head-chunk", "ROWS", G_PERF, head_chunk, 0, 1 << 20, 0,
        "0: chosen from the vocabulary", "rows of the LM head's logits chunk"),
    [O_PROFILE] = {.name = "profile", .group = G_PERF, .kind = K_SWITCH, .off = OFF(profile),
                   .flags = F_FREE, .def = "off",
                   .help = "time every kernel (eager; slower steps) and print the split"},
    ENU(O_RECOMPUTE, "recompute", "auto|none|layers", G_PERF, recompute, recompute_v, 0, F_FREE,
        "auto", "activation recompute: layers keep only their input and run their forward "
        "again in the backward (the same bits, less memory, a slower step); auto: the fewest "
        "layers that make the run fit the GPU's free memory, or --max-memory"),
    FLT(O_MAX_MEMORY, "max-memory", G_PERF, max_memory, 0.25, 1e6, true, F_FREE,
        "0: the GPU's free memory", "GiB of GPU memory the process may have in use once the "
        "model is built (with --recompute auto)"),
    INT(O_GPUS, "gpus", "N", G_DIST, gpus, 1, 64, F_FREE | F_NOFILE, "1",
        "start N ranks of this command on this host, one a GPU (RANK, WORLD_SIZE, LOCAL_RANK, "
        "MASTER_ADDR=127.0.0.1, a free MASTER_PORT, NCCL_NVLS_ENABLE=0), each training on its "
        "--batch rows of the step's N x --batch; Ctrl-C stops them all. Without it the "
        "process joins the run torchrun's variables describe, if any"),
    PATH(O_DIST_INIT, "dist-init", "URL", G_DIST, dist_init, F_FREE | F_NOFILE,
         "MASTER_ADDR:MASTER_PORT", "where the ranks meet instead: tcp://HOST:PORT, or "
         "file:PATH on a file system every rank sees (PATH must not exist yet)"),
    FLT(O_DIST_TIMEOUT, "dist-timeout", G_DIST, dist_timeout, 1, 86400, false,
        F_FREE | F_NOFILE, "300", "seconds a rank waits for the others (to meet, or in a "
        "step) before it gives up and the run ends with an error on every rank"),
    [O_SHARD_OPTIMIZER] = {.name = "shard-optimizer", .group = G_DIST, .kind = K_SWITCH,
                           .off = OFF(shard_optimizer), .flags = F_FREE, .def = "off",
                           .help = "several GPUs: each rank keeps AdamW's moments of 1/N of "
                                   "the LoRA parameters and updates that slice (ZeRO-1: "
                                   "reduce-scatter, update, all-gather); saves 8 bytes a "
                                   "parameter x (N-1)/N of GPU memory, same results"},
};

_Static_assert(O_COUNT <= 64, "train_opts.given has a bit an option");

/* a string field (CFIELD's const applies to the pointer, not the text) */
typedef char *str;

#define FIELD(o, d, T) ((T *)(void *)((char *)(o) + (d)->off))
#define CFIELD(o, d, T) ((const T *)(const void *)((const char *)(o) + (d)->off))

static const char *const short_targets[PGRT_LINEAR_COUNT] = {"q", "k", "v", "o",
                                                             "gate", "up", "down"};

/* Where the value being set came from: "" (the command line) or "--config
 * FILE: ", prefixed to every message. */
static char where[PATH_MAX + 64];

#if defined(__GNUC__)
__attribute__((format(printf, 1, 0)))
#endif
static void vsay(const char *fmt, va_list ap)
{
    /* the line echoes arguments and file contents: escaped whole, as the
     * model layer's messages are (pg_text_escape) */
    char raw[8192], line[8192 + sizeof where], safe[4 * sizeof line];
    vsnprintf(raw, sizeof raw, fmt, ap);
    snprintf(line, sizeof line, "%s%s", where, raw);
    pg_text_escape(safe, sizeof safe, line);
    fprintf(stderr, "ptxgen-train: %s\n", safe);
}

void train_say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(fmt, ap);
    va_end(ap);
}

int train_bad(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(fmt, ap);
    va_end(ap);
    return TRAIN_EXIT_USAGE;
}

const char *train_version(void) { return PTXGEN_VERSION; }

void train_opts_version(FILE *f)
{
    fprintf(f, "ptxgen-train %s\n", PTXGEN_VERSION);
}

void train_opts_default(train_opts *o)
{
    memset(o, 0, sizeof *o);
    o->data_order = TRAIN_ORDER_SHUFFLE;
    o->dtype = PGRT_LM_BF16;
    o->rank = 16;
    o->alpha = 32;
    o->targets = (1u << PGRT_LINEAR_COUNT) - 1;
    o->grad_accum = 1;
    o->gpus = 1;
    o->dist_timeout = 300;
    o->world = 1;
    o->lr = 1e-3;
    o->weight_decay = 0.01;
    o->max_norm = 1.0;
    o->schedule = PGRT_LM_SCHED_CONSTANT;
    o->log_every = 10;
    o->modes = TRAIN_MODE_EAGER;
    o->recompute = PGRT_LM_RECOMPUTE_AUTO;
}

void train_opts_free(train_opts *o)
{
    for (int i = 0; i < O_COUNT; i++)
        if (defs[i].kind == K_PATH || defs[i].kind == K_PATTERN) {
            free(*FIELD(o, &defs[i], char *));
            *FIELD(o, &defs[i], char *) = NULL;
        }
}

static int int_value(const optdef *d, const char *v, long long *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (*end || errno || end == v)
        return train_bad("--%s: '%s' is not an integer", d->name, v);
    if (x < d->lo || x > d->hi)
        return train_bad("--%s %s is out of range (%lld to %lld)", d->name, v, d->lo, d->hi);
    *out = x;
    return 0;
}

/* A value the run uses as a float (pgrt_lm_params, the LoRA scale): 0 where
 * zero is allowed, else within [lo, hi]. Both bounds are normal floats far
 * from the ends of the f32 range, so that a value in range is finite as a
 * float and neither it nor the products the step forms with it (lr x
 * weight decay, alpha / rank) flush to zero or go subnormal: --lr 1e-50
 * would silently train with 0, --lr 1e300 fail after the model is on the
 * device, --alpha 1e300 give an infinite scale. */
static int float_value(const optdef *d, const char *v, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    /* ERANGE with a finite x is an underflow: a value written non-zero that
     * rounds to 0 or a subnormal double, refused by the range below */
    bool tiny = errno == ERANGE && isfinite(x);
    if (*end || end == v || (errno && !tiny) || !isfinite(x))
        return train_bad("--%s: '%s' is not a finite number", d->name, v);
    if (!(d->zero_ok && x == 0 && !tiny) && !(x >= d->flo && x <= d->fhi)) {
        if (d->zero_ok)
            return train_bad("--%s %s is out of range (0, or %g to %g)", d->name, v, d->flo,
                             d->fhi);
        return train_bad("--%s %s is out of range (%g to %g)", d->name, v, d->flo, d->fhi);
    }
    *out = x;
    return 0;
}

static int enum_value(const optdef *d, const char *v, int *out)
{
    int n = 0;
    for (; d->values[n]; n++)
        if (!strcmp(v, d->values[n])) {
            *out = n + d->base;
            return 0;
        }
    char list[256] = "";
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
                                i == 0 ? "" : i == n - 1 ? " or " : ", ", d->values[i]);
    return train_bad("--%s takes %s", d->name, list);
}

static int targets_value(const char *v, unsigned *out)
{
    unsigned t = 0;
    const char *p = v;
    while (*p) {
        size_t n = strcspn(p, ",");
        int found = -1;
        for (int i = 0; i < PGRT_LINEAR_COUNT; i++) {
            const char *full = pgrt_linear_name((pgrt_linear)i);
            if ((strlen(short_targets[i]) == n && !strncmp(p, short_targets[i], n)) ||
                (strlen(full) == n && !strncmp(p, full, n)))
                found = i;
        }
        if (found < 0)
            return train_bad("--targets: '%.*s' is not one of q,k,v,o,gate,up,down", (int)n, p);
        t |= 1u << found;
        p += n;
        if (*p == ',')
            p++;
    }
    if (!t)
        return train_bad("--targets needs a value");
    *out = t;
    return 0;
}

/* --rank-pattern, --alpha-pattern: KEY=VALUE[,KEY=VALUE...], a key ending
 * at its entry's last '=' (keys hold no comma), values in --rank's or
 * --alpha's range, each key once and one the adapter reader takes;
 * appended to ac in their order when ac is not NULL. */
static int pattern_value(const optdef *d, const char *v, pgrt_adapter_config *ac)
{
    bool alpha = d->off == OFF(alpha_pattern);
    pgrt_adapter_config *c = ac ? ac : calloc(1, sizeof *c);
    if (!c)
        return train_bad("out of host memory");
    int rc = 0;
    for (const char *p = v; *p && !rc;) {
        size_t n = strcspn(p, ",");
        const char *eq = NULL;
        for (const char *q = p; q < p + n; q++)
            if (*q == '=')
                eq = q;
        char key[PGRT_ADAPTER_KEY], num[64], *end;
        size_t kn = eq ? (size_t)(eq - p) : 0, vn = eq ? (size_t)(p + n - eq - 1) : 0;
        const pgrt_adapter_pattern *map = alpha ? c->alpha_pattern : c->rank_pattern;
        int have = alpha ? c->n_alpha_pattern : c->n_rank_pattern;
        if (!eq || kn == 0 || vn == 0 || vn >= sizeof num) {
            rc = train_bad("--%s: '%.*s' is not KEY=%s", d->name, (int)n, p, alpha ? "A" : "R");
            break;
        }
        if (kn >= sizeof key) {
            rc = train_bad("--%s: key '%.48s...' is longer than %d bytes", d->name, p,
                           PGRT_ADAPTER_KEY - 1);
            break;
        }
        memcpy(key, p, kn);
        key[kn] = '\0';
        memcpy(num, eq + 1, vn);
        num[vn] = '\0';
        errno = 0;
        double x = alpha ? strtod(num, &end) : (double)strtoll(num, &end, 10);
        bool ok = *end == '\0' && !errno && (alpha ? x >= ALPHA_MIN && x <= ALPHA_MAX
                                                    : x >= 1 && x <= 4096);
        if (!ok)
            rc = train_bad("--%s: '%s': '%s' is not %s", d->name, key, num,
                           alpha ? "a lora_alpha from 1e-06 to 1e+06 (as --alpha)"
                                 : "a rank from 1 to 4096 (as --rank)");
        for (int i = 0; !rc && i < have; i++)
            if (!strcmp(map[i].key, key))
                rc = train_bad("--%s: '%s' is given twice", d->name, key);
        if (!rc && have >= PGRT_ADAPTER_PATTERNS)
            rc = train_bad("--%s: more than %d keys", d->name, PGRT_ADAPTER_PATTERNS);
        /* what is left to refuse: a key that does not compile */
        if (!rc && pgrt_adapter_pattern_add(c, alpha, key, x))
            rc = train_bad("--%s: '%s' is not a regular expression the adapter reader takes "
                           "(POSIX extended, as PEFT's Python ones are read: docs/model.md)",
                           d->name, key);
        p += n;
        if (*p == ',')
            p++;
    }
    if (!ac)
        free(c);
    return rc;
}

int train_opts_patterns(const train_opts *o, pgrt_adapter_config *ac)
{
    int rc = 0;
    if (o->rank_pattern)
        rc = pattern_value(&defs[O_RANK_PATTERN], o->rank_pattern, ac);
    if (!rc && o->alpha_pattern)
        rc = pattern_value(&defs[O_ALPHA_PATTERN], o->alpha_pattern, ac);
    return rc;
}

/* Option i of o set from text v (a switch: v NULL sets it, "false"
 * clears it). */
static int set_value(train_opts *o, int i, const char *v)
{
    const optdef *d = &defs[i];
    if (d->kind == K_SWITCH) {
        *FIELD(o, d, bool) = !v || strcmp(v, "false") != 0;
        o->given |= 1ull << i;
        return 0;
    }
    if (!v || !*v)
        return train_bad("--%s needs a value", d->name);
    int rc = 0;
    switch (d->kind) {
    case K_PATTERN: /* checked, then kept as the text given */
    case K_PATH: {
        if (d->kind == K_PATTERN && (rc = pattern_value(d, v, NULL)))
            break;
        char *s = strdup(v);
        if (!s)
            return train_bad("out of host memory");
        free(*FIELD(o, d, char *));
        *FIELD(o, d, char *) = s;
        break;
    }
    case K_INT:
        rc = int_value(d, v, FIELD(o, d, long long));
        break;
    case K_FLOAT:
        rc = float_value(d, v, FIELD(o, d, double));
        break;
    case K_ENUM:
        rc = enum_value(d, v, FIELD(o, d, int));
        break;
    default:
        rc = targets_value(v, FIELD(o, d, unsigned));
        break;
    }
    if (!rc)
        o->given |= 1ull << i;
    return rc;
}

static int find_opt(const char *name)
{
    for (int i = 0; i < O_COUNT; i++)
        if (!strcmp(name, defs[i].name))
            return i;
    return -1;
}

/* Options that mean something only with another: refused without it,
 * and not written to run_config.json without it. */
static const int needs[][2] = {
    {O_SAVE_EVERY, O_OUTPUT_DIR}, {O_SAVE_TOTAL_LIMIT, O_OUTPUT_DIR},
    {O_EVAL_EVERY, O_EVAL_DATA},  {O_EVAL_BATCHES, O_EVAL_DATA},
    {O_PACKING, O_DATA},
};

/* Two options of which one layer may give only one. */
static const int exclusive[][2] = {
    {O_STEPS, O_EPOCHS}, {O_WARMUP_STEPS, O_WARMUP_RATIO}, {O_DATA, O_TOKENS}};

static int check_exclusive(const train_opts *o)
{
    for (size_t k = 0; k < sizeof exclusive / sizeof exclusive[0]; k++) {
        uint64_t both = (1ull << exclusive[k][0]) | (1ull << exclusive[k][1]);
        if ((o->given & both) == both)
            return train_bad("--%s and --%s: give one of them", defs[exclusive[k][0]].name,
                             defs[exclusive[k][1]].name);
    }
    return 0;
}

bool train_opts_takes_value(const char *arg)
{
    int k = strncmp(arg, "--", 2) ? -1 : find_opt(arg + 2);
    return k >= 0 && defs[k].kind != K_SWITCH;
}

static int parse_argv(int argc, char **argv, train_opts *o)
{
    where[0] = '\0';
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int k = strncmp(a, "--", 2) ? -1 : find_opt(a + 2);
        if (k < 0)
            return train_bad("unknown option '%s' (--help lists them)", a);
        if (defs[k].kind == K_SWITCH) {
            set_value(o, k, NULL);
            continue;
        }
        int rc = set_value(o, k, i + 1 < argc ? argv[i + 1] : NULL);
        if (rc)
            return rc;
        i++;
    }
    return check_exclusive(o);
}

/* A JSON number's literal as written (the setters parse text, so that a
 * file's value is refused with the command line's message). */
static void number_text(const char *text, size_t len, const pgrt_jval *v, char *out,
                        size_t cap)
{
    size_t at = pgrt_jval_offset(v), n = 0;
    while (at + n < len && n + 1 < cap && strchr("+-.0123456789eE", text[at + n]))
        n++;
    memcpy(out, text + at, n);
    out[n] = '\0';
}

/* A --config file, or a checkpoint's run_config.json, into layer o. */
static int parse_file(const char *path, const char *opt, train_opts *o)
{
    snprintf(where, sizeof where, "%s %s: ", opt, path);
    char *text;
    size_t len;
    if (train_read_file(path, 1 << 20, &text, &len) != 0) {
        int e = errno;
        where[0] = '\0';
        return train_bad("%s %s: %s", opt, path, strerror(e));
    }
    pgrt_json *doc = NULL;
    int rc = pgrt_json_parse(text, len, NULL, NULL, &doc);
    if (rc) {
        rc = train_bad("%s", pgrt_last_message());
        goto out;
    }
    const pgrt_jval *root = pgrt_json_root(doc);
    if (pgrt_jval_type(root) != PGRT_JSON_OBJECT) {
        rc = train_bad("not a JSON object");
        goto out;
    }
    for (size_t m = 0; m < pgrt_jval_count(root) && !rc; m++) {
        const char *key = pgrt_jval_key_at(root, m);
        const pgrt_jval *v = pgrt_jval_value_at(root, m);
        int k = find_opt(key);
        if (k < 0) {
            rc = train_bad("unknown key '%s' (the keys are the long options without "
                           "dashes: --help)",
                           key);
            break;
        }
        const optdef *d = &defs[k];
        if (d->flags & F_NOFILE) {
            rc = train_bad("'%s' is not taken from a file", key);
            break;
        }
        pgrt_json_type t = pgrt_jval_type(v);
        char num[128];
        if (d->kind == K_SWITCH) {
            bool b;
            if (pgrt_jval_bool(v, &b))
                rc = train_bad("'%s' takes true or false", key);
            else
                rc = set_value(o, k, b ? NULL : "false");
        } else if (d->kind == K_INT || d->kind == K_FLOAT) {
            if (t != PGRT_JSON_NUMBER) {
                rc = train_bad("'%s' takes a number", key);
            } else {
                number_text(text, len, v, num, sizeof num);
                rc = set_value(o, k, num);
            }
        } else {
            const char *s = pgrt_jval_string(v, NULL);
            rc = s ? set_value(o, k, s) : train_bad("'%s' takes a string", key);
        }
    }
    if (!rc)
        rc = check_exclusive(o);
out:
    pgrt_json_destroy(&doc);
    free(text);
    where[0] = '\0';
    return rc;
}

/* Option i of src copied into dst. */
static int copy_value(train_opts *dst, const train_opts *src, int i)
{
    const optdef *d = &defs[i];
    switch (d->kind) {
    case K_PATH:
    case K_PATTERN: {
        const char *s = *CFIELD(src, d, str);
        char *c = s ? strdup(s) : NULL;
        if (s && !c)
            return train_bad("out of host memory");
        free(*FIELD(dst, d, char *));
        *FIELD(dst, d, char *) = c;
        break;
    }
    case K_INT:
        *FIELD(dst, d, long long) = *CFIELD(src, d, long long);
        break;
    case K_FLOAT:
        *FIELD(dst, d, double) = *CFIELD(src, d, double);
        break;
    case K_ENUM:
        *FIELD(dst, d, int) = *CFIELD(src, d, int);
        break;
    case K_TARGETS:
        *FIELD(dst, d, unsigned) = *CFIELD(src, d, unsigned);
        break;
    default:
        *FIELD(dst, d, bool) = *CFIELD(src, d, bool);
        break;
    }
    dst->given |= 1ull << i;
    return 0;
}

/* A layer over dst: what it gives replaces dst's, and an option it gives
 * drops the other of its exclusive pair. */
static int apply(train_opts *dst, const train_opts *src)
{
    train_opts def;
    train_opts_default(&def);
    for (int i = 0; i < O_COUNT; i++) {
        if (!(src->given & (1ull << i)))
            continue;
        int rc = copy_value(dst, src, i);
        if (rc)
            return rc;
        for (size_t k = 0; k < sizeof exclusive / sizeof exclusive[0]; k++)
            for (int s = 0; s < 2; s++)
                if (exclusive[k][s] == i) {
                    int other = exclusive[k][1 - s];
                    copy_value(dst, &def, other);
                    dst->given &= ~(1ull << other);
                }
    }
    return 0;
}

void train_path_absolute(const char *p, char *out, size_t cap)
{
    char *real = realpath(p, NULL);
    if (real) {
        snprintf(out, cap, "%s", real);
        free(real);
        return;
    }
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && p[b - 1] != '/')
        b--;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%.*s", (int)(b == 0 ? 1 : b), b == 0 ? "." : p);
    if ((real = realpath(dir, NULL)) != NULL) {
        snprintf(out, cap, "%s%s%.*s", real, real[strlen(real) - 1] == '/' ? "" : "/",
                 (int)(n - b), p + b);
        free(real);
        return;
    }
    char cwd[PATH_MAX];
    if (p[0] == '/' || !getcwd(cwd, sizeof cwd))
        snprintf(out, cap, "%s", p);
    else
        snprintf(out, cap, "%s/%s", cwd, p);
}

/* The shortest text that reads back as x. */
static void fmt_double(double x, char *buf, size_t cap)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            return;
    }
}

static void fmt_targets(unsigned t, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < PGRT_LINEAR_COUNT; i++)
        if (t & (1u << i))
            len += (size_t)snprintf(buf + len, cap > len ? cap - len : 0, "%s%s",
                                    len ? "," : "", short_targets[i]);
}

/* Option i's value as text (paths absolute), for messages and JSON. */
static void fmt_value(const train_opts *o, int i, char *buf, size_t cap)
{
    const optdef *d = &defs[i];
    switch (d->kind) {
    case K_PATH: {
        const char *s = *CFIELD(o, d, str);
        if (s)
            train_path_absolute(s, buf, cap);
        else
            snprintf(buf, cap, "(not set)");
        break;
    }
    case K_INT:
        snprintf(buf, cap, "%lld", *CFIELD(o, d, long long));
        break;
    case K_FLOAT:
        fmt_double(*CFIELD(o, d, double), buf, cap);
        break;
    case K_ENUM:
        snprintf(buf, cap, "%s", d->values[*CFIELD(o, d, int) - d->base]);
        break;
    case K_TARGETS:
        fmt_targets(*CFIELD(o, d, unsigned), buf, cap);
        break;
    case K_PATTERN: {
        const char *s = *CFIELD(o, d, str);
        snprintf(buf, cap, "%s", s ? s : "none");
        break;
    }
    default:
        snprintf(buf, cap, "%s", *CFIELD(o, d, bool) ? "true" : "false");
        break;
    }
}

/* On --resume: what --config and the command line give must be what the
 * run had, but for the options a resumed run may change. */
static int check_agree(const train_opts *run, const train_opts *over, const char *cfg_path)
{
    train_opts def;
    train_opts_default(&def);
    for (int i = 0; i < O_COUNT; i++) {
        if (!(over->given & (1ull << i)) || (defs[i].flags & F_FREE))
            continue;
        char a[PATH_MAX + 64], b[PATH_MAX + 64];
        fmt_value(over, i, a, sizeof a);
        /* a key the checkpoint lacks had its default, but for paths and
         * the options of an exclusive pair: not given is not a value */
        bool pair = false;
        for (size_t k = 0; k < sizeof exclusive / sizeof exclusive[0]; k++)
            pair = pair || exclusive[k][0] == i || exclusive[k][1] == i;
        if (run->given & (1ull << i))
            fmt_value(run, i, b, sizeof b);
        else if (defs[i].kind == K_PATH || pair)
            snprintf(b, sizeof b, "(not set)");
        else
            fmt_value(&def, i, b, sizeof b);
        if (strcmp(a, b))
            return train_bad("--%s %s differs from the run being resumed (%s in %s): on "
                             "--resume only --steps, --epochs, the evaluation, checkpoint and "
                             "output options, --mode and --profile may change",
                             defs[i].name, a, b, cfg_path);
    }
    return 0;
}

int train_opts_load(int argc, char **argv, train_opts *o, char *ckpt_dir, size_t cap)
{
    train_opts_default(o);
    ckpt_dir[0] = '\0';
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            train_opts_help(stdout);
            return -1;
        }
        if (!strcmp(argv[i], "--version")) {
            train_opts_version(stdout);
            return -1;
        }
    }
    train_opts cli, cfg, run;
    train_opts_default(&cli);
    train_opts_default(&cfg);
    train_opts_default(&run);
    int rc = parse_argv(argc, argv, &cli);
    if (!rc && cli.config)
        rc = parse_file(cli.config, "--config", &cfg);
    if (!rc && cfg.given)
        rc = check_exclusive(&cfg);
    char run_cfg[PATH_MAX + 64] = "";
    if (!rc && cli.resume) {
        char msg[2 * PATH_MAX + 256];
        if (train_ckpt_resolve(cli.resume, ckpt_dir, cap, msg, sizeof msg))
            rc = train_bad("%s", msg);
        else {
            snprintf(run_cfg, sizeof run_cfg, "%s/%s", ckpt_dir, TRAIN_CKPT_CONFIG);
            rc = parse_file(run_cfg, "--resume", &run);
        }
        if (!rc)
            rc = check_agree(&run, &cfg, run_cfg);
        if (!rc)
            rc = check_agree(&run, &cli, run_cfg);
    }
    if (!rc)
        rc = apply(o, &run);
    if (!rc)
        rc = apply(o, &cfg);
    if (!rc)
        rc = apply(o, &cli);
    train_opts_free(&cli);
    train_opts_free(&cfg);
    train_opts_free(&run);
    if (rc)
        return rc;
    /* a checkpoint moved away from its --output-dir is continued where
     * it lies */
    if (ckpt_dir[0] && !o->output_dir) {
        const char *slash = strrchr(ckpt_dir, '/');
        o->output_dir = slash ? strndup(ckpt_dir, (size_t)(slash - ckpt_dir)) : strdup(".");
        if (!o->output_dir)
            return train_bad("out of host memory");
    }
    if (!o->model || !(o->data || o->tokens) || !o->batch || !o->seq || !(o->steps || o->epochs))
        return train_bad("--model, --data (or --tokens), --batch, --seq and --steps (or "
                         "--epochs) are required");
    for (size_t k = 0; k < sizeof needs / sizeof needs[0]; k++)
        if ((o->given & (1ull << needs[k][0])) && !*CFIELD(o, &defs[needs[k][1]], str))
            return train_bad("--%s needs --%s", defs[needs[k][0]].name,
                             defs[needs[k][1]].name);
    if (o->modes == TRAIN_MODE_BOTH && (o->output_dir || ckpt_dir[0]))
        return train_bad("--mode both trains twice from the same start to compare the two, "
                         "with no checkpoint: it takes no --output-dir or --resume");
    return 0;
}

int train_opts_total_steps(const train_opts *o, uint64_t rows_per_epoch, uint64_t *total)
{
    if (o->steps) {
        *total = (uint64_t)o->steps;
        return 0;
    }
    /* at most 1e6 epochs x 2^64 rows: in long double, then bounded */
    long double per = (long double)o->batch * (long double)o->grad_accum *
                      (long double)(o->world > 1 ? o->world : 1);
    long double steps = ceill((long double)o->epochs * (long double)rows_per_epoch / per);
    if (steps > (long double)TRAIN_MAX_STEPS)
        return train_bad("--epochs %lld over %llu rows at %lld x %lld rows a step makes %.0Lf "
                         "optimizer steps (at most %lld)",
                         o->epochs, (unsigned long long)rows_per_epoch,
                         o->batch * (o->world > 1 ? o->world : 1), o->grad_accum, steps,
                         TRAIN_MAX_STEPS);
    *total = (uint64_t)steps;
    return 0;
}

pgrt_lm_schedule train_opts_schedule(const train_opts *o, uint64_t total)
{
    pgrt_lm_schedule sc = {0};
    uint64_t warm = (uint64_t)o->warmup_steps;
    if (o->given & (1ull << O_WARMUP_RATIO))
        warm = (uint64_t)ceil(o->warmup_ratio * (double)total);
    if (o->schedule == PGRT_LM_SCHED_CONSTANT && !warm)
        return sc;
    sc.kind = (pgrt_lm_sched_kind)o->schedule;
    sc.warmup_steps = (uint32_t)(warm > UINT32_MAX ? UINT32_MAX : warm);
    sc.total_steps = (uint32_t)(total > UINT32_MAX ? UINT32_MAX : total);
    sc.floor = o->schedule == PGRT_LM_SCHED_CONSTANT ? 0.0f : (float)o->min_lr_ratio;
    return sc;
}

double train_schedule_lr(const pgrt_lm_schedule *sc, double lr, uint64_t s)
{
    if (s < sc->warmup_steps)
        return lr * (double)s / (double)sc->warmup_steps;
    if (sc->kind == PGRT_LM_SCHED_CONSTANT)
        return lr;
    double span = sc->total_steps > sc->warmup_steps ? sc->total_steps - sc->warmup_steps : 1;
    double p = ((double)s - sc->warmup_steps) / span;
    p = p < 0 ? 0 : p > 1 ? 1 : p;
    double g = sc->kind == PGRT_LM_SCHED_LINEAR ? 1 - p : (1 + cos(M_PI * p)) / 2;
    double floor = sc->floor;
    return lr * (floor + (1 - floor) * g);
}

void train_json_quote(char *buf, size_t cap, const char *s)
{
    size_t n = 0;
    if (cap < 3) {
        if (cap)
            buf[0] = '\0';
        return;
    }
    buf[n++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p && n + 8 < cap; p++) {
        if (*p == '"' || *p == '\\') {
            buf[n++] = '\\';
            buf[n++] = (char)*p;
        } else if (*p < 0x20 || *p == 0x7f) {
            n += (size_t)snprintf(buf + n, cap - n, "\\u%04x", *p);
        } else {
            buf[n++] = (char)*p;
        }
    }
    buf[n++] = '"';
    buf[n] = '\0';
}

char *train_opts_json(const train_opts *o)
{
    size_t cap = 1024 + O_COUNT * (2 * PATH_MAX + 64), len = 0;
    char *buf = malloc(cap);
    if (!buf)
        return NULL;
    len += (size_t)snprintf(buf, cap, "{");
    bool first = true;
    for (int i = 0; i < O_COUNT; i++) {
        const optdef *d = &defs[i];
        if (d->flags & F_NOFILE)
            continue;
        if ((d->kind == K_PATH || d->kind == K_PATTERN) && !*CFIELD(o, d, str))
            continue;
        if ((i == O_STEPS && !o->steps) || (i == O_EPOCHS && !o->epochs))
            continue;
        bool ratio = o->given & (1ull << O_WARMUP_RATIO), orphan = false;
        for (size_t k = 0; k < sizeof needs / sizeof needs[0]; k++)
            if (needs[k][0] == i && !*CFIELD(o, &defs[needs[k][1]], str))
                orphan = true;
        if (orphan)
            continue;
        if ((i == O_WARMUP_RATIO && !ratio) || (i == O_WARMUP_STEPS && ratio))
            continue;
        char v[PATH_MAX + 64], q[2 * PATH_MAX + 256];
        fmt_value(o, i, v, sizeof v);
        if (d->kind == K_PATH || d->kind == K_ENUM || d->kind == K_TARGETS ||
            d->kind == K_PATTERN)
            train_json_quote(q, sizeof q, v);
        else
            snprintf(q, sizeof q, "%s", v);
        len += (size_t)snprintf(buf + len, cap - len, "%s\n  \"%s\": %s", first ? "" : ",",
                                d->name, q);
        first = false;
    }
    snprintf(buf + len, cap - len, "\n}\n");
    return buf;
}

/* "1e8" for a power of ten from a million on, else the number. */
static void fmt_bound(long long x, char *buf, size_t cap)
{
    if (x == INT64_MAX) {
        snprintf(buf, cap, "2^63-1");
        return;
    }
    int e = 0;
    long long y = x;
    while (y >= 10 && y % 10 == 0) {
        y /= 10;
        e++;
    }
    if (y == 1 && e >= 6)
        snprintf(buf, cap, "1e%d", e);
    else
        snprintf(buf, cap, "%lld", x);
}

/* text word-wrapped at 100 columns, the lines after the first indented to
 * col. */
static void wrap(FILE *f, const char *head, const char *text, int col)
{
    int at = fprintf(f, "%s", head);
    if (at >= col) {
        fputc('\n', f);
        at = 0;
    }
    const char *p = text;
    while (*p) {
        size_t w = strcspn(p, " ");
        if (at > col && at + 1 + (int)w > 100) {
            fputc('\n', f);
            at = 0;
        }
        if (at < col) {
            at += fprintf(f, "%*s", col - at, "");
        } else {
            fputc(' ', f);
            at++;
        }
        at += fprintf(f, "%.*s", (int)w, p);
        p += w;
        while (*p == ' ')
            p++;
    }
    fputc('\n', f);
}

void train_opts_help(FILE *f)
{
    fputs("usage: ptxgen-train --model DIR --data FILE --batch B --seq S (--steps N | --epochs N) "
          "[options]\n"
          "       ptxgen-train --resume OUTPUT_DIR [options]\n"
          "       ptxgen-train --config FILE [options]\n"
          "\n"
          "LoRA fine-tuning of a Hugging Face Qwen2/LLaMA checkpoint on the GPU: documents in "
          "(a .pgtok of\nptxgen-prepare), a checkpointed PEFT adapter out. Every option may "
          "come from a --config file\ntoo; the command line wins. Bad input is one line on "
          "stderr and exit 2 before the GPU is used;\na failed run exits 1; SIGINT and "
          "SIGTERM save a checkpoint and exit 130 and 143.\n",
          f);
    for (int g = 0; g < G_COUNT; g++) {
        fprintf(f, "\n%s:\n", group_names[g]);
        for (int i = 0; i < O_COUNT; i++) {
            const optdef *d = &defs[i];
            if (d->group != g)
                continue;
            char head[128], range[128] = "", lo[32], hi[32], text[1024];
            if (d->kind == K_SWITCH)
                snprintf(head, sizeof head, "  --%s", d->name);
            else
                snprintf(head, sizeof head, "  --%s %s", d->name, d->arg);
            if (d->kind == K_INT) {
                fmt_bound(d->lo, lo, sizeof lo);
                fmt_bound(d->hi, hi, sizeof hi);
                snprintf(range, sizeof range, "%s to %s; ", lo, hi);
            } else if (d->kind == K_FLOAT) {
                snprintf(range, sizeof range, d->zero_ok ? "0, or %g to %g; " : "%g to %g; ",
                         d->flo, d->fhi);
            }
            if (d->flags & F_REQUIRED)
                snprintf(text, sizeof text, "%s (%sno default: required%s)", d->help, range,
                         i == O_STEPS || i == O_EPOCHS || i == O_DATA || i == O_TOKENS
                             ? ", this or the other"
                             : "");
            else
                snprintf(text, sizeof text, "%s (%sdefault %s)", d->help, range, d->def);
            wrap(f, head, text, 28);
        }
    }
    fputs("\nother:\n", f);
    wrap(f, "  --help, -h", "this text (default: off)", 28);
    wrap(f, "  --version", "the version (default: off)", 28);
    fputs("\nsynthetic demo (no --model: a small synthetic model on random data, eager and "
          "graphed,\nchecking that both give the same losses):\n"
          "usage: ptxgen-train [--layers N] [--hidden N] [--seq N] [--batch N] [--rank N] "
          "[--steps N]\n"
          "                    [--seed N] [--lr X (1e-12 to 1)] [--mode eager|graph|both]\n"
          "  defaults: 28 layers, hidden 128, seq 64, batch 4, rank 16, 20 steps, seed 0, lr "
          "1e-3,\n  mode both\n",
          f);
}

bool train_opts_is_demo(int argc, char **argv)
{
    static const char *const with_value[] = {"--layers", "--hidden", "--seq",  "--batch",
                                             "--rank",   "--steps",  "--seed", "--lr",
                                             "--mode"};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h") || !strcmp(a, "--version"))
            continue;
        size_t k = 0;
        while (k < sizeof with_value / sizeof with_value[0] && strcmp(a, with_value[k]))
            k++;
        if (k == sizeof with_value / sizeof with_value[0])
            return false;
        i++;
    }
    return true;
}
