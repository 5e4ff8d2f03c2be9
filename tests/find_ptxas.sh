# SPDX-License-Identifier: MIT
#
# Sourced by the ptxas tests (golden/ptxas_check.sh, golden/ptxas_knobs.sh,
# ptxas/matrix_check.sh): sets $ptxas to the first ptxas found in $PTXAS,
# on PATH, under $CUDA_HOME or $CUDA_PATH, or in /usr/local/cuda; without
# one the test is skipped (exit 77).

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
