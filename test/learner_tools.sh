#!/usr/bin/env bash
# learner_tools.sh BUILD_DIR SOURCE_DIR MPIRUN: a tiny run with --log, --memory-report, --save and --sample;
# then the pictures (plot_log) and sampling from the saved checkpoint (generate) on 2 ranks; and both tools
# refusing bad input before any work (an output directory under a file, a negative token count). And
# --temperature 0, greedy decoding: generate prints the same text whatever the seed (where temperature 1
# differs), and the trainer's --sample of the same model, prompt and window prints that text too.
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
gen() { $mpirun -np 2 "$b/generate" --init "$dir/m.bin" --device cpu --n 24 --window 32 --prompt "ab" "$@"; }
gen --temperature 0 --seed 1 > "$dir/greedy1.txt"
gen --temperature 0 --seed 2 > "$dir/greedy2.txt"
gen --temperature 1 --seed 1 > "$dir/warm1.txt"
gen --temperature 1 --seed 2 > "$dir/warm2.txt"
cmp -s "$dir/greedy1.txt" "$dir/greedy2.txt" || { echo "FAIL: greedy decoding depends on the seed"; exit 1; }
! cmp -s "$dir/warm1.txt" "$dir/warm2.txt" || { echo "FAIL: temperature 1 gave the same text for two seeds"; exit 1; }
$mpirun -np 2 "$b/train_gpt" --device cpu --tp 2 --init "$dir/m.bin" --steps 0 --train "$dir/train.bin" --val none --seq 32 \
  --sample 24 --temperature 0 --prompt "ab" > "$dir/train_greedy.txt"
python3 - "$dir" <<'PY'
import sys
d = sys.argv[1]
out = open(f"{d}/train_greedy.txt", encoding="latin-1").read()
head = "---- sample (24 tokens, temperature 0.00, top-k 0) ----\n"
assert head in out, out[-400:]
text = out.split(head, 1)[1].rsplit("\n----\n", 1)[0]
gen = open(f"{d}/greedy1.txt", encoding="latin-1").read()
assert gen.rstrip("\n") == text.rstrip("\n"), (gen, text)
print("greedy decoding ok: the trainer's sample and generate agree, whatever the seed")
PY
bash "$src/test/expect_error.sh" "out-dir .*m.bin/p: .*m.bin exists and is not a directory" "$b/plot_log" "$dir/log.jsonl" --out-dir "$dir/m.bin/p"
bash "$src/test/expect_error.sh" "--n -3: expected an integer in \[1, " $mpirun -np 2 "$b/generate" --init "$dir/m.bin" --device cpu --n -3
# Token ids in and out: --prompt-ids "97 98" is the prompt "ab" (byte-level), so the greedy ids --print-ids ends
# with are the bytes of the greedy text above; an id past the vocabulary is refused before any work.
gen --temperature 0 --prompt-ids "97 98" --print-ids > "$dir/ids.txt"
python3 - "$dir" <<'PY'
import sys
d = sys.argv[1]
ids = [int(x) for x in open(f"{d}/ids.txt", encoding="latin-1").read().rstrip("\n").split("\n")[-1].split()]
text = open(f"{d}/greedy1.txt", encoding="latin-1").read().rstrip("\n")
assert len(ids) == 24 and bytes(ids).decode("latin-1") == text[2:], (ids, text)
print("--prompt-ids / --print-ids ok: the ids of the greedy text")
PY
bash "$src/test/expect_error.sh" "--prompt-ids \"3 999\": expected token ids in \[0, 257\)" $mpirun -np 2 "$b/generate" --init "$dir/m.bin" --device cpu --prompt-ids "3 999"
echo "learner tools ok"
