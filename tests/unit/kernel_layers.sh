#!/bin/sh
# SPDX-License-Identifier: MIT
# kernels/ has no circle: among the objects of kernels/*.c, an edge runs
# from each object to every other one defining a symbol it uses (calls and
# data, descriptors included), and tsort finds no loop.
# $1: the static library. Exit 77 without nm or tsort.
set -eu
lib=$1
command -v nm >/dev/null 2>&1 && command -v tsort >/dev/null 2>&1 || exit 77
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# "archive:[path/]kernels_<file>.c.o: address type symbol" -> "<file>.c type symbol"
member() { sed -nE 's/^[^ ]*kernels_([a-z0-9_]*\.c)\.o: */\1 /p'; }
nm -A --defined-only "$lib" 2>/dev/null | member |
    awk '$(NF-1) ~ /^[TDRB]$/ {print $NF, $1}' | sort >"$tmp/def"
nm -A -u "$lib" 2>/dev/null | member | awk '{print $NF, $1}' | sort >"$tmp/use"
join "$tmp/def" "$tmp/use" | awk '$2 != $3 {print $3, $2}' | sort -u >"$tmp/edges"
n=$(wc -l <"$tmp/edges")
if [ "$n" -lt 50 ]; then
    echo "only $n edges among the objects of kernels/: the object names changed?" >&2
    exit 1
fi
if ! tsort "$tmp/edges" >/dev/null 2>"$tmp/loop"; then
    cat "$tmp/loop" >&2
    exit 1
fi
echo "$n edges among the objects of kernels/, no circle"
