#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The GEMM backward dispatch and the model pre-warm on a GPU, in one go:
# build (straight with cc, in parallel: no meson needed), the dispatch test
# (cuBLAS and PTX against double), the same with PTXGEN_CUBLAS=0 (the
# cuBLAS half must be skipped), compute-sanitizer memcheck on the test in
# quick mode (small shapes), and pgrt_prewarm_model for the 1.5B config
# (LoRA rank 16 and full fp32, with the driver's JIT disk cache off, then
# LoRA with it). Logs go to $OUT (default ./gpu-logs); a
# short table is printed last. Exit status 0 when every step passed.
#
#   tests/gpu_cublas/run-on-device.sh          # from the repository root
#
# libcublas is found by the runtime's own search (libcublas.so.13, .12,
# .11, libcublas.so) when the dynamic loader knows it; otherwise the script
# looks in the usual CUDA places and sets $PGRT_LIBCUBLAS.

set -u
out=${OUT:-$PWD/gpu-logs}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
failed=0

# step NAME LOG LIMIT COMMAND...: run with a time limit, note status and seconds.
step() {
    name=$1
    log=$2
    limit=$3
    shift 3
    t0=$(date +%s)
    echo "== $name: $*" >>"$log"
    timeout "$limit" "$@" >>"$log" 2>&1
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
    cc --version 2>&1 | head -n 1
} >"$out/build.log" 2>&1

# Build: every source to an object in parallel, then the two programs.
bin=$(mktemp -d "${TMPDIR:-/tmp}/cublas-bin.XXXXXX")
flags="-std=c11 -O2 -g -D_POSIX_C_SOURCE=200809L -DPTXGEN_BUILDING -DPGRT_BUILDING"
flags="$flags -Iptxgen -Ikernels -Iruntime -Itests"
export flags bin
step "build" "$out/build.log" 150 sh -c '
    ls ptxgen/*.c kernels/*.c runtime/*.c |
        xargs -P 16 -I{} sh -c "cc $flags -c {} -o $bin/\$(echo {} | tr / _).o" &&
        cc $flags "$bin"/*.o tests/gpu_cublas/test_cublas.c -o "$bin/test_cublas" \
            -ldl -lpthread -lm &&
        cc $flags "$bin"/*.o tests/gpu_cublas/prewarm_model.c -o "$bin/prewarm_model" \
            -ldl -lpthread -lm'

if ! ldconfig -p 2>/dev/null | grep -q 'libcublas\.so\.1[0-9]' && [ -z "${PGRT_LIBCUBLAS:-}" ]; then
    for f in /usr/local/cuda/lib64/libcublas.so.13 /usr/local/cuda/lib64/libcublas.so.12 \
        /usr/local/cuda/targets/x86_64-linux/lib/libcublas.so.13; do
        [ -e "$f" ] && PGRT_LIBCUBLAS=$f && break
    done
    if [ -z "${PGRT_LIBCUBLAS:-}" ]; then
        PGRT_LIBCUBLAS=$(find /usr/local /opt /usr/lib -name 'libcublas.so.1[0-9]*' \
            2>/dev/null | grep -v Lt | head -n 1)
    fi
    if [ -n "$PGRT_LIBCUBLAS" ]; then
        export PGRT_LIBCUBLAS
        LD_LIBRARY_PATH=$(dirname "$PGRT_LIBCUBLAS")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        export LD_LIBRARY_PATH
    fi
fi
echo "PGRT_LIBCUBLAS=${PGRT_LIBCUBLAS:-(the runtime's own search)}" >>"$out/build.log"

step "test_cublas (full)" "$out/test.log" 180 "$bin/test_cublas"
step "test_cublas PTXGEN_CUBLAS=0" "$out/test.log" 60 env PTXGEN_CUBLAS=0 PGRT_GPU_QUICK=1 \
    "$bin/test_cublas"
if ! grep -q 'cuBLAS half skipped: turned off by PTXGEN_CUBLAS=0' "$out/test.log"; then
    echo "PTXGEN_CUBLAS=0 did not skip the cuBLAS half" >>"$out/test.log"
    printf '%-36s %-16s\n' "PTXGEN_CUBLAS=0 skip message" "FAILED" >>"$summary"
    failed=1
fi

cs=compute-sanitizer
command -v "$cs" >/dev/null 2>&1 || cs=/usr/local/cuda/bin/compute-sanitizer
step "memcheck test_cublas (quick)" "$out/sanitizer.log" 150 env PGRT_GPU_QUICK=1 \
    "$cs" --tool memcheck --error-exitcode 9 --print-limit 20 "$bin/test_cublas"

# Cold JIT first (the driver's disk cache off), then with the disk cache:
# one run fills it, the next reads it.
step "prewarm 1.5B LoRA r16, cold JIT" "$out/prewarm.log" 60 env CUDA_CACHE_DISABLE=1 \
    "$bin/prewarm_model"
step "prewarm 1.5B full fp32, cold JIT" "$out/prewarm.log" 60 env CUDA_CACHE_DISABLE=1 \
    "$bin/prewarm_model" --rank 0 --full
step "prewarm 1.5B LoRA r16, fill cache" "$out/prewarm.log" 60 "$bin/prewarm_model"
step "prewarm 1.5B LoRA r16, disk cache" "$out/prewarm.log" 60 "$bin/prewarm_model"

echo
grep -E '^(device|cuBLAS)' "$out/test.log" 2>/dev/null | sort -u | head -n 4
grep -E '^FAIL' "$out/test.log" 2>/dev/null | head -n 10
grep -E 'stream order|graph capture|GEMMs dispatched|cuBLAS half skipped' "$out/test.log" \
    2>/dev/null
grep -E 'ERROR SUMMARY' "$out/sanitizer.log" 2>/dev/null
echo
sed -n '/^op /,/^all within\|^FAILED/p' "$out/test.log" 2>/dev/null | head -n 8
echo
grep -E '^(== prewarm|first call|second call)' "$out/prewarm.log" 2>/dev/null | sed 's/: .*prewarm_model.*//'
grep -E '^config' "$out/prewarm.log" 2>/dev/null | head -n 1
echo
cat "$summary"
exit "$failed"
