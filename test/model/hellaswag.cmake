# model/hellaswag.cu: the trainer's multiple-choice accuracy equals a brute force from per-token losses, at
# tp 1, tp 2 (with and without SP) and dp 2; and the trainer's --hellaswag flag end to end.
mm_test(test_hellaswag_tp1 SOURCES ${CMAKE_SOURCE_DIR}/test/model/test_hellaswag.cu LABELS mpi NP 1 ARGS --tp 1)
set_target_properties(test_hellaswag_tp1 PROPERTIES OUTPUT_NAME test_hellaswag)
mm_test(test_hellaswag_tp2 EXE test_hellaswag_tp1 LABELS mpi NP 2 ARGS --tp 2)
mm_test(test_hellaswag_tp2_sp EXE test_hellaswag_tp1 LABELS mpi NP 2 ARGS --tp 2 --sp)
mm_test(test_hellaswag_dp2 EXE test_hellaswag_tp1 LABELS mpi NP 2 ARGS --tp 1)
add_test(NAME hellaswag_cli COMMAND bash ${CMAKE_SOURCE_DIR}/test/model/hellaswag_cli.sh $<TARGET_FILE:test_hellaswag_tp1>
         $<TARGET_FILE:train_gpt> $<TARGET_FILE:prepare_data> ${CMAKE_SOURCE_DIR} "${MPIEXEC_EXECUTABLE}")
set_tests_properties(hellaswag_cli PROPERTIES LABELS mpi TIMEOUT 180
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
