# The emulated cuBLAS/cuBLASLt and NCCL (cublas.cc, nccl.cc: part of the mm_emulated library) and the whole
# trainer on the emulated GPU. Only in the emulated build (MM_EMULATED=ON, make test-emulated); the real
# build skips this file.
if(NOT MM_EMULATED)
  return()
endif()
set(EMU_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")

# cuBLAS / cuBLASLt against a double triple loop; a host pointer handed to cublasGemmEx must stop the program
# (negative control: SIGABRT, the emulator's fatal error, naming the call).
set(EMU_EXPECT_STATUS bash ${EMU_DIR}/expect_failure.sh 120)
add_executable(emu_cublas_test ${EMU_DIR}/cublas_test.cc)
target_link_libraries(emu_cublas_test PRIVATE mm_emulated)
add_test(NAME emu_cublas COMMAND $<TARGET_FILE:emu_cublas_test>)
add_test(NAME emu_cublas_outside_device_memory COMMAND ${EMU_EXPECT_STATUS} SIGABRT
         "emulated CUDA: cublasGemmEx: .* is not inside one live cudaMalloc allocation" $<TARGET_FILE:emu_cublas_test> outside)

# NCCL at 2 ranks: the collectives and exchanges; both ranks sending first must deadlock (then ncclCommAbort
# stops it); a short receive must show as the async error. The last two check the failure themselves: exit 0,
# and the line that says what was seen.
add_executable(emu_nccl_test ${EMU_DIR}/nccl_test.cc)
target_link_libraries(emu_nccl_test PRIVATE mm_emulated)
add_test(NAME emu_nccl_np2 COMMAND ${MM_MPIRUN} -np 2 $<TARGET_FILE:emu_nccl_test> checks)
add_test(NAME emu_nccl_send_first_deadlocks_np2 COMMAND ${EMU_EXPECT_STATUS} 0
         "rank 0: deadlock as on NCCL .* stopped the pending send .send: no error"
         ${MM_MPIRUN} -np 2 $<TARGET_FILE:emu_nccl_test> deadlock)
add_test(NAME emu_nccl_short_receive_async_error_np2 COMMAND ${EMU_EXPECT_STATUS} 0
         "rank 1: a receive of 524288 bytes for a message of 1048576: async error .unhandled system error"
         ${MM_MPIRUN} -np 2 $<TARGET_FILE:emu_nccl_test> truncate)
set_tests_properties(emu_cublas emu_cublas_outside_device_memory emu_nccl_np2 emu_nccl_send_first_deadlocks_np2
  emu_nccl_short_receive_async_error_np2 PROPERTIES LABELS "gpu;emulator" TIMEOUT 120 ENVIRONMENT "${EMU_ENV}")

# The trainer, --device cuda on the emulated GPU against its own CPU path (trainer_vs_cpu.sh).
function(emu_trainer_test name np dtype)
  add_test(NAME ${name} COMMAND bash ${EMU_DIR}/trainer_vs_cpu.sh $<TARGET_FILE:train_gpt> $<TARGET_FILE:prepare_data>
           ${CMAKE_SOURCE_DIR} "${MPIEXEC_EXECUTABLE}" ${name} ${np} ${dtype} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS gpu TIMEOUT 600 ENVIRONMENT "${EMU_ENV}")
endfunction()
emu_trainer_test(emu_trainer_fp32_unfused 1 fp32 --attention unfused)
emu_trainer_test(emu_trainer_fp32_flash 1 fp32 --attention flash)
emu_trainer_test(emu_trainer_bf16_unfused 1 bf16 --attention unfused)
emu_trainer_test(emu_trainer_bf16_flash 1 bf16 --attention flash)
emu_trainer_test(emu_trainer_tp2_sp 2 fp32 --tp 2 --sp)
emu_trainer_test(emu_trainer_pp2_1f1b 2 fp32 --pp 2 --pipeline-schedule 1f1b --micro-batch-size 1)
emu_trainer_test(emu_trainer_pp2_interleaved 2 fp32 --pp 2 --pipeline-schedule interleaved --micro-batch-size 1
                 --num-layers-per-virtual-pipeline-stage 1)
emu_trainer_test(emu_trainer_pp2_zbh1 2 fp32 --pp 2 --pipeline-schedule zb-h1 --micro-batch-size 1)
emu_trainer_test(emu_trainer_cp2 2 fp32 --cp 2)
emu_trainer_test(emu_trainer_dp2_distributed_optimizer 2 fp32 --use-distributed-optimizer)
emu_trainer_test(emu_trainer_pp2_zero3_offload_first_stage 4 bf16 --pp 2 --zero 3 --micro-batch-size 1
                 --offload-beyond-in-flight last-stage)

# --trace on the GPU keeps the streams' order and overlap (layers/trace.h: spans timed by events on their streams):
# test/train/trace_gpu_test.sh, with its corrupted copies.
add_test(NAME emu_trace_keeps_overlap COMMAND bash ${CMAKE_SOURCE_DIR}/test/train/trace_gpu_test.sh $<TARGET_FILE:train_gpt>
         $<TARGET_FILE:prepare_data> ${CMAKE_SOURCE_DIR} "${MPIEXEC_EXECUTABLE}")
set_tests_properties(emu_trace_keeps_overlap PROPERTIES LABELS gpu TIMEOUT 300 ENVIRONMENT "${EMU_ENV}")

# Negative control: ring attention without its event wait fails the CP equivalence (trainer_cp_without_wait.sh).
add_test(NAME emu_cp_ring_without_wait_fails COMMAND bash ${EMU_DIR}/trainer_cp_without_wait.sh "${MPIEXEC_EXECUTABLE}"
         $<TARGET_FILE:test_equivalence>)
set_tests_properties(emu_cp_ring_without_wait_fails PROPERTIES LABELS gpu TIMEOUT 600 ENVIRONMENT "${EMU_ENV}")

# bf16 flash attention on tensor cores (layers/flash_attention_tc.cu) through the whole trainer, at head dimension
# 64 (--hidden 128 --heads 2 after the script's own flags: the last one wins), at the layouts that cut attention
# differently: one rank, a rank's heads (tp 2 + SP), a stage's layers (pp 2, 1F1B) and ring attention's blocks
# (cp 2: the same kernels on each block), the last two with dropout 0.1 (the masks of the CPU path, drawn at global
# positions). emu_trainer_bf16_flash above is one rank at head dimension 16.
emu_trainer_test(emu_trainer_bf16_flash_hd64 1 bf16 --attention flash --hidden 128 --heads 2)
emu_trainer_test(emu_trainer_bf16_flash_tp2_sp 2 bf16 --attention flash --hidden 128 --heads 2 --tp 2 --sp)
emu_trainer_test(emu_trainer_bf16_flash_pp2 2 bf16 --attention flash --hidden 128 --heads 2 --pp 2
                 --pipeline-schedule 1f1b --micro-batch-size 1 --dropout 0.1)
emu_trainer_test(emu_trainer_bf16_flash_cp2 2 bf16 --attention flash --hidden 128 --heads 2 --cp 2 --dropout 0.1)
