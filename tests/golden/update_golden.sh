#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Regenerate every golden file: update_golden.sh PTXGEN_DUMP GOLDEN_ROOT.
# Run through 'ninja -C build update-golden'. Everything is written to a
# scratch directory first and moved into place only when every target
# succeeded, so a failing build never leaves half-updated goldens. Files of
# kernels that left the catalog (or a target) are removed, which the golden
# check would otherwise report as stale.
set -eu

dump=${1:?usage: update_golden.sh PTXGEN_DUMP GOLDEN_ROOT}
root=${2:?usage: update_golden.sh PTXGEN_DUMP GOLDEN_ROOT}

scratch=$(mktemp -d "$root/.update-golden.XXXXXX")
trap 'rm -rf "$scratch"' EXIT INT TERM

targets=$("$dump" --targets | cut -d ' ' -f 1)
[ -n "$targets" ] || { echo "update-golden: '$dump --targets' printed nothing" >&2; exit 1; }

for t in $targets; do
    "$dump" --all --target "$t" --outdir "$scratch/$t"
done

files=0
for t in $targets; do
    mkdir -p "$root/$t"
    rm -f "$root/$t"/*.ptx
    for f in "$scratch/$t"/*.ptx; do
        [ -e "$f" ] || continue
        mv "$f" "$root/$t/"
        files=$((files + 1))
    done
    rmdir "$root/$t" 2>/dev/null || true # no kernel supports it
done

echo "update-golden: wrote $files files under $root"
echo "update-golden: review the change (git diff --stat -- tests/golden) before committing"
