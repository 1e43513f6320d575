# The data formats, one test per file of data/ (label unit): token shards, the byte tokenizer, the data
# loader (llm.c reading, DP slicing, shuffling, resume).
mm_test(test_shard SOURCES test/data/test_shard.cu MODULES shard atomic_file paths runtime LABELS unit TIMEOUT 120)
mm_test(test_tokenizer SOURCES test/data/test_tokenizer.cu MODULES tokenizer runtime LABELS unit TIMEOUT 120)
mm_test(test_dataloader SOURCES test/data/test_dataloader.cu MODULES dataloader shard atomic_file paths runtime
        LABELS unit TIMEOUT 120)
# The prepare_data command line (tools/prepare_data.cu), run as a program on temporary text files; building
# the test builds the tool.
mm_executable(test_prepare_data SOURCES test/data/test_prepare_data.cu MODULES shard atomic_file paths tokenizer runtime)
add_dependencies(test_prepare_data prepare_data)
mm_test(test_data_prepare_cli EXE test_prepare_data ARGS $<TARGET_FILE:prepare_data> LABELS unit TIMEOUT 120)
