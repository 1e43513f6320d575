// test_dataloader.cu — the data loader (data/dataloader.cu): llm.c's reading order (global batch k's sequence
// i starts at token k·B·T + i·T, targets one further), a data-parallel rank's slice (the union over ranks is
// the dp = 1 batch, shuffled or not), the per-epoch shuffle as a function of (seed, epoch), resuming from a
// saved state mid-epoch and across an epoch boundary, and the messages for unusable data.
#include <algorithm>
#include "data/dataloader.h"
#include "data/shard.h"
#include "test/test_util.h"

// llm.c's reading: global batch k's sequence i = tokens[k·B·T + i·T + t], target one further.
static bool batch_matches(const DataLoader& dl, const std::vector<uint16_t>& toks, int64_t k) {
    const int64_t start = k * dl.B * dl.T + (int64_t)dl.dp_rank * dl.B_local * dl.T;
    for (int64_t j = 0; j < (int64_t)dl.B_local * dl.T; j++) {
        if (dl.inputs[j] != toks[start + j] || dl.targets[j] != toks[start + j + 1]) return false;
    }
    return true;
}

static void test_loader_llmc_order(std::mt19937& rng) {
    const int B = 4, T = 8, BT = B * T;
    // 5 whole batches plus a tail that is skipped (7 tokens), and the exact fit (5·BT + 1 tokens).
    for (int64_t n : {(int64_t)5 * BT + 7, (int64_t)5 * BT + 1}) {
        std::vector<uint16_t> toks = random_tokens((size_t)n, 257, rng);
        DataLoader dl;
        std::string err;
        CHECK(dl.init_from_tokens(toks, "mem", B, T, 1, 0, false, 0, 257, err), "%s", err.c_str());
        CHECK(dl.num_batches == 5, "num_batches %lld", (long long)dl.num_batches);
        for (int step = 0; step < 13; step++) {  // wraps twice
            DataLoaderState s = dl.state();
            CHECK(s.epoch == step / 5 && s.position == step % 5, "step %d: state (%lld, %lld)", step,
                  (long long)s.epoch, (long long)s.position);
            dl.next_batch();
            CHECK(batch_matches(dl, toks, step % 5), "n=%lld step %d: batch differs from llm.c's formula",
                  (long long)n, step);
        }
    }
    // From a file, through init().
    std::vector<uint16_t> toks = random_tokens(3 * BT + 1, 257, rng);
    std::string path = tmp_path("loader.bin");
    write_token_shard(path, toks.data(), toks.size());
    DataLoader dl;
    std::string err;
    CHECK(dl.init(path, B, T, 1, 0, false, 0, 257, err), "%s", err.c_str());
    for (int step = 0; step < 4; step++) {
        dl.next_batch();
        CHECK(batch_matches(dl, toks, step % 3), "file loader step %d", step);
    }
}

static void test_loader_dp_union(std::mt19937& rng) {
    const int B = 8, T = 5;
    std::vector<uint16_t> toks = random_tokens((size_t)B * T * 7 + 3, 257, rng);
    for (bool shuffle : {false, true}) {
        DataLoader one;
        std::string err;
        CHECK(one.init_from_tokens(toks, "mem", B, T, 1, 0, shuffle, 42, 257, err), "%s", err.c_str());
        for (int dp : {2, 4}) {
            std::vector<DataLoader> ranks(dp);
            for (int r = 0; r < dp; r++)
                CHECK(ranks[r].init_from_tokens(toks, "mem", B, T, dp, r, shuffle, 42, 257, err), "%s", err.c_str());
            DataLoader ref;
            ref.init_from_tokens(toks, "mem", B, T, 1, 0, shuffle, 42, 257, err);
            for (int step = 0; step < 16; step++) {  // more than two epochs of 7 batches
                ref.next_batch();
                std::vector<int32_t> in, tg;
                for (int r = 0; r < dp; r++) {
                    ranks[r].next_batch();
                    CHECK((int)ranks[r].inputs.size() == B / dp * T, "local batch size");
                    in.insert(in.end(), ranks[r].inputs.begin(), ranks[r].inputs.end());
                    tg.insert(tg.end(), ranks[r].targets.begin(), ranks[r].targets.end());
                }
                CHECK(in == ref.inputs && tg == ref.targets, "shuffle=%d dp=%d step %d: union of ranks != dp=1",
                      (int)shuffle, dp, step);
            }
        }
    }
}

static void test_loader_shuffle(std::mt19937& rng) {
    const int B = 2, T = 4, BT = B * T, K = 20;
    std::vector<uint16_t> toks = random_tokens((size_t)K * BT + 1, 257, rng);
    DataLoader dl;
    std::string err;
    CHECK(dl.init_from_tokens(toks, "mem", B, T, 1, 0, true, 1234, 257, err), "%s", err.c_str());
    std::vector<std::vector<int64_t>> orders;
    for (int epoch = 0; epoch < 3; epoch++) {
        std::vector<int64_t> seen;
        for (int i = 0; i < K; i++) {
            int64_t k = dl.next_batch_index();
            seen.push_back(k);
            dl.next_batch();
            CHECK(batch_matches(dl, toks, k), "shuffled batch %lld is not llm.c's batch slice", (long long)k);
        }
        std::vector<int64_t> sorted = seen;
        std::sort(sorted.begin(), sorted.end());
        bool perm = true;
        for (int i = 0; i < K; i++) perm = perm && sorted[i] == i;
        CHECK(perm, "epoch %d: each batch index exactly once", epoch);
        CHECK(seen == epoch_batch_order(K, true, 1234, epoch), "order is a function of (seed, epoch)");
        orders.push_back(seen);
    }
    std::vector<int64_t> identity(K);
    for (int i = 0; i < K; i++) identity[i] = i;
    CHECK(orders[0] != identity && orders[0] != orders[1] && orders[1] != orders[2], "epochs shuffled differently");
    CHECK(epoch_batch_order(K, true, 1235, 0) != orders[0], "a different seed gives a different order");
    CHECK(epoch_batch_order(K, false, 1234, 5) == identity, "no shuffle: identity");

    // Resume: save the state mid-epoch and just before an epoch boundary; a fresh loader set to it returns
    // the same next batches (across the boundary).
    for (int skip : {7, K - 2}) {
        DataLoader a;
        a.init_from_tokens(toks, "mem", B, T, 1, 0, true, 99, 257, err);
        for (int i = 0; i < K + skip; i++) a.next_batch();  // into the second epoch
        DataLoaderState s = a.state();
        DataLoader b;
        b.init_from_tokens(toks, "mem", B, T, 1, 0, true, 99, 257, err);
        b.set_state(s);
        CHECK(b.state().epoch == s.epoch && b.state().position == s.position, "state restored");
        for (int i = 0; i < 6; i++) {
            a.next_batch();
            b.next_batch();
            CHECK(a.inputs == b.inputs && a.targets == b.targets, "resumed batch %d differs (skip %d)", i, skip);
        }
    }
}

static void test_loader_errors(std::mt19937& rng) {
    std::string err;
    DataLoader dl;
    std::vector<uint16_t> toks = random_tokens(200, 257, rng);
    toks[17] = 300;
    CHECK(!dl.init_from_tokens(toks, "vocab-test", 2, 4, 1, 0, false, 0, 257, err), "token >= vocab accepted");
    CHECK(contains(err, "vocab-test") && contains(err, "300") && contains(err, "position 17") && contains(err, "257"),
          "message: %s", err.c_str());
    toks[17] = 256;
    CHECK(dl.init_from_tokens(toks, "vocab-test", 2, 4, 1, 0, false, 0, 257, err), "EOT is a valid token: %s",
          err.c_str());
    CHECK(!dl.validate_tokens(256, err) && contains(err, "position 17"), "validate_tokens(256): %s", err.c_str());

    CHECK(!dl.init_from_tokens(random_tokens(32, 257, rng), "short", 4, 8, 1, 0, false, 0, 257, err),
          "B*T tokens (one short) accepted");
    CHECK(contains(err, "short") && contains(err, "B=4") && contains(err, "T=8") && contains(err, "32 tokens") &&
              contains(err, "33"),
          "message: %s", err.c_str());
    CHECK(dl.init_from_tokens(random_tokens(33, 257, rng), "exact", 4, 8, 1, 0, false, 0, 257, err),
          "B*T+1 tokens refused: %s", err.c_str());

    CHECK(!dl.init_from_tokens(random_tokens(1000, 257, rng), "dp", 4, 8, 3, 0, false, 0, 257, err),
          "B not divisible by dp accepted");
    CHECK(contains(err, "B=4") && contains(err, "dp=3"), "message: %s", err.c_str());

    CHECK(!dl.init(tmp_path("missing.bin"), 4, 8, 1, 0, false, 0, 257, err) && contains(err, "missing.bin"),
          "missing shard: %s", err.c_str());
}

int main() {
    tmp_dir_create("test_dataloader");
    std::mt19937 rng(20240520);
    test_loader_llmc_order(rng);
    test_loader_dp_union(rng);
    test_loader_shuffle(rng);
    test_loader_errors(rng);
    tmp_dir_finish();
    return test_finish("test_dataloader");
}
