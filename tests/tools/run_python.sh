#!/bin/sh
# SPDX-License-Identifier: MIT
# run_python.sh SOURCE_ROOT SCRIPT [ARG...]: a Python test under the first
# interpreter that has the data tools' packages (tokenizers, jinja2):
# $PTXGEN_PYTHON, the checkout's .venv (where tools/setup.sh installs them),
# python3 on PATH. Without any python3 the test is skipped (77); with one
# that lacks the packages the test runs and fails, saying what to install.
root=$1
shift
first=
for py in "${PTXGEN_PYTHON:-}" "$root/.venv/bin/python3" python3; do
    [ -n "$py" ] || continue
    command -v "$py" >/dev/null 2>&1 || continue
    if "$py" -c 'import tokenizers, jinja2' >/dev/null 2>&1; then
        exec "$py" "$@"
    fi
    [ -n "$first" ] || first=$py
done
if [ -z "$first" ]; then
    echo "SKIP: no python3"
    exit 77
fi
exec "$first" "$@"
