#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Install the project into a temporary prefix and use it from outside the
# source tree, as a user would: a fresh `meson setup` with that prefix, the
# installed targets built and `meson install`ed, the headers, libraries,
# pkg-config files and tools checked, then a small program compiled with
#   cc prog.c $(pkg-config --cflags --libs ptxgen-runtime)
# run: it emits PTX through the installed libptxgen and opens the runtime,
# which says "no GPU" cleanly on a machine without one. The docs' examples
# are built against the install too; with a GPU, the fine-tuning loop runs.
#
# usage: install.sh SOURCE_ROOT MESON CC...
# Exit 77 (skip) when pkg-config is missing.
set -eu

src=$1
meson=$2
shift 2
# The rest is the C compiler, as the build runs it (possibly several words).
cc="$*"

if ! command -v pkg-config >/dev/null 2>&1; then
    echo "SKIP: no pkg-config: the install test builds a program through it (apt-get install pkg-config)"
    exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ptxgen-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
prefix=$tmp/prefix
log=$tmp/log

fail() {
    echo "FAIL: $*"
    if [ -s "$log" ]; then
        echo "--- last lines of the log:"
        tail -n 30 "$log"
    fi
    exit 1
}

echo "install into $prefix"
CC="$cc" "$meson" setup "$tmp/build" "$src" --prefix="$prefix" --libdir=lib \
    --buildtype=release >"$log" 2>&1 || fail "meson setup"
# Only what gets installed: the libraries and the tools.
"$meson" compile -C "$tmp/build" ptxgen ptxgen-runtime ptxgen-dump ptxgen-train \
    >>"$log" 2>&1 || fail "meson compile"
"$meson" install -C "$tmp/build" --no-rebuild >>"$log" 2>&1 || fail "meson install"

for f in lib/pkgconfig/ptxgen.pc lib/pkgconfig/ptxgen-runtime.pc \
         bin/ptxgen-dump bin/ptxgen-train bin/ptxgen-prepare; do
    [ -e "$prefix/$f" ] || fail "not installed: $f"
done
[ -x "$prefix/bin/ptxgen-prepare" ] || fail "bin/ptxgen-prepare is not executable"
ls "$prefix"/lib/libptxgen.so* >/dev/null 2>&1 || fail "libptxgen.so not installed"
ls "$prefix"/lib/libptxgen-runtime.so* >/dev/null 2>&1 || fail "libptxgen-runtime.so not installed"
# The headers installed are exactly the tree's include/ptxgen/: every
# public one, and nothing private beside them.
want=$(cd "$src/include/ptxgen" && ls *.h | sort | tr '\n' ' ')
got=$(cd "$prefix/include/ptxgen" 2>/dev/null && ls | sort | tr '\n' ' ')
[ "$want" = "$got" ] || fail "installed headers: $got; the public ones are: $want"
[ -z "$(ls "$prefix/include" | grep -v '^ptxgen$')" ] ||
    fail "something beside ptxgen/ in $prefix/include: $(ls "$prefix/include")"

# A program outside the tree, built only through pkg-config.
mkdir "$tmp/user"
cat >"$tmp/user/prog.c" <<'EOF'
#include <ptxgen/pgk.h>
#include <ptxgen/pgrt_train.h>

#include <stdio.h>
#include <string.h>

int main(void)
{
    /* PTX from the installed builder and catalog. */
    const pgk_desc *d = pgk_find("mse_loss");
    if (!d) {
        fprintf(stderr, "mse_loss is not in the installed catalog\n");
        return 1;
    }
    char *ptx = NULL;
    char err[256] = "";
    if (pgk_emit(d, PG_SM_90, NULL, &ptx, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "pgk_emit: %s\n", err);
        return 1;
    }
    int ok = strstr(ptx, ".entry mse_loss") != NULL && strstr(ptx, ".target sm_90") != NULL;
    printf("emitted %zu bytes of PTX for %s\n", strlen(ptx), d->name);
    pgk_free(ptx);
    if (!ok) {
        fprintf(stderr, "the PTX lacks its .entry or .target line\n");
        return 1;
    }

    /* The training API is exported: bad arguments are refused, not fatal. */
    pgrt_train *t = NULL;
    if (pgrt_train_create(NULL, NULL, &t) != PGRT_EINVAL || t) {
        fprintf(stderr, "pgrt_train_create(NULL) did not give PGRT_EINVAL\n");
        return 1;
    }

    /* The runtime: a GPU, or a clean "no GPU". */
    pgrt_ctx *ctx = NULL;
    int rc = pgrt_ctx_create(&ctx, NULL);
    if (rc == 0) {
        pgrt_device_info info;
        pgrt_ctx_device_info(ctx, &info);
        printf("GPU: %s\n", info.name);
        pgrt_ctx_destroy(&ctx);
        return 0;
    }
    if (pgrt_err_unavailable(rc)) {
        printf("no GPU: %s\n", pgrt_last_message());
        return 0;
    }
    fprintf(stderr, "pgrt_ctx_create: %s: %s\n", pgrt_err_name(rc), pgrt_last_message());
    return 1;
}
EOF
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs ptxgen-runtime) || fail "pkg-config ptxgen-runtime"
echo "pkg-config --cflags --libs ptxgen-runtime: $flags"
(cd "$tmp/user" && $cc -std=c11 -Wall -Wextra -Werror -o prog prog.c $flags) >"$log" 2>&1 ||
    fail "compiling a program against the installed libraries"
out=$(LD_LIBRARY_PATH="$prefix/lib" "$tmp/user/prog" 2>&1) || fail "the program failed: $out"
echo "$out"
echo "$out" | grep -q "emitted .* bytes of PTX for mse_loss" || fail "no PTX line"
echo "$out" | grep -Eq "^(no GPU: |GPU: )" || fail "no runtime line"

# The docs' examples build against the installed tree the same way: the
# builder's kernel (run: its PTX), the runtime's complete example and the
# pgrt_lm fine-tuning loop (linked; they need a GPU and a model to run).
for ex in scale clip lm_loop; do
    (cd "$tmp/user" && $cc -std=c11 -Wall -Wextra -Werror -o "$ex" "$src/docs/examples/$ex.c" \
        $flags) >"$log" 2>&1 || { cat "$log"; fail "building docs/examples/$ex.c against the install"; }
done
LD_LIBRARY_PATH="$prefix/lib" "$tmp/user/scale" | grep -q "^\.visible \.entry scale(" ||
    fail "docs/examples/scale.c built against the install printed no kernel"
echo "docs/examples: scale, clip and lm_loop built against the install; scale ran"
# On a machine with a GPU, the fine-tuning loop built against the install
# runs whole: $PTXGEN_LM_LOOP_CHECK (tests/docs/example_lm_loop.c) writes a
# small checkpoint, runs it and checks what it prints and saves.
if [ -n "${PTXGEN_LM_LOOP_CHECK:-}" ] && echo "$out" | grep -q "^GPU: "; then
    LD_LIBRARY_PATH="$prefix/lib" "$PTXGEN_LM_LOOP_CHECK" "$tmp/user/lm_loop" >"$log" 2>&1 ||
        { cat "$log"; fail "docs/examples/lm_loop.c built against the install did not fine-tune"; }
    grep "^lm_loop:" "$log"
    echo "docs/examples/lm_loop.c built against the install fine-tuned on the GPU"
fi

# The installed tools run from the prefix.
LD_LIBRARY_PATH="$prefix/lib" "$prefix/bin/ptxgen-dump" --list | grep -qx mse_loss ||
    fail "installed ptxgen-dump --list lacks mse_loss"
set +e
LD_LIBRARY_PATH="$prefix/lib" "$prefix/bin/ptxgen-train" --layers 0 >/dev/null 2>"$tmp/err"
rc=$?
set -e
[ "$rc" -eq 2 ] || fail "installed ptxgen-train --layers 0 exited $rc, not 2"
[ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "ptxgen-train's usage error is not one line"
echo "PASS"
