// dataloader.h — batches of (input, target) token sequences from llm.c token shards.
//
// The data is one shard file or a glob pattern of them ("fineweb_train_*.bin", quoted so that the shell
// leaves it alone), matched files sorted by name, as llm.c's -i / -j. Shards are read batch by batch
// (pread), never loaded whole: a rank's memory does not grow with the dataset. Each shard's header is
// checked at start-up; token ids are checked as batches are read.
//
// A step consumes one *global* batch of B sequences of T tokens, always from one shard. Batch k of a shard
// is its contiguous slice tokens[k·B·T, k·B·T + B·T + 1) (llm.c's reading): sequence i's inputs are
// tokens[k·B·T + i·T + t] and its targets the same positions shifted by one (t + 1). A shard of n tokens
// holds (n - 1) / (B·T) whole batches; when it cannot supply another, the loader moves to the next shard
// (the tail is skipped, as llm.c does). An epoch is every batch of every shard; then it starts again.
//
// Data parallelism: DP rank r of dp takes sequences [r·B/dp, (r+1)·B/dp) of the global batch, so the dp
// ranks' batches concatenated in rank order are exactly the single-rank batch, and gradients averaged over
// the DP group equal the single-rank gradient of the whole batch.
//
// Shuffling (on by default in the trainer): each epoch permutes the *order of the shards* and, inside each
// shard, the *order of its batches*, by permutations drawn from (seed, epoch) (and the shard) with a small
// deterministic PRNG (splitmix64 + Fisher-Yates). Every rank computes the same permutations, so no
// communication is needed; the sequences inside a batch stay llm.c's slice. With one shard this is exactly
// a permutation of its batches from (seed, epoch).
//
// Exact resume: the state is (epoch, position), position = index of the next batch within the epoch's
// sequence (shards in their epoch order, each shard's batches in theirs), which also fixes the shard.
// Restoring it reproduces the following batches bit for bit (the permutations are recomputed).
//
// Output: int32 inputs and targets of this rank, [B_local, T] row-major (sequence-major for the model is
// the trainer's transpose to [T, B_local], docs/design.md "Core data structures").
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct ShardFile;  // data/shard.h

struct DataLoaderState {
    int64_t epoch = 0;
    int64_t position = 0;  // index (within the epoch) of the next batch to be returned
};

struct DataLoader {
    // ---- configuration ----
    std::string name;        // shard path (or a label), for messages
    int B = 0;               // global batch size (sequences per step, all DP ranks together)
    int T = 0;               // sequence length
    int dp = 1, dp_rank = 0;
    int B_local = 0;         // B / dp: this rank's sequences
    bool shuffle = false;
    uint64_t seed = 0;

    int vocab = 0;           // token ids must be below this (0: not checked)

    // ---- data: the shards, in sorted name order ----
    struct Shard {
        std::string name;
        int64_t n_tokens = 0;
        int64_t batches = 0;                // whole global batches: (n_tokens - 1) / (B·T)
        std::shared_ptr<ShardFile> file;    // read batch by batch; or
        std::vector<uint16_t> memory;       // tokens in memory (init_from_tokens)
    };
    std::vector<Shard> shards;
    int64_t num_batches = 0;  // whole global batches per epoch, all shards together

    // ---- state ----
    int64_t epoch = 0;
    int64_t position = 0;
    // The current epoch's sequence of (shard, batch within the shard), position indexes it.
    std::vector<std::pair<int32_t, int64_t>> order;

    // ---- output of next_batch(): [B_local, T] ----
    std::vector<int32_t> inputs;
    std::vector<int32_t> targets;

    // Open a shard file or every file a glob pattern matches (sorted), check their headers, and set up the
    // loader (state (0, 0)). Returns false with `err` on a pattern that matches nothing, a bad file (named),
    // a shard shorter than B·T + 1 tokens, B not divisible by dp, or a bad dp_rank. Token ids (>= vocab when
    // vocab > 0) are checked as they are read, by next_batch.
    bool init(const std::string& path_or_pattern, int B, int T, int dp, int dp_rank, bool shuffle, uint64_t seed,
              int vocab, std::string& err);
    // The same from tokens already in memory, as one shard (tests, generated data); `name` labels messages.
    // Here every token id is checked at once.
    bool init_from_tokens(std::vector<uint16_t> tokens, const std::string& name, int B, int T, int dp,
                          int dp_rank, bool shuffle, uint64_t seed, int vocab, std::string& err);

    // False (with `err` naming the first bad token's shard, position and value) if any in-memory token id
    // >= vocab: such a token would index past the embedding table.
    bool validate_tokens(int vocab, std::string& err) const;

    // Fill inputs/targets with this rank's part of the next global batch and advance the state (moving to
    // the next shard after a shard's last batch, to the next epoch with new permutations after the last
    // shard). False, with `err` naming the shard, the position and the value, when a token id read is not
    // below the vocabulary, or on a read error; the trainer stops every rank together on it.
    bool next_batch(std::string& err);
    void next_batch();  // the same; a bad token or read error is fatal (mm_fatal) on this rank

    // The global batch next_batch() returns: its shard (index into shards) and its index within the shard.
    int32_t next_shard() const { return order[(size_t)position].first; }
    int64_t next_batch_index() const { return order[(size_t)position].second; }
    // A fingerprint of the data (token counts and the first and last tokens of each shard), recorded by the
    // training state so that a resumed run can tell whether it reads the same data.
    uint64_t fingerprint() const;
    int64_t total_tokens() const;

    DataLoaderState state() const { return {epoch, position}; }
    // Restore a state from state(); refuses (mm_fatal) a position outside the epoch.
    void set_state(const DataLoaderState& s);

private:
    std::vector<uint16_t> buffer_;  // this rank's tokens of the batch being read
};

// The batch order of one epoch: the identity without shuffling, else a permutation of 0..n-1 that depends
// only on (seed, epoch). Exposed for tests and for readers who want to see it. (A shard's batches use it
// with the seed of the shard, shard_seed; the shard order with the seed shard_order_seed.)
std::vector<int64_t> epoch_batch_order(int64_t num_batches, bool shuffle, uint64_t seed, int64_t epoch);
uint64_t shard_seed(uint64_t seed, int shard);  // seed itself for shard 0, so one shard reads as before
uint64_t shard_order_seed(uint64_t seed);

// The files a --train / --val argument names: the file itself when it has no wildcard (* ? [), else the
// matches of the glob pattern, sorted byte-wise. False with `err` when a pattern matches nothing.
bool expand_shard_pattern(const std::string& pattern, std::vector<std::string>& files, std::string& err);
