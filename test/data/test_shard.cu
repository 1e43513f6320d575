// test_shard.cu — llm.c token shards (data/shard.cu): the 1024-byte header (magic 20240520, version 1, token
// count) and raw uint16 tokens, written atomically; and every way a shard can be malformed, each refused with
// a message that names the file and the numbers (what docs/bad_inputs.md lists for the trainer).
#include <algorithm>
#include "data/shard.h"
#include "test/test_util.h"

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

int main() {
    tmp_dir_create("test_shard");
    std::mt19937 rng(20240520);
    test_shard_round_trip(rng);
    test_bad_shards(rng);
    tmp_dir_finish();
    return test_finish("test_shard");
}
