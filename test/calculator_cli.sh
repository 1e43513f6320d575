#!/usr/bin/env bash
# calculator_cli.sh CALCULATOR: numbers the paper-scale calculator (tools/memory_calculator.cu) must print.
# Each expected value is worked out by hand in the comment above it, not copied from a run.
set -uo pipefail
calc="$1"
failures=0
# expect DESCRIPTION EXTENDED-REGEX -- ARGS...: the output of `calc ARGS` must contain a line matching.
expect() {
    local what="$1" pattern="$2"; shift 3
    local out
    if ! out=$("$calc" "$@" 2>&1); then
        echo "FAIL $what: memory_calculator $* exited non-zero"; echo "$out" | tail -3; failures=$((failures + 1)); return
    fi
    if echo "$out" | grep -Eq -- "$pattern"; then echo "ok   $what"
    else echo "FAIL $what: no line matches /$pattern/ in the output of memory_calculator $*"; failures=$((failures + 1)); fi
}
# expect_refusal DESCRIPTION REGEX -- ARGS...: exits non-zero and says why.
expect_refusal() {
    local what="$1" pattern="$2"; shift 3
    local out
    if out=$("$calc" "$@" 2>&1); then echo "FAIL $what: memory_calculator $* succeeded"; failures=$((failures + 1)); return; fi
    if echo "$out" | grep -Eq -- "$pattern"; then echo "ok   $what"
    else echo "FAIL $what: the message does not match /$pattern/: $out"; failures=$((failures + 1)); fi
}

# 175B, interleaved p = 8, m = 3, M = 64: rank 0 holds 2(p-1) + (m-1)p + 1 = 14 + 16 + 1 = 31 (micro-batch, chunk)
# pairs of L/(pm) = 96/24 = 4 layers = 124 layers' worth = 96(1 + 7/24); warm-up 2(p-1) + (m-1)p = 30.
expect "175B interleaved in flight" "30 warm-up forwards; peak 31 \(micro-batch, chunk\) pairs in flight x 4 layers each = 124 layers' worth" -- --model 175B
expect "175B paper statement" "L\(1 \+ \(p-1\)/\(pm\)\) = 124\)" -- --model 175B
# 530B, p = 35, m = 3: 68 + 70 + 1 = 139 pairs of 105/105 = 1 layer = 105 + 34.
expect "530B interleaved in flight" "peak 139 \(micro-batch, chunk\) pairs in flight x 1 layers each = 139 layers' worth" -- --model 530B
# 1T, 1F1B p = 64, M = 512: p = 64 micro-batches of 128/64 = 2 layers = 128 = L; warm-up p - 1 = 63.
expect "1T 1F1B in flight" "63 warm-up forwards; peak 64 \(micro-batch, chunk\) pairs in flight x 2 layers each = 128 layers' worth" -- --model 1T
# 1T with M = 32 < p: only 32 micro-batches ever enter: 32 x 2 = 64 layers.
expect "1T with M < p" "peak 32 \(micro-batch, chunk\) pairs in flight x 2 layers each = 64 layers' worth" -- --model 1T --global-batch 32
# 175B under AFAB: all M = 64 micro-batches of 96/8 = 12 layers = 768 = M L/p.
expect "175B AFAB" "peak 64 \(micro-batch, chunk\) pairs in flight x 12 layers each = 768 layers' worth" -- --model 175B --schedule afab
# 530B's first stage per GPU: 3 layers x (12h^2/8 + 7h/8 + 6h) = 3 x 629286400 = 1.888e9; word embedding
# 51200/8 x 20480 = 0.131e9; positions 2048 x 20480 = 0.042e9; total 2.061e9.
expect "530B first-stage parameters" "parameters on this GPU: 2\.061B = 3 layers 1\.888B \+ word embedding 0\.131B \+ positions 0\.042B$" -- --model 530B
# 22B (p = 1): all 48 layers, the word and position embeddings and the final LN on one stage.
expect "22B parameters" "parameters on this GPU: 2\.772B = 48 layers 2\.720B \+ word embedding 0\.039B \+ positions 0\.013B \+ final LN" -- --model 22B
# 530B at dp 8 (2240 GPUs): 6 + 12/8 = 7.5 bytes per parameter, printed as 7.5 (not rounded to 8).
expect "530B-dp8 bytes per parameter" "bytes per parameter: 18; with the distributed optimizer over dp = 8: 7\.5$" -- --model 530B-dp8
expect "530B-dp8 in the default run" "^  530B-dp8: t = 8, p = 35, m = 3, dp = 8" --
# Its TP + SP + selective row: states 2060874240 x 18 = 34.5 GiB, x 7.5 = 14.4 GiB; activations
# 139 x 34sbh/t (sbh = 2048 x 20480) = 23.1 GiB in the layers.
expect "530B-dp8 states with and without" "TP \+ SP \+ selective +23\.1 .*\| +34\.5 .* fits +\| +14\.4 .* fits" -- --model 530B-dp8
# 530B-dp8 at micro-batch 2 (M = 2240/(2 x 8) = 140): TP + SP + selective holds 139 x 34sbh/t with
# sbh = 2048 x 2 x 20480, = 46.2 GiB, + 70 masks sbh/t = 0.68 GiB + the rebuilt core 5as^2b/t = 0.625 GiB;
# + 34.5 GiB of states = 82.0 GiB (does not fit), + 14.4 GiB with the distributed optimizer = 61.9 (fits).
expect "530B-dp8 b = 2 row" "TP \+ SP \+ selective +46\.2 +0\.68 +46\.8 +0\.62 \| +34\.5 +82\.0 does not fit \| +14\.4 +61\.9 fits" -- --model 530B-dp8 --micro-batch 2
expect "530B-dp8 b = 2 verdict" "fits only with the distributed optimizer: TP \+ SP \+ selective$" -- --model 530B-dp8 --micro-batch 2
# fp32 training: 16 bytes per parameter, 8 + 8/8 = 9 distributed at dp 8.
expect "fp32 model states" "bytes per parameter: 16; with the distributed optimizer over dp = 8: 9$" -- --model 530B-dp8 --param-dtype fp32
# A fractional fixed accounting is printed as given.
expect "fractional --bytes-per-param" "bytes per parameter: 7\.5 \(--bytes-per-param" -- --model 22B --bytes-per-param 7.5
# Layouts the schedule cannot run are refused with the numbers.
expect_refusal "interleaved M not a multiple of p" "60 micro-batches are not a multiple of --pp 8" -- --model 175B --global-batch 60
expect_refusal "M not whole" "not a whole number of micro-batches" -- --model 530B-dp8 --global-batch 2241
expect_refusal "bad schedule name" "--schedule must be 1f1b, interleaved or afab" -- --schedule gpipe

if [ "$failures" -ne 0 ]; then echo "calculator_cli: $failures failed"; exit 1; fi
echo "calculator_cli: all passed"
