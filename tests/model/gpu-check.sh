#!/bin/sh
# SPDX-License-Identifier: MIT
# On a GPU machine with PyTorch, transformers and peft: the reference
# comparison of ptxgen-train (f32 and bf16, eager and graph), a
# compute-sanitizer run of a tiny step, and the Qwen2-1.5B-shape benchmark
# against PyTorch. Usage: tests/model/gpu-check.sh BUILD_DIR OUT_DIR [parts]
# parts: any of ref sanitize bench bench05 (default: the first three).
# REF_DIR: a directory reference.py all already made (tests/target-check.sh
# runs the reference once for several targets); default OUT_DIR/small, made.
# ARCH: the kind of small model the reference makes (reference.py --arch:
# qwen2, the default, llama, llama3, mistral, qwen3). DROPOUT: the
# adapter's lora_dropout (the reference draws ptxgen's masks, seed 0).
# SEQ, BATCH, TOKENS (64, 2, 4099): the ref part's rows, and the tokens
# the reference makes (enough for 5 steps of BATCH x SEQ); RECOMPUTE:
# ptxgen-train's --recompute for it (default: auto).
# PATTERN (non-empty): the adapter with rank_pattern and alpha_pattern
# (reference.py --pattern); each dtype's run also evaluates after its last
# step and its saved adapter is loaded in PEFT (reference.py peft-eval), so
# that the patterns ptxgen writes back give PEFT the same pairs.
set -u
B=$1
O=$2
PARTS=${3:-"ref sanitize bench"}
SEQ=${SEQ:-64}
BATCH=${BATCH:-2}
T=$B/tools/ptxgen-train
R=tests/model/reference.py
D=${REF_DIR:-$O/small}
mkdir -p "$O"
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
if has ref; then
    if [ -z "${REF_DIR:-}" ]; then
        python3 $R all --dir "$D" ${ARCH:+--arch "$ARCH"} ${DROPOUT:+--dropout "$DROPOUT"} \
            ${PATTERN:+--pattern} --batch "$BATCH" --seq "$SEQ" ${TOKENS:+--tokens "$TOKENS"} \
            > "$O/reference.log" 2>&1 ||
            echo "reference failed: see reference.log"
        tail -4 "$O/reference.log"
    fi
    for dt in f32 bf16; do
        rm -rf "$D/ours-$dt.jsonl" "$D/ours-$dt-grads" "$D/ours-$dt-adapter"
        $T --model "$D/model" --adapter "$D/adapter" --tokens "$D/tokens.bin" --batch "$BATCH" \
            --seq "$SEQ" --data-order sequential --steps 5 --lr 0.001 --max-norm 1.0 \
            --weight-decay 0.01 --dtype $dt ${RECOMPUTE:+--recompute "$RECOMPUTE"} \
            --log-json "$D/ours-$dt.jsonl" --save-grads "$D/ours-$dt-grads" \
            ${PATTERN:+--eval-data "$D/tokens.bin" --eval-batches 2} \
            --save-adapter "$D/ours-$dt-adapter" > "$O/train-$dt.log" 2>&1
        rc=$?
        echo "ptxgen-train $dt: exit $rc"; tail -3 "$O/train-$dt.log"
        if [ $rc != 0 ]; then
            echo "compare $dt: exit skipped: ptxgen-train failed"
            continue
        fi
        python3 $R compare --ref "$D/ref-$dt" --log-json "$D/ours-$dt.jsonl" \
            --grads "$D/ours-$dt-grads" > "$O/compare-$dt.log" 2>&1
        echo "compare $dt: exit $?"; cat "$O/compare-$dt.log" | tail -40
        if [ -n "${PATTERN:-}" ]; then
            python3 $R peft-eval --model "$D/model" --adapter "$D/ours-$dt-adapter" \
                --tokens "$D/tokens.bin" --log-json "$D/ours-$dt.jsonl" --batch 2 --seq 64 \
                --batches 2 --dtype $dt > "$O/peft-eval-$dt.log" 2>&1
            echo "peft-eval $dt: exit $?"; tail -2 "$O/peft-eval-$dt.log"
        fi
    done
    rm -rf "$D/ours-graph.jsonl" "$D/ours-graph-grads"
    $T --model "$D/model" --adapter "$D/adapter" --tokens "$D/tokens.bin" --batch "$BATCH" \
        --seq "$SEQ" --data-order sequential --steps 5 --dtype f32 --mode both \
        ${RECOMPUTE:+--recompute "$RECOMPUTE"} --log-json "$D/ours-graph.jsonl" \
        --save-grads "$D/ours-graph-grads" > "$O/train-graph.log" 2>&1
    echo "graph both f32: exit $?"; tail -4 "$O/train-graph.log"
    python3 $R compare --ref "$D/ref-f32" --log-json "$D/ours-graph.jsonl" \
        --grads "$D/ours-graph-grads" > "$O/compare-graph.log" 2>&1
    echo "compare graph f32: exit $?"; tail -2 "$O/compare-graph.log"
fi
if has sanitize; then
    CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
    if [ -n "$CS" ]; then
        timeout 200 "$CS" --tool memcheck --leak-check no $T --model "$D/model" --adapter "$D/adapter" \
            --tokens "$D/tokens.bin" --batch 1 --seq 16 --steps 1 --dtype bf16 \
            > "$O/sanitize.log" 2>&1
        echo "compute-sanitizer memcheck: exit $?"; tail -3 "$O/sanitize.log"
    else
        echo "no compute-sanitizer"
    fi
fi
if has bench; then
    timeout 240 python3 tests/bench/bench_torch.py --dir "$O/big" --save-model --steps 5 \
        > "$O/bench-torch.log" 2>&1
    echo "torch bench: exit $?"; cat "$O/bench-torch.log" | grep -v Warning | tail -5
    nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
    timeout 200 $T --model "$O/big/model" --tokens "$O/big/tokens.bin" --batch 4 --seq 512 \
        --steps 3 --dtype bf16 --rank 16 --alpha 32 --profile > "$O/bench-ours-profile.log" 2>&1
    echo "ours profile: exit $?"; tail -4 "$O/bench-ours-profile.log"
    timeout 200 $T --model "$O/big/model" --tokens "$O/big/tokens.bin" --batch 4 --seq 512 \
        --steps 6 --dtype bf16 --rank 16 --alpha 32 --mode graph > "$O/bench-ours.log" 2>&1
    echo "ours graph: exit $?"; tail -4 "$O/bench-ours.log"
    rm -rf "$O/big/model"
fi
if has bench05; then
    timeout 200 python3 tests/bench/bench_torch.py --dir "$O/b05" --shape 0.5b --save-model --steps 5 \
        > "$O/bench05-torch.log" 2>&1
    echo "torch bench 0.5b: exit $?"; grep "^torch" "$O/bench05-torch.log"
    timeout 150 $T --model "$O/b05/model" --tokens "$O/b05/tokens.bin" --batch 4 --seq 512 \
        --steps 3 --dtype bf16 --rank 16 --alpha 32 --profile > "$O/bench05-ours-profile.log" 2>&1
    echo "ours 0.5b profile: exit $?"; tail -3 "$O/bench05-ours-profile.log"
    timeout 150 $T --model "$O/b05/model" --tokens "$O/b05/tokens.bin" --batch 4 --seq 512 \
        --steps 6 --dtype bf16 --rank 16 --alpha 32 --mode graph > "$O/bench05-ours.log" 2>&1
    echo "ours 0.5b graph: exit $?"; tail -3 "$O/bench05-ours.log"
    rm -rf "$O/b05/model"
fi
