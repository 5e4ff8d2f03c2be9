#!/bin/sh
# SPDX-License-Identifier: MIT
# Long sequences and activation recompute: ptxgen-train on the Qwen2-1.5B
# shape (random weights, tests/bench/bench_torch.py --save-model), bf16,
# LoRA r16 on all seven modules, graphed, 1 x SEQ tokens a step, with
# --recompute none, auto --max-memory GIB and layers; then PyTorch +
# transformers + peft (sdpa) with Liger Kernel and gradient checkpointing
# on the same shape, when liger_kernel imports (pip install --target DIR
# liger-kernel==0.8.5, PYTHONPATH=DIR). Prints one table: ms a step and
# the device memory in use after create (ours; a step allocates nothing)
# or torch.cuda.max_memory_allocated (PyTorch's), and the first step's
# loss (the same rows: tokens 0 .. SEQ-1, before any update); and whether
# our three runs logged the same losses and gradient norms to the bit
# (recompute is exact).
# Usage: tests/bench/bench-long.sh BUILD_DIR OUT_DIR [seq] [GiB]
set -u
B=${1:?build dir}
O=${2:?out dir}
SEQ=${3:-16384}
GIB=${4:-24}
T=$B/tools/ptxgen-train
mkdir -p "$O"
if [ ! -f "$O/m$SEQ/model/config.json" ]; then
    timeout 300 python3 tests/bench/bench_torch.py --dir "$O/m$SEQ" --batch 1 --seq "$SEQ" \
        --steps 6 --save-model --attn none > "$O/make-model.log" 2>&1 ||
        { echo "making the model failed"; tail -5 "$O/make-model.log"; exit 1; }
fi
rm -f "$O/long.txt"
run() { # tag label options...
    lab=$1; name=$2; shift 2
    rm -f "$O/$lab.jsonl"
    timeout 300 $T --log-json "$O/$lab.jsonl" --model "$O/m$SEQ/model" --tokens "$O/m$SEQ/tokens.bin" --batch 1 \
        --seq "$SEQ" --steps 6 --dtype bf16 --rank 16 --alpha 32 --mode graph \
        --data-order sequential "$@" \
        > "$O/$lab.log" 2>&1 || { echo "$lab: failed"; tail -3 "$O/$lab.log"; return 1; }
    ms=$(grep -h "ms/step" "$O/$lab.log" | tail -1 | awk '{ print $1 }')
    gib=$(grep -h "in use after create" "$O/$lab.log" | awk '{ print $7 }')
    k=$(grep -h "memory plan" "$O/$lab.log" | sed 's/.*(\([0-9]* of [0-9]*\) layers.*/\1/')
    l1=$(grep -h '"step": 1,' "$O/$lab.jsonl" | sed 's/.*"loss": \([0-9.]*\).*/\1/')
    echo "$name|$ms|$gib GiB in use|$l1|$k layers recomputed" >> "$O/long.txt"
}
run none none --recompute none
run auto "auto, --max-memory $GIB" --max-memory "$GIB"
run layers layers --recompute layers
same=no
python3 - "$O/none.jsonl" "$O/auto.jsonl" "$O/layers.jsonl" <<'PY' && same=yes
import json, sys
k = lambda r: (r["step"], r["loss"], r["grad_norm"])
runs = [[k(json.loads(l)) for l in open(p) if '"loss"' in l] for p in sys.argv[1:]]
sys.exit(0 if runs[0] and runs[0] == runs[1] == runs[2] else 1)
PY
if python3 -c "import liger_kernel" 2> /dev/null; then
    timeout 300 python3 tests/bench/bench_torch.py --dir "$O/m$SEQ" --batch 1 --seq "$SEQ" \
        --steps 3 --attn sdpa --liger --gradient-checkpointing > "$O/torch.log" 2>&1 &&
        grep -h "^torch " "$O/torch.log" | sed 's/torch \([^:]*\): \([0-9.]*\) ms.*peak \([0-9.]*\) GiB.*first step \([0-9.]*\).*/PyTorch \1|\2|\3 GiB peak allocated|\4|/' >> "$O/long.txt" ||
        { echo "PyTorch: failed"; tail -3 "$O/torch.log"; }
else
    echo "(liger_kernel does not import: no PyTorch row)"
fi
echo
echo "1 x $SEQ tokens, Qwen2-1.5B shape, bf16, LoRA r16; our runs' losses and grad norms identical: $same"
printf "%-36s %13s %26s %12s\n" "" "a step" "memory" "step 1 loss"
awk -F'|' '{ printf "%-36s %10s ms %26s %12s  %s\n", $1, $2, $3, $4, $5 }' "$O/long.txt"
