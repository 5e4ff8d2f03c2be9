#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The PyTorch baseline of the LoRA fine-tuning benchmark (issue 11), and the
random model ptxgen-train runs on for the same comparison.

  bench_torch.py --dir D [--shape 1.5b|0.5b] [--batch 4 --seq 512 --steps 10]
                 [--attn eager,sdpa] [--save-model] [--liger] [--gradient-checkpointing]

Qwen2 dimensions with random weights (tied embeddings), bf16 base, LoRA
r=16 (alpha 32) on all seven linear modules with f32 parameters through
PEFT, torch.nn.utils.clip_grad_norm_(foreach=True), torch.optim.AdamW
(fused=True). Prints, for each attention implementation, ms/step and
tokens/s (mean over the steps after two warm-up steps) and the peak of
torch.cuda.max_memory_allocated (--attn none: no run); writes D/torch-bench.json. --save-model
also writes D/model (config.json, model.safetensors) and D/tokens.bin for
ptxgen-train --model D/model --tokens D/tokens.bin. --liger patches in Liger
Kernel's Triton kernels (liger-kernel 0.8.5: RMSNorm, RoPE, SwiGLU and the fused
linear cross-entropy, which never holds the whole logits); --gradient-checkpointing
recomputes each decoder layer in the backward (use_reentrant=False). Either names
its runs "sdpa+liger", "sdpa+liger+gc" and so on.
"""

import argparse
import json
import os
import time

SHAPES = {
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                 num_attention_heads=12, num_key_value_heads=2, vocab_size=151936),
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, vocab_size=151936),
}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--shape", default="1.5b", choices=sorted(SHAPES))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--attn", default="eager,sdpa")
    ap.add_argument("--save-model", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--liger", action="store_true")
    ap.add_argument("--gradient-checkpointing", action="store_true")
    args = ap.parse_args()

    import numpy as np
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    os.makedirs(args.dir, exist_ok=True)
    torch.manual_seed(args.seed)
    cfg = Qwen2Config(**SHAPES[args.shape], tie_word_embeddings=True, rms_norm_eps=1e-6,
                      rope_theta=1000000.0, max_position_embeddings=32768,
                      use_sliding_window=False, hidden_act="silu", torch_dtype="bfloat16")
    dev = torch.device("cuda")
    rng = np.random.default_rng(args.seed)
    ntok = args.batch * args.seq * (args.steps + 2)
    ids_all = rng.integers(0, cfg.vocab_size, size=ntok, dtype=np.int64)
    with torch.device(dev):
        base = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    if args.save_model:
        base.save_pretrained(os.path.join(args.dir, "model"), safe_serialization=True)
        ids_all.astype("<i4").tofile(os.path.join(args.dir, "tokens.bin"))
        print(f"wrote {args.dir}/model and {args.dir}/tokens.bin", flush=True)
    sd = base.state_dict()
    suffix = ("+liger" if args.liger else "") + ("+gc" if args.gradient_checkpointing else "")
    if args.liger:
        # class-level patches: the models made below take Liger's kernels
        from liger_kernel.transformers import apply_liger_kernel_to_qwen2
        apply_liger_kernel_to_qwen2(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                    fused_linear_cross_entropy=True)
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "shape": args.shape, "batch": args.batch, "seq": args.seq, "runs": {}}
    for attn in [a for a in args.attn.split(",") if a != "none"]:
        with torch.device(dev):
            m = Qwen2ForCausalLM._from_config(cfg, attn_implementation=attn,
                                              torch_dtype=torch.bfloat16)
        m.load_state_dict(sd)
        if args.gradient_checkpointing:
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        lcfg = LoraConfig(r=16, lora_alpha=32, target_modules=TARGETS, lora_dropout=0.0,
                          bias="none", task_type="CAUSAL_LM")
        pm = get_peft_model(m, lcfg)
        params = [p for n, p in pm.named_parameters() if p.requires_grad]
        for p in params:
            p.data = p.data.float()
        opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, fused=True)
        pm.train()
        times, first = [], None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        for step in range(args.steps + 2):
            n = args.batch * args.seq
            ids = torch.from_numpy(ids_all[step * n:(step + 1) * n].reshape(args.batch, args.seq))
            ids = ids.to(dev)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = pm(input_ids=ids, labels=ids).loss
            if first is None:
                first = float(loss.item())
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
            opt.step()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        ms = sum(times[2:]) / len(times[2:])
        peak = torch.cuda.max_memory_allocated() / 2**30
        tps = args.batch * args.seq / ms * 1e3
        name = attn + suffix
        results["runs"][name] = {"ms_per_step": ms, "tokens_per_s": tps, "peak_gib": peak,
                                 "loss_last": float(loss.item()), "loss_first": first}
        print(f"torch {name}: {ms:.1f} ms/step, {tps:.0f} tokens/s, peak {peak:.2f} GiB "
              f"(loss {float(loss.item()):.4f}, first step {first:.6f})", flush=True)
        del pm, m, opt, params
        torch.cuda.empty_cache()
    with open(os.path.join(args.dir, f"torch-bench{suffix}.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
