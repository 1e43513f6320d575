# The distributed optimizer (parallel/distributed_optimizer.cu, ZeRO-1 over DP) against the ordinary one, and
# the model states' measured bytes against their formula (recompute/model_state_memory.h).
mm_executable(test_distributed_optimizer SOURCES test/parallel/test_distributed_optimizer.cu)
# With vs without, 10 steps, dropout and weight decay on. Clipping not triggered: bit for bit (losses,
# parameters, gathered moments) at dp 2, with an odd parameter count (a padded shard), in bf16, and at
# tp 2 x dp 2 with SP. Clipping triggered: within float rounding. dp 4: within float rounding (MPI may add
# four ranks' gradients in another order in a reduce-scatter than in an all-reduce).
mm_test(test_distributed_optimizer_dp2 EXE test_distributed_optimizer LABELS mpi NP 2 ARGS --compare)
mm_test(test_distributed_optimizer_dp2_odd EXE test_distributed_optimizer LABELS mpi NP 2 ARGS --compare --odd)
mm_test(test_distributed_optimizer_dp2_bf16 EXE test_distributed_optimizer LABELS mpi NP 2 ARGS --compare --dtype bf16 --odd)
mm_test(test_distributed_optimizer_tp2_dp2_sp EXE test_distributed_optimizer LABELS mpi NP 4 ARGS --compare --tp 2 --sp)
mm_test(test_distributed_optimizer_pp2_dp2 EXE test_distributed_optimizer LABELS mpi NP 4 ARGS --compare --pp 2)
mm_test(test_distributed_optimizer_dp2_clipped EXE test_distributed_optimizer LABELS mpi NP 2 ARGS --compare --clip 0.05)
mm_test(test_distributed_optimizer_tp2_dp2_sp_clipped EXE test_distributed_optimizer LABELS mpi NP 4 ARGS --compare --tp 2 --sp --clip 0.05)
mm_test(test_distributed_optimizer_dp4 EXE test_distributed_optimizer LABELS mpi NP 4 ARGS --compare --odd --tolerance 1e-5)
# Measured model-state bytes == formula, fp32 and bf16, dp 1, 2 and 4; optimizer state 1/dp up to the padding.
mm_test(test_distributed_optimizer_memory_dp1 EXE test_distributed_optimizer LABELS mpi NP 1 ARGS --memory)
mm_test(test_distributed_optimizer_memory_dp2 EXE test_distributed_optimizer LABELS mpi NP 2 ARGS --memory)
mm_test(test_distributed_optimizer_memory_dp4 EXE test_distributed_optimizer LABELS mpi NP 4 ARGS --memory)
# DP bytes of one step: reduce-scatter + all-gather == all-reduce in fp32 (bf16: the all-gather halves).
mm_test(test_distributed_optimizer_bytes_dp2 EXE test_distributed_optimizer LABELS mpi NP 2 ARGS --bytes)
mm_test(test_distributed_optimizer_bytes_dp4 EXE test_distributed_optimizer LABELS mpi NP 4 ARGS --bytes)
# A NaN gradient: refused, weights untouched, the same tensor named with and without.
mm_test(test_distributed_optimizer_nan_dp2 EXE test_distributed_optimizer LABELS mpi NP 2 ARGS --nan)
# GPU: the same claims with the ranks sharing one GPU (MPI backend): bitwise at dp 2 in bf16 (odd count), the
# model-state bytes, the DP bytes.
mm_test(test_gpu_distributed_optimizer_dp2_bf16 EXE test_distributed_optimizer LABELS gpu NP 2 ARGS --compare --dtype bf16 --odd --device cuda)
mm_test(test_gpu_distributed_optimizer_memory_dp2 EXE test_distributed_optimizer LABELS gpu NP 2 ARGS --memory --device cuda)
mm_test(test_gpu_distributed_optimizer_bytes_dp2 EXE test_distributed_optimizer LABELS gpu NP 2 ARGS --bytes --device cuda)
add_test(NAME cli_zero_contradiction COMMAND ${CMAKE_SOURCE_DIR}/test/expect_error.sh --exit 2 "--zero 0 contradicts --use-distributed-optimizer"
         ${MM_MPIRUN} -np 1 $<TARGET_FILE:train_gpt> --device cpu --steps 1 --use-distributed-optimizer --zero 0)
set_tests_properties(cli_zero_contradiction PROPERTIES LABELS mpi ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
