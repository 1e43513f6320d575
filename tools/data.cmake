# prepare_data: text files (or the project's own text, --default) -> llm.c token shards.
mm_executable(prepare_data SOURCES ${CMAKE_SOURCE_DIR}/tools/prepare_data.cu MODULES shard atomic_file paths tokenizer gpt2_tokenizer hf_tokenizer runtime)
