// fuzz_safetensors.cu — libFuzzer target: the safetensors reader (model/safetensors.cu) and the GPT-2 mapping
// with its config.json (model/hf_gpt2.cu) on arbitrary bytes. The input is config.json's text up to the first
// NUL byte, then a safetensors file (no NUL: the whole input is the safetensors file, with a fixed tiny
// config). Each parser must accept (and then every tensor lies inside the file, and the model has exactly
// param_count floats) or refuse with a message; never crash, read out of bounds or allocate past the input.
#include "fuzz_common.h"
#include "model/hf_gpt2.h"

static const char* kTinyConfig = R"({"n_layer": 1, "n_head": 1, "n_embd": 2, "n_positions": 2, "vocab_size": 3})";

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const uint8_t* nul = (const uint8_t*)memchr(data, 0, size);
    const std::string config = nul ? std::string((const char*)data, (size_t)(nul - data)) : kTinyConfig;
    const uint8_t* file = nul ? nul + 1 : data;
    const size_t file_size = nul ? size - (size_t)(nul + 1 - data) : size;
    // The file in a buffer of its own size, so that AddressSanitizer sees any read past its end.
    std::vector<uint8_t> bytes(file, file + file_size);
    SafetensorsIndex index;
    std::string err;
    const bool ok = safetensors_parse(bytes.data(), bytes.size(), "fuzz", index, err);
    if (!ok && err.empty()) abort();
    if (ok) {
        for (const auto& t : index.tensors)
            if (t.end > bytes.size() - index.data_start || t.begin > t.end) abort();
        // The file path agrees with the memory path.
        SafetensorsIndex again;
        std::vector<uint8_t> read;
        std::string err2;
        if (!safetensors_read(fuzz_input_file(file, file_size), read, again, err2) || again.tensors.size() != index.tensors.size())
            abort();
    }
    GPTConfig cfg;
    std::string cerr;
    const bool cfg_ok = hf_gpt2_parse_config(config, "config.json", cfg, cerr);
    if (!cfg_ok && cerr.empty()) abort();
    if (ok && cfg_ok && param_count(cfg) < (1 << 22)) {
        std::vector<float> params;
        std::string merr;
        if (hf_gpt2_convert(bytes.data(), index, "fuzz", cfg, params, merr)) {
            if ((int64_t)params.size() != param_count(cfg)) abort();
        } else if (merr.empty()) {
            abort();
        }
    }
    return 0;
}
