// dataloader.h — batches of (input, target) token sequences from one llm.c token shard.
//
// A step consumes one *global* batch of B sequences of T tokens. Global batch k of an epoch is the
// contiguous slice tokens[k·B·T, k·B·T + B·T + 1) (llm.c's reading): sequence i's inputs are
// tokens[k·B·T + i·T + t] and its targets the same positions shifted by one (t + 1). A shard of n tokens
// holds (n - 1) / (B·T) whole batches; the leftover tail is skipped and the next epoch starts again at 0.
//
// Data parallelism: DP rank r of dp takes sequences [r·B/dp, (r+1)·B/dp) of the global batch, so the dp
// ranks' batches concatenated in rank order are exactly the single-rank batch, and gradients averaged over
// the DP group equal the single-rank gradient of the whole batch.
//
// Shuffling (on by default in the trainer): within an epoch, the *order of the batches* is a permutation
// drawn from (seed, epoch) by a small deterministic PRNG (splitmix64 + Fisher-Yates). Every rank computes
// the same permutation, so no communication is needed; the sequences inside a batch stay llm.c's slice.
//
// Exact resume: the state is (epoch, position), position = index of the next batch within the epoch.
// Restoring it reproduces the following batches bit for bit (the permutation is recomputed from
// (seed, epoch)).
//
// Output: int32 inputs and targets of this rank, [B_local, T] row-major (sequence-major for the model is
// the trainer's transpose to [T, B_local], docs/design.md "Core data structures").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

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

    // ---- data ----
    std::vector<uint16_t> tokens;
    int64_t num_batches = 0;  // whole global batches per epoch: (n - 1) / (B·T)

    // ---- state ----
    int64_t epoch = 0;
    int64_t position = 0;
    std::vector<int64_t> order;  // batch order of the current epoch (identity when not shuffling)

    // ---- output of next_batch(): [B_local, T] ----
    std::vector<int32_t> inputs;
    std::vector<int32_t> targets;

    // Load a shard file and set up the loader (state (0, 0)). Returns false with `err` on a bad file, a
    // shard shorter than B·T + 1 tokens, B not divisible by dp, a bad dp_rank, or (when vocab > 0) a
    // token id >= vocab.
    bool init(const std::string& path, int B, int T, int dp, int dp_rank, bool shuffle, uint64_t seed,
              int vocab, std::string& err);
    // The same from tokens already in memory (tests, generated data); `name` labels messages.
    bool init_from_tokens(std::vector<uint16_t> tokens, const std::string& name, int B, int T, int dp,
                          int dp_rank, bool shuffle, uint64_t seed, int vocab, std::string& err);

    // False (with `err` naming the first bad token's position and value) if any token id >= vocab: such a
    // token would index past the embedding table.
    bool validate_tokens(int vocab, std::string& err) const;

    // Fill inputs/targets with this rank's part of the next global batch and advance the state (moving to
    // the next epoch, with a new permutation, after the last batch of an epoch).
    void next_batch();

    // Index (0..num_batches-1, into the unshuffled shard) of the global batch that next_batch() returns.
    int64_t next_batch_index() const { return order[(size_t)position]; }

    DataLoaderState state() const { return {epoch, position}; }
    // Restore a state from state(); refuses (mm_fatal) a position outside the epoch.
    void set_state(const DataLoaderState& s);
};

// The batch order of one epoch: the identity without shuffling, else a permutation of 0..n-1 that depends
// only on (seed, epoch). Exposed for tests and for readers who want to see it.
std::vector<int64_t> epoch_batch_order(int64_t num_batches, bool shuffle, uint64_t seed, int64_t epoch);
