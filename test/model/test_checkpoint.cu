// test_checkpoint.cu — llm.c model checkpoints (model/checkpoint.cu): the header (magic 20240326, version 3 for
// fp32 and 5 for bf16, then maxT V L NH C Vp), the parameter tensors in llm.c's order at llm.c's offsets,
// bf16 rounding to nearest even, an atomic write; and every way a checkpoint can be malformed, each refused
// with a message naming the file and the numbers; validate_config on its own.
#include "model/checkpoint.h"
#include "test/test_util.h"

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

int main() {
    tmp_dir_create("test_checkpoint");
    std::mt19937 rng(20240520);
    test_checkpoint_round_trip(rng);
    test_bad_checkpoints(rng);
    tmp_dir_finish();
    return test_finish("test_checkpoint");
}
