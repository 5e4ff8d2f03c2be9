#!/bin/sh
# SPDX-License-Identifier: MIT
# The files of one folder have no circle: among its objects in the static
# library, an edge runs from each object to every other one defining a
# symbol it uses (calls and data, descriptors included), and tsort finds no
# loop. Since an object is named after its source path ("kernels/gemm.c"
# gives "kernels_gemm.c.o"), a folder and a pattern of file stems pick the
# objects.
# $1: the static library; $2: the folder ("ptxgen", "kernels"), or "-" for
# a library built in the folder itself (the runtime's: "jit.c" gives
# "jit.c.o", "model/json.c" "model_json.c.o");
# $3: an extended regex of the file stems (default: every file);
# $4: the fewest edges expected (a guard against names that changed).
# Exit 77 without nm or tsort.
set -eu
lib=$1 folder=$2 stems=${3:-[a-z0-9_]+} least=${4:-1}
command -v nm >/dev/null 2>&1 && command -v tsort >/dev/null 2>&1 || exit 77
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# "archive:[path/]<folder>_<file>.c.o: address type symbol" -> "<file>.c type symbol"
prefix=${folder}_
[ "$folder" = - ] && prefix=
where=$folder/
[ "$folder" = - ] && where=${lib##*/}
member() { sed -nE "s/^[^ ]*[:\\/]${prefix}((${stems})\\.c)\\.o: */\\1 /p"; }
nm -A --defined-only "$lib" 2>/dev/null | member |
    awk '$(NF-1) ~ /^[TDRB]$/ {print $NF, $1}' | sort >"$tmp/def"
nm -A -u "$lib" 2>/dev/null | member | awk '{print $NF, $1}' | sort >"$tmp/use"
join "$tmp/def" "$tmp/use" | awk '$2 != $3 {print $3, $2}' | sort -u >"$tmp/edges"
n=$(wc -l <"$tmp/edges")
if [ "$n" -lt "$least" ]; then
    echo "only $n edges among the objects of $where: the object names changed?" >&2
    exit 1
fi
if ! tsort "$tmp/edges" >/dev/null 2>"$tmp/loop"; then
    echo "a circle among the files of $where:" >&2
    cat "$tmp/loop" >&2
    exit 1
fi
echo "$n edges among the files of $where ($stems), no circle"
