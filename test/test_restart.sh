#!/usr/bin/env bash
# test_restart.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC NP [FLAGS...]: a restartable job script.
#   The same command line (--checkpoint-dir DIR --resume auto, --exit-interval 4) is run three times, as a
#   requeued job would be: the first run starts from scratch (nothing in DIR yet) and stops at step 4, the
#   second resumes and stops at 8, the third resumes and finishes at 12. Its losses must be those of one
#   uninterrupted 12-step run, bitwise, and the final weights byte-identical. Then the same with --init FILE:
#   --resume DIR --init FILE starts from FILE when DIR is empty.
set -euo pipefail
train="$1"; prep="$2"; src="$3"; mpirun="$4 --oversubscribe --bind-to none"; np="$5"; shift 5
flags="$*"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cat "$src/train/options.cu" "$src/data/dataloader.h" > "$dir/text.txt"
"$prep" --out-dir "$dir" "$dir/text.txt" > /dev/null
common="--device cpu --layers 2 --heads 4 --hidden 32 --max-seq 32 --seq 16 --batch 4 --train $dir/train.bin --val $dir/val.bin
        --val-batches 1 --val-every 6 --steps 12 --warmup 2 --lr 3e-3 --dropout 0.1 --log-every 4 $flags"
losses() { grep -o '"step":[0-9]*,"train_loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*' "$1"; }

$mpirun -np "$np" "$train" $common --log "$dir/a.jsonl" --save "$dir/a.bin" > "$dir/out_a.txt"
job="$common --checkpoint-dir $dir/ck --resume auto --exit-interval 4 --log $dir/b.jsonl --save $dir/b.bin"
for run in 1 2 3; do $mpirun -np "$np" "$train" $job > "$dir/out_b$run.txt"; done
grep -q "restart: no checkpoint in $dir/ck yet: starting from scratch" "$dir/out_b1.txt"
grep -q "exit: --exit-interval 4 reached at step 4" "$dir/out_b1.txt"
grep -q "restart: $dir/ck/latest exists: resuming from it" "$dir/out_b2.txt"
grep -q "resumed from $dir/ck/step_00000004: step 4 done" "$dir/out_b2.txt"
grep -q "resumed from $dir/ck/step_00000008: step 8 done" "$dir/out_b3.txt"
diff <(losses "$dir/a.jsonl") <(losses "$dir/b.jsonl") || { echo "FAIL: the restarted job's losses differ"; exit 1; }
test "$(losses "$dir/b.jsonl" | wc -l)" = 12
cmp "$dir/a.bin" "$dir/b.bin" || { echo "FAIL: final parameters differ"; exit 1; }
echo "one 12-step run == the same command run 3 times (--resume auto, --exit-interval 4): 12 losses identical, weights identical"

# --resume DIR --init FILE: FILE is the first start, DIR/latest every later one.
init="$dir/ck/step_00000012/model.bin"
job2="$common --steps 6 --resume $dir/ck2 --init $init --exit-interval 3 --log $dir/c.jsonl"
$mpirun -np "$np" "$train" $job2 > "$dir/out_c1.txt"
grep -q "restart: no checkpoint in $dir/ck2 yet: starting from --init $init" "$dir/out_c1.txt"
$mpirun -np "$np" "$train" $job2 > "$dir/out_c2.txt"
grep -q "restart: $dir/ck2/latest exists: resuming from it (--init not used)" "$dir/out_c2.txt"
$mpirun -np "$np" "$train" $common --steps 6 --init "$init" --log "$dir/d.jsonl" > "$dir/out_d.txt"
diff <(losses "$dir/c.jsonl") <(losses "$dir/d.jsonl") || { echo "FAIL: --resume DIR --init FILE differs from --init FILE"; exit 1; }
echo "--resume DIR --init FILE, run twice (--exit-interval 3) == --init FILE straight: 6 losses identical"
