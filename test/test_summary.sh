#!/usr/bin/env bash
# test_summary.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC PLOT_LOG: the done line and the log tell the truth.
#   - A straight 12-step run: "12 steps", the first and last losses with their step numbers equal to the
#     log's, the best validation loss, the activation peaks of a training step and of validation apart; the
#     training step's peak is the same without validation (--val none), which then prints no validation.
#   - The same run stopped (--exit-interval 6, which validates at step 6 too), resumed (--resume auto) and killed while saving at step 8
#     (fault injection), then resumed again to the end: the last run says "resumed at step 6: 6 steps", its
#     losses are steps 7 and 12 of the straight run; the log marks both restarts, and plot_log reads each
#     step once (12 training points, not 14).
#   - Nothing measured, nothing printed: --steps 0 and a resumed finished run print no "nan".
#   - Under a 2-stage pipeline the first stage's training peak differs between 1F1B and AFAB (the
#     difference validation's peak used to hide).
set -euo pipefail
train="$1"; prep="$2"; src="$3"; mpirun="$4 --oversubscribe --bind-to none"; plot="$5"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cat "$src/train/options.cu" "$src/train_gpt.cu" "$src/train/bookkeeping.cu" > "$dir/text.txt"
"$prep" --out-dir "$dir" "$dir/text.txt" > /dev/null
common="--device cpu --layers 2 --heads 4 --hidden 32 --max-seq 32 --seq 16 --batch 4 --train $dir/train.bin
        --steps 12 --lr 3e-3 --log-every 1"
fail() { echo "FAIL: $*"; exit 1; }
done_line() { grep '^done: ' "$1" || fail "no done line in $1"; }
# log_loss LOG STEP: the step's training loss from the log, as the done line prints it (%.4f).
log_loss() { python3 -c "import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get('step') == int(sys.argv[2]) and 'train_loss' in r: v = r['train_loss']
print('%.4f' % v)" "$1" "$2"; }

# ---- a straight run, with and without validation
$mpirun -np 2 "$train" $common --tp 2 --sp --val "$dir/val.bin" --val-every 4 --val-batches 2 --log "$dir/s.jsonl" > "$dir/s.txt"
d=$(done_line "$dir/s.txt"); echo "$d"
echo "$d" | grep -Eq "^done: 12 steps in [0-9.]+ s \| loss $(log_loss "$dir/s.jsonl" 1) \(step 1\) -> $(log_loss "$dir/s.jsonl" 12) \(step 12\) \| best val [0-9.]+ \| activation peak: training step [0-9.]+ MB, validation [0-9.]+ MB" || fail "straight run"
$mpirun -np 2 "$train" $common --tp 2 --sp --val none --log "$dir/n.jsonl" > "$dir/n.txt"
n=$(done_line "$dir/n.txt"); echo "$n"
grep -q -e "val" -e "nan" <<<"$n" && fail "a run without validation mentions it, or nan"
peak() { echo "$1" | sed -n 's/.*training step \([0-9.]*\) MB.*/\1/p'; }
test "$(peak "$d")" = "$(peak "$n")" || fail "the training peak depends on validation: $(peak "$d") vs $(peak "$n")"

# ---- stopped, resumed, killed mid-save, resumed again
ck="--checkpoint-dir $dir/ck --resume auto --save-every 4 --tp 2 --sp --val $dir/val.bin --val-every 4 --val-batches 2 --log $dir/r.jsonl"
$mpirun -np 2 "$train" $common $ck --exit-interval 6 > "$dir/r1.txt"
set +e
MM_CRASH_DURING_SAVE=1:100 $mpirun -x MM_CRASH_DURING_SAVE -np 2 "$train" $common $ck > "$dir/r2.txt" 2>&1
set -e
grep -q "fault injection: SIGKILL during save 1" "$dir/r2.txt" || { cat "$dir/r2.txt"; fail "no crash in the second run"; }
grep -q '"step":8,"train_loss"' "$dir/r.jsonl" || fail "the killed run did not log step 8"
$mpirun -np 2 "$train" $common $ck > "$dir/r3.txt"
r=$(done_line "$dir/r3.txt"); echo "$r"
echo "$r" | grep -Eq "^done: resumed at step 6: 6 steps in [0-9.]+ s \| loss $(log_loss "$dir/s.jsonl" 7) \(step 7\) -> $(log_loss "$dir/s.jsonl" 12) \(step 12\) \| best val [0-9.]+ \| activation peak: training step $(peak "$d") MB, validation" || fail "resumed run"
test "$(grep -c '"restart_after_step":6}' "$dir/r.jsonl")" = 2 || fail "the log does not mark the two restarts after step 6"
p=$("$plot" "$dir/r.jsonl" --out-dir "$dir/pictures"); echo "$p"
grep -q "(12 train points, 5 validation points, 2 restart(s)" <<<"$p" || fail "plot_log reads repeated steps"
test "$(grep -c '"train_loss"' "$dir/r.jsonl")" = 14 || fail "expected steps 7 and 8 logged twice in the raw log"

# ---- nothing measured
$mpirun -np 2 "$train" $common $ck > "$dir/r4.txt"
f=$(done_line "$dir/r4.txt"); echo "$f"
grep -q "^done: resumed at step 12: no steps left to run (the run had reached --steps 12)" <<<"$f" || fail "finished run"
grep -qi "nan" <<<"$f" && fail "nan in the summary of a finished run"
$mpirun -np 2 "$train" $common --steps 0 --val none > "$dir/z.txt"
z=$(done_line "$dir/z.txt"); echo "$z"
test "$z" = "done: no steps run (--steps 0)" || fail "--steps 0"

# ---- the pipeline schedules' peaks, with validation on
for s in 1f1b afab; do
  $mpirun -np 2 "$train" $common --steps 2 --pp 2 --num-microbatches 4 --pipeline-schedule $s --val "$dir/val.bin" --val-batches 2 > "$dir/pp_$s.txt"
  echo "$s: $(done_line "$dir/pp_$s.txt")"
done
a=$(peak "$(done_line "$dir/pp_1f1b.txt")"); b=$(peak "$(done_line "$dir/pp_afab.txt")")
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" "$a" "$b" || fail "1F1B's first-stage peak $a MB is not below AFAB's $b MB"
echo "summary lines and the log: true"
