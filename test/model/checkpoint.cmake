# llm.c model checkpoints (model/checkpoint.cu): the file layout, bf16 rounding, and malformed files refused
# with a message (label unit).
mm_test(test_checkpoint SOURCES test/model/test_checkpoint.cu MODULES checkpoint atomic_file paths runtime LABELS unit
        TIMEOUT 120)
