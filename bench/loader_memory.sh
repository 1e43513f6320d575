#!/usr/bin/env bash
# loader_memory.sh BUILD_DIR [BIG_TOKENS]: the data loader reads shards batch by batch, so a rank's memory
# does not grow with the dataset. Trains the same small model for 20 steps on a 1 M-token shard and on a
# BIG_TOKENS-token one (default 200 M: a 400 MB file in a temporary folder), each under /usr/bin/time -v,
# and prints the peak resident set sizes side by side. A benchmark, not a test: it
# writes 400 MB and its numbers depend on the machine. TRAIN_GPT=FILE measures another build of the trainer.
set -euo pipefail
build="${1:-build}"; big="${2:-200000000}"
command -v /usr/bin/time >/dev/null || { echo "loader_memory: /usr/bin/time not found (apt-get install time)"; exit 1; }
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
shard() {  # shard FILE N: N random byte-level tokens (ids 0..255), written 8 M tokens at a time
  python3 - "$1" "$2" <<'PY'
import os, struct, sys
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    left = n
    while left:
        k = min(left, 8 << 20)
        chunk = bytearray(os.urandom(2 * k))
        chunk[1::2] = bytes(k)  # little-endian high bytes 0: ids below the byte-level vocabulary
        f.write(chunk)
        left -= k
PY
}
shard "$dir/small.bin" 1000000
shard "$dir/big.bin" "$big"
run() {
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 /usr/bin/time -v "${TRAIN_GPT:-$build/train_gpt}" --device cpu --layers 2 --heads 4 \
    --hidden 64 --seq 64 --batch 8 --steps 20 --log-every 20 --train "$1" --val none 2> "$dir/time.txt" > "$dir/out.txt"
  grep "Maximum resident set size" "$dir/time.txt" | grep -o '[0-9]*$'
}
a=$(run "$dir/small.bin"); b=$(run "$dir/big.bin")
printf 'peak resident memory, 20 steps: 1M-token shard %.1f MB | %dM-token shard (%d MB file) %.1f MB | difference %.1f MB\n' \
  "$(echo "$a/1024" | bc -l)" "$((big / 1000000))" "$((big * 2 / 1000000))" "$(echo "$b/1024" | bc -l)" "$(echo "($b-$a)/1024" | bc -l)"
