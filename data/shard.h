// shard.h — llm.c token shards: the on-disk format of tokenized training and validation data.
//
// Layout (little-endian, as llm.c writes it):
//   256 x int32 header: [0] = magic 20240520, [1] = version 1, [2] = number of tokens, rest zero
//   then that many uint16 tokens.
// uint16 is enough for GPT-2's 50257 tokens and for our byte-level tokenizer's 257.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

constexpr int kShardHeaderInts = 256;
constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;

// Read a whole shard into `tokens`. Returns false and sets `err` (naming the file and what was expected)
// when the file cannot be opened, has the wrong magic or version, or its length disagrees with the count
// in its header (truncated or with trailing bytes).
bool read_token_shard(const std::string& path, std::vector<uint16_t>& tokens, std::string& err);

// Write `n` tokens as a shard. Atomic: the data goes to a temporary file in the same directory, is
// fsync'ed, then renamed over `path`, so a reader (or a crash) never sees a half-written shard.
// Any I/O error is fatal (mm_fatal) and names the file.
void write_token_shard(const std::string& path, const uint16_t* tokens, size_t n);
