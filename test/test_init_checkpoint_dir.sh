#!/usr/bin/env bash
# test_init_checkpoint_dir.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC GENERATE: a checkpoint directory is
# accepted wherever a model file is read (model/model_file.h), and the program says which step it read.
#   A run saves DIR/step_00000004 (--checkpoint-dir DIR, 4 steps). Then each of DIR, DIR/ (a trailing slash),
#   DIR/latest and DIR/step_00000004, given as
#     train_gpt --init X --steps 0 --save FILE     (the llm.c file written must be DIR/step_00000004/model.bin),
#   says "step 4"; generate --init DIR samples from it and says so too; the Hugging Face export
#   (train_gpt --init DIR --steps 0 --save OUT/) writes model.safetensors + config.json, which --init reads back
#   to the same llm.c file. Negative controls: a pointer that names a missing step, and a broken pointer, are
#   refused with exit 1 naming the pointer.
set -euo pipefail
train="$1"; prep="$2"; src="$3"; mpirun="$4 --oversubscribe --bind-to none"; generate="$5"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cat "$src/train/options.cu" > "$dir/text.txt"
"$prep" --out-dir "$dir" "$dir/text.txt" > /dev/null
T="--device cpu --layers 2 --heads 4 --hidden 32 --max-seq 32 --seq 16 --batch 4 --train $dir/train.bin --val none"
$mpirun -np 1 "$train" $T --steps 4 --checkpoint-dir "$dir/ck" > "$dir/out_ck.txt"
model="$dir/ck/step_00000004/model.bin"
test -f "$model"
n=0
for x in "$dir/ck" "$dir/ck/" "$dir/ck/latest" "$dir/ck/step_00000004"; do
  n=$((n + 1))
  $mpirun -np 1 "$train" $T --init "$x" --steps 0 --save "$dir/out_$n.bin" > "$dir/log_$n.txt"
  grep -q "^--init $x: the weights of $model, step 4" "$dir/log_$n.txt" || { echo "FAIL: --init $x did not say step 4"; cat "$dir/log_$n.txt"; exit 1; }
  cmp "$model" "$dir/out_$n.bin" || { echo "FAIL: --init $x did not read $model"; exit 1; }
done
echo "train_gpt --init: DIR, DIR/, DIR/latest and DIR/step_00000004 read $model (step 4), saved back byte-identical"
# At tp 2 too (every rank reads it).
$mpirun -np 2 "$train" $T --tp 2 --init "$dir/ck" --steps 0 --save "$dir/out_tp2.bin" > /dev/null
cmp "$model" "$dir/out_tp2.bin"
# generate --init DIR: the step on stderr, the sample on stdout.
$mpirun -np 1 "$generate" --device cpu --init "$dir/ck" --prompt-ids "1 2 3" --n 5 --temperature 0 --print-ids \
  > "$dir/gen.txt" 2> "$dir/gen_err.txt"
grep -q "generate: --init $dir/ck: $model, step 4" "$dir/gen_err.txt" || { echo "FAIL: generate did not say the step"; cat "$dir/gen_err.txt"; exit 1; }
test "$(tail -1 "$dir/gen.txt" | wc -w)" = 5
echo "generate --init DIR: $(cat "$dir/gen_err.txt"); 5 ids: $(tail -1 "$dir/gen.txt")"
# The Hugging Face export from a checkpoint directory, read back.
$mpirun -np 1 "$train" $T --init "$dir/ck" --steps 0 --save "$dir/hf/" > /dev/null
test -f "$dir/hf/model.safetensors" && test -f "$dir/hf/config.json"
$mpirun -np 1 "$train" $T --init "$dir/hf" --steps 0 --save "$dir/from_hf.bin" > /dev/null
cmp "$model" "$dir/from_hf.bin"
echo "HF export: --init DIR --save OUT/ wrote model.safetensors + config.json; read back, the same weights"
# Negative controls: the pointer names a step that is not there; the pointer is not a pointer.
mkdir -p "$dir/bad1" "$dir/bad2"
echo step_00000009 > "$dir/bad1/latest"
bash "$src/test/expect_error.sh" --exit 1 "--init .*bad1: .*bad1/latest names step_00000009, but .*bad1/step_00000009/model.bin is not there" \
  $mpirun -np 2 "$train" $T --init "$dir/bad1"
echo "not a pointer" > "$dir/bad2/latest"
bash "$src/test/expect_error.sh" --exit 1 "checkpoint pointer .*bad2/latest should hold one line 'step_'" \
  $mpirun -np 2 "$train" $T --init "$dir/bad2/latest"
