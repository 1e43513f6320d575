#!/usr/bin/env bash
# beyond_paper_measured.sh BUILD_DIR [MPIRUN]: the measured rows of docs/paper.md "Beyond the paper" (make
# beyond). One row per technique at this machine's scale: the trainer on CPU ranks under mpirun, a 4-layer model
# (h 64, 4 heads, s 64, bf16), one step with --memory-report; every figure is what the run measured (the
# activation allocator, the model states' account, ZeRO's buffers and the communicators' counters, the host pool),
# next to what the formulas the calculator uses say (recompute/memory_formulas.h, recompute/model_state_memory.h,
# recompute/memory_techniques.h). Bytes per rank of the first pipeline stage (rank 0).
set -euo pipefail
build=${1:?usage: beyond_paper_measured.sh BUILD_DIR [MPIRUN]}
mpirun=${2:-mpirun --oversubscribe --bind-to none}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
src="$(cd "$(dirname "$0")/.." && pwd)"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
cat "$src/README.md" "$src/docs/design.md" > "$dir/text.txt"  # any text: one step's bytes do not depend on it
"$build/prepare_data" --out-dir "$dir" "$dir/text.txt" > /dev/null
model="--device cpu --dtype bf16 --layers 4 --hidden 64 --heads 4 --seq 64 --batch 8 --steps 1 --train $dir/train.bin --val none
       --memory-report"
# technique | ranks | layout flags
rows=(
  "none (TP)|2|--tp 2"
  "full recompute|2|--tp 2 --recompute full"
  "SP + selective|2|--tp 2 --sp --recompute selective"
  "ZeRO-1|2|--zero 1"
  "ZeRO-2|2|--zero 2"
  "ZeRO-3|2|--zero 3"
  "offload k=3|1|--cpu-offloading --cpu-offloading-num-layers 3"
  "offload 1st|2|--pp 2 --micro-batch-size 1 --offload-beyond-in-flight last-stage"
)
printf "%-16s %-72s %-16s %-16s %-16s %-16s %-16s %-16s\n" technique layout "activations" "model states" "ZeRO buffers" \
       "DP bytes/step" "host peak" "host link/step"
printf "%-16s %-72s %-16s %-16s %-16s %-16s %-16s %-16s\n" "" "" "measured=formula" "measured=formula" "measured=formula" \
       "measured=formula" "measured=formula" "measured=formula"
for row in "${rows[@]}"; do
  IFS='|' read -r name np flags <<< "$row"
  # shellcheck disable=SC2086
  out=$($mpirun -np "$np" "$build/train_gpt" $model $flags 2>&1) || { echo "FAIL: $name: the run failed"; echo "$out" | tail -5; exit 1; }
  # Rank 0's report (the first stage's at pp 2: the text up to the next stage's header).
  first=$(awk '/^---- pipeline stage 1/ {exit} {print}' <<< "$out")
  pick() {  # the measured and formula columns of the first line that starts with $1 in a section starting with $2
    awk -v key="$1" -v sec="$2" 'index($0, sec) == 1 {on = 1} on && index($0, "  " key) == 1 {
        n = split(substr($0, length(key) + 3), f, " "); print f[1] "=" f[2]; exit}' <<< "$first"
  }
  check() { [ -z "$1" ] && { echo "-"; return; }; [ "${1%=*}" = "${1#*=}" ] && echo "$1" || { echo "FAIL: $name $1" >&2; exit 1; }; }
  acts=$(check "$(pick "stage layers" "Activation memory")")
  states=$(check "$(pick "total" "Model states on this rank")")
  zero_buf=""
  g=$(pick "gathered weights, peak" "ZeRO-"); b=$(pick "gradient buckets, peak" "ZeRO-")
  if [ -n "$b" ]; then zero_buf=$(check "$( [ -n "$g" ] && [ "$name" = ZeRO-3 ] && echo "$((${g%=*} + ${b%=*}))=$((${g#*=} + ${b#*=}))" || echo "$b")"); fi
  dp=$(check "$(pick "data-parallel bytes, total" "ZeRO-")")
  host=$(check "$(pick "host memory, peak" "Activation offloading")")
  link=$(check "$(pick "copied to the host" "Activation offloading")")
  printf "%-16s %-72s %-16s %-16s %-16s %-16s %-16s %-16s\n" "$name" "np $np $flags" "$acts" "$states" "${zero_buf:--}" "${dp:--}" \
         "${host:--}" "${link:--}"
done
echo "(each cell: bytes measured = bytes by the formula; a mismatch stops the script. ZeRO buffers: ZeRO-2 its gradient"
echo " buckets' peak, ZeRO-3 the gathered weights' and the buckets' peaks; host link: bytes each way)"
