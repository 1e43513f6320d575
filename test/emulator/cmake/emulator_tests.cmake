# The emulator's own tests (label emulator; make test-emulated runs them after the gpu-labelled ones).
# Negative controls are tests that must fail, run through expect_failure.sh, which passes only when the
# command exits non-zero AND its output names the expected reason.
set(EMU_EXPECT bash ${EMU_DIR}/expect_failure.sh 60)
set(EMU_EXPECT_SLOW bash ${EMU_DIR}/expect_failure.sh 300)
set(EMU_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
function(emu_test name)
  add_test(NAME ${name} COMMAND ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS emulator TIMEOUT 300 ENVIRONMENT "${EMU_ENV}")
endfunction()

mm_executable(emu_device_test SOURCES ${EMU_DIR}/tests/emu_device_test.cu MODULES runtime)
emu_test(emu_semantics $<TARGET_FILE:emu_device_test> --semantics)
emu_test(emu_smem_64k_with_attribute $<TARGET_FILE:emu_device_test> --smem-attr)
# Negative control: more than 48 KB of dynamic shared memory without cudaFuncSetAttribute is refused.
emu_test(emu_refuses_smem_64k_without_attribute ${EMU_EXPECT}
         "refused: 65536 bytes of dynamic shared memory: above 48 KB .* needs cudaFuncSetAttribute"
         $<TARGET_FILE:emu_device_test> --smem-no-attr)
emu_test(emu_refuses_1025_threads ${EMU_EXPECT} "refused: block 1025 x 1 x 1 = 1025 threads: at most 1024"
         $<TARGET_FILE:emu_device_test> --threads-1025)
emu_test(emu_refuses_grid_y_65536 ${EMU_EXPECT} "refused: grid 1 x 65536 x 1: .*y and z at most 65535"
         $<TARGET_FILE:emu_device_test> --grid-y-65536)
emu_test(emu_refuses_static_smem_49k ${EMU_EXPECT} "static_49k_kernel: static __shared__ memory of 50176 bytes .* above the 48 KB"
         $<TARGET_FILE:emu_device_test> --static-smem-49k)
emu_test(emu_reports_divergent_barrier ${EMU_EXPECT} "half_barrier_kernel, block \\(0,0,0\\): deadlock"
         $<TARGET_FILE:emu_device_test> --divergent-barrier)
emu_test(emu_unsynced_host_read_is_nan ${EMU_EXPECT} "read before the synchronization: NaN, after it: the copied values"
         $<TARGET_FILE:emu_device_test> --unsynced-read)

# The race mode: the test program and the emulator built with ThreadSanitizer (one TSan fiber per CUDA
# thread, CUDA's barriers as the only happens-before edges inside a block; launch.cpp).
emu_sources(EMU_RACE_SRC EMU_RACE_DIRS ${EMU_DIR}/tests/emu_race_test.cu)
_add_executable(emu_race_test ${EMU_RACE_SRC})
target_compile_options(emu_race_test PRIVATE -include cuda_runtime.h -fno-extern-tls-init -fsanitize=thread -g -O1)
target_link_libraries(emu_race_test PRIVATE mm_emulated_tsan)
emu_test(emu_race_mode_tiled_with_barrier $<TARGET_FILE:emu_race_test> --with-barrier)
set_property(TEST emu_race_mode_tiled_with_barrier APPEND PROPERTY ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1:exitcode=66")
# Negative control: the tiled kernel with its first __syncthreads removed is reported as a race on the tile.
emu_test(emu_race_mode_reports_missing_syncthreads ${EMU_EXPECT}
         "SUMMARY: ThreadSanitizer: data race .*emu_race_test.cu:[0-9]+ in void column_sum_kernel<false>"
         $<TARGET_FILE:emu_race_test> --without-barrier)

# Negative control: the flash forward kernel with its key bound off by one (layers/flash_attention.cu,
# MM_FLASH_KEY_BOUND_BUG) lets a key past the end of a partial key tile in; test_flash_attention fails.
emu_sources(EMU_FLASH_BUG_SRC EMU_FLASH_BUG_DIRS ${CMAKE_SOURCE_DIR}/layers/flash_attention.cu)
_add_library(mm_flash_attention_key_bound_bug OBJECT ${EMU_FLASH_BUG_SRC})
target_include_directories(mm_flash_attention_key_bound_bug PRIVATE ${EMU_FLASH_BUG_DIRS})
target_compile_definitions(mm_flash_attention_key_bound_bug PRIVATE MM_FLASH_KEY_BOUND_BUG=1)
target_link_libraries(mm_flash_attention_key_bound_bug PUBLIC mm_deps)
mm_executable(test_flash_attention_key_bound_bug SOURCES test/layers/test_flash_attention.cu
              MODULES flash_attention_key_bound_bug flash_attention_tc attention matmul runtime)
emu_test(emu_flash_partial_tile_off_by_one_fails ${EMU_EXPECT_SLOW}
         "FAIL .*test_flash_attention.cu:[0-9]+: norm_rel_err\\(gpu.o, cpu.o\\) < tol: flash"
         $<TARGET_FILE:test_flash_attention_key_bound_bug> --gpu)
set_tests_properties(emu_flash_partial_tile_off_by_one_fails PROPERTIES TIMEOUT 400)
