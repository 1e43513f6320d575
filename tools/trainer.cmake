# The trainer: train_gpt.cu is the main loop, train_options.cu its command line; everything else is mm_core.
mm_executable(train_gpt SOURCES ${CMAKE_SOURCE_DIR}/train_gpt.cu ${CMAKE_SOURCE_DIR}/train_options.cu)
set_target_properties(train_gpt PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
