#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Assemble, for every target, the kernel holding every instruction form the
# builder accepts (ptx_matrix), with ptxas:
#     matrix_check.sh PTX_MATRIX
# A form the builder accepts and ptxas rejects fails, naming the line.
# One ptxas call a target; warnings count as errors.
#
# ptxas is looked for in $PTXAS, on PATH, in $CUDA_HOME/bin, $CUDA_PATH/bin
# and /usr/local/cuda/bin; exit 77 (skip) when there is none. A target this
# ptxas no longer knows (ptxas 13 dropped sm_70) is assembled for the next
# architecture it knows: ptxas checks the instructions against the .target
# line, so the rules of the old target are still the ones checked.
set -u

matrix=${1:?usage: matrix_check.sh PTX_MATRIX}

. "$(dirname "$0")/../find_ptxas.sh"
version=$("$ptxas" --version 2>&1 | sed -n 's/.*release \([0-9.]*\).*/\1/p' | head -n 1)
echo "using $ptxas (CUDA ${version:-version unknown})"
help=$("$ptxas" --help 2>&1)
werror=
case $help in
*--warning-as-error*) werror=--warning-as-error ;;
esac

scratch=$(mktemp -d "${TMPDIR:-/tmp}/ptxas-matrix.XXXXXX") || exit 1
trap 'rm -rf "$scratch"' EXIT INT TERM

status=0
checked=0
for target in $("$matrix" --targets); do
    arch=$target
    case $help in
    *"Allowed values"*)
        case $help in
        *"'$target'"*) ;;
        *)
            n=${target#sm_}
            case $n in
            *[!0-9]* | '') n= ;;
            esac
            arch=
            if [ -n "$n" ]; then
                arch=$(printf '%s\n' "$help" | grep -o "'sm_[0-9]*'" | tr -d "'" |
                    sed 's/^sm_//' | sort -n | awk -v n="$n" '$1 + 0 >= n + 0 { print "sm_" $1; exit }')
            fi
            if [ -z "$arch" ]; then
                echo "skip $target: this ptxas does not know it"
                continue
            fi
            ;;
        esac
        ;;
    esac
    f=$scratch/$target.ptx
    if ! "$matrix" "$target" >"$f" 2>"$scratch/gen.err"; then
        echo "FAIL $target: ptx_matrix failed:"
        sed 's/^/    /' "$scratch/gen.err"
        status=1
        continue
    fi
    forms=$(sed -n 's/.*: \([0-9]* of [0-9]*\) forms accepted/\1/p' "$scratch/gen.err")
    checked=$((checked + 1))
    if out=$("$ptxas" -arch="$arch" $werror -o /dev/null "$f" 2>&1); then
        echo "ok   $target (-arch=$arch): $forms forms"
        continue
    fi
    status=1
    echo "FAIL $target (-arch=$arch): ptxas rejects forms the builder accepts:"
    # "ptxas file.ptx, line 123; error : ..." -> the message and the line
    printf '%s\n' "$out" | sed -n 's/.*, line \([0-9]*\); \(.*\)/\1 \2/p' | head -n 40 |
        while read -r line msg; do
            printf '    %s\n        line %s: %s\n' "$msg" "$line" "$(sed -n "${line}p" "$f" | tr -d '\t')"
        done
    printf '%s\n' "$out" | grep -v ', line [0-9]*;' | head -n 5 | sed 's/^/    /'
done
if [ "$checked" -eq 0 ]; then
    echo "SKIP: this ptxas knows none of the targets"
    exit 77
fi
exit $status
