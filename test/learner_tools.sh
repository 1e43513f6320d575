#!/usr/bin/env bash
# learner_tools.sh BUILD_DIR SOURCE_DIR MPIRUN: a tiny run with --log, --memory-report, --save and --sample;
# then the pictures (plot_log) and sampling from the saved checkpoint (generate) on 2 ranks; and both tools
# refusing bad input before any work (an output directory under a file, a negative token count).
set -euo pipefail
b="$1"; src="$2"; mpirun="$3 --oversubscribe --bind-to none"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cat "$src/train/options.cu" "$src/README.md" > "$dir/text.txt"
"$b/prepare_data" --out-dir "$dir" "$dir/text.txt" > /dev/null
$mpirun -np 2 "$b/train_gpt" --device cpu --tp 2 --sp --recompute selective --layers 2 --heads 4 --hidden 32 --seq 32 \
  --batch 4 --steps 6 --val-every 3 --memory-report --train "$dir/train.bin" --val "$dir/val.bin" \
  --log "$dir/log.jsonl" --save "$dir/m.bin" --sample 20 > "$dir/out.txt"
grep -q "sample (20 tokens" "$dir/out.txt"
grep -q '"memory_report"' "$dir/log.jsonl"
"$b/plot_log" "$dir/log.jsonl" --out-dir "$dir/pictures"
python3 - "$dir" <<'PY'
import sys
for name in ("loss.png", "memory.png"):
    data = open(f"{sys.argv[1]}/pictures/{name}", "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000, name
print("PNG files ok")
PY
$mpirun -np 2 "$b/generate" --init "$dir/m.bin" --device cpu --n 30 --prompt "ab" > "$dir/gen.txt"
test "$(head -c 2 "$dir/gen.txt")" = "ab"
bash "$src/test/expect_error.sh" "out-dir .*m.bin/p: .*m.bin exists and is not a directory" "$b/plot_log" "$dir/log.jsonl" --out-dir "$dir/m.bin/p"
bash "$src/test/expect_error.sh" "--n -3: expected an integer in \[1, " $mpirun -np 2 "$b/generate" --init "$dir/m.bin" --device cpu --n -3
echo "learner tools ok"
