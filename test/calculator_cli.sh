#!/usr/bin/env bash
# calculator_cli.sh CALCULATOR: numbers the paper-scale calculator (tools/memory_calculator.cu) must print.
# Each expected value is worked out by hand in the comment above it, not copied from a run.
set -uo pipefail
calc="$1"
failures=0
# expect DESCRIPTION EXTENDED-REGEX -- ARGS...: the output of `calc ARGS` must contain a line matching.
# (grep reads a here-string, not a pipe: under pipefail, `echo "$out" | grep -q` fails when grep stops at the
# first match before echo has written a long output, and the check would fail at random.)
expect() {
    local what="$1" pattern="$2"; shift 3
    local out
    if ! out=$("$calc" "$@" 2>&1); then
        echo "FAIL $what: memory_calculator $* exited non-zero"; echo "$out" | tail -3; failures=$((failures + 1)); return
    fi
    if grep -Eq -- "$pattern" <<< "$out"; then echo "ok   $what"
    else echo "FAIL $what: no line matches /$pattern/ in the output of memory_calculator $*"; failures=$((failures + 1)); fi
}
# expect_refusal DESCRIPTION REGEX -- ARGS...: exits non-zero and says why.
expect_refusal() {
    local what="$1" pattern="$2"; shift 3
    local out
    if out=$("$calc" "$@" 2>&1); then echo "FAIL $what: memory_calculator $* succeeded"; failures=$((failures + 1)); return; fi
    if grep -Eq -- "$pattern" <<< "$out"; then echo "ok   $what"
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
# TP + SP + flash likewise: 139 x (34sbh/8 + lse/8) = 139 x (356515840 + 131072) B = 46.2 GiB, + 0.68 GiB of masks,
# nothing rebuilt: 46.9; + 34.5 = 81.4 (does not fit), + 14.4 = 61.3 (fits).
expect "530B-dp8 b = 2 verdict" "fits only with the distributed optimizer: TP \+ SP \+ selective, TP \+ SP \+ flash$" -- --model 530B-dp8 --micro-batch 2
expect "530B-dp8 b = 2 flash row" "TP \+ SP \+ flash +46\.2 +0\.68 +46\.9 +0\.00 \| +34\.5 +81\.4 does not fit \| +14\.4 +61\.3 fits" -- --model 530B-dp8 --micro-batch 2
# fp32 training: 16 bytes per parameter, 8 + 8/8 = 9 distributed at dp 8.
expect "fp32 model states" "bytes per parameter: 16; with the distributed optimizer over dp = 8: 9$" -- --model 530B-dp8 --param-dtype fp32
# A fractional fixed accounting is printed as given.
expect "fractional --bytes-per-param" "bytes per parameter: 7\.5 \(--bytes-per-param" -- --model 22B --bytes-per-param 7.5
# Flash attention (docs/paper.md "Flash attention and Table 2"): the 5as/h term gives way to the fp32 lse.
# 22B, no parallelism (t = 1 row): sbh = 2048 x 4 x 6144 = 50331648; 34sbh = 1711276032, lse 4asb =
# 4 x 64 x 2048 x 4 = 2097152; 1713373184 B = 1634.0 MiB (exactly 1634).
expect "Table 2 flash, no parallelism" "^    no parallelism +sbh\(34 \+ 4a/h\) +1634\.0$" -- --model 22B
# A small model at t = 2, s = 1024, b = 8, h = 768, a = 12: sbh = 6291456, lse/t = 4 x 12 x 1024 x 8 / 2 = 196608.
# TP: 10sbh + 24sbh/2 = 138412032 + 196608 = 138608640 B = 132.1875 MiB; TP + SP: 34sbh/2 = 106954752
# + 196608 = 107151360 B = 102.1875 MiB; the selective rows the same.
small=(--layers 12 --heads 12 --hidden 768 --seq 1024 --vocab 50304 --tp 2 --micro-batch 8)
expect "Table 2 flash, TP" "^    tensor parallel \(baseline\) +sbh\(10 \+ 24/t \+ 4a/\(ht\)\) +132\.2$" -- "${small[@]}"
expect "Table 2 flash, TP + selective" "^    tensor parallel \+ selective recompute +sbh\(10 \+ 24/t \+ 4a/\(ht\)\) +132\.2$" -- "${small[@]}"
expect "Table 2 flash, TP + SP + selective" "^    tensor \+ sequence parallel \+ selective recompute sbh\(34/t \+ 4a/\(ht\)\) +102\.2$" -- "${small[@]}"
# The paper's rows stay as printed: the same small model's TP + SP + selective row, 34sbh/2 = 102.0 MiB.
expect "Table 2 paper row kept" "^  tensor \+ sequence parallel \+ selective recompute +sbh\(34/t\) +102\.0$" -- "${small[@]}"
# Figure 7 under flash, 175B (t = 8; 5as/h = 80, 4a/h = 4 x 96 / 12288 = 0.03125), against the paper's TP
# baseline 10 + 3 + 10 = 23: TP + flash (13 + 0.00390625)/23 = 56.54%, TP + selective 13/23 = 56.52%,
# TP + SP + flash (4.25 + 0.00390625)/23 = 18.50%, TP + SP + selective 4.25/23 = 18.48%.
expect "Figure 7 flash, 175B" "^  175B +0\.03125 +56\.54% +56\.52% +18\.50% +18\.48%$" -- --model 175B
# The per-GPU totals, 175B TP + SP + flash: 124 layers' worth x (34sbh/8 + lse/8) with sbh = 2048 x 12288 =
# 25165824: 124 x 107053056 = 13274578944 B = 12.4 GiB; outside 16 masks x sbh/8 = 0.05 GiB; nothing rebuilt;
# states (12 x (12h^2/8 + 7h/8 + 6h) + 51200/8 x h + 2048 x h) x 18 = 2822731776 x 18 = 47.3 GiB; total
# 64134082560 B = 59.7 GiB (TP + SP + selective: 60.0, with its 0.23 GiB rebuilt core).
expect "175B TP + SP + flash total" "TP \+ SP \+ flash +12\.4 +0\.05 +12\.4 +0\.00 \| +47\.3 +59\.7 fits" -- --model 175B
# 22B TP + flash: 48 x (13sbh + lse/8) with sbh = 2048 x 4 x 6144: 48 x 654573568 = 29.3 GiB; outside (p = 1,
# plain TP) 5sbh + 4sbv/8 = 0.43 GiB; states 2771853312 x 18 = 46.5 GiB; total 81774264320 B = 76.2 GiB
# (TP + selective: 76.8).
expect "22B TP + flash total" "TP \+ flash +29\.3 +0\.43 +29\.7 +0\.00 \| +46\.5 +76\.2 fits" -- --model 22B
# --attention flash: every layout flash. 175B TP + SP + selective = TP + SP + flash above (nothing rebuilt:
# 59.7); full + SP rebuilds one flash layer, 107053056 B = 0.10 GiB, on 124 x 2sbh/8 = 0.7 GiB of inputs.
expect "--attention flash, selective" "TP \+ SP \+ selective +12\.4 +0\.05 +12\.4 +0\.00 \| +47\.3 +59\.7 fits" -- --model 175B --attention flash
expect "--attention flash, full + SP" "full \+ SP \(2sbh/t\) +0\.7 +0\.05 +0\.8 +0\.10 \|" -- --model 175B --attention flash
expect "--attention-backend flash" "^  Attention: flash in every layout" -- --model 175B --attention-backend=flash
expect "--attention unfused" "^  Attention: the paper's unfused core" -- --model 175B --attention unfused
expect_refusal "bad --attention" "--attention must be unfused or flash, got 'fused'" -- --attention fused

# Context parallelism (not in the paper; docs/paper.md "Context parallelism: where it takes over from sequence
# parallelism"). The numbers are computed here with awk from the formulas written out by hand, not by the
# calculator's code path: a GPU holds s/c tokens, so the flash layer is 34(s/c)bh/t + 4a(s/c)b/t bytes (TP + SP),
# and the first stage of 1T (p = 64, 1F1B, M = 512) holds 128 layers' worth plus 64 embedding masks (s/c)bh/t.
cp_row() {  # s c -> "GiB_of_TP+SP+flash kv_fwd_MiB kv_bwd_MiB tp_fwd_MiB" for 1T (a 160, h 25600, t 8, b 1, d 2)
    awk -v s="$1" -v c="$2" 'BEGIN {
        a = 160; h = 25600; t = 8; b = 1; d = 2; n = s / c
        layer = 34 * n * b * h / t + 4 * a * n * b / t
        acts = 128 * layer + 64 * n * b * h / t
        kv = n * b * h / t                      # elements of the K (and of the V) held on one GPU
        fwd = 2 * (c - 1) * kv * d; bwd = fwd + 2 * c * kv * 4; tp = 4 * (t - 1) / t * n * b * h * d
        printf "%.1f %.1f %.1f %.1f\n", acts / 2^30, fwd / 2^20, bwd / 2^20, tp / 2^20 }'
}
read -r acts fwd bwd tp <<< "$(cp_row 32768 4)"  # 107.9 GiB, 300.0, 1100.0, 1400.0 MiB
expect "CP table, 1T s 32768 c 4" "^  1T +32768 +4 +2048 +8192 +[0-9.]+ +${acts//./\\.} \| +${fwd//./\\.} +${bwd//./\\.} +${tp//./\\.}$" -- --model 1T
read -r acts fwd bwd tp <<< "$(cp_row 131072 8)"
expect "CP table, 1T s 131072 c 8" "^  1T +131072 +8 +4096 +16384 +[0-9.]+ +${acts//./\\.} \| +${fwd//./\\.} +${bwd//./\\.} +${tp//./\\.}$" -- --model 1T
# Without CP nothing travels in the ring; the table is in the default run (1T only).
expect "CP table, c 1 has no K/V bytes" "^  1T +32768 +1 +512 +32768 +[0-9.]+ +[0-9.]+ \| +0\.0 +0\.0 +5600\.0$" --
# --cp given: its value joins the table, and the per-GPU totals are at s/c. 1T at s 32768, --cp 4, every layout
# flash: TP + SP keeps 128 x (34 x 8192 x 25600/8 + 4 x 160 x 8192/8) = 128 x 892076032 B = 106.3 GiB in the
# layers and 64 x 8192 x 25600/8 = 1677721600 B = 1.56 GiB outside; GPUs = t c p dp = 8 x 4 x 64 x 1 = 2048.
expect "--cp 4 per-GPU TP + SP" "^    TP \+ SP +106\.3 +1\.56 +107\.9 +0\.00 \|" -- --model 1T --seq 32768 --attention flash --cp 4
expect "--cp 4 GPUs" "^  1T +160 +25600 +128 +32768 +51200 +8 +4 +64 +1 +1 +2048 " -- --model 1T --seq 32768 --attention flash --cp 4
# The distributed optimizer shards over dp x cp = 1 x 8: 6 + 12/8 = 7.5 bytes per parameter. 1T's first stage at
# s 32768: 2 x (12h^2/8 + 7h/8 + 6h) + 51200/8 x h + 32768 x h = 2969132800 parameters: x 18 = 49.8 GiB, x 7.5 =
# 20.7 GiB; TP + SP at c 8: 128 x (34 x 4096 x 25600/8 + 4 x 160 x 4096/8) = 53.2 GiB in the layers, 64 masks
# 4096 x 25600/8 = 0.78 GiB: 53.9 GiB of activations, 103.7 GiB in all (does not fit), 74.7 GiB distributed (fits).
expect "--cp 8 optimizer over dp x cp" "bytes per parameter: 18; with the distributed optimizer over dp x cp = 1 x 8: 7\.5$" -- --model 1T --seq 32768 --attention flash --cp 8
expect "--cp 8 totals" "^    TP \+ SP +53\.2 +0\.78 +53\.9 +0\.00 \| +49\.8 +103\.7 does not fit \| +20\.7 +74\.7 fits" -- --model 1T --seq 32768 --attention flash --cp 8
expect "--cp 3 joins the table" "^  1T +32768 +3 +1536 +10922\.7 " -- --model 1T --seq 32768 --attention flash --cp 3
expect "--cp in the JSON" "\"gpus\": 2048" -- --model 1T --attention flash --cp 4 --json
expect_refusal "--cp with unfused attention" "--cp 2 needs --attention flash" -- --model 1T --cp 2 --attention unfused
expect_refusal "--cp 0" "--cp must be positive, got '0'" -- --model 1T --attention flash --cp 0
expect_refusal "--cp not whole" "--cp must be a whole number, got '1\.5'" -- --model 1T --attention flash --cp 1.5

# Zero-bubble schedules (not in the paper; docs/paper.md "Beyond the paper: zero-bubble schedules"): 1T, p = 64,
# M = 512, q = 63, at 1:1:1 (busy time per stage 512 x 3 = 1536). 1f1b idles 3q = 189: a rate 189/1536 = 12.30%,
# 189/1725 = 10.96% of the step; zb-h1 and zb-h2 (synchronous end) q = 63: 4.10%, 63/1599 = 3.94%.
# First stage, TP + SP + selective (sbh = 2048 x 25600 = 52428800): a micro-batch's 2 layers keep 2 x 34sbh/8 =
# 445644800 B; 64 of them 28521267200 B = 26.56 GiB; its W inputs 2 x 2 sbh x 5.5 = 1153433600 B = 1.07 GiB;
# zb-h1 after a B 63 x 445644800 + 1153433600 = 29229056000 B = 27.22 GiB; zb-h2 127 micro-batches = 52.71 GiB,
# after a B 126 x 445644800 + 1153433600 = 57304678400 B = 53.37 GiB. Outside: n masks sbh/8 = 6553600 B each
# (64: 0.39, 127: 0.78 GiB); the rebuilt core 5as^2b/8 = 419430400 B = 0.39 GiB; states 2182700800 x 18 =
# 36.6 GiB. Totals 63.9 (the per-GPU table's TP + SP + selective), 64.6, and 91.1 GiB: zb-h2 does not fit.
expect "zero bubble 1T 1f1b" "^  1T +1f1b +64 +512 +189 +12\.30% +10\.96% \| +64 +26\.56 +0\.00 +26\.56 \| +0\.39 +0\.39 +36\.6 +63\.9 fits$" --
expect "zero bubble 1T zb-h1" "^  1T +zb-h1 +64 +512 +63 +4\.10% +3\.94% \| +64 +26\.56 +1\.07 +27\.22 \| +0\.39 +0\.39 +36\.6 +64\.6 fits$" --
expect "zero bubble 1T zb-h2" "^  1T +zb-h2 +64 +512 +63 +4\.10% +3\.94% \| +127 +52\.71 +1\.07 +53\.37 \| +0\.78 +0\.39 +36\.6 +91\.1 does not fit$" --
# zb-v: two chunks of one layer per stage, each op half a stage's (t = 0.5): 63 x max(1 - 0.5, 1 - 0.5, 1 - 1.5) =
# 31.5 (2.05%, 31.5/1567.5 = 2.01%); the first stage holds 2 x 64 one-layer chunks = 64 micro-batches' 2 layers
# (26.56 GiB, 1f1b's), after a B 127 x 222822400 + one layer's W inputs 576716800 = 28875161600 B = 26.89 GiB;
# total 64.3 GiB. At 1:2:1 63 x max(2 - 0.5, 1.5 - 0.5, 1 - 1.5) = 94.5 (94.5/2048 = 4.61%).
expect "zero bubble 1T zb-v" "^  1T +zb-v +64 +512 +31\.5 +2\.05% +2\.01% \| +64 +26\.56 +0\.54 +26\.89 \| +0\.39 +0\.39 +36\.6 +64\.3 fits$" --
expect "--pipe-times 1:2:1 zb-v" "^  1T +zb-v +64 +512 +94\.5 +4\.61% " -- --model 1T --pipe-times 1:2:1
# At 1:2:1 (busy 512 x 4 = 2048): 1f1b 63 x 4 = 252 (12.30%); zb-h1 63 x max(2, 1, 2) = 126 (6.15%, 126/2174 =
# 5.80%); zb-h2 63 x max(1, 1, 1) = 63 (3.08%, 63/2111 = 2.98%).
expect "--pipe-times 1:2:1 1f1b" "^  1T +1f1b +64 +512 +252 +12\.30% " -- --model 1T --pipe-times 1:2:1
expect "--pipe-times 1:2:1 zb-h1" "^  1T +zb-h1 +64 +512 +126 +6\.15% +5\.80% " -- --model 1T --pipe-times 1:2:1
expect "--pipe-times 1:2:1 zb-h2" "^  1T +zb-h2 +64 +512 +63 +3\.08% +2\.98% " -- --model 1T --pipe-times=1:2:1
# M = 32 < p: both zero-bubble schedules idle (2p - 1 - M) = 95 and hold all 32 micro-batches (32 x 445644800 B =
# 13.28 GiB; after a B 31 x 445644800 + 1153433600 = 14968422400 B = 13.94 GiB).
expect "zero bubble M < p" "^  1T +zb-h2 +64 +32 +95 +.* \| +32 +13\.28 +1\.07 +13\.94 \|" -- --model 1T --global-batch 32
expect "zero bubble in the JSON" "\"first_stage_in_flight\": 127" -- --model 1T --json
expect_refusal "bad --pipe-times" "--pipe-times needs three positive times F:B:W \(e\.g\. 1:1:1\), got '1:0:1'" -- --pipe-times 1:0:1
expect_refusal "short --pipe-times" "--pipe-times needs three positive times F:B:W" -- --pipe-times 1:1

# Layouts the schedule cannot run are refused with the numbers.
expect_refusal "interleaved M not a multiple of p" "60 micro-batches are not a multiple of --pp 8" -- --model 175B --global-batch 60
expect_refusal "M not whole" "not a whole number of micro-batches" -- --model 530B-dp8 --global-batch 2241
expect_refusal "bad schedule name" "--schedule must be 1f1b, interleaved or afab" -- --schedule gpipe

if [ "$failures" -ne 0 ]; then echo "calculator_cli: $failures failed"; exit 1; fi
echo "calculator_cli: all passed"
