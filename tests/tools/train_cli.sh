#!/bin/sh
# SPDX-License-Identifier: MIT
#
# ptxgen-train's command line without a GPU: every bad option exits 2 with
# one line on stderr and nothing on stdout; no driver exits 1 with one
# "no GPU" line; against the fake driver (kernels recorded, not run) a tiny
# run goes through both modes, captures once and replays.
#
# usage: train_cli.sh PTXGEN_TRAIN FAKE_LIBCUDA
set -u
tool=$1
fake=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ptxgen-train-cli.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
failures=0

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# usage_error WHAT ARGS...: exit 2, one line naming WHAT, no stdout.
usage_error() {
    what=$1
    shift
    "$tool" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ "$rc" -eq 2 ] || fail "ptxgen-train $*: exit $rc, not 2"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "ptxgen-train $*: stderr is not one line: $(cat "$tmp/err")"
    [ -s "$tmp/out" ] && fail "ptxgen-train $*: wrote to stdout"
    grep -q -- "$what" "$tmp/err" || fail "ptxgen-train $*: '$(cat "$tmp/err")' does not name $what"
    if LC_ALL=C grep -q "$(printf '[\001-\010\013-\037\177]')" "$tmp/err"; then
        fail "ptxgen-train $*: a control character reached stderr"
    fi
}

usage_error "--bogus" --bogus
usage_error "--layers" --layers 0
usage_error "--layers" --layers
usage_error "--hidden" --hidden x12
usage_error "--seq" --seq -3
usage_error "--steps" --steps 99999999999999999999999
usage_error "--mode" --mode fast
usage_error "--lr" --lr 0
usage_error "--lr" --lr abc
usage_error "--lr: '1e-50' is not a learning rate in \[1e-12, 1\]" --lr 1e-50
usage_error "--lr" --lr 1e300
usage_error "rank" --hidden 8 --rank 16
# arguments echoed in a message are escaped: no ESC or BEL reaches the terminal
esc=$(printf '\033')
bel=$(printf '\007')
usage_error "--mode: 'x\\\\x1b]0;pwned\\\\x07' is not" --mode "x${esc}]0;pwned${bel}"
usage_error "unknown option '--\\\\x1b\[2J'" "--${esc}[2J"

"$tool" --help >"$tmp/out" 2>&1 || fail "--help exits $?"
grep -q "usage: ptxgen-train" "$tmp/out" || fail "--help prints no usage"

# No driver: one clear line, exit 1.
PGRT_LIBCUDA=/nonexistent/libcuda.so.1 "$tool" --steps 2 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 1 ] || fail "without a driver: exit $rc, not 1"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "without a driver: stderr is not one line"
grep -q "^ptxgen-train: no GPU: " "$tmp/err" || fail "without a driver: no 'no GPU' line: $(cat "$tmp/err")"
# the driver's message quotes the path: escaped, still one line
PGRT_LIBCUDA="/nonexistent/${esc}]0;pwned${bel}/libcuda.so.1" "$tool" --steps 2 >"$tmp/out" 2>"$tmp/err"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "a driver path with escapes: stderr is not one line"
grep -q 'nonexistent/\\x1b]0;pwned\\x07/libcuda' "$tmp/err" ||
    fail "a driver path with escapes: not escaped: $(cat "$tmp/err")"

# The fake driver: both modes, one capture, the contracts' lines (the fake
# runs no kernel, so losses are zero and do not fall: exit 1 is expected).
PGRT_LIBCUDA=$fake "$tool" --layers 3 --hidden 40 --seq 9 --batch 3 --rank 5 --steps 4 \
    >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 1 ] || fail "fake driver run: exit $rc, not 1 (the loss cannot fall there)"
grep -q "backward graph captured: seq_len=9, 3 layers" "$tmp/out" || fail "no capture line"
grep -q "^F-GRAPH-BWD-001 .*: PASS" "$tmp/out" || fail "no F-GRAPH-BWD-001 PASS line"
grep -q "^F-GRAPH-BWD-002 capture: 1 captured, 0 failed: PASS" "$tmp/out" ||
    fail "no F-GRAPH-BWD-002 PASS line"
grep -q "^graph: 1 captures .* 0 capture failures, 4 graphed steps, 0 eager steps" "$tmp/out" ||
    fail "graph statistics line missing"
[ "$(grep -c '^ *[0-9]\{1,\}  ' "$tmp/out")" -eq 4 ] || fail "not four loss lines"
PGRT_LIBCUDA=$fake "$tool" --mode eager --layers 1 --hidden 8 --rank 2 --seq 2 --steps 2 \
    >"$tmp/out" 2>&1
grep -q "capture" "$tmp/out" && fail "--mode eager captured"
grep -q "loss graph" "$tmp/out" && fail "--mode eager printed graph losses"

if [ "$failures" -ne 0 ]; then
    echo "$failures failures"
    cat "$tmp/out"
    exit 1
fi
echo "PASS"
