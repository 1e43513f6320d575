#!/usr/bin/env bash
# bubble_hint.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC: pp > 1 with fewer micro-batches than stages prints the
# ideal bubble and the flag that lowers it (train/run.cu's bubble_hint), with what that flag would give; with
# M >= p it prints no such note.
set -euo pipefail
train="$1"; prep="$2"; src="$3"; mpirun="$4 --oversubscribe --bind-to none"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$prep" --out-dir "$dir" "$src/train/options.cu" > /dev/null
T="--device cpu --layers 2 --heads 4 --hidden 32 --max-seq 32 --seq 16 --batch 8 --train $dir/train.bin --val none --steps 1"
$mpirun -np 2 "$train" $T --pp 2 > "$dir/m1.txt"
grep "^note: 1 micro-batch for 2 pipeline stages" "$dir/m1.txt"
grep -q "the ideal bubble is 1.00 (idle over busy time), most of the step; more micro-batches lower it: --num-microbatches 8 (or --micro-batch-size 1) would make it 0.12" "$dir/m1.txt" \
  || { echo "FAIL: the note does not give the bubble and the flag"; exit 1; }
$mpirun -np 2 "$train" $T --pp 2 --num-microbatches 2 > "$dir/m2.txt"
if grep -q "micro-batches lower it" "$dir/m2.txt"; then echo "FAIL: a note at M = p"; exit 1; fi
echo "ok: M = 1 < p = 2 prints the bubble (1.00) and --num-microbatches 8 (0.12); M = p prints no note"
