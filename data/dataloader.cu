// dataloader.cu — llm.c-style batches over one token shard, DP slicing and seeded shuffling
// (see dataloader.h).
#include "dataloader.h"

#include <utility>

#include "../layers/runtime.h"  // mm_fatal
#include "shard.h"

// splitmix64: a tiny, well-mixed 64-bit generator (Steele et al. 2014). We need only determinism across
// machines and compilers (std::mt19937's distributions are not portable across standard libraries),
// and decent mixing of nearby seeds (epoch 3 and epoch 4 must give unrelated permutations).
static uint64_t splitmix64(uint64_t& state) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

std::vector<int64_t> epoch_batch_order(int64_t num_batches, bool shuffle, uint64_t seed, int64_t epoch) {
    std::vector<int64_t> order((size_t)num_batches);
    for (int64_t i = 0; i < num_batches; i++) order[(size_t)i] = i;
    if (!shuffle) return order;
    // One stream per (seed, epoch): mix the seed once, then fold in the epoch, so that (seed, epoch) pairs
    // do not alias (seed + epoch would make (1, 0) and (0, 1) equal).
    uint64_t state = seed;
    uint64_t mixed = splitmix64(state) ^ ((uint64_t)epoch * 0xD1B54A32D192ED03ull);
    state = mixed;
    // Fisher-Yates: position i swaps with a uniformly chosen j in [0, i]. The modulo bias is below
    // num_batches / 2^64, far below anything measurable.
    for (int64_t i = num_batches - 1; i > 0; i--) {
        int64_t j = (int64_t)(splitmix64(state) % (uint64_t)(i + 1));
        std::swap(order[(size_t)i], order[(size_t)j]);
    }
    return order;
}

bool DataLoader::init(const std::string& path, int B_, int T_, int dp_, int dp_rank_, bool shuffle_,
                      uint64_t seed_, int vocab, std::string& err) {
    std::vector<uint16_t> toks;
    if (!read_token_shard(path, toks, err)) return false;
    return init_from_tokens(std::move(toks), path, B_, T_, dp_, dp_rank_, shuffle_, seed_, vocab, err);
}

bool DataLoader::init_from_tokens(std::vector<uint16_t> toks, const std::string& name_, int B_, int T_,
                                  int dp_, int dp_rank_, bool shuffle_, uint64_t seed_, int vocab,
                                  std::string& err) {
    name = name_;
    B = B_;
    T = T_;
    dp = dp_;
    dp_rank = dp_rank_;
    shuffle = shuffle_;
    seed = seed_;
    tokens = std::move(toks);
    if (B <= 0 || T <= 0) {
        err = "data loader for " + name + ": batch size B=" + std::to_string(B) + " and sequence length T=" +
              std::to_string(T) + " must be positive";
        return false;
    }
    if (dp <= 0 || dp_rank < 0 || dp_rank >= dp) {
        err = "data loader for " + name + ": bad data-parallel rank " + std::to_string(dp_rank) + " of " +
              std::to_string(dp);
        return false;
    }
    if (B % dp != 0) {
        err = "global batch size B=" + std::to_string(B) + " is not divisible by the data-parallel size dp=" +
              std::to_string(dp) + " (each DP rank takes B/dp sequences)";
        return false;
    }
    B_local = B / dp;
    // One batch needs B·T inputs plus one more token: the target of the last input.
    const int64_t need = (int64_t)B * T + 1;
    const int64_t n = (int64_t)tokens.size();
    if (n < need) {
        err = "token shard " + name + " holds " + std::to_string(n) + " tokens, but one batch of B=" +
              std::to_string(B) + " sequences of T=" + std::to_string(T) + " tokens needs at least B*T+1 = " +
              std::to_string(need) + " tokens; use a smaller B or T, or more data";
        return false;
    }
    if (vocab > 0 && !validate_tokens(vocab, err)) return false;
    num_batches = (n - 1) / ((int64_t)B * T);
    inputs.assign((size_t)B_local * T, 0);
    targets.assign((size_t)B_local * T, 0);
    order.clear();  // forget any previous shard's permutation
    set_state({0, 0});
    return true;
}

bool DataLoader::validate_tokens(int vocab, std::string& err) const {
    for (size_t i = 0; i < tokens.size(); i++) {
        if ((int)tokens[i] >= vocab) {
            err = "token shard " + name + ": token " + std::to_string(tokens[i]) + " at position " +
                  std::to_string(i) + " is not below the vocabulary size " + std::to_string(vocab) +
                  " (data made with a different tokenizer?)";
            return false;
        }
    }
    return true;
}

void DataLoader::set_state(const DataLoaderState& s) {
    if (s.epoch < 0 || s.position < 0 || s.position >= num_batches)
        mm_fatal("data loader for %s: cannot resume at epoch %lld, batch %lld: an epoch has %lld batches "
                 "(B=%d, T=%d; a different shard or batch shape than the saved run?)",
                 name.c_str(), (long long)s.epoch, (long long)s.position, (long long)num_batches, B, T);
    // The permutation depends only on (seed, epoch); recompute it rather than store it.
    if (order.empty() || s.epoch != epoch) order = epoch_batch_order(num_batches, shuffle, seed, s.epoch);
    epoch = s.epoch;
    position = s.position;
}

void DataLoader::next_batch() {
    const int64_t BT = (int64_t)B * T;
    const int64_t batch_start = order[(size_t)position] * BT;  // llm.c: batch k starts at token k·B·T
    const int64_t first_seq = (int64_t)dp_rank * B_local;       // this rank's first sequence in the batch
    for (int b = 0; b < B_local; b++) {
        const uint16_t* seq = tokens.data() + batch_start + (first_seq + b) * T;
        for (int t = 0; t < T; t++) {
            inputs[(size_t)b * T + t] = seq[t];
            targets[(size_t)b * T + t] = seq[t + 1];
        }
    }
    // Advance; after the last batch of the epoch the next one would run past the end: wrap to a new epoch.
    if (position + 1 < num_batches) set_state({epoch, position + 1});
    else set_state({epoch + 1, 0});
}
