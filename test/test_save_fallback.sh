#!/usr/bin/env bash
# test_save_fallback.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC NP [FLAGS...]: a write that fails late loses
# nothing. The directory of --save (then that of --checkpoint-dir) is removed while the run trains: the
# directories were fine at start, so the run starts, and at the end the model goes to the rescue file that
# the message names, with a non-zero exit and no MPI abort report. The rescued file holds the trained model
# (byte-identical to an undisturbed run's --save) and loads again with the same weights; the rescued
# checkpoint resumes to the end of the undisturbed run, bitwise.
set -euo pipefail
train="$(realpath "$1")"; prep="$(realpath "$2")"; src="$(realpath "$3")"; mpirun="$4 --oversubscribe --bind-to none"; np="$5"; shift 5
flags="$*"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cd "$dir"  # the rescue file goes to the current directory
cat "$src/train_options.cu" > text.txt
"$prep" --out-dir "$dir" text.txt > /dev/null
steps=600
common="--device cpu --layers 2 --heads 4 --hidden 32 --max-seq 32 --seq 16 --batch 4 --train $dir/train.bin --val none
        --lr 1e-3 --log-every 300 $flags"
# wait_for_step LOG N: until the run has logged step N (the directories are then removed mid-run).
wait_for_step() {
  for _ in $(seq 600); do
    grep -q "\"step\":$2," "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "FAIL: step $2 never reached"; exit 1
}

# ---- --save: the directory vanishes mid-run
$mpirun -np "$np" "$train" $common --steps $steps --save "$dir/ref.bin" > out_ref.txt
set +e
$mpirun -np "$np" "$train" $common --steps $steps --save "$dir/out/sub/model.bin" --log "$dir/a.jsonl" > out_a.txt 2>&1 &
pid=$!
wait_for_step "$dir/a.jsonl" 20
rm -rf "$dir/out"
wait $pid; rc=$?
set -e
cat out_a.txt | tail -4
test $rc -ne 0 || { echo "FAIL: a run whose --save failed exited 0"; exit 1; }
grep -q "^step  *$steps/$steps" out_a.txt || { echo "FAIL: the run stopped before its last step, not at the save"; exit 1; }
rescued=$(sed -n 's/.*--save .*model.bin: the trained model could not be written (.*); it was written to \(.*\) instead$/\1/p' out_a.txt)
test -n "$rescued" && test -f "$rescued" || { echo "FAIL: no rescue file named"; exit 1; }
if grep -qi -e "MPI_ABORT" -e "ORTE_ERROR_LOG" -e "show_help" out_a.txt; then echo "FAIL: MPI's abort report"; exit 1; fi
cmp "$rescued" "$dir/ref.bin" || { echo "FAIL: the rescued model is not the trained model"; exit 1; }
# Loaded again (--init, no step), it is the same weights, bitwise.
$mpirun -np "$np" "$train" $common --steps 0 --init "$rescued" --save "$dir/again.bin" > out_again.txt
cmp "$dir/again.bin" "$rescued" || { echo "FAIL: the rescued file does not load to the same weights"; exit 1; }
echo "--save: directory removed mid-run -> $rescued == the undisturbed run's model; loads to the same weights"

# ---- --checkpoint-dir: its parent vanishes mid-run, before the save at the last step
$mpirun -np "$np" "$train" $common --steps $steps --checkpoint-dir "$dir/ref_ck" --save-every $steps --save "$dir/ref2.bin" > out_ref2.txt
set +e
$mpirun -np "$np" "$train" $common --steps $steps --checkpoint-dir "$dir/p/ck" --save-every $steps --log "$dir/b.jsonl" > out_b.txt 2>&1 &
pid=$!
wait_for_step "$dir/b.jsonl" 20
rm -rf "$dir/p"
wait $pid; rc=$?
set -e
cat out_b.txt | tail -3
test $rc -ne 0 || { echo "FAIL: a run whose checkpoint failed exited 0"; exit 1; }
rescue_dir=$(sed -n 's/.*checkpoint of step [0-9]* not saved: .*; saved to \(.*\) instead (resume with --resume .*)$/\1/p' out_b.txt)
test -n "$rescue_dir" && test -f "$rescue_dir/latest" || { echo "FAIL: no rescue checkpoint named"; exit 1; }
cmp "$rescue_dir/$(cat "$rescue_dir/latest")/model.bin" "$dir/ref_ck/$(printf step_%08d $steps)/model.bin" || { echo "FAIL: the rescued checkpoint differs"; exit 1; }
cmp "$rescue_dir/$(cat "$rescue_dir/latest")/state.bin" "$dir/ref_ck/$(printf step_%08d $steps)/state.bin" || { echo "FAIL: the rescued training state differs"; exit 1; }
echo "--checkpoint-dir: parent removed mid-run -> $rescue_dir holds the same model and training state as the undisturbed run's"
