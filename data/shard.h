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

// An open shard whose header has been checked: read batch by batch (pread), never held whole in memory.
// Closed when the last copy goes away.
struct ShardFile {
    std::string path;
    int64_t n_tokens = 0;
    int fd = -1;
    ShardFile() = default;
    ShardFile(const ShardFile&) = delete;
    ShardFile& operator=(const ShardFile&) = delete;
    ~ShardFile();
};
// Open `path` and check its header (magic, version, the token count against the file's length). False with
// `err` naming the file and what was expected, as read_token_shard.
bool open_token_shard(const std::string& path, ShardFile& shard, std::string& err);
// Tokens [first, first + count) of an open shard into `out`. False with `err` (naming the file) on an I/O
// error or a range past the end.
bool read_shard_tokens(const ShardFile& shard, int64_t first, int64_t count, uint16_t* out, std::string& err);

// Read a whole shard into `tokens`. Returns false and sets `err` (naming the file and what was expected)
// when the file cannot be opened, has the wrong magic or version, or its length disagrees with the count
// in its header (truncated or with trailing bytes).
bool read_token_shard(const std::string& path, std::vector<uint16_t>& tokens, std::string& err);

// Write `n` tokens as a shard. Atomic: the data goes to a temporary file in the same directory, is
// fsync'ed, then renamed over `path`, so a reader (or a crash) never sees a half-written shard.
// Any I/O error is fatal (mm_fatal) and names the file.
void write_token_shard(const std::string& path, const uint16_t* tokens, size_t n);
