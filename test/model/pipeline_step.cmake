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

# The executor's own bubble, as logic (issue 47; test/model/test_pipeline_bubble.cu): the real executor and exchanges
# (--comm mpi-strict) with every op's work skipped; each stage's record of what it posted and waited for before each
# op, replayed in virtual time at fixed op times (parallel/pipeline_simulation.h's pipe_replay_record), must give
# the schedule's formula (recompute/formulas.h) exactly, for AFAB, 1F1B, interleaved, ZB-H1, ZB-H2 and ZB-V at p 2
# and 4, every M from p to 4p the schedule allows, synchronized and post-validated. No clock in the verdict: it
# runs beside other tests, and beside any load.
mm_executable(test_pipeline_bubble SOURCES test/model/test_pipeline_bubble.cu)
mm_test(test_pipeline_bubble_pp2 EXE test_pipeline_bubble LABELS mpi NP 2 TIMEOUT 120)
mm_test(test_pipeline_bubble_pp4 EXE test_pipeline_bubble LABELS mpi NP 4 TIMEOUT 240)
mm_test(test_pipeline_bubble_post_validation_pp2 EXE test_pipeline_bubble LABELS mpi NP 2 TIMEOUT 120
        ARGS --post-validation --schedules 1f1b,zb-h1,zb-h2,zb-v)
mm_test(test_pipeline_bubble_post_validation_pp4 EXE test_pipeline_bubble LABELS mpi NP 4 TIMEOUT 240
        ARGS --post-validation --schedules 1f1b,zb-h1,zb-h2,zb-v)
# The negative controls: three stalls planted in the executor (layers/test_hooks.h), each of which must fail the
# test for its reason: a replayed idle share beyond the formula's, naming the first op that starts late.
#  - the exchanges of before (whole units, each waiting for its sends too: NCCL's path) stall ZB-H2: post-validated
#    at p 2 (its first stage waits for a B's gradient before each steady F: the zero bubble at equal times is lost),
#    and synchronized at p 4 (M 4 and 5; at p 2 the synchronized step's end triangle absorbs the wait);
#  - the executor runs each W right after its B (a ZB-H1 order broken on purpose: the W lag 0 on every stage);
#  - the executor runs one W a slot late on the first stage (after the B that followed it).
set(bubble_reason "stage [0-9]+'s replayed idle share [0-9.]+ differs from the formula's [0-9.]+ .closed form.*the first op later than the schedule allows: stage [0-9]+'s [FBW][0-9]+")
add_test(NAME test_pipeline_bubble_blocking_p2p_fails COMMAND ${CMAKE_SOURCE_DIR}/test/expect_error.sh
         "FAIL .*: zb-h2 p 2 M [0-9]+ post-validated at [0-9:]+: ${bubble_reason}"
         ${MM_MPIRUN} -np 2 $<TARGET_FILE:test_pipeline_bubble> --blocking-p2p --post-validation --schedules zb-h2)
add_test(NAME test_pipeline_bubble_blocking_p2p_pp4_fails COMMAND ${CMAKE_SOURCE_DIR}/test/expect_error.sh
         "FAIL .*: zb-h2 p 4 M [45] at [0-9:]+: ${bubble_reason}"
         ${MM_MPIRUN} -np 4 $<TARGET_FILE:test_pipeline_bubble> --blocking-p2p --schedules zb-h2)
add_test(NAME test_pipeline_bubble_weight_unlagged_fails COMMAND ${CMAKE_SOURCE_DIR}/test/expect_error.sh
         "FAIL .*: zb-h1 p 2 M [0-9]+ at [0-9:]+: ${bubble_reason}"
         ${MM_MPIRUN} -np 2 $<TARGET_FILE:test_pipeline_bubble> --weight-unlagged --schedules zb-h1)
add_test(NAME test_pipeline_bubble_delayed_weight_fails COMMAND ${CMAKE_SOURCE_DIR}/test/expect_error.sh
         "FAIL .*: zb-h1 p 2 M [0-9]+ at [0-9:]+: ${bubble_reason}"
         ${MM_MPIRUN} -np 2 $<TARGET_FILE:test_pipeline_bubble> --delay-weight 0 --schedules zb-h1)
set_tests_properties(test_pipeline_bubble_blocking_p2p_fails test_pipeline_bubble_blocking_p2p_pp4_fails
                     test_pipeline_bubble_weight_unlagged_fails
                     test_pipeline_bubble_delayed_weight_fails PROPERTIES LABELS mpi TIMEOUT 90
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")

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
