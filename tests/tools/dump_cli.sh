#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The ptxgen-dump command line is a contract (DESIGN §4): benchmarks, the
# golden update and users' scripts drive it. This drives the built binary
# and checks every mode and every kind of bad input:
#     dump_cli.sh PATH/TO/ptxgen-dump
# JSON is validated with python3 when there is one, else by pattern.
set -u

dump=${1:?usage: dump_cli.sh PATH/TO/ptxgen-dump}
# Some checks run in another directory.
case $dump in
/*) ;;
*) dump=$PWD/$dump ;;
esac
# PTXGEN_TEST_WRAP runs each invocation under a tool, e.g.
# "valgrind -q --leak-check=full --error-exitcode=99".
wrap=${PTXGEN_TEST_WRAP:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ptxgen-cli.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

failures=0
checks=0
fail() {
    failures=$((failures + 1))
    echo "FAIL: $*" >&2
}
check() { # check DESCRIPTION COMMAND...
    checks=$((checks + 1))
    desc=$1
    shift
    "$@" || fail "$desc"
}

python=$(command -v python3 2>/dev/null || true)
if [ -n "$python" ] && ! "$python" -c 'import json' >/dev/null 2>&1; then
    python=
fi

# run ARGS...: stdout in $tmp/out, stderr in $tmp/err, status in $rc.
run() {
    $wrap "$dump" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
}

# expect_ok ARGS...: status 0 and a silent stderr.
expect_ok() {
    run "$@"
    checks=$((checks + 1))
    if [ "$rc" -ne 0 ] || [ -s "$tmp/err" ]; then
        fail "ptxgen-dump $* exited $rc; stderr: $(cat "$tmp/err")"
        return 1
    fi
    return 0
}

# expect_bad NEEDLE ARGS...: status 2, nothing on stdout, exactly one line on
# stderr, prefixed with the program name, that contains NEEDLE.
expect_bad() {
    needle=$1
    shift
    run "$@"
    checks=$((checks + 1))
    lines=$(wc -l <"$tmp/err" | tr -d ' ')
    msg=$(cat "$tmp/err")
    if [ "$rc" -ne 2 ]; then
        fail "ptxgen-dump $*: exit $rc, expected 2 (stderr: $msg)"
    elif [ -s "$tmp/out" ]; then
        fail "ptxgen-dump $*: wrote to stdout on error: $(head -c 200 "$tmp/out")"
    elif [ "$lines" != 1 ] || [ "$(tail -c 1 "$tmp/err" | od -An -c | tr -d ' ')" != '\n' ]; then
        fail "ptxgen-dump $*: expected exactly one line on stderr, got: $msg"
    else
        case $msg in
        "ptxgen-dump: "*"$needle"*) ;;
        *) fail "ptxgen-dump $*: message does not name '$needle': $msg" ;;
        esac
    fi
}

# json_get FILE EXPR: print a Python expression over the parsed object `o`.
json_get() {
    "$python" -c 'import json, sys
o = json.load(open(sys.argv[1]))
print(eval(sys.argv[2]))' "$1" "$2"
}

# ------------------------------------------------------------------ help

expect_ok --help && check "--help prints usage" grep -q '^usage: ptxgen-dump' "$tmp/out"
expect_ok -h && check "-h prints usage" grep -q '^usage: ptxgen-dump' "$tmp/out"

# ------------------------------------------------------------------ targets

cat >"$tmp/targets.expected" <<'EOF'
sm_70 6.0
sm_75 6.3
sm_80 7.0
sm_86 7.1
sm_87 7.4
sm_89 7.8
sm_90 7.8
sm_90a 8.0
sm_100 8.6
sm_100a 8.6
sm_120 8.7
sm_120a 8.7
sm_121 8.8
EOF
if expect_ok --targets; then
    check "--targets lists the 13 targets of DESIGN §2 with their PTX ISA" \
        cmp -s "$tmp/out" "$tmp/targets.expected" ||
        diff "$tmp/targets.expected" "$tmp/out" >&2
fi
targets=$(cut -d ' ' -f 1 "$tmp/targets.expected")
isa_of() { sed -n "s/^$1 //p" "$tmp/targets.expected"; }

# ------------------------------------------------------------------ list

kernels=
if expect_ok --list; then
    cp "$tmp/out" "$tmp/list"
    kernels=$(cat "$tmp/list")
    check "--list is not empty" test -s "$tmp/list"
    check "--list names are unique" test "$(sort "$tmp/list" | uniq -d)" = ""
    check "--list names are PTX identifiers" \
        test "$(grep -cvE '^[A-Za-z_][A-Za-z0-9_]*$' "$tmp/list")" = 0
    for k in squared_sum_reduce clip_scale_reduce gradient_clip_gpu_scale gradient_clip; do
        check "--list contains $k" grep -qx "$k" "$tmp/list"
    done
fi

# ------------------------------------------------------------------ --all

# Two runs for every target must give the same files, byte for byte, and
# together cover exactly the kernels of --list.
: >"$tmp/all-kernels"
for t in $targets; do
    if expect_ok --all --target "$t" --outdir "$tmp/a/$t" &&
        expect_ok --all --target "$t" --outdir "$tmp/b/$t"; then
        check "--all --target $t wrote nothing to stdout" test ! -s "$tmp/out"
        (cd "$tmp/a/$t" && ls) >"$tmp/la"
        (cd "$tmp/b/$t" && ls) >"$tmp/lb"
        check "--all --target $t writes the same files twice" cmp -s "$tmp/la" "$tmp/lb"
        check "--all --target $t writes only .ptx files" \
            test "$(grep -cv '\.ptx$' "$tmp/la")" = 0
        while read -r f; do
            check "--all --target $t: $f identical across runs" \
                cmp "$tmp/a/$t/$f" "$tmp/b/$t/$f"
            echo "${f%.ptx}" >>"$tmp/all-kernels"
        done <"$tmp/la"
    fi
done
sort -u "$tmp/all-kernels" >"$tmp/all-sorted"
sort "$tmp/list" 2>/dev/null >"$tmp/list-sorted"
check "--list names exactly the kernels --all emits over all targets" \
    cmp -s "$tmp/all-sorted" "$tmp/list-sorted"

# ------------------------------------------------------------------ KERNEL

# A kernel's PTX: the header first (.version, .target, .address_size after
# any comments), the entry, and the same bytes as --all and -o.
check_ptx() { # check_ptx FILE KERNEL TARGET
    first=$(grep -v '^[[:space:]]*//' "$1" | grep -v '^[[:space:]]*$' | head -n 3 | tr '\n' '|')
    case $first in
    ".version "*"|.target $3|.address_size 64|") ;;
    *)
        fail "$2 for $3: PTX does not start with .version/.target $3/.address_size 64: $first"
        return 1
        ;;
    esac
    if ! grep -Eq "\.entry $2([[:space:](]|$)" "$1"; then
        fail "$2 for $3: no '.entry $2' in the PTX"
        return 1
    fi
    return 0
}

for k in $kernels; do
    for t in $targets; do
        [ -f "$tmp/a/$t/$k.ptx" ] || continue
        if expect_ok "$k" --target "$t"; then
            checks=$((checks + 1))
            check_ptx "$tmp/out" "$k" "$t"
            check "$k --target $t equals its --all file" cmp -s "$tmp/out" "$tmp/a/$t/$k.ptx"
            version=$(sed -n 's/^\.version \([0-9.]*\).*/\1/p' "$tmp/out")
            check "$k --target $t: .version $version is at least $(isa_of "$t")" \
                awk -v a="$version" -v b="$(isa_of "$t")" 'BEGIN { exit !(a + 0 >= b + 0) }'
        fi
    done
    # Without --target: sm_90.
    if [ -f "$tmp/a/sm_90/$k.ptx" ] && expect_ok "$k"; then
        check "$k defaults to sm_90" cmp -s "$tmp/out" "$tmp/a/sm_90/$k.ptx"
        cp "$tmp/out" "$tmp/stdout.ptx"
        if expect_ok "$k" -o "$tmp/o.ptx"; then
            check "$k -o: nothing on stdout" test ! -s "$tmp/out"
            check "$k -o FILE writes the stdout bytes" cmp -s "$tmp/o.ptx" "$tmp/stdout.ptx"
        fi
        if expect_ok -o "$tmp/o2.ptx" --target=sm_90 -- "$k"; then
            check "-o FILE --target=sm_90 -- $k writes the same bytes" \
                cmp -s "$tmp/o2.ptx" "$tmp/stdout.ptx"
        fi
        # Overwriting an existing file replaces it whole.
        printf 'old contents that are longer than nothing\n' >"$tmp/o.ptx"
        if expect_ok "$k" -o "$tmp/o.ptx"; then
            check "$k -o overwrites an existing file" cmp -s "$tmp/o.ptx" "$tmp/stdout.ptx"
        fi
        expect_ok "$k" -o /dev/null
    fi
done
check "-o leaves no temporary files" test -z "$(find "$tmp" -name '*.tmp*')"

# A kernel and a target it does not support, if the catalog has one.
unsupported_k=
for k in $kernels; do
    for t in $targets; do
        if [ ! -f "$tmp/a/$t/$k.ptx" ]; then
            unsupported_k=$k
            unsupported_t=$t
            break 2
        fi
    done
done
if [ -n "$unsupported_k" ]; then
    expect_bad "does not support $unsupported_t" "$unsupported_k" --target "$unsupported_t"
    expect_bad "does not support $unsupported_t" "$unsupported_k" --target "$unsupported_t" --info
else
    echo "note: every kernel supports every target; no unsupported pair to check" >&2
fi

# ------------------------------------------------------------------ --info

# info_check KERNEL [ARGS...] -- PYTHON-CONDITION GREP-PATTERN
info_check() {
    k=$1
    shift
    args=
    while [ "$1" != "--" ]; do
        args="$args $1"
        shift
    done
    cond=$2
    pattern=$3
    # shellcheck disable=SC2086
    expect_ok "$k" --info $args || return
    check "$k --info$args: one line" test "$(wc -l <"$tmp/out" | tr -d ' ')" = 1
    if [ -n "$python" ]; then
        check "$k --info$args is valid JSON" "$python" -c 'import json,sys; json.load(sys.stdin)' \
            <"$tmp/out"
        check "$k --info$args: $cond (got $(cat "$tmp/out"))" \
            test "$(json_get "$tmp/out" "$cond" 2>&1)" = True
    else
        check "$k --info$args looks like one JSON object" \
            grep -q '^{"kernel": ".*}$' "$tmp/out"
        check "$k --info$args contains $pattern (got $(cat "$tmp/out"))" \
            grep -qF "$pattern" "$tmp/out"
    fi
}

common='set(o) >= {"kernel", "entry", "target", "ptx_isa", "params", "knobs", "baked", "launch"}'
for k in $kernels; do
    [ -f "$tmp/a/sm_90/$k.ptx" ] || continue
    info_check "$k" -- "$common and o['kernel'] == '$k' and o['entry'] == '$k' and o['target'] == 'sm_90' and isinstance(o['ptx_isa'], str) and all(set(p) >= {'name', 'type'} for p in o['params']) and all(isinstance(v, int) for v in o['knobs'].values()) and set(o['baked']) <= set(o['knobs']) and len(o['launch']['grid']) == 3 and len(o['launch']['block']) == 3 and isinstance(o['launch']['shared_bytes'], int)" \
        "\"kernel\": \"$k\", "
    if [ -n "$python" ]; then
        version=$(sed -n 's/^\.version \([0-9.]*\).*/\1/p' "$tmp/a/sm_90/$k.ptx")
        check "$k --info: ptx_isa is the .version of the PTX ($version)" \
            test "$(json_get "$tmp/out" "o['ptx_isa']")" = "$version"
        # A block larger than the kernel's .maxntid fails every launch.
        maxntid=$(sed -n 's/^\.maxntid \([0-9]*\), *\([0-9]*\), *\([0-9]*\).*/[\1, \2, \3]/p' \
            "$tmp/a/sm_90/$k.ptx")
        if [ -n "$maxntid" ]; then
            check "$k --info: launch block fits .maxntid $maxntid" \
                test "$(json_get "$tmp/out" "all(b <= m for b, m in zip(o['launch']['block'], $maxntid))")" = True
        fi
        cp "$tmp/out" "$tmp/info.json"
        if expect_ok "$k" --info -o "$tmp/info-o.json"; then
            check "$k --info -o FILE writes the stdout bytes" cmp -s "$tmp/info.json" "$tmp/info-o.json"
        fi
    fi
done

# The GEMM chooser's pick for a GEMM kernel's sizes and types: a thin
# output past gemm_thin's bound runs split-K, a LoRA-sized one gemm_thin's
# mma.sync form, a thin reduction its outer form.
info_check gemm_mma_forward --set m=8192 --set n=16 --set k=8192 -- \
    "o['gemm_choice']['layout'] == 'forward' and o['gemm_choice']['in'] == 'bf16' and o['gemm_choice']['split'] > 1 and o['gemm_choice']['reduce'] == 'gemm_mma_reduce' and o['gemm_choice']['workspace_bytes'] == 8192 * 16 * 4 * o['gemm_choice']['split']" \
    '"gemm_choice": {"layout": "forward"'
info_check gemm_mma_forward --set m=2048 --set n=16 --set k=1536 -- \
    "o['gemm_choice']['kernel'] == 'gemm_thin' and o['gemm_choice']['split'] == 1 and o['gemm_choice']['workspace_bytes'] == 0 and o['gemm_choice']['knobs']['form'] == 3" \
    '"kernel": "gemm_thin"'
info_check gemm_mma_forward --set m=2048 --set n=1536 --set k=16 -- \
    "o['gemm_choice']['kernel'] == 'gemm_thin' and o['gemm_choice']['split'] == 1 and o['gemm_choice']['reduce'] is None and o['gemm_choice']['workspace_bytes'] == 0 and o['gemm_choice']['knobs']['form'] == 0" \
    '"kernel": "gemm_thin"'
info_check gemm_thin --set m=2048 --set n=1536 --set k=16 --set in=2 --set out=0 -- \
    "o['gemm_choice']['in'] == 'f32' and o['gemm_choice']['kernel'] == 'gemm_thin' and o['gemm_choice']['knobs']['form'] == 0 and o['knobs']['form'] == 1" \
    '"kernel": "gemm_thin"'
info_check gemm_lp_simt --target sm_75 --set layout=2 --set in=0 -- \
    "o['gemm_choice']['kernel'] == 'gemm_lp_simt' and o['gemm_choice']['knobs']['layout'] == 2" \
    '"kernel": "gemm_lp_simt"'
info_check gemm_backward_b -- \
    "o['gemm_choice']['layout'] == 'backward_w' and o['gemm_choice']['in'] == 'f32' and o['gemm_choice']['n'] == o['knobs']['k']" \
    '"layout": "backward_w", "in": "f32"'
info_check silu_forward -- "'gemm_choice' not in o" '"kernel": "silu_forward"'

# DESIGN §3: launch sizes and ABI of the clip pipeline.
info_check squared_sum_reduce --set n=1000000 -- \
    "o['launch'] == {'grid': [256, 1, 1], 'block': [256, 1, 1], 'shared_bytes': o['launch']['shared_bytes']} and o['knobs']['n'] == 1000000" \
    '"grid": [256, 1, 1], "block": [256, 1, 1]'
info_check squared_sum_reduce --set n=1 -- \
    "o['launch']['grid'] == [1, 1, 1] and o['launch']['block'] == [256, 1, 1]" \
    '"grid": [1, 1, 1], "block": [256, 1, 1]'
info_check squared_sum_reduce --set n=5120 -- \
    "o['launch']['grid'] == [5, 1, 1]" '"grid": [5, 1, 1]'
info_check squared_sum_reduce --set n=0x100001 -- \
    "o['launch']['grid'] == [256, 1, 1] and o['knobs']['n'] == 1048577" '"grid": [256, 1, 1]'
info_check squared_sum_reduce --target sm_121 -- \
    "o['target'] == 'sm_121' and o['ptx_isa'] == '8.8'" '"target": "sm_121", "ptx_isa": "8.8"'
info_check squared_sum_reduce -- \
    "[(p['name'], p['type']) for p in o['params']] == [('input', 'u64'), ('output', 'u64'), ('n', 'u32')]" \
    '"params": [{"name": "input", "type": "u64"'
info_check clip_scale_reduce -- \
    "o['launch']['grid'] == [1, 1, 1] and [(p['name'], p['type']) for p in o['params']] == [('partials', 'u64'), ('n', 'u32'), ('max_norm', 'f32'), ('output', 'u64')]" \
    '"grid": [1, 1, 1]'
info_check gradient_clip_gpu_scale --set n=1025 -- \
    "o['launch']['grid'] == [2, 1, 1] and o['launch']['block'] == [256, 1, 1] and [p['type'] for p in o['params']] == ['u64', 'u64', 'u32']" \
    '"grid": [2, 1, 1], "block": [256, 1, 1]'
info_check gradient_clip --set n=4000000000 -- \
    "o['launch']['grid'] == [4096, 1, 1] and [p['type'] for p in o['params']] == ['u64', 'f32', 'u32']" \
    '"grid": [4096, 1, 1], "block": [256, 1, 1]'

# Problem sizes are parameters, not baked (DESIGN §3): unless the kernel
# says it bakes n, the PTX does not depend on it.
if expect_ok squared_sum_reduce --info && grep -q '"baked": \[\]' "$tmp/out"; then
    expect_ok squared_sum_reduce --set n=1 && cp "$tmp/out" "$tmp/n1.ptx"
    expect_ok squared_sum_reduce --set n=1000000 &&
        check "squared_sum_reduce PTX does not depend on n" cmp -s "$tmp/out" "$tmp/n1.ptx"
fi

# ------------------------------------------------------------------ bad input

k=squared_sum_reduce
expect_bad "'nosuchkernel'" nosuchkernel
expect_bad "'nosuchkernel'" nosuchkernel --info
expect_bad "'sm_91'" "$k" --target sm_91
expect_bad "'SM_90'" "$k" --target SM_90
expect_bad "''" "$k" --target ''
expect_bad "'sm_91'" --all --target sm_91 --outdir "$tmp/bad"
expect_bad "foo" "$k" --set foo=1
expect_bad "12x" "$k" --set n=12x
expect_bad "n=-1" "$k" --set n=-1
expect_bad "'n='" "$k" --set n=
expect_bad "99999999999" "$k" --set n=99999999999
expect_bad "4294967296" "$k" --set n=4294967296
expect_bad "'n'" "$k" --set n
expect_bad "=5" "$k" --set =5
expect_bad "--target" "$k" --target
expect_bad "--set" "$k" --set
expect_bad "-o" "$k" -o
expect_bad "--outdir" --all --outdir
expect_bad "--outdir" --all
expect_bad "--outdir" --all --target sm_90
expect_bad "--bogus" "$k" --bogus
expect_bad "-x" -x
expect_bad "--output" "$k" --output "$tmp/x.ptx"
expect_bad "-o=" "$k" "-o=$tmp/x.ptx"
expect_bad "nothing to do"
expect_bad "'gradient_clip'" "$k" gradient_clip
expect_bad "--all" --list --all
expect_bad "--targets" "$k" --targets
expect_bad "--target" --list --target sm_90
expect_bad "--set" --all --outdir "$tmp/bad" --set n=1
expect_bad "--info" --list --info
expect_bad "--target" "$k" --target sm_90 --target sm_80
expect_bad "knob 'n' given more than once" "$k" --set n=1 --set n=2
expect_bad "knob 'n' given more than once" "$k" --set n=1 --info --set=n=1
expect_bad "knob 'm' given more than once" gemm_thin --set m=64 --set n=64 --set m=128
expect_bad "/nonexistent-dir/x.ptx" "$k" -o /nonexistent-dir/x.ptx
expect_bad "/nonexistent-dir/x.json" "$k" --info -o /nonexistent-dir/x.json
expect_bad "$tmp" "$k" -o "$tmp"
: >"$tmp/plainfile"
expect_bad "plainfile" --all --outdir "$tmp/plainfile"
expect_bad "/dev/null/sub" --all --outdir /dev/null/sub
expect_bad "plainfile/sub" --all --outdir "$tmp/plainfile/sub"
expect_bad "''" --all --outdir ''
expect_ok --all --outdir "$tmp/deep/er/dir" &&
    check "--all creates missing parents" test -f "$tmp/deep/er/dir/squared_sum_reduce.ptx"
# A control character in an argument must not split the one line.
expect_bad "unknown kernel 'two\\nlines'" "$(printf 'two\nlines')"
check "no --all output left for rejected runs" test ! -e "$tmp/bad"


# ------------------------------------------------------------------ safe writes

# expect_status STATUS NEEDLE ARGS...: STATUS, one line naming NEEDLE.
expect_status() {
    want=$1
    needle=$2
    shift 2
    run "$@"
    checks=$((checks + 1))
    msg=$(cat "$tmp/err")
    if [ "$rc" -ne "$want" ] || [ "$(wc -l <"$tmp/err" | tr -d ' ')" != 1 ]; then
        fail "ptxgen-dump $*: exit $rc, expected $want with one line (stderr: $msg)"
    else
        case $msg in
        "ptxgen-dump: "*"$needle"*) ;;
        *) fail "ptxgen-dump $*: message does not name '$needle': $msg" ;;
        esac
    fi
}

mkdir -p "$tmp/w"
expect_ok "$k" && cp "$tmp/out" "$tmp/w/expected.ptx"

# A symlink planted where a temporary might go must not be written through.
# The old scheme used "<path>.tmp<pid>": exec keeps the pid, so plant there.
printf 'victim\n' >"$tmp/w/victim"
(cd "$tmp/w" && sh -c 'ln -s victim "out.ptx.tmp$$" && exec "$@"' sh $wrap "$dump" "$k" -o out.ptx) \
    >"$tmp/out" 2>"$tmp/err"
check "a planted <path>.tmp<pid> symlink: exit 0" test $? = 0
check "a planted symlink is not written through" test "$(cat "$tmp/w/victim")" = victim
check "-o writes the file beside the planted link" cmp -s "$tmp/w/out.ptx" "$tmp/w/expected.ptx"
check "-o gives a regular file" test -f "$tmp/w/out.ptx" -a ! -L "$tmp/w/out.ptx"
rm -f "$tmp/w/out.ptx.tmp"*

# A symlink the caller names is followed, as the shell's > would.
printf 'old\n' >"$tmp/w/real.ptx"
ln -s real.ptx "$tmp/w/link.ptx"
if expect_ok "$k" -o "$tmp/w/link.ptx"; then
    check "-o through a symlink replaces its target" cmp -s "$tmp/w/real.ptx" "$tmp/w/expected.ptx"
    check "-o through a symlink keeps the link" test -L "$tmp/w/link.ptx"
fi

# The longest legal file name (255 bytes) works: the temporary is short.
long=$(printf '%0251d' 0).ptx
if expect_ok "$k" -o "$tmp/w/$long"; then
    check "-o with a 255-byte file name" cmp -s "$tmp/w/$long" "$tmp/w/expected.ptx"
fi
expect_bad "File name too long" "$k" -o "$tmp/w/x$long"
check "-o leaves no temporary behind" test -z "$(find "$tmp/w" -name '.ptxgen-*')"

# A new file gets 0666 less the umask, as a plain creation would.
(umask 027 && $wrap "$dump" "$k" -o "$tmp/w/mode.ptx")
check "-o file mode follows the umask (got $(ls -l "$tmp/w/mode.ptx" | cut -c1-10))" \
    test "$(ls -l "$tmp/w/mode.ptx" | cut -c1-10)" = "-rw-r-----"

# A replaced file keeps its permission bits: a private file stays private.
printf 'secret\n' >"$tmp/w/private.ptx"
chmod 600 "$tmp/w/private.ptx"
expect_ok "$k" -o "$tmp/w/private.ptx" &&
    check "-o over a 0600 file keeps 0600 (got $(ls -l "$tmp/w/private.ptx" | cut -c1-10))" \
        test "$(ls -l "$tmp/w/private.ptx" | cut -c1-10)" = "-rw-------"
expect_bad "cannot write '': No such file or directory" "$k" -o ''

# "-o -" is standard output.
(cd "$tmp/w" && $wrap "$dump" "$k" -o - >"$tmp/out" 2>"$tmp/err")
check "-o - exits 0" test $? = 0
check "-o - writes standard output" cmp -s "$tmp/out" "$tmp/w/expected.ptx"
check "-o - creates no file named -" test ! -e "$tmp/w/-"

# Exit status 1 for a write that fails, whether to -o or to standard output.
if [ -w /dev/full ]; then
    expect_status 1 "cannot write '/dev/full': No space left on device" "$k" -o /dev/full
    for args in "$k" "$k --info" "--list" "--targets" "--help"; do
        # shellcheck disable=SC2086
        $wrap "$dump" $args >/dev/full 2>"$tmp/err"
        rc=$?
        check "ptxgen-dump $args >/dev/full exits 1 (got $rc)" test "$rc" = 1
        check "ptxgen-dump $args >/dev/full says why in one line" \
            test "$(cat "$tmp/err")" = "ptxgen-dump: cannot write to standard output: No space left on device"
    done
fi

# A failed --all leaves nothing: a directory in the way of the last file.
last=$(ls "$tmp/a/sm_90" | tail -n 1)
mkdir -p "$tmp/fa/${last}"
expect_bad "${last}: Is a directory" --all --outdir "$tmp/fa"
check "a failed --all writes no file and no temporary" \
    test "$(ls -A "$tmp/fa")" = "$last"

# An over-long --outdir is refused before any directory is made.
mkdir -p "$tmp/long"
deep=$(awk 'BEGIN { s = "d"; for (i = 0; i < 3000; i++) s = s "/d"; print s }')
(cd "$tmp/long" && $wrap "$dump" --all --outdir "$deep" >"$tmp/out" 2>"$tmp/err")
rc=$?
check "an over-long --outdir exits 2 (got $rc)" test "$rc" = 2
check "an over-long --outdir says so ($(cat "$tmp/err"))" grep -q "is too long" "$tmp/err"
check "an over-long --outdir creates nothing" test -z "$(ls -A "$tmp/long")"
name300=$(printf '%0300d' 0)
expect_bad "component of 300 bytes" --all --outdir "$tmp/long/a/b/$name300/c"
check "a component over NAME_MAX creates nothing" test -z "$(ls -A "$tmp/long")"

# Control characters and bytes that are not UTF-8 are escaped in messages.
expect_bad 'unknown kernel '"'"'esc\x1b[31mred\xff\\z'"'" "$(printf 'esc\033[31mred\377\\z')"
check "no escape byte reaches stderr" test -z "$(tr -d '[:print:]\n' <"$tmp/err")"
expect_bad "'n=\\x1b]0;title\\x07'" "$k" --set "$(printf 'n=\033]0;title\007')"
check "no control byte from a library message reaches stderr" \
    test -z "$(tr -d '[:print:]\n' <"$tmp/err")"
utf=$(printf 'k\303\251rnel')
expect_bad "'$utf'" "$utf"

echo "$checks checks, $failures failures" >&2
[ "$failures" -eq 0 ]
