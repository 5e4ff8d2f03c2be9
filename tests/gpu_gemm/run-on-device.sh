#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The GEMM backward kernels on a GPU, in one go: build (or use a build
# directory given in $BUILD), the numerics test, compute-sanitizer memcheck,
# racecheck and initcheck on the test in quick mode (small shapes), then the
# benchmark against cuBLAS. Logs go to $OUT (default ./gpu-logs); a short
# summary and the benchmark table are printed last.
#
#   tests/gpu_gemm/run-on-device.sh          # from the repository root
#   BUILD=build tests/gpu_gemm/run-on-device.sh
#
# Without $BUILD (or when its binaries do not run) the two programs are
# compiled straight with cc, so neither meson nor ninja is needed on the
# GPU machine. libcublas is looked for in the usual CUDA places and
# $PGRT_LIBCUBLAS is set for the benchmark. Exit status 0 when every step
# passed.

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
    printf '%-28s %-16s %4ss\n' "$name" "$res" "$((t1 - t0))" >>"$summary"
    return "$rc"
}

{
    echo "== machine"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
    compute-sanitizer --version 2>&1 | tail -n 1
    cc --version 2>&1 | head -n 1
} >"$out/build.log" 2>&1

bin=
if [ -n "${BUILD:-}" ] && [ -x "$BUILD/tests/gpu_gemm/test_gemm" ] &&
    [ -x "$BUILD/tests/gpu_gemm/bench_gemm" ]; then
    bin=$BUILD/tests/gpu_gemm
    echo "using the binaries in $bin" >>"$out/build.log"
fi
if [ -z "$bin" ]; then
    bin=$(mktemp -d "${TMPDIR:-/tmp}/gemm-bin.XXXXXX")
    src="ptxgen/*.c kernels/*.c runtime/*.c"
    flags="-std=c11 -O2 -g -D_POSIX_C_SOURCE=200809L -DPTXGEN_BUILDING -DPGRT_BUILDING"
    flags="$flags -Iptxgen -Ikernels -Iruntime -Itests -Itests/gpu_gemm"
    step "build test_gemm" "$out/build.log" 300 \
        cc $flags $src tests/gpu_gemm/test_gemm.c -o "$bin/test_gemm" -ldl -lpthread -lm
    step "build bench_gemm" "$out/build.log" 300 \
        cc $flags $src tests/gpu_gemm/bench_gemm.c tests/gpu_gemm/cublas_dl.c \
        -o "$bin/bench_gemm" -ldl -lpthread -lm
fi

if [ -z "${PGRT_LIBCUBLAS:-}" ]; then
    for f in /usr/local/cuda/lib64/libcublas.so.13 /usr/local/cuda/lib64/libcublas.so.12 \
        /usr/local/cuda/targets/x86_64-linux/lib/libcublas.so.13 \
        /usr/lib/x86_64-linux-gnu/libcublas.so.13 /usr/lib/x86_64-linux-gnu/libcublas.so.12; do
        [ -e "$f" ] && PGRT_LIBCUBLAS=$f && break
    done
    if [ -z "${PGRT_LIBCUBLAS:-}" ]; then
        PGRT_LIBCUBLAS=$(find /usr/local /opt /usr/lib -name 'libcublas.so.1[0-9]*' 2>/dev/null |
            grep -v Lt | head -n 1)
    fi
    if [ -n "$PGRT_LIBCUBLAS" ]; then
        export PGRT_LIBCUBLAS
        LD_LIBRARY_PATH=$(dirname "$PGRT_LIBCUBLAS")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        export LD_LIBRARY_PATH
    fi
fi
echo "PGRT_LIBCUBLAS=${PGRT_LIBCUBLAS:-}" >>"$out/build.log"

# Registers, spills and the machine code of the fast forms, where the
# build directory has ptxgen-dump and the machine cuobjdump.
dump=${BUILD:-}/tools/ptxgen-dump
if [ -n "${BUILD:-}" ] && [ -x "$dump" ] && command -v ptxas >/dev/null 2>&1; then
    sdir=$(mktemp -d "${TMPDIR:-/tmp}/gemm-sass.XXXXXX")
    for kv in gemm_backward_a:0 gemm_backward_a:1 gemm_backward_a:2 gemm_backward_a:3 gemm_backward_b:1 \
        gemm_backward_b:2 gemm_backward_b:3 gemm_backward_a_accumulate:1 gemm_f16_backward_a:-; do
        k=${kv%:*}
        v=${kv#*:}
        set --
        [ "$v" = - ] || set -- --set "variant=$v"
        "$dump" "$k" --target sm_90 "$@" -o "$sdir/$k-$v.ptx" &&
            ptxas -arch=sm_90 -v -o "$sdir/$k-$v.cubin" "$sdir/$k-$v.ptx" >>"$out/sass.txt" 2>&1
        if command -v cuobjdump >/dev/null 2>&1 && [ "$v" != 0 ]; then
            echo "== $k variant $v" >>"$out/sass.txt"
            cuobjdump -sass "$sdir/$k-$v.cubin" >>"$out/sass.txt" 2>&1
        fi
    done
    grep -E 'Compiling|Used|spill' "$out/sass.txt" >"$out/registers.txt"
fi

step "test_gemm (full)" "$out/test.log" 200 "$bin/test_gemm"

cs="compute-sanitizer --error-exitcode 9 --print-limit 20"
step "memcheck test_gemm" "$out/sanitizer.log" 100 env PGRT_GPU_QUICK=1 \
    $cs --tool memcheck --leak-check full "$bin/test_gemm"
step "racecheck test_gemm" "$out/sanitizer.log" 100 env PGRT_GPU_QUICK=1 \
    $cs --tool racecheck --racecheck-report all "$bin/test_gemm"
step "initcheck test_gemm" "$out/sanitizer.log" 60 env PGRT_GPU_QUICK=1 \
    $cs --tool initcheck "$bin/test_gemm"

step "bench_gemm" "$out/bench.log" 120 "$bin/bench_gemm"

echo
cat "$summary"
echo
grep -E 'worst|FAIL' "$out/test.log" 2>/dev/null | head -n 20
grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|hazard' "$out/sanitizer.log" 2>/dev/null | head -n 20
echo
cat "$out/bench.log" 2>/dev/null | grep -v '^==' | tail -n 40
exit "$failed"
