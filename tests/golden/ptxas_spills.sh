#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Assemble one kernel for one target at each listed value of a baked knob
# with ptxas -v, and fail on any stack frame or spill:
#     ptxas_spills.sh [-c] PTXGEN_DUMP TARGET KERNEL KNOB VALUE...
# For the register-hungry warp-specialized kernels (setmaxnreg gives their
# consumers up to 240 registers, and one more live value would spill):
# ptxas_check.sh assembles their default knobs only and does not look at
# spills. Prints ptxas's resource line of each. Exit 77 without ptxas, or
# with one that does not know TARGET.
set -u

# The runtime JITs a kernel through the driver's linker, a relocatable
# compile, unless its descriptor sets whole_program (docs/runtime.md):
# -c first checks it as the linker compiles it (ptxas -c), else as a
# whole program.
mode=
if [ "${1:-}" = -c ]; then
    mode=-c
    shift
fi
dump=${1:?usage: ptxas_spills.sh [-c] PTXGEN_DUMP TARGET KERNEL KNOB VALUE...}
target=${2:?target}
kernel=${3:?kernel}
knob=${4:?knob}
shift 4
[ $# -gt 0 ] || { echo "FAIL: no value"; exit 1; }

. "$(dirname "$0")/../find_ptxas.sh"
case $("$ptxas" --help 2>&1) in
*"'$target'"*) ;;
*)
    echo "SKIP: this ptxas does not know $target"
    exit 77
    ;;
esac

scratch=$(mktemp -d "${TMPDIR:-/tmp}/ptxas-spills.XXXXXX") || exit 1
trap 'rm -rf "$scratch"' EXIT INT TERM

status=0
for v in "$@"; do
    f=$scratch/$kernel.$v.ptx
    if ! "$dump" "$kernel" --target "$target" --set "$knob=$v" -o "$f"; then
        echo "FAIL $kernel $knob=$v: cannot emit"
        status=1
        continue
    fi
    if ! out=$("$ptxas" -arch="$target" $mode -v --warning-as-error -o "$scratch/out" "$f" 2>&1); then
        echo "FAIL $kernel $knob=$v: ptxas -arch=$target"
        printf '%s\n' "$out" | sed 's/^/    /'
        status=1
        continue
    fi
    frame=$(printf '%s\n' "$out" | grep -o '[0-9]* bytes stack frame, [0-9]* bytes spill stores, [0-9]* bytes spill loads')
    regs=$(printf '%s\n' "$out" | grep -o 'Used [0-9]* registers.*')
    case $frame in
    "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads")
        echo "ok   $kernel $knob=$v: $frame; $regs" ;;
    *)
        echo "FAIL $kernel $knob=$v: ${frame:-no resource line}; $regs"
        status=1 ;;
    esac
done
exit $status
