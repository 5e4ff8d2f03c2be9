#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Assemble kernels with each value of a baked knob, for every target, with
# ptxas (ptxas_check.sh assembles each kernel with its default knobs only):
#     ptxas_knobs.sh PTXGEN_DUMP KNOB FIRST LAST KERNEL...
# Warnings count as errors. A target the found ptxas no longer knows (ptxas
# 13 dropped sm_70) is assembled for the next architecture it knows, which
# still checks the instructions against the .target line; one it cannot
# assemble at all is skipped. Exit 77 without ptxas.
set -u

dump=${1:?usage: ptxas_knobs.sh PTXGEN_DUMP KNOB FIRST LAST KERNEL...}
knob=${2:?knob}
first=${3:?first value}
last=${4:?last value}
shift 4
[ $# -gt 0 ] || { echo "FAIL: no kernel named"; exit 1; }

. "$(dirname "$0")/../find_ptxas.sh"
help=$("$ptxas" --help 2>&1)
known=$(printf '%s\n' "$help" | grep -o "'sm_[0-9a-z]*'" | tr -d "'")

scratch=$(mktemp -d "${TMPDIR:-/tmp}/ptxas-knobs.XXXXXX") || exit 1
trap 'rm -rf "$scratch"' EXIT INT TERM

status=0
count=0
for target in $("$dump" --targets | cut -d' ' -f1); do
    arch=$target
    if [ -n "$known" ] && ! printf '%s\n' "$known" | grep -qx "$target"; then
        n=${target#sm_}
        case $n in *[!0-9]*) continue ;; esac
        arch=$(printf '%s\n' "$known" | sed -n 's/^sm_\([0-9]*\)$/\1/p' | sort -n |
            awk -v n="$n" '$1 + 0 >= n + 0 { print "sm_" $1; exit }')
        [ -n "$arch" ] || continue
    fi
    for kernel in "$@"; do
        v=$first
        while [ "$v" -le "$last" ]; do
            f=$scratch/$kernel.$target.$v.ptx
            if ! "$dump" "$kernel" --target "$target" --set "$knob=$v" -o "$f"; then
                echo "FAIL $kernel $knob=$v $target: cannot emit"
                status=1
            elif ! out=$("$ptxas" -arch="$arch" --warning-as-error -o /dev/null "$f" 2>&1); then
                echo "FAIL $kernel $knob=$v $target: ptxas -arch=$arch"
                printf '%s\n' "$out" | sed 's/^/    /'
                status=1
            fi
            count=$((count + 1))
            v=$((v + 1))
        done
    done
done
[ "$count" -gt 0 ] || { echo "FAIL: nothing assembled"; exit 1; }
echo "$count assemblies, $([ $status -eq 0 ] && echo 'all passed' || echo 'some failed')"
exit $status
