#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Set up a checkout, then run a command in it:
#     tools/setup.sh [COMMAND [ARG...]]
# Makes sure a C compiler, Meson (0.63 or newer) and Ninja are at hand and
# build/ is configured, then runs COMMAND from the top of the source tree
# with Meson and Ninja on PATH. The README's two commands start with it, so
# a fresh Debian or Ubuntu machine needs nothing done by hand first.
#
# Only what is missing is installed (a Meson older than 0.63 counts as
# missing):
#   - as root, or with sudo that asks for no password, and with apt-get:
#     the meson, ninja-build and gcc packages;
#   - otherwise, or when the distribution's Meson is too old (Ubuntu 22.04
#     ships 0.61): Meson and Ninja from PyPI with pip, into a virtual
#     environment in .venv/ of the source tree, which needs no privileges;
#   - the Python packages of ptxgen-prepare, tokenizers and jinja2, when the
#     python3 on PATH lacks them: with pip into .venv/ as well;
#   - pkg-config (the install test builds a program through it), with
#     apt-get when it can.
# ptxas comes with NVIDIA's CUDA toolkit, which this does not install: when
# none is found it says which tests skip and how to give them one.
# Once everything is there it only checks and runs COMMAND.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
venv=$root/.venv
meson_min=0.63

say() { printf 'setup: %s\n' "$*" >&2; }
die() {
    say "$*"
    exit 1
}

# An earlier run's virtual environment comes first.
if [ -x "$venv/bin/meson" ]; then
    PATH=$venv/bin:$PATH
    export PATH
fi

have() { command -v "$1" >/dev/null 2>&1; }
meson_ok() {
    have meson || return 1
    v=$(meson --version 2>/dev/null) || return 1
    printf '%s\n' "$v" | awk -F. -v min="$meson_min" '
        { split(min, m, "."); ok = $1 > m[1] || ($1 == m[1] && $2 + 0 >= m[2]) }
        END { exit !ok }'
}
ninja_ok() { have ninja; }
cc_ok() { have "${CC:-cc}" || have gcc || have clang; }

# apt-get as root or through password-less sudo; empty if neither.
apt=
if have apt-get; then
    if [ "$(id -u)" -eq 0 ]; then
        apt="apt-get"
    elif have sudo && sudo -n true 2>/dev/null; then
        apt="sudo -n apt-get"
    fi
fi

apt_install() {
    say "installing $* with $apt"
    if [ -z "${apt_updated:-}" ]; then
        $apt update -qq || die "'$apt update' failed"
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive $apt install -y -qq "$@" ||
        die "'$apt install $*' failed"
}

# Meson's start-up is slow: ask it once when nothing is missing.
tools_ok=yes
meson_ok || tools_ok=
ninja_ok || tools_ok=

if [ -n "$apt" ] && { [ -z "$tools_ok" ] || ! cc_ok; }; then
    pkgs=
    meson_ok || pkgs="$pkgs meson"
    ninja_ok || pkgs="$pkgs ninja-build"
    cc_ok || pkgs="$pkgs gcc libc6-dev"
    # shellcheck disable=SC2086 # a list of package names
    apt_install $pkgs
    hash -r 2>/dev/null || true
    tools_ok=yes
    meson_ok || tools_ok=
    ninja_ok || tools_ok=
fi
cc_ok || die "no C compiler found (cc, gcc or clang): install one, e.g. 'apt-get install gcc'"
if ! have pkg-config; then
    if [ -n "$apt" ]; then
        apt_install pkg-config
    else
        say "no pkg-config: the install test skips (install pkg-config to run it)"
    fi
fi
# The ptxas suite's tests find ptxas as tests/find_ptxas.sh does.
ptxas_found=
for cand in "${PTXAS:-}" "$(command -v ptxas 2>/dev/null || true)" \
        "${CUDA_HOME:+$CUDA_HOME/bin/ptxas}" "${CUDA_PATH:+$CUDA_PATH/bin/ptxas}" \
        /usr/local/cuda/bin/ptxas; do
    [ -n "$cand" ] && [ -x "$cand" ] && ptxas_found=$cand && break
done
[ -n "$ptxas_found" ] ||
    say "no ptxas: the ptxas suite (20 tests: every target's PTX assembled) skips;" \
        "install NVIDIA's CUDA toolkit (its ptxas alone is enough: the cuda-nvcc package)" \
        "and put ptxas on PATH, or set PTXAS or CUDA_HOME"

if [ -z "$tools_ok" ]; then
    have python3 || die "Meson and Ninja are missing and so is python3 to install them with;" \
        "install meson and ninja-build with the system's package manager"
    if [ ! -x "$venv/bin/pip" ]; then
        # Debian and Ubuntu split venv's pip bootstrap into python3-venv.
        if ! python3 -c 'import ensurepip' >/dev/null 2>&1 && [ -n "$apt" ]; then
            apt_install python3-venv
        fi
        say "creating a virtual environment in $venv for Meson and Ninja"
        python3 -m venv "$venv" ||
            die "could not create $venv: install python3-venv (or meson and ninja-build)" \
                "with the system's package manager, or run this as root"
    fi
    say "installing Meson and Ninja from PyPI into $venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "meson>=$meson_min" ninja ||
        die "pip could not install meson and ninja into $venv"
    PATH=$venv/bin:$PATH
    export PATH
    hash -r 2>/dev/null || true
    meson_ok || die "Meson $meson_min or newer is still not found after setting it up"
    ninja_ok || die "Ninja is still not found after setting it up"
fi

# The data tools' Python packages, tokenizers and jinja2 (ptxgen-prepare and
# its test, tests/tools/prepare.py, which runs them with the first python3
# that has them: .venv/'s, then PATH's). When neither has them they go into
# .venv/ with pip, as Meson does. The build needs neither, so a failure here
# is said, not fatal: the data-prepare test then fails naming what to
# install.
py_ok() { "$1" -c 'import tokenizers, jinja2' >/dev/null 2>&1; }
if have python3 && ! py_ok python3 && ! { [ -x "$venv/bin/python3" ] && py_ok "$venv/bin/python3"; }; then
    if [ ! -x "$venv/bin/pip" ]; then
        if ! python3 -c 'import ensurepip' >/dev/null 2>&1 && [ -n "$apt" ]; then
            apt_install python3-venv
        fi
        say "creating a virtual environment in $venv for tokenizers and jinja2"
        python3 -m venv "$venv" || say "could not create $venv (install python3-venv)"
    fi
    if [ -x "$venv/bin/pip" ]; then
        say "installing tokenizers and jinja2 from PyPI into $venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check tokenizers jinja2 ||
            say "pip could not install tokenizers and jinja2 into $venv;" \
                "the data-prepare test fails until they are there (pip install tokenizers jinja2)"
    fi
fi

cd "$root"
if [ ! -f build/build.ninja ]; then
    # A set-up that stopped half way leaves meson-private/ behind, which
    # 'meson setup' would take for a finished one.
    wipe=
    [ ! -d build/meson-private ] || wipe=--wipe
    meson setup $wipe build || die "'meson setup build' failed"
fi
[ $# -eq 0 ] || exec "$@"
