# parallel/pipeline_schedule.cu: AFAB, 1F1B, interleaved 1F1B and the zero-bubble orders with every rank simulated (pure host code).
mm_test(test_pipeline_schedule SOURCES ${CMAKE_SOURCE_DIR}/test/parallel/test_pipeline_schedule.cu
        MODULES pipeline_schedule zero_bubble_schedule pipeline_simulation runtime LABELS unit)
