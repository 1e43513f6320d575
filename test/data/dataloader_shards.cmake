# data/dataloader.cu over several shard files (glob patterns): llm.c's order, DP slices, shuffling, resume
# across a shard boundary, token ids checked as read, bad inputs.
mm_test(test_dataloader_shards SOURCES ${CMAKE_SOURCE_DIR}/test/data/test_dataloader_shards.cu
        MODULES dataloader shard atomic_file paths runtime LABELS unit)
