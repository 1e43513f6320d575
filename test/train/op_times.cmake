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
