# --trace (layers/trace.h, train/bookkeeping.cu): the trainer's timeline of a 2-stage pipeline, checked by
# test/train/trace_check.py (structure, overlaps, the schedule's ops and order, messages on aligned clocks,
# and corrupted copies that must fail), and drawn by tools/draw_pipeline (on the file and --ideal).
# trace_check.py skips its op checks while the executor records no ops; add --require-ops to the check's
# arguments once it does, and a run per schedule (the checker takes --schedule, --pp, --micro, --chunks).
foreach(mode check draw)
  add_test(NAME trace_${mode} COMMAND bash ${CMAKE_SOURCE_DIR}/test/train/trace_test.sh ${mode} $<TARGET_FILE:train_gpt>
           $<TARGET_FILE:prepare_data> $<TARGET_FILE:draw_pipeline> ${CMAKE_SOURCE_DIR} "${MPIEXEC_EXECUTABLE}")
  set_tests_properties(trace_${mode} PROPERTIES LABELS mpi TIMEOUT 180
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endforeach()
