#!/bin/sh
# SPDX-License-Identifier: MIT
# Data-parallel ptxgen-train on a host with 2 or more GPUs, against the
# small reference model (tests/model/reference.py make):
#   numerics  N ranks x batch B against one process with batch N x B on the
#             same rows: every step's loss and grad_norm, and the final
#             adapter (f32 and bf16; N = 2, and 4 when there are 4 GPUs);
#             each run's own end-of-run check that all ranks hold the same
#             adapter to the bit; the same with --shard-optimizer (ZeRO-1);
#   shard     --shard-optimizer checkpoints: a sharded run stopped and
#             resumed gives the uninterrupted run's bits; an unsharded run
#             resumed with --shard-optimizer, its numbers to the f32
#             tolerance (the state file is the same either way);
#   init      two processes by hand (torchrun's variables) through the TCP
#             exchange and through --dist-init file:;
#   faults    a rank killed (SIGKILL) mid-run, with the launcher and
#             without it: every rank ends within --dist-timeout, non-zero,
#             and no checkpoint is half-written; Ctrl-C (SIGINT) on the
#             launcher: every rank stops after the same step, exit 130,
#             and --resume continues to the uninterrupted run's losses.
# Usage: tests/model/gpu-dp-check.sh BUILD_DIR OUT_DIR [parts]
# parts: any of numerics shard init faults (default: all; faults is kills
# and interrupt). Exit 77 with fewer
# than 2 GPUs.
set -u
B=${1:?build dir}
O=${2:?out dir}
PARTS=${3:-"numerics shard init faults"}
export NCCL_NVLS_ENABLE=0
T=$B/tools/ptxgen-train
NG=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ "$NG" -ge 2 ] || { echo "fewer than 2 GPUs: skipped"; exit 77; }
mkdir -p "$O"
D=$O/small
[ -d "$D/model" ] || python3 tests/model/reference.py make --dir "$D" > "$O/make.log" 2>&1 ||
    { echo "reference.py make failed"; tail -5 "$O/make.log"; exit 1; }
FAIL=0
# steps a log holds so far; milliseconds since a date +%s%N
steps() { n=$(grep -c '"loss"' "$1" 2>/dev/null); echo "${n:-0}"; }
since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
bad() { echo "FAIL: $*"; FAIL=1; }

# compare two runs: loss and grad_norm per step (relative), adapters
cmp_runs() { # tol a.jsonl b.jsonl a_dir b_dir label
    python3 - "$@" <<'PY'
import json, sys, struct
tol, la, lb, da, db, label = float(sys.argv[1]), *sys.argv[2:]
def rows(p): return [json.loads(l) for l in open(p) if '"loss"' in l]
a, b = rows(la), rows(lb)
def rel(x, y): return abs(x - y) / max(abs(x), 1e-30)
wl = max(rel(x["loss"], y["loss"]) for x, y in zip(a, b))
wg = max(rel(x["grad_norm"], y["grad_norm"]) for x, y in zip(a, b))
from safetensors.numpy import load_file
ta, tb = load_file(da + "/adapter_model.safetensors"), load_file(db + "/adapter_model.safetensors")
import numpy as np
wa = max(float(np.abs(ta[k] - tb[k]).max() / max(np.abs(ta[k]).max(), 1e-30)) for k in ta)
ok = len(a) == len(b) and len(a) > 0 and wl <= tol and wg <= tol and wa <= tol * 10
print("%s: %d steps, loss %.2e, grad_norm %.2e, adapter %.2e (tolerance %g) %s"
      % (label, len(a), wl, wg, wa, tol, "ok" if ok else "FAIL"))
sys.exit(0 if ok else 1)
PY
}

if has numerics; then
    echo "=== N ranks x batch B against one process x N B (same rows, sequential order)"
    for dt in f32 bf16; do
        tol=1e-5; [ $dt = bf16 ] && tol=2e-3
        C="--model $D/model --adapter $D/adapter --tokens $D/tokens.bin --seq 32 --steps 12 --dtype $dt --lr 1e-3 --lr-schedule cosine --warmup-steps 2 --data-order sequential --mode graph"
        $T $C --batch 4 --log-json "$O/one-$dt.jsonl" --save-adapter "$O/one-$dt" > "$O/one-$dt.log" 2>&1 ||
            { bad "one process $dt"; tail -3 "$O/one-$dt.log"; }
        for n in 2 4; do
            [ "$n" -le "$NG" ] || continue
            $T $C --gpus $n --batch $((4 / n)) --log-json "$O/dp$n-$dt.jsonl" --save-adapter "$O/dp$n-$dt" \
                > "$O/dp$n-$dt.log" 2>&1 || { bad "$n ranks $dt"; tail -5 "$O/dp$n-$dt.log"; }
            grep -h "identical on all" "$O/dp$n-$dt.log" || bad "$n ranks $dt: no adapter check line"
            cmp_runs $tol "$O/one-$dt.jsonl" "$O/dp$n-$dt.jsonl" "$O/one-$dt" "$O/dp$n-$dt" \
                "$dt, $n ranks x $((4 / n)) vs 1 x 4" || FAIL=1
            z=zero$n-$dt
            $T $C --gpus $n --batch $((4 / n)) --shard-optimizer --log-json "$O/$z.jsonl" \
                --save-adapter "$O/$z" > "$O/$z.log" 2>&1 || { bad "$n ranks $dt sharded"; tail -5 "$O/$z.log"; }
            grep -h "identical on all" "$O/$z.log" || bad "$n ranks $dt sharded: no adapter check line"
            cmp_runs $tol "$O/one-$dt.jsonl" "$O/$z.jsonl" "$O/one-$dt" "$O/$z" \
                "$dt, $n ranks x $((4 / n)) --shard-optimizer vs 1 x 4" || FAIL=1
        done
    done
    echo "=== with --grad-accum 2 and packed .pgtok-free flat data, 2 ranks (f32)"
    C="--model $D/model --adapter $D/adapter --tokens $D/tokens.bin --seq 32 --steps 6 --dtype f32 --grad-accum 2 --data-order sequential --mode graph"
    $T $C --batch 2 --log-json "$O/acc1.jsonl" --save-adapter "$O/acc1" > "$O/acc1.log" 2>&1 || bad "accum one"
    $T $C --gpus 2 --batch 1 --log-json "$O/acc2.jsonl" --save-adapter "$O/acc2" > "$O/acc2.log" 2>&1 || bad "accum two"
    cmp_runs 1e-5 "$O/acc1.jsonl" "$O/acc2.jsonl" "$O/acc1" "$O/acc2" "f32 grad-accum 2, 2 ranks x 1 vs 1 x 2" || FAIL=1
fi

if has shard; then
    echo "=== --shard-optimizer checkpoints: stopped at 6 of 12 and resumed; unsharded, resumed sharded"
    C="--model $D/model --adapter $D/adapter --tokens $D/tokens.bin --seq 32 --batch 2 --dtype f32 --lr 1e-3 --data-order sequential --mode graph --gpus 2"
    rm -rf "$O"/zfull* "$O"/zint* "$O"/zplain*
    $T $C --shard-optimizer --steps 12 --output-dir "$O/zfull" --log-json "$O/zfull.jsonl" \
        > "$O/zfull.log" 2>&1 || { bad "sharded uninterrupted run"; tail -3 "$O/zfull.log"; }
    for how in zint zplain; do
        sh=--shard-optimizer; [ $how = zplain ] && sh=
        $T $C $sh --steps 6 --output-dir "$O/$how" --log-json "$O/$how.jsonl" \
            > "$O/$how-a.log" 2>&1 || { bad "$how first half"; tail -3 "$O/$how-a.log"; }
        $T --resume "$O/$how" --gpus 2 --steps 12 --shard-optimizer > "$O/$how-b.log" 2>&1 ||
            { bad "$how resume"; tail -3 "$O/$how-b.log"; }
    done
    python3 - "$O/zfull.jsonl" "$O/zint.jsonl" "$O/zplain.jsonl" <<'PY' || FAIL=1
import json, sys
k = lambda r: (r["step"], r["loss"], r["lr"], r["grad_norm"])
rows = [[k(json.loads(l)) for l in open(p) if '"loss"' in l] for p in sys.argv[1:]]
a, b, c = rows
rel = max(abs(x[1] - y[1]) / abs(x[1]) for x, y in zip(a, c)) if len(a) == len(c) else 1
print("sharded, resumed sharded: %d and %d steps, identical: %s" % (len(a), len(b), a == b))
print("unsharded, resumed sharded: %d steps, loss within %.2e of the sharded run" % (len(c), rel))
sys.exit(0 if a == b and len(a) == 12 and len(c) == 12 and rel <= 1e-5 else 1)
PY
    cmp "$O/zfull/final/adapter_model.safetensors" "$O/zint/final/adapter_model.safetensors" &&
        echo "sharded resume: final adapters identical" || bad "sharded resume: final adapters differ"
fi

if has init; then
    echo "=== two processes by hand: TCP (MASTER_ADDR/MASTER_PORT) and --dist-init file:"
    C="--model $D/model --adapter $D/adapter --tokens $D/tokens.bin --seq 32 --steps 4 --batch 2 --dtype f32 --data-order sequential --dist-timeout 60"
    for how in tcp file; do
        rm -f "$O/rdv" "$O/init-$how.jsonl"
        for r in 1 0; do
            if [ $how = tcp ]; then
                RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29533 \
                    $T $C --log-json "$O/init-$how.jsonl" > "$O/init-$how-$r.log" 2>&1 &
            else
                RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r $T $C --dist-init "file:$O/rdv" \
                    --log-json "$O/init-$how.jsonl" > "$O/init-$how-$r.log" 2>&1 &
            fi
            eval "p$r=\$!"
            sleep 1
        done
        wait $p0; s0=$?; wait $p1; s1=$?
        n=$(steps "$O/init-$how.jsonl")
        echo "$how: exit $s0 $s1, $n steps logged by rank 0, $(grep -h 'identical on all' "$O/init-$how-0.log")"
        [ $s0 = 0 ] && [ $s1 = 0 ] && [ "$n" = 4 ] || { bad "init $how"; tail -3 "$O/init-$how-0.log" "$O/init-$how-1.log"; }
        [ $how = file ] && [ -e "$O/rdv" ] && bad "the rendezvous file was left behind"
    done
    echo "=== a bad meeting place: one line, no hang"
    t0=$(date +%s%N)
    RANK=1 WORLD_SIZE=2 MASTER_ADDR=nohost.invalid MASTER_PORT=29534 timeout 60 $T $C --dist-timeout 5 > "$O/badaddr.log" 2>&1
    st=$?
    echo "unresolvable MASTER_ADDR (--dist-timeout 5): exit $st after $(since $t0) ms: $(tail -1 "$O/badaddr.log")"
    [ $st != 0 ] && [ $st != 124 ] || bad "unresolvable address: exit $st"
    t0=$(date +%s%N)
    RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29535 timeout 60 $T $C --dist-timeout 5 > "$O/norank0.log" 2>&1
    st=$?
    echo "no rank 0 (--dist-timeout 5): exit $st after $(since $t0) ms: $(tail -1 "$O/norank0.log")"
    [ $st != 0 ] && [ $st != 124 ] || bad "no rank 0: exit $st"
fi

if has faults || has kills; then
    echo "=== a rank killed mid-run"
    C="--model $D/model --adapter $D/adapter --tokens $D/tokens.bin --seq 32 --steps 100000 --batch 2 --dtype bf16 --mode graph --save-every 50 --dist-timeout 15"
    # with the launcher
    rm -rf "$O/kill1" "$O/kill1.jsonl"
    $T $C --gpus 2 --output-dir "$O/kill1" --log-json "$O/kill1.jsonl" > "$O/kill1.log" 2>&1 &
    lp=$!
    while [ "$(steps "$O/kill1.jsonl")" -lt 120 ] && kill -0 $lp 2>/dev/null; do sleep 0.05; done
    victim=$(pgrep -P $lp | tail -1)
    echo "killing rank 1 (pid $victim) at step $(steps "$O/kill1.jsonl")"
    t0=$(date +%s%N); kill -KILL "$victim"; wait $lp; st=$?
    echo "launcher, rank 1 killed: exit $st after $(since $t0) ms; $(grep -h 'rank' "$O/kill1.log" | tail -3 | tr '\n' ' ')"
    [ $st != 0 ] || bad "launcher exit 0 after a killed rank"
    pgrep -f "kill1" > /dev/null && bad "ranks left running"
    ls "$O/kill1" | grep -v '^checkpoint-[0-9]*$' | grep -q . && bad "stray files in the output dir: $(ls "$O/kill1")"
    echo "output dir: $(ls "$O/kill1" | tr '\n' ' ')"
    # by hand (no launcher): the survivor ends by itself within --dist-timeout
    rm -rf "$O/kill2" "$O/kill2.jsonl"
    for r in 1 0; do
        RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29536 \
            $T $C --output-dir "$O/kill2" --log-json "$O/kill2.jsonl" > "$O/kill2-$r.log" 2>&1 &
        eval "p$r=\$!"
        sleep 0.5
    done
    while [ "$(steps "$O/kill2.jsonl")" -lt 120 ] && kill -0 $p0 2>/dev/null; do sleep 0.05; done
    echo "killing rank 1 at step $(steps "$O/kill2.jsonl")"
    t0=$(date +%s%N); kill -KILL $p1; wait $p0; st=$?
    echo "no launcher, rank 1 killed: rank 0 exit $st after $(since $t0) ms (--dist-timeout 15): $(tail -1 "$O/kill2-0.log")"
    ls "$O/kill2" | grep -v '^checkpoint-[0-9]*$' | grep -q . && bad "stray files in the output dir: $(ls "$O/kill2")"
    echo "output dir: $(ls "$O/kill2" | tr '\n' ' ')"
    [ $st != 0 ] || bad "rank 0 exit 0 after its peer was killed"
fi
if has faults || has interrupt; then
    echo "=== Ctrl-C on the launcher, then --resume"
    C="--model $D/model --adapter $D/adapter --tokens $D/tokens.bin --seq 32 --steps 300 --batch 2 --dtype f32 --mode graph --save-every 25 --data-order sequential"
    rm -rf "$O/full" "$O/int" "$O/full.jsonl" "$O/int.jsonl"
    $T $C --gpus 2 --output-dir "$O/full" --log-json "$O/full.jsonl" > "$O/full.log" 2>&1 || bad "uninterrupted run"
    $T $C --gpus 2 --output-dir "$O/int" --log-json "$O/int.jsonl" > "$O/int.log" 2>&1 &
    lp=$!
    while [ "$(steps "$O/int.jsonl")" -lt 77 ] && kill -0 $lp 2>/dev/null; do sleep 0.01; done
    kill -INT $lp; wait $lp; st=$?
    echo "interrupted: exit $st; $(grep -h 'SIGINT' "$O/int.log" | head -1)"
    [ $st = 130 ] || bad "interrupted exit $st, not 130"
    $T --resume "$O/int" --gpus 2 > "$O/resume.log" 2>&1 || { bad "resume"; tail -3 "$O/resume.log"; }
    python3 - "$O/full.jsonl" "$O/int.jsonl" <<'PY' || FAIL=1
import json, sys
k = lambda r: (r["step"], r["loss"], r["lr"], r["grad_norm"])
a = [k(json.loads(l)) for l in open(sys.argv[1]) if '"loss"' in l]
b = [k(json.loads(l)) for l in open(sys.argv[2]) if '"loss"' in l]
print("resumed run: %d and %d steps, identical: %s" % (len(a), len(b), a == b))
sys.exit(0 if a == b and len(a) == 300 else 1)
PY
    cmp "$O/full/final/adapter_model.safetensors" "$O/int/final/adapter_model.safetensors" &&
        echo "final adapters identical" || bad "final adapters differ"
fi
[ $FAIL = 0 ] && echo "gpu-dp-check: all passed" || echo "gpu-dp-check: FAILED"
exit $FAIL
