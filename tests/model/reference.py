#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The reference for LoRA fine-tuning of a Hugging Face model, and the
comparison of ptxgen-train's outputs with it.

Needs PyTorch, transformers, peft and safetensors (a GPU machine's image);
not part of CI.

  reference.py make      --dir D [--wide] [--arch A] [--pattern]
                                         small random model (A: qwen2, the default; llama,
                                         llama3, mistral, qwen3), PEFT adapter, tokens;
                                         --pattern: the adapter with rank_pattern and
                                         alpha_pattern (PATTERN_RANKS, PATTERN_ALPHAS)
  reference.py reference --dir D --dtype f32|bf16 [--batch B --seq S ...]
                                         step-1 loss, first-step LoRA gradients, N steps
  reference.py compare   --ref D/ref-f32 --log-json FILE --grads DIR [--dtype f32]
  reference.py all       --dir D [--arch A] [--pattern]
                                         make + reference in f32 and bf16, and print the
                                         ptxgen-train command lines to compare with
  reference.py rope-check                 transformers' llama3 inverse frequencies (CPU)
                                         against pgrt_model_rope_scale's f32 op sequence and
                                         the worked values of tests/model/hf.c
  reference.py masked    --model M --adapter A --data F.pgtok --log-json L [--dtype f32]
                                         completion-only: ptxgen-train's first loss on a
                                         .pgtok (pad rows) against labels = -100 on the prompt
  reference.py peft-eval --model M --adapter A --tokens F --log-json L [--dtype bf16]
                                         ptxgen-train's saved adapter loaded in PEFT: its
                                         validation loss against the log's last eval_loss

Layout of D: model/ (config.json, model.safetensors), adapter/ (PEFT:
adapter_config.json, adapter_model.safetensors), tokens.bin (little-endian
int32), ref-<dtype>/ (grads/adapter_model.safetensors, losses.json).

Semantics (issue 11): loss = the model's loss with labels = input_ids
(mean next-token cross-entropy over B x (S-1) positions); the token file is
rows of S consecutive ids (a last partial row unused) and step i takes rows
i*B .. i*B+B-1, wrapping to the first row (ptxgen-train --data-order
sequential); base weights frozen;
LoRA scaling alpha/r; torch.nn.utils.clip_grad_norm_ over all LoRA
gradients (max_norm 0: no clipping), then torch.optim.AdamW.

Tolerances: f32: step-1 loss 1e-5 relative, each first-step LoRA gradient
1e-4 relative Frobenius, every logged loss 1e-4 relative; bf16: losses
1e-2 relative, each gradient cosine similarity >= 0.99.
"""

import argparse
import json
import os
import sys

TOL = {
    "f32": {"loss1": 1e-5, "grad_rel": 1e-4, "losses": 1e-4},
    "bf16": {"loss1": 1e-2, "grad_cos": 0.99, "losses": 1e-2},
}

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
             tie_word_embeddings=True, rms_norm_eps=1e-6, rope_theta=10000.0,
             max_position_embeddings=4096, use_sliding_window=False, hidden_act="silu")
# --wide: every side of the base-weight products but k/v's at least 128 (at
# batch 2 x seq 64), so that they reach the Hopper (wgmma) GEMMs
WIDE = dict(SMALL, hidden_size=128, intermediate_size=256, vocab_size=512)
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ARCHS = ["qwen2", "llama", "llama3", "mistral", "qwen3"]
# --arch llama3: Llama 3.x's rope scaling at a small original context, so
# that at head_dim 16 (32 with --wide) and seq 64 the table has all three
# bands: unchanged (wavelength < 64 / 4), smoothed, divided by 4 (> 64)
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
# --pattern: r 16 and lora_alpha 16 but q_proj r 8 alpha 32, down_proj r 4
# (in bf16 on sm_90a the one pair on the thin kernels beside the fused
# ones), layer 1's o_proj alpha 12 (its full path, and before the "o_proj"
# key that also matches it: the first match wins) and the other o_proj
# alpha 24; q | k, v and o, gate, up take different scales. PEFT saves the
# keys sorted; these resolve the same in either order.
PATTERN_R, PATTERN_ALPHA = 16, 16
PATTERN_RANKS = {"q_proj": 8, "down_proj": 4}
PATTERN_ALPHAS = {"q_proj": 32, "model.layers.1.self_attn.o_proj": 12, "o_proj": 24}


def pattern_key(keys, name):
    r"""PEFT's get_pattern_key (peft/utils/other.py since 0.15): the first key
    K with re.match(rf"(.*\.)?({K})$", name), else None."""
    import re
    for k in keys:
        if re.match(rf"(.*\.)?({k})$", name):
            return k
    return None


def check_patterns(model, what, cfg):
    """Each LoRA module's r and scaling in the PEFT model against the
    adapter config cfg's rank_pattern / alpha_pattern resolved as
    pattern_key does (what ptxgen's pgrt_adapter_pair does): an older PEFT
    that resolves keys otherwise is named, not compared silently."""
    import peft
    bad = []
    n = 0
    for name, mod in model.named_modules():
        if not hasattr(mod, "lora_A") or "default" not in getattr(mod, "r", {}):
            continue
        path = name[name.index("model.layers."):] if "model.layers." in name else name
        ranks, alphas = cfg.get("rank_pattern") or {}, cfg.get("alpha_pattern") or {}
        rk, ak = pattern_key(ranks, path), pattern_key(alphas, path)
        r = ranks[rk] if rk else cfg["r"]
        alpha = alphas[ak] if ak else cfg.get("lora_alpha", 8)
        scale = alpha / r ** 0.5 if cfg.get("use_rslora") else alpha / r
        got_r, got_s = mod.r["default"], mod.scaling["default"]
        n += 1
        if got_r != r or abs(got_s - scale) > 1e-12 * scale:
            bad.append(f"{path}: PEFT r {got_r} scaling {got_s}, expected r {r} scaling "
                       f"{scale}")
    if not n or bad:
        raise SystemExit(f"{what}: PEFT {peft.__version__} does not resolve rank_pattern / "
                         f"alpha_pattern as get_pattern_key does since PEFT 0.15"
                         + "".join("\n  " + b for b in bad) + ("" if n else ": no LoRA module"))
    print(f"{what}: {n} LoRA modules with the pattern's r and scaling (PEFT {peft.__version__})")


def rope_kwargs(cls, theta, scaling=None):
    """rope_theta / rope_scaling (transformers 4) or rope_parameters (5)."""
    import inspect
    fields = set(inspect.signature(cls.__init__).parameters)
    fields |= set(getattr(cls, "__dataclass_fields__", {}))
    if "rope_parameters" in fields:
        rp = {"rope_type": "default", "rope_theta": theta}
        rp.update(scaling or {})
        return {"rope_parameters": rp}
    kw = {"rope_theta": theta}
    if scaling:
        kw["rope_scaling"] = dict(scaling)
    return kw


def arch_config(arch, shape):
    """transformers' own config class for the small model of that kind, and
    the model class (qwen2: exactly the original Qwen2Config(**shape))."""
    import transformers as tf
    if arch == "qwen2":
        return tf.Qwen2Config(**shape), tf.Qwen2ForCausalLM
    common = {k: shape[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                    "num_attention_heads", "num_key_value_heads", "vocab_size",
                                    "rms_norm_eps", "max_position_embeddings", "hidden_act")}
    theta = shape["rope_theta"]
    if arch == "llama":  # untied, all four attention biases
        cfg = tf.LlamaConfig(**common, tie_word_embeddings=False, attention_bias=True,
                             **rope_kwargs(tf.LlamaConfig, theta))
        return cfg, tf.LlamaForCausalLM
    if arch == "llama3":  # Llama 3.2's layout: tied, no biases, llama3 rope
        cfg = tf.LlamaConfig(**common, tie_word_embeddings=True, attention_bias=False,
                             **rope_kwargs(tf.LlamaConfig, theta, LLAMA3_SCALING))
        return cfg, tf.LlamaForCausalLM
    # head_dim given and twice hidden / heads, so that q is wider than hidden
    hd = 2 * shape["hidden_size"] // shape["num_attention_heads"]
    if arch == "mistral":  # untied, no biases, no window
        cfg = tf.MistralConfig(**common, head_dim=hd, tie_word_embeddings=False,
                               sliding_window=None, **rope_kwargs(tf.MistralConfig, theta))
        return cfg, tf.MistralForCausalLM
    if arch == "qwen3":  # tied, q/k norms, no biases
        cfg = tf.Qwen3Config(**common, head_dim=hd, tie_word_embeddings=True,
                             attention_bias=False, use_sliding_window=False,
                             **rope_kwargs(tf.Qwen3Config, theta))
        return cfg, tf.Qwen3ForCausalLM
    raise SystemExit(f"--arch {arch}: one of {', '.join(ARCHS)}")


def torch_setup():
    import torch
    # f32 means f32: no TF32 anywhere
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return torch


M32 = 0xFFFFFFFF


def fmix32(h):
    """MurmurHash3's finaliser on uint64 arrays holding u32 values."""
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & M32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & M32
    return h ^ (h >> 16)


def dropout_keep(n, seed, counter, stream, p):
    """kernels/dropout.c's mask over n elements (flat indices 0..n-1):
    fmix32(i ^ fmix32(seed ^ c * 0x9E3779B9 ^ stream * 0x85EBCA6B)) >=
    round(p 2^32)."""
    import numpy as np
    key = seed ^ ((counter * 0x9E3779B9) & M32) ^ ((stream * 0x85EBCA6B) & M32)
    key = int(fmix32(np.array([key], dtype=np.uint64))[0])
    h = fmix32(np.arange(n, dtype=np.uint64) ^ np.uint64(key))
    keep_min = min(M32, int(np.floor(p * 4294967296.0 + 0.5)))
    return h >= keep_min


def patch_dropout(torch, model, seed, p, counter):
    """PEFT's lora_dropout modules replaced by ptxgen's masks: the mask of
    (seed, counter[0], layer * 7 + module) over x's elements, kept ones
    times f32(1 / (1 - p)); counter[0] is the training micro-batch (1 at
    the first, as pgrt_lm counts them). Evaluation (model.eval()) keeps
    everything, as nn.Dropout does."""
    scale = torch.tensor(float(__import__("numpy").float32(1.0 / (1.0 - p))))

    class Drop(torch.nn.Module):
        def __init__(self, stream):
            super().__init__()
            self.stream = stream

        def forward(self, x):
            if not self.training:
                return x
            keep = dropout_keep(x.numel(), seed, counter[0], self.stream, p)
            mask = torch.from_numpy(keep.reshape(x.shape)).to(x.device, x.dtype)
            return x * mask * scale.to(x.device, x.dtype)

    n = 0
    for name, mod in model.named_modules():
        if hasattr(mod, "lora_dropout") and "default" in getattr(mod, "lora_dropout", {}):
            parts = name.split(".")
            layer = int(parts[parts.index("layers") + 1])
            stream = layer * len(TARGETS) + TARGETS.index(parts[-1])
            mod.lora_dropout["default"] = Drop(stream)
            n += 1
    assert n, "no LoRA dropout module found"


def make(args):
    torch = torch_setup()
    import numpy as np
    from peft import LoraConfig, get_peft_model

    os.makedirs(args.dir, exist_ok=True)
    torch.manual_seed(args.seed)
    shape = WIDE if args.wide else SMALL
    cfg, model_cls = arch_config(args.arch, shape)
    model = model_cls(cfg).float()
    # the default init leaves biases at 0 and norms at 1: perturb them so a
    # wrong bias or norm path shows in the numbers (Qwen3's q_norm and
    # k_norm included)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.1)
            elif "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
            else:
                p.normal_(0.0, args.init_std)
    model.save_pretrained(os.path.join(args.dir, "model"), safe_serialization=True)

    kw = {"r": 8, "lora_alpha": 16}
    if args.pattern:
        kw = {"r": PATTERN_R, "lora_alpha": PATTERN_ALPHA, "rank_pattern": dict(PATTERN_RANKS),
              "alpha_pattern": dict(PATTERN_ALPHAS)}
    lcfg = LoraConfig(target_modules=TARGETS, lora_dropout=args.dropout, bias="none",
                      task_type="CAUSAL_LM", **kw)
    peft_model = get_peft_model(model, lcfg)
    if args.pattern:
        check_patterns(peft_model, "make", {"r": PATTERN_R, "lora_alpha": PATTERN_ALPHA,
                                            "rank_pattern": PATTERN_RANKS,
                                            "alpha_pattern": PATTERN_ALPHAS})
    # B nonzero, so that every gradient (A's too) is nonzero at step 1
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.uniform_(-0.1, 0.1)
    peft_model.save_pretrained(os.path.join(args.dir, "adapter"), safe_serialization=True)

    rng = np.random.default_rng(args.seed)
    ids = rng.integers(0, shape["vocab_size"], size=args.tokens, dtype=np.int64)
    ids.astype("<i4").tofile(os.path.join(args.dir, "tokens.bin"))
    print(f"wrote {args.dir}/model ({args.arch}), {args.dir}/adapter, {args.dir}/tokens.bin "
          f"({args.tokens} ids)")


def batch(tokens, step, b, s):
    rows = len(tokens) // s
    idx = [((step * b + k) % rows) * s + j for k in range(b) for j in range(s)]
    return tokens[idx].reshape(b, s)


def peft_name(name):
    # PEFT's parameter "...q_proj.lora_A.default.weight" is saved as
    # "...q_proj.lora_A.weight"
    return name.replace(".default.weight", ".weight")


def reference(args):
    torch = torch_setup()
    import numpy as np
    from peft import PeftModel
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.float32 if args.dtype == "f32" else torch.bfloat16
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(
        os.path.join(args.dir, "model"), torch_dtype=dtype, attn_implementation=args.attn)
    # LoRA parameters, gradients and optimizer state stay f32 in both modes
    try:
        model = PeftModel.from_pretrained(base, os.path.join(args.dir, "adapter"),
                                          is_trainable=True, autocast_adapter_dtype=True)
    except TypeError:  # PEFT before 0.12: cast by hand below
        model = PeftModel.from_pretrained(base, os.path.join(args.dir, "adapter"),
                                          is_trainable=True)
    model.to(dev)
    acfg = json.load(open(os.path.join(args.dir, "adapter", "adapter_config.json")))
    if acfg.get("rank_pattern") or acfg.get("alpha_pattern"):
        check_patterns(model, f"reference {args.dtype}", acfg)
    counter = [0]
    pdrop = acfg.get("lora_dropout", 0.0) or 0.0
    if pdrop > 0:
        patch_dropout(torch, model, args.dropout_seed, pdrop, counter)
    model.train()  # dropout is 0 everywhere, so train() changes nothing else
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert params and all("lora_" in n for n, _ in params), "only LoRA may train"
    for n, p in params:
        if p.dtype != torch.float32:
            p.data = p.data.float()
    opt = torch.optim.AdamW([p for _, p in params], lr=args.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=args.weight_decay)
    tokens = np.fromfile(os.path.join(args.dir, "tokens.bin"), dtype="<i4").astype(np.int64)
    out = os.path.join(args.dir, f"ref-{args.dtype}") if not args.out else args.out
    os.makedirs(os.path.join(out, "grads"), exist_ok=True)
    losses, norms = [], []
    for step in range(args.steps):
        ids = torch.from_numpy(batch(tokens, step, args.batch, args.seq)).to(dev)
        opt.zero_grad(set_to_none=True)
        counter[0] += 1
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        if step == 0:
            grads = {peft_name(n): p.grad.detach().float().cpu().contiguous() for n, p in params}
            save_file(grads, os.path.join(out, "grads", "adapter_model.safetensors"),
                      metadata={"format": "pt"})
        if args.max_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_([p for _, p in params], args.max_norm)
        else:
            norm = torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(p.grad.float()) for _, p in params]))
        opt.step()
        losses.append(float(loss.item()))
        norms.append(float(norm.item()))
        print(f"{args.dtype} step {step + 1}: loss {losses[-1]:.9g} grad_norm {norms[-1]:.9g}")
    with open(os.path.join(out, "losses.json"), "w") as f:
        json.dump({"dtype": args.dtype, "batch": args.batch, "seq": args.seq,
                   "steps": args.steps, "lr": args.lr, "max_norm": args.max_norm,
                   "weight_decay": args.weight_decay, "attn": args.attn,
                   "device": str(dev), "torch": torch.__version__,
                   "losses": losses, "grad_norms": norms}, f, indent=1)
    print(f"wrote {out}/losses.json and {out}/grads/adapter_model.safetensors")
    return out


def peft_eval(args):
    """ptxgen-train's saved adapter in PEFT: the validation loss transformers
    gives with it on the evaluation rows ptxgen-train read (rows of --seq ids
    in file order, --batches batches of --batch rows, labels = input_ids),
    against the log's last eval_loss. The loss is the mean over every
    target of the batches together, as ptxgen-train's."""
    torch = torch_setup()
    import numpy as np
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.float32 if args.dtype == "f32" else torch.bfloat16
    base = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=dtype,
                                                attn_implementation="eager")
    model = PeftModel.from_pretrained(base, args.adapter).to(dev).eval()
    tokens = np.fromfile(args.tokens, dtype="<i4").astype(np.int64)
    rows = len(tokens) // args.seq
    total, count = 0.0, 0
    with torch.no_grad():
        for bi in range(args.batches):
            idx = [(bi * args.batch + k) for k in range(args.batch)]
            if idx[-1] >= rows:
                break
            ids = torch.from_numpy(np.stack([tokens[r * args.seq:(r + 1) * args.seq]
                                             for r in idx])).to(dev)
            logits = model(input_ids=ids).logits.float()
            lp = torch.nn.functional.cross_entropy(
                logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                reduction="sum")
            total += float(lp.item())
            count += ids.shape[0] * (ids.shape[1] - 1)
    want = total / count
    evals = []
    with open(args.log_json) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                if "eval_loss" in r:
                    evals.append(r)
    if not evals:
        raise SystemExit(f"{args.log_json}: no eval_loss line")
    got = evals[-1]["eval_loss"]
    rel = abs(got - want) / abs(want)
    tol = TOL[args.dtype]["loss1"]
    ok = rel <= tol
    print(f"peft-eval {args.dtype}: transformers+PEFT with the saved adapter {want:.9g}, "
          f"ptxgen-train's eval_loss at step {evals[-1]['step']} {got:.9g}, relative "
          f"{rel:.3g} (tolerance {tol:g}) {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def read_pgtok(path):
    """A .pgtok file (docs/data.md): the documents as (ids, mask) and the pad id."""
    import struct
    with open(path, "rb") as f:
        b = f.read()
    (magic, version, header, flags, vocab, n_docs, n_tokens, eos, pad,
     sha) = struct.unpack_from("<8sIIIIQQii32s", b, 0)
    if magic != b"PGTOKENS" or version != 1:
        raise SystemExit(f"{path}: not a version 1 .pgtok file")
    offsets = struct.unpack_from("<%dQ" % (n_docs + 1), b, 128)
    ids_at = 128 + 8 * (n_docs + 1)
    mask_at = ids_at + (4 * n_tokens + 7) // 8 * 8
    ids = struct.unpack_from("<%di" % n_tokens, b, ids_at)
    mask = b[mask_at:mask_at + n_tokens]
    docs = [(ids[offsets[i]:offsets[i + 1]], mask[offsets[i]:offsets[i + 1]])
            for i in range(n_docs)]
    return docs, pad


def masked(args):
    """The first optimizer step's loss of ptxgen-train --data F --packing pad
    --data-order sequential --lr 0 against transformers+PEFT with
    labels = -100 on every position that is not a target (the prompt,
    padding): each row one document in file order, cut to --seq, padded."""
    torch = torch_setup()
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.float32 if args.dtype == "f32" else torch.bfloat16
    base = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=dtype,
                                                attn_implementation="eager")
    model = PeftModel.from_pretrained(base, args.adapter).to(dev).eval()
    docs, pad = read_pgtok(args.data)
    rows = docs[:args.batch]
    ids = torch.full((args.batch, args.seq), pad, dtype=torch.long)
    labels = torch.full((args.batch, args.seq), -100, dtype=torch.long)
    for r, (d, m) in enumerate(rows):
        d, m = d[:args.seq], m[:args.seq]
        ids[r, :len(d)] = torch.tensor(d)
        for j in range(1, len(d)):  # the first token predicts from nothing
            if m[j]:
                labels[r, j] = d[j]
    n_prompt = sum(1 for d, m in rows for j in range(1, min(len(d), args.seq)) if not m[j])
    with torch.no_grad():
        want = float(model(input_ids=ids.to(dev), labels=labels.to(dev)).loss.item())
    steps = read_log(args.log_json)
    got = steps[0]["loss"]
    rel = abs(got - want) / abs(want)
    tol = TOL[args.dtype]["loss1"]
    ok = rel <= tol
    print(f"masked {args.dtype}: transformers with labels = -100 on {n_prompt} prompt and the "
          f"padding positions {want:.9g}, ptxgen-train step 1 {got:.9g}, relative {rel:.3g} "
          f"(tolerance {tol:g}) {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def train_cmd(args, dtype):
    d = args.dir
    return (f"ptxgen-train --model {d}/model --adapter {d}/adapter --tokens {d}/tokens.bin "
            f"--batch {args.batch} --seq {args.seq} --steps {args.steps} --lr {args.lr} "
            f"--data-order sequential "
            f"--max-norm {args.max_norm} --weight-decay {args.weight_decay} --dtype {dtype} "
            f"--log-json {d}/ours-{dtype}.jsonl --save-grads {d}/ours-{dtype}-grads")


def load_grads(path):
    from safetensors.numpy import load_file
    if os.path.isdir(path):
        cand = os.path.join(path, "adapter_model.safetensors")
        if not os.path.exists(cand):
            files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
            if len(files) != 1:
                raise SystemExit(f"{path}: expected adapter_model.safetensors")
            cand = os.path.join(path, files[0])
        path = cand
    return {k: v.astype("float64") for k, v in load_file(path).items()}


def read_log(path):
    rows = []
    with open(path) as f:
        for i, line in enumerate(f):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{i + 1}: not JSON: {e}")
    # the training steps (an evaluation's line has eval_loss instead of loss)
    rows = [r for r in rows if "loss" in r]
    rows.sort(key=lambda r: r["step"])
    return rows


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def compare(args):
    import numpy as np
    with open(os.path.join(args.ref, "losses.json")) as f:
        ref = json.load(f)
    dtype = args.dtype or ref["dtype"]
    tol = TOL[dtype]
    ours = read_log(args.log_json)
    rows, ok = [], True

    def row(what, r, o, err, limit, good):
        nonlocal ok
        ok &= good
        rows.append((what, r, o, err, limit, "ok" if good else "FAIL"))

    if not ours:
        raise SystemExit(f"{args.log_json}: no steps")
    e = rel(ours[0]["loss"], ref["losses"][0])
    row("step-1 loss", ref["losses"][0], ours[0]["loss"], e, tol["loss1"], e <= tol["loss1"])
    if len(ours) < len(ref["losses"]):
        row(f"steps logged ({len(ours)} < {len(ref['losses'])})", "", "", "", "", False)
    for i, (o, r) in enumerate(zip(ours, ref["losses"])):
        e = rel(o["loss"], r)
        row(f"loss step {i + 1}", r, o["loss"], e, tol["losses"], e <= tol["losses"])
        if "grad_norm" in o and i < len(ref["grad_norms"]):
            e = rel(o["grad_norm"], ref["grad_norms"][i])
            lim = tol["grad_rel"] if dtype == "f32" else 1e-2
            row(f"grad_norm step {i + 1}", ref["grad_norms"][i], o["grad_norm"], e, lim, e <= lim)

    rg = load_grads(os.path.join(args.ref, "grads"))
    og = load_grads(args.grads)
    for name in sorted(set(rg) | set(og)):
        short = name.replace("base_model.model.model.", "")
        if name not in og or name not in rg:
            row(f"grad {short}", "present" if name in rg else "absent",
                "present" if name in og else "absent", "", "", False)
            continue
        r, o = rg[name], og[name]
        if r.shape != o.shape:
            row(f"grad {short} shape", str(r.shape), str(o.shape), "", "", False)
            continue
        rn = float(np.linalg.norm(r))
        if dtype == "f32":
            e = float(np.linalg.norm(o - r)) / max(rn, 1e-30)
            row(f"grad {short}", rn, float(np.linalg.norm(o)), e, tol["grad_rel"],
                e <= tol["grad_rel"])
        else:
            c = float((o * r).sum()) / max(rn * float(np.linalg.norm(o)), 1e-30)
            row(f"grad {short} cos", rn, float(np.linalg.norm(o)), c, tol["grad_cos"],
                c >= tol["grad_cos"])

    def fmt(x):
        return f"{x:.9g}" if isinstance(x, float) else str(x)
    w = max(len(r[0]) for r in rows)
    print(f"{'check':<{w}}  {'reference':>16}  {'ptxgen':>16}  {'error':>10}  {'limit':>8}")
    for what, r, o, err, lim, st in rows:
        print(f"{what:<{w}}  {fmt(r):>16}  {fmt(o):>16}  "
              f"{(f'{err:.3g}' if isinstance(err, float) else ''):>10}  {fmt(lim):>8}  {st}")
    bad = sum(r[5] == "FAIL" for r in rows)
    print(f"{dtype}: {len(rows) - bad} of {len(rows)} checks pass" + ("" if ok else " -- FAIL"))
    return 0 if ok else 1


# The worked values of tests/model/hf.c (test_rope_scale): (name,
# rope_theta, head_dim, factor, low_freq_factor, high_freq_factor,
# original_max_position_embeddings, {index: (input, output)}), f32 as hex.
ROPE_WORKED = [
    ("Llama 3.2", 500000.0, 64, 32.0, 1.0, 4.0, 8192,
     {14: ("0x1.a4ee4p-9", "0x1.a4ee4p-9"), 15: ("0x1.175482p-9", "0x1.524f36p-10"),
      16: ("0x1.72ba44p-10", "0x1.c26c42p-12"), 17: ("0x1.ec07d4p-11", "0x1.9731eep-14"),
      18: ("0x1.46831ap-11", "0x1.46831ap-16")}),
    ("Llama 3.1", 500000.0, 128, 8.0, 1.0, 4.0, 8192,
     {30: ("0x1.175482p-9", "0x1.67a23ap-10"), 32: ("0x1.72ba44p-10", "0x1.132ba6p-11")}),
    ("--arch llama3", 10000.0, 16, 4.0, 1.0, 4.0, 64,
     {1: ("0x1.43d136p-2", "0x1.04c26cp-2"), 2: ("0x1.99999ap-4", "0x1.a13712p-6")}),
    ("uneven", 10000.0, 128, 6.5, 1.5, 3.7, 1000, {}),
]


def f32(x):
    """x rounded to the nearest f32 (ties to even), as a Python float."""
    import struct
    return struct.unpack("<f", struct.pack("<f", x))[0]


def llama3_f32(x, factor, low, high, old):
    """pgrt_model_rope_scale on one f32 entry: each tensor op an f64 op on f32
    values rounded to f32 (exact for + - * /: 53 >= 2 x 24 + 2), the Python
    scalars rounded to f32 where they meet the tensor, scalar / tensor as
    reciprocal then multiply (torch's Tensor.__rtruediv__)."""
    import math
    low_wl, high_wl = f32(old / low), f32(old / high)
    w = f32(f32(1.0 / x) * f32(2 * math.pi))
    llama = f32(x / f32(factor)) if w > low_wl else x
    s = f32(f32(f32(1.0 / w) * f32(old)) - f32(low))
    s = f32(s / f32(high - low))
    smoothed = f32(f32(f32(f32(1.0 - s) * llama) / f32(factor)) + f32(s * llama))
    return smoothed if not (w < high_wl) and not (w > low_wl) else llama


def rope_check(args):
    """transformers' llama3 table on the CPU against llama3_f32 on torch's
    own default table (every entry) and against hf.c's worked values
    (their inputs are C's F(1 / pow(theta, 2i / d)); where torch's f32 pow
    made another input, that entry is reported, not compared)."""
    torch = torch_setup()
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    bad = 0
    for name, theta, hd, factor, low, high, old, worked in ROPE_WORKED:
        scaling = {"rope_type": "llama3", "factor": factor, "low_freq_factor": low,
                   "high_freq_factor": high, "original_max_position_embeddings": old}
        cfg = LlamaConfig(hidden_size=4 * hd, num_attention_heads=4, num_key_value_heads=4,
                          head_dim=hd, max_position_embeddings=131072,
                          **rope_kwargs(LlamaConfig, theta, scaling))
        table = ROPE_INIT_FUNCTIONS["llama3"](cfg, torch.device("cpu"))[0].tolist()
        default = (1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd)))
        default = default.tolist()
        diff = [i for i in range(hd // 2)
                if llama3_f32(default[i], factor, low, high, old) != table[i]]
        bad += len(diff)
        print(f"{name}: {hd // 2 - len(diff)} of {hd // 2} entries as pgrt_model_rope_scale"
              + "".join(f"\n  entry {i}: in {default[i].hex()}, transformers {table[i].hex()}, "
                        f"ours {llama3_f32(default[i], factor, low, high, old).hex()}"
                        for i in diff))
        for i, (x, y) in sorted(worked.items()):
            x, y = float.fromhex(x), float.fromhex(y)
            if default[i] != x:
                print(f"  worked entry {i}: torch's default input is {default[i].hex()}, "
                      f"hf.c's {x.hex()}: not compared")
            elif table[i] != y:
                bad += 1
                print(f"  worked entry {i}: transformers {table[i].hex()}, hf.c {y.hex()}"
                      "  FAIL")
            else:
                print(f"  worked entry {i}: {y.hex()} ok")
    print("rope-check: " + ("ok" if not bad else f"{bad} mismatches -- FAIL"))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def train_opts(p):
        p.add_argument("--batch", type=int, default=2)
        p.add_argument("--seq", type=int, default=64)
        p.add_argument("--steps", type=int, default=5)
        p.add_argument("--lr", type=float, default=1e-3)
        p.add_argument("--max-norm", type=float, default=1.0)
        p.add_argument("--weight-decay", type=float, default=0.01)  # torch's AdamW default
        p.add_argument("--attn", default="eager", choices=["eager", "sdpa"])
        # ptxgen-train's --seed: with lora_dropout > 0 the masks' seed
        p.add_argument("--dropout-seed", type=int, default=0)

    p = sub.add_parser("make")
    p.add_argument("--dir", required=True)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--tokens", type=int, default=4099)  # not a multiple of S: a partial row
    p.add_argument("--init-std", type=float, default=0.05)
    p.add_argument("--wide", action="store_true", help="hidden 128, intermediate 256, vocab 512")
    p.add_argument("--arch", default="qwen2", choices=ARCHS)
    p.add_argument("--dropout", type=float, default=0.0, help="the adapter's lora_dropout")
    p.add_argument("--pattern", action="store_true",
                   help="the adapter with rank_pattern and alpha_pattern (PATTERN_RANKS, ...)")
    p = sub.add_parser("reference")
    p.add_argument("--dir", required=True)
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    p.add_argument("--out")
    train_opts(p)
    p = sub.add_parser("compare")
    p.add_argument("--ref", required=True, help="a ref-<dtype> directory")
    p.add_argument("--log-json", required=True)
    p.add_argument("--grads", required=True, help="ptxgen-train --save-grads output")
    p.add_argument("--dtype", choices=["f32", "bf16"])
    p = sub.add_parser("all")
    p.add_argument("--dir", required=True)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--tokens", type=int, default=4099)
    p.add_argument("--init-std", type=float, default=0.05)
    p.add_argument("--wide", action="store_true", help="hidden 128, intermediate 256, vocab 512")
    p.add_argument("--arch", default="qwen2", choices=ARCHS)
    p.add_argument("--dropout", type=float, default=0.0, help="the adapter's lora_dropout")
    p.add_argument("--pattern", action="store_true",
                   help="the adapter with rank_pattern and alpha_pattern (PATTERN_RANKS, ...)")
    train_opts(p)
    sub.add_parser("rope-check")
    p = sub.add_parser("peft-eval")
    p.add_argument("--model", required=True, help="the model directory")
    p.add_argument("--adapter", required=True, help="ptxgen-train's saved adapter")
    p.add_argument("--tokens", required=True, help="the --eval-data file (int32 ids)")
    p.add_argument("--log-json", required=True, help="ptxgen-train's log")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--batches", type=int, default=2)
    p.add_argument("--dtype", default="bf16", choices=["f32", "bf16"])
    p = sub.add_parser("masked")
    p.add_argument("--model", required=True)
    p.add_argument("--adapter", required=True)
    p.add_argument("--data", required=True, help="the .pgtok file ptxgen-train read")
    p.add_argument("--log-json", required=True)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    args = ap.parse_args()

    if args.cmd == "make":
        make(args)
    elif args.cmd == "reference":
        reference(args)
    elif args.cmd == "compare":
        return compare(args)
    elif args.cmd == "rope-check":
        return rope_check(args)
    elif args.cmd == "peft-eval":
        return peft_eval(args)
    elif args.cmd == "masked":
        return masked(args)
    else:
        make(args)
        for dt in ("f32", "bf16"):
            args.dtype, args.out = dt, None
            reference(args)
        print("\nthen, for each dtype:")
        for dt in ("f32", "bf16"):
            print("  " + train_cmd(args, dt))
            print(f"  {sys.argv[0]} compare --ref {args.dir}/ref-{dt} "
                  f"--log-json {args.dir}/ours-{dt}.jsonl --grads {args.dir}/ours-{dt}-grads")
    return 0


if __name__ == "__main__":
    sys.exit(main())
