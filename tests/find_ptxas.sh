# SPDX-License-Identifier: MIT
#
# Sourced by the ptxas tests (golden/ptxas_check.sh, golden/ptxas_knobs.sh,
# ptxas/matrix_check.sh): sets $ptxas to the first ptxas found in $PTXAS,
# on PATH, under $CUDA_HOME or $CUDA_PATH, or in /usr/local/cuda; without
# one the test is skipped (exit 77). A PTXAS set to what is not an
# executable fails the test.

# A PTXAS that names no executable is a mistake to say, not to paper over
# with the next ptxas found.
if [ -n "${PTXAS:-}" ] && [ ! -x "$PTXAS" ]; then
    echo "FAIL: PTXAS=$PTXAS is not an executable file"
    exit 1
fi
ptxas=
for cand in "${PTXAS:-}" "$(command -v ptxas 2>/dev/null)" \
        "${CUDA_HOME:+$CUDA_HOME/bin/ptxas}" "${CUDA_PATH:+$CUDA_PATH/bin/ptxas}" \
        /usr/local/cuda/bin/ptxas; do
    if [ -n "$cand" ] && [ -x "$cand" ]; then
        ptxas=$cand
        break
    fi
done
if [ -z "$ptxas" ]; then
    echo "SKIP: no ptxas found (set PTXAS or CUDA_HOME, or put ptxas on PATH)"
    exit 77
fi
