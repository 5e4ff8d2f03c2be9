#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The training step on a GPU machine, in one go: build, the forward-kernel
# test and the training-contract test, compute-sanitizer memcheck on the
# forward kernels (small shapes) and on a tiny training run, then
# `ptxgen-train --mode both` at batch 4. Logs go to $LOGDIR (default
# ./train-logs); a short table is printed last.
#
#   LOGDIR=/tmp/logs tests/train/run-on-device.sh     # from the repository root
#
# Exit status: 0 when every step passed.

set -u
out=${LOGDIR:-$PWD/train-logs}
build=${BUILD:-build-train}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
failed=0

# step NAME LOG COMMAND...: run with a time limit, note status and seconds.
step() {
    name=$1
    log=$2
    shift 2
    t0=$(date +%s)
    timeout 150 "$@" >>"$log" 2>&1
    rc=$?
    t1=$(date +%s)
    if [ "$rc" -eq 0 ]; then
        res=ok
    elif [ "$rc" -eq 77 ]; then
        res=skipped
    else
        res="FAILED (exit $rc)"
        failed=1
    fi
    printf '%-40s %-16s %4ss\n' "$name" "$res" "$((t1 - t0))" >>"$summary"
    return "$rc"
}

# meson from PATH, else the Python module.
if command -v meson >/dev/null 2>&1; then
    meson="meson"
else
    meson="python3 -m mesonbuild.mesonmain"
fi

{
    echo "== machine"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
    compute-sanitizer --version 2>&1 | tail -n 1
    cc --version | head -n 1
    $meson --version
} >"$out/build.log" 2>&1

[ -f "$build/build.ninja" ] || step "meson setup" "$out/build.log" $meson setup "$build"
step "build" "$out/build.log" ninja -C "$build" tests/train/test_forward tests/train/test_train \
    tools/ptxgen-train

step "gpu-forward (test_forward)" "$out/forward.log" "$build/tests/train/test_forward"
step "gpu-train (test_train)" "$out/train.log" "$build/tests/train/test_train"
step "memcheck test_forward --small" "$out/memcheck.log" \
    compute-sanitizer --tool memcheck --error-exitcode 3 "$build/tests/train/test_forward" --small
step "memcheck ptxgen-train (tiny)" "$out/memcheck.log" \
    compute-sanitizer --tool memcheck --error-exitcode 3 "$build/tools/ptxgen-train" \
    --layers 2 --hidden 48 --seq 12 --batch 2 --steps 3
step "ptxgen-train --mode both --batch 4" "$out/ptxgen-train.log" \
    "$build/tools/ptxgen-train" --mode both --batch 4

{
    echo
    echo "== results"
    grep -h "^device:" "$out/forward.log" | head -n 1
    echo "-- forward kernels (test_forward): $(grep -c ' PASS$' "$out/forward.log") rows pass," \
        "$(grep -c ' FAIL$' "$out/forward.log") fail; worst rel err" \
        "$(awk '$NF == "PASS" || $NF == "FAIL" { if ($(NF-4) + 0 > w) w = $(NF-4) + 0 } END { printf "%.2e", w }' "$out/forward.log")"
    echo "-- training contracts (test_train):"
    grep -h -E "^(F-GRAPH|batch|loss)" "$out/train.log"
    grep -h "checks," "$out/train.log"
    echo "-- memcheck:"
    grep -h "ERROR SUMMARY" "$out/memcheck.log"
    echo "-- ptxgen-train --mode both --batch 4:"
    grep -h -E "^(ptxgen-train:|eager:|graph:|loss:|F-GRAPH)" "$out/ptxgen-train.log"
} >>"$summary" 2>&1

cat "$summary"
exit "$failed"
