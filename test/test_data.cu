// test_data.cu — token shards, the byte tokenizer, the data loader (llm.c reading, DP slicing, shuffling,
// resume), llm.c checkpoints, and (with --cli PATH) the prepare_data command line.
//
//   test_data                      unit checks
//   test_data --cli build/prepare_data   the prepare_data command-line checks
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../data/dataloader.h"
#include "../data/shard.h"
#include "../data/tokenizer.h"
#include "../model/checkpoint.h"
#include "test_util.h"

namespace fs = std::filesystem;

// ---- small file helpers -------------------------------------------------------------------------------
static std::string g_tmp;  // this run's temporary directory
static std::string tmp_path(const std::string& name) { return g_tmp + "/" + name; }
static std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}
static void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), (std::streamsize)bytes.size());
}
static bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
static int32_t header_int(const std::string& bytes, int i) {
    int32_t v = 0;
    memcpy(&v, bytes.data() + 4 * i, 4);
    return v;
}
static void set_header_int(std::string& bytes, int i, int32_t v) { memcpy(&bytes[4 * i], &v, 4); }
static std::vector<uint16_t> random_tokens(size_t n, int vocab, std::mt19937& rng) {
    std::uniform_int_distribution<int> d(0, vocab - 1);
    std::vector<uint16_t> t(n);
    for (auto& x : t) x = (uint16_t)d(rng);
    return t;
}
// No temporary files may be left beside the real ones after an atomic write.
static int count_tmp_files() {
    int n = 0;
    for (auto& e : fs::directory_iterator(g_tmp))
        if (contains(e.path().filename().string(), ".tmp.")) n++;
    return n;
}

// ---- token shards ---------------------------------------------------------------------------------------
static void test_shard_round_trip(std::mt19937& rng) {
    for (size_t n : {(size_t)0, (size_t)1, (size_t)12345}) {
        std::vector<uint16_t> toks = random_tokens(n, 65536, rng);
        std::string path = tmp_path("round_trip.bin");
        write_token_shard(path, toks.data(), toks.size());
        std::string raw = read_bytes(path);
        CHECK(raw.size() == 1024 + 2 * n, "file size %zu for %zu tokens", raw.size(), n);
        CHECK(header_int(raw, 0) == 20240520 && header_int(raw, 1) == 1 && header_int(raw, 2) == (int32_t)n,
              "header %d %d %d", header_int(raw, 0), header_int(raw, 1), header_int(raw, 2));
        bool zero_rest = true;
        for (int i = 3; i < 256; i++) zero_rest = zero_rest && header_int(raw, i) == 0;
        CHECK(zero_rest, "header ints 3..255 must be zero");
        CHECK(n == 0 || memcmp(raw.data() + 1024, toks.data(), 2 * n) == 0, "tokens stored raw after header");
        std::vector<uint16_t> back;
        std::string err;
        CHECK(read_token_shard(path, back, err), "read failed: %s", err.c_str());
        CHECK(back == toks, "round trip of %zu tokens differs", n);
    }
    CHECK(count_tmp_files() == 0, "a temporary file was left behind");
}

static void test_bad_shards(std::mt19937& rng) {
    std::vector<uint16_t> toks = random_tokens(100, 257, rng);
    std::string good = tmp_path("good.bin");
    write_token_shard(good, toks.data(), toks.size());
    const std::string raw = read_bytes(good);  // 1024 + 200 = 1224 bytes
    std::vector<uint16_t> out;
    std::string err;

    std::string p = tmp_path("truncated.bin");
    write_bytes(p, raw.substr(0, 1024 + 100));
    CHECK(!read_token_shard(p, out, err), "truncated shard accepted");
    CHECK(contains(err, p) && contains(err, "1224") && contains(err, "1124") && contains(err, "truncated") &&
              contains(err, "100 tokens"),
          "message: %s", err.c_str());

    p = tmp_path("no_header.bin");
    write_bytes(p, raw.substr(0, 500));
    CHECK(!read_token_shard(p, out, err), "shard without a whole header accepted");
    CHECK(contains(err, p) && contains(err, "truncated") && contains(err, "1024"), "message: %s", err.c_str());

    p = tmp_path("count_too_large.bin");
    std::string bad = raw;
    set_header_int(bad, 2, 101);
    write_bytes(p, bad);
    CHECK(!read_token_shard(p, out, err), "header count > file accepted");
    CHECK(contains(err, p) && contains(err, "101 tokens") && contains(err, "1226") && contains(err, "1224"),
          "message: %s", err.c_str());

    p = tmp_path("oversized.bin");
    write_bytes(p, raw + std::string(6, '\0'));
    CHECK(!read_token_shard(p, out, err), "shard with trailing bytes accepted");
    CHECK(contains(err, p) && contains(err, "1224") && contains(err, "1230") && contains(err, "trailing"),
          "message: %s", err.c_str());

    p = tmp_path("magic.bin");
    bad = raw;
    set_header_int(bad, 0, 20240326);  // a checkpoint's magic
    write_bytes(p, bad);
    CHECK(!read_token_shard(p, out, err), "wrong magic accepted");
    CHECK(contains(err, p) && contains(err, "magic 20240326") && contains(err, "expected 20240520"),
          "message: %s", err.c_str());

    p = tmp_path("version.bin");
    bad = raw;
    set_header_int(bad, 1, 2);
    write_bytes(p, bad);
    CHECK(!read_token_shard(p, out, err), "wrong version accepted");
    CHECK(contains(err, p) && contains(err, "version 2") && contains(err, "expected 1"), "message: %s", err.c_str());

    p = tmp_path("does_not_exist.bin");
    CHECK(!read_token_shard(p, out, err), "missing file accepted");
    CHECK(contains(err, p) && contains(err, "cannot open"), "message: %s", err.c_str());
}

// ---- tokenizer ------------------------------------------------------------------------------------------
static void test_tokenizer(std::mt19937& rng) {
    std::string all;
    for (int b = 0; b < 256; b++) all.push_back((char)b);
    std::uniform_int_distribution<int> byte(0, 255);
    for (int i = 0; i < 5000; i++) all.push_back((char)byte(rng));
    std::vector<uint16_t> toks = tokenizer::encode(all);
    CHECK(toks.size() == all.size(), "one token per byte");
    bool ok = true;
    for (size_t i = 0; i < all.size(); i++) ok = ok && toks[i] == (unsigned char)all[i];
    CHECK(ok, "token == byte value (unsigned)");
    CHECK(tokenizer::decode(toks) == all, "decode(encode(x)) == x for arbitrary bytes");
    CHECK(tokenizer::decode({'a', (uint16_t)tokenizer::kEOT, 'b'}) == std::string("a") + tokenizer::kEOTText + "b",
          "EOT decodes to the marker");
    CHECK(contains(tokenizer::decode_token(300), "300"), "padding id decoded visibly");
    CHECK(tokenizer::kVocab == 257 && tokenizer::kEOT == 256, "vocab");
    CHECK(tokenizer::kPaddedVocab >= tokenizer::kVocab && tokenizer::kPaddedVocab % 128 == 0 &&
              tokenizer::kPaddedVocab % 8 == 0,
          "padded vocab %d", tokenizer::kPaddedVocab);
}

// ---- data loader ----------------------------------------------------------------------------------------
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

// ---- checkpoints ----------------------------------------------------------------------------------------
static GPTConfig small_config() {
    GPTConfig c;
    c.max_seq = 8;
    c.vocab = 257;
    c.padded_vocab = 384;
    c.layers = 2;
    c.heads = 2;
    c.channels = 8;
    return c;
}
static bool same_config(const GPTConfig& a, const GPTConfig& b) {
    return a.max_seq == b.max_seq && a.vocab == b.vocab && a.padded_vocab == b.padded_vocab &&
           a.layers == b.layers && a.heads == b.heads && a.channels == b.channels;
}

static void test_checkpoint_round_trip(std::mt19937& rng) {
    GPTConfig cfg = small_config();
    const int64_t n = param_count(cfg);
    std::vector<float> params = random_vec((size_t)n, rng);
    // Tag the first element of each tensor with its index, to check the order in the raw file.
    int64_t sizes[NUM_PARAM_TENSORS], offset[NUM_PARAM_TENSORS];
    param_sizes(cfg, sizes);
    for (int i = 0, off = 0; i < NUM_PARAM_TENSORS; off += (int)sizes[i], i++) {
        offset[i] = off;
        params[off] = 100.0f + i;
    }
    // Values that test bf16's rounding to nearest even (ties go to the even mantissa).
    params[1] = 1.0f + 1.0f / 256;      // halfway between 1 and 1 + 2^-7 -> 1
    params[2] = 1.0f + 3.0f / 256;      // halfway between 1 + 2^-7 and 1 + 2^-6 -> 1 + 2^-6
    params[3] = 1.0f + 1.0f / 256 + 1e-6f;  // just above halfway -> 1 + 2^-7

    for (bool bf16mode : {false, true}) {
        std::string path = tmp_path(bf16mode ? "model_bf16.bin" : "model_f32.bin");
        checkpoint_write(path, cfg, params.data(), bf16mode);
        std::string raw = read_bytes(path);
        const int esz = bf16mode ? 2 : 4;
        CHECK((int64_t)raw.size() == 1024 + n * esz, "file size %zu", raw.size());
        CHECK(header_int(raw, 0) == 20240326 && header_int(raw, 1) == (bf16mode ? 5 : 3), "magic/version");
        CHECK(header_int(raw, 2) == 8 && header_int(raw, 3) == 257 && header_int(raw, 4) == 2 &&
                  header_int(raw, 5) == 2 && header_int(raw, 6) == 8 && header_int(raw, 7) == 384,
              "header[2..7] = maxT V L NH C Vp");
        bool zero_rest = true;
        for (int i = 8; i < 256; i++) zero_rest = zero_rest && header_int(raw, i) == 0;
        CHECK(zero_rest, "header ints 8..255 zero");
        for (int i = 0; i < NUM_PARAM_TENSORS; i++) {
            float v;
            if (bf16mode) {
                uint16_t h;
                memcpy(&h, raw.data() + 1024 + offset[i] * 2, 2);
                uint32_t bits = (uint32_t)h << 16;
                memcpy(&v, &bits, 4);
            } else {
                memcpy(&v, raw.data() + 1024 + offset[i] * 4, 4);
            }
            CHECK(v == 100.0f + i, "tensor %s (%d) not at its llm.c offset %lld", param_name(i), i,
                  (long long)offset[i]);
        }
        if (!bf16mode) CHECK(memcmp(raw.data() + 1024, params.data(), n * 4) == 0, "fp32 body = raw params");

        GPTConfig got;
        std::vector<float> back;
        std::string err;
        CHECK(checkpoint_read(path, got, back, err), "%s", err.c_str());
        CHECK(same_config(got, cfg), "config round trip");
        std::vector<float> expect = bf16mode ? round_bf16(params) : params;
        CHECK(bitwise_equal(back, expect), "%s parameters round trip", bf16mode ? "bf16" : "fp32");
        if (bf16mode)
            CHECK(back[1] == 1.0f && back[2] == 1.0f + 1.0f / 64 && back[3] == 1.0f + 1.0f / 128,
                  "nearest-even rounding: %.9g %.9g %.9g", back[1], back[2], back[3]);
        bool is_bf16 = !bf16mode;
        GPTConfig hdr;
        CHECK(checkpoint_read_header(path, hdr, is_bf16, err) && is_bf16 == bf16mode && same_config(hdr, cfg),
              "read_header: %s", err.c_str());
    }
    CHECK(count_tmp_files() == 0, "a temporary file was left behind");
}

static void test_bad_checkpoints(std::mt19937& rng) {
    GPTConfig cfg = small_config();
    const int64_t n = param_count(cfg);
    std::vector<float> params = random_vec((size_t)n, rng);
    std::string good = tmp_path("good_model.bin");
    checkpoint_write(good, cfg, params.data(), false);
    const std::string raw = read_bytes(good);
    const std::string expected_bytes = std::to_string(1024 + n * 4);
    GPTConfig got;
    std::vector<float> back;
    std::string err;

    std::string p = tmp_path("truncated_model.bin");
    write_bytes(p, raw.substr(0, raw.size() - 2));
    CHECK(!checkpoint_read(p, got, back, err), "truncated checkpoint accepted");
    CHECK(contains(err, p) && contains(err, expected_bytes) && contains(err, std::to_string(raw.size() - 2)) &&
              contains(err, "truncated"),
          "message: %s", err.c_str());

    p = tmp_path("oversized_model.bin");
    write_bytes(p, raw + "xxxx");
    CHECK(!checkpoint_read(p, got, back, err), "oversized checkpoint accepted");
    CHECK(contains(err, p) && contains(err, expected_bytes) && contains(err, std::to_string(raw.size() + 4)) &&
              contains(err, "oversized"),
          "message: %s", err.c_str());

    p = tmp_path("header_only_model.bin");
    write_bytes(p, raw.substr(0, 100));
    CHECK(!checkpoint_read(p, got, back, err), "partial header accepted");
    CHECK(contains(err, p) && contains(err, "truncated"), "message: %s", err.c_str());

    p = tmp_path("magic_model.bin");
    std::string bad = raw;
    set_header_int(bad, 0, 20240520);  // a token shard's magic
    write_bytes(p, bad);
    CHECK(!checkpoint_read(p, got, back, err), "wrong magic accepted");
    CHECK(contains(err, p) && contains(err, "magic 20240520") && contains(err, "20240326"), "message: %s", err.c_str());

    p = tmp_path("version_model.bin");
    bad = raw;
    set_header_int(bad, 1, 4);
    write_bytes(p, bad);
    CHECK(!checkpoint_read(p, got, back, err), "version 4 accepted");
    CHECK(contains(err, p) && contains(err, "version 4") && contains(err, "3") && contains(err, "5"),
          "message: %s", err.c_str());

    p = tmp_path("vp_model.bin");
    bad = raw;
    set_header_int(bad, 7, 100);  // Vp < V
    write_bytes(p, bad);
    CHECK(!checkpoint_read(p, got, back, err), "Vp < V accepted");
    CHECK(contains(err, p) && contains(err, "padded vocabulary 100") && contains(err, "257"), "message: %s",
          err.c_str());

    p = tmp_path("heads_model.bin");
    bad = raw;
    set_header_int(bad, 5, 3);  // C = 8 not divisible by 3 heads
    write_bytes(p, bad);
    CHECK(!checkpoint_read(p, got, back, err), "C %% NH != 0 accepted");
    CHECK(contains(err, p) && contains(err, "hidden 8 is not divisible by 3 heads"), "message: %s", err.c_str());

    p = tmp_path("huge_model.bin");
    bad = raw;
    set_header_int(bad, 6, 2000000000);
    set_header_int(bad, 5, 1);
    write_bytes(p, bad);
    CHECK(!checkpoint_read(p, got, back, err), "absurd sizes accepted");
    CHECK(contains(err, p), "message: %s", err.c_str());

    CHECK(!checkpoint_read(tmp_path("nope.bin"), got, back, err) && contains(err, "nope.bin"), "missing: %s",
          err.c_str());

    // validate_config on its own.
    GPTConfig c = small_config();
    CHECK(validate_config(c).empty(), "small config valid: %s", validate_config(c).c_str());
    c.channels = 100;
    c.heads = 3;
    CHECK(validate_config(c) == "hidden 100 is not divisible by 3 heads", "got: %s", validate_config(c).c_str());
    c = small_config();
    c.layers = 0;
    CHECK(contains(validate_config(c), "layers") && contains(validate_config(c), "positive"), "got: %s",
          validate_config(c).c_str());
}

// ---- prepare_data command line ---------------------------------------------------------------------------
static int run(const std::string& cmd) {
    int rc = system((cmd + " >" + tmp_path("cli.out") + " 2>" + tmp_path("cli.err")).c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}
static std::vector<uint16_t> read_shard_or_fail(const std::string& path) {
    std::vector<uint16_t> t;
    std::string err;
    CHECK(read_token_shard(path, t, err), "%s", err.c_str());
    return t;
}

static void test_prepare_data_cli(const std::string& exe) {
    const std::string a = "hello world\nsecond line\n";
    static const char kB[] = "bytes: \x00\xff\xe2\x82\xac end";  // 16 bytes, one of them NUL
    const std::string b = std::string(kB, sizeof kB - 1);
    write_bytes(tmp_path("a.txt"), a);
    write_bytes(tmp_path("b.txt"), b);
    const std::string out = tmp_path("out");
    int rc = run(exe + " --out-dir " + out + " --val-fraction 0.25 " + tmp_path("a.txt") + " " + tmp_path("b.txt"));
    CHECK(rc == 0, "prepare_data failed (%d): %s", rc, read_bytes(tmp_path("cli.err")).c_str());
    std::vector<uint16_t> expect = tokenizer::encode(a);
    expect.push_back((uint16_t)tokenizer::kEOT);
    for (uint16_t t : tokenizer::encode(b)) expect.push_back(t);
    std::vector<uint16_t> train = read_shard_or_fail(out + "/train.bin");
    std::vector<uint16_t> val = read_shard_or_fail(out + "/val.bin");
    const size_t n_val = (size_t)(expect.size() * 0.25);
    CHECK(val.size() == n_val && train.size() == expect.size() - n_val, "split %zu + %zu of %zu", train.size(),
          val.size(), expect.size());
    std::vector<uint16_t> joined = train;
    joined.insert(joined.end(), val.begin(), val.end());
    CHECK(joined == expect, "train ++ val == encode(a) EOT encode(b)");
    std::string printed = read_bytes(tmp_path("cli.out"));
    CHECK(contains(printed, std::to_string(train.size())) && contains(printed, std::to_string(val.size())),
          "token counts printed: %s", printed.c_str());

    rc = run(exe + " --out-dir " + out + " " + tmp_path("no_such_file.txt"));
    CHECK(rc != 0 && contains(read_bytes(tmp_path("cli.err")), "no_such_file.txt"), "missing file: rc %d, %s", rc,
          read_bytes(tmp_path("cli.err")).c_str());
    write_bytes(tmp_path("empty.txt"), "");
    rc = run(exe + " --out-dir " + out + " " + tmp_path("empty.txt"));
    CHECK(rc != 0 && contains(read_bytes(tmp_path("cli.err")), "empty"), "empty input: rc %d, %s", rc,
          read_bytes(tmp_path("cli.err")).c_str());
    rc = run(exe + " " + tmp_path("a.txt"));
    CHECK(rc != 0 && contains(read_bytes(tmp_path("cli.err")), "--out-dir"), "missing --out-dir: rc %d", rc);
    rc = run(exe + " --out-dir " + out + " --val-fraction 1.5 " + tmp_path("a.txt"));
    CHECK(rc != 0, "--val-fraction 1.5 accepted");

    // --default: *.md and sources under --root in sorted order; hidden and build directories skipped.
    const std::string root = tmp_path("repo");
    fs::create_directories(root + "/z");
    fs::create_directories(root + "/a");
    fs::create_directories(root + "/build-x");
    fs::create_directories(root + "/.git");
    write_bytes(root + "/README.md", "# readme\n");
    write_bytes(root + "/z/x.cu", "int x;\n");
    write_bytes(root + "/a/y.h", "#pragma once\n");
    write_bytes(root + "/a/notes.txt", "not part of the corpus\n");
    write_bytes(root + "/build-x/gen.cu", "generated\n");
    write_bytes(root + "/.git/HEAD.md", "hidden\n");
    rc = run(exe + " --default --root " + root + " --val-fraction 0");
    CHECK(rc == 0, "--default failed (%d): %s", rc, read_bytes(tmp_path("cli.err")).c_str());
    std::string corpus = std::string("# readme\n") + "\x01" + "#pragma once\n" + "\x01" + "int x;\n";
    std::vector<uint16_t> want;
    for (char c : corpus) want.push_back(c == '\x01' ? (uint16_t)tokenizer::kEOT : (uint16_t)(unsigned char)c);
    const std::string gen = root + "/data/generated/default";
    std::vector<uint16_t> got = read_shard_or_fail(gen + "/train.bin");
    CHECK(got == want, "--default corpus: got \"%s\"", tokenizer::decode(got).c_str());
    CHECK(read_shard_or_fail(gen + "/val.bin").empty(), "--val-fraction 0: empty val.bin");
    // Deterministic: a second run writes the same bytes (the generated shards themselves are not inputs).
    const std::string first = read_bytes(gen + "/train.bin");
    rc = run(exe + " --default --root " + root + " --val-fraction 0");
    CHECK(rc == 0 && read_bytes(gen + "/train.bin") == first, "--default is deterministic");
}

int main(int argc, char** argv) {
    char tmpl[] = "/tmp/mm_test_data_XXXXXX";
    if (!mkdtemp(tmpl)) {
        perror("mkdtemp");
        return 1;
    }
    g_tmp = tmpl;
    std::mt19937 rng(20240520);
    if (argc == 3 && std::string(argv[1]) == "--cli") {
        test_prepare_data_cli(argv[2]);
    } else {
        test_shard_round_trip(rng);
        test_bad_shards(rng);
        test_tokenizer(rng);
        test_loader_llmc_order(rng);
        test_loader_dp_union(rng);
        test_loader_shuffle(rng);
        test_loader_errors(rng);
        test_checkpoint_round_trip(rng);
        test_bad_checkpoints(rng);
    }
    std::error_code ec;
    if (g_failures == 0) fs::remove_all(g_tmp, ec);  // keep the files of a failing run for inspection
    else fprintf(stderr, "files kept in %s\n", g_tmp.c_str());
    return test_finish(argc == 3 ? "test_data --cli" : "test_data");
}
