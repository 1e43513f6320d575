#!/usr/bin/env bash
# post_validation_cli.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC [NP FLAGS...]: the trainer with --optimizer-post-validation
# (model/post_validation.h) against the same run without it, pp 2, ZB-H2, 4 micro-batches: a clip threshold that
# most steps cross (each rolled back and redone with the clip's scale), a NaN injected at step 4 and skipped
# (--skip-bad-steps: rolled back), validation and checkpoints every 3 steps. The log's losses, norms, skips and
# validation losses are the synchronous run's (its bytes and times aside: a rollback runs the forwards and
# backwards again), the checkpoints are byte for byte the same, and the run says what it rolled back.
# NP (default 2) ranks, FLAGS added to both runs: e.g. 4 --zero 3 (pp 2 x dp 2, the tied embedding's early sum
# finished into ZeRO's edges bucket, model/zero_model.cu).
set -euo pipefail
train="$1"; prep="$2"; src="$3"; mpirun="$4 --oversubscribe --bind-to none"; np="${5:-2}"; shift $(( $# < 5 ? $# : 5 ))
extra="$*"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cat "$src/train/options.cu" > "$dir/text.txt"
"$prep" --out-dir "$dir" "$dir/text.txt" > /dev/null
common="--device cpu --layers 4 --heads 4 --hidden 32 --max-seq 32 --seq 16 --batch 8 --micro-batch-size 2
        --train $dir/train.bin --val $dir/val.bin --val-batches 2 --val-every 3 --steps 7 --lr 3e-3 --grad-clip 2
        --log-every 1 --pp 2 --pipeline-schedule zb-h2 --inject-nan-at-step 4 --skip-bad-steps --save-every 3 $extra"
fail() { echo "FAIL: $*"; exit 1; }
$mpirun -np "$np" "$train" $common --checkpoint-dir "$dir/sync" --log "$dir/sync.jsonl" > "$dir/sync.txt" 2>&1 ||
  { cat "$dir/sync.txt"; fail "the synchronous run"; }
$mpirun -np "$np" "$train" $common --checkpoint-dir "$dir/pv" --log "$dir/pv.jsonl" --optimizer-post-validation \
  > "$dir/pv.txt" 2>&1 || { cat "$dir/pv.txt"; fail "the post-validated run"; }
cat "$dir/pv.txt"
strip() { sed -e 's/"ms":[0-9.]*,\{0,1\}//' -e 's/"p2p_bytes":[0-9]*,\{0,1\}//' "$1"; }
diff <(strip "$dir/sync.jsonl") <(strip "$dir/pv.jsonl") || fail "the logs differ"
grep -q '"step":4,.*"skipped":true' "$dir/pv.jsonl" || fail "step 4 is not logged skipped"
test "$(ls "$dir/sync")" = "$(ls "$dir/pv")" || fail "other checkpoints kept: $(ls "$dir/pv")"
for f in "$dir"/sync/step_*/*.bin; do cmp "$f" "$dir/pv/${f#"$dir"/sync/}" || fail "${f#"$dir"/sync/} differs"; done
grep -q "post-validation: step 4 rolled back (not finite: skipped)" "$dir/pv.txt" || fail "no rollback of step 4"
clipped=$(grep -c "rolled back (the clip changes its update" "$dir/pv.txt" || true)
[ "$clipped" -ge 1 ] || fail "no clipped step rolled back"
grep -q "post-validation: $((clipped + 1)) steps rolled back" "$dir/pv.txt" || fail "the rollback count"
echo "post_validation_cli: ok ($clipped clipped steps and step 4 rolled back; logs and checkpoints the synchronous run's)"
