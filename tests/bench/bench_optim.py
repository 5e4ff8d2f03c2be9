# SPDX-License-Identifier: MIT
"""PyTorch's optimizer step on the shapes of bench_optim.c, for comparison.

clip_grad_norm_(foreach=True) followed by AdamW(fused=True), eager and
captured in a CUDA graph (AdamW(capturable=True)), on the 350M-parameter
model (216 tensors) and the LoRA adapters (196 tensors), fp32. Medians of
CUDA-event timings; --json FILE appends JSON lines.

    python3 tests/bench/bench_optim.py [--quick] [--json FILE]
"""
import argparse
import json
import statistics

import torch


def m350_sizes():
    s = []
    for _ in range(24):
        s += [1024 * 1024] * 4 + [1024 * 3392] * 3 + [1024] * 2
    return s


def lora_sizes():
    s = []
    for _ in range(28):
        s += [16 * 3072, 16 * 1792, 16 * 1792, 16 * 3072] + [16 * 10496] * 3
    return s


def time_ms(fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    v = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        v.append(start.elapsed_time(end))
    return statistics.median(v)


def case(sizes, reps, graphed):
    g = torch.Generator(device="cuda").manual_seed(1)
    params = []
    for n in sizes:
        p = torch.nn.Parameter(torch.rand(n, device="cuda", generator=g) * 2 - 1)
        p.grad = (torch.rand(n, device="cuda", generator=g) * 2 - 1) * 1e-3
        params.append(p)
    opt = torch.optim.AdamW(params, lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                            fused=True, capturable=graphed)

    def step():
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()

    # The clip rewrites the gradients; its cost is the same at every step.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    if not graphed:
        return time_ms(step, reps)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.replay()
    torch.cuda.synchronize()
    return time_ms(graph.replay, reps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    reps = 7 if a.quick else 41
    out = open(a.json, "a") if a.json else None
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    for name, sizes in (("350M", m350_sizes()), ("LoRA", lora_sizes())):
        for graphed in (False, True):
            ms = case(sizes, reps, graphed)
            label = (f"torch {name} clip_grad_norm_(foreach) + AdamW(fused), "
                     f"{'graphed' if graphed else 'eager'}")
            print(f"| {label:<60} | {ms:9.3f} |")
            if out:
                out.write(json.dumps({"case": label, "median_ms": round(ms, 4),
                                      "params": sum(sizes), "tensors": len(sizes)}) + "\n")
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
