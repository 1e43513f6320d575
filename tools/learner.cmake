# Tools for reading a run: pictures from a --log file, and sampling from a saved checkpoint.
mm_executable(plot_log SOURCES tools/plot_log.cu MODULES chart paths atomic_file runtime)
mm_executable(generate SOURCES tools/generate.cu)
set_target_properties(plot_log generate PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
add_test(NAME learner_tools COMMAND bash ${CMAKE_SOURCE_DIR}/test/learner_tools.sh ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}
         "${MPIEXEC_EXECUTABLE}")
set_tests_properties(learner_tools PROPERTIES LABELS mpi TIMEOUT 300
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")
