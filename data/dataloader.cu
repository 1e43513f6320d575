// dataloader.cu — llm.c-style batches over one token shard, DP slicing and seeded shuffling
// (see dataloader.h).
#include "dataloader.h"

#include <glob.h>
#include <algorithm>
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

uint64_t shard_seed(uint64_t seed, int shard) { return seed + (uint64_t)shard * 0x9E3779B97F4A7C15ull; }
uint64_t shard_order_seed(uint64_t seed) { return seed ^ 0x5348415244u; /* "SHARD" */ }

bool expand_shard_pattern(const std::string& pattern, std::vector<std::string>& files, std::string& err) {
    files.clear();
    if (pattern.find_first_of("*?[") == std::string::npos) {  // a plain file name
        files.push_back(pattern);
        return true;
    }
    glob_t g;
    int rc = glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g);
    if (rc == 0)
        for (size_t i = 0; i < g.gl_pathc; i++) files.push_back(g.gl_pathv[i]);
    globfree(&g);
    if (files.empty()) {
        err = "the pattern " + pattern + " matches no file" + (rc == GLOB_NOMATCH ? "" : " (glob failed)");
        return false;
    }
    // Byte-wise, not the locale's collation: the same order on every machine (and every rank).
    std::sort(files.begin(), files.end());
    return true;
}

// Checks shared by both ways in: the batch shape, the DP slice, and each shard's batch count.
static bool check_shape(DataLoader& d, std::string& err) {
    if (d.B <= 0 || d.T <= 0) {
        err = "data loader for " + d.name + ": batch size B=" + std::to_string(d.B) + " and sequence length T=" +
              std::to_string(d.T) + " must be positive";
        return false;
    }
    if (d.dp <= 0 || d.dp_rank < 0 || d.dp_rank >= d.dp) {
        err = "data loader for " + d.name + ": bad data-parallel rank " + std::to_string(d.dp_rank) + " of " +
              std::to_string(d.dp);
        return false;
    }
    if (d.B % d.dp != 0) {
        err = "global batch size B=" + std::to_string(d.B) + " is not divisible by the data-parallel size dp=" +
              std::to_string(d.dp) + " (each DP rank takes B/dp sequences)";
        return false;
    }
    d.B_local = d.B / d.dp;
    // One batch needs B·T inputs plus one more token: the target of the last input.
    const int64_t need = (int64_t)d.B * d.T + 1;
    d.num_batches = 0;
    for (DataLoader::Shard& sh : d.shards) {
        if (sh.n_tokens < need) {
            err = "token shard " + sh.name + " holds " + std::to_string(sh.n_tokens) + " tokens, but one batch of B=" +
                  std::to_string(d.B) + " sequences of T=" + std::to_string(d.T) +
                  " tokens needs at least B*T+1 = " + std::to_string(need) + " tokens; use a smaller B or T, or more data";
            return false;
        }
        sh.batches = (sh.n_tokens - 1) / ((int64_t)d.B * d.T);
        d.num_batches += sh.batches;
    }
    d.inputs.assign((size_t)d.B_local * d.T, 0);
    d.targets.assign((size_t)d.B_local * d.T, 0);
    d.order.clear();  // forget any previous data's permutation
    d.set_state({0, 0});
    return true;
}

bool DataLoader::init(const std::string& pattern, int B_, int T_, int dp_, int dp_rank_, bool shuffle_,
                      uint64_t seed_, int vocab_, std::string& err) {
    name = pattern;
    B = B_, T = T_, dp = dp_, dp_rank = dp_rank_, shuffle = shuffle_, seed = seed_, vocab = vocab_;
    shards.clear();
    std::vector<std::string> files;
    if (!expand_shard_pattern(pattern, files, err)) return false;
    for (const std::string& f : files) {
        Shard sh;
        sh.name = f;
        sh.file = std::make_shared<ShardFile>();
        if (!open_token_shard(f, *sh.file, err)) return false;
        sh.n_tokens = sh.file->n_tokens;
        shards.push_back(std::move(sh));
    }
    return check_shape(*this, err);
}

bool DataLoader::init_from_tokens(std::vector<uint16_t> toks, const std::string& name_, int B_, int T_,
                                  int dp_, int dp_rank_, bool shuffle_, uint64_t seed_, int vocab_,
                                  std::string& err) {
    name = name_;
    B = B_, T = T_, dp = dp_, dp_rank = dp_rank_, shuffle = shuffle_, seed = seed_, vocab = vocab_;
    shards.clear();
    Shard sh;
    sh.name = name_;
    sh.n_tokens = (int64_t)toks.size();
    sh.memory = std::move(toks);
    shards.push_back(std::move(sh));
    if (!check_shape(*this, err)) return false;
    return vocab <= 0 || validate_tokens(vocab, err);
}

static std::string bad_token_message(const std::string& shard, int64_t position, int token, int vocab) {
    return "token shard " + shard + ": token " + std::to_string(token) + " at position " + std::to_string(position) +
           " is not below the vocabulary size " + std::to_string(vocab) + " (data made with a different tokenizer?)";
}

bool DataLoader::validate_tokens(int vocab_, std::string& err) const {
    for (const Shard& sh : shards)
        for (size_t i = 0; i < sh.memory.size(); i++)
            if ((int)sh.memory[i] >= vocab_) {
                err = bad_token_message(sh.name, (int64_t)i, sh.memory[i], vocab_);
                return false;
            }
    return true;
}

void DataLoader::set_state(const DataLoaderState& s) {
    if (s.epoch < 0 || s.position < 0 || s.position >= num_batches)
        mm_fatal("data loader for %s: cannot resume at epoch %lld, batch %lld: an epoch has %lld batches "
                 "(B=%d, T=%d; a different shard or batch shape than the saved run?)",
                 name.c_str(), (long long)s.epoch, (long long)s.position, (long long)num_batches, B, T);
    // The permutations depend only on (seed, epoch) and the shard; recompute them rather than store them.
    if (order.empty() || s.epoch != epoch) {
        order.clear();
        order.reserve((size_t)num_batches);
        const int n_shards = (int)shards.size();
        for (int64_t si : epoch_batch_order(n_shards, shuffle, shard_order_seed(seed), s.epoch)) {
            const int32_t sh = (int32_t)si;
            for (int64_t k : epoch_batch_order(shards[sh].batches, shuffle, shard_seed(seed, sh), s.epoch))
                order.emplace_back(sh, k);
        }
    }
    epoch = s.epoch;
    position = s.position;
}

bool DataLoader::next_batch(std::string& err) {
    const int64_t BT = (int64_t)B * T;
    const Shard& sh = shards[(size_t)next_shard()];
    const int64_t batch_start = next_batch_index() * BT;   // llm.c: batch k of a shard starts at token k·B·T
    const int64_t first_seq = (int64_t)dp_rank * B_local;  // this rank's first sequence in the batch
    // This rank's sequences are contiguous: B_local·T inputs plus the last one's target.
    const int64_t first = batch_start + first_seq * T, count = (int64_t)B_local * T + 1;
    const uint16_t* toks;
    if (sh.file) {
        buffer_.resize((size_t)count);
        if (!read_shard_tokens(*sh.file, first, count, buffer_.data(), err)) return false;
        toks = buffer_.data();
    } else {
        toks = sh.memory.data() + first;
    }
    if (vocab > 0 && sh.file)  // (tokens in memory were all checked by init_from_tokens)
        for (int64_t i = 0; i < count; i++)
            if ((int)toks[i] >= vocab) {
                err = bad_token_message(sh.name, first + i, toks[i], vocab);
                return false;
            }
    for (int b = 0; b < B_local; b++) {
        const uint16_t* seq = toks + (int64_t)b * T;
        for (int t = 0; t < T; t++) {
            inputs[(size_t)b * T + t] = seq[t];
            targets[(size_t)b * T + t] = seq[t + 1];
        }
    }
    // Advance; after the last batch of the epoch the next one would run past the end: wrap to a new epoch.
    if (position + 1 < num_batches) set_state({epoch, position + 1});
    else set_state({epoch + 1, 0});
    return true;
}

void DataLoader::next_batch() {
    std::string err;
    if (!next_batch(err)) mm_fatal("%s", err.c_str());
}

int64_t DataLoader::total_tokens() const {
    int64_t n = 0;
    for (const Shard& sh : shards) n += sh.n_tokens;
    return n;
}

uint64_t DataLoader::fingerprint() const {
    // FNV-1a over each shard's token count and its first and last (up to) 4096 tokens: cheap at start-up
    // whatever the size of the data, and it tells another dataset, another shard order or another
    // tokenization apart. (Paths are left out: the same data moved elsewhere resumes.)
    uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&](const void* p, size_t n) {
        const unsigned char* c = (const unsigned char*)p;
        for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ull;
    };
    std::vector<uint16_t> edge;
    std::string err;
    for (const Shard& sh : shards) {
        mix(&sh.n_tokens, sizeof sh.n_tokens);
        const int64_t k = std::min<int64_t>(4096, sh.n_tokens);
        for (int64_t first : {(int64_t)0, sh.n_tokens - k}) {
            edge.resize((size_t)k);
            if (sh.file) {
                if (!read_shard_tokens(*sh.file, first, k, edge.data(), err)) mm_fatal("%s", err.c_str());
            } else {
                std::copy(sh.memory.begin() + first, sh.memory.begin() + first + k, edge.begin());
            }
            mix(edge.data(), edge.size() * sizeof(uint16_t));
        }
    }
    return h;
}
