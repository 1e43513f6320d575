#!/usr/bin/env bash
# hellaswag_cli.sh TEST_HELLASWAG TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC: the trainer's --hellaswag end to
# end at tp 2 with SP on 2 ranks: accuracy printed before step 1, every --eval-every steps and at the end,
# and logged as hellaswag_acc.
set -euo pipefail
evalgen="$1"; train="$2"; prep="$3"; src="$4"; mpirun="$5 --oversubscribe --bind-to none"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$prep" --out-dir "$dir" "$src/README.md" > /dev/null
$mpirun -np 1 "$evalgen" --write "$dir/eval.bin" 257 64 > /dev/null
$mpirun -np 2 "$train" --device cpu --tp 2 --sp --steps 4 --layers 2 --heads 4 --hidden 32 --seq 64 --batch 8 \
  --train "$dir/train.bin" --val none --hellaswag "$dir/eval.bin" --eval-every 2 --log "$dir/log.jsonl" > "$dir/out.txt"
for s in 0 2 4; do grep -Eq "step +$s \| hellaswag [0-9]+/10 = 0\.[0-9]{4}" "$dir/out.txt" || { echo "FAIL: no accuracy at step $s"; cat "$dir/out.txt"; exit 1; }; done
test "$(grep -c '"hellaswag_acc"' "$dir/log.jsonl")" = 3 || { echo "FAIL: hellaswag_acc not logged 3 times"; exit 1; }
grep -E "hellaswag" "$dir/out.txt"
# The same evaluation through a pipeline of 2 stages: from the same initial weights, the same accuracy.
$mpirun -np 2 "$train" --device cpu --pp 2 --steps 1 --eval-every 1 --layers 2 --heads 4 --hidden 32 --seq 64 --batch 8 \
  --train "$dir/train.bin" --val none --hellaswag "$dir/eval.bin" > "$dir/out_pp.txt"
a=$(grep -Eo "step +0 \| hellaswag [0-9/]+ = [0-9.]+" "$dir/out.txt"); b=$(grep -Eo "step +0 \| hellaswag [0-9/]+ = [0-9.]+" "$dir/out_pp.txt"); b="${b#*| }"
test "${a#*| }" = "$b" || { echo "FAIL: at pp 2 '$b', at tp 2 + SP '${a#*| }'"; cat "$dir/out_pp.txt"; exit 1; }
echo "pp 2: $b"
# Context parallelism: each CP rank scores its zigzag chunks and the token losses are gathered over the group;
# from the same initial weights, the accuracy of one rank with flash attention.
$mpirun -np 1 "$train" --device cpu --attention flash --steps 1 --eval-every 1 --layers 2 --heads 4 --hidden 32 --seq 64 \
  --batch 8 --train "$dir/train.bin" --val none --hellaswag "$dir/eval.bin" > "$dir/out_flash.txt"
$mpirun -np 2 "$train" --device cpu --cp 2 --steps 1 --eval-every 1 --layers 2 --heads 4 --hidden 32 --seq 64 \
  --batch 8 --train "$dir/train.bin" --val none --hellaswag "$dir/eval.bin" > "$dir/out_cp.txt"
a=$(grep -Eo "step +0 \| hellaswag [0-9/]+ = [0-9.]+" "$dir/out_flash.txt"); b=$(grep -Eo "step +0 \| hellaswag [0-9/]+ = [0-9.]+" "$dir/out_cp.txt")
test -n "$a" && test "$a" = "$b" || { echo "FAIL: at cp 2 '$b', on one rank with flash '$a'"; cat "$dir/out_cp.txt"; exit 1; }
echo "cp 2: ${b#*| }"
