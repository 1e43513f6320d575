#!/usr/bin/env bash
# check_dry_run.sh BUILD_DIR OUTDIR [SUITE]: bench/gpu_suite.sh's plan (--dry-run, no GPU needed), checked in both
# of its modes (PREBUILT=BUILD_DIR, and from source) for what a GPU run must never get wrong:
#   order   the tensor-core checks (test_gpu_mma: test_mma --gpu; test_gpu_flash_attention_tc: test_flash_attention
#           --gpu-tc) come before any rate; every rate step names the checks it rests on, and each of them runs in
#           an earlier step; the first two rates are attention_bench and the GPT-2 XL step with --attention flash,
#           with nothing but the machine, the first build and those checks before them;
#   budget  with the machine's start counted (the plan's "machine start"), the flash MFU step ends inside the
#           device time even if every step before it runs to its cap, and inside the suite's own budget; the
#           suite fits one command (600 s); the whole suite and its idle wait fit the device time, and with
#           PREBUILT also a rerun of the first part (SUITE_ONLY=first) after it;
#   tests   every CTest test labelled gpu (ctest -N -L gpu in BUILD_DIR) is run by exactly one step, and nothing
#           else is listed as a gpu test.
# SUITE: the suite to check (default: gpu_suite.sh beside this script).
#
# check_dry_run.sh --negative-controls BUILD_DIR OUTDIR: the checker's own controls. Altered copies of the suite
# must each fail, with their reason: the first rate moved before the flash check, the flash MFU step moved to the
# end, a rate with its gates removed, and a slow machine start (SUITE_MACHINE_START_S=400).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ONE_COMMAND_S=600 IDLE_S=30  # the device tool's limit for one command; a warm machine's idle wait before it goes back

if [ "${1:-}" = --negative-controls ]; then
  build="$2"; out="$3"; mkdir -p "$out"; status=0
  repo=$(cd "$here/.." && pwd)
  variant() {  # name regex env sed-expression (empty: the suite unchanged): the copy must fail with regex
    local name=$1 regex=$2 env=$3 expr=$4 v="$out/gpu_suite_$1.sh" got rc
    sed -e "${expr:-p;d}" "$here/gpu_suite.sh" >"$v"
    if [ -n "$expr" ] && cmp -s "$v" "$here/gpu_suite.sh"; then echo "FAIL: control $name: the sed expression changed nothing"; status=1; return; fi
    got=$(env SUITE_REPO="$repo" $env bash "$here/check_dry_run.sh" "$build" "$out/$name" "$v" 2>&1); rc=$?
    if [ $rc -ne 1 ]; then echo "$got" | tail -5; echo "FAIL: control $name: exit $rc, not 1"; status=1
    elif ! grep -Eq -e "$regex" <<<"$got"; then echo "$got" | tail -5; echo "FAIL: control $name: exit 1 but no line matches /$regex/"; status=1
    else echo "ok: control $name fails: $(grep -E -m1 -e "$regex" <<<"$got")"; fi
  }
  variant rate_before_check "FAIL.*rate step attention .*test_gpu_flash_attention_tc.* not run before it" "" \
    's/^STEPS_FIRST=.*/STEPS_FIRST="machine build_first check_mma attention check_flash_tc e2e_flash"/'
  variant flash_last "FAIL.*the second rate step is attention_dropout, not the flash MFU step" "" \
    's/^STEPS_FIRST=.*/STEPS_FIRST="machine build_first check_mma check_flash_tc attention"/; s/^STEPS_REST="\(.*\)"/STEPS_REST="\1 e2e_flash"/'
  variant ungated "FAIL.*rate step attention names no check" "" \
    's/^GATES=(\[check_mma\]="" \[check_flash_tc\]="" \[attention\]="[^"]*"/GATES=([check_mma]="" [check_flash_tc]="" [attention]=""/'
  variant slow_start "FAIL.*flash MFU step ends at [0-9]+ s of device time .* > 900" "SUITE_MACHINE_START_S=400" ""
  [ $status = 0 ] && echo "all 4 altered suites fail the check, each for its reason"
  exit $status
fi

build="$1"; out="$2"; suite="${3:-$here/gpu_suite.sh}"
want=$(ctest --test-dir "$build" -N -L gpu | sed -n 's/^ *Test *#[0-9]*: *\([^ ]*\).*/\1/p' | sort)
[ -n "$want" ] || { echo "FAIL: ctest -N -L gpu lists no test in $build"; exit 1; }
status=0
fail() { echo "FAIL ($mode): $*"; status=1; }

check_plan() {  # mode plan
  mode=$1; local plan=$2
  local header start device budget
  header=$(grep -m1 '^plan: ' <<<"$plan") || { fail "the dry run printed no 'plan:' line"; return; }
  start=$(sed -n 's/.*machine start \([0-9]*\) s.*/\1/p' <<<"$header")
  device=$(sed -n 's/.*device time \([0-9]*\) s.*/\1/p' <<<"$header")
  budget=$(sed -n 's/.*budget \([0-9]*\) s.*/\1/p' <<<"$header")
  [ -n "$start" ] && [ -n "$device" ] && [ -n "$budget" ] || { fail "cannot read start, device time and budget from: $header"; return; }

  # The steps in order: name kind cap gates, and the gpu tests each runs.
  local names=() kinds=() caps=() gates=() cmds=() n=-1 line
  declare -A test_step=()
  while IFS= read -r line; do
    if [[ $line =~ ^step\ [0-9]+\ ([a-z_0-9]+)\ kind=([a-z]+)\ cap=([0-9]+)\ min=[0-9]+\ gates=([^ :]*) ]]; then
      n=$((n + 1)); names[n]=${BASH_REMATCH[1]} kinds[n]=${BASH_REMATCH[2]} caps[n]=${BASH_REMATCH[3]}
      gates[n]=${BASH_REMATCH[4]//,/ } cmds[n]=""
    elif [[ $line =~ ^\ \ gpu\ test\ ([^:]+):\ (.*)$ ]] && [ $n -ge 0 ]; then
      local t=${BASH_REMATCH[1]}
      [ -n "${test_step[$t]:-}" ] && fail "gpu test $t is run twice (steps ${names[${test_step[$t]}]} and ${names[n]})"
      test_step[$t]=$n
      cmds[n]="${cmds[n]}${BASH_REMATCH[2]};"
    elif [[ $line =~ ^\ \ run:\ (.*)$ ]] && [ $n -ge 0 ]; then
      cmds[n]="${cmds[n]}${BASH_REMATCH[1]};"
    fi
  done <<<"$plan"
  [ $n -ge 0 ] || { fail "the dry run printed no step"; return; }

  # -- order: the tensor-core checks, then their rates, then the rest.
  local i g first_rate=-1 second_rate=-1 mma=-1 tc=-1
  for i in $(seq 0 $n); do
    case "${cmds[i]}" in *"test_mma np=0 timeout="*"args='--gpu'"*) [ "${kinds[i]}" = check ] && mma=$i ;; esac
    case "${cmds[i]}" in *"test_flash_attention np=0 timeout="*"args='--gpu-tc'"*) [ "${kinds[i]}" = check ] && tc=$i ;; esac
  done
  [ $mma -ge 0 ] || fail "no check step runs test_mma --gpu (test_gpu_mma)"
  [ $tc -ge 0 ] || fail "no check step runs test_flash_attention --gpu-tc (test_gpu_flash_attention_tc)"
  for i in $(seq 0 $n); do
    [ "${kinds[i]}" = rate ] || continue
    if [ $first_rate -lt 0 ]; then first_rate=$i; elif [ $second_rate -lt 0 ]; then second_rate=$i; fi
    [ -n "${gates[i]}" ] || fail "rate step ${names[i]} names no check: it would be timed unchecked"
    for g in ${gates[i]}; do
      if [ -z "${test_step[$g]:-}" ] || [ "${test_step[$g]}" -ge "$i" ]; then
        fail "rate step ${names[i]} rests on $g, which is not run before it"
      fi
    done
    if [ $i -lt $mma ] || [ $i -lt $tc ]; then fail "rate step ${names[i]} comes before the tensor-core checks"; fi
  done
  local flash_step=-1
  if [ $first_rate -ge 0 ]; then
    case "${cmds[first_rate]}" in
      *"attention_bench --device cuda --dtype bf16 "*"--seq 1024,2048,4096,8192"*"--dropout 0 "*) ;;
      *) fail "the first rate step is ${names[first_rate]}, not attention_bench (bf16, s 1024..8192, dropout 0, flash and unfused)" ;;
    esac
  else fail "the plan has no rate step"; fi
  if [ $second_rate -ge 0 ]; then
    case "${cmds[second_rate]}" in
      *"e2e_bench --device cuda --dtype bf16 --layers 48 "*"--attention flash"*) flash_step=$second_rate ;;
      *) fail "the second rate step is ${names[second_rate]}, not the flash MFU step (e2e_bench ... --attention flash)" ;;
    esac
  else fail "the plan has one rate step or none: no flash MFU step second"; fi
  for i in $(seq 0 $((second_rate < 0 ? n : second_rate))); do
    case "${kinds[i]}" in machine|check|rate) ;;
      build) [ "${names[i]}" = build_first ] || fail "step ${names[i]} (a build) comes before the flash MFU step" ;;
      *) fail "step ${names[i]} (${kinds[i]}) comes before the flash MFU step" ;;
    esac
  done

  # -- budget: every step before the flash MFU step (and that step) runs to its cap.
  if [ $flash_step -ge 0 ]; then
    local worst=0 first_worst=0
    for i in $(seq 0 $flash_step); do worst=$((worst + caps[i])); done
    for i in $(seq 0 $flash_step); do [ "${kinds[i]}" = build ] || first_worst=$((first_worst + caps[i])); done
    [ $((start + worst)) -le "$device" ] ||
      fail "the flash MFU step ends at $((start + worst)) s of device time at worst (machine start $start + steps $worst) > $device"
    [ "$worst" -le $((budget - 10)) ] ||
      fail "the flash MFU step ends at $worst s at worst, past the suite's budget $budget s less the 10 s kept for the summary"
    [ $((budget + 30)) -le $ONE_COMMAND_S ] ||
      fail "the suite's budget $budget s plus 30 s does not fit one command ($ONE_COMMAND_S s)"
    [ $((start + budget + IDLE_S)) -le "$device" ] ||
      fail "machine start $start + suite $budget + idle $IDLE_S s = $((start + budget + IDLE_S)) > $device"
    local rerun=$((start + budget + first_worst + IDLE_S))
    if [ "$mode" = prebuilt ]; then
      [ $rerun -le "$device" ] ||
        fail "no time to rerun the first part: start $start + suite $budget + first part $first_worst + idle $IDLE_S = $rerun > $device"
    fi
    echo "$mode: the flash MFU step ends by $((start + worst)) s of $device at worst (start $start, steps $worst); suite $budget s;" \
         "$( [ $rerun -le "$device" ] && echo "a rerun of the first part fits ($rerun s)" || echo "no time to rerun ($rerun s): use PREBUILT")"
  fi

  # -- tests: each CTest gpu test run by one step, nothing else.
  local listed missing extra
  listed=$(printf '%s\n' "${!test_step[@]}" | sort)
  missing=$(comm -23 <(echo "$want") <(echo "$listed"))
  extra=$(comm -13 <(echo "$want") <(echo "$listed"))
  [ -z "$missing" ] || fail "gpu tests the dry run does not run: $(echo $missing)"
  [ -z "$extra" ] || fail "the dry run lists gpu tests CTest does not have: $(echo $extra)"
}

plan=$(PREBUILT="$build" bash "$suite" --dry-run "$out/prebuilt") || { echo "FAIL: the dry run (PREBUILT) exited $?"; exit 1; }
check_plan prebuilt "$plan"
plan=$(env -u PREBUILT bash "$suite" --dry-run "$out/source") || { echo "FAIL: the dry run (from source) exited $?"; exit 1; }
check_plan source "$plan"
[ $status = 0 ] && echo "dry run: checks before rates, the flash MFU step inside the device time in both modes; all $(echo "$want" | wc -l) gpu tests of ctest -N -L gpu run once"
exit $status
