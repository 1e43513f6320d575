#!/usr/bin/env bash
# context_parallel_cli.sh TRAIN_GPT PREPARE_DATA SOURCE_DIR MPIEXEC: the trainer end to end at cp 2 against one
# rank with flash attention, from the same initial weights: the validation losses (the whole sequences' mean,
# each CP rank holding two chunks) within 1e-5 relative, the sample (the last position's logits come from the
# CP rank that holds it) token for token, and the run's context-parallel report (blocks equal on both ranks,
# K/V bytes equal to their formula).
set -euo pipefail
train="$1"; prep="$2"; src="$3"; mpirun="$4 --oversubscribe --bind-to none"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$prep" --out-dir "$dir" "$src/README.md" > /dev/null
common="--device cpu --layers 2 --heads 4 --hidden 32 --seq 64 --batch 4 --steps 10 --lr 3e-3 --train $dir/train.bin
        --val $dir/val.bin --val-every 5 --val-batches 2 --log-every 5 --sample 40 --temperature 0.8"
$mpirun -np 1 "$train" $common --attention flash --log "$dir/one.jsonl" > "$dir/one.txt"
$mpirun -np 2 "$train" $common --cp 2 --log "$dir/cp.jsonl" > "$dir/cp.txt"
vals() { grep -o '"val_loss":[0-9.]*' "$1" | cut -d: -f2; }
paste <(vals "$dir/one.jsonl") <(vals "$dir/cp.jsonl") | awk '{ d = $1 - $2; if (d < 0) d = -d;
  if (NF != 2 || d > 1e-5 * $1) { print "FAIL: val loss " $1 " (one rank) vs " $2 " (cp 2)"; bad = 1 } n++ }
  END { if (n < 3) { print "FAIL: " n " validation losses"; bad = 1 } exit bad }'
sample() { sed -n '/^---- sample/,/^----$/p' "$1"; }
test -n "$(sample "$dir/cp.txt")" && diff <(sample "$dir/one.txt") <(sample "$dir/cp.txt") ||
  { echo "FAIL: the cp 2 sample differs from one rank's"; exit 1; }
grep -Eq "rank 0 \(cp rank 0\): ([0-9]+) blocks" "$dir/cp.txt"
b0=$(grep -Eo "rank 0 \(cp rank 0\): [0-9]+ blocks" "$dir/cp.txt" | grep -Eo "[0-9]+ blocks")
b1=$(grep -Eo "rank 1 \(cp rank 1\): [0-9]+ blocks" "$dir/cp.txt" | grep -Eo "[0-9]+ blocks")
test "$b0" = "$b1" || { echo "FAIL: $b0 on rank 0, $b1 on rank 1"; exit 1; }
python3 - "$dir/cp.jsonl" <<'PY'
import json, sys
cp = [json.loads(l)["context_parallel"] for l in open(sys.argv[1]) if "context_parallel" in l]
assert len(cp) == 1, "no context_parallel record in the log"
c = cp[0]
assert c["kv_forward_bytes"] == c["kv_forward_formula"] > 0, c
assert c["kv_backward_bytes"] == c["kv_backward_formula"] > 0, c
print("K/V bytes measured == formula: forward %d, backward %d" % (c["kv_forward_bytes"], c["kv_backward_bytes"]))
PY
echo "cp 2 == one rank: validation losses, the sample, equal blocks ($b0 per rank)"
