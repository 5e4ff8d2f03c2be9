#!/bin/sh
# SPDX-License-Identifier: MIT
# Data-parallel scaling of ptxgen-train on this host: the Qwen2-1.5B shape
# (random weights, tests/bench/bench_torch.py --save-model), LoRA r16 on
# all seven modules, bf16, B4 x S512 a GPU, graphed; one GPU, then --gpus 2
# and --gpus 4 as the host has them, in the same call. Prints one table:
# ms a step, tokens/s, the speed-up over one GPU, and the time data
# parallelism adds to a step (the N-GPU step less the one-GPU step: the
# gradient all-reduce that the backward does not hide, and the ranks'
# wait for each other). Rows "N z" run with --shard-optimizer (ZeRO-1).
# Usage: tests/bench/bench-dp.sh BUILD_DIR OUT_DIR [steps]
set -u
B=${1:?build dir}
O=${2:?out dir}
STEPS=${3:-30}
export NCCL_NVLS_ENABLE=0
T=$B/tools/ptxgen-train
NG=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$NG" -ge 2 ] || { echo "fewer than 2 GPUs: skipped"; exit 77; }
mkdir -p "$O"
if [ ! -f "$O/big/model/config.json" ]; then
    timeout 300 python3 tests/bench/bench_torch.py --dir "$O/big" --save-model --steps 1 \
        --attn sdpa > "$O/make-model.log" 2>&1 || { echo "making the model failed"; tail -5 "$O/make-model.log"; exit 1; }
fi
run() { # gpus [extra options]
    n=$1; shift
    g=""; [ "$n" -gt 1 ] && g="--gpus $n"
    log="$O/dp$n$(echo "$*" | tr -d ' -').log"
    timeout 400 $T --model "$O/big/model" --tokens "$O/big/tokens.bin" --batch 4 --seq 512 \
        --steps "$STEPS" --dtype bf16 --rank 16 --alpha 32 --mode graph $g "$@" > "$log" 2>&1 ||
        { echo "$n GPU(s) $*: failed"; tail -5 "$log"; return 1; }
    # ms a step, tokens/s, rank 0's device memory after create (GiB)
    echo "$(grep -h "ms/step" "$log" | tail -1 | awk '{ print $1, $3 }')" \
         "$(grep -h "device memory in use" "$log" | head -1 | awk '{ print $7 }')"
}
nvidia-smi --query-gpu=index,name --format=csv,noheader
rm -f "$O/table.txt"
for n in 1 2 4; do
    [ "$n" -le "$NG" ] || continue
    line=$(run $n) && echo "$n $line" >> "$O/table.txt"
    [ "$n" -gt 1 ] && line=$(run $n --shard-optimizer) && echo "${n}z $line" >> "$O/table.txt"
done
echo
printf "%-5s %10s %12s %9s %14s %12s\n" GPUs ms/step tokens/s speed-up "added ms/step" "GiB rank 0"
awk '{ ms = $2; tps = $3; if (NR == 1) { base = tps; ms1 = ms }
       printf "%-5s %10.2f %12.0f %8.2fx %14.2f %12s\n", $1, ms, tps, tps / base, ms - ms1, $4 }' "$O/table.txt"
