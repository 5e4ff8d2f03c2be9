#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Assemble every kernel of the catalog for one target with ptxas:
#     ptxas_check.sh TARGET PTXGEN_DUMP
# The PTX is emitted afresh ('PTXGEN_DUMP --all --target TARGET'), so every
# kernel is assembled for every target it supports, whether or not its golden
# file is shared with other targets. The golden suite proves the bytes did
# not change; this proves they are PTX that NVIDIA's assembler accepts for
# the target (.version, .target and every instruction; warnings count as
# errors), and that each declares the lowest .version that works (DESIGN §2):
# one ISA version lower is refused.
#
# ptxas is looked for in $PTXAS, on PATH, in $CUDA_HOME/bin, $CUDA_PATH/bin
# and /usr/local/cuda/bin. Exit 77 (skip) when none is found, or when the one
# found can assemble TARGET's PTX for no architecture (see below); every other
# problem fails.
set -u

target=${1:?usage: ptxas_check.sh TARGET PTXGEN_DUMP}
dump=${2:?usage: ptxas_check.sh TARGET PTXGEN_DUMP}

. "$(dirname "$0")/../find_ptxas.sh"

version=$("$ptxas" --version 2>&1 | sed -n 's/.*release \([0-9.]*\).*/\1/p' | head -n 1)
echo "using $ptxas (CUDA ${version:-version unknown})"

# ptxas lists the architectures it accepts in its help text, each quoted;
# an older one that prints no list is taken at its word by the assembly.
#
# A target it no longer knows (ptxas 13 dropped sm_70) is still checked when
# it is not architecture-specific: PTX for .target sm_XY assembles for any
# sm_MN with MN >= XY, and ptxas checks the .version and every instruction
# against the .target line, not against -arch (it refuses an sm_80
# instruction in .target sm_70 PTX assembled for sm_75). Only the machine
# code for the old target itself goes untested.
help=$("$ptxas" --help 2>&1)
arch=$target
case $help in
*"Allowed values"*)
    case $help in
    *"'$target'"*) ;;
    *)
        n=${target#sm_}
        case $n in
        *[!0-9]* | '') n= ;; # sm_90a and the like: only their own arch will do
        esac
        if [ -n "$n" ]; then
            arch=$(printf '%s\n' "$help" | grep -o "'sm_[0-9]*'" | tr -d "'" | sed 's/^sm_//' |
                sort -n | awk -v n="$n" '$1 + 0 >= n + 0 { print "sm_" $1; exit }')
        else
            arch=
        fi
        if [ -z "$arch" ]; then
            echo "SKIP: this ptxas (CUDA ${version:-?}) does not know $target"
            exit 77
        fi
        echo "note: this ptxas does not know $target; assembling for $arch, which checks" \
            ".target $target PTX against $target"
        ;;
    esac
    ;;
esac
werror=
case $help in
*--warning-as-error*) werror=--warning-as-error ;;
esac

# The PTX ISA versions, in order: the one before X.Y is the next lower one
# that exists (7.0 comes after 6.5, not 6.9).
isa_list="5.0 6.0 6.1 6.2 6.3 6.4 6.5 7.0 7.1 7.2 7.3 7.4 7.5 7.6 7.7 7.8
8.0 8.1 8.2 8.3 8.4 8.5 8.6 8.7 8.8 9.0"
isa_before() {
    prev=
    for v in $isa_list; do
        if [ "$v" = "$1" ]; then
            echo "$prev"
            return
        fi
        prev=$v
    done
}

scratch=$(mktemp -d "${TMPDIR:-/tmp}/ptxas-check.XXXXXX") || exit 1
trap 'rm -rf "$scratch"' EXIT INT TERM

dir=$scratch/$target
if ! "$dump" --all --target "$target" --outdir "$dir"; then
    echo "FAIL: $dump --all --target $target --outdir $dir"
    exit 1
fi

status=0
count=0
for f in "$dir"/*.ptx; do
    [ -e "$f" ] || continue
    count=$((count + 1))
    name=$target/${f##*/}
    if ! out=$("$ptxas" -arch="$arch" $werror -o /dev/null "$f" 2>&1); then
        echo "FAIL $name: ptxas -arch=$arch $werror -o /dev/null $f"
        printf '%s\n' "$out" | sed 's/^/    /'
        status=1
        continue
    fi
    # DESIGN §2: the lowest .version the target and the instructions allow.
    # The same file one ISA version lower must be refused.
    isa=$(sed -n 's/^\.version \([0-9.]*\)[[:space:]]*$/\1/p' "$f" | head -n 1)
    lower=$(isa_before "$isa")
    if [ -z "$isa" ]; then
        echo "FAIL $name: no '.version X.Y' line"
        status=1
        continue
    elif [ -n "$lower" ]; then
        sed "s/^\.version ${isa}[[:space:]]*\$/.version ${lower}/" "$f" >"$scratch/lower.ptx"
        if "$ptxas" -arch="$arch" -o /dev/null "$scratch/lower.ptx" >/dev/null 2>&1; then
            echo "FAIL $name: .version $isa is not the lowest: ptxas also accepts .version $lower"
            status=1
            continue
        fi
    fi
    echo "ok   $name (.version $isa; $lower refused)"
done
if [ "$count" -eq 0 ]; then
    # Never pass by checking nothing.
    echo "FAIL: '$dump --all --target $target' wrote no PTX file"
    exit 1
fi
echo "$count kernels, $([ $status -eq 0 ] && echo 'all passed' || echo 'some failed')"
exit $status
