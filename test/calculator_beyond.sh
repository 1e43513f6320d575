#!/usr/bin/env bash
# calculator_beyond.sh MEMORY_CALCULATOR: the calculator's "Beyond the paper" section (tools/beyond_paper.cu) against
# numbers worked out by hand, and its picture.
#   530B-dp8, first stage: 2060874240 parameters per GPU (test_formulas: 3 layers and the embeddings at t 8). ZeRO-1
#   over d = 8: optimizer 12 x 2060874240 / 8 = 3091311360 B = 2.9 GiB; data-parallel bytes per step: a reduce-scatter
#   of the fp32 gradients and an all-gather of the bf16 weights, (4 + 2) x 2060874240 x 7/8 = 10819589760 B = 10.82 GB,
#   where the all-reduce of the fp32 gradients sends 8 x 2060874240 x 7/8 = 14.43 GB.
#   Every model's verdict: a conclusion line naming the cheapest combination that fits.
set -euo pipefail
calc="$1"
out=$("$calc" --beyond-chart "$(mktemp -d)/beyond.png")
section=$(sed -n '/^Beyond the paper/,$p' <<< "$out")
row=$(awk '/^530B-dp8:/ {on = 1} on && $1 == "ZeRO-1" {print; exit}' <<< "$section")
read -r _ weights grads optim activ gather gpu host fits _ recompute time dp rest <<< "$row"
[ "$optim" = 2.9 ] || { echo "FAIL: 530B-dp8 ZeRO-1 optimizer $optim GiB, expected 2.9 (12 x 2060874240 / 8 B)"; exit 1; }
[ "$dp" = 10.82 ] || { echo "FAIL: 530B-dp8 ZeRO-1 DP bytes $dp GB, expected 10.82 (6 x 2060874240 x 7/8)"; exit 1; }
none=$(awk '/^530B-dp8:/ {on = 1} on && $1 == "none" {print; exit}' <<< "$section")
[ "$(awk '{print $14}' <<< "$none")" = 14.43 ] || { echo "FAIL: 530B-dp8's all-reduce: $none"; exit 1; }
n=$(grep -c '^  conclusion: .* is the cheapest that fits' <<< "$section")
[ "$n" = 5 ] || { echo "FAIL: $n conclusions, expected one per run (5)"; exit 1; }
grep -q "the techniques' memory written to" <<< "$out" || { echo "FAIL: no picture"; exit 1; }
grep '^  conclusion' <<< "$section"
echo "ok: 530B-dp8 ZeRO-1 optimizer 2.9 GiB, DP 10.82 GB (all-reduce 14.43 GB); 5 conclusions; the picture written"
