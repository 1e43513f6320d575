// test_dataloader_shards.cu — data/dataloader.cu over several shard files (a glob pattern), against a
// reference written here from llm.c's reading rule: shards in sorted name order, batch k of a shard is its
// tokens [k·B·T, k·B·T + B·T + 1), a shard's tail that cannot fill a batch is skipped, an epoch is all
// shards. Also: DP slices, the first file's batches, shuffling, resume across a shard boundary, token ids
// checked as read, and the bad inputs (named in docs/bad_inputs.md).
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include "../test_util.h"
#include "../../data/dataloader.h"
#include "../../data/shard.h"

namespace fs = std::filesystem;

// The reference: the global batches of one epoch, in llm.c's order (no shuffling), as token vectors of
// B·T + 1 tokens, read from the whole shards in memory.
static std::vector<std::vector<uint16_t>> reference_epoch(const std::vector<std::vector<uint16_t>>& shards, int B, int T) {
    std::vector<std::vector<uint16_t>> out;
    const size_t BT = (size_t)B * T;
    for (const auto& s : shards)
        for (size_t start = 0; start + BT + 1 <= s.size(); start += BT)
            out.emplace_back(s.begin() + (long)start, s.begin() + (long)(start + BT + 1));
    return out;
}

// The loader's current batch (inputs of this rank, plus the last target) as the same kind of vector.
static std::vector<uint16_t> rank_part(const DataLoader& dl) {
    std::vector<uint16_t> v;
    for (int32_t x : dl.inputs) v.push_back((uint16_t)x);
    v.push_back((uint16_t)dl.targets.back());
    return v;
}
static bool targets_shifted(const DataLoader& dl) {
    for (int b = 0; b < dl.B_local; b++)
        for (int t = 0; t + 1 < dl.T; t++)
            if (dl.targets[(size_t)b * dl.T + t] != dl.inputs[(size_t)b * dl.T + t + 1]) return false;
    return true;
}

struct ShardSet {
    std::vector<std::vector<uint16_t>> tokens;
    std::string pattern, first_file;
};
// Three shards of 3, 2 and 4 whole batches plus tails of various lengths (the tails are skipped).
static ShardSet write_shards(const std::string& dir, int B, int T, std::mt19937& rng, int vocab = 257) {
    fs::create_directories(dir);
    ShardSet s;
    const int batches[] = {3, 2, 4}, tails[] = {1, 7, 1 + B * T - 2};
    for (int i = 0; i < 3; i++) {
        s.tokens.push_back(random_tokens((size_t)batches[i] * B * T + tails[i], vocab, rng));
        std::string path = dir + "/part_" + std::to_string(i) + ".bin";
        write_token_shard(path, s.tokens.back().data(), s.tokens.back().size());
        if (i == 0) s.first_file = path;
    }
    // A file the pattern must not pick up.
    write_token_shard(dir + "/other.bin", s.tokens[0].data(), s.tokens[0].size());
    s.pattern = dir + "/part_*.bin";
    return s;
}

static void test_llmc_order(std::mt19937& rng) {
    const int B = 4, T = 8;
    ShardSet s = write_shards(tmp_dir() + "/order", B, T, rng);
    auto ref = reference_epoch(s.tokens, B, T);
    DataLoader dl;
    std::string err;
    CHECK(dl.init(s.pattern, B, T, 1, 0, false, 0, 257, err), "%s", err.c_str());
    CHECK(dl.shards.size() == 3 && dl.num_batches == 9, "%zu shards, %lld batches", dl.shards.size(), (long long)dl.num_batches);
    // Read lazily: nothing of a file shard is held in memory.
    bool lazy = true;
    for (auto& sh : dl.shards) lazy &= sh.file && sh.memory.empty();
    CHECK(lazy, "file shards must be read batch by batch, not loaded");
    int bad = 0;
    for (int epoch = 0; epoch < 2; epoch++)
        for (size_t k = 0; k < ref.size(); k++) {
            dl.next_batch();
            if (rank_part(dl) != ref[k] || !targets_shifted(dl)) bad++;
        }
    CHECK(bad == 0, "%d of 18 batches differ from llm.c's order over the shards (two epochs)", bad);
    CHECK(dl.epoch == 2 && dl.position == 0, "after two epochs: epoch %lld position %lld", (long long)dl.epoch,
          (long long)dl.position);

    // The first batches of the pattern are those of its first file read alone.
    DataLoader first;
    CHECK(first.init(s.first_file, B, T, 1, 0, false, 0, 257, err), "%s", err.c_str());
    DataLoader again;
    again.init(s.pattern, B, T, 1, 0, false, 0, 257, err);
    bad = 0;
    for (int k = 0; k < 3; k++) {
        first.next_batch();
        again.next_batch();
        if (rank_part(first) != rank_part(again)) bad++;
    }
    CHECK(bad == 0, "the pattern's first 3 batches are not its first file's");

    // Data parallelism: rank r's part is sequences [r·B/dp, (r+1)·B/dp) of the same global batch.
    for (int dp : {2, 4}) {
        std::vector<DataLoader> ranks(dp);
        for (int r = 0; r < dp; r++) ranks[r].init(s.pattern, B, T, dp, r, false, 0, 257, err);
        bad = 0;
        for (size_t k = 0; k < ref.size(); k++) {
            std::vector<uint16_t> joined;
            for (int r = 0; r < dp; r++) {
                ranks[r].next_batch();
                std::vector<uint16_t> p = rank_part(ranks[r]);
                joined.insert(joined.end(), p.begin(), p.end() - 1);
                if (r == dp - 1) joined.push_back(p.back());
            }
            if (joined != ref[k]) bad++;
        }
        CHECK(bad == 0, "dp %d: %d global batches differ", dp, bad);
    }
}

static void test_shuffle(std::mt19937& rng) {
    const int B = 2, T = 4;
    ShardSet s = write_shards(tmp_dir() + "/shuffle", B, T, rng);
    DataLoader dl;
    std::string err;
    CHECK(dl.init(s.pattern, B, T, 1, 0, true, 1234, 257, err), "%s", err.c_str());
    std::vector<std::vector<std::pair<int32_t, int64_t>>> epochs;
    for (int e = 0; e < 4; e++) {
        std::vector<std::pair<int32_t, int64_t>> seen;
        for (int64_t k = 0; k < dl.num_batches; k++) {
            seen.emplace_back(dl.next_shard(), dl.next_batch_index());
            dl.next_batch();
        }
        epochs.push_back(seen);
    }
    for (auto& seen : epochs) {
        std::set<std::pair<int32_t, int64_t>> uniq(seen.begin(), seen.end());
        bool valid = uniq.size() == seen.size() && (int64_t)seen.size() == dl.num_batches;
        for (auto& [sh, k] : seen) valid &= k >= 0 && k < dl.shards[(size_t)sh].batches;
        CHECK(valid, "an epoch must visit every (shard, batch) once");
        // One shard at a time: the shard index changes exactly (shards - 1) times within an epoch.
        int changes = 0;
        for (size_t i = 1; i < seen.size(); i++) changes += seen[i].first != seen[i - 1].first;
        CHECK(changes == 2, "shards interleaved within an epoch (%d changes)", changes);
    }
    CHECK(epochs[0] != epochs[1] || epochs[1] != epochs[2], "shuffling gives the same order every epoch");
    // Deterministic from (seed, epoch), the same on every rank.
    DataLoader other;
    other.init(s.pattern, B, T, 2, 1, true, 1234, 257, err);
    bool same = true;
    for (auto& seen : epochs)
        for (auto& sk : seen) {
            same &= other.next_shard() == sk.first && other.next_batch_index() == sk.second;
            other.next_batch();
        }
    CHECK(same, "another DP rank with the same seed reads another order");
    // One shard alone shuffles as the loader always has: a permutation of its batches from (seed, epoch).
    DataLoader one;
    one.init(s.first_file, B, T, 1, 0, true, 99, 257, err);
    std::vector<int64_t> want = epoch_batch_order(one.num_batches, true, 99, 0), got;
    for (int64_t k = 0; k < one.num_batches; k++) got.push_back(one.next_batch_index()), one.next_batch();
    CHECK(got == want, "one shard: the order is not epoch_batch_order(seed, epoch)");
}

static void test_resume_across_boundary(std::mt19937& rng) {
    const int B = 2, T = 8;
    ShardSet s = write_shards(tmp_dir() + "/resume", B, T, rng);
    std::string err;
    for (bool shuffle : {false, true}) {
        DataLoader a;
        a.init(s.pattern, B, T, 1, 0, shuffle, 7, 257, err);
        // Stop right before the batch that starts a new shard, then read across it, from a fresh loader.
        int64_t stop = 0;
        for (int64_t k = 0; k + 1 < a.num_batches; k++)
            if (a.order[(size_t)k + 1].first != a.order[(size_t)k].first) stop = k + 1;
        for (int64_t k = 0; k < stop; k++) a.next_batch();
        DataLoaderState saved = a.state();
        DataLoader b;
        b.init(s.pattern, B, T, 1, 0, shuffle, 7, 257, err);
        b.set_state(saved);
        int bad = 0;
        for (int k = 0; k < 15; k++) {  // on across the boundary and into the next epoch
            a.next_batch();
            b.next_batch();
            if (rank_part(a) != rank_part(b)) bad++;
        }
        CHECK(bad == 0 && stop > 0, "shuffle %d: resumed at %lld, %d of 15 batches differ", shuffle, (long long)stop, bad);
    }
    // The fingerprint tells the data apart: the same shards agree, another set does not.
    DataLoader x, y, z;
    x.init(s.pattern, B, T, 1, 0, false, 0, 257, err);
    y.init(s.pattern, B, T, 2, 1, true, 5, 257, err);
    z.init(s.first_file, B, T, 1, 0, false, 0, 257, err);
    CHECK(x.fingerprint() == y.fingerprint() && x.fingerprint() != z.fingerprint(), "fingerprint");
    CHECK(x.total_tokens() == (int64_t)(s.tokens[0].size() + s.tokens[1].size() + s.tokens[2].size()), "total tokens");
}

static void test_bad_inputs(std::mt19937& rng) {
    const int B = 2, T = 4;
    std::string err;
    DataLoader dl;
    CHECK(!dl.init(tmp_dir() + "/nowhere/train_*.bin", B, T, 1, 0, false, 0, 257, err) &&
              contains(err, "train_*.bin matches no file"), "empty pattern: %s", err.c_str());
    // A shard with a bad header among good ones: refused at start-up, naming that file.
    ShardSet s = write_shards(tmp_dir() + "/bad", B, T, rng);
    std::string bad = tmp_dir() + "/bad/part_1.bin";
    {
        std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
        int32_t magic = 12345;
        f.write((const char*)&magic, 4);
    }
    CHECK(!dl.init(s.pattern, B, T, 1, 0, false, 0, 257, err) && contains(err, bad) && contains(err, "magic 12345"),
          "bad header among good shards: %s", err.c_str());
    // A shard too short for one batch: named.
    ShardSet t = write_shards(tmp_dir() + "/short", B, T, rng);
    std::vector<uint16_t> few = random_tokens(5, 257, rng);
    write_token_shard(tmp_dir() + "/short/part_9.bin", few.data(), few.size());
    CHECK(!dl.init(t.pattern, B, T, 1, 0, false, 0, 257, err) && contains(err, "part_9.bin holds 5 tokens"),
          "short shard: %s", err.c_str());
    // A token id outside the vocabulary: found when its batch is read, naming shard, position and value.
    std::vector<uint16_t> toks = random_tokens((size_t)3 * B * T + 1, 257, rng);
    toks[(size_t)B * T + 3] = 300;  // in batch 1
    std::string path = tmp_dir() + "/badtok.bin";
    write_token_shard(path, toks.data(), toks.size());
    CHECK(dl.init(path, B, T, 1, 0, false, 0, 257, err), "start-up does not scan the tokens: %s", err.c_str());
    CHECK(dl.next_batch(err), "batch 0 is fine: %s", err.c_str());
    CHECK(!dl.next_batch(err) && contains(err, path) && contains(err, "token 300 at position 11") &&
              contains(err, "vocabulary size 257"), "bad token: %s", err.c_str());
}

int main() {
    tmp_dir_create("test_shards");
    std::mt19937 rng(20240520);
    test_llmc_order(rng);
    test_shuffle(rng);
    test_resume_across_boundary(rng);
    test_bad_inputs(rng);
    tmp_dir_finish();
    return test_finish("test_dataloader_shards");
}
