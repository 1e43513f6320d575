# The emulator's own tests (label emulator; make test-emulated runs them with the gpu-labelled ones), the kernel
# tests' second thread order, and the race mode's tests. Negative controls are tests that must fail, run
# through expect_failure.sh, which passes only when the command ends with the expected exit status (a number,
# or SIGABRT: the emulator stopped the program) AND its output names the expected reason.
set(EMU_EXPECT bash ${EMU_DIR}/expect_failure.sh 60)
set(EMU_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
function(emu_test name)
  add_test(NAME ${name} COMMAND ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS emulator TIMEOUT 300 ENVIRONMENT "${EMU_ENV}")
endfunction()

mm_executable(emu_device_test SOURCES ${EMU_DIR}/tests/emu_device_test.cu MODULES runtime)
mm_executable(emu_race_test SOURCES ${EMU_DIR}/tests/emu_race_test.cu MODULES runtime)

if(MM_EMU_SANITIZER STREQUAL "thread")
  # ---- the race mode (build-emulated-race/, label race) -------------------------------------------------------
  # Every kernel test, under ThreadSanitizer, at a small shape (MM_GPU_TEST_SMALL: test/layers/gpu_shapes.h): a
  # race inside a block stops it (exit 66). make test-emulated-full builds and runs them all (emu_race_programs,
  # label race); CI's make test-emulated a subset (emu_race_ci_programs, label race-ci): the mode's own controls
  # and the tests of the attention kernels below, the warp-level ones (shuffles, __syncwarp, tensor-core
  # fragments and cp.async), at a fraction of the cost (this folder's build of the whole core is the most of it).
  set(EMU_RACE_CI_FILES layers/flash_attention_cuda.cu layers/flash_attention_blocks.cu layers/flash_attention_tc.cu)
  set(race_ci_tests "")
  foreach(f ${EMU_RACE_CI_FILES})
    list(APPEND race_ci_tests ${EMU_TESTS_OF_${f}})
  endforeach()
  set(race_programs emu_race_test)
  set(race_ci_programs emu_race_test)
  foreach(t ${EMU_KERNEL_TESTS})
    set_property(TEST ${t} APPEND PROPERTY LABELS race)
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT MM_GPU_TEST_SMALL=1)
    get_property(exe GLOBAL PROPERTY MM_TEST_EXE_${t})
    list(APPEND race_programs ${exe})
    if(t IN_LIST race_ci_tests)
      set_property(TEST ${t} APPEND PROPERTY LABELS race-ci)
      list(APPEND race_ci_programs ${exe})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES race_programs)
  list(REMOVE_DUPLICATES race_ci_programs)
  # What make test-emulated(-full) builds in this folder: the race tests' programs, nothing else.
  add_custom_target(emu_race_programs DEPENDS ${race_programs})
  add_custom_target(emu_race_ci_programs DEPENDS ${race_ci_programs})
  function(emu_race_test name)
    emu_test(${name} ${ARGN})
    set_tests_properties(${name} PROPERTIES LABELS "emulator;race;race-ci")
  endfunction()
  # A tiled column sum (layers/linear.cu's first barrier, in a test-local copy): with its __syncthreads, no
  # report; without it, the race on the shared tile.
  emu_race_test(emu_race_mode_tiled_with_barrier $<TARGET_FILE:emu_race_test> --with-barrier)
  emu_race_test(emu_race_mode_reports_missing_syncthreads ${EMU_EXPECT} 66
                "SUMMARY: ThreadSanitizer: data race .*emu_race_test.cu:[0-9]+ in void column_sum_kernel<false>"
                $<TARGET_FILE:emu_race_test> --without-barrier)
  # Lanes pass values through shared memory: with a __syncwarp between the writes and the reads, no report; with
  # only a shuffle there (which orders nothing but its own value), the race.
  emu_race_test(emu_race_mode_syncwarp_orders $<TARGET_FILE:emu_race_test> --with-syncwarp)
  emu_race_test(emu_race_mode_shuffle_does_not_order ${EMU_EXPECT} 66
                "SUMMARY: ThreadSanitizer: data race .*emu_race_test.cu:[0-9]+ in void lane_exchange_kernel<false>"
                $<TARGET_FILE:emu_race_test> --shuffle-only)
  # A double buffer by cp.async: with the write-after-read __syncthreads, no report; without it, the copy issued
  # into the buffer the other warp still reads is the race, the NaN fill at the issue (kernel_memset) one of its
  # two accesses, whichever thread runs first.
  emu_race_test(emu_race_mode_double_buffer $<TARGET_FILE:emu_race_test> --double-buffer)
  emu_race_test(emu_race_mode_reports_cp_async_write_after_read ${EMU_EXPECT} 66
                "#0 emu_mma::kernel_memset.* .*mma.cuh:[0-9]+"
                $<TARGET_FILE:emu_race_test> --double-buffer-no-war-barrier)
  return()
endif()

# ---- the emulated device's semantics and limits ------------------------------------------------------------------
emu_test(emu_semantics $<TARGET_FILE:emu_device_test> --semantics)
emu_test(emu_smem_64k_with_attribute $<TARGET_FILE:emu_device_test> --smem-attr)
# Negative controls: a launch over a limit is refused (cudaGetLastError, the test exits 1), or stopped (a static
# __shared__ total over 48 KB is met inside the kernel: SIGABRT).
emu_test(emu_refuses_smem_64k_without_attribute ${EMU_EXPECT} 1
         "refused: 65536 bytes of dynamic shared memory: above 48 KB .* needs cudaFuncSetAttribute"
         $<TARGET_FILE:emu_device_test> --smem-no-attr)
emu_test(emu_refuses_1025_threads ${EMU_EXPECT} 1 "refused: block 1025 x 1 x 1 = 1025 threads: at most 1024"
         $<TARGET_FILE:emu_device_test> --threads-1025)
emu_test(emu_refuses_grid_y_65536 ${EMU_EXPECT} 1 "refused: grid 1 x 65536 x 1: .*y and z at most 65535"
         $<TARGET_FILE:emu_device_test> --grid-y-65536)
emu_test(emu_refuses_static_smem_49k ${EMU_EXPECT} SIGABRT
         "static_49k_kernel: static __shared__ memory of 50176 bytes .* above the 48 KB"
         $<TARGET_FILE:emu_device_test> --static-smem-49k)
emu_test(emu_unsynced_host_read_is_nan ${EMU_EXPECT} 1 "read before the synchronization: NaN, after it: the copied values"
         $<TARGET_FILE:emu_device_test> --unsynced-read)

# ---- synccheck: barriers and warp collectives misused stop the program, naming the kernel and the line ---------
emu_test(emu_synccheck_divergent_barrier_deadlock ${EMU_EXPECT} SIGABRT
         "synccheck: kernel half_barrier_kernel, block \\(0,0,0\\): deadlock: 64 of 128 live threads wait at __syncthreads at .*emu_device_test.cu:[0-9]+.* in __syncwarp at .*emu_device_test.cu:[0-9]+"
         $<TARGET_FILE:emu_device_test> --divergent-barrier)
emu_test(emu_synccheck_barrier_at_two_lines ${EMU_EXPECT} SIGABRT
         "synccheck: kernel two_barriers_kernel, block \\(0,0,0\\): thread \\(1,0,0\\) reaches __syncthreads at .*emu_device_test.cu:[0-9]+ while 1 threads of the block wait at __syncthreads at .*emu_device_test.cu:[0-9]+"
         $<TARGET_FILE:emu_device_test> --barrier-lines)
emu_test(emu_synccheck_mask_names_exited_lane ${EMU_EXPECT} SIGABRT
         "synccheck: kernel exited_lane_kernel, block \\(0,0,0\\): __shfl_sync at .*emu_device_test.cu:[0-9]+: mask 0xffffffff names lanes 0x0000ffff of warp 0 that do not exist or have exited"
         $<TARGET_FILE:emu_device_test> --exited-lane)
emu_test(emu_synccheck_mask_without_caller ${EMU_EXPECT} SIGABRT
         "synccheck: kernel own_lane_kernel, block \\(0,0,0\\): thread 5 calls __syncwarp at .*emu_device_test.cu:[0-9]+ with mask 0x0000000f that does not name its own lane 5"
         $<TARGET_FILE:emu_device_test> --mask-without-caller)

# ---- thread order: a missing barrier is caught whichever thread writes first -------------------------------------
# missing_barrier_kernel: thread t writes s[t], then (no __syncthreads) reads s[t - 1], written by a thread of
# LOWER index: in the forward order that thread has always run first, so it passes there (the blind spot of a
# fixed order); in reverse, and shuffled, the read comes first and finds the NaN pattern.
emu_test(emu_order_forward_misses_it $<TARGET_FILE:emu_device_test> --missing-barrier)
emu_test(emu_order_reverse_catches_missing_barrier ${EMU_EXPECT} 1
         "missing_barrier_kernel: 255 of 255 neighbour reads wrong" $<TARGET_FILE:emu_device_test> --missing-barrier)
set_property(TEST emu_order_reverse_catches_missing_barrier APPEND PROPERTY ENVIRONMENT EMU_THREAD_ORDER=reverse)
emu_test(emu_order_shuffle_catches_missing_barrier ${EMU_EXPECT} 1
         "thread order shuffled, seed 42 .EMU_THREAD_ORDER=shuffle:42 repeats it" $<TARGET_FILE:emu_device_test>
         --missing-barrier)
set_property(TEST emu_order_shuffle_catches_missing_barrier APPEND PROPERTY ENVIRONMENT EMU_THREAD_ORDER=shuffle:42)
emu_test(emu_order_refuses_unknown ${EMU_EXPECT} SIGABRT
         "EMU_THREAD_ORDER=sideways: expected forward, reverse, shuffle or shuffle:SEED"
         $<TARGET_FILE:emu_device_test> --semantics)
set_property(TEST emu_order_refuses_unknown APPEND PROPERTY ENVIRONMENT EMU_THREAD_ORDER=sideways)
# The emulator's semantics hold in every order.
emu_test(emu_semantics_reverse $<TARGET_FILE:emu_device_test> --semantics)
set_property(TEST emu_semantics_reverse APPEND PROPERTY ENVIRONMENT EMU_THREAD_ORDER=reverse)
emu_test(emu_semantics_shuffle $<TARGET_FILE:emu_device_test> --semantics)
set_property(TEST emu_semantics_shuffle APPEND PROPERTY ENVIRONMENT EMU_THREAD_ORDER=shuffle:7)
# Every kernel test again in reverse order (label gpu): with the forward run, a missing barrier is caught
# whichever of its two threads writes first. At the race mode's small shapes (MM_GPU_TEST_SMALL, gpu_shapes.h:
# still every kernel, several tiles), which keep CI's cost down; make test-emulated-full runs every gpu test in
# reverse at its own shapes.
foreach(t ${EMU_KERNEL_TESTS})
  emu_variant_test(${t}_reverse ${t} ENV EMU_THREAD_ORDER=reverse MM_GPU_TEST_SMALL=1 LABELS gpu)
endforeach()

# ---- memcheck: one element past a device allocation or a shared array stops the kernel ----------------------------
if(MM_EMU_SANITIZER STREQUAL "address")
  emu_test(emu_memcheck_global_one_past_the_end ${EMU_EXPECT} SIGABRT
           "emulated CUDA: memcheck: kernel oob_global_kernel, block \\(1,0,0\\), thread \\(122,0,0\\): write of 4 bytes at 0x[0-9a-f]+, 0 bytes past the end of the cudaMalloc allocation of 1000 bytes at 0x[0-9a-f]+ at .*emu_device_test.cu:[0-9]+"
           $<TARGET_FILE:emu_device_test> --oob-global)
  emu_test(emu_memcheck_static_shared_one_past_the_end ${EMU_EXPECT} SIGABRT
           "emulated CUDA: memcheck: kernel oob_static_kernel, block \\(0,0,0\\), thread \\(63,0,0\\): write of 4 bytes at 0x[0-9a-f]+, 0 bytes past the end of the shared array 'tile' \\(252 bytes, declared at .*emu_device_test.cu:[0-9]+\\) at .*emu_device_test.cu:[0-9]+"
           $<TARGET_FILE:emu_device_test> --oob-static)
  emu_test(emu_memcheck_dynamic_shared_one_past_the_end ${EMU_EXPECT} SIGABRT
           "emulated CUDA: memcheck: kernel oob_dynamic_kernel, block \\(0,0,0\\), thread \\(0,0,0\\): read of 4 bytes at 0x[0-9a-f]+, 0 bytes past the end of the dynamic shared memory of the launch \\(400 bytes\\) at .*emu_device_test.cu:[0-9]+"
           $<TARGET_FILE:emu_device_test> --oob-dynamic)
endif()

# ---- the emulated cp.async (mma.cuh): a copy never waited for stops the program at its thread's exit -------------
emu_test(emu_cp_async_unwaited_at_exit ${EMU_EXPECT} SIGABRT
         "emulated CUDA: cp.async in block \\(0,0,0\\), thread \\(0,0,0\\): kernel unwaited_copy_kernel: the thread ends with 1 cp.async copies never waited for"
         $<TARGET_FILE:emu_device_test> --cp-async-unwaited)

# ---- no silent skips ----------------------------------------------------------------------------------------------
# A gpu test that finds no GPU (CUDA_VISIBLE_DEVICES empty: the emulated runtime and nvidia-smi then show none)
# exits 77; here that fails the run, both for a test of mm_test and for one registered with SKIP_RETURN_CODE.
emu_test(emu_skip_fails_the_run bash ${EMU_DIR}/skip_fails_the_run.sh ${CMAKE_BINARY_DIR} test_gpu_gelu
         cli_gpu_flash_head_dim)

# ---- mutants ------------------------------------------------------------------------------------------------------
# The list of make mutants is complete: every barrier and static shared array of the kernel files is in it (an
# independent count of the tokens), each file has its gpu tests, and each mutant applies.
emu_test(emu_mutants_enumeration ${Python3_EXECUTABLE} ${EMU_DIR}/mutants.py check --root ${CMAKE_SOURCE_DIR}
         --map ${CMAKE_BINARY_DIR}/emu_kernel_tests.txt)
# Negative control (issue 41): the flash forward kernel with its key bound off by one, a mutant of
# layers/flash_attention_cuda.cu: a key past the end of a partial key tile is let in, and test_flash_attention --gpu
# fails on the forward's output (at its small shapes, which have partial key tiles: seconds, not minutes).
emu_mutant(emu_flash_key_bound_off_by_one SOURCE layers/flash_attention_cuda.cu
           MUTATION --after "The causal mask by global position (k_pos + k <= q_pos + q)" --replace "k < Sk" "k < Sk + 1"
           TESTS test_gpu_flash_attention LABELS emulator ENV MM_GPU_TEST_SMALL=1
           EXPECT 1 "FAIL .*test_flash_attention.cu:[0-9]+: norm_rel_err\\(gpu.o, cpu.o\\) < tol: flash")
