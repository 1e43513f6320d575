# Two or more GPUs (label gpu; exit 77 elsewhere): the trainer over NCCL, one rank per GPU, against the same
# layout on CPU ranks over MPI (test/parallel/test_multi_gpu.sh). The CPU reference gets 4 OpenMP threads a
# rank: a GPU machine has the cores, and 1 thread would take minutes at this model size.
set(MM_MULTI_GPU_TOOLS $<TARGET_FILE:train_gpt> $<TARGET_FILE:prepare_data> ${CMAKE_SOURCE_DIR} "${MPIEXEC_EXECUTABLE}")
function(mm_multi_gpu_test name)
  add_test(NAME ${name} COMMAND bash ${CMAKE_SOURCE_DIR}/test/parallel/test_multi_gpu.sh ${MM_MULTI_GPU_TOOLS}
           ${name} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 600
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=4;OPENBLAS_NUM_THREADS=4")
  # On the emulated device the NCCL of test/emulator runs on MPI with no 4 MiB buffers to split a message into,
  # so the 768-wide model buys nothing there and cost ~5 minutes a test: a small model (MM_GPU_TEST_SMALL).
  if(MM_EMULATED)
    set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT MM_GPU_TEST_SMALL=1)
  endif()
endfunction()
mm_multi_gpu_test(test_gpu2_nccl_tp2_sp --tp 2 --sp)
mm_multi_gpu_test(test_gpu2_nccl_dp2_distributed_optimizer --tp 1 --use-distributed-optimizer)
mm_multi_gpu_test(test_gpu2_nccl_pp2_1f1b --pp 2 --pipeline-schedule 1f1b)
mm_multi_gpu_test(test_gpu2_nccl_pp2_interleaved --pp 2 --pipeline-schedule interleaved
                  --num-layers-per-virtual-pipeline-stage 1)
