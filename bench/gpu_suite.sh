#!/usr/bin/env bash
# gpu_suite.sh — what mini-megatron checks and measures on a GPU machine, in ONE call, checks before rates:
#   first part (the tensor-core kernels, never run on a GPU before; whatever the budget):
#     machine        the GPU, its arch, driver, nvcc, NCCL, MPI, OpenBLAS (what is missing is said plainly)
#     build_first    the binaries: prebuilt ones (PREBUILT=DIR), or one configure for the GPU's own arch and a
#                    build of the first part's targets only (test_mma test_flash_attention attention_bench e2e_bench)
#     check_mma      test_gpu_mma: test_mma --gpu, each mma.sync / ldmatrix / cp.async wrapper against plain products
#     check_flash_tc test_gpu_flash_attention_tc: test_flash_attention --gpu-tc, the bf16 tensor-core forward and
#                    backward against the CPU path and the float64 reference, dropout 0 and 0.1
#     attention      attention_bench: flash against unfused, s 1024 to 8192, TFLOP/s; it checks each timed call
#                    itself (a slice against the CPU path) and prints no rate for a wrong one
#     e2e_flash      e2e_bench: the GPT-2 XL step with --attention flash and selective recompute (MFU)
#   the rest, in order, while the budget lasts:
#     build_rest     (from source) the other targets, in the same build folder: nothing is built twice
#     tests_ops      the op tests that the layer and end-to-end rates rest on (test_gpu_matmul, _linear, ...)
#     attention_dropout, layer, layer_xl, e2e, e2e_big   attention_bench at dropout 0.1; layer_bench (Table 4,
#                    the 22B layer at its t = 8 shape; the XL layer); e2e_bench (GPT-2 XL per recompute policy,
#                    then 6 layers of the 22B layer shape)
#     tests_other    every other test labelled gpu (multi-rank, NCCL, equivalence), with the time left
# A rate step runs only when every check it rests on PASSED (GATES below); otherwise its row says "not run:
# unchecked" and names the check. Every step has a cap (seconds) and never runs past the budget; the summary
# (a markdown table, with the device's name) is printed last, written to OUTDIR/summary.txt and into
# bench/RESULTS.md as the next run.
#
#   PREBUILT=DIR bench/gpu_suite.sh OUTDIR    # the way to run it: binaries built elsewhere for the GPU's arch
#   bench/gpu_suite.sh OUTDIR                 # from source (build-gpu/): slower, leaves no time to rerun
#   SUITE_ONLY=first bench/gpu_suite.sh OUTDIR     # the first part alone (a rerun)
#   bench/gpu_suite.sh --dry-run OUTDIR       # any machine: print the plan (the steps in order, caps, gates)
# bench/check_dry_run.sh checks the plan: checks before rates, and the flash MFU step inside the device time
# with the machine's start counted.
#
# Environment: PREBUILT=DIR (binaries; DIR/lib, or .devstage/lib in the repository, may hold the runtime libraries
# they were linked against), SUITE_BUDGET_S (360 with PREBUILT, 570 from source), SUITE_ONLY (first: the first part
# only), SUITE_CUDA_ARCH (default: the GPU's compute capability; 90 in a dry run without a GPU), SUITE_TEST_BIN
# (where the test executables are: default the binaries' folder), SUITE_MACHINE_START_S (180) and SUITE_DEVICE_S
# (900): the device time the plan is checked against, SUITE_REPO (the repository, for a copy of this script elsewhere), NCCL_INCLUDE_DIR / NCCL_LIB, MPI_INCLUDE_DIR / MPI_LIBRARY
# (CMake hints when there is no mpicxx), CBLAS_INCLUDE_DIR / OPENBLAS_LIB (CMake hints), LAYER_ARGS / E2E_ARGS /
# ATTN_ARGS (extra bench flags, appended: later flags win).
set -u

DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
if [ $# -ne 1 ]; then
  echo "usage: bench/gpu_suite.sh [--dry-run] OUTDIR" >&2
  exit 2
fi
mkdir -p "$1" || { echo "error: cannot create $1" >&2; exit 2; }
OUT=$(cd "$1" && pwd)
REPO=${SUITE_REPO:-$(cd "$(dirname "$0")/.." && pwd)}  # SUITE_REPO: for a copy elsewhere (check_dry_run.sh's controls)
cd "$REPO" || exit 2
case "${SUITE_ONLY:-}" in ""|first) ;; *) echo "error: SUITE_ONLY must be empty or 'first', not '$SUITE_ONLY'" >&2; exit 2 ;; esac

MODE=source
[ -n "${PREBUILT:-}" ] && MODE=prebuilt
if [ $MODE = prebuilt ]; then BUDGET=${SUITE_BUDGET_S:-360}; else BUDGET=${SUITE_BUDGET_S:-570}; fi
START_S=${SUITE_MACHINE_START_S:-180} DEVICE_S=${SUITE_DEVICE_S:-900}
# Where the summary goes as the next run (SUITE_RESULTS_MD: elsewhere, e.g. for the CPU flow test).
RESULTS_MD=${SUITE_RESULTS_MD:-$REPO/bench/RESULTS.md}
T0=$SECONDS
# At most 8 files in OUTDIR (the device tool brings back 8).
BUILD_LOG=$OUT/build.log TESTS_LOG=$OUT/tests.log SUMMARY=$OUT/summary.txt ATTN_LOG=$OUT/attention_bench.log
LAYER_LOG=$OUT/layer_bench.log LAYER_JSON=$OUT/layer_bench.json E2E_LOG=$OUT/e2e_bench.log E2E_JSON=$OUT/e2e_bench.json
for f in "$BUILD_LOG" "$TESTS_LOG" "$ATTN_LOG" "$LAYER_LOG" "$E2E_LOG"; do : >"$f"; done
rm -f "$LAYER_JSON" "$E2E_JSON" "$SUMMARY"

say() { echo "$*" | tee -a "$BUILD_LOG"; }
elapsed() { echo $((SECONDS - T0)); }
first_existing() { for f in "$@"; do [ -e "$f" ] && { echo "$f"; return 0; }; done; return 1; }

# ---- the machine (step "machine": detection only, a few seconds) ----------------------------------------------
say "== gpu_suite $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) (repo $REPO)"
GPU_OK=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  GPU_OK=1
  say "$(nvidia-smi -L)"
  say "driver: $(nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader | head -1)"
else
  say "GPU: none visible (nvidia-smi missing or failing)"
fi
GPU_NAME=$( [ $GPU_OK = 1 ] && nvidia-smi --query-gpu=name --format=csv,noheader | head -1 || echo none)
DRIVER=$( [ $GPU_OK = 1 ] && nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 || echo none)

NVCC=$(command -v nvcc || first_existing /usr/local/cuda/bin/nvcc || true)
if [ -n "$NVCC" ]; then say "nvcc: $NVCC ($("$NVCC" --version | grep -o 'release [0-9.]*'))"; else say "nvcc: MISSING"; fi
CUDA_HOME=${CUDA_HOME:-$( [ -n "$NVCC" ] && cd "$(dirname "$NVCC")/.." && pwd || echo /usr/local/cuda)}

# NCCL: system locations, the CUDA toolkit, or the nvidia-nccl wheel that PyTorch images carry.
PY_NCCL=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
NCCL_H=${NCCL_INCLUDE_DIR:+$NCCL_INCLUDE_DIR/nccl.h}
[ -z "$NCCL_H" ] && NCCL_H=$(first_existing /usr/include/nccl.h /usr/local/include/nccl.h "$CUDA_HOME/include/nccl.h" \
                             ${PY_NCCL:+"$PY_NCCL/include/nccl.h"} || true)
NCCL_SO=${NCCL_LIB:-}
[ -z "$NCCL_SO" ] && NCCL_SO=$(first_existing /usr/lib/x86_64-linux-gnu/libnccl.so.2 /usr/local/lib/libnccl.so.2 \
                               "$CUDA_HOME/lib64/libnccl.so.2" "$CUDA_HOME/lib/libnccl.so.2" \
                               ${PY_NCCL:+"$PY_NCCL/lib/libnccl.so.2"} || true)
say "NCCL: header ${NCCL_H:-MISSING}; library ${NCCL_SO:-MISSING}"

MPIRUN=$(command -v mpirun || true)
MPI_H=${MPI_INCLUDE_DIR:+$MPI_INCLUDE_DIR/mpi.h}
[ -z "$MPI_H" ] && MPI_H=$(first_existing /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h /usr/include/x86_64-linux-gnu/openmpi/mpi.h \
                           /usr/include/mpi.h /usr/local/include/mpi.h "$REPO/.devstage/include/mpi.h" "$REPO/.devstage/stub/mpi.h" || true)
MPI_SO=${MPI_LIBRARY:-}
[ -z "$MPI_SO" ] && MPI_SO=$(first_existing /usr/lib/x86_64-linux-gnu/libmpi.so.40 /usr/local/lib/libmpi.so.40 \
                             "$REPO/.devstage/lib/libmpi.so.40" || true)
say "MPI: mpirun ${MPIRUN:-MISSING}; mpicxx $(command -v mpicxx || echo MISSING); header ${MPI_H:-MISSING}; library ${MPI_SO:-MISSING}"
CBLAS_H=$(first_existing /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h /usr/include/openblas/cblas.h \
                         /usr/include/x86_64-linux-gnu/cblas.h /usr/include/cblas.h || true)
say "OpenBLAS: header ${CBLAS_H:-MISSING}; library $(first_existing /usr/lib/x86_64-linux-gnu/libopenblas.so.0 \
                                                       /usr/lib/x86_64-linux-gnu/libopenblas.so "$REPO/.devstage/lib/libopenblas.so.0" || echo MISSING)"
say "cmake: $(command -v cmake || echo MISSING); python3: $(command -v python3 || echo MISSING)"

# Runtime libraries: carried ones first (the prebuilt binaries were linked against them), then NCCL, CUDA.
LIBS=""
for d in "${PREBUILT:+$PREBUILT/lib}" "$REPO/.devstage/lib" "${NCCL_SO:+$(dirname "$NCCL_SO")}" "$CUDA_HOME/lib64"; do
  [ -n "$d" ] && [ -d "$d" ] && case ":$LIBS:" in *":$d:"*) ;; *) LIBS="$LIBS:$d" ;; esac
done
export LD_LIBRARY_PATH="${LIBS#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_ess_singleton_isolated=1
say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
# The GPU's own arch (compute capability 9.0 -> 90): the build targets it alone.
ARCH=${SUITE_CUDA_ARCH:-}
if [ -z "$ARCH" ] && [ $GPU_OK = 1 ]; then
  ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
fi
case "$ARCH" in ""|*[!0-9]*) ARCH_NOTE="assumed (no compute capability read): H100/H200"; ARCH=90 ;; *) ARCH_NOTE="" ;; esac
say "CUDA arch: sm_$ARCH ${ARCH_NOTE:+($ARCH_NOTE)}"
gpu_test_list() {
  if command -v python3 >/dev/null 2>&1; then
    python3 - "$REPO" <<'PY'
import glob, re, sys
for path in sorted(glob.glob(sys.argv[1] + "/test/*.cmake") + glob.glob(sys.argv[1] + "/test/*/*.cmake")):
    if "/test/emulator/" in path: continue  # the emulated build's own tests (MM_EMULATED=ON), not a GPU's
    text = "\n".join(l.split("#", 1)[0] for l in open(path).read().splitlines())
    # Plain add_test() registrations labelled gpu by set_tests_properties, and the calls of a fragment's own
    # function whose body registers gpu tests (its first argument names the test): they need the CMake
    # build's paths, so they run under ctest only.
    for m in re.finditer(r"\badd_test\(\s*NAME\s+(\S+)", text):
        if "${" in m.group(1): continue  # inside a function: its calls are found below
        if re.search(r"set_tests_properties\(\s*" + re.escape(m.group(1)) + r"\s[^)]*LABELS\s+\"?gpu", text):
            print(f"{m.group(1)}|SKIP|0|0|needs build paths (ctest only)")
    for f in re.finditer(r"\bfunction\((\w+)\b(.*?)\bendfunction\(\)", text, re.S):
        if f.group(1) == "mm_test" or not re.search(r"LABELS\s+\"?gpu", f.group(2)): continue
        for c in re.finditer(r"^\s*" + f.group(1) + r"\(\s*(\S+)", text, re.M):
            print(f"{c.group(1)}|SKIP|0|0|needs build paths (ctest only)")
    for m in re.finditer(r"\bmm_test\(([^)]*)\)", text):
        tok = m.group(1).split()
        name, fields, key = tok[0], {}, None
        for t in tok[1:]:
            if t in ("SOURCES", "MODULES", "LABELS", "NP", "ARGS", "TIMEOUT", "EXE"):
                key = t; fields.setdefault(t, []); continue
            if key: fields[key].append(t)
        if "gpu" not in fields.get("LABELS", []): continue
        args = fields.get("ARGS", [])
        if any("$<" in a or "${" in a for a in args): print(f"{name}|SKIP|0|0|needs build paths"); continue
        exe = (fields.get("EXE") or [name])[0]
        np = (fields.get("NP") or ["0"])[0]
        to = (fields.get("TIMEOUT") or ["180"])[0]
        print(f"{name}|{exe}|{np}|{to}|{' '.join(args)}")
PY
  else  # the list as of writing, when python3 is absent
    for op in matmul linear attention flash_attention embedding cross_entropy dropout layernorm gelu adamw runtime; do
      echo "test_gpu_$op|test_$op|0|180|--gpu"; done
    printf '%s\n' "test_gpu_comm|test_gpu_comm|2|180|mpi" "test_gpu_comm_nccl|test_gpu_comm|1|180|nccl"
  fi
}

# ---- the plan: steps in order, each with its kind, cap (seconds) and the checks it rests on ------------------
# The order IS the run: the loop at the end walks STEPS, and --dry-run prints the same walk. Kinds: machine,
# build, check (one GPU test that gates rates), tests (a group of GPU tests), rate (a timed benchmark).
STEPS_FIRST="machine build_first check_mma check_flash_tc attention e2e_flash"
STEPS_REST="build_rest tests_ops attention_dropout layer layer_xl e2e e2e_big tests_other"
STEPS="$STEPS_FIRST"
[ "${SUITE_ONLY:-}" = first ] || STEPS="$STEPS $STEPS_REST"
declare -A KIND CAP MIN GATES LATE_GATES WHAT STATUS SECS CHECK_TEST TEST_RESULT EXCERPT
KIND=([machine]=machine [build_first]=build [check_mma]=check [check_flash_tc]=check [attention]=rate
      [e2e_flash]=rate [build_rest]=build [tests_ops]=tests [attention_dropout]=rate [layer]=rate [layer_xl]=rate
      [e2e]=rate [e2e_big]=rate [tests_other]=tests)
# Caps (a step never runs longer). With PREBUILT the first part's sum (320 s) and the whole budget (360 s) fit the
# device time (900 s) beside the machine's start (180 s) and a rerun of the first part; from source the build's
# 240 s come on top, and there is no time to rerun (bench/check_dry_run.sh checks these sums).
CAP=([machine]=10 [build_first]=240 [check_mma]=30 [check_flash_tc]=90 [attention]=90 [e2e_flash]=100
     [build_rest]=240 [tests_ops]=150 [attention_dropout]=60 [layer]=120 [layer_xl]=60 [e2e]=300 [e2e_big]=180
     [tests_other]=600)
[ $MODE = prebuilt ] && CAP[build_first]=0 CAP[build_rest]=0
# The least time a step is started with (a benchmark cut short says nothing); default the smaller of its cap, 20 s.
MIN=([e2e_flash]=60 [e2e]=90 [e2e_big]=60 [layer]=45)
# The GPU tests (test names, as CTest has them) a step's rates rest on: all must have PASSED before it runs.
OPS_LAYER="test_gpu_matmul test_gpu_linear test_gpu_attention test_gpu_layernorm test_gpu_gelu test_gpu_dropout test_gpu_runtime"
OPS_MODEL="$OPS_LAYER test_gpu_embedding test_gpu_cross_entropy test_gpu_adamw"
GATES=([check_mma]="" [check_flash_tc]="" [attention]="test_gpu_mma test_gpu_flash_attention_tc"
       [e2e_flash]="test_gpu_mma test_gpu_flash_attention_tc" [attention_dropout]="test_gpu_mma test_gpu_flash_attention_tc"
       [layer]="$OPS_LAYER" [layer_xl]="$OPS_LAYER" [e2e]="$OPS_MODEL" [e2e_big]="$OPS_MODEL")
# The flash step's other kernels (GEMMs, layer norm, ...) were checked on a GPU in runs 1 to 3; their tests run
# after it (tests_ops). If one of them fails there, the flash step's row says so: its number is then not to be used.
LATE_GATES=([e2e_flash]="$OPS_MODEL")
CHECK_TEST=([check_mma]=test_gpu_mma [check_flash_tc]=test_gpu_flash_attention_tc)

ATTN_CMD="attention_bench --device cuda --dtype bf16 --heads 16 --head-dim 128 --tokens 16384 --seq 1024,2048,4096,8192 --reps 5 --warmup 2 --dropout 0 ${ATTN_ARGS:-}"
ATTN_DROP_CMD="attention_bench --device cuda --dtype bf16 --heads 16 --head-dim 128 --tokens 16384 --seq 1024,4096 --reps 5 --warmup 2 --paths flash --dropout 0.1 ${ATTN_ARGS:-}"
E2E_FLASH_CMD="e2e_bench --device cuda --dtype bf16 --layers 48 --hidden 1600 --heads 25 --seq 1024 --batch 8 --warmup 2 --steps 5 --gemm-size 0 --policies selective --attention flash ${E2E_ARGS:-}"
LAYER_CMD="layer_bench --device cuda --dtype bf16 --hidden 6144 --heads 64 --seq 2048 --batch 4 --tp-emulated 8 --reps 20 --warmup 5 ${LAYER_ARGS:-}"
LAYER_XL_CMD="layer_bench --device cuda --dtype bf16 --hidden 1600 --heads 25 --seq 1024 --batch 8 --tp-emulated 1 --sp-emulation derived --reps 20 --warmup 5 --breakdown calls --lt-survey on ${LAYER_ARGS:-}"
E2E_CMD="e2e_bench --device cuda --dtype bf16 --layers 48 --hidden 1600 --heads 25 --seq 1024 --batch 8 --warmup 2 --steps 5 ${E2E_ARGS:-}"
E2E_BIG_CMD="e2e_bench --device cuda --dtype bf16 --layers 6 --hidden 6144 --heads 64 --seq 2048 --batch 4 --warmup 2 --steps 4 --gemm-size 0 ${E2E_ARGS:-}"
declare -A CMD=([attention]=$ATTN_CMD [attention_dropout]=$ATTN_DROP_CMD [e2e_flash]=$E2E_FLASH_CMD [layer]=$LAYER_CMD
                [layer_xl]=$LAYER_XL_CMD [e2e]=$E2E_CMD [e2e_big]=$E2E_BIG_CMD)
WHAT=([machine]="the machine: GPU, arch, driver, tools" [build_first]="binaries of the first part"
      [check_mma]="test_gpu_mma: mma.sync, ldmatrix, cp.async wrappers vs plain products"
      [check_flash_tc]="test_gpu_flash_attention_tc: tensor-core flash fwd + bwd vs the CPU path, dropout 0 and 0.1"
      [attention]="attention_bench: flash vs unfused, 16 heads of 128, 16384 tokens, s 1024-8192, dropout 0"
      [e2e_flash]="e2e_bench: GPT-2 XL, --attention flash, selective recompute (MFU)"
      [build_rest]="binaries of the rest (same build folder)" [tests_ops]="GPU op tests the layer and e2e rates rest on"
      [attention_dropout]="attention_bench: flash alone, dropout 0.1, s 1024 and 4096"
      [layer]="layer_bench: Table 4, 22B layer at its t = 8 shape (no communication)"
      [layer_xl]="layer_bench: GPT-2 XL layer, per-op breakdown"
      [e2e]="e2e_bench: GPT-2 XL per recompute policy (unfused attention)"
      [e2e_big]="e2e_bench: 6 layers of the 22B layer shape" [tests_other]="every other GPU test, with the time left")
# The first part's targets (from source: built first, alone; the rest later in the same folder).
TARGETS_FIRST="test_mma test_flash_attention attention_bench e2e_bench"

# The timeout of a step: its cap, never past the budget (10 s kept to write the summary). STEP_END: when the
# step in progress reaches its cap (the tests of a group share their step's).
STEP_END=0
left() { local l=$((BUDGET - (SECONDS - T0) - 10)) c=$((STEP_END - SECONDS)); [ "$c" -lt "$l" ] && l=$c; echo "$l"; }
timeout_for() { local want=$1 l; l=$(left); [ "$l" -lt "$want" ] && want=$l; [ "$want" -lt 1 ] && want=1; echo "$want"; }
TEST_LIST=$(gpu_test_list)
test_entry() { grep -m1 "^$1|" <<<"$TEST_LIST"; }  # name|exe|np|timeout|args of a gpu test, by name
# The tests each step runs: the checks' one test, the op tests, then every other gpu test not run before.
tests_of() {
  case $1 in
    check_*) echo "${CHECK_TEST[$1]}" ;;
    tests_ops) echo "$OPS_MODEL" | tr ' ' '\n' ;;
    tests_other) local ex=(-e test_gpu_mma -e test_gpu_flash_attention_tc) t
                 for t in $OPS_MODEL; do ex+=(-e "$t"); done
                 cut -d'|' -f1 <<<"$TEST_LIST" | grep -v -x -F "${ex[@]}" ;;
  esac
}
min_of() { local m=${MIN[$1]:-20}; [ "${CAP[$1]}" -lt "$m" ] && m=${CAP[$1]}; echo "$m"; }

# ---- dry run: the plan, as the loop below will walk it --------------------------------------------------------
if [ $DRY = 1 ]; then
  say "plan: mode $MODE; budget ${BUDGET} s; machine start ${START_S} s (assumed); device time ${DEVICE_S} s; arch sm_$ARCH${SUITE_ONLY:+; only $SUITE_ONLY}"
  n=0
  for s in $STEPS; do
    n=$((n + 1))
    say "step $n $s kind=${KIND[$s]} cap=${CAP[$s]} min=$(min_of "$s") gates=$(echo ${GATES[$s]:-} | tr ' ' ',')${LATE_GATES[$s]:+ late_gates=$(echo ${LATE_GATES[$s]} | tr ' ' ',')}: ${WHAT[$s]}"
    case ${KIND[$s]} in
      build) if [ $MODE = prebuilt ]; then say "  binaries: prebuilt in $PREBUILT"
             elif [ $s = build_first ]; then say "  run: cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=$ARCH && cmake --build build-gpu --target $TARGETS_FIRST"
             else say "  run: cmake --build build-gpu (every other target; the first part's are up to date)"; fi ;;
      check|tests) tests_of "$s" | while read -r t; do
                     IFS='|' read -r name e np to a <<<"$(test_entry "$t")"
                     if [ -z "$name" ]; then say "  gpu test $t: MISSING from the test list (test/*.cmake)"
                     else say "  gpu test $name: ${e} np=$np timeout=${to}s args='$a'"; fi
                   done ;;
      rate) say "  run: ${CMD[$s]}" ;;
    esac
  done
  say "results: summary.txt in $OUT; the table into ${RESULTS_MD} as the next run"
  echo "dry run: GPU $GPU_NAME, driver $DRIVER; plan printed ($OUT/build.log)"
  exit 0
fi
if [ $GPU_OK = 0 ]; then
  echo "gpu_suite: no GPU on this machine: nothing run (use --dry-run to see the plan)" | tee "$SUMMARY"
  exit 3
fi

# ---- the steps -------------------------------------------------------------------------------------------------
BIN=${PREBUILT:+$(cd "$PREBUILT" && pwd)}
[ -z "$BIN" ] && BIN=$REPO/build-gpu
TBIN=${SUITE_TEST_BIN:-$BIN}
NPROC=$(nproc 2>/dev/null || echo 4)
BUILT_OK=0

check_libs() {  # a binary that cannot load its libraries is said plainly once
  for b in "$@"; do
    if [ -x "$BIN/$b" ]; then
      local missing
      missing=$(ldd "$BIN/$b" 2>/dev/null | grep "not found" | awk '{print $1}' | tr '\n' ' ')
      [ -n "$missing" ] && say "WARNING: $b cannot load: missing libraries $missing"
    fi
  done
}

step_build() {  # build_first | build_rest
  if [ $MODE = prebuilt ]; then
    STATUS[$1]="prebuilt ($BIN)"; echo "using prebuilt binaries in $BIN: $(ls "$BIN" | tr '\n' ' ')" >>"$BUILD_LOG"
    [ "$1" = build_first ] && check_libs $TARGETS_FIRST; return
  fi
  local targets=()
  if [ "$1" = build_first ]; then
    local hints=()
    [ -n "$NCCL_H" ] && hints+=("-DNCCL_INCLUDE_DIR=$(dirname "$NCCL_H")")
    [ -n "$NCCL_SO" ] && hints+=("-DNCCL_LIB=$NCCL_SO")
    if ! command -v mpicxx >/dev/null 2>&1 && [ -n "$MPI_H" ] && [ -n "$MPI_SO" ]; then
      # No compiler wrapper: tell FindMPI where the header and the library are.
      hints+=("-DMPI_CXX_COMPILER=NOTFOUND" "-DMPI_CXX_HEADER_DIR=$(dirname "$MPI_H")" "-DMPI_CXX_LIB_NAMES=mpi"
              "-DMPI_mpi_LIBRARY=$MPI_SO" "-DMPI_CXX_SKIP_MPICXX=ON")
    fi
    [ -n "${CBLAS_INCLUDE_DIR:-}" ] && hints+=("-DCBLAS_INCLUDE_DIR=$CBLAS_INCLUDE_DIR")
    [ -n "${OPENBLAS_LIB:-}" ] && hints+=("-DOPENBLAS_LIB=$OPENBLAS_LIB")
    [ -n "$NVCC" ] && hints+=("-DCMAKE_CUDA_COMPILER=$NVCC")
    command -v ninja >/dev/null 2>&1 && [ ! -f build-gpu/CMakeCache.txt ] && hints+=(-G Ninja)
    echo "== configure for sm_$ARCH ($(elapsed) s)" | tee -a "$BUILD_LOG"
    if ! timeout "$(timeout_for 100000)" cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_ARCHITECTURES=$ARCH" \
           "${hints[@]}" >>"$BUILD_LOG" 2>&1; then
      STATUS[$1]="CONFIGURE FAILED: $(grep -m1 -E 'Error|not found|NOT found|Could NOT' "$BUILD_LOG")"; return
    fi
    read -r -a targets <<<"$TARGETS_FIRST"
  fi
  echo "== build ${targets[*]:-every other target} ($(elapsed) s)" | tee -a "$BUILD_LOG"
  if timeout "$(timeout_for 100000)" cmake --build build-gpu -j "$NPROC" ${targets[@]:+--target "${targets[@]}"} >>"$BUILD_LOG" 2>&1; then
    STATUS[$1]="built (build-gpu, sm_$ARCH, Release)"; BUILT_OK=1
  else
    STATUS[$1]="BUILD FAILED or out of time (build.log): $(grep -m1 -E 'error' "$BUILD_LOG")"
  fi
  [ "$1" = build_first ] && check_libs $TARGETS_FIRST
}

run_test() {  # one gpu test by name: TEST_RESULT[name] = PASS | FAIL (...) | SKIP (...)
  local name exe np to args r rc omp cmd=()
  IFS='|' read -r name exe np to args <<<"$(test_entry "$1")"
  if [ -z "$name" ]; then r="SKIP (not in the test list of test/*.cmake)"; name=$1
  elif [ "$(left)" -lt 10 ]; then r="SKIP (out of budget)"
  elif [ "$exe" = SKIP ]; then
    if [ $MODE = source ] && [ $BUILT_OK = 1 ]; then  # registered with the build's paths: ctest runs it
      timeout "$(timeout_for 300)" ctest --test-dir build-gpu -R "^$name\$" --output-on-failure >>"$TESTS_LOG" 2>&1
      rc=$?; case $rc in 0) r=PASS ;; 124|137) r="FAIL (timeout)" ;; *) r="FAIL (ctest rc $rc)" ;; esac
    else r="SKIP (${args})"; fi
  elif [ ! -x "$TBIN/$exe" ]; then r="SKIP (no $TBIN/$exe)"
  elif [ "$np" -gt 1 ] && [ -z "$MPIRUN" ]; then r="SKIP (needs mpirun for $np ranks)"
  else
    if [ "$np" -gt 0 ] && [ -n "$MPIRUN" ]; then cmd=("$MPIRUN" --oversubscribe --bind-to none -np "$np" "$TBIN/$exe")
    else cmd=("$TBIN/$exe"); fi  # one rank: an MPI singleton, no mpirun needed
    omp=$((NPROC / (np > 1 ? np : 1))); [ "$omp" -gt 8 ] && omp=8
    echo "== $name: ${cmd[*]} $args ($(elapsed) s)" >>"$TESTS_LOG"
    # < /dev/null: mpirun forwards stdin to rank 0 and would otherwise swallow the caller's input.
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=$omp OPENBLAS_NUM_THREADS=1 timeout "$(timeout_for "$to")" "${cmd[@]}" $args >>"$TESTS_LOG" 2>&1 </dev/null
    rc=$?
    case $rc in 0) r=PASS ;; 77) r="SKIP (the test found no GPU)" ;; 124|137) r="FAIL (timeout)" ;; *) r="FAIL (rc $rc)" ;; esac
  fi
  TEST_RESULT[$name]=$r
  echo "-- $name: $r" | tee -a "$TESTS_LOG"
}

step_tests() {  # check_* | tests_ops | tests_other
  local pass=0 fail=0 skip=0 failed="" t
  while read -r t; do
    [ -z "$t" ] && continue
    [ -n "${TEST_RESULT[$t]:-}" ] && continue  # never twice
    run_test "$t"
    case ${TEST_RESULT[$t]} in PASS) pass=$((pass + 1)) ;; FAIL*) fail=$((fail + 1)); failed="$failed $t" ;; *) skip=$((skip + 1)) ;; esac
  done < <(tests_of "$1")
  if [ "${KIND[$1]}" = check ]; then STATUS[$1]=${TEST_RESULT[${CHECK_TEST[$1]}]}
  else STATUS[$1]="pass $pass, fail $fail, skip $skip${failed:+; FAILED:$failed}"; fi
}

step_rate() {
  local s=$1 g bad="" exe log json=() tmp=$OUT/step.tmp rc
  for g in ${GATES[$s]}; do
    [ "${TEST_RESULT[$g]:-not run}" = PASS ] || bad="$bad $g: ${TEST_RESULT[$g]:-not run};"
  done
  if [ -z "${GATES[$s]}" ]; then STATUS[$s]="not run: unchecked (no check named for it)"; return; fi
  if [ -n "$bad" ]; then STATUS[$s]="not run: unchecked ($(echo $bad | sed 's/;$//'))"; return; fi
  read -r exe _ <<<"${CMD[$s]}"
  if [ ! -x "$BIN/$exe" ]; then STATUS[$s]="not run: no $BIN/$exe"; return; fi
  if [ "$(left)" -lt "$(min_of "$s")" ]; then STATUS[$s]="not run: out of budget ($(left) s left, needs $(min_of "$s"))"; return; fi
  case $s in attention*) log=$ATTN_LOG ;; layer*) log=$LAYER_LOG ;; *) log=$E2E_LOG ;; esac
  [ $s = layer ] && json=(--json "$LAYER_JSON")
  [ $s = e2e ] && json=(--json "$E2E_JSON")
  echo "== $s: ${CMD[$s]} ($(elapsed) s)" >"$tmp"
  # shellcheck disable=SC2086
  timeout "$(timeout_for "${CAP[$s]}")" "$BIN/$exe" ${CMD[$s]#* } "${json[@]}" >>"$tmp" 2>&1 </dev/null
  rc=$?
  if [ $rc -ne 0 ] && [ $s = layer ] && [ "$(left)" -ge 30 ]; then
    # The fake-communicator emulation needs NCCL on one GPU; if that (or anything) failed, retry with the
    # emulation that needs no communicator at all.
    echo "== exit $rc; again with --sp-emulation derived" >>"$tmp"
    # shellcheck disable=SC2086
    timeout "$(timeout_for 90)" "$BIN/$exe" ${CMD[$s]#* } --sp-emulation derived "${json[@]}" >>"$tmp" 2>&1 </dev/null
    rc=$?
  fi
  echo "== exit $rc ($(elapsed) s)" >>"$tmp"
  case $rc in
    0) STATUS[$s]=ok ;;
    124|137) STATUS[$s]="failed: timed out (cap ${CAP[$s]} s, budget)" ;;
    *) if grep -q "^WRONG" "$tmp"; then STATUS[$s]="WRONG: a checked call did not match, no rate printed for it"
       else STATUS[$s]="failed (rc $rc): $(grep -m1 -iE 'error|out of memory' "$tmp")"; fi ;;
  esac
  case $s in
    attention*) EXCERPT[$s]=$( (grep -E "^check .*WRONG" "$tmp"; sed -n '/^TFLOP\/s/,$p' "$tmp") | grep -v "^== ") ;;
    layer) EXCERPT[$s]=$( (sed -n '/^experiment (Table 4)/,/^element-wise/p' "$tmp" | grep -v "^element-wise"
                          grep -E "^baseline layer:|^fake-comm: per layer" "$tmp" | tail -2) ) ;;
    layer_xl) EXCERPT[$s]=$(sed -n '/^experiment (Table 4)/,/^element-wise/p' "$tmp" | sed '/^the same, call by call/,$d' |
                           grep -v -E "^element-wise|^cross-check|^  (sequence|selective) |derived") ;;
    *) EXCERPT[$s]=$(sed -n '/^recompute /,$p' "$tmp" | grep -v -E "^wrote|^== ") ;;
  esac
  [ -z "${EXCERPT[$s]}" ] && EXCERPT[$s]=$(tail -3 "$tmp")
  cat "$tmp" >>"$log" && rm -f "$tmp"
}

n=0
for s in $STEPS; do
  n=$((n + 1))
  t=$SECONDS STEP_END=$((SECONDS + CAP[$s]))
  echo "== step $n $s ($(elapsed) s of ${BUDGET}): ${WHAT[$s]}"
  case ${KIND[$s]} in
    machine) STATUS[$s]="ok: $GPU_NAME, sm_$ARCH"; t=$T0 ;;
    build) step_build "$s" ;;
    check|tests) step_tests "$s" ;;
    rate) step_rate "$s" ;;
  esac
  SECS[$s]=$((SECONDS - t))
  echo "   $s: ${STATUS[$s]} (${SECS[$s]} s)"
done
# A rate timed before a test of its other kernels ran, whose test then failed, is marked: not to be used.
for s in $STEPS; do
  for g in ${LATE_GATES[$s]:-}; do
    case "${TEST_RESULT[$g]:-}" in FAIL*) STATUS[$s]="${STATUS[$s]}; BUT $g failed after it: do not use" ;; esac
  done
done

# ---- summary: a markdown table, ready to paste (last, so that the end of a long log holds it) -----------------
COMMIT=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
{
  echo "### gpu_suite on $GPU_NAME (sm_$ARCH, driver $DRIVER), $(date -u +%Y-%m-%d\ %H:%M) UTC"
  echo
  echo "Commit $COMMIT; binaries: $MODE; budget $BUDGET s, used $(elapsed) s; nvcc ${NVCC:-missing}; NCCL ${NCCL_SO:-missing}; mpirun ${MPIRUN:-missing}."
  echo "A rate is timed only after the checks it rests on passed (\"not run: unchecked\" otherwise)."
  echo
  echo "| # | step | what | status | s |"
  echo "|---|---|---|---|---|"
  n=0
  for s in $STEPS; do
    n=$((n + 1))
    echo "| $n | $s | ${WHAT[$s]} | $(echo "${STATUS[$s]:-not reached}" | sed 's/|/\\|/g') | ${SECS[$s]:-} |"
  done
  for s in $STEPS; do
    [ -n "${EXCERPT[$s]:-}" ] || continue
    echo
    echo "$s: ${WHAT[$s]} (${STATUS[$s]})"
    echo
    echo '```text'
    echo "${EXCERPT[$s]}"
    echo '```'
  done
  failed_tests=$(for t in "${!TEST_RESULT[@]}"; do case ${TEST_RESULT[$t]} in FAIL*) echo "$t (${TEST_RESULT[$t]})" ;; esac; done | sort | tr '\n' ' ')
  echo
  echo "GPU tests: $(printf '%s\n' "${TEST_RESULT[@]}" | grep -c '^PASS') passed, failed: ${failed_tests:-none} (tests.log)."
  echo "files: $(cd "$OUT" && ls | tr '\n' ' ')"
} >"$SUMMARY"
echo "================ gpu_suite summary ================"
cat "$SUMMARY"

# ---- the table into RESULTS.md as the next run (newest first: before the first "## Run" heading) -----------
if command -v python3 >/dev/null 2>&1; then
  [ -f "$RESULTS_MD" ] || printf '# Benchmark results\n\n' >"$RESULTS_MD"
  python3 - "$RESULTS_MD" "$SUMMARY" "$GPU_NAME" "$DRIVER" "$COMMIT" <<'PY'
import datetime, re, sys
path, summary, gpu, driver, commit = sys.argv[1:6]
text = open(path).read()
runs = [int(n) for n in re.findall(r"^## Run (\d+)", text, re.M)]
n = max(runs, default=0) + 1
when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
section = (f"## Run {n} — {when}, {gpu}, driver {driver} (bench/gpu_suite.sh at {commit})\n\n"
           + open(summary).read().rstrip() + "\n\n")
at = re.search(r"^## Run ", text, re.M)
text = text[:at.start()] + section + text[at.start():] if at else text.rstrip() + "\n\n" + section
open(path, "w").write(text)
print(f"wrote run {n} into {path}")
PY
fi
exit 0
