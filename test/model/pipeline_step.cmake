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

# The executor's own bubble (issue 44): every op's work a timed wait of fixed length (--pipeline-op-times), the
# exchanges (--comm mpi-strict) and the step's end for real; each stage's idle share equals the schedule's formula
# within a tolerance taken from the exchange latency and the timer's resolution measured in the same run, for
# AFAB, 1F1B, interleaved, ZB-H1, ZB-H2 and ZB-V at p 2 and 4, M = p, 2p, 4p (test/model/test_pipeline_bubble.cu).
# The negative control: the exchanges of before (each waiting for its sends too) stall ZB-H2 beyond it.
mm_executable(test_pipeline_bubble SOURCES test/model/test_pipeline_bubble.cu)
mm_test(test_pipeline_bubble_pp2 EXE test_pipeline_bubble LABELS mpi NP 2 TIMEOUT 240)
mm_test(test_pipeline_bubble_pp4 EXE test_pipeline_bubble LABELS mpi NP 4 TIMEOUT 300)
mm_test(test_pipeline_bubble_blocking_stalls EXE test_pipeline_bubble LABELS mpi NP 2 TIMEOUT 120 ARGS --expect-stall --micro 16)
# Post-validated steps (model/post_validation.h): no synchronization between steps, each stage's idle over its own
# period against the schedule replayed without one; ZB-H2 at 2:2:1.5 loses its end triangle (its formula drops from
# q·T_F to q·(T_F + T_B − 2T_W)), 1F1B and ZB-V keep theirs.
mm_test(test_pipeline_bubble_post_validation EXE test_pipeline_bubble LABELS mpi NP 2 TIMEOUT 180
        ARGS --post-validation --times 2:2:1.5 --schedules zb-h2,zb-v,1f1b --micro 4,8 --steps 6)
# Timings of a few hundred microseconds against a tolerance of about 1% of a step: each runs alone (RUN_SERIAL),
# not beside another test on this 2-core machine's cores. The tolerance charges a message by how the stage waits
# for it: spinning (2-20 us here) or, past kCommSpinUs, asleep (100-200 us). With one latency for both (half a
# round trip, one leg of each), pp 4 ZB-H1 at M 8 and 16, which waits asleep about ten times on its critical
# path, idled about 0.009 of the step above the tolerance's model in every attempt and failed about half the runs.
set_tests_properties(test_pipeline_bubble_pp2 test_pipeline_bubble_pp4 test_pipeline_bubble_blocking_stalls
                     test_pipeline_bubble_post_validation PROPERTIES RUN_SERIAL TRUE)

# Optimizer post-validation (model/post_validation.h): the weights and moments of the synchronous step, bit for bit,
# with no fault, with the NaN injection (a rollback, skipped) and with a clip that triggers (rollbacks, redone): at
# pp 1, pp 2 under 1F1B, ZB-H2 and ZB-V (the tied embedding's early sum), pp 4 ZB-H2, tp 2 + SP x pp 2, dp 2 + ZeRO-1.
mm_executable(test_post_validation SOURCES test/model/test_post_validation.cu)
mm_test(test_post_validation_pp1 EXE test_post_validation LABELS mpi NP 1 ARGS --micro 2)
mm_test(test_post_validation_pp2 EXE test_post_validation LABELS mpi NP 2 ARGS --pp 2 --micro 4)
mm_test(test_post_validation_pp2_zbh2 EXE test_post_validation LABELS mpi NP 2 ARGS --pp 2 --micro 4 --schedule zb-h2)
mm_test(test_post_validation_pp2_zbv EXE test_post_validation LABELS mpi NP 2 ARGS --pp 2 --micro 4 --schedule zb-v)
mm_test(test_post_validation_pp4_zbh2 EXE test_post_validation LABELS mpi NP 4 ARGS --pp 4 --micro 8 --schedule zb-h2)
mm_test(test_post_validation_tp2_sp_pp2 EXE test_post_validation LABELS mpi NP 4 ARGS --tp 2 --sp --pp 2 --micro 4 --schedule zb-h1)
mm_test(test_post_validation_pp2_dp2_zero EXE test_post_validation LABELS mpi NP 4 ARGS --pp 2 --micro 2 --distributed-optimizer --schedule zb-h2)
