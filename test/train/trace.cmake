# --trace (layers/trace.h, train/bookkeeping.cu): the trainer's timeline of a 2-stage pipeline of 4
# micro-batches, checked by test/train/trace_check.py (structure, overlaps, the schedule's ops and order,
# messages on aligned clocks, and corrupted copies that must fail), drawn by tools/draw_pipeline (the file and
# --ideal), and its flags refused when wrong (test/train/trace_test.sh).
# mm_trace_test(NAME MODE SCHEDULE [checker args...]); --require-ops: the schedule's ops must be there
# (model/pipeline_step.cu records each op as a span).
function(mm_trace_test name mode schedule)
  add_test(NAME ${name} COMMAND bash ${CMAKE_SOURCE_DIR}/test/train/trace_test.sh ${mode} ${schedule} $<TARGET_FILE:train_gpt>
           $<TARGET_FILE:prepare_data> $<TARGET_FILE:draw_pipeline> ${CMAKE_SOURCE_DIR} "${MPIEXEC_EXECUTABLE}" ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS mpi TIMEOUT 180
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OPENBLAS_NUM_THREADS=1")
endfunction()
mm_trace_test(trace_check check 1f1b --require-ops)
mm_trace_test(trace_check_interleaved check interleaved --require-ops)
mm_trace_test(trace_check_zbh1 check zb-h1 --require-ops)
mm_trace_test(trace_check_zbh2 check zb-h2 --require-ops)
mm_trace_test(trace_draw draw 1f1b --require-ops)
mm_trace_test(trace_draw_zbh1 draw zb-h1 --require-ops)
mm_trace_test(trace_flags flags 1f1b)
