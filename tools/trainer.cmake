# The trainer: train_gpt.cu is the main loop; its command line, set-up and bookkeeping (train/) are part of
# mm_core like everything else.
mm_executable(train_gpt SOURCES ${CMAKE_SOURCE_DIR}/train_gpt.cu)
set_target_properties(train_gpt PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
