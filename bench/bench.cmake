# Benchmarks (bench/): the paper's Table 4 on one layer (layer_bench) and Table 5-style end-to-end training
# throughput with MFU / HFU (e2e_bench). Both binaries go to the top of the build folder, as train_gpt does,
# so that bench/gpu_suite.sh and the Makefile find them at build-dir/layer_bench and build-dir/e2e_bench.
mm_executable(layer_bench SOURCES ${CMAKE_SOURCE_DIR}/bench/layer_bench.cu ${CMAKE_SOURCE_DIR}/bench/lt_survey.cu)
mm_executable(e2e_bench SOURCES ${CMAKE_SOURCE_DIR}/bench/e2e_bench.cu)
# Every op's fp32 error against float64, next to PyTorch fp32's (make accuracy: bench/op_accuracy.py reads
# the folder this program writes).
mm_executable(op_accuracy SOURCES ${CMAKE_SOURCE_DIR}/bench/op_accuracy.cu)
# One training step's gradients and update from given weights (bench/step_accuracy.py compares them with
# float64 and PyTorch fp32, tensor by tensor).
mm_executable(step_accuracy SOURCES ${CMAKE_SOURCE_DIR}/bench/step_accuracy.cu)
# This machine's sgemm rate, the denominator of a step's roofline (bench/cpu_peer.sh).
mm_executable(sgemm_rate SOURCES ${CMAKE_SOURCE_DIR}/bench/sgemm_rate.cu MODULES runtime)
# Core attention alone, flash against unfused, forward and backward, each timed call checked first
# (bench/gpu_suite.sh: the first rate, after the tensor-core checks).
mm_executable(attention_bench SOURCES ${CMAKE_SOURCE_DIR}/bench/attention_bench.cu)
set_target_properties(layer_bench e2e_bench attention_bench op_accuracy step_accuracy sgemm_rate PROPERTIES
                      RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})

# CPU smoke tests on tiny shapes (label unit: they run anywhere, in seconds). --device cpu even on a GPU
# machine, so that the unit suite never depends on a GPU. The mpirun variant exercises the MPI grid and the
# fake-communicator emulation of sequence parallelism; the plain one the MPI-free path and the derived one.
set(MM_BENCH_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
set(MM_LAYER_TINY --device cpu --hidden 64 --heads 8 --seq 64 --batch 2 --tp-emulated 8 --reps 3 --warmup 1)
add_test(NAME bench_layer_cpu_tiny
         COMMAND $<TARGET_FILE:layer_bench> ${MM_LAYER_TINY} --mpi off --json ${CMAKE_BINARY_DIR}/bench_layer_tiny.json)
add_test(NAME bench_layer_cpu_tiny_mpi
         COMMAND ${MM_MPIRUN} -np 1 $<TARGET_FILE:layer_bench> ${MM_LAYER_TINY} --dtype f32 --sp-emulation fake-comm)
set(MM_E2E_TINY --device cpu --layers 2 --hidden 64 --heads 4 --seq 32 --batch 2 --vocab 256 --warmup 1 --steps 2
    --gemm-size 256)
add_test(NAME bench_e2e_cpu_tiny
         COMMAND $<TARGET_FILE:e2e_bench> ${MM_E2E_TINY} --json ${CMAKE_BINARY_DIR}/bench_e2e_tiny.json)
set(MM_ATTN_TINY --device cpu --heads 2 --head-dim 16 --tokens 256 --seq 64,128 --reps 1 --warmup 0)
add_test(NAME bench_attention_cpu_tiny COMMAND $<TARGET_FILE:attention_bench> ${MM_ATTN_TINY} --dropout 0.1)
add_test(NAME bench_bad_flag COMMAND $<TARGET_FILE:layer_bench> --no-such-flag)
add_test(NAME bench_sgemm_rate_tiny COMMAND $<TARGET_FILE:sgemm_rate> --n 64 --threads 1 --reps 3)
add_test(NAME bench_sgemm_rate_bad_flag COMMAND $<TARGET_FILE:sgemm_rate> --n 0)
set_tests_properties(bench_sgemm_rate_tiny PROPERTIES PASS_REGULAR_EXPRESSION "sgemm n 64, 1 thread: [0-9.]+ GFLOP/s")
set_tests_properties(bench_sgemm_rate_bad_flag PROPERTIES WILL_FAIL TRUE)
set_tests_properties(bench_layer_cpu_tiny bench_layer_cpu_tiny_mpi bench_e2e_cpu_tiny bench_attention_cpu_tiny bench_bad_flag
                     bench_sgemm_rate_tiny bench_sgemm_rate_bad_flag
                     PROPERTIES LABELS unit TIMEOUT 120 ENVIRONMENT "${MM_BENCH_ENV}")
set_tests_properties(bench_bad_flag PROPERTIES WILL_FAIL TRUE)
# What each smoke run must print: the five Table 4 rows, the no-communication note, and MFU/HFU per policy.
set_tests_properties(bench_layer_cpu_tiny PROPERTIES
                     PASS_REGULAR_EXPRESSION "selective \\+ sequence parallel.*derived.*wrote")
set_tests_properties(bench_layer_cpu_tiny_mpi PROPERTIES
                     PASS_REGULAR_EXPRESSION "selective \\+ sequence parallel +fake-comm")
set_tests_properties(bench_e2e_cpu_tiny PROPERTIES PASS_REGULAR_EXPRESSION "full.*selective.*none.*wrote")

# attention_bench checks each timed call before it prints a rate: a path whose outputs are wrong (here planted:
# flash's checked outputs overwritten with zeros) gets WRONG in place of its rate and the exit is 1, while the
# other path is still timed.
add_test(NAME bench_attention_refuses_wrong_kernel
         COMMAND bash ${CMAKE_SOURCE_DIR}/test/expect_error.sh --exit 1
                 " +64 +4 \\| WRONG \\(no rate\\) +\\| +[0-9.]+ ms"
                 $<TARGET_FILE:attention_bench> ${MM_ATTN_TINY} --dropout 0.1 --plant-zeros flash)
set_tests_properties(bench_attention_refuses_wrong_kernel PROPERTIES LABELS unit TIMEOUT 120 ENVIRONMENT "${MM_BENCH_ENV}")
set_tests_properties(bench_attention_cpu_tiny PROPERTIES PASS_REGULAR_EXPRESSION
  "check s 64, flash: .*: ok\n.*flash forward.*\n +64 +4 \\| +[0-9.]+ ms.*\n +128 +2 \\| +[0-9.]+ ms.*\nchecked: every rate above")

# bench/gpu_suite.sh: the plan on any machine (--dry-run), and its whole flow on this machine's CPU with a
# stand-in nvidia-smi, stand-in GPU tests, the binaries of this build as PREBUILT and the benchmarks' tiny CPU
# shapes (the later flags override the GPU shapes). Needs layer_bench, e2e_bench and attention_bench built.
add_test(NAME bench_gpu_suite_dry_run
         COMMAND bash ${CMAKE_SOURCE_DIR}/bench/gpu_suite.sh --dry-run ${CMAKE_BINARY_DIR}/gpu_suite_dry)
set_tests_properties(bench_gpu_suite_dry_run PROPERTIES LABELS unit TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "step 3 check_mma .*run: attention_bench --device cuda.*plan printed")
# The plan, in both modes (PREBUILT and from source), checked: the tensor-core checks before any rate, each rate
# after the checks it rests on, the flash MFU step second among the rates and inside the device time with the
# machine's start counted, and every gpu-labelled CTest test (ctest -N -L gpu) run by one step.
add_test(NAME bench_gpu_suite_dry_run_checks_order_budget
         COMMAND bash ${CMAKE_SOURCE_DIR}/bench/check_dry_run.sh ${CMAKE_BINARY_DIR} ${CMAKE_BINARY_DIR}/gpu_suite_dry2)
# Its negative controls: a rate moved before its check, the flash MFU step moved last, a rate with no gate and a
# slow machine start each fail that check, for their reason.
add_test(NAME bench_gpu_suite_dry_run_negative_controls
         COMMAND bash ${CMAKE_SOURCE_DIR}/bench/check_dry_run.sh --negative-controls ${CMAKE_BINARY_DIR}
                 ${CMAKE_BINARY_DIR}/gpu_suite_dry3)
set_tests_properties(bench_gpu_suite_dry_run_checks_order_budget bench_gpu_suite_dry_run_negative_controls
                     PROPERTIES LABELS unit TIMEOUT 120)
set_tests_properties(bench_gpu_suite_dry_run_negative_controls PROPERTIES
                     PASS_REGULAR_EXPRESSION "all 4 altered suites fail the check, each for its reason")
file(WRITE ${CMAKE_BINARY_DIR}/fake_gpu/nvidia-smi
     "#!/bin/sh\ncase \"$*\" in\n  -L) echo 'GPU 0: stand-in GPU (bench_gpu_suite_flow)' ;;\n  *) echo 'stand-in, 0' ;;\nesac\n")
file(CHMOD ${CMAKE_BINARY_DIR}/fake_gpu/nvidia-smi PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ
     GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
# Stand-ins for the GPU tests the suite's rates rest on (SUITE_TEST_BIN): each passes, or fails when its name is
# in STANDIN_FAIL. The suite's logic is under test here, not the kernels (their tests need a GPU).
foreach(t test_mma test_flash_attention test_matmul test_linear test_attention test_layernorm test_gelu test_dropout
          test_runtime test_embedding test_cross_entropy test_adamw)
  file(WRITE ${CMAKE_BINARY_DIR}/fake_gpu_tests/${t}
       "#!/bin/sh\ncase \" \${STANDIN_FAIL:-} \" in *\" ${t} \"*) echo \"stand-in ${t} $*: FAIL\"; exit 1 ;; esac\necho \"stand-in ${t} $*: pass\"\n")
  file(CHMOD ${CMAKE_BINARY_DIR}/fake_gpu_tests/${t} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ
       GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
endforeach()
string(REPLACE ";" " " MM_LAYER_TINY_STR "${MM_LAYER_TINY}")  # a CMake list would split ENVIRONMENT
string(REPLACE ";" " " MM_E2E_TINY_STR "${MM_E2E_TINY}")
string(REPLACE ";" " " MM_ATTN_TINY_STR "${MM_ATTN_TINY}")
set(MM_SUITE_FLOW_ENV "PATH=${CMAKE_BINARY_DIR}/fake_gpu:$ENV{PATH}" "PREBUILT=${CMAKE_BINARY_DIR}"
    "SUITE_TEST_BIN=${CMAKE_BINARY_DIR}/fake_gpu_tests" "OMP_NUM_THREADS=1" "LAYER_ARGS=${MM_LAYER_TINY_STR}"
    "E2E_ARGS=${MM_E2E_TINY_STR}" "ATTN_ARGS=${MM_ATTN_TINY_STR}")
add_test(NAME bench_gpu_suite_flow
         COMMAND bash ${CMAKE_SOURCE_DIR}/bench/gpu_suite.sh ${CMAKE_BINARY_DIR}/gpu_suite_flow)
set_tests_properties(bench_gpu_suite_flow PROPERTIES LABELS unit TIMEOUT 240
  ENVIRONMENT "${MM_SUITE_FLOW_ENV};SUITE_RESULTS_MD=${CMAKE_BINARY_DIR}/gpu_suite_flow_results"
  PASS_REGULAR_EXPRESSION "\\| 3 \\| check_mma \\| [^|]* \\| PASS \\|.*\n\\| 4 \\| check_flash_tc \\| [^|]* \\| PASS \\|.*\n\\| 5 \\| attention \\| [^|]* \\| ok \\|.*\n\\| 6 \\| e2e_flash \\| [^|]* \\| ok \\|.*\n.*\\| 8 \\| tests_ops \\| [^|]* \\| pass 10, fail 0, skip 0 \\|.*\n\\| 9 \\| attention_dropout \\| [^|]* \\| ok \\|.*\n\\| 10 \\| layer \\| [^|]* \\| ok \\|.*\n\\| 11 \\| layer_xl \\| [^|]* \\| ok \\|.*\n\\| 12 \\| e2e \\| [^|]* \\| ok \\|.*\n\\| 13 \\| e2e_big \\| [^|]* \\| ok \\|.*flash forward.*\n +128 +2 \\| +[0-9.]+ ms.*checked: every rate.*e2e_flash: .*\n.*selective ")
# Its negative control: the tensor-core flash test fails (a stand-in exiting 1), so no flash rate may be timed;
# the rates resting on the other tests still run.
add_test(NAME bench_gpu_suite_unchecked_not_timed
         COMMAND bash ${CMAKE_SOURCE_DIR}/bench/gpu_suite.sh ${CMAKE_BINARY_DIR}/gpu_suite_unchecked)
set_tests_properties(bench_gpu_suite_unchecked_not_timed PROPERTIES LABELS unit TIMEOUT 240
  ENVIRONMENT "${MM_SUITE_FLOW_ENV};STANDIN_FAIL=test_flash_attention;SUITE_ONLY=first;SUITE_RESULTS_MD=${CMAKE_BINARY_DIR}/gpu_suite_unchecked_results"
  PASS_REGULAR_EXPRESSION "\\| 4 \\| check_flash_tc \\| [^|]* \\| FAIL \\(rc 1\\) \\|.*\n\\| 5 \\| attention \\| [^|]* \\| not run: unchecked \\(test_gpu_flash_attention_tc: FAIL \\(rc 1\\)\\) \\|.*\n\\| 6 \\| e2e_flash \\| [^|]* \\| not run: unchecked \\(test_gpu_flash_attention_tc: FAIL \\(rc 1\\)\\) \\|"
  FAIL_REGULAR_EXPRESSION "TF/s|tokens/s")

# gemm_compare: the CPU GEMM candidates (OpenBLAS tiles, OpenBLAS / BLIS threaded, BLIS tiles, oneDNN matmul)
# side by side at the trainer's shapes (bench/PERF_NOTES.md, "CPU GEMMs side by side"). Run by hand, never by
# a test; built only on request (cmake --build build --target gemm_compare) and only where BLIS and oneDNN
# are installed (apt-get install libblis-dev libdnnl-dev): the trainer needs neither.
find_path(MM_BLIS_INCLUDE_DIR blis.h PATHS /usr/include/x86_64-linux-gnu/blis-openmp /usr/include/blis NO_DEFAULT_PATH)
find_library(MM_BLIS_LIB NAMES blis PATHS /usr/lib/x86_64-linux-gnu/blis-openmp NO_DEFAULT_PATH)
find_path(MM_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.hpp)
find_library(MM_DNNL_LIB NAMES dnnl)
if(MM_BLIS_INCLUDE_DIR AND MM_BLIS_LIB AND MM_DNNL_INCLUDE_DIR AND MM_DNNL_LIB)
  mm_executable(gemm_compare SOURCES ${CMAKE_SOURCE_DIR}/bench/gemm_compare.cu MODULES runtime matmul)
  # blis.h by its full path: BLIS's folder also has a cblas.h, which on the include path would hide OpenBLAS's.
  target_compile_definitions(gemm_compare PRIVATE "MM_BLIS_HEADER=\"${MM_BLIS_INCLUDE_DIR}/blis.h\"")
  target_include_directories(gemm_compare PRIVATE ${MM_DNNL_INCLUDE_DIR})
  # OpenBLAS before BLIS: BLIS exports cblas_sgemm too, and the program's cblas_sgemm must be OpenBLAS's
  # (it checks at start-up which library it got).
  target_link_libraries(gemm_compare PRIVATE ${OPENBLAS_LIB} ${MM_BLIS_LIB} ${MM_DNNL_LIB} ${CMAKE_DL_LIBS})
  set_target_properties(gemm_compare PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR} EXCLUDE_FROM_ALL TRUE)
else()
  message(STATUS "gemm_compare (a benchmark) not configured: it needs BLIS and oneDNN (apt-get install libblis-dev libdnnl-dev)")
endif()
