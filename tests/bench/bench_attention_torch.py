# SPDX-License-Identifier: MIT
"""PyTorch's causal attention at the shape bench_attention times, for comparison.

bf16 scaled_dot_product_attention(is_causal=True) (whatever backend PyTorch
picks: flash on sm_80+), GQA by repeat_interleave of K and V done once
before timing (its cost is not counted). Forward, and forward + backward
(one backward of a random output gradient), each the mean of --iters runs
between CUDA events after warm-up.

    python3 bench_attention_torch.py [--b 4] [--s 512] [--hq 12] [--hkv 2] [--d 128]
"""
import argparse

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    for name, dflt in (("b", 4), ("s", 512), ("hq", 12), ("hkv", 2), ("d", 128), ("iters", 20)):
        ap.add_argument("--" + name, type=int, default=dflt)
    a = ap.parse_args()
    dev = "cuda"
    g = a.hq // a.hkv
    q = torch.randn(a.b, a.hq, a.s, a.d, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(a.b, a.hkv, a.s, a.d, device=dev, dtype=torch.bfloat16)
    v = torch.randn(a.b, a.hkv, a.s, a.d, device=dev, dtype=torch.bfloat16)
    k = k.repeat_interleave(g, dim=1).detach().requires_grad_(True)
    v = v.repeat_interleave(g, dim=1).detach().requires_grad_(True)
    go = torch.randn(a.b, a.hq, a.s, a.d, device=dev, dtype=torch.bfloat16)

    def fwd():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fwd_bwd():
        fwd().backward(go)

    res = {}
    for name, fn in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
        for _ in range(3):
            fn()
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0.record()
        for _ in range(a.iters):
            fn()
        t1.record()
        torch.cuda.synchronize()
        res[name] = t0.elapsed_time(t1) / a.iters
    print("torch %s, sdpa bf16 causal B %d S %d Hq %d Hkv %d D %d" %
          (torch.__version__, a.b, a.s, a.hq, a.hkv, a.d))
    flops = 2.0 * a.b * a.hq * a.s * a.s * a.d  # causal, as bench_attention counts
    bwd = res["fwd+bwd"] - res["fwd"]
    print("%-6s %10.4f %10s %10s %10.4f %9.1f %9.1f" % ("torch", res["fwd"], "-", "-", res["fwd+bwd"],
                                                       flops / res["fwd"] * 1e-9,
                                                       2.5 * flops / bwd * 1e-9))


if __name__ == "__main__":
    main()
