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
# With ZeRO-2 and ZeRO-3 (pp 2 x dp 2, four micro-batches of one sequence per rank): the tied embedding's early sum is
# finished into ZeRO's edges bucket (model/zero_model.cu); the same log and checkpoints as the synchronous run.
foreach(stage 2 3)
  add_test(NAME train_post_validation_cli_zero${stage} COMMAND bash ${CMAKE_SOURCE_DIR}/test/train/post_validation_cli.sh
           $<TARGET_FILE:train_gpt> $<TARGET_FILE:prepare_data> ${CMAKE_SOURCE_DIR} "${MPIEXEC_EXECUTABLE}" 4 --zero ${stage}
           --micro-batch-size 1)
  set_tests_properties(train_post_validation_cli_zero${stage} PROPERTIES LABELS mpi TIMEOUT 180
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endforeach()
