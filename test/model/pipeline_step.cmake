# model/pipeline_step.cu under NCCL's point-to-point rules (--comm mpi-strict: rendezvous sends, one tag, the
# order check on; parallel/point_to_point.h): every schedule at p 2 and 4 with M < p, M = p and M > p (interleaved:
# M = p and 2p, the layouts it allows), tp 2 x pp 2 with SP, and pp 2 x dp 2 with the distributed optimizer,
# each against the single-rank run (test_equivalence, 3 training steps), as without the strict rules.
foreach(layout
    "afab_pp2_M1|2|--pp 2 --schedule afab --micro 1"
    "afab_pp2_M2|2|--pp 2 --schedule afab --micro 2"
    "afab_pp2_M4|2|--pp 2 --schedule afab --micro 4"
    "1f1b_pp2_M1|2|--pp 2 --micro 1"
    "1f1b_pp2_M2|2|--pp 2 --micro 2"
    "1f1b_pp2_M4|2|--pp 2 --micro 4"
    "interleaved_pp2_M2|2|--pp 2 --chunks 2 --schedule interleaved --micro 2"
    "interleaved_pp2_M4|2|--pp 2 --chunks 2 --schedule interleaved --micro 4"
    "afab_pp4_M2|4|--pp 4 --schedule afab --micro 2"
    "afab_pp4_M4|4|--pp 4 --schedule afab --micro 4"
    "afab_pp4_M8|4|--pp 4 --schedule afab --micro 8 --batch 8"
    "1f1b_pp4_M2|4|--pp 4 --micro 2"
    "1f1b_pp4_M4|4|--pp 4 --micro 4"
    "1f1b_pp4_M8|4|--pp 4 --micro 8 --batch 8"
    "interleaved_pp4_M4|4|--pp 4 --chunks 2 --schedule interleaved --micro 4"
    "interleaved_pp4_M8|4|--pp 4 --chunks 2 --schedule interleaved --micro 8 --batch 8"
    "sp_tp2_pp2|4|--tp 2 --sp --pp 2 --micro 2"
    "pp2_dp2_zero|4|--pp 2 --micro 2 --distributed-optimizer")
  string(REPLACE "|" ";" parts "${layout}")
  list(GET parts 0 name)
  list(GET parts 1 np)
  list(GET parts 2 flags)
  separate_arguments(flags)
  if(NOT flags MATCHES "--tp")
    list(PREPEND flags --tp 1)
  endif()
  mm_test(test_equivalence_strict_${name} EXE test_equivalence LABELS mpi NP ${np} TIMEOUT 120
          ARGS ${flags} --comm mpi-strict --comm-timeout 60 --steps 3)
endforeach()

# Negative control: the order before grouping (each receive alone before its op, each send alone after it)
# deadlocks under the strict rules; the 2 s timeout stops every rank with a message naming this stage, the
# operation, the peer and the micro-batch.
add_test(NAME test_equivalence_strict_ungrouped_deadlocks COMMAND ${CMAKE_SOURCE_DIR}/test/expect_error.sh
         "comm timeout: rank [01] of a group of 2 waited 2.0 s .--comm-timeout. for the (send|receive) of the (activation|gradient) of micro-batch [0-9]+ .chunk 0. (to|from) stage [01] in the exchange .ungrouped. (before|after) [FB][0-9]+[.]0 on stage [01]"
         ${MM_MPIRUN} -np 2 $<TARGET_FILE:test_equivalence> --tp 1 --pp 2 --micro 4 --comm mpi-strict --comm-timeout 2 --ungrouped-p2p --steps 0)
set_tests_properties(test_equivalence_strict_ungrouped_deadlocks PROPERTIES LABELS mpi TIMEOUT 90
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")

# A stage stopped mid-step (SIGSTOP, the hidden flag --stop-stage-at: layers/test_hooks.h) in a 2-stage run: the
# other stage exits non-zero within --comm-timeout plus a few seconds, naming the stage it waited for.
add_test(NAME pipeline_peer_stopped COMMAND bash ${CMAKE_SOURCE_DIR}/test/model/pipeline_peer_stopped.sh
         $<TARGET_FILE:train_gpt> $<TARGET_FILE:prepare_data> ${CMAKE_SOURCE_DIR} "${MPIEXEC_EXECUTABLE}")
set_tests_properties(pipeline_peer_stopped PROPERTIES LABELS mpi TIMEOUT 120
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")

# GPU: the pipeline on real NCCL (two ranks, each on its own GPU: grouped ncclSend / ncclRecv on the compute
# stream, the order check on) against the single-rank run; skipped with fewer than two GPUs.
mm_test(test_gpu_equivalence_pp2_nccl EXE test_equivalence LABELS gpu NP 2 TIMEOUT 300
        ARGS --tp 1 --pp 2 --micro 4 --device cuda --comm nccl --comm-timeout 120 --steps 3)
mm_test(test_gpu_equivalence_pp2_interleaved_nccl EXE test_equivalence LABELS gpu NP 2 TIMEOUT 300
        ARGS --tp 1 --pp 2 --chunks 2 --schedule interleaved --micro 4 --device cuda --comm nccl --comm-timeout 120 --steps 3)
