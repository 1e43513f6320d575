# draw_pipeline: a pipeline's schedule as a PNG, from the trainer's --trace file or (--ideal) from
# parallel/pipeline_schedule.h itself (tools/draw_pipeline.cu; the timeline chart of tools/chart.h, module
# "chart", defined in calculator.cmake). Tested by test/train/trace.cmake.
mm_executable(draw_pipeline SOURCES ${CMAKE_SOURCE_DIR}/tools/draw_pipeline.cu MODULES chart pipeline_schedule zero_bubble_schedule pipeline_simulation formulas memory_formulas flash_memory)
set_target_properties(draw_pipeline PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
