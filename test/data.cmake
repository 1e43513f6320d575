# Data and checkpoint formats: token shards, byte tokenizer, data loader, llm.c checkpoints (unit), and the
# prepare_data command line (unit; the test runs the built tool on temporary text files).
mm_test(test_data SOURCES ${CMAKE_SOURCE_DIR}/test/test_data.cu
        MODULES shard atomic_file tokenizer dataloader checkpoint runtime LABELS unit TIMEOUT 120)
mm_test(test_data_prepare_cli EXE test_data ARGS --cli $<TARGET_FILE:prepare_data> LABELS unit TIMEOUT 120)
# The CLI test runs prepare_data, so building test_data builds it too.
add_dependencies(test_data prepare_data)
