# One test per op file of layers/ (test/layers/test_<op>.cu), each registered twice from one executable:
#   test_<op>      label unit: the fast CPU path against the op's plain math, layers/reference/<op>.h (--cpu;
#                  make test-asan runs these)
#   test_gpu_<op>  label gpu:  every CUDA kernel of the op against the fast CPU path and the same reference
#                  (--gpu; exits 77, a skip, when no GPU is visible)
# MODULES: the op's own object library and what it calls, nothing else.
mm_test(test_matmul SOURCES test/layers/test_matmul.cu MODULES matmul runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_matmul EXE test_matmul LABELS gpu ARGS --gpu)
mm_test(test_linear SOURCES test/layers/test_linear.cu MODULES linear weight_grad_queue activation_allocator rank_memory matmul runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_linear EXE test_linear LABELS gpu ARGS --gpu)
mm_test(test_attention SOURCES test/layers/test_attention.cu MODULES attention matmul runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_attention EXE test_attention LABELS gpu ARGS --gpu)
mm_test(test_flash_attention SOURCES test/layers/test_flash_attention.cu MODULES flash_attention flash_attention_cpu
        flash_attention_cuda flash_attention_blocks flash_attention_tc
        attention matmul runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_flash_attention EXE test_flash_attention LABELS gpu ARGS --gpu)
# The bf16 kernels on tensor cores (layers/flash_attention_tc.cu) over the issue's shapes (gpu_shapes.h,
# kFlashTcGpuCases), apart from --gpu so that the two can run side by side.
mm_test(test_gpu_flash_attention_tc EXE test_flash_attention LABELS gpu ARGS --gpu-tc)
mm_test(test_embedding SOURCES test/layers/test_embedding.cu MODULES embedding runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_embedding EXE test_embedding LABELS gpu ARGS --gpu)
mm_test(test_cross_entropy SOURCES test/layers/test_cross_entropy.cu MODULES cross_entropy runtime LABELS unit
        ARGS --cpu)
mm_test(test_gpu_cross_entropy EXE test_cross_entropy LABELS gpu ARGS --gpu)
mm_test(test_dropout SOURCES test/layers/test_dropout.cu MODULES dropout runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_dropout EXE test_dropout LABELS gpu ARGS --gpu)
mm_test(test_layernorm SOURCES test/layers/test_layernorm.cu MODULES layernorm runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_layernorm EXE test_layernorm LABELS gpu ARGS --gpu)
mm_test(test_gelu SOURCES test/layers/test_gelu.cu MODULES gelu runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_gelu EXE test_gelu LABELS gpu ARGS --gpu)
mm_test(test_adamw SOURCES test/layers/test_adamw.cu MODULES adamw runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_adamw EXE test_adamw LABELS gpu ARGS --gpu)
# Philox is header-only host/device code; the GPU kernels' masks are compared bit for bit in test_gpu_dropout
# and test_gpu_attention, so this one has CPU checks only.
mm_test(test_philox SOURCES test/layers/test_philox.cu MODULES runtime LABELS unit ARGS --cpu)
# The runtime's buffers: tensor_convert and the host round trips (the stream-ordered ones of a step's path).
mm_test(test_runtime SOURCES test/layers/test_runtime.cu MODULES runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_runtime EXE test_runtime LABELS gpu ARGS --gpu)
# Every kernel instantiation the trainer can pick is reached by a gpu test's shape (test/layers/gpu_shapes.h);
# the choices are host functions, so this runs without a GPU.
mm_test(test_kernel_coverage SOURCES test/layers/test_kernel_coverage.cu MODULES attention layernorm linear weight_grad_queue activation_allocator rank_memory matmul
        runtime LABELS unit)
# The tensor-core kernels' instruction budget (bench/sass_budget.py): instructions per HMMA in each kernel's main
# loop, counted on this build's own sm_90 SASS of flash_attention_tc.cu (cuobjdump -sass), no GPU. A count of the
# kernels' code, not a speed: the verdict is that every kernel's loop was found and counted (exit 77, a skip,
# without cuobjdump: pip install nvidia-cuda-cuobjdump). The negative control: a listing without the kernels is
# refused, naming what it could not count.
if(NOT MM_EMULATED AND "90" IN_LIST CMAKE_CUDA_ARCHITECTURES)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  add_test(NAME test_sass_budget COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/bench/sass_budget.py --check
           --object $<TARGET_OBJECTS:mm_flash_attention_tc>)
  add_test(NAME test_sass_budget_refuses_other_code COMMAND bash ${CMAKE_SOURCE_DIR}/test/emulator/expect_failure.sh 60 1
           "sass_budget: not counted: forward HDB=32 \\(no such kernel\\)"
           ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/bench/sass_budget.py --check --sass ${CMAKE_SOURCE_DIR}/bench/sass_budget.py)
  set_tests_properties(test_sass_budget test_sass_budget_refuses_other_code PROPERTIES LABELS unit TIMEOUT 120
                       SKIP_RETURN_CODE 77)
endif()
# The tensor-core wrappers (layers/mma.cuh; on the emulated GPU, test/emulator/include/mma.cuh): --cpu checks this
# test's own transcription of the PTX ISA's fragment layouts, --gpu each wrapper against plain matrix products.
# The test includes "mma.cuh" by its plain name, as the kernels do: from layers/ here, and in the emulated build
# the emulator's copy, whose folder comes first on that build's include path.
mm_test(test_mma SOURCES test/layers/test_mma.cu MODULES runtime LABELS unit ARGS --cpu)
mm_test(test_gpu_mma EXE test_mma LABELS gpu ARGS --gpu)
target_include_directories(test_mma PRIVATE ${CMAKE_SOURCE_DIR}/layers)
if(MM_EMULATED)
  # Negative controls of the emulation (test/emulator/expect_failure.sh: exit 1, a failed check, AND the reason):
  # a kernel that assumes another fragment layout than the ISA's computes a wrong product; a tile read before its
  # cp.async.wait_group is not the copied one (the emulated copies land at the wait).
  add_test(NAME emu_mma_wrong_fragment_layout_fails COMMAND bash ${CMAKE_SOURCE_DIR}/test/emulator/expect_failure.sh 60 1
           "FAIL .*test_mma.cu:[0-9]+: .*A's registers 1 and 2 swapped == C \\+ A·B: worst error"
           $<TARGET_FILE:test_mma> --gpu-wrong-layout)
  add_test(NAME emu_cp_async_without_wait_fails COMMAND bash ${CMAKE_SOURCE_DIR}/test/emulator/expect_failure.sh 60 1
           "FAIL .*test_mma.cu:[0-9]+: .*cp_async_16 read before cp_async_wait: [0-9]+ bytes not"
           $<TARGET_FILE:test_mma> --gpu-cp-async-without-wait)
  set_tests_properties(emu_mma_wrong_fragment_layout_fails emu_cp_async_without_wait_fails PROPERTIES
    LABELS emulator TIMEOUT 120
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endif()
