#!/usr/bin/env bash
# op_times.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC: --op-times (train/op_times.h) prints rank 0's ops once,
# after the run, over the steps from the third on; counts each op's calls per step as the model makes them
# (a linear forward per linear layer and the LM head); its ops fit inside the steps they were timed in; and
# timing changes nothing: the losses are those of the same run without it. A run of one step times that step.
set -euo pipefail
train="$1"; prep="$2"; src="$3"; mpirun="$4 --oversubscribe --bind-to none"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cat "$src/train/op_times.cu" "$src/train_gpt.cu" > "$dir/text.txt"
"$prep" --out-dir "$dir" "$dir/text.txt" > /dev/null
common="--device cpu --layers 2 --heads 4 --hidden 32 --max-seq 32 --seq 16 --batch 4 --train $dir/train.bin
        --val none --lr 3e-3 --log-every 1 --tp 2 --sp"
fail() { echo "FAIL: $*"; exit 1; }
$mpirun -np 2 "$train" $common --steps 6 --op-times > "$dir/t.txt"
$mpirun -np 2 "$train" $common --steps 6 > "$dir/n.txt"
cat "$dir/t.txt"
test "$(grep -c '^op times' "$dir/t.txt")" = 1 || fail "the table is not printed exactly once"
grep -q '^op times (--op-times, rank 0): steps 3-6, ' "$dir/t.txt" || fail "the timed steps are not 3-6"
# calls per step: 2 layers x 4 linears + the LM head; one AdamW update per parameter tensor is not fixed, so
# the linears and the layer norms (2 a layer + the final one) are what is counted.
row() { grep -E "^  $1 " "$dir/t.txt" || fail "no row for $1"; }
test "$(row linear_forward | awk '{print $2}')" = 9.0 || fail "linear_forward calls per step: $(row linear_forward)"
test "$(row layernorm_forward | awk '{print $2}')" = 5.0 || fail "layernorm_forward calls per step: $(row layernorm_forward)"
row attention_probs_forward > /dev/null
grep -qE '^    qk_gemm ' "$dir/t.txt" || fail "attention's parts are not indented under it"
share=$(grep -E '^  all ops ' "$dir/t.txt" | awk '{print $4}' | tr -d %)
python3 -c "import sys; s = float(sys.argv[1]); sys.exit(0 if 0 < s <= 100.0 else 1)" "$share" ||
  fail "the ops take $share% of the steps they ran in"
losses() { grep '^step ' "$1" | sed 's/.*| loss \([0-9.]*\) |.*/\1/'; }
test "$(losses "$dir/t.txt")" = "$(losses "$dir/n.txt")" || fail "the losses change with --op-times"
$mpirun -np 2 "$train" $common --steps 1 --op-times > "$dir/one.txt"
grep -q '^op times (--op-times, rank 0): steps 1-1, ' "$dir/one.txt" || fail "a 1-step run does not time its step"
echo "op_times: ok"
