# Tests of parallel/ that mirror its files: tensor_parallel.cu, sequence_parallel.cu, vocab_parallel.cu, each
# on 1, 2 and 4 ranks (a group of one rank turns every collective into a copy or a no-op).
mm_executable(test_tensor_parallel SOURCES test/parallel/test_tensor_parallel.cu)
mm_executable(test_sequence_parallel SOURCES test/parallel/test_sequence_parallel.cu)

# f / f̄, column- and row-parallel linear (plain TP) against the unsplit linear; weight slices.
mm_test(test_tensor_parallel_np2 EXE test_tensor_parallel LABELS mpi NP 2)
mm_test(test_tensor_parallel_np4 EXE test_tensor_parallel LABELS mpi NP 4)
mm_test(test_tensor_parallel_np1 EXE test_tensor_parallel LABELS mpi NP 1)
# g / ḡ against the collectives, sp_shard, the SP halves of the linear layers, the re-gather count, the SP
# gradient sum and its parameter set.
mm_test(test_sequence_parallel_np2 EXE test_sequence_parallel LABELS mpi NP 2)
mm_test(test_sequence_parallel_np4 EXE test_sequence_parallel LABELS mpi NP 4)
mm_test(test_sequence_parallel_np1 EXE test_sequence_parallel LABELS mpi NP 1)
# Vocabulary-parallel embedding (TP and SP) and cross-entropy at tp = world against tp 1.
mm_executable(test_vocab_parallel SOURCES test/parallel/test_vocab_parallel.cu)
mm_test(test_vocab_parallel_np2 EXE test_vocab_parallel LABELS mpi NP 2)
mm_test(test_vocab_parallel_np4 EXE test_vocab_parallel LABELS mpi NP 4)
# What a pipeline stage holds and owns, and the copies between the whole model's layout and a stage's
# (parallel/pipeline_stage.cu): p = 1, 2, 4 stages, m = 1, 2 chunks, on the CPU without MPI.
mm_test(test_pipeline_stage SOURCES test/parallel/test_pipeline_stage.cu MODULES pipeline_stage runtime LABELS unit)
# Context parallelism (parallel/context_parallel.cu): zigzag positions, and ring attention's out, lse, dQ, dK,
# dV against full attention on one rank, its block counts and bytes, on c = 2 and 4 ranks (and 3: a ring of
# an odd size), under the default and the strict (NCCL's) point-to-point rules.
mm_executable(test_context_parallel SOURCES test/parallel/test_context_parallel.cu)
mm_test(test_context_parallel_np2 EXE test_context_parallel LABELS mpi NP 2)
mm_test(test_context_parallel_np3 EXE test_context_parallel LABELS mpi NP 3)
mm_test(test_context_parallel_np4 EXE test_context_parallel LABELS mpi NP 4)
mm_test(test_context_parallel_np1 EXE test_context_parallel LABELS mpi NP 1)
# The same on a GPU (two ranks sharing it over the MPI backend), against the CPU reference.
mm_test(test_gpu_context_parallel_np2 EXE test_context_parallel LABELS gpu NP 2 ARGS --device cuda)
