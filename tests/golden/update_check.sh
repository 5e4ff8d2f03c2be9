#!/bin/sh
# SPDX-License-Identifier: MIT
# golden_check --update on a copy of the golden files: a link planted at the
# old predictable "<file>.tmp" is never written through, the rewritten file
# keeps its mode, and no temporary is left.
set -u
check=$1 root=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/golden-update.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
cp "$root"/*.ptx "$tmp"/ || exit 1
f=$(ls "$tmp"/*.ptx | head -n 1)
cp "$f" "$tmp/want"
printf 'stale\n' > "$f"
chmod 600 "$f"
printf 'precious\n' > "$tmp/victim"
ln -s "$tmp/victim" "$f.tmp"
"$check" "$tmp" --update >/dev/null 2>&1 || { echo "update failed"; exit 1; }
fails=0
no() { echo "FAIL: $*"; fails=$((fails + 1)); }
[ "$(cat "$tmp/victim")" = precious ] || no "the planted link was written through"
cmp -s "$f" "$tmp/want" || no "$(basename "$f") not rewritten"
[ "$(stat -c %a "$f")" = 600 ] || no "the rewritten file lost its mode 0600"
[ -z "$(find "$tmp" -name '.ptxgen-*')" ] || no "a temporary was left"
rm -f "$tmp/want" "$tmp/victim" "$f.tmp"
"$check" "$tmp" >/dev/null 2>&1 || no "the updated copy does not check"
[ "$fails" = 0 ] && echo "ok"
exit "$fails"
