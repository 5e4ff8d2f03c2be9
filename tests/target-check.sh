#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Every target family on one GPU: the gpu suite and the model reference
# (tests/model/gpu-check.sh ref) once for each target named, through the
# target override (PTXGEN_TARGET, docs/runtime.md): an sm_80 build on an H100
# runs the mma.sync path, sm_75 the SIMT one, "native" the device's own
# (sm_90a there). Prints one row a target:
#
#   target  gpu suite (ok / skipped / failed of all)  model reference (f32, bf16, graph)
#
#   tests/target-check.sh BUILD_DIR OUT_DIR [TARGET...]   # default: native sm_90 sm_89
#                                                         # sm_86 sm_80 sm_75 sm_70
# PARTS=suite or PARTS=ref runs one half. Needs a GPU, and for the reference
# PyTorch, transformers and peft. Exit 0 when every row passed.
set -u
B=$1
O=$2
shift 2
[ $# -gt 0 ] || set -- native sm_90 sm_89 sm_86 sm_80 sm_75 sm_70
PARTS=${PARTS:-"suite ref"}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
mkdir -p "$O"
table="$O/targets.txt"
: >"$table"
failed=0
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)

if has ref; then
    python3 tests/model/reference.py all --dir "$O/ref" >"$O/reference.log" 2>&1 ||
        echo "reference.py failed: see reference.log" >&2
fi

# A count from meson test's summary ("Ok:  27"); 0 when the line is absent.
count() {
    n=$(sed -n "s/^$1: *\([0-9]*\).*/\1/p" "$2")
    echo "${n:-0}"
}

# "pass", "FAIL" or "-" from a compare log's exit line in gpu-check.sh's output;
# "needs sm_80" where ptxgen-train refused bf16 for the target, as it must.
verdict() {
    case $1 in *bf16*)
        if grep -q "bf16 needs target sm_80 or newer" "$O/ref-$t/train-bf16.log" 2>/dev/null; then
            echo "needs sm_80"
            return
        fi
        ;;
    esac
    line=$(grep -m1 "^$1: exit" "$2" 2>/dev/null) || {
        echo -
        return
    }
    case $line in *"exit 0") echo pass ;; *) echo FAIL ;; esac
}

for t in "$@"; do
    if [ "$t" = native ]; then
        unset PTXGEN_TARGET
    else
        PTXGEN_TARGET=$t
        export PTXGEN_TARGET
    fi
    suite=-
    if has suite; then
        log="$O/suite-$t.log"
        meson test -C "$B" --suite gpu --no-rebuild --print-errorlogs >"$log" 2>&1
        cp "$B/meson-logs/testlog.txt" "$O/testlog-$t.txt" 2>/dev/null
        ok=$(count Ok "$log")
        sk=$(count Skipped "$log")
        fl=$(($(count Fail "$log") + $(count Timeout "$log")))
        suite="$ok ok / $sk skipped / $fl failed"
        [ "$fl" = 0 ] && [ -n "$ok" ] || failed=1
    fi
    ref="-"
    if has ref; then
        log="$O/ref-$t.log"
        REF_DIR="$O/ref" tests/model/gpu-check.sh "$B" "$O/ref-$t" ref >"$log" 2>&1
        f=$(verdict "compare f32" "$log")
        b=$(verdict "compare bf16" "$log")
        g=$(verdict "compare graph f32" "$log")
        ref="f32 $f, bf16 $b, graph $g"
        case "$f $b $g" in *FAIL* | *" - "* | "- "* | *" -") failed=1 ;; esac
    fi
    printf '%-7s | %-34s | %s\n' "$t" "$suite" "$ref" >>"$table"
done
unset PTXGEN_TARGET

echo "card: $card"
printf '%-7s | %-34s | %s\n' target "gpu suite" "model reference"
cat "$table"
exit "$failed"
