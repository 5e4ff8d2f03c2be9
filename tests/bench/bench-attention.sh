#!/bin/sh
# SPDX-License-Identifier: MIT
# Causal attention at Qwen2-1.5B's heads (Hq 12, Hkv 2, D 128) at S 512,
# 2K, 8K and 32K (B x S = 16384 tokens, B 1 at 32K): our tensor-core
# kernels (bench_attention: forward, dQ, dK/dV, and TFLOP/s counting the
# causal half, the backward as 2.5 forwards) beside PyTorch's SDPA
# (bench_attention_torch.py: the backend PyTorch picks, flash or cuDNN);
# then, on an sm_90a device, the wgmma kernels at the same shapes
# (bench_attention_sm90: forward and the whole backward, beside the mma
# ones).
# Usage: tests/bench/bench-attention.sh BUILD_DIR; exit 77 without a GPU.
set -u
B=${1:?build dir}
nvidia-smi -L > /dev/null 2>&1 || { echo "no GPU: skipped"; exit 77; }
for s in 512 2048 8192 32768; do
    b=$((16384 / s)); [ $b -ge 1 ] || b=1
    "$B/tests/bench/bench_attention" --b $b --s $s | grep -v '^simt'
    python3 "$(dirname "$0")/bench_attention_torch.py" --b $b --s $s 2>/dev/null | grep '^torch '
    echo
done
"$B/tests/bench/bench_attention_sm90" 5 --s 512x32 --s 2048x8 --s 8192x2 --s 32768x1 2>&1 |
    grep -v '^device:' || true
