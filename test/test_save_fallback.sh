#!/usr/bin/env bash
# test_save_fallback.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC NP [FLAGS...]: a write that fails late loses
# nothing. The directory of --save (then that of --checkpoint-dir) is removed while the run trains: the
# directories were fine at start, so the run starts, and at the end the model goes to the rescue file that
# the message names, with a non-zero exit and no MPI abort report. The rescued file holds the trained model
# (byte-identical to an undisturbed run's --save) and loads again with the same weights; the rescued
# checkpoint's model and training state are byte-identical to an undisturbed run's last checkpoint (so
# --resume from it continues as that one would).
set -euo pipefail
train="$(realpath "$1")"; prep="$(realpath "$2")"; src="$(realpath "$3")"; mpirun="$4 --oversubscribe --bind-to none"; np="$5"; shift 5
flags="$*"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cd "$dir"  # the rescue file goes to the current directory
cat "$src/train/options.cu" > text.txt
"$prep" --out-dir "$dir" text.txt > /dev/null
steps=600
common="--device cpu --layers 2 --heads 4 --hidden 32 --max-seq 32 --seq 16 --batch 4 --train $dir/train.bin --val none
        --lr 1e-3 --log-every 300 $flags"
# run_and_remove OUT DIR FLAGS...: train with FLAGS (and --log OUT.jsonl) in the background, remove DIR once
# step 20 is logged, and wait; must exit non-zero (the late write failed), after its last step, with no MPI
# abort report. OUT.txt holds what it printed.
run_and_remove() {
  local out="$1" gone="$2"; shift 2
  set +e
  $mpirun -np "$np" "$train" $common --steps $steps "$@" --log "$out.jsonl" > "$out.txt" 2>&1 &
  local pid=$! found=0
  for _ in $(seq 600); do
    grep -q '"step":20,' "$out.jsonl" 2>/dev/null && { found=1; break; }
    sleep 0.05
  done
  rm -rf "$gone"
  wait $pid; local rc=$?
  set -e
  grep "error:" "$out.txt" || true
  test $found = 1 || { echo "FAIL: step 20 was never logged"; exit 1; }
  test $rc -ne 0 || { echo "FAIL: a run whose last write failed exited 0"; exit 1; }
  grep -q "^step  *$steps/$steps" "$out.txt" || { echo "FAIL: the run stopped before its last step, not at the write"; exit 1; }
  if grep -qi -e "MPI_ABORT" -e "ORTE_ERROR_LOG" -e "show_help" "$out.txt"; then echo "FAIL: MPI's abort report"; exit 1; fi
}

# ---- --save: the directory vanishes mid-run
$mpirun -np "$np" "$train" $common --steps $steps --save "$dir/ref.bin" > out_ref.txt
run_and_remove a "$dir/out" --save "$dir/out/sub/model.bin"
rescued=$(sed -n 's/.*--save .*model.bin: the trained model could not be written (.*); it was written to \(.*\) instead$/\1/p' a.txt)
test -n "$rescued" && test -f "$rescued" || { echo "FAIL: no rescue file named"; exit 1; }
cmp "$rescued" "$dir/ref.bin" || { echo "FAIL: the rescued model is not the trained model"; exit 1; }
# Loaded again (--init, no step), it is the same weights, bitwise.
$mpirun -np "$np" "$train" $common --steps 0 --init "$rescued" --save "$dir/again.bin" > out_again.txt
cmp "$dir/again.bin" "$rescued" || { echo "FAIL: the rescued file does not load to the same weights"; exit 1; }
echo "--save: directory removed mid-run -> $rescued == the undisturbed run's model; loads to the same weights"

# ---- --checkpoint-dir: its parent vanishes mid-run, before the save at the last step
$mpirun -np "$np" "$train" $common --steps $steps --checkpoint-dir "$dir/ref_ck" --save-every $steps --save "$dir/ref2.bin" > out_ref2.txt
run_and_remove b "$dir/p" --checkpoint-dir "$dir/p/ck" --save-every $steps
rescue_dir=$(sed -n 's/.*checkpoint of step [0-9]* not saved: .*; saved to \(.*\) instead (resume with --resume .*)$/\1/p' b.txt)
test -n "$rescue_dir" && test -f "$rescue_dir/latest" || { echo "FAIL: no rescue checkpoint named"; exit 1; }
cmp "$rescue_dir/$(cat "$rescue_dir/latest")/model.bin" "$dir/ref_ck/$(printf step_%08d $steps)/model.bin" || { echo "FAIL: the rescued checkpoint differs"; exit 1; }
cmp "$rescue_dir/$(cat "$rescue_dir/latest")/state.bin" "$dir/ref_ck/$(printf step_%08d $steps)/state.bin" || { echo "FAIL: the rescued training state differs"; exit 1; }
echo "--checkpoint-dir: parent removed mid-run -> $rescue_dir holds the same model and training state as the undisturbed run's"
