#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The backward and optimizer kernel tests on a GPU machine, in one go: build
# test_backward, run it (full shapes, fresh seed), then compute-sanitizer
# memcheck, racecheck and initcheck on the small shapes. Logs go to $OUT
# (default ./gpu-kernels-logs); the summary and the error table come last.
#
#   tests/gpu_kernels/run-on-device.sh        # from the repository root
#   SEED=1234 tests/gpu_kernels/run-on-device.sh
#
# Without meson the test is built with one compiler line (the libraries are
# plain C11). Exit status: 0 when every step passed.

set -u
out=${OUT:-$PWD/gpu-kernels-logs}
build=${BUILD:-build-gpu-kernels}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
failed=0
seed_arg=
[ -n "${SEED:-}" ] && seed_arg="--seed $SEED"

# step NAME LOG COMMAND...: run with a time limit, note status and seconds.
step() {
    name=$1
    log=$2
    shift 2
    t0=$(date +%s)
    timeout "${STEP_TIMEOUT:-150}" "$@" >>"$log" 2>&1
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
    printf '%-36s %-16s %4ss\n' "$name" "$res" "$((t1 - t0))" >>"$summary"
    return "$rc"
}

{
    echo "== machine"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
    compute-sanitizer --version 2>&1 | tail -n 1
    cc --version | head -n 1
    meson --version 2>&1
} >"$out/build.log" 2>&1

if command -v meson >/dev/null 2>&1; then
    [ -f "$build/build.ninja" ] || step "meson setup" "$out/build.log" meson setup "$build"
    step "build test_backward" "$out/build.log" ninja -C "$build" tests/gpu_kernels/test_backward
    bin=$build/tests/gpu_kernels/test_backward
else
    mkdir -p "$build"
    step "build test_backward (cc)" "$out/build.log" cc -std=c11 -O2 -g \
        -D_POSIX_C_SOURCE=200809L -DPTXGEN_BUILDING -DPGRT_BUILDING \
        -Iptxgen -Ikernels -Iruntime -Itests \
        ptxgen/*.c kernels/*.c runtime/*.c tests/gpu_kernels/test_backward.c \
        -o "$build/test_backward" -ldl -lpthread -lm
    bin=$build/test_backward
fi

# shellcheck disable=SC2086 # seed_arg is empty or two words
step "test_backward" "$out/test.log" "$bin" $seed_arg

cs="compute-sanitizer --error-exitcode 9 --print-limit 20"
step "memcheck test_backward --small" "$out/memcheck.log" \
    $cs --tool memcheck --leak-check full "$bin" --small
step "racecheck test_backward --small" "$out/racecheck.log" \
    $cs --tool racecheck "$bin" --small
step "initcheck test_backward --small" "$out/initcheck.log" \
    $cs --tool initcheck "$bin" --small

for f in memcheck racecheck initcheck; do
    printf '%s: ' "$f"
    grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hazard' "$out/$f.log" | tail -n 2 | tr '\n' ' '
    echo
done
echo
cat "$summary"
echo
grep -E '^(device|seed):' "$out/test.log"
sed -n '/^kernel /,$p' "$out/test.log"
exit "$failed"
