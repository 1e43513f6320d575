# The trainer's command line as a newcomer meets it (train/options.cu): --help gives every flag's default, and a
# mistyped flag gets the nearest known ones. (The refusals of bad values and layouts: test/model/model.cmake's
# cli_ tests and test/bad_inputs.sh.)
add_test(NAME cli_help_defaults COMMAND bash ${CMAKE_SOURCE_DIR}/test/train/help_defaults.sh $<TARGET_FILE:train_gpt>)
file(WRITE ${CMAKE_BINARY_DIR}/docs_planted/help_without_default.txt
     "usage: planted\n  --lr X                      peak learning rate (default 3e-4)\n  --warmup K                  linear warm-up steps\n")
add_test(NAME cli_help_defaults_planted
         COMMAND bash ${CMAKE_SOURCE_DIR}/test/expect_error.sh --exit 1 " --warmup K linear warm-up steps"
                 bash ${CMAKE_SOURCE_DIR}/test/train/help_defaults.sh --text ${CMAKE_BINARY_DIR}/docs_planted/help_without_default.txt)
set_tests_properties(cli_help_defaults cli_help_defaults_planted PROPERTIES LABELS unit TIMEOUT 60)
set(MM_CLI_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
# mm_cli_refusal(NAME EXIT REGEX COMMAND...): exits EXIT, with no rank aborted, and prints REGEX.
function(mm_cli_refusal name exit regex)
  add_test(NAME ${name} COMMAND bash ${CMAKE_SOURCE_DIR}/test/expect_error.sh --exit ${exit} "${regex}" ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 120 ENVIRONMENT "${MM_CLI_ENV}")
endfunction()
set(MM_CLI_RUN ${MM_MPIRUN} -np 2 $<TARGET_FILE:train_gpt> --device cpu --steps 1)
mm_cli_refusal(cli_unknown_flag_nearest 2 "unknown flag --lr-shedule .did you mean --lr-schedule.?." ${MM_CLI_RUN} --lr-shedule cosine)
mm_cli_refusal(cli_unknown_flag_megatron 2 "unknown flag --tensor-parallel-size .did you mean --tensor-model-parallel-size"
               ${MM_CLI_RUN} --tensor-parallel-size 2)
mm_cli_refusal(cli_flag_needs_value 2 "--steps needs a value" ${MM_CLI_RUN} --steps)
mm_cli_refusal(cli_schedule_flag_without_resume 2 "--override-opt_param-scheduler goes with --resume DIR"
               ${MM_CLI_RUN} --override-opt_param-scheduler)
# pp > 1 with M < pp: the bubble and the flag that lowers it.
add_test(NAME cli_pipeline_bubble_hint COMMAND bash ${CMAKE_SOURCE_DIR}/test/train/bubble_hint.sh $<TARGET_FILE:train_gpt>
         $<TARGET_FILE:prepare_data> ${CMAKE_SOURCE_DIR} "${MPIEXEC_EXECUTABLE}")
set_tests_properties(cli_pipeline_bubble_hint PROPERTIES LABELS mpi TIMEOUT 120 ENVIRONMENT "${MM_CLI_ENV}")
# Refusals that say the true reason, before any work (train/options.cu), and notes for inputs that run
# (test/train/notes.sh): no silent accept.
mm_cli_refusal(cli_exit_interval_without_dir 2 "--exit-interval 4 needs --checkpoint-dir DIR: it stops the run after saving"
               ${MM_CLI_RUN} --exit-interval 4)
mm_cli_refusal(cli_offload_layers_without_offloading 2
               "--cpu-offloading-num-layers 1 says how many layers offloading moves, but offloading is off: add --cpu-offloading"
               ${MM_CLI_RUN} --cpu-offloading-num-layers 1)
mm_cli_refusal(cli_pipeline_op_times_zero2 2 "--pipeline-op-times with --zero 2: the test mode runs no layer"
               ${MM_CLI_RUN} --pp 2 --zero 2 --pipeline-op-times 1:1:1)
mm_cli_refusal(cli_post_validation_pp1 2 "--optimizer-post-validation needs --pp > 1" ${MM_CLI_RUN} --optimizer-post-validation)
add_test(NAME cli_notes COMMAND bash ${CMAKE_SOURCE_DIR}/test/train/notes.sh $<TARGET_FILE:train_gpt>
         $<TARGET_FILE:prepare_data> ${CMAKE_SOURCE_DIR} "${MPIEXEC_EXECUTABLE}")
set_tests_properties(cli_notes PROPERTIES LABELS mpi TIMEOUT 240 ENVIRONMENT "${MM_CLI_ENV}")
