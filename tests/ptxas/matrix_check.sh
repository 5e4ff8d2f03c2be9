#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Assemble, for every target, the kernel holding every instruction form the
# builder accepts (ptx_matrix), with ptxas:
#     matrix_check.sh PTX_MATRIX
# A form the builder accepts and ptxas rejects fails, naming the line;
# warnings count as errors. That kernel holds each form with each operand
# of every class the builder takes there (registers of every type,
# immediates), too. The classes it refuses are assembled as well, from the
# text ptx_matrix writes for them, and counted: how many ptxas would take
# (the builder is stricter than ptxas on purpose: a u32 register is no f32
# operand to it, though PTX declares both .b32), and of those, how many are
# of a register class the builder takes no type of there. Those are listed
# with MATRIX_LIST=1. The count is made for sm_75, sm_90a and sm_120 (the
# oldest target this ptxas knows, the one with every Hopper form, the
# newest family), or for every target with MATRIX_REFUSED=all: it takes a
# few ptxas passes a target, the rest of the check one.
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

# errors_of FILE ARCH OUT [FLAGS]: "LINE MESSAGE" for every error (and
# warning) ptxas finds in FILE, into OUT; status 0 when there are none.
# ptxas checks in passes and stops after the first that finds an error, so
# the lines it names are blanked and the file assembled again until a pass
# names none. What it says without a line (a crash, a message of its own)
# is line 0, and ends the passes.
errors_of() {
    cp "$1" "$scratch/iter.ptx"
    : >"$3"
    pass=0
    while [ $pass -lt 10 ]; do
        # (not the subshell's last command: its crash is reported into out)
        out=$(exec 2>&1; "$ptxas" -arch="$2" ${4:-} -o /dev/null "$scratch/iter.ptx" && echo "ptxas: ok")
        case $out in
        *"ptxas: ok") break ;;
        esac
        printf '%s\n' "$out" | sed -n \
            -e "s/^ptxas [^<,]*, line \\([0-9]*\\); [a-z]* *: \\(.*\\)/\\1 \\2/p" \
            -e "s/^ptxas [a-z]* *: \\(.* on line '\\([0-9]*\\)'.*\\)/\\2 \\1/p" \
            >"$scratch/iter.err"
        if [ ! -s "$scratch/iter.err" ]; then
            printf '%s\n' "$out" | grep -v '^ptxas fatal *: Ptx assembly aborted' | head -n 3 |
                sed 's/^/0 /' >>"$3"
            [ -s "$3" ] || echo "0 ptxas failed" >>"$3"
            break
        fi
        cat "$scratch/iter.err" >>"$3"
        awk 'NR == FNR { bad[$1] = 1; next } FNR in bad { print "\t// reported"; next } { print }' \
            "$scratch/iter.err" "$scratch/iter.ptx" >"$scratch/iter.next"
        mv "$scratch/iter.next" "$scratch/iter.ptx"
        pass=$((pass + 1))
    done
    [ ! -s "$3" ]
}

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
    refused=
    case "${MATRIX_REFUSED:-} $target" in
    "all "* | *" sm_75" | *" sm_90a" | *" sm_120") refused=$scratch/$target.refused.ptx ;;
    esac
    if ! "$matrix" "$target" $refused >"$f" 2>"$scratch/gen.err"; then
        echo "FAIL $target: ptx_matrix failed:"
        sed 's/^/    /' "$scratch/gen.err"
        status=1
        continue
    fi
    forms=$(sed -n 's/.*: \([0-9]* of [0-9]*\) forms accepted/\1/p' "$scratch/gen.err")
    classes=$(sed -n 's/.*: \([0-9]* of [0-9]*\) operand classes accepted/\1/p' "$scratch/gen.err")
    checked=$((checked + 1))
    # the refused classes: how many ptxas takes, and how many of a register
    # class the builder takes no type of (one a form, operand and class)
    counts=
    [ -n "$refused" ] && errors_of "$refused" "$arch" "$scratch/refused.err"
    [ -n "$refused" ] && counts=$(awk -v list="${MATRIX_LIST:-0}" -v file="$refused" '
        NR == FNR { bad[$1] = 1; next }
        {
            n++
            ok = 1
            for (l = $1; l <= $2; l++) if (l in bad) ok = 0
            if (!ok) next
            taken++
            if ($4 && !($3 in seen)) {
                seen[$3] = 1
                strict++
                if (list) {
                    cmd = "sed -n " $1 "p \"" file "\""
                    cmd | getline text
                    close(cmd)
                    gsub(/\t/, "", text)
                    print "    ptxas takes, the builder refuses: " text > "/dev/stderr"
                }
            }
        }
        END { printf "; %d of the %d refused assemble, %d with no type of the class taken", taken, n, strict }
    ' "$scratch/refused.err" "$refused.idx")
    if errors_of "$f" "$arch" "$scratch/kept.err" "$werror"; then
        echo "ok   $target (-arch=$arch): $forms forms, $classes operand classes$counts"
        continue
    fi
    status=1
    echo "FAIL $target (-arch=$arch): ptxas rejects forms the builder accepts:"
    # "LINE MESSAGE" -> the message and the line
    head -n 400 "$scratch/kept.err" |
        while read -r line msg; do
            if [ "$line" -eq 0 ]; then
                printf '    %s\n' "$msg"
            else
                printf '    %s\n        line %s: %s\n' "$msg" "$line" "$(sed -n "${line}p" "$f" | tr -d '\t')"
            fi
        done
done
if [ "$checked" -eq 0 ]; then
    echo "SKIP: this ptxas knows none of the targets"
    exit 77
fi
exit $status
