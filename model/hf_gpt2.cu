// hf_gpt2.cu — GPT-2's Hugging Face names and layouts <-> the llm.c layout (see hf_gpt2.h).
#include "hf_gpt2.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../data/atomic_file.h"
#include "../data/paths.h"
#include "../layers/tensor.h"  // bf16, from_f32: the project's one rounding
#include "checkpoint.h"        // validate_config

using json = nlohmann::json;

static bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void hf_gpt2_files(const std::string& path, std::string& weights, std::string& config) {
    if (ends_with(path, ".safetensors")) {
        weights = path;
        config = dir_of(path) + "/config.json";
        return;
    }
    std::string dir = path;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    weights = dir + "/model.safetensors";
    config = dir + "/config.json";
}

// ---- the names: one row per llm.c tensor ------------------------------------------------------------------
// HF's name after "transformer." ("%d": the layer), and whether HF stores it transposed (Conv1D, [in, out]).
struct HfName { const char* name; bool transposed; };
static const HfName kHfNames[NUM_PARAM_TENSORS] = {
    {"wte.weight", false},          {"wpe.weight", false},          {"h.%d.ln_1.weight", false},
    {"h.%d.ln_1.bias", false},      {"h.%d.attn.c_attn.weight", true}, {"h.%d.attn.c_attn.bias", false},
    {"h.%d.attn.c_proj.weight", true}, {"h.%d.attn.c_proj.bias", false}, {"h.%d.ln_2.weight", false},
    {"h.%d.ln_2.bias", false},      {"h.%d.mlp.c_fc.weight", true},  {"h.%d.mlp.c_fc.bias", false},
    {"h.%d.mlp.c_proj.weight", true}, {"h.%d.mlp.c_proj.bias", false}, {"ln_f.weight", false},
    {"ln_f.bias", false}};

static std::string hf_name(int id, int layer) {
    char b[64];
    snprintf(b, sizeof b, kHfNames[id].name, layer);
    return b;
}

// The shape HF stores one layer's copy of tensor `id` in: the token table has the real vocabulary's rows,
// Conv1D weights are [in, out], vectors are 1-D.
static std::vector<int64_t> hf_shape(const GPTConfig& c, int id) {
    const ParamShape s = param_shape(c, id);
    if (id == P_WTE) return {c.vocab, c.channels};
    if (id == P_WPE) return {s.rows, s.cols};
    if (s.rows == 1 || s.cols == 1) return {s.rows * s.cols};
    return kHfNames[id].transposed ? std::vector<int64_t>{s.cols, s.rows} : std::vector<int64_t>{s.rows, s.cols};
}

static std::string shape_text(const std::vector<int64_t>& s) {
    std::string t = "[";
    for (size_t i = 0; i < s.size(); i++) t += (i ? ", " : "") + std::to_string(s[i]);
    return t + "]";
}

// ---- config.json ------------------------------------------------------------------------------------------
bool hf_gpt2_parse_config(const std::string& text, const std::string& path, GPTConfig& cfg, std::string& err) {
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return err = path + ": not valid JSON", false;
    if (!j.is_object()) return err = path + ": not a JSON object", false;
    auto size = [&](const char* key, int& out) {
        auto it = j.find(key);
        if (it == j.end()) return err = path + ": has no \"" + key + "\" (a GPT-2 config.json has n_layer, n_head, "
                                        "n_embd, n_positions and vocab_size)", false;
        if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > (1 << 30))
            return err = path + ": \"" + key + "\" = " + it->dump() + " is not a positive integer", false;
        out = (int)it->get<int64_t>();
        return true;
    };
    GPTConfig c;
    if (!size("n_layer", c.layers) || !size("n_head", c.heads) || !size("n_embd", c.channels) ||
        !size("n_positions", c.max_seq) || !size("vocab_size", c.vocab))
        return false;
    c.padded_vocab = padded_vocab_for(c.vocab);
    // Settings under which the file describes another computation than the trainer's: refused rather than
    // trained silently with other math. Absent keys take GPT-2's defaults, which are the trainer's.
    auto is = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
    if (is("model_type") && j["model_type"] != "gpt2")
        return err = path + ": model_type " + j["model_type"].dump() + " is not \"gpt2\"", false;
    if (is("activation_function") && j["activation_function"] != "gelu_new" && j["activation_function"] != "gelu_pytorch_tanh")
        return err = path + ": activation_function " + j["activation_function"].dump() +
                     ": the trainer's GELU is the tanh approximation (\"gelu_new\")", false;
    if (is("layer_norm_epsilon") && (!j["layer_norm_epsilon"].is_number() || std::fabs(j["layer_norm_epsilon"].get<double>() - 1e-5) > 1e-12))
        return err = path + ": layer_norm_epsilon " + j["layer_norm_epsilon"].dump() + ": the trainer's layer norm uses 1e-05", false;
    if (is("n_inner") && !(j["n_inner"].is_number_integer() && j["n_inner"].get<int64_t>() == 4LL * c.channels))
        return err = path + ": n_inner " + j["n_inner"].dump() + ": the trainer's MLP is 4 x n_embd = " +
                     std::to_string(4LL * c.channels) + " wide", false;
    if (is("tie_word_embeddings") && j["tie_word_embeddings"] != true)
        return err = path + ": tie_word_embeddings is not true: the trainer ties the LM head to the token embedding", false;
    if (is("scale_attn_weights") && j["scale_attn_weights"] != true)
        return err = path + ": scale_attn_weights is not true: the trainer scales attention by 1/sqrt(head size)", false;
    if (is("scale_attn_by_inverse_layer_idx") && j["scale_attn_by_inverse_layer_idx"] != false)
        return err = path + ": scale_attn_by_inverse_layer_idx is not false: the trainer does not scale by layer", false;
    const std::string bad = validate_config(c);
    if (!bad.empty()) return err = path + ": an invalid model configuration: " + bad, false;
    cfg = c;
    return true;
}

// ---- reading the weights ----------------------------------------------------------------------------------
bool hf_gpt2_convert(const uint8_t* file, const SafetensorsIndex& index, const std::string& path, const GPTConfig& cfg,
                     std::vector<float>& params, std::string& err) {
    const std::string where = "safetensors file " + path;
    // Every tensor by its name without the prefix; the buffers and the tied head put aside.
    std::map<std::string, const SafetensorsEntry*> by_name;
    const SafetensorsEntry* lm_head = nullptr;
    for (const SafetensorsEntry& e : index.tensors) {
        std::string n = e.name.rfind("transformer.", 0) == 0 ? e.name.substr(12) : e.name;
        if (ends_with(n, ".attn.bias") || ends_with(n, ".attn.masked_bias")) continue;
        if (n == "lm_head.weight") { lm_head = &e; continue; }
        if (!by_name.emplace(n, &e).second)
            return err = where + ": holds '" + n + "' twice (with and without the 'transformer.' prefix)", false;
    }
    int64_t sizes[NUM_PARAM_TENSORS];
    param_sizes(cfg, sizes);
    const std::string shape_from = "config.json (n_layer " + std::to_string(cfg.layers) + ", n_head " + std::to_string(cfg.heads) +
                                   ", n_embd " + std::to_string(cfg.channels) + ", n_positions " + std::to_string(cfg.max_seq) +
                                   ", vocab_size " + std::to_string(cfg.vocab) + ")";
    params.assign((size_t)param_count(cfg), 0.0f);
    std::vector<float> tmp;
    size_t used = 0;
    float* dst = params.data();
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        const ParamShape s = param_shape(cfg, id);
        for (int l = 0; l < s.layers; l++) {
            const std::string n = hf_name(id, l);
            auto it = by_name.find(n);
            if (it == by_name.end())
                return err = where + ": has no tensor 'transformer." + n + "' (nor '" + n + "'), which a GPT-2 of " + shape_from + " needs", false;
            const SafetensorsEntry& e = *it->second;
            used++;
            const std::vector<int64_t> want = hf_shape(cfg, id);
            if (e.shape != want)
                return err = where + ": tensor '" + e.name + "' has shape " + shape_text(e.shape) + ", but " + shape_from +
                             " makes " + shape_text(want), false;
            tmp.resize((size_t)e.numel());
            if (!safetensors_to_f32(file, index, e, tmp.data(), path, err)) return false;
            float* out = dst + (size_t)l * s.rows * s.cols;
            if (kHfNames[id].transposed) {  // HF [cols, rows] -> llm.c (rows, cols)
                for (int64_t r = 0; r < s.rows; r++)
                    for (int64_t c = 0; c < s.cols; c++) out[r * s.cols + c] = tmp[(size_t)(c * s.rows + r)];
            } else {
                memcpy(out, tmp.data(), tmp.size() * sizeof(float));  // the token table: rows >= V stay zero
            }
        }
        dst += sizes[id];
    }
    if (used != by_name.size())
        for (const auto& [n, e] : by_name) {
            bool known = false;
            for (int id = 0; id < NUM_PARAM_TENSORS && !known; id++)
                for (int l = 0; l < param_shape(cfg, id).layers && !known; l++) known = hf_name(id, l) == n;
            if (!known)
                return err = where + ": holds the tensor '" + e->name + "', which is not part of a GPT-2 of " + shape_from, false;
        }
    if (lm_head) {
        if (lm_head->shape != hf_shape(cfg, P_WTE))
            return err = where + ": lm_head.weight has shape " + shape_text(lm_head->shape) + ", expected the token table's " +
                         shape_text(hf_shape(cfg, P_WTE)), false;
        tmp.resize((size_t)lm_head->numel());
        if (!safetensors_to_f32(file, index, *lm_head, tmp.data(), path, err)) return false;
        if (memcmp(tmp.data(), params.data(), tmp.size() * sizeof(float)) != 0)
            return err = where + ": lm_head.weight differs from transformer.wte.weight: the trainer ties the LM head to the "
                                 "token embedding and cannot take an untied one", false;
    }
    return true;
}

static bool read_text(const std::string& path, const char* what, std::string& text, std::string& err) {
    err = not_a_file_problem(what, path);
    if (!err.empty()) return false;
    std::ifstream in(path, std::ios::binary);
    if (!in) return err = std::string("cannot open ") + what + " " + path + ": " + strerror(errno), false;
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
    return true;
}

bool hf_gpt2_load(const std::string& path, GPTConfig& cfg, std::vector<float>& params, std::string& err) {
    std::string weights, config, text;
    hf_gpt2_files(path, weights, config);
    if (!read_text(config, "Hugging Face config", text, err)) return false;
    if (!hf_gpt2_parse_config(text, config, cfg, err)) return false;
    std::vector<uint8_t> bytes;
    SafetensorsIndex index;
    if (!safetensors_read(weights, bytes, index, err)) return false;
    return hf_gpt2_convert(bytes.data(), index, weights, cfg, params, err);
}

// ---- writing --------------------------------------------------------------------------------------------
bool hf_gpt2_save(const std::string& path, const GPTConfig& cfg, const float* params, bool as_bf16, std::string& err) {
    std::string weights, config;
    hf_gpt2_files(path, weights, config);
    const std::string bad = validate_config(cfg);
    if (!bad.empty()) return err = "cannot write " + weights + ": invalid model configuration: " + bad, false;
    if (!make_dirs(dir_of(weights), err)) return err = "cannot write " + weights + ": " + err, false;
    int64_t sizes[NUM_PARAM_TENSORS];
    param_sizes(cfg, sizes);
    std::vector<SafetensorsTensor> out;
    const float* src = params;
    for (int id = 0; id < NUM_PARAM_TENSORS; id++) {
        const ParamShape s = param_shape(cfg, id);
        for (int l = 0; l < s.layers; l++) {
            const float* in = src + (size_t)l * s.rows * s.cols;
            SafetensorsTensor t;
            t.name = "transformer." + hf_name(id, l);
            t.dtype = as_bf16 ? "BF16" : "F32";
            t.shape = hf_shape(cfg, id);
            const int64_t n = id == P_WTE ? (int64_t)cfg.vocab * cfg.channels : s.rows * s.cols;  // no padding rows
            std::vector<float> v(in, in + n);
            if (kHfNames[id].transposed)  // llm.c (rows, cols) -> HF [cols, rows]
                for (int64_t r = 0; r < s.rows; r++)
                    for (int64_t c = 0; c < s.cols; c++) v[(size_t)(c * s.rows + r)] = in[r * s.cols + c];
            if (as_bf16) {
                t.bytes.resize((size_t)n * 2);
                for (int64_t i = 0; i < n; i++) {
                    const bf16 b = from_f32<bf16>(v[(size_t)i]);
                    memcpy(&t.bytes[(size_t)i * 2], &b, 2);
                }
            } else {
                t.bytes.resize((size_t)n * 4);
                memcpy(t.bytes.data(), v.data(), t.bytes.size());
            }
            out.push_back(std::move(t));
        }
        src += sizes[id];
    }
    // "format": "pt" is what transformers' loader asks of a safetensors file's metadata.
    if (!safetensors_write(weights, out, {{"format", "pt"}}, err)) return false;
    const json c = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"vocab_size", cfg.vocab},
                    {"n_positions", cfg.max_seq}, {"n_ctx", cfg.max_seq}, {"n_embd", cfg.channels},
                    {"n_layer", cfg.layers}, {"n_head", cfg.heads}, {"n_inner", nullptr},
                    {"activation_function", "gelu_new"}, {"layer_norm_epsilon", 1e-5}, {"tie_word_embeddings", true},
                    {"torch_dtype", as_bf16 ? "bfloat16" : "float32"}};
    const std::string text = c.dump(2) + "\n";
    AtomicFile f;
    if (!f.open(config, err)) return false;
    f.write(text.data(), text.size());
    return f.commit(err);
}
