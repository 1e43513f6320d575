# --op-times (train/op_times.h): the trainer's own steps taken apart op by op (test/train/op_times.sh).
add_test(NAME train_op_times COMMAND bash ${CMAKE_SOURCE_DIR}/test/train/op_times.sh $<TARGET_FILE:train_gpt>
         $<TARGET_FILE:prepare_data> ${CMAKE_SOURCE_DIR} "${MPIEXEC_EXECUTABLE}")
set_tests_properties(train_op_times PROPERTIES LABELS mpi TIMEOUT 120
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
# --optimizer-post-validation in the trainer: the synchronous run's log and checkpoints (rollbacks included).
add_test(NAME train_post_validation_cli COMMAND bash ${CMAKE_SOURCE_DIR}/test/train/post_validation_cli.sh
         $<TARGET_FILE:train_gpt> $<TARGET_FILE:prepare_data> ${CMAKE_SOURCE_DIR} "${MPIEXEC_EXECUTABLE}")
set_tests_properties(train_post_validation_cli PROPERTIES LABELS mpi TIMEOUT 120
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
# Refused before any work: post-validation's rollback restores whole states, which ZeRO-2/3 keep in shards; ZB-V
# with ZeRO-2/3 (its gathers are not ordered for the V placement: test_equivalence --schedule zb-v --zero 2 hangs).
add_test(NAME cli_post_validation_zero2 COMMAND ${CMAKE_SOURCE_DIR}/test/expect_error.sh --exit 2
         "--optimizer-post-validation with --zero 2: its rollback restores whole optimizer states"
         ${MM_MPIRUN} -np 1 $<TARGET_FILE:train_gpt> --device cpu --steps 1 --zero 2 --optimizer-post-validation)
set_tests_properties(cli_post_validation_zero2 PROPERTIES LABELS mpi TIMEOUT 60
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
add_test(NAME cli_zbv_zero3 COMMAND ${CMAKE_SOURCE_DIR}/test/expect_error.sh --exit 2
         "--pipeline-schedule zb-v with --zero 3: ZeRO-2/3's per-unit gathers"
         ${MM_MPIRUN} -np 2 $<TARGET_FILE:train_gpt> --device cpu --steps 1 --pp 2 --pipeline-schedule zb-v --zero 3)
set_tests_properties(cli_zbv_zero3 PROPERTIES LABELS mpi TIMEOUT 60
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
