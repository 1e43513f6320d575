#!/usr/bin/env bash
# pipeline_bubble.sh BUILD_DIR [ROUNDS] [STEPS]: each pipeline schedule's measured idle share per stage on the real
# model, with its spread over ROUNDS rounds (default 5), next to the formula at the run's own op times (issue 44).
#
# The model: 8 layers, hidden 128, 4 heads, sequences of 128, batch 16 in micro-batches of 2 (M = 8), fp32,
# dropout 0, the repository's own text (prepare_data --default); pp 2 and pp 4; AFAB, 1F1B, interleaved (2
# chunks), ZB-H1, ZB-H2, ZB-V. Ranks bound to cores (mpirun --bind-to core; pp 4 on a 2-core machine puts two
# ranks on a core: --bind-to core:overload-allowed), one thread each. The schedules take turns in every round,
# so a load that comes and goes lands on all of them. Each run trains STEPS steps (default 6); the trainer's
# end-of-run report gives each stage's idle share over its steps but the first (model/pipeline_timeline.h: op
# spans on every stage, the window from the step's first op to its last on any stage) and the formula's share
# at the run's mean op times T_F, T_B, T_W (recompute/formulas.h, or the schedule's simulation where no closed
# form applies).
#
# Prints a markdown table: for each schedule and stage, the median of the rounds' idle shares [min-max], the
# median formula share, and whether the difference is larger than the spread (the rounds' max - min) or within
# it; then, per pp, which schedule idles least on average over its stages and whether that lead is larger than
# the spreads. A benchmark (bench/PERF_NOTES.md "The bubble, measured"), never a test.
set -euo pipefail
build="${1:-build}"; rounds="${2:-5}"; steps="${3:-6}"
here="$(cd "$(dirname "$0")" && pwd)"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$build/prepare_data" --out-dir "$dir" "$here/../README.md" "$here/../docs/design.md" "$here/../docs/paper.md" > /dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
cores=$(nproc --all)
echo "pipeline_bubble: $cores cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load $(cut -d' ' -f1-3 /proc/loadavg), $rounds rounds of $steps steps" >&2
for round in $(seq 1 "$rounds"); do
  for pp in 2 4; do
    bind="--bind-to core"
    [ "$pp" -gt "$cores" ] && bind="--bind-to core:overload-allowed --oversubscribe"
    for s in afab 1f1b interleaved zb-h1 zb-h2 zb-v; do
      extra=(--pipeline-schedule "$s")
      [ "$s" = interleaved ] && extra=(--num-layers-per-virtual-pipeline-stage $((8 / pp / 2)))
      out=$(mpirun $bind -np "$pp" "$build/train_gpt" --device cpu --pp "$pp" --layers 8 --hidden 128 --heads 4 --seq 128 \
            --batch 16 --micro-batch-size 2 --dropout 0 --steps "$steps" --val none --sample 0 --log-every 1000 \
            --train "$dir/train.bin" "${extra[@]}" 2>&1) || { echo "$out" >&2; exit 1; }
      line=$(grep "measured over" <<< "$out")
      python3 - "$round" "$pp" "$s" "$line" >> "$dir/rows.txt" <<'PY'
import re, sys
rnd, pp, s, line = sys.argv[1:5]
form = re.search(r"the formula's idle share at these times ([0-9.]+)", line).group(1)
tf, tb, tw = re.search(r"T_F ([0-9.]+), T_B ([0-9.]+), T_W ([0-9.]+)", line).groups()
for st, share in re.findall(r"stage (\d+) ([0-9.]+) \[", line):
    print(rnd, pp, s, st, share, form, tf, tb, tw)
PY
    done
  done
  echo "round $round done" >&2
done
python3 - "$dir/rows.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
order = ["afab", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v"]
print("| pp | schedule | stage | measured idle share, median [min-max] | formula, median | T_F / T_B / T_W (ms) | difference |")
print("|---|---|---|---|---|---|---|")
mean_by = {}
for pp in ("2", "4"):
    for s in order:
        stages = sorted({r[3] for r in rows if r[1] == pp and r[2] == s}, key=int)
        for st in stages:
            rs = [r for r in rows if r[1] == pp and r[2] == s and r[3] == st]
            m = [float(r[4]) for r in rs]
            f = statistics.median(float(r[5]) for r in rs)
            t = [statistics.median(float(r[k]) for r in rs) for k in (6, 7, 8)]
            med, lo, hi = statistics.median(m), min(m), max(m)
            spread = hi - lo
            verdict = "larger than the spread" if abs(med - f) > spread else "within the spread"
            print("| %s | %s | %s | %.3f [%.3f-%.3f] | %.3f | %.2f / %.2f / %.2f | %+.3f: %s |" % (pp, s, st, med, lo, hi, f, *t, med - f, verdict))
            mean_by.setdefault((pp, s), []).append((med, lo, hi))
print()
for pp in ("2", "4"):
    avg = {s: statistics.mean(x[0] for x in mean_by[(pp, s)]) for s in order if (pp, s) in mean_by}
    best = min(avg, key=avg.get)
    second = min((s for s in avg if s != best), key=avg.get)
    spread = max(x[2] - x[1] for s in (best, second) for x in mean_by[(pp, s)])
    print("pp %s: least idle on average over the stages: %s (%.3f), then %s (%.3f); the lead %.3f is %s the largest spread of the two (%.3f)"
          % (pp, best, avg[best], second, avg[second], avg[second] - avg[best],
             "larger than" if avg[second] - avg[best] > spread else "within", spread))
PY
