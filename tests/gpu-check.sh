#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Everything that needs a GPU, in one script: build, the gpu suite,
# compute-sanitizer (memcheck and racecheck) over every gpu test program
# on small shapes, and the benchmarks. Logs go to $LOGDIR (default
# ./gpu-logs), one file a step; a short summary and the benchmark tables
# are printed last.
#
#   tests/gpu-check.sh [all|test|sanitize|bench]     # from the repository root
#
# BUILD names the build directory (default build-gpu; reused when it
# exists). PGRT_TEST_SEED replays a test's random data. Exit status 0 when
# every step passed (a skipped gpu test counts as passed: no device).

set -u
what=${1:-all}
case $what in
all | test | sanitize | bench) ;;
*)
    echo "usage: tests/gpu-check.sh [all|test|sanitize|bench]" >&2
    exit 2
    ;;
esac
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
    timeout "${STEP_TIMEOUT:-300}" "$@" >>"$log" 2>&1
    rc=$?
    t1=$(date +%s)
    case $rc in
    0) res=ok ;;
    77) res=skipped ;;
    *) res="FAILED (exit $rc)" failed=1 ;;
    esac
    printf '%-44s %-16s %4ss\n' "$name" "$res" "$((t1 - t0))" >>"$summary"
    return "$rc"
}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1
    compute-sanitizer --version 2>&1 | tail -n 1
    cc --version | head -n 1
} >"$out/machine.log" 2>&1

[ -f "$build/build.ninja" ] || step "meson setup" "$out/build.log" meson setup "$build"
step "build" "$out/build.log" ninja -C "$build" || {
    cat "$summary"
    exit 1
}
b=$build

if [ "$what" = all ] || [ "$what" = test ]; then
    step "meson test --suite gpu" "$out/gpu-tests.log" \
        meson test -C "$b" --suite gpu --no-rebuild --print-errorlogs
    cp "$b/meson-logs/testlog.txt" "$out/gpu-testlog.txt" 2>/dev/null
fi

if [ "$what" = all ] || [ "$what" = sanitize ]; then
    # Small shapes: PGRT_GPU_QUICK for some programs, --small for the others.
    cs="compute-sanitizer --error-exitcode 9 --print-limit 20"
    # tests/kernels/test_X is the test of kernels/X.c, tests/runtime/test_X_gpu
    # of runtime/X.c (docs/testing.md).
    set -- \
        "kernels/test_clip" "runtime/test_clip_gpu" "runtime/test_core_gpu" \
        "runtime/test_train_optim_gpu" \
        "kernels/test_silu --small" "kernels/test_softmax --small" \
        "kernels/test_elementwise --small" "kernels/test_rmsnorm --small" \
        "kernels/test_adamw --small" "kernels/test_gemm_f32_forward --small" \
        "kernels/test_gemm_f32" "kernels/test_gemm_f32_tiled" "kernels/test_gemm_mma" \
        "kernels/test_gemm_sm90" "kernels/test_gemm_thin" \
        "kernels/test_attention_sm90 --small" \
        "runtime/test_cublas_gpu" "runtime/test_sm90_gpu" \
        "kernels/test_embedding --small" "kernels/test_rope --small" \
        "kernels/test_swiglu --small" "kernels/test_bias --small" \
        "kernels/test_cast_bf16 --small" "kernels/test_cross_entropy --small" \
        "kernels/test_attention --small" "kernels/test_attention_docs --small" \
        "kernels/test_attention_mma --small" "runtime/test_gemm_plan_gpu" \
        "kernels/test_lora --small" "model/test_lm_gpu" \
        "kernels/test_cross_entropy_dscale --small" "kernels/test_rope_table --small" \
        "kernels/test_schedule --small"
    for t in "$@"; do
        # test_core_gpu provokes driver errors on purpose (broken PTX, a
        # sync inside a capture): those are its checks, not memcheck's.
        api=
        case $t in runtime/test_core_gpu) api="--report-api-errors no" ;; esac
        step "memcheck $t" "$out/memcheck.log" env PGRT_GPU_QUICK=1 \
            $cs --tool memcheck --leak-check full $api $b/tests/$t
        case $t in runtime/test_core_gpu | runtime/test_cublas_gpu) continue ;; esac
        step "racecheck $t" "$out/racecheck.log" env PGRT_GPU_QUICK=1 \
            $cs --tool racecheck $b/tests/$t
    done
    # mbarriers and named barriers: the warp-specialized GEMM's synchronisation
    step "synccheck kernels/test_gemm_sm90" "$out/synccheck.log" env PGRT_GPU_QUICK=1 \
        $cs --tool synccheck $b/tests/kernels/test_gemm_sm90
    # ... and the attention's, with its pingpong of bar.sync / bar.arrive
    step "synccheck kernels/test_attention_sm90" "$out/synccheck.log" \
        $cs --tool synccheck $b/tests/kernels/test_attention_sm90 --small
    step "memcheck ptxgen-train (tiny)" "$out/memcheck.log" \
        $cs --tool memcheck "$b/tools/ptxgen-train" --layers 2 --hidden 48 --seq 12 \
        --batch 2 --steps 3 --mode both
fi

if [ "$what" = all ] || [ "$what" = bench ]; then
    step "bench_clip" "$out/bench-clip.log" "$b/tests/bench/bench_clip"
    step "bench_optim" "$out/bench-optim.log" "$b/tests/bench/bench_optim"
    # PyTorch on the same shapes, where the machine has it.
    if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
        step "bench_optim.py (PyTorch)" "$out/bench-optim.log" python3 tests/bench/bench_optim.py
    fi
    step "bench_gemm --quick" "$out/bench-gemm.log" "$b/tests/bench/bench_gemm" --quick
    step "bench_gemm --lora (gemm_thin's forms)" "$out/bench-gemm-lora.log" \
        "$b/tests/bench/bench_gemm" --lora
    step "bench_gemm_sm90" "$out/bench-gemm-sm90.log" "$b/tests/bench/bench_gemm_sm90"
    step "bench_attention_sm90" "$out/bench-attention-sm90.log" \
        "$b/tests/bench/bench_attention_sm90"
    step "bench_lora" "$out/bench-lora.log" "$b/tests/bench/bench_lora"
    # The cold JIT: neither the driver's cache nor ptxgen's cubin cache.
    step "prewarm (1.5B LoRA config)" "$out/prewarm.log" env CUDA_CACHE_DISABLE=1 \
        PTXGEN_CACHE=0 "$b/tests/runtime/test_prewarm_gpu"
    step "bench_prewarm (start-up: parallel JIT, cubin cache)" "$out/bench-prewarm.log" \
        "$b/tests/bench/bench_prewarm" --runs 3
    step "ptxgen-train --mode both --batch 4" "$out/train.log" \
        "$b/tools/ptxgen-train" --mode both --batch 4
fi

echo
sed -n 2p "$out/machine.log"
cat "$summary"
if [ "$what" = all ] || [ "$what" = bench ]; then
    echo
    grep -h -E '^\||bandwidth|speed-up' "$out/bench-clip.log" 2>/dev/null
    echo
    grep -h -E '^\||bandwidth|^torch' "$out/bench-optim.log" 2>/dev/null
    echo
    grep -v '^device:' "$out/bench-gemm.log" 2>/dev/null | head -n 40
    echo
    grep -h -E '^(lora|FORMS|  (bf16|f16|fp32) )' "$out/bench-gemm-lora.log" 2>/dev/null
    echo
    grep -v '^device:' "$out/bench-gemm-sm90.log" 2>/dev/null | head -n 24
    echo
    grep -v '^device:' "$out/bench-attention-sm90.log" 2>/dev/null
    echo
    cat "$out/bench-lora.log" 2>/dev/null
    echo
    tail -n 8 "$out/prewarm.log" 2>/dev/null
    echo
    grep -v '^device:' "$out/bench-prewarm.log" 2>/dev/null | tail -n 8
    echo
    grep -h -E '^(ptxgen-train:|eager:|graph:|F-GRAPH|throughput)' "$out/train.log" 2>/dev/null
fi
exit "$failed"
