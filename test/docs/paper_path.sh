#!/usr/bin/env bash
# paper_path.sh — the README's "Read the paper in the code" stays what it promises.
#
#   bash test/docs/paper_path.sh SOURCE_ROOT [README]   (CTest: paper_path, label unit)
#
# The section's table lists, in its first column, the files of the paper's path (each in backticks). They must:
#  1. exist, and add up to at most 2,000 lines, so that a learner can read the whole path;
#  2. follow the paper's order: the second column's first section names appear as §2, §4.2.2, §5, Table 2,
#     Eq. 5 (each row's first mention may repeat the row before, never go back);
#  3. call down only: include none of the headers of what lies beyond the paper (context parallelism, the
#     pipeline executor and its messages, the distributed optimizer, point-to-point, checkpoints and the
#     training state, Hugging Face files, the test hooks, the other memory reports, the calculator's formulas,
#     ZeRO's model-state table, flash attention's memory) and read no environment variable;
#  4. keep every line within 120 characters.
# Also prints the lines of the rest of the tree, and the lines of the path that name a mechanism from after the
# paper (per file; not yet a failure).
# Prints each file with its lines and the total, then one line per problem; exit 1 when there is any.
set -u
root=${1:?usage: paper_path.sh SOURCE_ROOT [README]}
readme=${2:-$root/README.md}
cd "$root" || exit 2
section=$(awk '/^## Read the paper in the code$/ {on = 1; next} /^## / {on = 0} on' "$readme")
[ -n "$section" ] || { echo "paper_path: no section '## Read the paper in the code' in $readme"; exit 1; }
rows=$(grep -E '^\| `' <<< "$section")
files=$(awk -F'|' '{print $2}' <<< "$rows" | grep -oE '`[^`]+`' | tr -d '`')
[ -n "$files" ] || { echo "paper_path: the section's table lists no files"; exit 1; }
problems=0 total=0
forbidden='context_parallel\.h|pipeline_step\.h|pipeline_ops\.h|distributed_optimizer\.h|point_to_point\.h|checkpoint\.h|train_state\.h|hf_gpt2\.h|safetensors\.h|test_hooks\.h|other_reports\.h'
forbidden+='|formulas\.h|model_state_memory\.h|flash_memory\.h'  # whole names: memory_formulas.h is the path's
for f in $files; do
    if [ ! -f "$f" ]; then echo "paper_path: $f is listed but does not exist"; problems=$((problems + 1)); continue; fi
    n=$(wc -l < "$f"); total=$((total + n)); printf '%6d  %s\n' "$n" "$f"
    bad=$(grep -nE "#include \"([^\"]*/)?($forbidden)\"" "$f")
    [ -n "$bad" ] && { echo "paper_path: $f includes what lies beyond the paper: $bad"; problems=$((problems + 1)); }
    env=$(grep -n 'getenv' "$f")
    [ -n "$env" ] && { echo "paper_path: $f reads the environment: $env"; problems=$((problems + 1)); }
    long=$(LC_ALL=C.UTF-8 grep -nE '^.{121,}' "$f" | cut -d: -f1 | tr '\n' ' ')
    [ -n "$long" ] && { echo "paper_path: $f has lines over 120 characters: line(s) $long"; problems=$((problems + 1)); }
done
printf '%6d  total (at most 2000)\n' "$total"
# The rest, for the README's sentence about it: every other tracked source line, and the tests.
if command -v git >/dev/null 2>&1 && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    sources=$(git ls-files '*.cu' '*.cuh' '*.h' '*.cpp' '*.cc' '*.py' '*.sh' '*.cmake' | grep -vxF -f <(tr ' ' '\n' <<< "$files"))
    tests=$(grep -E '^test/' <<< "$sources" | tr '\n' '\0' | xargs -0 -r cat | wc -l)
    rest=$(grep -vE '^test/' <<< "$sources" | tr '\n' '\0' | xargs -0 -r cat | wc -l)
    printf '%6d  the rest: the ops, the trainer and what came after the paper (sources, tools, benchmarks)\n' "$rest"
    printf '%6d  the tests (test/, the emulator included)\n' "$tests"
fi
[ "$total" -le 2000 ] || { echo "paper_path: the path is $total lines, more than 2,000"; problems=$((problems + 1)); }
# The paper's order, by the section each row names first (leftmost in its second column).
order="§2 §4.2.2 §5 Table_2 Eq._5"
last=0
while IFS= read -r row; do
    paper=$(awk -F'|' '{print $3}' <<< "$row")
    rank=0 at=100000 i=0
    for key in $order; do
        i=$((i + 1))
        pos=$(awk -v k="${key//_/ }" '{ p = index($0, k); print p }' <<< "$paper")
        if [ "$pos" -gt 0 ] && [ "$pos" -lt "$at" ]; then at=$pos; rank=$i; fi
    done
    [ "$rank" -eq 0 ] && { echo "paper_path: a row names none of $order: $paper"; problems=$((problems + 1)); continue; }
    [ "$rank" -lt "$last" ] && { echo "paper_path: out of the paper's order: $paper"; problems=$((problems + 1)); }
    last=$rank
done <<< "$rows"
# Lines that name a mechanism from after the paper (zero-bubble, ZeRO, context parallelism, flash attention,
# offloading, the trace, post-validation): printed per file, so that a change that threads one more of them
# through the paper's files shows here. The goal is 0 outside the branches that hand over to them.
beyond='zero_bubble|ZeroBubble|zb-|ZB-|\bZeRO|zero_shard|\bcp\b|\bCP\b|context.parallel|[Ff]lash|offload|[Tt]race|post.valid|pipeline_v\b|WeightGrad'
named=0
for f in $files; do
    [ -f "$f" ] || continue
    n=$(grep -cE "$beyond" "$f"); named=$((named + n))
    [ "$n" -gt 0 ] && printf '%6d  lines of %s name a mechanism from after the paper\n' "$n" "$f"
done
printf '%6d  lines of the path name a mechanism from after the paper (the goal: 0 outside their hand-over branches)\n' "$named"
[ "$problems" -eq 0 ] || { echo "paper_path: $problems problem(s)"; exit 1; }
echo "paper_path: $(wc -w <<< "$files") files, $total lines, in the paper's order, calling down only"
