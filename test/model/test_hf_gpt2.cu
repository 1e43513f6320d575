// test_hf_gpt2.cu — Hugging Face's GPT-2 format without transformers (model/safetensors.cu, model/hf_gpt2.cu):
// a model written as model.safetensors + config.json reads back bit for bit in fp32 (the padding rows of the
// token table left out and read back as zero), rounded to bf16 like the llm.c writer rounds; the Conv1D
// weights really are stored [in, out]; F16 values widen exactly; the "transformer." prefix is optional and a
// tied lm_head is accepted; and the safetensors header checks refuse, naming the file. The transformers
// comparison itself is test/model/test_hf_gpt2.sh.
#include <cmath>
#include <cstring>
#include <fstream>
#include "model/hf_gpt2.h"
#include "test/test_util.h"

static GPTConfig tiny() {
    GPTConfig c;
    c.max_seq = 8, c.vocab = 101, c.padded_vocab = 128, c.layers = 2, c.heads = 2, c.channels = 8;
    return c;
}

static std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

static void test_round_trip(std::mt19937& rng) {
    const GPTConfig cfg = tiny();
    std::vector<float> params = random_vec((size_t)param_count(cfg), rng);
    // The padding rows of the token table are not written: read back they are zero.
    for (int64_t i = (int64_t)cfg.vocab * cfg.channels; i < (int64_t)cfg.padded_vocab * cfg.channels; i++) params[(size_t)i] = 0;
    const std::string dir = tmp_dir() + "/hf/";
    std::string err;
    CHECK(hf_gpt2_save(dir, cfg, params.data(), false, err), "save: %s", err.c_str());
    GPTConfig back;
    std::vector<float> read;
    CHECK(hf_gpt2_load(dir, back, read, err), "load: %s", err.c_str());
    CHECK(back.vocab == 101 && back.padded_vocab == 128 && back.layers == 2 && back.channels == 8 && back.max_seq == 8,
          "config read back: V %d Vp %d L %d C %d maxT %d", back.vocab, back.padded_vocab, back.layers, back.channels, back.max_seq);
    CHECK(read.size() == params.size() && memcmp(read.data(), params.data(), params.size() * 4) == 0, "fp32 round trip not bitwise");
    // c_attn is stored [in, out] = [C, 3C]: element [i][o] of the file is llm.c's qkvw[o][i].
    std::vector<uint8_t> bytes;
    SafetensorsIndex index;
    CHECK(safetensors_read(dir + "model.safetensors", bytes, index, err), "%s", err.c_str());
    const SafetensorsEntry* e = index.find("transformer.h.0.attn.c_attn.weight");
    CHECK(e && e->shape == std::vector<int64_t>({8, 24}), "c_attn weight missing or not [8, 24]");
    CHECK(index.find("transformer.wte.weight") && index.find("transformer.wte.weight")->shape == std::vector<int64_t>({101, 8}),
          "wte not [101, 8] (the real vocabulary's rows only)");
    if (e) {
        int64_t sizes[NUM_PARAM_TENSORS];
        param_sizes(cfg, sizes);
        int64_t qkv = 0;
        for (int i = 0; i < P_QKVW; i++) qkv += sizes[i];
        float v;
        memcpy(&v, bytes.data() + index.data_start + e->begin + (size_t)(3 * 24 + 17) * 4, 4);  // file [3][17]
        CHECK(v == params[(size_t)(qkv + 17 * 8 + 3)], "c_attn [in, out] layout: %g vs %g", v, params[(size_t)(qkv + 17 * 8 + 3)]);
    }
    // bf16: each value rounded to nearest even, as the llm.c writer does.
    CHECK(hf_gpt2_save(tmp_dir() + "/bf16.safetensors", cfg, params.data(), true, err), "bf16 save: %s", err.c_str());
    CHECK(hf_gpt2_load(tmp_dir() + "/bf16.safetensors", back, read, err), "bf16 load: %s", err.c_str());
    int off = 0;
    for (size_t i = 0; i < params.size(); i++) off += read[i] != to_f32(from_f32<bf16>(params[i]));
    CHECK(off == 0, "bf16: %d values not the nearest-even rounding", off);
}

// A hand-made file: no prefix, F16 weights, a tied lm_head and the attention buffer.
static void test_other_spellings() {
    const GPTConfig cfg = tiny();
    std::vector<SafetensorsTensor> t;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, uint16_t half) {
        int64_t n = 1;
        for (int64_t s : shape) n *= s;
        SafetensorsTensor x{name, "F16", shape, std::vector<uint8_t>((size_t)n * 2)};
        for (int64_t i = 0; i < n; i++) memcpy(&x.bytes[(size_t)i * 2], &half, 2);
        t.push_back(x);
    };
    const int C = 8;
    add("wte.weight", {101, C}, 0x3C00);  // 1.0
    add("lm_head.weight", {101, C}, 0x3C00);
    add("wpe.weight", {8, C}, 0x0001);    // the smallest subnormal, 2^-24
    for (int l = 0; l < 2; l++) {
        const std::string h = "h." + std::to_string(l) + ".";
        add(h + "ln_1.weight", {C}, 0xC000), add(h + "ln_1.bias", {C}, 0x7BFF);  // -2, 65504
        add(h + "attn.c_attn.weight", {C, 3 * C}, 0x3555), add(h + "attn.c_attn.bias", {3 * C}, 0);
        add(h + "attn.c_proj.weight", {C, C}, 0x3800), add(h + "attn.c_proj.bias", {C}, 0);
        add(h + "attn.bias", {1, 1, 8, 8}, 0x3C00);
        add(h + "ln_2.weight", {C}, 0x3C00), add(h + "ln_2.bias", {C}, 0);
        add(h + "mlp.c_fc.weight", {C, 4 * C}, 0x3800), add(h + "mlp.c_fc.bias", {4 * C}, 0);
        add(h + "mlp.c_proj.weight", {4 * C, C}, 0x3800), add(h + "mlp.c_proj.bias", {C}, 0);
    }
    add("ln_f.weight", {C}, 0x3C00), add("ln_f.bias", {C}, 0);
    std::string err;
    const std::string dir = tmp_dir() + "/f16";
    std::filesystem::create_directories(dir);
    CHECK(safetensors_write(dir + "/model.safetensors", t, {{"format", "pt"}}, err), "%s", err.c_str());
    std::ofstream(dir + "/config.json") << R"({"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 8, "n_positions": 8, "vocab_size": 101})";
    GPTConfig back;
    std::vector<float> p;
    CHECK(hf_gpt2_load(dir, back, p, err), "F16 without prefix: %s", err.c_str());
    if (!err.empty() || p.empty()) return;
    int64_t sizes[NUM_PARAM_TENSORS];
    param_sizes(cfg, sizes);
    const int64_t wpe = sizes[P_WTE], ln1 = wpe + sizes[P_WPE], ln1b = ln1 + sizes[P_LN1W], qkv = ln1b + sizes[P_LN1B];
    CHECK(p[0] == 1.0f && p[(size_t)(101 * C)] == 0.0f, "wte: %g, padding %g", p[0], p[(size_t)(101 * C)]);
    CHECK(p[(size_t)wpe] == std::ldexp(1.0f, -24) && p[(size_t)ln1] == -2.0f && p[(size_t)ln1b] == 65504.0f,
          "F16 widening: %g %g %g", p[(size_t)wpe], p[(size_t)ln1], p[(size_t)ln1b]);
    CHECK(p[(size_t)qkv] == 0.333251953125f, "F16 0x3555 -> %.12g", p[(size_t)qkv]);
}

// The safetensors header's checks, on a valid file made worse (each message names the file).
static void test_bad_headers() {
    const std::string good = slurp(tmp_dir() + "/hf/model.safetensors");
    uint64_t n;
    memcpy(&n, good.data(), 8);
    const std::string header = good.substr(8, n), buffer = good.substr(8 + n);
    auto file = [&](const std::string& h, const std::string& b) {
        std::string s(8, '\0');
        uint64_t len = h.size();
        memcpy(&s[0], &len, 8);
        return s + h + b;
    };
    auto swap = [&](std::string h, const std::string& from, const std::string& to) {
        size_t at = h.find(from);
        if (at != std::string::npos) h.replace(at, from.size(), to);
        return h;
    };
    struct Bad { std::string bytes, expect; };
    const Bad cases[] = {
        {good.substr(0, 5), "shorter than its 8-byte header length"},
        {good.substr(0, 8 + n - 1), "runs past the end of the"},
        {file("[1]", ""), "the header is not a JSON object"},
        {file("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", "xxxx"), "has 4 bytes, but its shape and dtype F32 make 8"},
        {file("{\"a\": {\"dtype\": \"Q8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", "x"), "has the unknown dtype 'Q8'"},
        {file("{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", "xxxx"), "not a non-negative integer"},
        {file("{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]}, \"b\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [2, 4]}}", "xxxx"),
         "tensors 'a' and 'b' overlap"},
        {file("{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]}}", "xxxxxx"), "the last 2 bytes of the buffer belong to no tensor"},
        {file("{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [4, 8]}}", "xxxx"), "outside the 4-byte buffer"},
        {file("{\"a\": {\"dtype\": \"U8\", \"shape\": [1099511627776, 1099511627776], \"data_offsets\": [0, 0]}}", ""), "a shape too large"},
        {file(swap(header, "\"F32\"", "\"I32\""), buffer), ""},  // parses: only the GPT-2 mapping refuses an I32 weight
    };
    for (const Bad& b : cases) {
        SafetensorsIndex index;
        std::string err;
        const bool ok = safetensors_parse((const uint8_t*)b.bytes.data(), b.bytes.size(), "bad.safetensors", index, err);
        if (b.expect.empty()) {
            CHECK(ok, "expected success, got \"%s\"", err.c_str());
            continue;
        }
        CHECK(!ok && err.find(b.expect) != std::string::npos && err.find("bad.safetensors") != std::string::npos,
              "expected an error with \"%s\", got %s \"%s\"", b.expect.c_str(), ok ? "success" : "", err.c_str());
    }
}

int main() {
    tmp_dir_create("test_hf_gpt2");
    std::mt19937 rng(24);
    test_round_trip(rng);
    test_other_spellings();
    test_bad_headers();
    tmp_dir_finish();
    return test_finish("test_hf_gpt2");
}
