#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Everything the runtime needs a GPU for, in one go: build, the gpu suite,
# compute-sanitizer (memcheck, racecheck, initcheck) on the gpu tests in
# quick mode, then the clip benchmark. Logs go to $LOGDIR (default
# ./gpu-logs);
# a short summary is printed last.
#
#   LOGDIR=/tmp/logs tests/gpu/run-on-device.sh     # from the repository root
#
# Exit status: 0 when every step passed.

set -u
out=${LOGDIR:-$PWD/gpu-logs}
build=${BUILD:-build-gpu}
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
    timeout 420 "$@" >>"$log" 2>&1
    rc=$?
    t1=$(date +%s)
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ]; then
        res=ok
        [ "$rc" -eq 77 ] && res=skipped
    else
        res="FAILED (exit $rc)"
        failed=1
    fi
    printf '%-34s %-16s %4ss\n' "$name" "$res" "$((t1 - t0))" >>"$summary"
    return "$rc"
}

{
    echo "== machine"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
    compute-sanitizer --version 2>&1 | tail -n 1
    cc --version | head -n 1
    meson --version
} >"$out/build.log" 2>&1

# A build directory left by an earlier run is reused (ninja rebuilds what
# changed).
[ -f "$build/build.ninja" ] || step "meson setup" "$out/build.log" meson setup "$build"

# Other parts of the tree may be mid-change; the runtime's own targets are
# built first so that a foreign failure does not hide the gpu results.
gpu_targets="tests/gpu/test_gpu_kernels tests/gpu/test_gpu_pipeline tests/gpu/test_gpu_runtime tests/gpu/bench_clip"
step "build (gpu targets)" "$out/build.log" ninja -C "$build" $gpu_targets
if step "build (everything)" "$out/build.log" ninja -C "$build"; then
    step "meson test --suite gpu" "$out/gpu-tests.log" \
        meson test -C "$build" --suite gpu --no-rebuild --print-errorlogs
else
    step "meson test (runtime gpu tests)" "$out/gpu-tests.log" \
        meson test -C "$build" --no-rebuild --print-errorlogs gpu-kernels gpu-pipeline gpu-runtime
fi
cp "$build/meson-logs/testlog.txt" "$out/gpu-testlog.txt" 2>/dev/null

# Sanitizers: quick mode (no 350M model); an error reported fails the step.
cs="compute-sanitizer --error-exitcode 9 --print-limit 20"
for t in kernels pipeline runtime; do
    # test_gpu_runtime provokes driver errors on purpose (broken PTX, a
    # sync inside a capture); those are its checks, not memcheck's.
    api=
    [ "$t" = runtime ] && api="--report-api-errors no"
    step "memcheck test_gpu_$t" "$out/memcheck.log" env PGRT_GPU_QUICK=1 \
        $cs --tool memcheck --leak-check full $api "$build/tests/gpu/test_gpu_$t"
done
for t in kernels pipeline; do
    step "racecheck test_gpu_$t" "$out/racecheck.log" env PGRT_GPU_QUICK=1 \
        $cs --tool racecheck "$build/tests/gpu/test_gpu_$t"
    step "initcheck test_gpu_$t" "$out/initcheck.log" env PGRT_GPU_QUICK=1 \
        $cs --tool initcheck "$build/tests/gpu/test_gpu_$t"
done

step "bench_clip" "$out/bench.log" "$build/tests/gpu/bench_clip"

echo
cat "$summary"
echo
grep -E '^\||bandwidth|speed-up|on ' "$out/bench.log" 2>/dev/null
exit "$failed"
