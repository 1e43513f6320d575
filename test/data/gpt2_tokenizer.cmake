# data/gpt2_tokenizer.cu: GPT-2 byte-level BPE on a tokenizer the test learns itself (unit), and the same
# encodings compared with tiktoken built offline from the same ranks (skips with 77 when tiktoken is absent).
mm_test(test_gpt2_tokenizer SOURCES ${CMAKE_SOURCE_DIR}/test/data/test_gpt2_tokenizer.cu
        MODULES gpt2_tokenizer hf_tokenizer shard atomic_file paths runtime LABELS unit)
add_test(NAME test_gpt2_tokenizer_tiktoken
         COMMAND bash -c "rm -rf \"$1\" && \"$0\" --dump \"$1\" && python3 \"$2\" \"$1\""
                 $<TARGET_FILE:test_gpt2_tokenizer> ${CMAKE_BINARY_DIR}/tiktoken_check
                 ${CMAKE_SOURCE_DIR}/test/data/tiktoken_agrees.py)
set_tests_properties(test_gpt2_tokenizer_tiktoken PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 120)
# prepare_data --tokenizer: each file preceded by the end-of-text token; a bad tokenizer file refused.
mm_test(test_gpt2_tokenizer_prepare_cli EXE test_gpt2_tokenizer ARGS --prepare-cli $<TARGET_FILE:prepare_data> LABELS unit)
add_dependencies(test_gpt2_tokenizer prepare_data)
# Hugging Face's vocab.json + merges.txt of the same learned tokenizer (data/hf_tokenizer.cu): transformers'
# GPT2TokenizerFast, our reader of those files and llm.c's file encode every text alike (skips with 77 when
# transformers is absent from /usr/bin/python3, where make deps installs it).
add_test(NAME test_hf_tokenizer_transformers
         COMMAND bash -c "test -x /usr/bin/python3 || exit 77; rm -rf \"$1\" && \"$0\" --dump \"$1\" && /usr/bin/python3 \"$2\" \"$1\""
                 $<TARGET_FILE:test_gpt2_tokenizer> ${CMAKE_BINARY_DIR}/hf_tokenizer_check
                 ${CMAKE_SOURCE_DIR}/test/data/hf_tokenizer_agrees.py)
set_tests_properties(test_hf_tokenizer_transformers PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 120)
