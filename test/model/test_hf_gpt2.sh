#!/usr/bin/env bash
# test_hf_gpt2.sh TRAIN_GPT SOURCE_DIR MPIRUN CASE: GPT-2 in and out of Hugging Face's format, against
# transformers itself (test/model/hf_gpt2.py, under /usr/bin/python3; exit 77 when transformers is missing).
#   CASE load   a random tiny GPT-2 made by transformers (2 layers, vocabulary 101, n_embd 64, 4 heads, 64
#               positions) loads with --init DIR; the trainer's validation loss on a fixed batch (--steps 0,
#               fp32, no dropout) is transformers' loss on it within 1e-5 at tp 1, tp 2 and pp 2; and the
#               model saved back (--save DIR/) holds every tensor byte-identical to the original (fp32)
#   CASE train  10 steps at tp 2 x pp 2 x dp 2 with the distributed optimizer, --save DIR/: transformers loads
#               it with no missing or unexpected key, and its loss on the validation batch is the trainer's
#               final validation loss within 1e-5
#   CASE generate  the hand-off to the last step: a model the trainer trained (10 steps from transformers'
#               random GPT-2 with 128 positions) and saved (--save DIR/); GPT2LMHeadModel.generate's greedy
#               continuation of a 3-token prompt equals build/generate's (--temperature 0 --print-ids), token for
#               token, for 64 tokens. GENERATE (5th argument): the generate program.
set -euo pipefail
train="$1"; src="$2"; mpirun="$3 --oversubscribe --bind-to none"; case="$4"; generate="${5:-}"
py=/usr/bin/python3  # Debian's python3-torch is installed for the system interpreter, not for any other on PATH
hf="$src/test/model/hf_gpt2.py"
[ -x "$py" ] || { echo "skipped: no /usr/bin/python3"; exit 77; }
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
positions=64; [ "$case" = generate ] && positions=128  # a 3-token prompt and 64 new tokens fit, unslid
rc=0; "$py" "$hf" make "$d/hf" "$d" $positions || rc=$?
[ $rc -eq 0 ] || exit $rc
B=4; T=32
common="--device cpu --dtype fp32 --dropout 0 --train $d/train.bin --val $d/val.bin --batch $B --seq $T --val-batches 1"
# val_loss LOG STEP: the validation loss the trainer logged at STEP
val_loss() { sed -n "s/^{\"step\":$2,\"val_loss\":\([0-9.]*\)}$/\1/p" "$1"; }
# close A B WHAT: |A - B| <= 1e-5
close() { awk -v a="$1" -v b="$2" -v w="$3" 'BEGIN { d = a - b; if (d < 0) d = -d;
  printf "%s: trainer %s, transformers %s, |diff| %.2e\n", w, a, b, d; exit !(d <= 1e-5) }'; }
ref=$("$py" "$hf" loss "$d/hf" "$d/val.bin" $B $T)

if [ "$case" = load ]; then
  for layout in "1 --tp 1" "2 --tp 2" "2 --pp 2 --num-microbatches 2"; do
    np=${layout%% *}; flags=${layout#* }; name=$(echo "$flags" | tr -d ' -')
    $mpirun -np $np "$train" $common $flags --init "$d/hf" --steps 0 --val-every 1 --log "$d/$name.jsonl" \
      --save "$d/out_$name/" > "$d/$name.txt"
    close "$(val_loss "$d/$name.jsonl" 0)" "$ref" "loss at $flags"
    # HF -> mini-megatron -> HF: every tensor byte-identical (fp32)
    "$py" "$hf" same "$d/hf" "$d/out_$name"
  done
  grep -q "saved $d/out_tp1/ (Hugging Face format, fp32" "$d/tp1.txt"
  echo "transformers' GPT-2 loads at tp 1, tp 2 and pp 2 with its loss, and saves back byte-identical"
elif [ "$case" = train ]; then
  $mpirun -np 8 "$train" $common --init "$d/hf" --tp 2 --pp 2 --use-distributed-optimizer --num-microbatches 2 \
    --steps 10 --lr 1e-3 --warmup 0 --val-every 10 --log "$d/train.jsonl" --save "$d/trained/" > "$d/train.txt"
  grep "layout:" "$d/train.txt"
  grep "distributed optimizer: each of 2 data-parallel ranks" "$d/train.txt"
  before=$(val_loss "$d/train.jsonl" 0); after=$(val_loss "$d/train.jsonl" 10)
  close "$before" "$ref" "before training"
  awk -v a="$before" -v b="$after" 'BEGIN { printf "trained: val loss %s -> %s\n", a, b; exit !(b < a - 1e-3) }'
  close "$after" "$("$py" "$hf" loss "$d/trained" "$d/val.bin" $B $T)" "after 10 steps at tp 2 x pp 2 x dp 2, distributed optimizer"
  echo "trained at tp 2 x pp 2 x dp 2 with the distributed optimizer; transformers loads the saved directory, same loss"
elif [ "$case" = generate ]; then
  $mpirun -np 1 "$train" $common --init "$d/hf" --steps 10 --lr 1e-3 --warmup 0 --save "$d/trained/" > "$d/train.txt"
  prompt="3 14 15"
  $mpirun -np 1 "$generate" --init "$d/trained" --device cpu --prompt-ids "$prompt" --n 64 --temperature 0 --print-ids \
    > "$d/ours.txt"
  ours=$(tail -n 1 "$d/ours.txt")
  theirs=$("$py" "$hf" generate "$d/trained" "$prompt" 64)
  echo "build/generate:        $ours"
  echo "transformers generate: $theirs"
  [ "$(wc -w <<< "$ours")" -eq 64 ] || { echo "FAIL: build/generate printed $(wc -w <<< "$ours") ids, not 64"; exit 1; }
  [ "$ours" = "$theirs" ] || { echo "FAIL: the greedy continuations differ"; exit 1; }
  echo "greedy generation: the same 64 tokens from build/generate and GPT2LMHeadModel.generate"
else
  echo "unknown case $case"; exit 2
fi
